# The demo's training (scripts/demo_run.sh, 2 ranks, default synthetic data) reaches val/acc >= 0.95.
. "$(dirname "$0")/lib.sh"
bash "$SRC/scripts/demo_run.sh" "$MPIDDP" "$WORK/demo" > demo.log 2>&1 || { cat demo.log; fail "demo run failed"; }
acc=$(csv_last demo/run/metrics.csv val/acc)
echo "final val/acc = $acc"
awk -v a="$acc" 'BEGIN{exit !(a >= 0.95)}' || fail "val/acc $acc < 0.95"
grep -q "run directory: " demo.log || fail "demo did not print the run directory"
pass "demo reaches val/acc $acc"
