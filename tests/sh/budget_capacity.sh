# Token budgets on an adversarial length mix (issue: a cost-balanced split overflowed a rank's buffers): one-row
# samples with a 128-row sample every 200, the transformer's cost (rows + rows^2/(2d+f) at d 8, f 16). The same
# global budget of 1024 rows at np 1, np 1 x accumulate 2, np 2, np 2 x accumulate 2 and np 4 must train the
# same parameters (1e-5), train every sample once per epoch, and never exceed a rank's buffers (the loader
# checks each sample's rows before it reads it; ASan builds would report a write past them).
. "$(dirname "$0")/lib.sh"
$PY "$SRC/tests/py/make_shards.py" spiky train 3000 200 128
$PY "$SRC/tests/py/make_shards.py" spiky val 700 200 128 100000
common=(--train train --val val --epochs 2 --model transformer --hidden 8 --heads 2 --ff 16 --layers 1 --lr 0.01 --log-every 1
        --no-progress --grad-clip 1.0 --device "$DEVICE")
run() { local name=$1 np=$2; shift 2; MPIDDP_TEST_TRACE_SAMPLES=$WORK/t_$name mpirun_np "$np" "$MPIDDP" train "${common[@]}" "$@" --out "$name" >/dev/null; }
run r1 1 --batch-rows 1024
run r1a 1 --batch-rows 512 --accumulate 2
run r2 2 --batch-rows 512
run r2a 2 --batch-rows 256 --accumulate 2
run r4 4 --batch-rows 256
for r in r1a r2 r2a r4; do
  $PY "$SRC/tests/py/compare_ckpt.py" r1/checkpoints/last.h5 $r/checkpoints/last.h5 1e-5 || fail "$r differs from r1"
done
$PY - <<'PY' || fail "sample trace"
import collections, glob
for name in ("r1", "r1a", "r2", "r2a", "r4"):
    seen = collections.Counter()
    for p in glob.glob(f"t_{name}.r*"):
        for line in open(p):
            v = [int(x) for x in line.split()]
            seen.update((v[0], i) for i in v[2:])
    for e in (0, 1):
        ids = [i for (ep, i), c in seen.items() if ep == e for _ in range(c)]
        assert len(ids) == len(set(ids)) == 3000, (name, e, len(ids), len(set(ids)))
    print(f"{name}: each of 3000 samples once in each epoch")
PY
# a global budget or batch too large for its types is a usage error before any buffer is sized from it
expect_rc 2 mpirun_np 4 "$MPIDDP" train "${common[@]}" --batch-rows 1000000000000 --accumulate 1000000 --out big
grep -q -- "--batch-rows 1000000000000 x 4 ranks x --accumulate 1000000: the global budget is too large" <<<"$ERR" || fail "budget overflow: $ERR"
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 10000000 --accumulate 1000 --out big
grep -q -- "more than 2^24 samples per optimizer step" <<<"$ERR" || fail "batch overflow: $ERR"
[ ! -e big ] || fail "a refused run left a run directory"
pass "adversarial token budgets: np 1/2/4 and accumulation agree, every sample once per epoch"
