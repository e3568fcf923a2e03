# --shuffle block: each epoch trains a permutation of all samples; the per-step union over ranks is the same
# at np 1, 2 and 4 (sample-count batches and token budgets), so parameters track the 1-rank run; windows
# are read as runs of consecutive samples (each step's samples come from few blocks); resume mid-epoch is
# bitwise exact with both shuffles; bad combinations are one-line errors.
. "$(dirname "$0")/lib.sh"
synth --out train --samples 300 --dim 8 --classes 3 --min-rows 1 --max-rows 12 --shards 3 --seed 7
synth --out val --samples 40 --dim 8 --classes 3 --min-rows 1 --max-rows 12 --shards 1 --seed 7 --first-id 5000
# blocks of ~2 KiB of features (about 9 samples), 3 blocks per window
base=(--train train --val val --epochs 2 --hidden 16 --lr 0.01 --log-every 1 --no-progress --device "$DEVICE" "${MODEL_ARGS[@]}")
common=("${base[@]}" --shuffle block --shuffle-block-mb 0.002 --shuffle-window 3)
MPIDDP_TEST_TRACE_SAMPLES=$WORK/b1 mpirun_np 1 "$MPIDDP" train "${common[@]}" --batch-size 8 --out b1 >/dev/null
MPIDDP_TEST_TRACE_SAMPLES=$WORK/b2 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out b2 >/dev/null
MPIDDP_TEST_TRACE_SAMPLES=$WORK/b4 mpirun_np 4 "$MPIDDP" train "${common[@]}" --batch-size 2 --out b4 >/dev/null
MPIDDP_TEST_TRACE_SAMPLES=$WORK/r1 mpirun_np 1 "$MPIDDP" train "${common[@]}" --batch-rows 96 --out r1 >/dev/null
MPIDDP_TEST_TRACE_SAMPLES=$WORK/r4 mpirun_np 4 "$MPIDDP" train "${common[@]}" --batch-rows 24 --out r4 >/dev/null
MPIDDP_TEST_TRACE_SAMPLES=$WORK/f1 mpirun_np 1 "$MPIDDP" train "${base[@]}" --shuffle full --batch-size 8 --out f1 >/dev/null
for r in b2 b4; do $PY "$SRC/tests/py/compare_ckpt.py" b1/checkpoints/last.h5 $r/checkpoints/last.h5 1e-5 || fail "$r differs from b1"; done
$PY "$SRC/tests/py/compare_ckpt.py" r1/checkpoints/last.h5 r4/checkpoints/last.h5 1e-5 || fail "r4 differs from r1"
$PY - <<'PY' || fail "block-shuffle order"
import collections, glob
def trace(prefix):
    steps = collections.defaultdict(list)
    for p in glob.glob(prefix + ".r*"):
        for line in open(p):
            v = [int(x) for x in line.split()]
            steps[(v[0], v[1])] += v[2:]
    return steps
def runs(ids):  # clusters of sample ids closer than 12 (a block holds ~9 consecutive samples)
    s = sorted(set(ids))
    return 1 + sum(b - a > 12 for a, b in zip(s, s[1:]))
ids = set(range(300))
for ref, others in (("b1", ("b2", "b4")), ("r1", ("r4",))):
    a = trace(ref)
    for e in (0, 1):
        seen = [i for (ep, s), v in a.items() if ep == e for i in v]
        assert sorted(seen) == sorted(ids), (ref, e)   # a permutation of all samples, no padding (300 = 8 x 37.5: b1 pads)
    for o in others:
        b = trace(o)
        assert sorted(a) == sorted(b) and all(sorted(a[k]) == sorted(b[k]) for k in a), (ref, o)
blk, full = trace("b1"), trace("f1")
rb = sum(runs(v) for v in blk.values()) / len(blk)
rf = sum(runs(v) for v in full.values()) / len(full)
print(f"mean clusters of nearby sample ids per 8-sample step: block {rb:.2f}, full {rf:.2f}")
assert rb <= 3.5 and rf >= 5.0, (rb, rf)   # block: a step draws from the 3 blocks of one window (or two windows)
e0 = [i for (ep, s), v in sorted(blk.items()) if ep == 0 for i in v]
e1 = [i for (ep, s), v in sorted(blk.items()) if ep == 1 for i in v]
assert e0 != e1, "epochs must differ"
PY
# resume mid-epoch, bitwise, with the block shuffle (sample counts and token budgets)
for mode in "--batch-size 4" "--batch-rows 48"; do
  tag=$(echo $mode | tr -dc a-z0-9)
  mpirun_np 2 "$MPIDDP" train "${common[@]}" $mode --out full_$tag >/dev/null
  MPIDDP_TEST_STOP_AT_STEP=7 mpirun_np 2 "$MPIDDP" train "${common[@]}" $mode --out part_$tag >/dev/null
  mpirun_np 2 "$MPIDDP" train "${common[@]}" $mode --out part_$tag --resume auto >/dev/null
  $PY "$SRC/tests/py/compare_ckpt.py" full_$tag/checkpoints/last.h5 part_$tag/checkpoints/last.h5 0 || fail "resume ($mode) is not bitwise exact"
done
# another --shuffle on resume: refused mid-epoch (the saved epoch's order would not be continued), accepted with one
# notice at an epoch boundary (epoch 1 not begun: it is ordered the new way and trains every sample exactly once)
MPIDDP_TEST_STOP_AT_STEP=7 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out mid >/dev/null
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${base[@]}" --shuffle full --batch-size 4 --out mid --resume auto
grep -q "saved with --shuffle block:0.002:3; this run uses --shuffle full (another order continues only a checkpoint saved at an epoch boundary; this one is 7 optimizer steps into epoch 0)" <<<"$ERR" ||
  fail "shuffle change on resume mid-epoch: $ERR"
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --epochs 1 --out bnd >/dev/null
MPIDDP_TEST_TRACE_SAMPLES=$WORK/bnd mpirun_np 2 "$MPIDDP" train "${base[@]}" --shuffle full --batch-size 4 --out bnd --resume auto >/dev/null 2>bnd.err ||
  fail "shuffle change on resume at an epoch boundary: $(cat bnd.err)"
[ "$(grep -c "notice: bnd/checkpoints/last.h5 was saved at the start of epoch 1 with --shuffle block:0.002:3 --sampling global; this run orders it and the epochs after it with --shuffle full --sampling global$" bnd.err)" = 1 ] ||
  fail "shuffle change at an epoch boundary: no notice: $(cat bnd.err)"
$PY - <<'PY' || fail "shuffle change at an epoch boundary: epoch 1 does not train every sample once"
import collections, glob
ids = collections.Counter(int(i) for f in glob.glob("bnd.r*") for l in open(f) for i in l.split()[2:] if l.split()[0] == "1")
eps = {l.split()[0] for f in glob.glob("bnd.r*") for l in open(f)}
assert eps == {"1"}, eps
assert sorted(ids) == list(range(300)) and set(ids.values()) == {1}, (len(ids), collections.Counter(ids.values()))
PY
# saved at the end of an epoch's training, before its validation (stopped during validation: last.h5 at epoch 0, all
# 300 samples of it trained): an epoch boundary too. The resume with --shuffle full is accepted with one notice,
# validates epoch 0 (once), then orders epoch 1 the new way; across both runs each epoch trains every sample once.
# It used to be refused as 38 optimizer steps into epoch 0
MPIDDP_TEST_STOP_IN_VAL=0 MPIDDP_TEST_TRACE_SAMPLES=$WORK/ve mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out ve >/dev/null 2>&1
$PY -c "import h5py; a = h5py.File('ve/checkpoints/last.h5', 'r').attrs
assert int(a['epoch']) == 0 and int(a['samples_in_epoch']) == 300, dict(a)" || fail "the stop during validation did not save at epoch 0's end"
MPIDDP_TEST_TRACE_SAMPLES=$WORK/ve mpirun_np 2 "$MPIDDP" train "${base[@]}" --shuffle full --batch-size 4 --out ve --resume auto >/dev/null 2>ve.err ||
  fail "shuffle change on resume at an epoch's end (before its validation): $(cat ve.err)"
[ "$(grep -c "notice: ve/checkpoints/last.h5 was saved at the end of epoch 0's training (its validation next) with --shuffle block:0.002:3 --sampling global; this run orders the epochs after it with --shuffle full --sampling global$" ve.err)" = 1 ] ||
  fail "shuffle change at an epoch's end: no notice: $(cat ve.err)"
$PY - <<'PY' || fail "shuffle change at an epoch's end: an epoch does not train every sample once, or epoch 0 is not validated once"
import collections, csv, glob
for e in ("0", "1"):
    ids = collections.Counter(int(i) for f in glob.glob("ve.r*") for l in open(f) for i in l.split()[2:] if l.split()[0] == e)
    assert sorted(ids) == list(range(300)) and set(ids.values()) == {1}, (e, len(ids), collections.Counter(ids.values()))
val = [r["epoch"] for r in csv.DictReader(open("ve/metrics.csv")) if r.get("val/loss")]
assert val == ["0", "1"], val
PY
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${common[@]}" --sampling shard --out bad
grep -q -- "--shuffle block needs --sampling global" <<<"$ERR" || fail "shard + block: $ERR"
expect_rc 2 "$MPIDDP" train "${common[@]}" --shuffle-window 0 --out bad
expect_rc 2 "$MPIDDP" train "${common[@]}" --shuffle random --out bad
pass "block shuffle: permutations, world-size independent, sequential runs, exact resume, errors"
