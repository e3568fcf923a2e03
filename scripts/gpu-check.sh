#!/usr/bin/env bash
# gpu-check.sh — everything that needs a real NVIDIA GPU, in one command, with one report file
# (gpu-check-report.txt, or $REPORT): the gpu-labelled tests (CUDA backend against its CPU twin); the
# multi-rank --device cuda suites (needs >= 4 GPUs on the node: they run np 1, 2 and 4, one GPU per rank;
# with fewer GPUs the report says so); compute-sanitizer memcheck and racecheck over test_cuda_backend;
# bench_allreduce -d cuda and bench_train --device cuda beside the CPU.
# Where no NVIDIA device node exists it says so and exits 0. Where one exists, any failure — the plugin
# not loading, a device query failing, a test, the sanitizer, a benchmark — makes it exit non-zero.
set -uo pipefail
cd "$(dirname "$0")/.."
REPORT=${REPORT:-$PWD/gpu-check-report.txt}
if ! ls /dev/nvidia* >/dev/null 2>&1 && [ ! -e /proc/driver/nvidia/gpus ]; then
  echo "gpu-check: no NVIDIA device node on $(hostname); nothing to check here" | tee "$REPORT"
  exit 0
fi
: > "$REPORT"
failed=0
section() { printf '\n== %s\n' "$*" | tee -a "$REPORT"; }
run() { # run CMD...: output into the report; a failure is counted, never skipped
  "$@" >>"$REPORT" 2>&1; local rc=$?
  if [ $rc != 0 ]; then echo "FAILED ($rc): $*" | tee -a "$REPORT"; failed=$((failed + 1)); else echo "ok: $*" | tee -a "$REPORT"; fi
  return 0
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
section "machine"
{ hostname; date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } >>"$REPORT" 2>&1 ||
  { echo "FAILED: nvidia-smi" | tee -a "$REPORT"; failed=$((failed + 1)); }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "GPUs: $ngpu" | tee -a "$REPORT"
[ "$(id -u)" = 0 ] && ./scripts/deps.sh >/dev/null   # elsewhere: load the modules INSTALL names
BUILD=${BUILD:-build-gpu}
section "build ($BUILD, MPIDDP_CUDA=ON)"
run cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMPIDDP_CUDA=ON -DMPIDDP_TESTS=ON -DMPIDDP_BENCHMARKS=ON
run cmake --build "$BUILD" -j"$(nproc)"
B=$(realpath "$BUILD")
section "mpiddp env --device cuda"
run "$B/mpiddp" env --device cuda
section "gpu-labelled tests"
run bash -c "cd '$B' && ctest --output-on-failure --no-tests=error -L gpu"
if [ "$ngpu" -ge 4 ]; then
  section "multi-rank suites with --device cuda (np 1, 2, 4; one GPU per rank)"
  for t in ddp_identity exact_validation checkpoints_gpu faults_gpu; do
    run env MPIDDP="$B/mpiddp" TESTTOOL="$B/tests/testtool" EXAMPLE="$B/example_user_model" SRC="$PWD" \
      BENCH_DIR="$B/benchmarks" WORK="$B/gpu-check/$t" MPIDDP_TEST_DEVICE=cuda bash "tests/sh/$t.sh"
  done
  for t in ddp_identity exact_validation batch_rows; do # the Transformer encoder's kernels, dropout on
    run env MPIDDP="$B/mpiddp" TESTTOOL="$B/tests/testtool" EXAMPLE="$B/example_user_model" SRC="$PWD" \
      BENCH_DIR="$B/benchmarks" WORK="$B/gpu-check/${t}_tx" MPIDDP_TEST_DEVICE=cuda \
      MPIDDP_TEST_MODEL_ARGS="--model transformer --heads 4 --dropout 0.1" bash "tests/sh/$t.sh"
  done
else
  section "multi-rank suites with --device cuda: SKIPPED, they need 4 GPUs on one node and this one has $ngpu"
fi
section "compute-sanitizer over test_cuda_backend"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$CS" ]; then
  echo "FAILED: compute-sanitizer not found (CUDA toolkit's bin/)" | tee -a "$REPORT"; failed=$((failed + 1))
else
  for tool in memcheck racecheck; do run "$CS" --tool $tool --error-exitcode 1 "$B/tests/test_cuda_backend"; done
fi
section "bench_allreduce -d cuda (NCCL) at np = $ngpu"
run mpirun -np "$ngpu" "$B/benchmarks/bench_allreduce" -d cuda -b 1K -e 256M -f 4 -o "$B/allreduce_cuda.csv"
section "bench_train: cpu vs cuda, 1 rank"
W=$(mktemp -d)
run "$B/mpiddp" synth --out "$W/train" --samples 20000 --dim 64 --classes 10 --shards 4 --seed 1
for dev in cpu cuda; do
  for h in 256 1024; do
    run mpirun -np 1 "$B/benchmarks/bench_train" --data "$W/train" --hidden $h --batch 256 --steps 50 --device $dev --csv "$B/train_gpu.csv"
  done
done
for dev in cpu cuda; do # the Transformer encoder, d 256 L 4, lengths 4-64
  run mpirun -np 1 "$B/benchmarks/bench_train" --data "$W/train" --model transformer --hidden 256 --layers 4 --heads 4 \
    --batch 64 --steps 20 --lens 4-64 --device $dev --csv "$B/tx_gpu.csv"
done
grep -h "^mpiddp " "$REPORT" | tail -6
rm -rf "$W"
section "result"
if [ $failed = 0 ]; then echo "gpu-check: all passed" | tee -a "$REPORT"; else echo "gpu-check: $failed step(s) FAILED" | tee -a "$REPORT"; fi
echo "report: $REPORT"
[ $failed = 0 ]
