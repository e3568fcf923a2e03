#!/usr/bin/env bash
# run_io.sh — the I/O benchmark: builds (if needed) a dataset of IO_GB GiB, then reads it from 1 and 4
# ranks with mpiddp's mmap reader, per-sample H5Dread and the h5py peer, warm and cold, and writes
# benchmarks/out/io.csv, io.png and the table (also printed).
#   IO_GB=4 IO_DIM=64 IO_SAMPLES=20000 BUILD=build OUT=benchmarks/out ./benchmarks/run_io.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
GB=${IO_GB:-4}
K=${IO_SAMPLES:-20000}
DIM=${IO_DIM:-64}
DATA=${IO_DATA:-/tmp/mpiddp-bench-io-${GB}g-d$DIM}
OUT=${OUT:-benchmarks/out}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$OUT"
if [ ! -d "$DATA" ]; then
  # 4..64 rows (mean 34) of DIM floats: 8.7 KB per sample at D=64
  samples=$(( GB * 1024 * 1024 * 1024 / (34 * DIM * 4) ))
  echo "creating $DATA: $samples samples (~$GB GiB)"
  mpirun -np 2 --oversubscribe "$BUILD/mpiddp" synth --out "$DATA" --samples $samples --dim $DIM --classes 10 --shards 16 --seed 1
fi
"$BUILD/mpiddp" inspect "$DATA" | sed -n '1,3p;/^bytes/p'
RAW="$OUT/io_raw.csv"
rm -f "$RAW"; rm -rf "$RAW".sync-*
for np in 1 4; do
  mpirun -np $np --oversubscribe "$BUILD/benchmarks/bench_io" --data "$DATA" --samples "$K" --csv "$RAW"
  mpirun -np $np --oversubscribe /usr/bin/python3 benchmarks/peers/h5py_read.py "$DATA" "$((K / 4))" "$RAW"
  rm -rf "$RAW".sync-*
done
/usr/bin/python3 benchmarks/report_io.py "$RAW" "$OUT" | tee "$OUT/io_table.txt"
[ "${KEEP_DATA:-1}" = 1 ] || rm -rf "$DATA"
