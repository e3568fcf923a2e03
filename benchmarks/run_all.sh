#!/usr/bin/env bash
# run_all.sh — every benchmark in one run (under 10 minutes on the 2-core dev machine): allreduce
# (nccl-tests style, plus bucketed sync vs raw MPI_Allreduce), training throughput and scaling beside
# PyTorch DDP, and the I/O benchmark on a 1 GiB dataset (IO_GB=4 for the issue's 4 GiB figures).
# Writes CSV, PNG plots and tables under benchmarks/out/.
#   ./benchmarks/run_all.sh            (BUILD=build by default; builds it if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-benchmarks/out}
export BUILD OUT
[ -x "$BUILD/benchmarks/bench_train" ] || { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j"$(nproc)" >/dev/null; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$OUT"
start=$(date +%s)
echo "== allreduce (2 ranks)"
mpirun -np 2 --oversubscribe "$BUILD/benchmarks/bench_allreduce" -b 8 -e 64M -f 4 -n 20 -w 5 -o "$OUT/allreduce.csv" | tee "$OUT/allreduce_table.txt"
echo "== training throughput, mpiddp vs PyTorch DDP"
./benchmarks/run_train.sh
echo "== I/O"
IO_GB=${IO_GB:-1} IO_DIM=64 OUT="$OUT/io" ./benchmarks/run_io.sh
/usr/bin/python3 benchmarks/report_train.py --plots-only "$OUT"
echo "run_all: $(( $(date +%s) - start )) s; results in $OUT"
