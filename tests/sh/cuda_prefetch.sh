# The batches' uploads on the CUDA path (a GPU, or the host emulator with jitter): whole training runs with the
# next micro-batch prefetched on the copy stream (the default) and with uploads on the compute stream
# (MPIDDP_CUDA_PREFETCH=0) end with the same bits: every metrics.csv value but the throughput, and the
# checkpoint's parameters and AdamW moments; for the MLP at np 2 with --accumulate 2 and the Transformer encoder
# with dropout at np 2.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 160 --dim 6 --classes 3 --shards 2 --seed 4
synth --out v --samples 60 --dim 6 --classes 3 --shards 1 --seed 4 --first-id 9000
same_runs() { # NAME TRAIN_ARGS...: the run with prefetch (NAME_on) and without (NAME_off) agree to the bit
  local name=$1; shift
  mpirun_np 2 "$MPIDDP" train --device "$DEVICE" --train t --val v --no-progress --out "${name}_on" "$@" >/dev/null
  MPIDDP_CUDA_PREFETCH=0 mpirun_np 2 "$MPIDDP" train --device "$DEVICE" --train t --val v --no-progress --out "${name}_off" "$@" >/dev/null
  $PY - "${name}_on/metrics.csv" "${name}_off/metrics.csv" <<'PY' || fail "$name: metrics differ with and without prefetch"
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
assert len(a) == len(b) and len(a) > 2, (len(a), len(b))
for x, y in zip(a, b):
    for k in x:
        if k != "train/samples_per_s":
            assert x[k] == y[k], (k, x[k], y[k])
PY
  $PY "$SRC/tests/py/compare_ckpt.py" "${name}_on/checkpoints/last.h5" "${name}_off/checkpoints/last.h5" 0 ||
    fail "$name: checkpoints differ with and without prefetch"
}
same_runs mlp --hidden 16 --batch-size 8 --accumulate 2 --epochs 2 --log-every 1 --lr 0.01
same_runs tx --model transformer --heads 2 --hidden 8 --dropout 0.1 --batch-size 8 --epochs 2 --log-every 1 --lr 0.01
pass "$DEVICE: training with and without the prefetch of the next batch agree to the bit (mlp, transformer)"
