# Multi-rank behaviour with real ranks: rank 0 alone reads shard metadata (np 4); a collective metric
# logged on rank 0 only stops every rank with an error naming it (np 2 and 4, bounded time); `env`
# reports one line per rank; the user-model example trains through the public header.
. "$(dirname "$0")/lib.sh"
synth --out d --samples 200 --shards 4 --dim 6 --classes 3
mpirun_np 4 "$TESTTOOL" meta d || fail "metadata / mapping counters"
for np in 2 4; do
  start=$(date +%s)
  timeout 20 mpirun -np $np --oversubscribe "$TESTTOOL" mismatch || fail "mismatch np $np"
  [ $(( $(date +%s) - start )) -lt 10 ] || fail "mismatch detection at np $np took >= 10 s"
done
expect_rc 0 mpirun_np 2 "$MPIDDP" env
[ "$(printf '%s\n' "$OUT" | grep -c '^rank=')" = 2 ] || fail "env: expected 2 rank lines: $OUT"
printf '%s\n' "$OUT" | qgrep "rank=1 size=2 local_rank=1 local_size=2 node=0 nodes=1" || fail "env topology: $OUT"
# a process that srun's variables call rank 2 of 4 but that MPI started alone: a clear error, exit 1
expect_rc 1 env SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=2 "$MPIDDP" env
printf '%s' "$ERR" | qgrep "srun started this process as rank 2 of 4 but MPI says rank 0 of 1: launch with .srun --mpi=pmix." || fail "cross-check: $ERR"
synth --out val --samples 80 --shards 1 --dim 6 --classes 3 --first-id 100000
mpirun_np 2 "$EXAMPLE" d val user_run
acc=$(csv_last user_run/metrics.csv val/acc)
awk -v a="$acc" 'BEGIN{exit !(a >= 0.9)}' || fail "user model val/acc $acc"
pass "metadata on rank 0 only, mismatch detected, env, user model (val/acc $acc)"
