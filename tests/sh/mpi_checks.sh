# Multi-rank behaviour with real ranks: rank 0 alone reads shard metadata (np 4); a collective metric
# logged on rank 0 only stops every rank with an error naming it (np 2 and 4, bounded time), also when an
# allocation of that check fails on one rank; a metric with no count anywhere is nan, not 0; `env`
# reports one line per rank; the user-model example trains through the public header and refuses a used RUN_DIR
# in its own words; a resume through the C API with other AdamW betas or eps says so in one notice.
. "$(dirname "$0")/lib.sh"
synth --out d --samples 200 --shards 4 --dim 6 --classes 3
mpirun_np 4 "$TESTTOOL" meta d || fail "metadata / mapping counters"
for np in 2 4; do
  start=$(date +%s)
  timeout 20 mpirun -np $np --oversubscribe "$TESTTOOL" mismatch || fail "mismatch np $np"
  [ $(( $(date +%s) - start )) -lt 10 ] || fail "mismatch detection at np $np took >= 10 s"
done
# the mismatch explained with an allocation failing on one rank (each metrics.c site the check reaches, on either
# rank): every rank ends with an error they share, in bounded time (a rank that skipped the name gathers left the
# others waiting in MPI_Allgatherv for ever)
MPIDDP_TEST_ALLOC_SITES=$WORK/msites mpirun_np 2 "$TESTTOOL" mismatch >/dev/null || fail "mismatch (listing sites)"
sites=$(cat msites.r0 msites.r1 | grep '^train/metrics\.c:' | sort -u)
[ "$(printf '%s\n' "$sites" | wc -l)" -ge 4 ] || fail "too few metrics.c allocation sites listed: $sites"
for site in $sites; do
  for rank in 0 1; do
    timeout -k 5 20 mpirun -np 2 --oversubscribe env MPIDDP_TEST_FAIL_ALLOC="$site" MPIDDP_TEST_FAIL_ALLOC_RANK=$rank \
      "$TESTTOOL" mismatch >/dev/null 2>"$WORK/sweep_err.txt" ||
      fail "mismatch with $site failing on rank $rank: rc $? $(cat "$WORK/sweep_err.txt")"
  done
done
# a metric no rank logged a count for is nan in the global row (it was 0, which a --monitor in min mode took for the
# best value), and absent from the local rows of ranks with a count of 0 (np 1, 2 and 4); the decision on it says
# that no rank logged a value (it blamed a NaN or Inf in the validation data)
for np in 1 2 4; do
  mpirun_np $np "$TESTTOOL" zerocount || fail "zerocount np $np"
done
expect_rc 0 mpirun_np 2 "$MPIDDP" env
[ "$(printf '%s\n' "$OUT" | grep -c '^rank=')" = 2 ] || fail "env: expected 2 rank lines: $OUT"
printf '%s\n' "$OUT" | qgrep "rank=1 size=2 local_rank=1 local_size=2 node=0 nodes=1" || fail "env topology: $OUT"
# rank 0 out of memory for the ranks' lines: one line, every rank exits 1 (it gathered into NULL)
site="app/cmd_env.c:$(grep -n 'ddp_calloc((size_t)t->size' "$SRC/app/cmd_env.c" | cut -d: -f1)"
expect_rc 1 timeout 30 mpirun -np 2 --oversubscribe -x MPIDDP_TEST_FAIL_ALLOC="$site" "$MPIDDP" env --device cpu
[ "$(grep -c 'error:' <<<"$ERR")" = 1 ] && grep -q "mpiddp env: error: out of memory for 2 ranks' lines" <<<"$ERR" ||
  fail "env, rank 0 out of memory: $ERR"
# a process that srun's variables call rank 2 of 4 but that MPI started alone: a clear error, exit 1
expect_rc 1 env SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=2 "$MPIDDP" env
printf '%s' "$ERR" | qgrep "srun started this process as rank 2 of 4 but MPI says rank 0 of 1: launch with .srun --mpi=pmix." || fail "cross-check: $ERR"
synth --out val --samples 80 --shards 1 --dim 6 --classes 3 --first-id 100000
mpirun_np 2 "$EXAMPLE" d val user_run
acc=$(csv_last user_run/metrics.csv val/acc)
awk -v a="$acc" 'BEGIN{exit !(a >= 0.9)}' || fail "user model val/acc $acc"
# the same RUN_DIR again: refused (exit 2) naming RUN_DIR and what the example takes, not the CLI's options
expect_rc 2 mpirun_np 2 "$EXAMPLE" d val user_run
grep -q "^user_model: RUN_DIR user_run holds another run's files .*give a new RUN_DIR" <<<"$ERR" ||
  fail "user model into a used RUN_DIR: $ERR"
! grep -E -- '--(out|resume|overwrite)' <<<"$ERR" || fail "user model's refusal names options it does not take"
# an allocation failing on rank 1 alone, in the example (a C-API program): the job ends within 60 s, exit 1, with
# the line. ex_fail FILE TEXT LINE: the first allocation on the first line of FILE holding TEXT fails
ex_fail() {
  local site rc
  site="$(basename "$(dirname "$1")")/$(basename "$1"):$(grep -n -m1 -F "$2" "$SRC/$1" | cut -d: -f1 || true)"
  [[ $site =~ :[0-9]+$ ]] || fail "no line holding '$2' in $1"
  set +e
  MPIDDP_TEST_FAIL_ALLOC=$site MPIDDP_TEST_FAIL_ALLOC_RANK=1 timeout 60 mpirun -np 2 --oversubscribe \
    -x MPIDDP_TEST_FAIL_ALLOC -x MPIDDP_TEST_FAIL_ALLOC_RANK "$EXAMPLE" d val user_run_fail >/dev/null 2>err.txt
  rc=$?
  set -e
  [ $rc = 1 ] || fail "user model, $site on rank 1: exit $rc (124: a hang)"
  qgrep -x "$3" err.txt || fail "user model, $site on rank 1: no '$3' in: $(cat err.txt)"
  rm -rf user_run_fail
}
# the open-shard table in ddp_dataset_open: agreed (it was rank 1's alone, and the job hung: rank 0 went on into
# ddp_train while rank 1 finalized)
ex_fail io/shard_cache.c "lru_node *nodes = ddp_calloc((size_t)ds->nshards" \
  "user_model: d: out of memory for the open-shard table of [0-9]* shards (.* bytes at io/shard_cache.c:[0-9]*)"
# a metric's name in rank 1's accumulator: rank 1's own error, which the example now prints (on rank 0 only, it
# left nothing but mpirun's banner)
ex_fail mpi_ddp/train/metrics.c "st = ddp_row_set(&m->acc_sum, name, sum)" \
  "user_model: rank 1: out of memory for metric '[a-z_/]*' (.* bytes at train/metrics.c:[0-9]*)"
# AdamW's beta1, beta2 and eps (ddp_train_config only) are recorded in checkpoints: a resume through the C API with
# the same values says nothing; with others it continues with one notice naming both values of each that changed
# (as --weight-decay's), begun "ddp_train: notice:" (a C-API program is not the mpiddp train command); a checkpoint
# without the attributes (an older mpiddp): no notice
mpirun_np 2 "$TESTTOOL" adamw d val adamw 0.9 0.999 1e-8 1 >/dev/null 2>&1 || fail "adamw: first run"
$PY -c "import h5py; a = h5py.File('adamw/checkpoints/last.h5', 'r').attrs
assert (float(a['adamw_beta1']), float(a['adamw_beta2']), float(a['adamw_eps'])) == (0.9, 0.999, 1e-8), dict(a)" ||
  fail "adamw: the checkpoint does not record beta1, beta2 and eps"
expect_rc 0 mpirun_np 2 "$TESTTOOL" adamw d val adamw 0.9 0.999 1e-8 2
printf '%s' "$ERR" | qgrep "AdamW" && fail "adamw: a resume with the same values: a notice: $ERR"
expect_rc 0 mpirun_np 2 "$TESTTOOL" adamw d val adamw 0.8 0.999 1e-6 3
[ "$(printf '%s\n' "$ERR" | grep -c "AdamW")" = 1 ] &&
  printf '%s\n' "$ERR" | qgrep -x "ddp_train: notice: adamw/checkpoints/last.h5 was trained with AdamW beta1 0.9, eps 1e-08; this run continues with AdamW beta1 0.8, eps 1e-06" ||
  fail "adamw: a resume with other values: not one notice naming both: $ERR"
$PY -c "import h5py; a = h5py.File('adamw/checkpoints/last.h5', 'r+').attrs; del a['adamw_beta1'], a['adamw_beta2'], a['adamw_eps']"
expect_rc 0 mpirun_np 2 "$TESTTOOL" adamw d val adamw 0.9 0.99 1e-7 4
printf '%s' "$ERR" | qgrep "AdamW" && fail "adamw: a checkpoint without the attributes: a notice: $ERR"
pass "metadata on rank 0 only, mismatch detected, env, user model (val/acc $acc), AdamW's betas and eps on resume"
