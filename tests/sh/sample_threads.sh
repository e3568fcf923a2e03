# ddp_dataset_sample from many threads (tools/sample_threads.c, a user program of include/mpiddp.h only), each
# sample checked against the main thread's reading, and its `rows` again after the thread yielded (valid until its
# next call). Mapped shards with MPIDDP_MAX_OPEN_SHARDS=4: 20 threads at once, and 4 waves of 8 (the cache had 16
# slots for the threads' current shards and freed none when a thread exited: past them a thread read a shard the
# cache had closed, wrong rows or SIGSEGV). Chunked+gzip shards (read through HDF5, not thread-safe): 2 threads
# (no lock around HDF5: heap corruption, SIGSEGV or a false "read failed"). A sample after ddp_finalize is
# DDP_ERR_ARG naming the dataset, and ddp_dataset_close then prints nothing (it printed HDF5's error stacks: MPI_Finalize
# had shut HDF5 down).
. "$(dirname "$0")/lib.sh"
: "${SAMPLE_THREADS:?}"
# run_ok WHAT CMD...: exit 0 within 60 s, no FAIL line, "done rank 0"
run_ok() {
  local what=$1 rc
  shift
  set +e
  timeout -s KILL 60 "$@" > out.txt 2> err.txt
  rc=$?
  set -e
  [ $rc = 0 ] && ! qgrep '^FAIL' err.txt && qgrep '^done rank 0$' err.txt ||
    { head -20 err.txt >&2; fail "$what: exit $rc"; }
}
synth --out m --samples 400 --shards 40 --dim 8 --classes 3 --min-rows 1 --max-rows 8
run_ok "20 threads, mapped" env MPIDDP_MAX_OPEN_SHARDS=4 mpirun -np 1 -x MPIDDP_MAX_OPEN_SHARDS "$SAMPLE_THREADS" threads m 20 3000 1
run_ok "4 waves of 8 threads, mapped" env MPIDDP_MAX_OPEN_SHARDS=4 mpirun -np 1 -x MPIDDP_MAX_OPEN_SHARDS "$SAMPLE_THREADS" threads m 8 3000 4
pass "ddp_dataset_sample on 20 threads at once and on 4 waves of 8: every sample's rows right and kept until the thread's next call"
$PY "$SRC/tests/py/make_shards.py" variants v
$PY "$SRC/tests/py/make_shards.py" gzip-big g 4 50000 # shards past HDF5's chunk cache: the small ones rarely failed
run_ok "2 threads, HDF5 reads" mpirun -np 1 --bind-to none "$SAMPLE_THREADS" threads g 2 5000 1
pass "ddp_dataset_sample on 2 threads over chunked+gzip shards (HDF5 reads): every sample right"
for np in 1 2; do
  run_ok "finalized at np $np" mpirun -np $np "$SAMPLE_THREADS" finalized v/h5py_gzip
  [ ! -s out.txt ] && [ "$(grep -cv '^done rank [0-9]*$' err.txt)" = 0 ] || { cat out.txt err.txt >&2; fail "finalized at np $np: printed"; }
done
pass "ddp_dataset_sample after ddp_finalize: DDP_ERR_ARG naming the dataset; ddp_dataset_close then prints nothing"
