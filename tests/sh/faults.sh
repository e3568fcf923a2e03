# Faults a user's bad day produces, at np 4: a rank killed mid-epoch, a rank stopped (SIGSTOP), a NaN in
# the data, a full and a read-only run directory. Nothing hangs, errors name the cause, the last complete
# checkpoint stays loadable and a resume completes.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 6000 --dim 16 --classes 3 --shards 2 --seed 1
synth --out v --samples 200 --dim 16 --classes 3 --shards 1 --seed 1 --first-id 100000
base=(--train t --val v --batch-size 8 --hidden 32 --no-progress)
VAL_DIR=v

# 1. dead rank: SIGKILL rank 1 after the first mid-epoch checkpoint; the job ends non-zero within 30 s
dead_rank --device "$DEVICE" "${base[@]}" --epochs 20
mpirun_np 4 "$MPIDDP" train --device "$DEVICE" "${base[@]}" --epochs 20 --ckpt-every-steps 20 --out dead --resume auto > /dev/null || fail "resume after a dead rank"
[ "$(awk -F, 'NR>1 && $6!=""' dead/metrics.csv | wc -l)" = 20 ] || fail "resumed run did not finish 20 epochs"

# 2. stalled rank: SIGSTOP rank 2; the others report the collective and the missing rank within the timeout
stalled_rank --device "$DEVICE" "${base[@]}"
# (the stop lands in training, validation or a checkpoint: the gradient allreduce, the metric reduction, a
# status agreement or another collective is named, as "the ..." or "a/an ..."). Any waiting rank may be the one
# whose report gets out before the job is aborted: a rank whose deadline comes within 2.5 s of the stop reads the
# board a second time first (test_watchdog), so rank 1 or 3 often reports before rank 0.
grep -Eq "collective timeout: rank [013] waited [0-9]+ s in (the|an?) [a-z -]+ at step [0-9]+ \(--collective-timeout 5\); missing: rank 2 silent" stall.err ||
  { cat stall.err; fail "no report naming the collective and rank 2"; }
# ... and a rank stalled as training starts (SIGSTOP on itself before the loaders and the first epoch's plan): the
# watch runs from then on, so the others report it within the timeout instead of waiting on it for ever
start=$(date +%s)
set +e
MPIDDP_TEST_STOP_SELF_AT_START=2 timeout -s KILL 120 mpirun -np 4 --oversubscribe "$MPIDDP" train --device "$DEVICE" \
  "${base[@]}" --epochs 5 --collective-timeout 5 --out stall0 > stall0.out 2> stall0.err
rc=$?
set -e
[ "$rc" != 0 ] && [ "$rc" != 137 ] || { cat stall0.err; fail "rank stalled at start: rc $rc (137: the job hung)"; }
[ $(( $(date +%s) - start )) -le 60 ] || fail "rank stalled at start: the job took $(( $(date +%s) - start )) s to end"
grep -Eq "collective timeout: rank [013] waited [0-9]+ s in (the|an?) [a-z -]+ at step 0 \(--collective-timeout 5\); missing: rank 2 silent" stall0.err ||
  { cat stall0.err; fail "rank stalled at start: no report naming rank 2"; }

# 2b. a further stop signal to a rank that cannot reach a step boundary (rank 1 stopped at start: rank 0 waits in a
#     collective, --collective-timeout 0) is not escalated: SIGTERM to both ranks, again at once to rank 0, SIGINT
#     2.5 s later: rank 0 says once why the stop waits, and keeps waiting (a stop always saves; a hung peer and a slow
#     one look alike); SIGKILL ends the job; a later run takes the leftover run.lock, and nothing .tmp stays
set +e
MPIDDP_TEST_STOP_SELF_AT_START=1 timeout -s KILL 60 mpirun -np 2 --oversubscribe "$MPIDDP" train --device "$DEVICE" \
  --train v --val v --batch-size 4 --hidden 8 --no-progress --epochs 2 --out hang > hang.out 2> hang.err &
job=$!
p1=$(stopped_rank 1)
p0=$(rank_pid 0)
[ -n "$p0" ] && stopped "$p1" || fail "further signal: rank 1 did not stop itself"
sleep 1
kill -TERM "$p0" "$p1" && kill -TERM "$p0"
sleep 2.5
kill -INT "$p0" "$p1"
for _ in $(seq 40); do qgrep notice hang.err && break; sleep 0.25; done
sleep 1
kill -0 "$p0" || { cat hang.err; fail "further signal: rank 0 ended (a stop must save, not quit)"; }
kill -KILL "$p0" "$p1"
wait $job
set -e
[ "$(grep -c '^mpiddp train:' hang.err)" = 1 ] &&
  qgrep -E "^mpiddp train: rank 0: notice: the stop waits for the next step boundary; this rank has waited [0-9]+ s in a collective for a rank that has not arrived yet \(slow, stopped or hung; a hung job: --collective-timeout ends it, or SIGKILL\)$" hang.err ||
  { cat hang.err; fail "further signal: not the one notice"; }
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=3 "$MPIDDP" train --device "$DEVICE" --train v --val v --batch-size 4 \
  --hidden 8 --no-progress --epochs 2 --out hang --resume auto
[ -f hang/checkpoints/last.h5 ] && [ -z "$(find hang -name '*.tmp*')" ] || fail "after a SIGKILL: $(find hang)"
# the same mid-training: rank 1 stopped (SIGSTOP) after some steps, rank 0 blocked in the CPU gradient allreduce.
# The first SIGTERM (3 s into the wait) and its duplicate at once say nothing; a second 2.5 s later gives the notice; a third adds nothing;
# rank 0 keeps waiting
set +e
MPIDDP_TEST_STEP_DELAY_MS=100 timeout -s KILL 60 mpirun -np 2 --oversubscribe "$MPIDDP" train --device "$DEVICE" \
  --train v --val v --batch-size 4 --hidden 8 --no-progress --epochs 50 --log-every 2 --out hangm > hangm.out 2> hangm.err &
job=$!
for _ in $(seq 300); do [ -f hangm/metrics.csv ] && [ "$(wc -l < hangm/metrics.csv)" -ge 3 ] && break; sleep 0.1; done
p0=$(rank_pid 0)
p1=$(rank_pid 1)
kill -STOP "$p1"
sleep 3
kill -TERM "$p0" && kill -TERM "$p0"
sleep 1
qgrep notice hangm.err && first=said || first=
sleep 1.5
kill -TERM "$p0"
for _ in $(seq 40); do qgrep notice hangm.err && break; sleep 0.25; done
kill -TERM "$p0"
sleep 1
kill -0 "$p0" && alive=yes || alive=
kill -KILL "$p0" "$p1"
wait $job
set -e
[ -z "$first" ] || { cat hangm.err; fail "further signal mid-training: the first SIGTERM gave the notice"; }
[ -n "$alive" ] || { cat hangm.err; fail "further signal mid-training: rank 0 ended (a stop must save, not quit)"; }
[ "$(grep -c '^mpiddp train:' hangm.err)" = 1 ] &&
  qgrep -E "^mpiddp train: rank 0: notice: the stop waits for the next step boundary; this rank has waited [0-9]+ s in a collective for a rank that has not arrived yet \(slow, stopped or hung; a hung job: --collective-timeout ends it, or SIGKILL\)$" hangm.err ||
  { cat hangm.err; fail "further signal mid-training: not one notice from the rank blocked in the gradient allreduce"; }
# two SIGTERMs back to back to every rank of a healthy run (np 1 and 2; steps of 300 ms): a clean stop, exit 0
for np in 1 2; do
  MPIDDP_TEST_STEP_DELAY_MS=300 mpirun_np $np "$MPIDDP" train --device "$DEVICE" --train v --val v --batch-size 4 \
    --hidden 8 --no-progress --epochs 2 --out dbl$np > dbl$np.out 2>&1 &
  job=$!
  wait_for dbl$np/run.json
  pids=$(for r in $(seq 0 $((np - 1))); do rank_pid $r; done)
  # shellcheck disable=SC2086
  kill -TERM $pids && kill -TERM $pids
  set +e; wait $job; rc=$?; set -e
  [ "$rc" = 0 ] || { cat dbl$np.out; fail "np $np: two SIGTERMs at once: exit $rc"; }
  grep -q "stopped on request at step" dbl$np.out && [ -f dbl$np/checkpoints/last.h5 ] ||
    { cat dbl$np.out; fail "np $np: two SIGTERMs at once: no clean stop"; }
done
# two SIGTERMs 2.5 s apart to every rank of a healthy run whose steps take 4 s (np 2): the ranks are computing, not
# stuck in a collective: a clean stop at the step boundary, exit 0, and no notice
MPIDDP_TEST_STEP_DELAY_MS=4000 mpirun_np 2 "$MPIDDP" train --device "$DEVICE" --train v --val v --batch-size 4 \
  --hidden 8 --no-progress --epochs 2 --out slow > slow.out 2>&1 &
job=$!
wait_for slow/run.json
pids="$(rank_pid 0) $(rank_pid 1)"
# shellcheck disable=SC2086
kill -TERM $pids && sleep 2.5 && kill -TERM $pids
set +e; wait $job; rc=$?; set -e
[ "$rc" = 0 ] && grep -q "stopped on request at step" slow.out && [ -f slow/checkpoints/last.h5 ] && ! qgrep notice slow.out ||
  { cat slow.out; fail "slow steps, two SIGTERMs 2.5 s apart: exit $rc, not a clean stop"; }

# 3. NaN in the data: stops with the step and the parameter; --skip-nonfinite skips and counts instead
$PY "$SRC/tests/py/make_shards.py" nan nan
$PY "$SRC/tests/py/make_shards.py" variants vv >/dev/null
expect_rc 1 mpirun_np 4 "$MPIDDP" train --device "$DEVICE" --train nan --val vv/one_shard --batch-size 4 --no-progress --out nanrun
printf '%s' "$ERR" | qgrep "error: non-finite gradient at step [0-9]* in parameter 'l[0-9].\(weight\|bias\)'" || fail "NaN message: $ERR"
# every rank sees the same reduced gradient: one line from rank 0 and a clean shutdown, not MPI_Abort
[ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "NaN: not one line: $ERR"
printf '%s' "$ERR" | qgrep "MPI_ABORT" && fail "NaN ended in MPI_Abort: $ERR"
# the diagnosis failing on one rank (each of its allocation sites, on each rank): one line saying so, exit 1, no hang;
# the other ranks neither wait for that rank nor call the data finite (as when the rank holding the NaN sample failed
# to look)
rm -rf nanrun && MPIDDP_TEST_ALLOC_SITES=$WORK/gdsites mpirun_np 4 "$MPIDDP" train --device "$DEVICE" --train nan \
  --val vv/one_shard --batch-size 4 --no-progress --out nanrun >/dev/null 2>&1 || true
gsites=$(cat gdsites.r* | { grep '^train/grad_diag\.c:' || true; } | sort -u) # none: said below, not a silent exit
[ -n "$gsites" ] || fail "the NaN run reached no allocation of train/grad_diag.c"
for site in $gsites; do
  for rank in 0 1 2 3; do
    rm -rf nanrun
    expect_rc 1 env MPIDDP_TEST_FAIL_ALLOC="$site" MPIDDP_TEST_FAIL_ALLOC_RANK=$rank timeout -k 5 30 \
      mpirun -np 4 --oversubscribe "$MPIDDP" train --device "$DEVICE" --train nan --val vv/one_shard --batch-size 4 \
      --no-progress --out nanrun
    # the lowest rank with something to say speaks: the failed look, or a lower rank's NaN sample
    [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] &&
      printf '%s' "$ERR" | qgrep -E "error: (out of memory re-reading|non-finite gradient .* from the data: )" ||
      fail "the diagnosis failing at $site on rank $rank: $ERR"
  done
done
mpirun_np 4 "$MPIDDP" train --device "$DEVICE" --train nan --val vv/one_shard --batch-size 4 --no-progress --out nanskip --skip-nonfinite --epochs 2 >/dev/null
skipped=$(csv_last nanskip/metrics.csv train/skipped_steps)
[ "$skipped" = 2 ] || fail "expected 2 skipped steps (one per epoch), got '$skipped'"
# a skipped step's loss (NaN) stays out of train/loss: the epochs' rows are finite (every one was nan)
awk -F, 'NR==1{for(i=1;i<=NF;i++) if($i=="train/loss") c=i; next} $c!="" {n++; if($c!~/^[0-9.e+-]+$/) bad=1} END{exit bad || !n}' nanskip/metrics.csv ||
  fail "--skip-nonfinite: train/loss not finite in every training row: $(cut -d, -f1-3 nanskip/metrics.csv)"
# the count is checkpointed: a resumed third epoch goes on counting (3, not 1)
mpirun_np 4 "$MPIDDP" train --device "$DEVICE" --train nan --val vv/one_shard --batch-size 4 --no-progress --out nanskip --skip-nonfinite --epochs 3 --resume auto >nanskip.out 2>&1 ||
  { cat nanskip.out; fail "--skip-nonfinite resume"; }
[ "$(csv_last nanskip/metrics.csv train/skipped_steps)" = 3 ] || fail "skipped steps after resume: $(csv_last nanskip/metrics.csv train/skipped_steps), expected 3"
"$MPIDDP" eval --device "$DEVICE" --ckpt nanskip/checkpoints/last.h5 --data vv/one_shard | qgrep -v nan || fail "parameters became NaN"

# 4. full and read-only run directories (a small tmpfs in a private mount namespace)
if unshare -m true 2>/dev/null; then
  mkdir -p small
  cat > disk.sh <<EOS
set -u
mount -t tmpfs -o size=1400k tmpfs small || exit 77
mpirun -np 2 --oversubscribe "$MPIDDP" train --device "$DEVICE" ${base[*]} --hidden 256 --epochs 1 --save-top-k 0 --out small/r >/dev/null 2>&1 || exit 10
cp small/r/checkpoints/last.h5 good.h5
mpirun -np 2 --oversubscribe "$MPIDDP" train --device "$DEVICE" ${base[*]} --hidden 256 --epochs 2 --save-top-k 1 --out small/r --resume auto > full.out 2> full.err
echo "full rc=\$?" > full.rc
"$MPIDDP" eval --device "$DEVICE" --ckpt small/r/checkpoints/last.h5 --data v > full.eval 2>&1 || exit 11
cmp -s good.h5 small/r/checkpoints/last.h5 || exit 12
mount -o remount,ro small
mpirun -np 2 --oversubscribe "$MPIDDP" train --device "$DEVICE" ${base[*]} --hidden 256 --epochs 3 --out small/r --resume auto > ro.out 2> ro.err
echo "ro rc=\$?" > ro.rc
EOS
  set +e; unshare -m bash disk.sh; rc=$?; set -e
  if [ $rc = 77 ]; then echo "SKIP part 4: cannot mount tmpfs here"; else
    [ $rc = 0 ] || fail "disk scenario step failed (code $rc)"
    grep -q "full rc=1" full.rc || fail "full disk: expected exit 1: $(cat full.rc)"
    grep -q "error: .*\(No space left\|disk full\)" full.err || { cat full.err; fail "full disk: unclear message"; }
    grep -q "ro rc=1" ro.rc || fail "read-only: expected exit 1"
    grep -q "error: .*\(Read-only\|not writable\)" ro.err || { cat ro.err; fail "read-only: unclear message"; }
  fi
fi

# 5. a stop inside a SLURM job (its environment, with a stand-in scontrol that records its calls): only the
#    time-limit warning (SIGUSR1/SIGUSR2; the test hook plays SIGUSR1) of a batch job requeues. SIGTERM (scancel) to
#    one rank ends the job; an interactive job is never requeued (a notice says how to continue), a batch job whose
#    ranks lost ENVIRONMENT (srun --export=NONE) is (scontrol show job: BatchFlag=1); a warning during start-up ends
#    the run before its first step, and the requeue line says nothing was saved; no scontrol: exit 3
mkdir -p fake && cat > fake/scontrol <<EOS && chmod +x fake/scontrol
#!/bin/sh
echo "\$*" >> $WORK/scontrol.calls
[ "\$1" != show ] || echo "JobId=\$4 JobName=x UserId=root(0) JobState=RUNNING BatchFlag=\${FAKE_BATCHFLAG:-0} Reboot=0"
[ "\$1" != requeue ] || exit \${FAKE_REQUEUE_RC:-0}
EOS
small=(--device "$DEVICE" --train v --val v --batch-size 4 --hidden 8 --no-progress --epochs 2)
job_env=(env SLURM_JOB_ID=4242 ENVIRONMENT=BATCH "PATH=$WORK/fake:$PATH")
MPIDDP_TEST_STEP_DELAY_MS=20 mpirun_np 2 "${job_env[@]}" "$MPIDDP" train "${small[@]}" --out term > term.out 2>&1 &
job=$!
wait_for term/run.json # written when training starts: from there SIGTERM is a stop request
victim=$(rank_pid 1)
[ -n "$victim" ] && kill -TERM "$victim" || fail "SIGTERM to rank 1"
wait $job || { cat term.out; fail "SIGTERM in a batch job: exit $?"; }
grep -q "stopped on request at step" term.out && grep -q "job 4242 not requeued: SIGTERM or SIGINT" term.out ||
  { cat term.out; fail "SIGTERM in a batch job: no stop, or not the 'not requeued' line"; }
[ ! -e scontrol.calls ] && [ -f term/checkpoints/last.h5 ] || fail "SIGTERM: scontrol ran ($(cat scontrol.calls)) or no last.h5"
# SIGUSR2 already pending when rank 1 starts (a warning during start-up): the run ends before its first step
cat > pend.py <<'EOS'
import os, signal, sys
if os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    os.kill(os.getpid(), signal.SIGUSR2)  # pending across exec
os.execv(sys.argv[1], sys.argv[1:])
EOS
expect_rc 0 mpirun_np 2 "${job_env[@]}" "$PY" pend.py "$MPIDDP" train "${small[@]}" --out early
grep -q "stopped on request before training started; nothing saved" <<<"$OUT" &&
  grep -q "job 4242 requeued; no last.h5 was saved, so it starts again" <<<"$OUT" ||
  fail "SIGUSR2 during start-up: $OUT $ERR"
[ "$(cat scontrol.calls)" = "requeue 4242" ] && [ ! -e early/checkpoints/last.h5 ] || fail "start-up stop: scontrol calls $(cat scontrol.calls)"
rm scontrol.calls
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 MPIDDP_TEST_STOP_RANK=1 SLURM_JOB_ID=4242 "PATH=$WORK/fake:$PATH" "$MPIDDP" train "${small[@]}" --out inter
grep -qx "mpiddp train: notice: job 4242 is not a batch job (srun or salloc), so it is not requeued: run it again with --resume auto, it resumes from last.h5" <<<"$ERR" ||
  fail "interactive job: $ERR"
[ "$(cat scontrol.calls)" = "show job -o 4242" ] || fail "interactive job: scontrol calls $(cat scontrol.calls)"
rm scontrol.calls
# the same job given --overwrite: running the same command again would start over (it said: "run the same command with
# --resume auto", which --overwrite refuses as a usage error)
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 MPIDDP_TEST_STOP_RANK=1 SLURM_JOB_ID=4242 "PATH=$WORK/fake:$PATH" "$MPIDDP" train "${small[@]}" --out inter --overwrite
grep -qx "mpiddp train: notice: job 4242 is not a batch job (srun or salloc), so it is not requeued: run it again with --resume auto in place of --overwrite: as submitted it starts over and the saved steps are lost" <<<"$ERR" ||
  fail "interactive job, --overwrite: $ERR"
rm scontrol.calls
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 SLURM_JOB_ID=4242 FAKE_BATCHFLAG=1 "PATH=$WORK/fake:$PATH" "$MPIDDP" train "${small[@]}" --out exportnone
grep -q "job 4242 requeued; it resumes from last.h5" <<<"$OUT" || fail "batch job without ENVIRONMENT: $OUT $ERR"
[ "$(tr '\n' ' ' < scontrol.calls)" = "show job -o 4242 requeue 4242 " ] || fail "batch job without ENVIRONMENT: scontrol calls $(cat scontrol.calls)"
expect_rc 3 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 SLURM_JOB_ID=4242 ENVIRONMENT=BATCH PATH=/nonexistent "$MPIDDP" train "${small[@]}" --out noscontrol
grep -q "NOT requeued: scontrol cannot be run" <<<"$ERR" || fail "no scontrol message: $ERR"

# 6. a requeued job (SLURM_RESTART_COUNT > 0) keeps the progress of its earlier attempt (run.json names the same
#    SLURM_JOB_ID): last.h5 wins over --overwrite and --resume FILE (one notice); an attempt that never saved starts
#    from FILE again (its run.json says so), a run started from another file is still refused
MPIDDP_TEST_STOP_AT_STEP=5 mpirun_np 2 env SLURM_JOB_ID=4343 "$MPIDDP" train "${small[@]}" --out ow >/dev/null
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=4343 SLURM_RESTART_COUNT=1 MPIDDP_TEST_STOP_AT_STEP=8 "$MPIDDP" train "${small[@]}" --out ow --overwrite
grep -q "notice: a requeued job (SLURM_RESTART_COUNT=1) continues from ow/checkpoints/last.h5: --overwrite is not applied" <<<"$ERR" &&
  grep -q "resuming from ow/checkpoints/last.h5 .* step 5" <<<"$ERR" || fail "restart with --overwrite: $ERR"
cp ow/checkpoints/last.h5 start.h5 && cp start.h5 other.h5
MPIDDP_TEST_STOP_AT_STEP=12 mpirun_np 2 env SLURM_JOB_ID=4343 "$MPIDDP" train "${small[@]}" --out rf --resume start.h5 >rf.out 2>&1 ||
  { cat rf.out; fail "a run from --resume start.h5 stopped at step 12"; }
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=4343 SLURM_RESTART_COUNT=1 MPIDDP_TEST_STOP_AT_STEP=14 "$MPIDDP" train "${small[@]}" --out rf --resume start.h5
grep -q "continues from rf/checkpoints/last.h5: --resume start.h5 is not applied" <<<"$ERR" &&
  grep -q "resuming from rf/checkpoints/last.h5 .* step 12" <<<"$ERR" || fail "restart with --resume FILE: $ERR"
rm -r rf && MPIDDP_TEST_STOP_AT_STEP=12 mpirun_np 2 "$MPIDDP" train "${small[@]}" --out rf --resume start.h5 >rf.out 2>&1 ||
  { cat rf.out; fail "a run from --resume start.h5 stopped at step 12 (again)"; }
rm rf/checkpoints/last.h5 # as if killed before its first save
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${small[@]}" --out rf --resume other.h5
grep -q "rf holds a run (run.json) and --resume other.h5 is not one of its checkpoints" <<<"$ERR" || fail "another file: $ERR"
expect_rc 0 mpirun_np 2 env SLURM_RESTART_COUNT=1 "$MPIDDP" train "${small[@]}" --out rf --resume start.h5
grep -q "resuming from start.h5 .* step 8" <<<"$ERR" || fail "restart before a first save: $ERR"
# 7. what a stopped SLURM job's requeue line promises is true for the job's own arguments. The requeue failed (the
#    stand-in scontrol exits 1, or is missing): a job submitted with --overwrite or --resume FILE, resubmitted as it
#    is, would start over (before: "resubmit it, it resumes from last.h5", and the saved steps were lost), so the
#    line says to pass --resume auto in their place; a resubmission with --resume auto does resume
rm -f scontrol.calls
fail_env=(env MPIDDP_TEST_STOP_AT_STEP=5 SLURM_JOB_ID=777 ENVIRONMENT=BATCH FAKE_REQUEUE_RC=1 "PATH=$WORK/fake:$PATH")
expect_rc 1 mpirun_np 2 "${fail_env[@]}" "$MPIDDP" train "${small[@]}" --out rqow --overwrite
[ "$(grep "NOT requeued" <<<"$ERR")" = "mpiddp train: error: job 777 NOT requeued: \`scontrol requeue\` failed (status 1); resubmit it with --resume auto in place of --overwrite: as submitted it starts over and the saved steps are lost" ] ||
  fail "failed requeue of an --overwrite job: $ERR"
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=778 "$MPIDDP" train "${small[@]}" --out rqow --resume auto
grep -q "resuming from rqow/checkpoints/last.h5 .* step 5" <<<"$ERR" || fail "resubmitted with --resume auto: $ERR"
expect_rc 3 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 SLURM_JOB_ID=777 ENVIRONMENT=BATCH PATH=/nonexistent "$MPIDDP" train "${small[@]}" --out rqow3 --overwrite
[ "$(grep "NOT requeued" <<<"$ERR")" = "mpiddp train: error: job 777 NOT requeued: scontrol cannot be run (No such file or directory); resubmit it with --resume auto in place of --overwrite: as submitted it starts over and the saved steps are lost" ] ||
  fail "no scontrol, an --overwrite job: $ERR"
cp rqow3/checkpoints/last.h5 from.h5
expect_rc 1 mpirun_np 2 "${fail_env[@]}" MPIDDP_TEST_STOP_AT_STEP=9 "$MPIDDP" train "${small[@]}" --out rqrf --resume from.h5
[ "$(grep "NOT requeued" <<<"$ERR")" = "mpiddp train: error: job 777 NOT requeued: \`scontrol requeue\` failed (status 1); resubmit it with --resume auto in place of --resume from.h5: as submitted it starts from that file again, not from last.h5" ] ||
  fail "failed requeue of a --resume FILE job: $ERR"
expect_rc 1 mpirun_np 1 "${fail_env[@]}" "$MPIDDP" train "${small[@]}" --out rqra --resume auto
[ "$(grep "NOT requeued" <<<"$ERR")" = "mpiddp train: error: job 777 NOT requeued: \`scontrol requeue\` failed (status 1); resubmit it, it resumes from last.h5" ] ||
  fail "failed requeue of a --resume auto job: $ERR"
expect_rc 1 mpirun_np 1 "${fail_env[@]}" "$MPIDDP" train "${small[@]}" --out rqno
[ "$(grep "NOT requeued" <<<"$ERR")" = "mpiddp train: error: job 777 NOT requeued: \`scontrol requeue\` failed (status 1); resubmit it with --resume auto, it resumes from last.h5" ] ||
  fail "failed requeue of a job without --resume: $ERR"
[ "$(sort -u scontrol.calls)" = "requeue 777" ] || fail "failed requeues: scontrol calls $(cat scontrol.calls)"
# a requeue that succeeds: the requeued attempt (SLURM_RESTART_COUNT=1, the same arguments) continues this job's
# last.h5 (its run.json names job 777) whatever --overwrite says
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 SLURM_JOB_ID=777 ENVIRONMENT=BATCH "PATH=$WORK/fake:$PATH" "$MPIDDP" train "${small[@]}" --out rqok --overwrite
grep -qx "mpiddp train: job 777 requeued; it resumes from last.h5" <<<"$OUT" || fail "requeue of an --overwrite job: $OUT $ERR"
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=777 SLURM_RESTART_COUNT=1 "$MPIDDP" train "${small[@]}" --out rqok --overwrite
grep -qx "mpiddp train: notice: a requeued job (SLURM_RESTART_COUNT=1) continues from rqok/checkpoints/last.h5: --overwrite is not applied" <<<"$ERR" &&
  grep -q "resuming from rqok/checkpoints/last.h5 .* step 5" <<<"$ERR" || fail "requeued attempt of job 777: $ERR"

# 8. a requeued job continues only a last.h5 that an attempt of it saved: RUNDIR holds another run's last.h5 (job
#    899's), job 900 with --overwrite is stopped during start-up, before --overwrite removed it, and requeued. Its
#    requeue line says it starts over, and the requeued attempt does: from step 0, with its own --lr and --epochs
#    (before: "it resumes from last.h5", and attempt 2 continued job 899's run at step 5, with its settings)
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 SLURM_JOB_ID=899 "$MPIDDP" train "${small[@]}" --out other
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=900 ENVIRONMENT=BATCH "PATH=$WORK/fake:$PATH" "$PY" pend.py "$MPIDDP" train "${small[@]}" --out other --overwrite --lr 0.01 --epochs 3
grep -qx "mpiddp train: stopped on request before training started; nothing saved" <<<"$OUT" &&
  grep -qx "mpiddp train: job 900 requeued; the last.h5 there is not this job's, so it starts over (--overwrite)" <<<"$OUT" ||
  fail "start-up stop over another run's last.h5: $OUT $ERR"
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=900 SLURM_RESTART_COUNT=1 "$MPIDDP" train "${small[@]}" --out other --overwrite --lr 0.01 --epochs 3
grep -qx "mpiddp train: notice: a requeued job (SLURM_RESTART_COUNT=1) does not continue from other/checkpoints/last.h5: no attempt of job 900 saved it (other/run.json does not name this job), so --overwrite applies as in the first attempt" <<<"$ERR" &&
  ! grep -q "resuming from" <<<"$ERR" || fail "requeued attempt over another run's last.h5: $ERR"
grep -q "trained 600 samples" <<<"$OUT" && [ -z "$(awk -F, 'NR>1 && ($2<25 || ($5!="" && $5!=0.01))' other/metrics.csv)" ] &&
  [ "$(awk -F, 'NR>1 && $6!=""' other/metrics.csv | wc -l)" = 3 ] || fail "attempt 2 did not start over: $OUT $(cat other/metrics.csv)"
qgrep '"job_id":	"900"' other/run.json || fail "attempt 2: run.json $(cat other/run.json)"
# with --resume FILE: the requeued attempt starts from FILE again, not from job 899's last.h5
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=8 SLURM_JOB_ID=899 "$MPIDDP" train "${small[@]}" --out other2
cp other2/checkpoints/last.h5 other2/checkpoints/from.h5
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=12 SLURM_JOB_ID=899 "$MPIDDP" train "${small[@]}" --out other2 --resume auto
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=901 ENVIRONMENT=BATCH "PATH=$WORK/fake:$PATH" "$PY" pend.py "$MPIDDP" train "${small[@]}" --out other2 --resume other2/checkpoints/from.h5
grep -qx "mpiddp train: job 901 requeued; the last.h5 there is not this job's, so it starts from other2/checkpoints/from.h5 (--resume)" <<<"$OUT" ||
  fail "start-up stop of a --resume FILE job over another run's last.h5: $OUT $ERR"
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=901 SLURM_RESTART_COUNT=1 "$MPIDDP" train "${small[@]}" --out other2 --resume other2/checkpoints/from.h5
grep -q "resuming from other2/checkpoints/from.h5 .* step 8" <<<"$ERR" || fail "requeued --resume FILE attempt: $ERR"
# with neither --resume nor --overwrite: the first attempt would have been refused there, and so would the requeued
# one (exit 2), so the job is not requeued (before: it was, only to be refused; earlier still the requeue line said "it
# resumes from last.h5", and attempt 2 continued job 899's run at step 5); the line names the choices, exit 1. An
# attempt that runs all the same is refused and leaves job 899's run as it was
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 SLURM_JOB_ID=899 "$MPIDDP" train "${small[@]}" --out other3
cp other3/metrics.csv m3.csv && cp other3/checkpoints/last.h5 l3.h5 && cp other3/run.json r3.json
rm -f scontrol.calls
expect_rc 1 mpirun_np 2 env SLURM_JOB_ID=902 ENVIRONMENT=BATCH "PATH=$WORK/fake:$PATH" "$PY" pend.py "$MPIDDP" train "${small[@]}" --out other3 --lr 0.01 --epochs 3
grep -qx "mpiddp train: stopped on request before training started; nothing saved" <<<"$OUT" &&
  [ "$(grep "NOT requeued" <<<"$ERR")" = "mpiddp train: error: job 902 NOT requeued: a requeued attempt would be refused (exit 2); the last.h5 there is not this job's: resubmit it with another --out, with --overwrite to remove that run's files, or with --resume auto to continue that run" ] ||
  fail "start-up stop of a job without --resume or --overwrite over another run's last.h5: $OUT $ERR"
[ ! -e scontrol.calls ] || fail "a requeue that would be refused was made: scontrol calls $(cat scontrol.calls)"
expect_rc 2 mpirun_np 2 env SLURM_JOB_ID=902 SLURM_RESTART_COUNT=1 "$MPIDDP" train "${small[@]}" --out other3 --lr 0.01 --epochs 3
grep -q "other3 holds a run (run.json): continue it with --resume auto" <<<"$ERR" && ! grep -q "resuming from" <<<"$ERR" ||
  fail "requeued attempt without --resume or --overwrite over another run's last.h5: $OUT $ERR"
cmp -s m3.csv other3/metrics.csv && cmp -s l3.h5 other3/checkpoints/last.h5 && cmp -s r3.json other3/run.json ||
  fail "the refused requeued attempt changed job 899's run: $(cat other3/metrics.csv)"
pass "dead rank, stalled rank, NaN, full and read-only run directory, stops and restarts in a SLURM job, the requeue line true for the job's arguments, a requeue continues only its own last.h5"
