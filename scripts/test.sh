#!/usr/bin/env bash
# test.sh — quick start 2: installs what is missing, builds (with the CUDA backend when nvcc is present,
# so the GPU code is compiled and linked even without a GPU) and runs the whole CTest suite; reruns the
# tests whose claims depend on the BLAS kernels under a second OpenBLAS core type; builds the CUDA plugin
# on the host emulator and runs the GPU tests and the multi-rank --device cuda suites on it, with gcov line
# coverage of the GPU code (at least 95%); fuzzes shard validation for 60 s; then builds with ASan+UBSan
# and runs the suite under the sanitizers. The long tier (CTest label `long`: the signal storm, the
# allocation-failure and spread-validation sweeps) runs once: in the sanitizer pass, or in the first pass
# when that one is skipped. CTest runs one test per core (nproc); tests that bound a run's wall time run alone.
# Fails when any test fails or when a pass finds no test. Every pass configures every option it relies on,
# so the order of demo.sh and test.sh, and repeated runs, do not matter. Each pass prints its start time.
#   SANITIZE=0 ./scripts/test.sh   skips the sanitizer pass; FUZZ_SECONDS=0 only replays the fuzz regressions
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
JOBS=$(nproc)
build() {
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$JOBS" 2>&1 | grep -Ev '^\[|^-- |Scanning|Built target|Consolidate' || true
  cmake --build "$dir" -j"$JOBS" >/dev/null   # fails loudly if the build is broken
}
# one test per core at a time; the tests that bound a run's wall time are RUN_SERIAL (tests/CMakeLists.txt)
ctest_in() { local dir=$1; shift; (cd "$dir" && ctest --output-on-failure --no-tests=error --timeout 600 -j"$JOBS" "$@"); }
pass() { printf '== %s  [%dm%02ds]\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }   # the time since test.sh began
long=(-LE long)                # the long tier runs in the sanitizer pass
[ "${SANITIZE:-1}" != 0 ] || long=()

pass "build and test (Release, CUDA backend if nvcc is found)${long:+, without the long tier}"
build build -DCMAKE_BUILD_TYPE=Release -DMPIDDP_TESTS=ON -DMPIDDP_BENCHMARKS=ON -DMPIDDP_SANITIZE=OFF -DMPIDDP_CUDA=AUTO
ctest_in build "${long[@]}"

# The same determinism-sensitive tests under another OpenBLAS kernel family: some kernels sum a GEMM's
# edge rows in another order, so a claim that holds under one CPU family only is a bug. The first pass ran the
# large fp32 GEMMs on oneDNN (where this machine has it); this one runs every fp32 GEMM on OpenBLAS.
default_core=$(build/tests/blas_core)
other_core=$(./scripts/other_coretype.sh "$default_core")
pass "determinism-sensitive tests again with OPENBLAS_CORETYPE=$other_core (this machine's default: $default_core), fp32 GEMMs on OpenBLAS only"
[ "$(OPENBLAS_CORETYPE=$other_core build/tests/blas_core)" = "$other_core" ] || { echo "OPENBLAS_CORETYPE=$other_core not honoured"; exit 1; }
OPENBLAS_CORETYPE=$other_core MPIDDP_CPU_ONEDNN_FP32=0 ctest_in build -L determinism

pass "the GPU path on the host CUDA emulator: backend vs CPU twin, --device cuda at np 1/2/4, faults"
build build-emu -DCMAKE_BUILD_TYPE=Release -DMPIDDP_CUDA=OFF -DMPIDDP_CUDA_EMULATION=ON -DMPIDDP_COVERAGE=ON \
  -DMPIDDP_SANITIZE=OFF -DMPIDDP_TESTS=ON -DMPIDDP_BENCHMARKS=ON
find build-emu -name '*.gcda' -delete   # coverage of this run only
ctest_in build-emu -L emu
pass "line coverage of the GPU code under the emulator"
./scripts/emu_coverage.sh build-emu 95

pass "fuzzing shard validation (libFuzzer, ASan+UBSan, ${FUZZ_SECONDS:-60} s)"
./tests/fuzz/run.sh "${FUZZ_SECONDS:-60}"
if [ "${SANITIZE:-1}" != 0 ]; then
  pass "build and test under AddressSanitizer + UndefinedBehaviorSanitizer, with the long tier"
  build build-asan -DCMAKE_BUILD_TYPE=Debug -DMPIDDP_SANITIZE=ON -DMPIDDP_CUDA=OFF -DMPIDDP_TESTS=ON -DMPIDDP_BENCHMARKS=OFF
  ctest_in build-asan
fi
pass "done"
