# Faults on the CUDA path (a GPU, or the host emulator with its NCCL fault injection): more ranks on a node
# than devices is refused on every rank; NCCL init failing on one rank ends every rank with that rank's
# error (no hang); a stalled rank and an allreduce that never completes are reported within
# --collective-timeout (the communicator is aborted); a dead rank ends the job with last.h5 intact.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 3000 --dim 16 --classes 3 --shards 2 --seed 1
synth --out v --samples 200 --dim 16 --classes 3 --shards 1 --seed 1 --first-id 100000
base=(--train t --val v --batch-size 8 --hidden 32 --no-progress --device "$DEVICE")
emu=$([ -n "${MPIDDP_CUDA_PLUGIN:-}" ] && case "$MPIDDP_CUDA_PLUGIN" in *cudaemu*) echo 1 ;; esac || true)
rank_pid() { # pid of MPI rank $1 of a running job
  for p in /proc/[0-9]*; do
    { tr '\0' '\n' < $p/environ | grep -qx "OMPI_COMM_WORLD_RANK=$1" &&
      tr '\0' ' ' < $p/cmdline | grep -q "$MPIDDP train" && { basename $p; return; }; } 2>/dev/null
  done
}
wait_for() { for _ in $(seq 300); do [ -e "$1" ] && return 0; sleep 0.1; done; fail "timed out waiting for $1"; }
timed() { local start=$(date +%s); set +e; "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"; RC=$?; set -e; TOOK=$(( $(date +%s) - start ));
          OUT=$(cat "$WORK/out.txt"); ERR=$(cat "$WORK/err.txt"); }

# 1. more ranks on the node than visible devices: one clear line naming node, ranks and devices; exit 1
if [ -n "$emu" ]; then
  timed env MPIDDP_EMU_DEVICES=1 mpirun -np 2 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 1 --out toomany
  [ "$RC" = 1 ] || fail "2 ranks on 1 device: exit $RC ($ERR)"
  printf '%s' "$ERR" | grep -q "node 0 (.*) runs 2 ranks (0,1) but sees 1 CUDA device(s) (CUDA_VISIBLE_DEVICES=unset)" || fail "ranks per GPU: $ERR"
  [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "expected one error line: $ERR"
  [ ! -e toomany ] || fail "a refused run left a run directory"
fi

# 2. NCCL init fails on rank 1 only: every rank ends non-zero quickly with rank 1's error
if [ -n "$emu" ]; then
  timed env MPIDDP_EMU_NCCL_FAULT=init:1 MPIDDP_NCCL_INIT_TIMEOUT=5 mpirun -np 4 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 1 --out initfail
  [ "$RC" = 1 ] || fail "NCCL init failure: exit $RC ($ERR)"
  [ "$TOOK" -le 30 ] || fail "NCCL init failure took $TOOK s"
  printf '%s' "$ERR" | grep -q "error: NCCL error in ncclCommInitRankConfig (rank 1 of 4, device 1): .*injected" || fail "init failure message: $ERR"
fi

# 3. an allreduce that never completes on rank 1 (its 5th): every rank reports within the timeout
if [ -n "$emu" ]; then
  timed env MPIDDP_EMU_NCCL_FAULT=hang:1:5 mpirun -np 4 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 5 --collective-timeout 5 --out hang
  [ "$RC" != 0 ] || fail "a hung allreduce exited 0"
  [ "$TOOK" -le 30 ] || fail "a hung allreduce took $TOOK s to stop (timeout 5 s)"
  printf '%s' "$ERR" | grep -q "collective timeout: rank [0-9] waited [0-9]* s in the gradient allreduce at step [0-9]* (--collective-timeout 5)" ||
    fail "no timeout report for the hung allreduce: $ERR"
fi

# 4. a stalled rank (SIGSTOP): the others report the NCCL wait and name the silent rank
mpirun -np 4 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 500 --collective-timeout 5 --out stall > stall.out 2> stall.err &
job=$!
wait_for stall/progress/rank3
sleep 1
victim=$(rank_pid 2)
[ -n "$victim" ] || fail "rank 2 not found"
kill -STOP "$victim"
start=$(date +%s)
set +e; wait $job; rc=$?; set -e
took=$(( $(date +%s) - start ))
[ "$rc" != 0 ] || fail "stalled job exited 0"
[ "$took" -le 20 ] || fail "stalled job took $took s to stop (timeout 5 s)"
grep -q "collective timeout: rank [013] waited [0-9]* s in .* at step [0-9]* (--collective-timeout 5); missing: rank 2 silent" stall.err ||
  { cat stall.err; fail "no report naming the wait and rank 2"; }

# 5. a dead rank (SIGKILL) after the first mid-epoch checkpoint: the job ends non-zero, last.h5 loads
mpirun -np 4 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 50 --ckpt-every-steps 20 --out dead > dead.out 2>&1 &
job=$!
wait_for dead/checkpoints/last.h5
sleep 0.5
victim=$(rank_pid 1)
[ -n "$victim" ] || fail "rank 1 not found (job already finished?)"
kill -9 "$victim"
start=$(date +%s)
set +e; wait $job; rc=$?; set -e
[ "$rc" != 0 ] || fail "job survived a dead rank"
[ $(( $(date +%s) - start )) -le 30 ] || fail "dead rank: job took more than 30 s to end"
"$MPIDDP" eval --device "$DEVICE" --ckpt dead/checkpoints/last.h5 --data v > /dev/null || fail "last.h5 not loadable after a dead rank"
pass "ranks per GPU refused, NCCL init failure, hung allreduce, stalled rank, dead rank on $DEVICE"
