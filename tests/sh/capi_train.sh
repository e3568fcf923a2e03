# ddp_train and ddp_metrics through the public C API (tools/capi_train.c, which includes only mpiddp.h), each case
# at np 1 and 2 (4 where the ranks' count matters), every rank's checks "ok" and its "done" line, no hang:
# - threads: ddp_log and ddp_log_rank0 from 4 threads at once into one ddp_metrics lose no value and no new name (they
#   raced: a wrong mean, or a crash when the rows grew)
# - dangling: model.metrics is NULL once ddp_train returns, and ddp_log through it DDP_ERR_ARG (it pointed at the
#   freed accumulator)
# - stop: a stop request is spent by the ddp_train that stops for it (every later ddp_train in the process stopped
#   after one step); one made before a ddp_train starts still stops it; ddp_stop_requested keeps the kinds asked
# - fail_*: a model callback's failure has one line naming the model, the callback, its status and the step (it read
#   "no error"); the callback's own line where a library call set one; DDP_STOPPED from train_step is DDP_ERR_ARG,
#   not a DDP_STOPPED without last.h5
. "$(dirname "$0")/lib.sh"
: "${CAPI_TRAIN:?}"
synth --out tr --samples 128 --shards 2 --dim 4 --classes 3
synth --out va --samples 32 --shards 1 --dim 4 --classes 3 --first-id 100000
# run_case NP CASE [ARGS...] [-- RC...]: every rank's checks ok and done; exit code among RC (default 0)
run_case() {
  local np=$1 c=$2 rc r ok=" 0 "
  shift 2
  local args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift && ok=" $* "
  rm -rf w && mkdir w
  set +e
  timeout -s KILL 60 mpirun -np "$np" --oversubscribe --bind-to none "$CAPI_TRAIN" "$c" tr va "$PWD/w" "${args[@]}" > out.txt 2> err.txt
  rc=$?
  set -e
  [ $rc != 137 ] || { cat err.txt >&2; fail "case $c at np $np: a hang (killed after 60 s)"; }
  ! grep -E '^FAIL|Segmentation|signal 11|SIGSEGV' err.txt || fail "case $c at np $np: a check failed (exit $rc)"
  for r in $(seq 0 $((np - 1))); do
    qgrep "^done rank $r\$" err.txt || { cat err.txt >&2; fail "case $c at np $np: rank $r did not finish (exit $rc)"; }
    qgrep "^ok rank $r " err.txt || fail "case $c at np $np: rank $r checked nothing"
  done
  [[ $ok == *" $rc "* ]] || { cat err.txt >&2; fail "case $c at np $np: exit $rc, want one of$ok"; }
  [ ! -s out.txt ] || fail "case $c at np $np: wrote to stdout: $(cat out.txt)"
}
# (threads on one core rarely race: --bind-to none, and three runs each)
for np in 1 2; do for _ in 1 2 3; do run_case $np threads 4 50000; done; done
pass "ddp_log and ddp_log_rank0 from 4 threads: every value and every new name kept"
for np in 1 2; do run_case $np dangling; done
pass "model.metrics is NULL after ddp_train; ddp_log through it is DDP_ERR_ARG"
for np in 1 2 4; do run_case $np stop; done
pass "a stop request is spent by the ddp_train that stops for it; one made before ddp_train stops it"
for c in fail_train fail_log fail_stopped fail_eval; do
  run_case 1 $c
  # every rank failed on its own: ddp_finalize leaves MPI_Finalize alone and the program exits 4
  run_case 2 $c -- 4 1
done
# init's failure is agreed before the first collective: every rank finalizes, exit 0
for np in 1 2; do run_case $np fail_init; done
pass "a failing model callback: one line naming model, callback, status and step; its own line kept; no DDP_STOPPED"
