# The DDP identity: W ranks with per-rank batch B track a 1-rank run with batch W*B (and gradient
# accumulation tracks the larger batch), compared on every parameter after several optimizer steps.
. "$(dirname "$0")/lib.sh"
synth --out train --samples 96 --dim 8 --classes 3 --min-rows 2 --max-rows 6 --shards 3 --seed 5
synth --out val --samples 30 --dim 8 --classes 3 --min-rows 2 --max-rows 6 --shards 2 --seed 5 --first-id 1000
common=(--train train --val val --epochs 2 --hidden 16 --lr 0.01 --log-every 1 --no-progress --grad-clip 1.0 "${MODEL_ARGS[@]}")
mpirun_np 1 "$MPIDDP" train --device "$DEVICE" "${common[@]}" --batch-size 8 --out r1 >/dev/null
mpirun_np 2 "$MPIDDP" train --device "$DEVICE" "${common[@]}" --batch-size 4 --out r2 >/dev/null
mpirun_np 4 "$MPIDDP" train --device "$DEVICE" "${common[@]}" --batch-size 2 --out r4 >/dev/null
mpirun_np 1 "$MPIDDP" train --device "$DEVICE" "${common[@]}" --batch-size 4 --accumulate 2 --out r1acc >/dev/null
mpirun_np 2 "$MPIDDP" train --device "$DEVICE" "${common[@]}" --batch-size 2 --accumulate 2 --out r2acc --bucket-mb 0.0005 >/dev/null
for r in r2 r4 r1acc r2acc; do
  $PY "$SRC/tests/py/compare_ckpt.py" r1/checkpoints/last.h5 $r/checkpoints/last.h5 1e-5 || fail "$r differs from r1"
done
# the optimizer really moved and the runs logged the same losses
[ "$(csv_last r1/metrics.csv train/loss)" != "" ] || fail "no train/loss in metrics.csv"
$PY - <<'PY' || fail "train/loss columns differ across world sizes"
import csv
def col(p):
    return [float(r["train/loss"]) for r in csv.DictReader(open(p)) if r["train/loss"]]
a, b, c = col("r1/metrics.csv"), col("r2/metrics.csv"), col("r4/metrics.csv")
assert len(a) == len(b) == len(c) == 24, (len(a), len(b), len(c))
assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4 and max(abs(x - y) for x, y in zip(a, c)) < 1e-4
assert a[-1] < a[0], "loss did not decrease"
PY
# the load-balance metric: exactly 1 on one rank; at np 2 and 4 between 1 and W, and above 1 somewhere
# (samples have 2-6 rows, so equal sample counts rarely mean equal rows)
$PY - <<'PY' || fail "train/rows_per_rank_max_over_mean"
import csv
def col(p):
    return [float(r["train/rows_per_rank_max_over_mean"]) for r in csv.DictReader(open(p)) if r["train/rows_per_rank_max_over_mean"]]
one, two, four = col("r1/metrics.csv"), col("r2/metrics.csv"), col("r4/metrics.csv")
assert len(one) == len(two) == len(four) == 24, (len(one), len(two), len(four))
assert all(v == 1.0 for v in one), one
assert all(1.0 <= v <= 2.0 for v in two) and max(two) > 1.0, two
assert all(1.0 <= v <= 4.0 for v in four) and max(four) > max(two) * 0.9, four
print(f"rows max/mean per step: np 2 mean {sum(two) / len(two):.3f}, np 4 mean {sum(four) / len(four):.3f}")
PY
pass "np 1/2/4 and accumulation agree on all parameters after 24 steps"
if [ "$DEVICE" != cpu ]; then # the CUDA path (GPU or host emulator) tracks the CPU backend
  mpirun_np 1 "$MPIDDP" train --device cpu "${common[@]}" --batch-size 8 --out r1cpu >/dev/null
  $PY "$SRC/tests/py/compare_ckpt.py" r1cpu/checkpoints/last.h5 r1/checkpoints/last.h5 1e-4 || fail "--device $DEVICE differs from cpu"
  pass "--device $DEVICE tracks --device cpu after 24 steps"
fi
