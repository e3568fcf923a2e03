# SLURM, against a real two-node cluster on this machine (slurm/local-cluster.sh): srun --mpi=pmix launch
# and topology, training under srun, an sbatch job preempted with SIGUSR1 mid-epoch that checkpoints,
# requeues itself, resumes and ends bitwise identical to an uninterrupted run, the generated script (a job
# name with a space) passing `sbatch --test-only`, scancel of a batch job saving last.h5 and ending it without
# a requeue, mpirun inside an allocation (a batch job's mpirun ranks stopped and requeued by scancel --signal=USR1),
# and an interactive srun job stopped by SIGUSR2: saved, not requeued,
# exit 0; a batch job whose srun passes no ENVIRONMENT is requeued. (The requeue decisions without a cluster, and exit code 3 without scontrol: faults.sh.)
. "$(dirname "$0")/lib.sh"
command -v slurmctld >/dev/null && command -v munged >/dev/null || { echo "SKIP: slurm-wlm/munge not installed"; exit 77; }
export MPIDDP_SLURM_DIR=/var/tmp/mpiddp-slurm-test   # not under /tmp: each node gets a private /tmp
export MPIDDP_SLURM_PORT=17817                         # apart from a demo cluster on the default ports
SL="$SRC/slurm/local-cluster.sh"
$SL reset >/dev/null 2>&1 || true
# what a cluster killed mid-job leaves in the host's /tmp: PMIx directories of the job ids this test's jobs get
# (Slurm's PMIx plugin names them by uid, job and step only); each node's private /tmp must keep them out of the
# way. Only the ones made here are removed.
decoys=()
for j in 1 2 3 4 5 6 7 8; do
  dd=/tmp/spmix_appdir_$(id -u)_$j.0
  [ -e "$dd" ] || { mkdir "$dd" && decoys+=("$dd"); }
done
$SL start
trap '$SL stop >/dev/null 2>&1; $SL reset >/dev/null 2>&1; [ ${#decoys[@]} = 0 ] || rmdir "${decoys[@]}"' EXIT
eval "$($SL env)"
# the job runs on both simulated nodes: binaries and data outside /tmp (node2's /tmp is private)
J=/var/tmp/mpiddp-slurm-test-work
rm -rf $J && mkdir -p $J && cp "$MPIDDP" $J/mpiddp && cd $J
wait_job() { # wait_job ID STATE...: until the job reaches one of the states (120 s)
  local id=$1; shift
  for _ in $(seq 240); do
    st=$(scontrol show job "$id" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2)
    for s in "$@"; do [ "$st" = "$s" ] && return 0; done
    sleep 0.5
  done
  scontrol show job "$id" >&2; fail "job $id did not reach $* (state $st)"
}

# 1. srun -N2 -n4 --mpi=pmix: 2 nodes, local ranks 0..1 on each, job facts from PMIx
timeout 120 srun -N2 -n4 --mpi=pmix ./mpiddp env > env.txt
cat env.txt
[ "$(grep -c '^rank=' env.txt)" = 4 ] || fail "env: expected 4 ranks"
for r in 0 1 2 3; do
  grep -q "^rank=$r size=4 local_rank=$((r % 2)) local_size=2 node=$((r / 2)) nodes=2 .* launcher=pmix" env.txt || fail "env rank $r topology"
done

# 1b. plain srun without --mpi=pmix must fail, not run 2 independent singletons (Open MPI refuses itself;
#     with an MPI that starts singletons, mpiddp's rank/size cross-check says the same)
set +e; timeout 60 srun -N1 -n2 ./mpiddp env > plain.out 2> plain.err; rc=$?; set -e
[ $rc != 0 ] || fail "plain srun: expected a failure"
grep -qE "srun started this process as rank [01] of 2 but MPI says rank 0 of 1|direct launched using \"srun\"" plain.err ||
  { cat plain.err; fail "plain srun: no clear message"; }

# 2. training under srun on 2 nodes
./mpiddp synth --out d/t --samples 6000 --dim 16 --classes 3 --shards 4 --seed 2 >/dev/null
./mpiddp synth --out d/v --samples 300 --dim 16 --classes 3 --shards 1 --seed 2 --first-id 99999 >/dev/null
args=(--train d/t --val d/v --epochs 3 --batch-size 8 --log-every 20 --no-progress --device cpu)
timeout 300 srun -N2 -n4 --mpi=pmix ./mpiddp train "${args[@]}" --out ref > ref.txt
grep -q "run directory: $J/ref" ref.txt || fail "srun training did not finish"
$PY -c "import json; j=json.load(open('ref/run.json')); assert j['num_nodes'] == 2 and j['world_size'] == 4 and j['launcher'] == 'pmix', j"

# 3. sbatch, SIGUSR1 mid-epoch, checkpoint, requeue, resume: bitwise equal to the uninterrupted run
./mpiddp slurm-script --nodes 2 --ntasks-per-node 2 --time 00:20:00 --job-name 'mpiddp test' --output job-%j.log --mpiddp $J/mpiddp -- "${args[@]}" --out pre > job.sh
sbatch --test-only job.sh 2> testonly.txt || { cat testonly.txt; fail "sbatch --test-only rejected the generated script"; }
grep -q "to start at" testonly.txt || fail "sbatch --test-only: $(cat testonly.txt)"
jid=$(MPIDDP_TEST_STEP_DELAY_MS=20 sbatch --parsable job.sh)   # ~11 s of steps: time to be signalled
wait_job $jid RUNNING
scontrol show job $jid | qgrep "JobName=mpiddp test" || fail "job name: $(scontrol show job $jid | grep JobName)"
for _ in $(seq 240); do [ -f pre/metrics.csv ] && [ "$(wc -l < pre/metrics.csv)" -ge 3 ] && break; sleep 0.25; done
scancel --signal=USR1 $jid
wait_job $jid PENDING
grep -q "stopped on request at step" job-$jid.log || { cat job-$jid.log; fail "no stop message"; }
grep -q "job $jid requeued" job-$jid.log || { cat job-$jid.log; fail "not requeued"; }
$PY -c "import h5py,sys; f=h5py.File('pre/checkpoints/last.h5','r'); s=int(f.attrs['optim_step_in_epoch']); print('saved after optimizer step', s, 'of epoch', int(f.attrs['epoch'])); sys.exit(s == 0)" ||
  fail "the preemption checkpoint is not mid-epoch"
scontrol update JobId=$jid StartTime=now   # Slurm holds a requeued job ~2 minutes; as admin, release it
wait_job $jid COMPLETED
grep -q "restart 1" job-$jid.log || fail "the job did not restart"
grep -q "resuming from" job-$jid.log || fail "the requeued job did not resume"
$PY "$SRC/tests/py/compare_ckpt.py" ref/checkpoints/last.h5 pre/checkpoints/last.h5 0 || fail "requeued run differs from the uninterrupted one"

# 3b. scancel (SIGTERM) of a running batch job: last.h5 saved mid-epoch, and the job stays cancelled (no requeue)
./mpiddp slurm-script --nodes 1 --ntasks-per-node 2 --time 00:20:00 --output job-%j.log --mpiddp $J/mpiddp -- "${args[@]}" --out can > can.sh
jc=$(MPIDDP_TEST_STEP_DELAY_MS=20 sbatch --parsable can.sh)
wait_job $jc RUNNING
for _ in $(seq 240); do [ -f can/metrics.csv ] && [ "$(wc -l < can/metrics.csv)" -ge 3 ] && break; sleep 0.25; done
scancel $jc
wait_job $jc CANCELLED PENDING REQUEUED  # COMPLETING first, while the ranks save
sleep 1                                  # a requeue by the ranks would come at once
scontrol show job $jc | qgrep "JobState=CANCELLED" && scontrol show job $jc | qgrep "Restarts=0" ||
  { cat job-$jc.log; scontrol show job $jc; fail "scancel: the job requeued itself"; }
grep -q "stopped on request at step" job-$jc.log && grep -q "job $jc not requeued: SIGTERM or SIGINT" job-$jc.log ||
  { cat job-$jc.log; fail "scancel: no stop, or not the 'not requeued' line"; }
[ -f can/checkpoints/last.h5 ] || fail "scancel: no last.h5"

# 3c. a batch job whose srun passes only SLURM_* variables and the ones it names (--export=VAR: no ENVIRONMENT in the
#     ranks) is still a batch job: the warning requeues it (rank 0 asks scontrol: BatchFlag=1)
printf '#!/bin/bash\nsrun --mpi=pmix --export=MPIDDP_TEST_STEP_DELAY_MS=20 %s/mpiddp train %s --out en --resume auto\n' "$J" "${args[*]}" > en.sh
je=$(sbatch --parsable -N1 -n2 -o job-%j.log en.sh)
wait_job $je RUNNING
for _ in $(seq 240); do [ -f en/metrics.csv ] && [ "$(wc -l < en/metrics.csv)" -ge 3 ] && break; sleep 0.25; done
scancel --signal=USR1 $je
wait_job $je PENDING
grep -q "job $je requeued; it resumes from last.h5" job-$je.log || { cat job-$je.log; fail "--export=NONE batch job: not requeued"; }
scancel $je

# 4. mpirun inside an allocation (2 nodes)
jm=$(sbatch --parsable -N2 -n4 -o mpirun-%j.log --wrap "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 4 $J/mpiddp env")
wait_job $jm COMPLETED FAILED
[ "$(grep -c '^rank=.* nodes=2 ' mpirun-$jm.log)" = 4 ] || { cat mpirun-$jm.log; fail "mpirun inside sbatch"; }
# 4b. training under mpirun inside a batch job (1 node, so no rank runs in a job step of its own), signalled with
#     scancel --signal=USR1: the ranks see it, stop at a step boundary, save, and rank 0 requeues the job
printf '#!/bin/bash\nexport OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\nmpirun -np 2 %s/mpiddp train %s --out mj --resume auto\n' "$J" "${args[*]}" > mj.sh
jj=$(MPIDDP_TEST_STEP_DELAY_MS=20 sbatch --parsable -N1 -n2 -o job-%j.log mj.sh)
wait_job $jj RUNNING
for _ in $(seq 240); do [ -f mj/metrics.csv ] && [ "$(wc -l < mj/metrics.csv)" -ge 3 ] && break; sleep 0.25; done
scancel --signal=USR1 $jj
wait_job $jj PENDING
grep -q "stopped on request at step" job-$jj.log && grep -q "job $jj requeued; it resumes from last.h5" job-$jj.log ||
  { cat job-$jj.log; fail "mpirun inside sbatch: SIGUSR1 did not stop and requeue the job"; }
[ -f mj/checkpoints/last.h5 ] || fail "mpirun inside sbatch: no last.h5"
scancel $jj

# 5. an interactive job (srun, no sbatch) stopped by SIGUSR2 (treated as SIGUSR1): last.h5 saved, not requeued
#    (Slurm cannot requeue it), a notice says how to continue, exit 0
MPIDDP_TEST_STEP_DELAY_MS=20 timeout 120 srun -N1 -n2 --mpi=pmix -J mpiddp-interactive ./mpiddp train "${args[@]}" --out inter > in.out 2> in.err &
ji=$!
for _ in $(seq 240); do [ -f inter/metrics.csv ] && [ "$(wc -l < inter/metrics.csv)" -ge 3 ] && break; sleep 0.25; done
scancel --signal=USR2 "$(squeue -h -n mpiddp-interactive -o %i)"
set +e; wait $ji; rc=$?; set -e
[ $rc = 0 ] || { cat in.out in.err; fail "interactive job stopped by SIGUSR2: exit $rc"; }
grep -q "stopped on request at step" in.out && grep -q "notice: job [0-9]* is not a batch job (srun or salloc), so it is not requeued: run it again with --resume auto, it resumes from last.h5" in.err ||
  { cat in.out in.err; fail "interactive job: no stop, or no notice"; }
[ -f inter/checkpoints/last.h5 ] || fail "interactive job: no last.h5"
# 6. the scaling benchmark script, in CPU mode on this cluster (when the benchmarks are built)
if [ -x "${BENCH_DIR:-}/bench_train" ]; then
  mkdir -p b/benchmarks && cp ./mpiddp b/ && cp "$BENCH_DIR/bench_train" "$BENCH_DIR/bench_allreduce" b/benchmarks/
  js=$(BUILD=$J/b OUT=$J/scal STEPS=3 HIDDEN=64 sbatch --parsable -N2 --ntasks-per-node=1 -o scal-%j.log "$SRC/benchmarks/slurm/scaling.sbatch")
  wait_job $js COMPLETED FAILED
  [ "$(grep -c '^mpiddp,' scal/weak.csv 2>/dev/null)" = 2 ] && [ -s scal/allreduce-2.csv ] || { cat scal-$js.log; fail "scaling.sbatch"; }
fi
pass "srun launch, 2-node training, preemption + requeue bitwise exact, --test-only, scancel ends a batch job, mpirun in allocation (and its SIGUSR1 requeue), interactive SIGUSR2, batch job under srun --export"
