# scaling_model.sh — benchmarks/scaling_model.py without timing anything: its self test (the alpha-beta fit on
# synthetic data, sync.c's bucket layout and overlap, the collectives' formulas), then the default mode into
# $WORK, whose CSV must hold 1..1024 GPUs for each model with efficiency 1 at one GPU, never above 1 and never
# rising with the GPU count, and epoch times that fall; and, when the benchmarks are built, bench_kernels at
# the tiny preset with --check (each op runs, outputs equal the CPU backend's; no timing claim).
. "$(dirname "$0")/lib.sh"
$PY -c "import numpy" 2>/dev/null || { echo "SKIP: numpy missing"; exit 77; }
$PY "$SRC/benchmarks/scaling_model.py" --selftest
$PY "$SRC/benchmarks/scaling_model.py" --out "$WORK/res" > model.txt
grep -q "max relative error" model.txt && fail "the default mode must not validate (time) anything"
grep -q "^| tx-d1024-L12 | .* | 1024 | 128 |" model.txt || fail "no 1024-GPU row in the table"
[ -s "$WORK/res/scaling_model.csv" ] || fail "no CSV"
$PY - "$WORK/res/scaling_model.csv" <<'EOF' || fail "table invariants"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
groups = {}
for r in rows:
    groups.setdefault((r["model"], r["tokens_per_gpu"], r["bucket_mb"]), []).append(r)
assert len(groups) >= 3 * 3, groups.keys()
for k, g in groups.items():
    g.sort(key=lambda r: int(r["gpus"]))
    assert [int(r["gpus"]) for r in g] == [2 ** i for i in range(11)], k
    e = [float(r["efficiency"]) for r in g]
    t = [float(r["epoch_s"]) for r in g]
    assert abs(e[0] - 1) < 1e-9, (k, e[0])
    assert all(0 < x <= 1 + 1e-9 for x in e), (k, e)
    assert all(b <= a + 1e-9 for a, b in zip(e, e[1:])), (k, e)
    assert all(b < a for a, b in zip(t, t[1:])), (k, t)
print("table invariants: ok over", len(groups), "series")
EOF
if [ -x "${BENCH_DIR:-}/bench_kernels" ]; then
  expect_rc 0 "$BENCH_DIR/bench_kernels" --preset tiny --reps 1 --check --csv "$WORK/k.csv"
  grep -q "check against the cpu backend: ok" "$WORK/out.txt" || fail "bench_kernels --check"
  [ "$(grep -c attention_bwd "$WORK/k.csv")" = 1 ] || fail "bench_kernels CSV"
  expect_rc 2 "$BENCH_DIR/bench_kernels" --no-such-option
fi
pass "scaling model self test, table invariants${BENCH_DIR:+, bench_kernels --check}"
