# The public C API misused as a new user might (tools/capi_misuse.c, which includes only mpiddp.h): NULL pointers,
# bad sizes and config values, some on one rank only, calls before ddp_init. At np 1 and 2 every case ends in time
# with exit 0 on every rank (each check's status and its one-line message held), nothing on stdout, no crash. The
# config refusals and the resume refusals and notices name ddp_train_config's fields (cfg.lr = -0.1), no --option;
# so do the built-in models' lines (cfg.model_config->heads = 3), the CPU backend's refusal of tf32 and the device
# selection's (DDP_DEVICE_CUDA), the sampler's and the open-shard budget's (cfg.sampling_shard = 1, cfg.batch_size)
# and bf16's out-of-memory line (cfg.precision). The library's notices begin "ddp_train: notice:", never "mpiddp train:".
# A built-in model trained with cfg.model_config NULL (own_config) is checked against its own max_positions up front
# (one agreed line on every rank, no run directory), its checkpoints let mpiddp eval rebuild it, and a
# cfg.model_config contradicting the model's configuration is refused on every rank naming the field; one differing
# only in workspace sizes (max_batch_rows, max_batch_samples) or precision trains, with the model's own workspace.
. "$(dirname "$0")/lib.sh"
: "${CAPI_MISUSE:?}"
synth --out tr --samples 64 --shards 2 --dim 4 --classes 3
synth --out va --samples 32 --shards 1 --dim 4 --classes 3 --first-id 100000
# timeout_case NP [VAR=VALUE...]: the case timeout at np NP, its environment making the collective stall; each rank
# that timed out passes its checks and prints "done rank R" (the last rank may not: it is the stalled one)
timeout_case() {
  local np=$1 r rc
  shift
  rm -rf w_to && mkdir w_to
  set +e
  env "$@" timeout -s KILL 60 mpirun -np "$np" --oversubscribe "$CAPI_MISUSE" timeout tr va "$PWD/w_to" > out.txt 2> err.txt
  rc=$?
  set -e
  [ $rc != 137 ] || { cat err.txt >&2; fail "case timeout at np $np ($*): a hang (killed after 60 s)"; }
  ! grep '^FAIL' err.txt || fail "case timeout at np $np ($*): a check failed"
  for r in $(seq 0 $((np - 2))); do
    qgrep "^done rank $r\$" err.txt || { cat err.txt >&2; fail "case timeout at np $np ($*): rank $r did not finish"; }
  done
}
if [ "$DEVICE" = cuda ]; then # the emulator (capi_misuse_emu): an NCCL allreduce that hangs on rank 1, on the GPU path
  for np in 2 4; do timeout_case $np MPIDDP_EMU_NCCL_FAULT=hang:1:3; done
  pass "the C API after an NCCL collective timeout: later collectives fail at once, ddp_finalize returns"
  exit 0
fi
# a model's own metric (own_metric): under its own name in metrics.csv with its whole-set value (each sample
# counted once: 1), and a column in every rank's metrics_rank<R>.csv, blank on a rank that has no validation
# sample, also after a resume (the ranks' files once had different headers); under val/loss, a name ddp_train logs itself, refused on
# every rank (it was once summed into the trainer's val/loss); the job then ends (the ctx took a rank's own error)
synth --out va1 --samples 1 --shards 1 --dim 4 --classes 3 --first-id 200000
for np in 1 2; do
  rm -rf w_own && mkdir w_own
  set +e
  timeout 120 mpirun -np $np --oversubscribe "$CAPI_MISUSE" own_metric tr va1 "$PWD/w_own" > out.txt 2> err.txt
  [ $? != 124 ] || fail "case own_metric at np $np: a hang"
  set -e
  ! grep '^FAIL' err.txt || fail "case own_metric at np $np: a check failed"
  [ "$(csv_last w_own/t_log/metrics.csv model/loss)" = 1 ] || fail "case own_metric at np $np: model/loss: $(cat w_own/t_log/metrics.csv)"
  for r in $(seq 0 $((np - 1))); do
    [ "$(head -1 w_own/t_log/metrics_rank$r.csv)" = "$(head -1 w_own/t_log/metrics_rank0.csv)" ] &&
      [ "$(wc -l < w_own/t_log/metrics_rank$r.csv)" = "$(wc -l < w_own/t_log/metrics_rank0.csv)" ] &&
      head -1 w_own/t_log/metrics_rank$r.csv | tr , '\n' | qgrep -x model/loss ||
      fail "case own_metric at np $np: rank $r's file: $(cat w_own/t_log/metrics_rank$r.csv), rank 0's: $(cat w_own/t_log/metrics_rank0.csv)"
  done
  [ "$(csv_last w_own/t_log/metrics_rank0.csv model/loss)" = 1 ] || fail "case own_metric at np $np: rank 0's model/loss"
  for r in $(seq 0 $((np - 1))); do
    qgrep "^ok rank $r ddp_train(the model logs val/loss): bad argument (bad argument): metric name 'val/loss' is one ddp_train logs itself" err.txt ||
      fail "case own_metric at np $np, rank $r: $(cat err.txt)"
  done
done
pass "a model's own metric: logged under its own name; one of ddp_train's own names refused on every rank"
# a call that is not collective (ddp_model_create, ddp_metrics_create, ddp_log) out of memory on rank 1 alone
# (local_failure): rank 1 ends as mpiddp.h directs (ddp_finalize, which leaves MPI_Finalize alone, exit non-zero)
# while rank 0 waits in ddp_metrics_sync; the job ends (it hung: ddp_finalize waited for rank 0 in MPI_Finalize)
# (ddp_log_rank0's allocation on rank 0); agreed with ddp_agree_status (CAPI_AGREE), every rank finalizes, exit 0
for at in "mpi_ddp/model/model_common.c|t->spec = ddp_calloc|1" "mpi_ddp/train/metrics.c|ddp_metrics *m = ddp_calloc|1" \
          "mpi_ddp/train/metrics.c|st = ddp_row_set(&m->acc_sum, name, sum)|1" \
          "mpi_ddp/train/metrics.c|ddp_status st = ddp_row_set(&m->rank0, name, value)|0" \
          "mpi_ddp/model/model_common.c|t->spec = ddp_calloc|1|agree"; do
  IFS='|' read -r f text frank agree <<<"$at"
  site="$(basename "$(dirname "$f")")/$(basename "$f"):$(grep -n -m1 -F "$text" "$SRC/$f" | cut -d: -f1 || true)"
  [[ $site =~ :[0-9]+$ ]] || fail "no line holding '$text' in $f"
  set +e
  CAPI_AGREE=$agree MPIDDP_TEST_FAIL_ALLOC=$site MPIDDP_TEST_FAIL_ALLOC_RANK=$frank timeout 60 mpirun -np 2 \
    --oversubscribe -x MPIDDP_TEST_FAIL_ALLOC -x MPIDDP_TEST_FAIL_ALLOC_RANK -x CAPI_AGREE "$CAPI_MISUSE" \
    local_failure tr va "$PWD" > out.txt 2> err.txt
  rc=$?
  set -e
  if [ -n "$agree" ]; then
    [ $rc = 0 ] && ! grep '^FAIL' err.txt && [ "$(grep -c '^ok rank [01] ddp_finalize after the agreement: ok' err.txt)" = 2 ] ||
      fail "local_failure agreed, $site on rank 1: exit $rc: $(cat err.txt)"
    continue
  fi
  [ $rc != 0 ] && [ $rc != 124 ] || { cat err.txt >&2; fail "local_failure, $site on rank $frank: exit $rc (124: a hang)"; }
  qgrep "^rank $frank failed alone: out of memory.* (shared 0)\$" err.txt &&
    qgrep "^rank $frank ddp_finalize: rank mismatch\$" err.txt || fail "local_failure, $site on rank $frank: $(cat err.txt)"
done
# a shard rank 1 alone cannot read (CAPI_SAMPLE: its own copy of the dataset, whose first shard it replaces after the
# open): its failed ddp_dataset_sample is pending like the failures above and the job ends (it hung in MPI_Finalize);
# also on a loader thread (CAPI_SAMPLE_THREAD) whose failure the program takes only after a collective completed (a
# prefetch: that collective must not clear it); agreed (CAPI_AGREE), every rank finalizes, exit 0
for how in main thread thread,agree thread,other; do
  rm -rf tr1 && cp -r tr tr1
  shards=(tr1/*.h5)
  thread=; agree=
  [ "$how" = main ] || thread=1
  [ "$how" != thread,agree ] || agree=1
  [ "$how" != thread,other ] || agree=other # another failure agreed after the loader's: its own line
  set +e
  CAPI_SAMPLE=tr1 CAPI_SAMPLE_SHARD=${shards[0]} CAPI_SAMPLE_THREAD=$thread CAPI_AGREE=$agree timeout 60 mpirun -np 2 \
    --oversubscribe -x CAPI_SAMPLE -x CAPI_SAMPLE_SHARD -x CAPI_SAMPLE_THREAD -x CAPI_AGREE "$CAPI_MISUSE" \
    local_failure tr va "$PWD" > out.txt 2> err.txt
  rc=$?
  set -e
  what="local_failure, a shard rank 1 cannot read ($how)"
  if [ -n "$agree" ]; then
    [ $rc = 0 ] && ! grep '^FAIL' err.txt && [ "$(grep -c '^ok rank [01] ddp_finalize after the agreement: ok' err.txt)" = 2 ] ||
      fail "$what: exit $rc: $(cat err.txt)"
    continue
  fi
  [ $rc != 0 ] && [ $rc != 124 ] || { cat err.txt >&2; fail "$what: exit $rc (124: a hang)"; }
  ! grep '^FAIL' err.txt && qgrep "^rank 1 failed alone: .*${shards[0]}.* (shared 0)\$" err.txt &&
    qgrep "^rank 1 ddp_finalize: rank mismatch\$" err.txt || fail "$what: $(cat err.txt)"
done
pass "a call that is not collective failing on one rank: the job ends"
for np in 1 2; do
  for c in before_init after_finalize context dataset metrics models config train builtin own_config shuffle; do
    rm -rf "w_$c" && mkdir "w_$c"
    set +e
    timeout 120 mpirun -np $np --oversubscribe "$CAPI_MISUSE" "$c" tr va "$PWD/w_$c" > out.txt 2> err.txt
    rc=$?
    set -e
    [ $rc = 0 ] || { cat err.txt >&2; fail "case $c at np $np: exit $rc (124: a hang)"; }
    [ ! -s out.txt ] || fail "case $c at np $np printed to stdout: $(head -3 out.txt)"
    ! grep '^FAIL' err.txt || fail "case $c at np $np: a check failed"
    ! grep -e '^mpiddp train:' -e '--[a-z]' err.txt || fail "case $c at np $np: a library line as the CLI's"
    if [ "$c" = train ]; then # a resume's notice names the fields a C-API program set, no CLI option
      ck="$PWD/w_train/t1/checkpoints/last.h5"
      qgrep -xF "ddp_train: notice: $ck was trained with cfg.weight_decay = 0.01; this run continues with cfg.weight_decay = 0.02" err.txt ||
        fail "case train at np $np: no notice naming cfg.weight_decay: $(grep notice err.txt)"
      qgrep "^ddp_train: resuming from $ck at epoch 1 (0-based)" err.txt || fail "case train at np $np: $(cat err.txt)"
    fi
    if [ "$c" = own_config ]; then # every rank: the exact refusals, then mpiddp eval rebuilds the model trained
      # with cfg.model_config NULL from its checkpoint alone (the hyperparameters are recorded)
      tail="rows, more than the model's max_positions = [0-9]*\$"
      for r in $(seq 0 $((np - 1))); do
        qgrep "^ok rank $r ddp_train(model_config NULL, a sample longer than max_positions): bad argument (bad argument): tr/[^ ]*: /offsets\[[0-9]*\]: sample (id [0-9]*) has [0-9]* $tail" err.txt ||
          fail "case own_config at np $np, rank $r: $(cat err.txt)"
        for f in "kind mlp|kind = DDP_MODEL_MLP|kind = DDP_MODEL_TRANSFORMER" "heads 2|heads = 2|heads = 4" \
          "max_positions 1024|max_positions = 1024|max_positions = 512" "dim 5|dim = 5|dim = 4" \
          "dropout 0.1|dropout = 0.1|dropout = 0"; do
          IFS='|' read -r what given own <<< "$f"
          qgrep -xF "ok rank $r ddp_train(model_config $what): bad argument (bad argument): ddp_train: cfg.model_config->$given, but the model was created with $own: cfg.model_config must be the configuration given to ddp_model_create, or NULL" err.txt ||
            fail "case own_config at np $np, rank $r, cfg.model_config->$given: $(cat err.txt)"
        done
      done
      # a cfg.model_config differing from the model's only in workspace sizes or precision trained, and run.json's
      # activation rows are the model's own (those of the run given the model's exact configuration)
      for d in ws prec; do
        [ -f "w_own_config/$d/checkpoints/last.h5" ] || fail "case own_config at np $np: $d left no last.h5"
      done
      rows() { grep -o '"activation_rows":[^,}]*' "w_own_config/$1/run.json" | tr -d ' \t'; }
      [ -n "$(rows ff)" ] && [ "$(rows ws)" = "$(rows ff)" ] ||
        fail "case own_config at np $np: run.json's activation rows $(rows ws), not the model's $(rows ff)"
      mpirun_np $np "$MPIDDP" eval --ckpt "$PWD/w_own_config/own/checkpoints/last.h5" --data va > out.txt 2> err.txt ||
        fail "mpiddp eval of a transformer trained with cfg.model_config NULL at np $np: $(cat err.txt)"
      qgrep '^val/loss=[0-9.]* val/acc=' out.txt || fail "mpiddp eval at np $np printed no metrics: $(cat out.txt)"
      : > out.txt
    fi
    if [ "$c" = shuffle ]; then # another order at an epoch boundary: its notice in cfg terms only
      ck="$PWD/w_shuffle/bnd/checkpoints/last.h5"
      qgrep -xF "ddp_train: notice: $ck was saved at the start of epoch 1 with cfg.shuffle_block = 1, cfg.shuffle_block_mb = 0.002, cfg.shuffle_window = 3, cfg.sampling_shard = 0; this run orders it and the epochs after it with cfg.shuffle_block = 0, cfg.sampling_shard = 0" err.txt ||
        fail "case shuffle at np $np: $(grep notice err.txt)"
    fi
  done
done
# finalize_twice: a finalized context given again (ddp_finalize, a collective, ddp_topo) is refused, never touched.
# timeout: the last rank stops itself as ddp_train starts; the others time out after cfg.collective_timeout 1, every
# later collective on their context fails at once naming that timeout, and ddp_finalize returns (MPI is left
# unfinalized: mpirun then ends the job, exit non-zero, instead of every rank waiting for the stopped one).
for np in 1 2; do
  rm -rf w_ft && mkdir w_ft
  expect_rc 0 timeout 60 mpirun -np $np --oversubscribe "$CAPI_MISUSE" finalize_twice tr va "$PWD/w_ft"
  ! grep '^FAIL' "$WORK/err.txt" || fail "case finalize_twice at np $np: a check failed"
done
for np in 2 4; do timeout_case $np MPIDDP_TEST_STOP_SELF_AT_START=$((np - 1)); done
# timeout_after_train: cfg.collective_timeout is ddp_train's: after it returns, a rank 3 s late into ddp_all_ok is
# waited for (no stale timeout breaks the context), and ddp_finalize returns DDP_OK
rm -rf w_ta && mkdir w_ta
expect_rc 0 timeout 120 mpirun -np 2 --oversubscribe "$CAPI_MISUSE" timeout_after_train tr va "$PWD/w_ta"
! grep '^FAIL' "$WORK/err.txt" || fail "case timeout_after_train: a check failed"
# lines from below the trainer name cfg fields: shard sampling with fewer shards than ranks and cfg.drop_last with
# fewer samples than ranks (sampler), a batch past MPIDDP_MAX_OPEN_SHARDS=2 (shard_cache; both exact lines in the
# program), and bf16's operands not allocated on rank 0 (the test hook; the byte count is the machine's); at np 2 rank
# 1 waits in the step's allreduce, so rank 0's ddp_finalize returns without MPI_Finalize (before: it waited there for
# ever) and mpirun ends the job, non-zero
site="cpu/backend_cpu_bf16.c:$(grep -n '[*]buf = ddp_calloc(need, 1);' "$SRC/mpi_ddp/backend/cpu/backend_cpu_bf16.c" | cut -d: -f1)"
for run in "sampler 2" "sampler 4" "shard_cache 1" "shard_cache 2" "bf16_nomem 1" "bf16_nomem 2"; do
  set -- $run
  rm -rf "w_$1" && mkdir "w_$1"
  [ "$1" != sampler ] || synth --out "w_$1/tiny" --samples 1 --shards 1 --dim 4 --classes 3 --first-id 900000
  hook=()
  [ "$1" != bf16_nomem ] || hook=(-x "MPIDDP_TEST_FAIL_ALLOC=$site")
  set +e
  timeout -s KILL 120 mpirun -np "$2" --oversubscribe "${hook[@]}" "$CAPI_MISUSE" "$1" tr va "$PWD/w_$1" > out.txt 2> err.txt
  rc=$?
  set -e
  if [ "$run" = "bf16_nomem 2" ]; then
    [ $rc != 0 ] && [ $rc != 137 ] || { cat err.txt >&2; fail "case $run: exit $rc (137: a hang)"; }
    qgrep "^ok rank 0 ddp_finalize after ddp_train failed on this rank alone" err.txt || fail "case $run: $(cat err.txt)"
  else
    [ $rc = 0 ] || { cat err.txt >&2; fail "case $1 at np $2: exit $rc (137: a hang)"; }
  fi
  ! grep -e '^FAIL' -e '--[a-z]' err.txt || fail "case $1 at np $2: a check failed"
  [ "$1" != bf16_nomem ] || qgrep -x "ok rank 0 ddp_train(precision bf16, its operands' allocation failed): out of memory (out of memory): out of memory: [0-9]* bytes for the GEMM operands rounded to bf16 (cfg.precision = DDP_PRECISION_BF16)" err.txt ||
    fail "case bf16_nomem ($site): $(cat err.txt)"
done
pass "the C API's misuse cases at np 1 and 2: statuses, one-line messages, no hang, crash or output"
