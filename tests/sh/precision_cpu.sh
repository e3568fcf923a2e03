# --precision bf16 on the CPU (issue #24; backend_cpu_bf16.c) in whole runs. On the row-order task the transformer
# trained at bf16 reaches fp32's val/acc within 0.05 (a few samples of the 250, the spread of the GPU's bf16 in
# precision.sh), at np 2 and at np 1 (same global batch), and computes differently from fp32 (its GEMMs do
# round); a resume mid-run is bitwise exact; eval at bf16 of the bf16 checkpoint gives the run's last
# validation. Where bf16 is not native (no bf16 units, no oneDNN, or MPIDDP_CPU_ONEDNN=0, which the np 1 run
# forces) rank 0 prints exactly one notice line. tf32 stays refused on the CPU: one line, exit 2 on every
# rank, for train and eval.
. "$(dirname "$0")/lib.sh"
synth --out train --task order --samples 1000 --dim 8 --classes 2 --min-rows 3 --max-rows 8 --seed 3
synth --out val --task order --samples 250 --dim 8 --classes 2 --min-rows 3 --max-rows 8 --seed 3 --first-id 1000000
tx=(--train train --val val --model transformer --hidden 16 --heads 2 --epochs 3 --lr 3e-3 --seed 1 --device cpu --no-progress)
one_line() { # $1: expected text; ERR has it exactly once, without MPI_Abort
  [ "$(grep -cF -- "$1" <<<"$ERR")" = 1 ] || fail "expected one line '$1': $ERR"
  ! grep -q "MPI_ABORT\|rank [0-9]*: error" <<<"$ERR" || fail "not a clean usage error: $ERR"
}

# tf32 is a tensor-core format: refused on the CPU, before anything is written
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${tx[@]}" --precision tf32 --out bad
one_line "mpiddp train: --precision tf32 needs --device cuda (the CPU backend computes in fp32 or bf16)"
[ ! -e bad ] || fail "a refused --precision tf32 left a run directory"

# fp32 and bf16 at np 2 (batch 50 per rank), bf16 at np 1 (batch 100: the same global batch)
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${tx[@]}" --batch-size 50 --out r2_fp32
[ -z "$(grep -F notice <<<"$ERR")" ] || fail "a notice at fp32: $ERR"
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${tx[@]}" --batch-size 50 --precision bf16 --out r2_bf16
notices=$(grep -c "notice: --precision bf16 on the CPU" <<<"$ERR" || true)
echo "bf16 at np 2: ${notices} notice line(s) ${ERR:+: $ERR}"
[ "$notices" -le 1 ] || fail "more than one notice line: $ERR"
MPIDDP_CPU_ONEDNN=0 expect_rc 0 mpirun_np 1 -x MPIDDP_CPU_ONEDNN "$MPIDDP" train "${tx[@]}" --batch-size 100 --precision bf16 --out r1_bf16
one_line "the GEMM operands are rounded to bf16 and multiplied with OpenBLAS sgemm in fp32"
[ "$(grep -c "notice:" <<<"$ERR")" = 1 ] || fail "not exactly one notice line with MPIDDP_CPU_ONEDNN=0: $ERR"
acc32=$(csv_last r2_fp32/metrics.csv val/acc)
awk -v a="$acc32" 'BEGIN{exit !(a >= 0.8)}' || fail "fp32 val/acc $acc32 < 0.8: the task is not learnt, nothing to compare"
for r in r2_bf16 r1_bf16; do
  acc=$(csv_last $r/metrics.csv val/acc) loss=$(csv_last $r/metrics.csv val/loss)
  echo "$r: val/acc $acc val/loss $loss (fp32 at np 2: val/acc $acc32 val/loss $(csv_last r2_fp32/metrics.csv val/loss))"
  awk -v a="$acc" -v b="$acc32" 'BEGIN{d = a - b; exit !(d <= 0.05 && d >= -0.05)}' || fail "$r: val/acc $acc, fp32 $acc32"
done
! $PY "$SRC/tests/py/compare_ckpt.py" r2_fp32/checkpoints/last.h5 r2_bf16/checkpoints/last.h5 0 >/dev/null 2>&1 ||
  fail "bf16 trained bit-identically to fp32: the GEMMs do not round"
$PY - <<'PY' || fail "run.json or the checkpoint does not record bf16"
import json, h5py
assert json.load(open("r2_bf16/run.json"))["config"]["precision"] == "bf16"
a = h5py.File("r2_bf16/checkpoints/last.h5", "r")["/"].attrs["precision"]
assert (a.decode() if isinstance(a, bytes) else a) == "bf16", a
PY

# a run stopped mid-epoch and resumed at bf16 ends bitwise identical to the uninterrupted one (the resumed first
# step rounds the loaded parameters per GEMM, later ones read the copy: the same bits)
expect_rc 0 env MPIDDP_TEST_STOP_AT_STEP=15 MPIDDP_TEST_STOP_RANK=1 mpirun -np 2 --oversubscribe "$MPIDDP" train "${tx[@]}" \
  --batch-size 50 --precision bf16 --out p2_bf16
grep -q "stopped on request at step 15" <<<"$OUT" || fail "stop message: $OUT"
mpirun_np 2 "$MPIDDP" train "${tx[@]}" --batch-size 50 --precision bf16 --out p2_bf16 --resume auto >/dev/null
$PY "$SRC/tests/py/compare_ckpt.py" r2_bf16/checkpoints/last.h5 p2_bf16/checkpoints/last.h5 0 >/dev/null ||
  fail "a resume at bf16 is not bitwise exact"

# eval at bf16 (no adamw: every operand rounded per call) gives the run's last validation
expect_rc 0 mpirun_np 2 "$MPIDDP" eval --ckpt r2_bf16/checkpoints/last.h5 --data val --device cpu --batch-size 50 --precision bf16
$PY - "$OUT" r2_bf16/metrics.csv <<'PY' || fail "eval at bf16"
import csv, sys
b = dict(kv.split("=") for kv in sys.argv[1].split())
last = [r for r in csv.DictReader(open(sys.argv[2])) if r["val/acc"]][-1]
assert abs(float(b["val/acc"]) - float(last["val/acc"])) <= 1.5 / 250, (b, last)
assert abs(float(b["val/loss"]) - float(last["val/loss"])) <= 1e-3 * float(last["val/loss"]), (b, last)
print("eval at bf16:", b)
PY
expect_rc 2 mpirun_np 2 "$MPIDDP" eval --ckpt r2_bf16/checkpoints/last.h5 --data val --device cpu --precision tf32
one_line "mpiddp eval: --precision tf32 needs --device cuda (the CPU backend computes in fp32 or bf16)"
pass "--precision bf16 on the CPU: val/acc within 0.05 of fp32 at np 1 and 2, rounds, one notice at most; bitwise resume; eval; tf32 refused"
