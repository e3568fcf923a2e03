# --precision fp32|tf32|bf16 (issue #23) in whole runs, on $DEVICE (cuda on the host emulator: precision_emu).
# On the row-order task the transformer trained at tf32 and bf16 reaches fp32's val/acc within 0.05, at np 2
# and at np 1 (same global batch); run.json and every checkpoint record the precision; eval takes any
# precision; a resume at another precision continues with a notice; --precision fp32 is bit-identical to no
# option (the MLP, whole checkpoints). --device cpu with tf32 (command line or INI) is one line and
# exit 2 on every rank at np 2, for train and eval; an unknown precision is a usage error.
. "$(dirname "$0")/lib.sh"
[ "$DEVICE" = cuda ] || { echo "SKIP: precision.sh needs MPIDDP_TEST_DEVICE=cuda (a GPU or the emulator)"; exit 0; }
synth --out train --task order --samples 1000 --dim 8 --classes 2 --min-rows 3 --max-rows 8 --seed 3
synth --out val --task order --samples 250 --dim 8 --classes 2 --min-rows 3 --max-rows 8 --seed 3 --first-id 1000000
tx=(--train train --val val --model transformer --hidden 16 --heads 2 --epochs 3 --lr 3e-3 --seed 1 --device cuda --no-progress)
one_line() { # $1: expected text; ERR has it exactly once, without MPI_Abort
  [ "$(grep -cF -- "$1" <<<"$ERR")" = 1 ] || fail "expected one line '$1': $ERR"
  ! grep -q "MPI_ABORT\|rank [0-9]*: error" <<<"$ERR" || fail "not a clean usage error: $ERR"
}

# the CPU computes in fp32 or bf16 (its bf16: precision_cpu.sh): tf32 is one line from rank 0, exit 2 on every
# rank, no run directory
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${tx[@]}" --device cpu --precision tf32 --out bad
one_line "mpiddp train: --precision tf32 needs --device cuda (the CPU backend computes in fp32 or bf16)"
[ ! -e bad ] || fail "a refused --precision tf32 left a run directory"
printf '[train]\nprecision = tf32\n' > tf32.ini
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${tx[@]}" --device cpu --config tf32.ini --out bad
one_line "mpiddp train: --precision tf32 needs --device cuda (the CPU backend computes in fp32 or bf16)"
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${tx[@]}" --precision fp16 --out bad
one_line "mpiddp train: --precision 'fp16': expected one of fp32|tf32|bf16"

# the transformer at each precision, np 2 (batch 50 per rank) and np 1 (batch 100: the same global batch)
for p in fp32 tf32 bf16; do
  mpirun_np 2 "$MPIDDP" train "${tx[@]}" --batch-size 50 --precision $p --out r2_$p >/dev/null
  [ $p = fp32 ] || mpirun_np 1 "$MPIDDP" train "${tx[@]}" --batch-size 100 --precision $p --out r1_$p >/dev/null
done
acc32=$(csv_last r2_fp32/metrics.csv val/acc)
awk -v a="$acc32" 'BEGIN{exit !(a >= 0.8)}' || fail "fp32 val/acc $acc32 < 0.8: the task is not learnt, nothing to compare"
for r in r2_tf32 r2_bf16 r1_tf32 r1_bf16; do
  acc=$(csv_last $r/metrics.csv val/acc) loss=$(csv_last $r/metrics.csv val/loss)
  echo "$r: val/acc $acc val/loss $loss (fp32 at np 2: val/acc $acc32 val/loss $(csv_last r2_fp32/metrics.csv val/loss))"
  awk -v a="$acc" -v b="$acc32" 'BEGIN{d = a - b; exit !(d <= 0.05 && d >= -0.05)}' || fail "$r: val/acc $acc, fp32 $acc32"
done
# tf32 and bf16 compute differently from fp32 (the emulator rounds as the tensor cores do)
! $PY "$SRC/tests/py/compare_ckpt.py" r2_fp32/checkpoints/last.h5 r2_bf16/checkpoints/last.h5 0 >/dev/null 2>&1 ||
  fail "bf16 trained bit-identically to fp32"

# run.json and the checkpoints record it; the checkpoint holds fp32 parameters
$PY - <<'PY' || fail "run.json or checkpoints do not record the precision"
import glob, json, h5py
for p in ("fp32", "tf32", "bf16"):
    for r in (["r2_" + p] + (["r1_" + p] if p != "fp32" else [])):
        c = json.load(open(r + "/run.json"))["config"]
        assert c["precision"] == p, (r, c)
        for f in glob.glob(r + "/checkpoints/*.h5"):
            h = h5py.File(f, "r")
            a = h.attrs["precision"]
            assert (a.decode() if isinstance(a, bytes) else a) == p, (f, a)
            cfg = h.attrs["config"]
            assert json.loads(cfg.decode() if isinstance(cfg, bytes) else cfg)["precision"] == p, (f, cfg)
            assert all(h["params"][k].dtype == "float32" for k in h["params"]), f
print("run.json and checkpoints record the precision")
PY

# run.json says which attention ran and why: cuDNN's at bf16 (on the emulator always; on a GPU where cuDNN accepts
# the graph, else the own kernels with cuDNN's reason), the own kernels at fp32 and tf32; every rank's in ranks[]
# (the emulator's cuDNN is there wherever the plugin was built with cuDNN's headers: mpiddp env says so)
ENV_OUT=$(mpirun_np 1 "$MPIDDP" env --device cuda)
EMULATED=$([ -n "${MPIDDP_CUDA_PLUGIN:-}" ] && ! grep -q "built without cuDNN's headers" <<<"$ENV_OUT" && echo 1 || echo 0)
MPIDDP_ATTENTION=own mpirun_np 2 "$MPIDDP" train "${tx[@]}" --batch-size 50 --epochs 1 --precision bf16 \
  --out own_bf16b >/dev/null
$PY - "$EMULATED" <<'PY' || fail "run.json's attention"
import json, sys
emulated = sys.argv[1] == "1"
def att(r):
    j = json.load(open(r + "/run.json"))
    a = j["attention"]
    assert a["why"], (r, a)
    assert [x["attention"] for x in j["ranks"]] == [a["path"]] * len(j["ranks"]), (r, j["ranks"])
    return a
for r in ("r2_fp32", "r2_tf32"):
    a = att(r)
    assert a["path"] == "own" and a["why"].startswith("precision "), (r, a)
a = att("r2_bf16")
assert a["path"] == ("cudnn" if emulated else a["path"]) and a["path"] in ("cudnn", "own"), a
assert a["path"] == "own" or "fused SDPA" in a["why"], a
print("bf16 attention:", a["path"], "-", a["why"])
a = att("own_bf16b")
assert a == {"path": "own", "why": "MPIDDP_ATTENTION=own"}, a
PY
# MPIDDP_ATTENTION=cudnn where it cannot apply (tf32) fails at model creation with one line naming the reason
export MPIDDP_ATTENTION=cudnn
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${tx[@]}" --batch-size 50 --epochs 1 --precision tf32 --out bad_cudnn
unset MPIDDP_ATTENTION
grep -qF "MPIDDP_ATTENTION=cudnn: precision tf32: cuDNN's fused attention runs at bf16 only" <<<"$ERR" ||
  fail "MPIDDP_ATTENTION=cudnn at tf32: $ERR"
# mpiddp env names the cuDNN the plugin would load
grep -q 'cudnn="[0-9]*\.[0-9]*\.[0-9]* (' <<<"$ENV_OUT" || [ "$EMULATED" = 0 ] || fail "mpiddp env: no cudnn version: $ENV_OUT"
grep -q 'attention=auto' <<<"$ENV_OUT" || fail "mpiddp env: no attention setting: $ENV_OUT"
# ... and, on a GPU, what a bf16 encoder would run: cuDNN's probe of both directions (on the emulator, which takes
# the backward graph, both on cuDNN; with backward plans refused, the forward alone)
grep -q 'attention_bf16="\(cudnn\|own\): ' <<<"$ENV_OUT" || fail "mpiddp env: no attention probe: $ENV_OUT"
if [ "$EMULATED" = 1 ]; then
  grep -q 'attention_bf16="cudnn: .*forward and backward' <<<"$ENV_OUT" || fail "mpiddp env: probe: $ENV_OUT"
  REFUSED=$(MPIDDP_EMU_CUDNN_REFUSE=bwd mpirun_np 1 "$MPIDDP" env --device cuda)
  grep -q "attention_bf16=\"cudnn: .*the backward on the own kernels (cuDNN refused the backward" <<<"$REFUSED" ||
    fail "mpiddp env: the probe with backward plans refused: $REFUSED"
fi

# eval at any precision: bf16 of the bf16 checkpoint matches the run's last validation; fp32 of it too, closely
ck=r2_bf16/checkpoints/last.h5
mpirun_np 2 "$MPIDDP" eval --ckpt $ck --data val --device cuda --batch-size 50 --precision bf16 > e_bf16.txt
mpirun_np 1 "$MPIDDP" eval --ckpt $ck --data val --device cuda > e_fp32.txt
$PY - e_bf16.txt e_fp32.txt r2_bf16/metrics.csv <<'PY' || fail "eval at bf16/fp32"
import csv, sys
b, f = (dict(kv.split("=") for kv in open(p).read().split()) for p in sys.argv[1:3])
last = [r for r in csv.DictReader(open(sys.argv[3])) if r["val/acc"]][-1]
assert abs(float(b["val/acc"]) - float(last["val/acc"])) <= 1.5 / 250, (b, last)
assert abs(float(b["val/loss"]) - float(last["val/loss"])) <= 1e-3 * float(last["val/loss"]), (b, last)
assert abs(float(f["val/acc"]) - float(b["val/acc"])) <= 0.02, (f, b)
print("eval: bf16", b, "fp32", f)
PY
expect_rc 2 mpirun_np 2 "$MPIDDP" eval --ckpt $ck --data val --device cpu --precision tf32
one_line "mpiddp eval: --precision tf32 needs --device cuda (the CPU backend computes in fp32 or bf16)"

# a resume at another precision continues, with a notice; the new checkpoint records the new precision
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${tx[@]}" --batch-size 50 --epochs 4 --precision fp32 --out r2_bf16 --resume auto
grep -qF "mpiddp train: notice: r2_bf16/checkpoints/last.h5 was trained at --precision bf16; this run continues at --precision fp32" <<<"$ERR" ||
  fail "no precision notice on resume: $ERR"
[ "$($PY -c "import h5py; a = h5py.File('r2_bf16/checkpoints/last.h5')['/'].attrs['precision']; print(a.decode() if isinstance(a, bytes) else a)")" = fp32 ] ||
  fail "the resumed run's checkpoint does not record fp32"

# --precision fp32 is the exact reference: bit-identical to no option (the MLP at np 2, whole checkpoints)
mlp=(--train train --val val --hidden 16 --epochs 2 --batch-size 16 --seed 2 --device cuda --no-progress)
mpirun_np 2 "$MPIDDP" train "${mlp[@]}" --out m_default >/dev/null
mpirun_np 2 "$MPIDDP" train "${mlp[@]}" --precision fp32 --out m_fp32 >/dev/null
mpirun_np 2 "$MPIDDP" train "${mlp[@]}" --precision bf16 --out m_bf16 >/dev/null
$PY "$SRC/tests/py/compare_ckpt.py" m_default/checkpoints/last.h5 m_fp32/checkpoints/last.h5 0 >/dev/null ||
  fail "--precision fp32 is not bit-identical to the default"
$PY "$SRC/tests/py/compare_ckpt.py" m_fp32/checkpoints/last.h5 m_bf16/checkpoints/last.h5 0.05 || fail "the MLP at bf16 drifted from fp32"
pass "--precision: tf32/bf16 within 0.05 val/acc of fp32 at np 1 and 2; recorded in run.json and checkpoints; eval; resume notice; fp32 exact; cpu tf32 refused"
