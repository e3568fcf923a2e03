#!/usr/bin/env bash
# test.sh — quick start 2: installs what is missing, builds (with the CUDA backend when nvcc is present,
# so the GPU code is compiled and linked even without a GPU) and runs the whole CTest suite; then builds
# again with ASan+UBSan and runs the suite under the sanitizers, and fuzzes shard validation for 60 s.
# Fails when any test fails.
#   SANITIZE=0 ./scripts/test.sh   skips the sanitizer pass; FUZZ_SECONDS=0 only replays the fuzz regressions
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
JOBS=$(nproc)
run_suite() {
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$JOBS" 2>&1 | grep -Ev '^\[|^-- |Scanning|Built target|Consolidate' || true
  cmake --build "$dir" -j"$JOBS" >/dev/null   # fails loudly if the build is broken
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j1)
}
echo "== build and test (Release, CUDA backend if nvcc is found)"
run_suite build -DCMAKE_BUILD_TYPE=Release
echo "== fuzzing shard validation (libFuzzer, ASan+UBSan, ${FUZZ_SECONDS:-60} s)"
./tests/fuzz/run.sh "${FUZZ_SECONDS:-60}"
if [ "${SANITIZE:-1}" != 0 ]; then
  echo "== build and test under AddressSanitizer + UndefinedBehaviorSanitizer"
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DMPIDDP_SANITIZE=ON -DMPIDDP_CUDA=OFF -DMPIDDP_BENCHMARKS=OFF
fi
