#!/usr/bin/env bash
# demo.sh — quick start 1: installs what is missing (Debian, as root), builds mpiddp, makes a synthetic
# variable-length dataset and trains the reference model on 2 MPI ranks. Prints the run directory.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMPIDDP_TESTS=OFF -DMPIDDP_BENCHMARKS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target mpiddp_cli >/dev/null
BIN=$(realpath "$BUILD")/mpiddp
echo "built $BIN"
./scripts/demo_run.sh "$BIN" "$PWD/demo"
echo "metrics: $PWD/demo/run/metrics.csv   checkpoint: $PWD/demo/run/checkpoints/last.h5"
