# steps.sh — the step runner that scripts/gpu-check.sh sources, and the verdict device-kit.sh gives it: a step
# that fails or passes its own limit is FAILED; one the budget (STEPS_DEADLINE) kept from starting or cut short
# is NOT RUN, which is not a failure. Tested by tests/sh/steps.sh.
steps_ok=0 steps_failed=0 steps_notrun=0
: "${STEPS_REPORT:=/dev/null}" "${STEPS_DEADLINE:=$(($(date +%s) + 86400))}"
steps_line() { echo "$*" | tee -a "$STEPS_REPORT"; }
steps_fail() { steps_line "FAILED: $*"; steps_failed=$((steps_failed + 1)); } # a check outside run_t failed
run_t() { # run_t SECONDS CMD...: output into the report; cut to the time left before STEPS_DEADLINE
  local t=$1 capped=0; shift
  local left=$((STEPS_DEADLINE - $(date +%s)))
  [ "$left" -lt "$t" ] && t=$left capped=1
  if [ $capped = 1 ] && [ "$t" -le 5 ]; then
    steps_line "NOT RUN (the budget is spent): $*"; steps_notrun=$((steps_notrun + 1)); return 0
  fi
  local s; s=$(date +%s)
  timeout -k 10 "$t" "$@" >>"$STEPS_REPORT" 2>&1
  local rc=$? took=$(($(date +%s) - s))
  # cut short: stopped by the budget's cap after running until it (a kill well before it, e.g. the OOM killer's
  # SIGKILL, is a failure); a step cut short may have been hanging, so its result is unknown, not a pass
  if { [ $rc = 124 ] || [ $rc = 137 ]; } && [ $capped = 1 ] && [ "$took" -ge $((t - 1)) ]; then
    steps_line "NOT RUN (cut short at ${t} s: the budget ran out; its result is unknown): $*"
    steps_notrun=$((steps_notrun + 1))
  elif { [ $rc = 124 ] || [ $rc = 137 ]; } && [ "$took" -ge $((t - 1)) ]; then
    steps_line "TIMEOUT (${t} s): $*"; steps_failed=$((steps_failed + 1))
  elif [ $rc != 0 ]; then
    steps_line "FAILED ($rc, ${took} s): $*"; steps_failed=$((steps_failed + 1))
  else
    steps_line "ok (${took} s): $*"; steps_ok=$((steps_ok + 1))
  fi
  return 0
}
steps_result() { # steps_result NAME: the last line of the report; 0 all passed, 1 a failure, 4 some not run
  if [ $steps_failed != 0 ]; then
    steps_line "$1: $steps_failed step(s) FAILED, $steps_ok passed, $steps_notrun not run"; return 1
  elif [ $steps_notrun != 0 ]; then
    steps_line "$1: cut short by the budget: $steps_ok passed, $steps_notrun not run"; return 4
  fi
  steps_line "$1: all passed ($steps_ok steps)"
  return 0
}
steps_verdict() { # steps_verdict RC LOG: device-kit's "status|note" for a gpu-check that exited RC, LOG its report
  local failed; failed=$(grep -c '^\(FAILED\|TIMEOUT\)' "$2")
  local notrun; notrun=$(grep -c '^NOT RUN' "$2")
  case $1 in
    0) echo "ok|" ;;
    4) echo "cut short|$notrun step(s) not run or cut short by the budget (results unknown); every step that finished passed" ;;
    *) if [ "$failed" = 0 ]; then echo "FAILED|gpu-check exited $1 before its verdict; see log.txt"
       else echo "FAILED|$failed failed step(s)$([ "$notrun" = 0 ] || echo ", $notrun not run"); see report.md"; fi ;;
  esac
}
