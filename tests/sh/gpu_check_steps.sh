# gpu_check_steps.sh — scripts/steps.sh, the step runner of gpu-check.sh and the verdict device-kit.sh gives it:
# a step that fails or passes its own limit is FAILED; one the budget keeps from starting, or cuts short, is
# NOT RUN and no failure (a kill well before the cap is FAILED); the exit (0, 1, 4) and device-kit's "status|note"
# follow. Real commands, real timeouts.
. "$(dirname "$0")/lib.sh"
set +e
S="$SRC/scripts/steps.sh"
# 1. each kind of step once: a pass, a failure, its own limit, the budget cutting one short, one never started
(
  . "$S"; STEPS_REPORT=mixed.txt STEPS_DEADLINE=$(($(date +%s) + 9))
  run_t 30 true; run_t 30 false; run_t 1 sleep 5; run_t 30 sleep 60; run_t 30 true
  steps_result gpu-check
) > mixed.out 2>&1
rc=$?
set -e
cat mixed.txt
[ $rc = 1 ] || fail "a failed step: exit $rc, expected 1"
grep -q '^ok ([0-9]* s): true$' mixed.txt || fail "the passing step"
grep -q '^FAILED (1, [0-9]* s): false$' mixed.txt || fail "the failing step"
grep -q '^TIMEOUT (1 s): sleep 5$' mixed.txt || fail "a step past its own limit is a TIMEOUT, counted as failed"
grep -q '^NOT RUN (cut short at [0-9]* s: the budget ran out; its result is unknown): sleep 60$' mixed.txt || fail "the step the budget cut short"
grep -q '^NOT RUN (the budget is spent): true$' mixed.txt || fail "the step the budget kept from starting"
grep -qx 'gpu-check: 2 step(s) FAILED, 1 passed, 2 not run' mixed.txt || fail "the verdict line: $(tail -1 mixed.txt)"
v=$(. "$S" && steps_verdict 1 mixed.txt)
[ "$v" = "FAILED|2 failed step(s), 2 not run; see report.md" ] || fail "device-kit's verdict: $v"
# 2. the budget alone: what ran passed, the rest did not run: exit 4, not a failure
set +e
( . "$S"; STEPS_REPORT=cut.txt STEPS_DEADLINE=$(($(date +%s) + 7)); run_t 30 true; run_t 30 sleep 60; run_t 30 true
  steps_result gpu-check ) > cut.out 2>&1
rc=$?
set -e
[ $rc = 4 ] || { cat cut.txt; fail "budget only: exit $rc, expected 4"; }
grep -q FAILED cut.txt && fail "a step the budget cut is reported FAILED: $(cat cut.txt)"
grep -qx 'gpu-check: cut short by the budget: 1 passed, 2 not run' cut.txt || fail "cut verdict: $(tail -1 cut.txt)"
v=$(. "$S" && steps_verdict 4 cut.txt)
[ "$v" = "cut short|2 step(s) not run or cut short by the budget (results unknown); every step that finished passed" ] || fail "device-kit's verdict: $v"
# 2b. killed well before the cap (as by the OOM killer) while capped: a failure, not a budget cut
set +e
( . "$S"; STEPS_REPORT=kill.txt STEPS_DEADLINE=$(($(date +%s) + 30)); run_t 600 bash -c 'kill -KILL $$'
  steps_result gpu-check ) > kill.out 2>&1
rc=$?
set -e
[ $rc = 1 ] && grep -q '^FAILED (137, ' kill.txt || fail "a step killed before the cap: exit $rc, $(cat kill.txt)"
# 3. all passed; a check outside run_t (nvidia-smi) failing counts; an exit without a verdict is no "0 failed"
( . "$S"; STEPS_REPORT=ok.txt; run_t 30 true; run_t 30 true; steps_result gpu-check ) > ok.out 2>&1 || fail "all passed: not 0"
grep -qx 'gpu-check: all passed (2 steps)' ok.txt || fail "all-passed line: $(cat ok.txt)"
[ "$(. "$S" && steps_verdict 0 ok.txt)" = "ok|" ] || fail "device-kit's verdict for 0"
set +e
( . "$S"; STEPS_REPORT=f.txt; run_t 30 true; steps_fail nvidia-smi; steps_result gpu-check ) > f.out 2>&1
rc=$?
set -e
[ $rc = 1 ] && grep -qx 'FAILED: nvidia-smi' f.txt || fail "steps_fail: exit $rc, $(cat f.txt)"
v=$(. "$S" && steps_verdict 2 ok.txt)
[ "$v" = "FAILED|gpu-check exited 2 before its verdict; see log.txt" ] || fail "an exit without a failed step: $v"
# 4. the two scripts use it (gpu-check.sh stops before it on a machine without NVIDIA device nodes)
grep -q '^\. "$PWD/scripts/steps.sh"' "$SRC/scripts/gpu-check.sh" || fail "gpu-check.sh does not source steps.sh"
grep -q 'steps_verdict $rc_gc' "$SRC/scripts/device-kit.sh" || fail "device-kit.sh does not take steps_verdict"
bash -n "$SRC/scripts/gpu-check.sh" && bash -n "$SRC/scripts/device-kit.sh" || fail "syntax"
pass "steps: ok, FAILED, TIMEOUT and two kinds of NOT RUN told apart; exits 0/1/4; device-kit's verdicts"
