# Checkpoints on the CUDA path (a GPU, or the host emulator): a run stopped mid-epoch at step 37 and resumed
# with --resume auto ends bitwise identical to an uninterrupted run on the same device at np 2 and 4
# (parameters and AdamW moments); the result tracks the CPU backend; eval of a CUDA-trained checkpoint on
# the CPU agrees with eval on CUDA; a checkpoint written by a CUDA run resumes on the CPU.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 400 --dim 8 --classes 3 --shards 2 --seed 3
synth --out v --samples 400 --dim 8 --classes 3 --shards 2 --seed 3 --first-id 9000
base=(--train t --val v --lr 0.01 --hidden 24 --no-progress --grad-clip 1.0)
for np in 2 4; do
  bs=$((20 / np))
  resume_bitwise $np --device "$DEVICE" "${base[@]}" --batch-size $bs --epochs 3
done
grep -q "\"device\": *\"cuda\"\|cuda" full2/run.json || fail "run.json does not record the CUDA backend"
mpirun_np 2 "$MPIDDP" train --device cpu "${base[@]}" --batch-size 10 --epochs 3 --out cpu2 >/dev/null
$PY "$SRC/tests/py/compare_ckpt.py" cpu2/checkpoints/last.h5 full2/checkpoints/last.h5 1e-4 || fail "$DEVICE run differs from the CPU run"
"$MPIDDP" eval --device "$DEVICE" --ckpt full2/checkpoints/last.h5 --data v > e_dev.txt
"$MPIDDP" eval --device cpu --ckpt full2/checkpoints/last.h5 --data v > e_cpu.txt
$PY - <<'PY' || fail "eval on $DEVICE and cpu disagree"
a = dict(x.split("=") for x in open("e_dev.txt").read().split())
b = dict(x.split("=") for x in open("e_cpu.txt").read().split())
assert a["val/acc"] == b["val/acc"] and a["val/macro_f1"] == b["val/macro_f1"], (a, b)
assert abs(float(a["val/loss"]) - float(b["val/loss"])) <= 1e-5 * float(b["val/loss"]), (a, b)
PY
# a CUDA checkpoint resumes on the CPU (same world size): the run completes and keeps learning
MPIDDP_TEST_STOP_AT_STEP=37 mpirun_np 2 "$MPIDDP" train --device "$DEVICE" "${base[@]}" --batch-size 10 --epochs 3 --out mixed >/dev/null
mpirun_np 2 "$MPIDDP" train --device cpu "${base[@]}" --batch-size 10 --epochs 3 --out mixed --resume auto >/dev/null
$PY "$SRC/tests/py/compare_ckpt.py" cpu2/checkpoints/last.h5 mixed/checkpoints/last.h5 1e-4 || fail "cuda -> cpu resume diverged"
pass "bitwise resume on $DEVICE at np 2/4; $DEVICE tracks cpu; eval and resume across devices"
