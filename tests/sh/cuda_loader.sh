# Loading the GPU plugin and asking it for devices, on the host emulator: every failure says what really
# happened. A plugin file that exists but does not load (not ELF; a library it needs is missing) reports
# the loader's own message, not "built without CUDA"; a missing MPIDDP_CUDA_PLUGIN file says so; a file
# without the plugin's entry point or of another API version is named with the loader's words; a failed
# cudaMalloc says its size, device and purpose; a CUDA
# error in the device query (driver too old) is shown by `mpiddp env` and by --device auto's explanation;
# test_cuda_backend fails (never skips) where a plugin is named but unusable; bench_allreduce -d cuda
# stops on a failing NCCL call instead of printing timings.
. "$(dirname "$0")/lib.sh"
: "${MPIDDP_CUDA_PLUGIN:?needs the emulator plugin}"
EMU=$MPIDDP_CUDA_PLUGIN
CUDA_TEST=$(dirname "$TESTTOOL")/test_cuda_backend
# 1. the emulated device, as env and --device auto see it; ranks of a node that see different numbers of devices
expect_rc 0 "$MPIDDP" env
printf '%s' "$OUT" | qgrep "# --device auto: [0-9]* CUDA device(s) visible (host emulator), using cuda" || fail "auto with the emulator: $OUT"
printf '%s' "$OUT" | qgrep 'device=cuda:0(mpiddp CUDA emulator' || fail "env device: $OUT"
# a machine where CUDA works but shows no device
expect_rc 0 env MPIDDP_EMU_DEVICES=0 "$MPIDDP" env
printf '%s' "$OUT" | qgrep "# --device auto: no CUDA device visible, using cpu" || fail "no device: $OUT"
# --device auto never puts two ranks on one GPU: with 1 device for 2 ranks it chooses the CPU and says why
expect_rc 0 env MPIDDP_EMU_DEVICES=1 mpirun -np 2 --oversubscribe "$MPIDDP" env
printf '%s' "$OUT" | qgrep "# --device auto: 1 CUDA device(s) for 2 ranks on this node (one GPU per rank), using cpu" || fail "auto, 2 ranks, 1 GPU: $OUT"
# ranks of one node that see different numbers of devices (CUDA_VISIBLE_DEVICES set per rank): --device cuda is one
# line and exit 1 on every rank, --device auto picks the CPU and says why; neither hangs (the rank seeing more
# devices waited in the node's GPU check for one that had left)
for dev in cuda auto; do
  set +e
  timeout -k 5 30 mpirun -np 1 --oversubscribe -x MPIDDP_EMU_DEVICES=2 "$MPIDDP" env --device $dev : \
    -np 1 -x MPIDDP_EMU_DEVICES=0 "$MPIDDP" env --device $dev >out.txt 2>err.txt
  rc=$?
  set -e
  OUT=$(cat out.txt) ERR=$(cat err.txt)
  case $dev in
    cuda) [ $rc = 1 ] || fail "--device cuda, ranks seeing 2 and 0 devices: exit $rc (124: hung): $ERR"
          printf '%s' "$ERR" | qgrep "error: --device cuda: the ranks of node 0 (.*) see different numbers of CUDA devices (0 to 2; rank 0 sees 2" ||
            fail "--device cuda, ranks seeing 2 and 0 devices: $ERR"
          [ "$(grep -c 'error:' err.txt)" = 1 ] || fail "--device cuda, ranks seeing 2 and 0 devices: not one line: $ERR" ;;
    auto) [ $rc = 0 ] || fail "--device auto, ranks seeing 2 and 0 devices: exit $rc (124: hung): $ERR"
          printf '%s' "$OUT" | qgrep "# --device auto: the ranks of this node see 0 to 2 CUDA devices (not the same GPUs), using cpu" ||
            fail "--device auto, ranks seeing 2 and 0 devices: $OUT" ;;
  esac
done
# 2. a CUDA error in the device query keeps CUDA's words
expect_rc 0 env MPIDDP_EMU_FAIL=driver "$MPIDDP" env
printf '%s' "$OUT" | qgrep "# --device auto: cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver), using cpu" ||
  fail "driver error not shown by env: $OUT"
expect_rc 1 env MPIDDP_EMU_FAIL=driver "$MPIDDP" env --device cuda
printf '%s' "$ERR" | qgrep "insufficient for CUDA runtime" || fail "--device cuda with a failing driver: $ERR"
expect_rc 1 env MPIDDP_EMU_FAIL=driver "$CUDA_TEST"
printf '%s' "$ERR" | qgrep "FAIL: MPIDDP_CUDA_PLUGIN exists but no CUDA device is usable: .*insufficient" || fail "test_cuda_backend with a failing driver: $ERR"
# 3. no file at MPIDDP_CUDA_PLUGIN
expect_rc 1 env MPIDDP_CUDA_PLUGIN="$WORK/none.so" "$MPIDDP" env --device cuda
printf '%s' "$ERR" | qgrep "MPIDDP_CUDA_PLUGIN=$WORK/none.so: No such file or directory" || fail "missing plugin file: $ERR"
expect_rc 1 env MPIDDP_CUDA_PLUGIN="$WORK/none.so" "$CUDA_TEST"
# 4. a file that exists but is not a shared object
echo "not a library" > notelf.so
expect_rc 1 env MPIDDP_CUDA_PLUGIN="$WORK/notelf.so" "$MPIDDP" env --device cuda
printf '%s' "$ERR" | qgrep "notelf.so: .*\(invalid ELF header\|file too short\)" || fail "non-ELF plugin: $ERR"
# 5. a plugin whose dependency is missing (as libnccl.so.2 would be): the loader names the library
printf 'int ddp_missing_dep(void) { return 1; }\n' > dep.c
printf 'int ddp_missing_dep(void); int ddp_use(void) { return ddp_missing_dep(); }\n' > plug.c
cc -shared -fPIC -o libddpmissing.so dep.c && cc -shared -fPIC -o plug.so plug.c -L. -lddpmissing && rm libddpmissing.so
expect_rc 1 env MPIDDP_CUDA_PLUGIN="$WORK/plug.so" "$MPIDDP" env --device cuda
printf '%s' "$ERR" | qgrep "libddpmissing.so: cannot open shared object file" || fail "missing dependency not named: $ERR"
! printf '%s' "$ERR" | qgrep "built without CUDA" || fail "missing dependency reported as 'built without CUDA': $ERR"
# 5b. a shared object that loads but is no mpiddp plugin, or one of another API version: the message keeps
# the loader's words and names the file MPIDDP_CUDA_PLUGIN chose, not the default libmpiddp_cuda.so
printf 'int ddp_not_a_plugin(void) { return 1; }\n' > nosym.c
printf 'static struct { int version; } api = {9999};\nconst void *ddp_cuda_plugin_api(void *f) { (void)f; return &api; }\n' > oldapi.c
cc -shared -fPIC -o nosym.so nosym.c && cc -shared -fPIC -o oldapi.so oldapi.c
expect_rc 1 env MPIDDP_CUDA_PLUGIN="$WORK/nosym.so" "$MPIDDP" env --device cuda
printf '%s' "$ERR" | qgrep "$WORK/nosym.so: not an mpiddp CUDA plugin: .*nosym.so: undefined symbol: ddp_cuda_plugin_api" ||
  fail "missing plugin symbol: $ERR"
! printf '%s' "$ERR" | qgrep "libmpiddp_cuda.so" || fail "missing symbol reported against the default plugin file: $ERR"
expect_rc 1 env MPIDDP_CUDA_PLUGIN="$WORK/oldapi.so" "$MPIDDP" env --device cuda
printf '%s' "$ERR" | qgrep "$WORK/oldapi.so: incompatible plugin (API version 9999, expected [0-9]*)" || fail "wrong API version: $ERR"
! printf '%s' "$ERR" | qgrep "libmpiddp_cuda.so" || fail "wrong API version reported against the default plugin file: $ERR"
# 5c. a failed device allocation says how many bytes, on which device, for what (--hidden 100000: l2.weight alone is
# 40 GB, past the emulated device; the workspace is capped at the set's 40 samples, with or without the plan)
synth --out bigt --samples 40 --dim 4 --classes 2 --shards 1
expect_rc 1 env MPIDDP_PLAN_BUFFERS=0 "$MPIDDP" train --device cuda --train bigt --val bigt --out big --hidden 100000 --batch-size 100000 --no-progress
printf '%s' "$ERR" | qgrep "CUDA error in cudaMalloc.*: out of memory: [0-9]\{11,\} bytes ([0-9.]* MiB) on cuda:0 for a model buffer" ||
  fail "cudaMalloc failure without its size and device: $ERR"
[ "$(printf '%s\n' "$ERR" | grep -c .)" = 1 ] || fail "cudaMalloc failure: expected one line: $ERR"
# 5c'. the K-th cudaMallocAsync fails in a bf16 run: one line each, naming the bf16 buffer by its purpose in words that
# hold for C-API programs too (they said "--precision bf16")
seen=""
for k in 1 2 3 4 5 6 7 8; do
  set +e
  MPIDDP_EMU_FAIL=malloc_async:$k "$MPIDDP" train --device cuda --precision bf16 --train bigt --val bigt --out oom$k \
    --hidden 8 --batch-size 8 --epochs 1 --no-progress >/dev/null 2>err.txt
  rc=$?
  set -e
  [ "$rc" = 0 ] && continue
  ERR=$(cat err.txt)
  [ "$rc" = 1 ] || fail "malloc_async:$k: exit $rc: $ERR"
  [ "$(grep -c . err.txt)" = 1 ] || fail "malloc_async:$k: expected one line: $ERR"
  printf '%s' "$ERR" | qgrep "CUDA error in cudaMallocAsync.*: out of memory: [0-9]* bytes ([0-9.]* MiB) on cuda:0 for " ||
    fail "malloc_async:$k: allocation failure without its size and device: $ERR"
  ! printf '%s' "$ERR" | qgrep -- "--precision" || fail "malloc_async:$k: a CLI option in the library's line: $ERR"
  printf '%s' "$ERR" | qgrep "for the bf16 copy of the weights (bf16 precision)$" && seen="$seen w16"
  printf '%s' "$ERR" | qgrep "for the bf16 copies of the GEMM operands (bf16 precision)$" && seen="$seen ops"
done
case "$seen" in *w16*) ;; *) fail "no failed allocation of the weights' bf16 copy among malloc_async:1..8 ($seen)" ;; esac
case "$seen" in *ops*) ;; *) fail "no failed allocation of the GEMM operands' bf16 copies among malloc_async:1..8 ($seen)" ;; esac
# 5d. the K-th CUDA stream creation fails on rank 1 (the backend's two, then the gradient sync's), in a resume with
# --collective-timeout: every rank ends within 30 s, exit 1, with rank 0's one line naming the failed call (the sync's
# stream, not agreed, left rank 0 in the resume's broadcast for ever, or reported as a collective timeout)
synth --out st --samples 48 --dim 4 --classes 2 --shards 2
synth --out sv --samples 16 --dim 4 --classes 2 --shards 1 --first-id 100
sargs=(train --device cuda --train st --val sv --hidden 8 --batch-size 4 --no-progress --collective-timeout 20 --out srun)
env MPIDDP_EMU_DEVICES=2 mpirun -np 2 --oversubscribe "$MPIDDP" "${sargs[@]}" --epochs 1 >/dev/null
for k in 1 2 3 4; do
  set +e
  MPIDDP_EMU_DEVICES=2 timeout -k 5 30 mpirun -np 1 --oversubscribe "$MPIDDP" "${sargs[@]}" --epochs 2 --resume auto : \
    -np 1 -x MPIDDP_EMU_FAIL=stream_create:$k "$MPIDDP" "${sargs[@]}" --epochs 2 --resume auto >out.txt 2>err.txt
  rc=$?
  set -e
  ERR=$(cat err.txt)
  [ $rc = 0 ] && break # past the last stream a run makes
  [ $rc = 1 ] || fail "stream creation $k failing on rank 1: exit $rc (124: hung): $ERR"
  [ "$(grep -c 'error:' err.txt)" = 1 ] && printf '%s' "$ERR" | qgrep "^mpiddp train: error: CUDA error in cudaStreamCreate.*out of memory" ||
    fail "stream creation $k failing on rank 1: not rank 0's one line naming it: $ERR"
done
[ $rc = 0 ] && [ "$k" -ge 3 ] || fail "the sync's stream was not reached (k=$k, rc $rc)"
# 6. bench_allreduce -d cuda stops on a failing NCCL init (no timings printed)
if [ -x "$BENCH_DIR/bench_allreduce" ]; then
  expect_rc 1 env MPIDDP_EMU_DEVICES=2 MPIDDP_EMU_NCCL_FAULT=init:1 MPIDDP_NCCL_INIT_TIMEOUT=3 mpirun -np 2 --oversubscribe "$BENCH_DIR/bench_allreduce" -d cuda -e 1K -o b.csv
  printf '%s' "$ERR" | qgrep "bench_allreduce: .* failed: .*injected" || fail "bench_allreduce did not stop on the NCCL failure: $ERR"
  ! printf '%s' "$OUT" | qgrep "^ *[0-9]\+ \+[0-9]\+ \+float" || fail "bench_allreduce printed timings after a failure: $OUT"
  expect_rc 0 env MPIDDP_EMU_DEVICES=2 mpirun -np 2 --oversubscribe "$BENCH_DIR/bench_allreduce" -d cuda -e 64K -n 3 -w 1 -o b.csv
  printf '%s' "$OUT" | awk '$3=="float" && $7!=0 {bad=1} END{exit bad}' || fail "bench_allreduce -d cuda: wrong results: $OUT"
fi
pass "plugin and device-query errors reported as they are; bench_allreduce checks every status"
