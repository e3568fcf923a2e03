# lib.sh — shared helpers for the shell-driven CTest cases: paths (MPIDDP, TESTTOOL, SRC, WORK come from
# CTest), an mpirun wrapper that works as root and oversubscribed, and small assertion functions.
set -euo pipefail
: "${MPIDDP:?}" "${SRC:?}" "${WORK:?}"
PY=${PY:-/usr/bin/python3}
# The device train/eval run on: cpu unless a test is registered for the CUDA path (on a GPU, or on the
# host emulator with MPIDDP_CUDA_PLUGIN=libmpiddp_cudaemu.so). Tests that mean the CPU pass it explicitly.
DEVICE=${MPIDDP_TEST_DEVICE:-cpu}
# Extra train options naming the model under test: CTest registers some suites a second time with the
# Transformer encoder (MPIDDP_TEST_MODEL_ARGS="--model transformer ..."); empty for the MLP.
read -r -a MODEL_ARGS <<< "${MPIDDP_TEST_MODEL_ARGS:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl_vader_single_copy_mechanism=none
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"

mpirun_np() { local np=$1; shift; mpirun -np "$np" --oversubscribe "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# qgrep ARGS...: grep -q that reads all of its input. Piped into, `grep -q` exits at its first match while the
# writer may still be writing (bash's printf writes a line at a time): the writer's SIGPIPE then failed the
# pipeline under pipefail, and the test at random. Tests pipe into qgrep, never into grep -q.
qgrep() { grep "$@" >/dev/null; }
pass() { echo "PASS: $*"; }
# expect_rc WANT CMD...: runs CMD, captures stdout/stderr in $OUT/$ERR, checks the exit code
expect_rc() {
  local want=$1; shift
  set +e; "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"; local rc=$?; set -e
  OUT=$(cat "$WORK/out.txt"); ERR=$(cat "$WORK/err.txt")
  [ "$rc" = "$want" ] || { echo "stdout: $OUT" >&2; echo "stderr: $ERR" >&2; fail "'$*' exited $rc, expected $want"; }
}
# last value of column NAME in a CSV (non-empty cells only)
csv_last() { awk -F, -v col="$2" 'NR==1{for(i=1;i<=NF;i++) if($i==col) c=i; next} c && $c!="" {v=$c} END{print v}' "$1"; }
synth() { "$MPIDDP" synth "$@" >/dev/null; }

# --- fault scenarios shared by faults.sh (cpu) and faults_gpu.sh (cuda) ---
rank_pid() { # pid of MPI rank $1 of a running `mpiddp train`; prints nothing (status 0) when there is none.
  # No pipes into grep -q: under pipefail the writer's SIGPIPE when grep stops at its match failed the test
  # at random (a rank "not found", and `victim=$(rank_pid ..)` then ended the script silently under set -e).
  local p cmd try
  for try in $(seq 20); do
    for p in /proc/[0-9]*; do
      grep -qaxz "OMPI_COMM_WORLD_RANK=$1" "$p/environ" 2>/dev/null || continue
      case $(readlink "$p/cwd" 2>/dev/null) in "$WORK" | "$WORK"/*) ;; *) continue ;; esac # this test's ranks only
      cmd=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
      case $cmd in *"$MPIDDP train"*) echo "${p#/proc/}"; return 0 ;; esac
    done
    sleep 0.1
  done
  return 0
}
# stopped PID: the process is stopped (SIGSTOP: state T, as MPIDDP_TEST_STOP_SELF_AT_START leaves a rank)
stopped() { [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = T ]; }
# stopped_rank R: the PID of rank R of a running `mpiddp train` once it has stopped itself, waiting about 30 s at
# most (then the PID it found, or nothing: the caller checks with stopped)
stopped_rank() {
  local p=
  for _ in $(seq 300); do
    p=$(rank_pid "$1")
    [ -n "$p" ] && stopped "$p" && break
    sleep 0.1
  done
  echo "$p"
}
wait_for() { for _ in $(seq 300); do [ -e "$1" ] && return 0; sleep 0.1; done; fail "timed out waiting for $1"; }
# dead_rank TRAIN_ARGS...: a 4-rank job writing last.h5 every 20 steps loses rank 1 to SIGKILL after its first
# save; it must end non-zero within 30 s and leave a last.h5 that eval loads (run directory: dead)
dead_rank() {
  mpirun -np 4 --oversubscribe "$MPIDDP" train "$@" --ckpt-every-steps 20 --out dead > dead.out 2>&1 &
  local job=$! victim start rc
  wait_for dead/checkpoints/last.h5
  sleep 0.5
  victim=$(rank_pid 1)
  [ -n "$victim" ] || fail "rank 1 not found (job already finished?)"
  kill -9 "$victim" || fail "could not kill rank 1 (pid $victim)"
  start=$(date +%s)
  set +e; wait $job; rc=$?; set -e
  [ "$rc" != 0 ] || fail "job survived a dead rank"
  [ $(( $(date +%s) - start )) -le 30 ] || fail "dead rank: job took more than 30 s to end"
  "$MPIDDP" eval --device "$DEVICE" --ckpt dead/checkpoints/last.h5 --data "$VAL_DIR" > /dev/null || fail "last.h5 not loadable after a dead rank"
}
# stalled_rank TRAIN_ARGS...: SIGSTOP rank 2 of a 4-rank job with --collective-timeout 5; the job must end
# non-zero within 20 s; stall.err holds the report (run directory: stall)
stalled_rank() {
  mpirun -np 4 --oversubscribe "$MPIDDP" train "$@" --epochs 500 --collective-timeout 5 --out stall > stall.out 2> stall.err &
  local job=$! victim start rc took
  wait_for stall/progress/rank3
  sleep 1
  victim=$(rank_pid 2)
  [ -n "$victim" ] || fail "rank 2 not found"
  kill -STOP "$victim" || fail "could not stop rank 2 (pid $victim)"
  start=$(date +%s)
  set +e; wait $job; rc=$?; set -e
  took=$(( $(date +%s) - start ))
  [ "$rc" != 0 ] || fail "stalled job exited 0"
  [ "$took" -le 20 ] || fail "stalled job took $took s to stop (timeout 5 s)"
}
# resume_bitwise NP TRAIN_ARGS...: a run stopped at step 37 by a stop request on rank 1 and resumed with
# --resume auto ends bitwise identical to the uninterrupted run (run directories fullNP, partNP)
resume_bitwise() {
  local np=$1; shift
  mpirun_np $np "$MPIDDP" train "$@" --out full$np >/dev/null
  expect_rc 0 env MPIDDP_TEST_STOP_AT_STEP=37 MPIDDP_TEST_STOP_RANK=1 mpirun -np $np --oversubscribe "$MPIDDP" train "$@" --out part$np
  printf '%s' "$OUT" | qgrep "stopped on request at step 37" || fail "stop message: $OUT"
  mpirun_np $np "$MPIDDP" train "$@" --out part$np --resume auto >/dev/null
  $PY "$SRC/tests/py/compare_ckpt.py" full$np/checkpoints/last.h5 part$np/checkpoints/last.h5 0 || fail "resume at np $np on $DEVICE is not bitwise exact"
}
