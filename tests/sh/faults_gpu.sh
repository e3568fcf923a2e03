# Faults on the CUDA path (a GPU, or the host emulator with its NCCL fault injection): more ranks on a node
# than devices is refused on every rank; NCCL init failing on one rank ends every rank with that rank's
# error (no hang); a stalled rank and an allreduce that never completes are reported within
# --collective-timeout (the communicator is aborted); a dead rank ends the job with last.h5 intact.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 3000 --dim 16 --classes 3 --shards 2 --seed 1
synth --out v --samples 200 --dim 16 --classes 3 --shards 1 --seed 1 --first-id 100000
base=(--train t --val v --batch-size 8 --hidden 32 --no-progress --device "$DEVICE")
emu=$([ -n "${MPIDDP_CUDA_PLUGIN:-}" ] && case "$MPIDDP_CUDA_PLUGIN" in *cudaemu*) echo 1 ;; esac || true)
VAL_DIR=v
timed() { local start=$(date +%s); set +e; "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"; RC=$?; set -e; TOOK=$(( $(date +%s) - start ));
          OUT=$(cat "$WORK/out.txt"); ERR=$(cat "$WORK/err.txt"); }

# 1. more ranks on the node than visible devices: one clear line naming node, ranks and devices; exit 1
if [ -n "$emu" ]; then
  timed env MPIDDP_EMU_DEVICES=1 mpirun -np 2 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 1 --out toomany
  [ "$RC" = 1 ] || fail "2 ranks on 1 device: exit $RC ($ERR)"
  printf '%s' "$ERR" | qgrep "node 0 (.*) runs 2 ranks (0,1) but sees 1 CUDA device(s) (CUDA_VISIBLE_DEVICES=unset)" || fail "ranks per GPU: $ERR"
  [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "expected one error line: $ERR"
  [ ! -e toomany ] || fail "a refused run left a run directory"
fi

# 2. NCCL init fails on rank 1 only: every rank ends non-zero quickly with rank 1's error, long before the init
#    timeout (the others stop waiting when rank 1 tells them; they waited for the whole timeout, 300 s by default)
if [ -n "$emu" ]; then
  timed env MPIDDP_EMU_NCCL_FAULT=init:1 MPIDDP_NCCL_INIT_TIMEOUT=120 timeout -k 5 150 mpirun -np 4 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 1 --out initfail
  [ "$RC" = 1 ] || fail "NCCL init failure: exit $RC ($ERR)"
  [ "$TOOK" -le 20 ] || fail "NCCL init failure took $TOOK s (the init timeout is 120 s)"
  printf '%s' "$ERR" | qgrep "error: NCCL error in ncclCommInitRankConfig (rank 1 of 4, device 1): .*injected" || fail "init failure message: $ERR"
  # a rank that never joins (no failure to tell): every init waits out MPIDDP_NCCL_INIT_TIMEOUT, then one line, exit 1
  timed env MPIDDP_EMU_NCCL_FAULT=initlate:2 MPIDDP_NCCL_INIT_TIMEOUT=3 timeout -k 5 120 mpirun -np 4 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 1 --out initlate
  [ "$RC" = 1 ] || fail "NCCL init never joined: exit $RC ($ERR)"
  [ "$TOOK" -le 60 ] || fail "NCCL init never joined: took $TOOK s (the init timeout is 3 s)"
  printf '%s' "$ERR" | qgrep "error: NCCL communicator init on rank 0 (.*, device 0) did not complete in 3 s: a peer rank failed or never joined" ||
    fail "init timeout message: $ERR"
  [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "init timeout: expected one error line: $ERR"
fi

# 3. an allreduce that never completes on rank 1 (its 5th): every rank reports within the timeout
if [ -n "$emu" ]; then
  timed env MPIDDP_EMU_NCCL_FAULT=hang:1:5 mpirun -np 4 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 5 --collective-timeout 5 --out hang
  [ "$RC" != 0 ] || fail "a hung allreduce exited 0"
  [ "$TOOK" -le 30 ] || fail "a hung allreduce took $TOOK s to stop (timeout 5 s)"
  printf '%s' "$ERR" | qgrep "collective timeout: rank [0-9] waited [0-9]* s in the gradient allreduce at step [0-9]* (--collective-timeout 5)" ||
    fail "no timeout report for the hung allreduce: $ERR"
fi

# 3b. an allreduce that fails on rank 1 (its 5th: an asynchronous NCCL error, as a lost peer gives): rank 1 names
#     the wait it was in and the error, and the job ends non-zero at once (no --collective-timeout to wait out)
if [ -n "$emu" ]; then
  timed env MPIDDP_EMU_NCCL_FAULT=error:1:5 timeout -k 5 120 mpirun -np 2 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 5 --out nccl_error
  [ "$RC" != 0 ] && [ "$RC" != 124 ] || fail "a failed allreduce: exit $RC ($ERR)"
  [ "$TOOK" -le 60 ] || fail "a failed allreduce took $TOOK s to stop"
  printf '%s' "$ERR" | qgrep "rank 1 in the gradient allreduce at step [0-9]*: NCCL asynchronous error: .*injected fault: allreduce 5 fails on rank 1" ||
    fail "no report of the failed allreduce: $ERR"
fi

# 4. a stalled rank (SIGSTOP): the others report the NCCL wait and name the silent rank
stalled_rank "${base[@]}"
grep -q "collective timeout: rank [013] waited [0-9]* s in .* at step [0-9]* (--collective-timeout 5); missing: rank 2 silent" stall.err ||
  { cat stall.err; fail "no report naming the wait and rank 2"; }

# 5. a dead rank (SIGKILL) after the first mid-epoch checkpoint: the job ends non-zero, last.h5 loads
dead_rank "${base[@]}" --epochs 50
pass "ranks per GPU refused, NCCL init failure, hung allreduce, stalled rank, dead rank on $DEVICE"
