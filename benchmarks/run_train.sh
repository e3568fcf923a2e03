#!/usr/bin/env bash
# run_train.sh — bench_train (mpiddp) beside peers/torch_ddp.py (PyTorch DDP, gloo) in one invocation:
# hidden 64/256/512 x 1/2/4 ranks on synthetic data (D 64, 4-64 rows, batch 64 per rank), the whole
# matrix REPEATS times (default 3; this VM's timings move ~5-10% run to run); then report_train.py writes
# train.csv (the median run of each configuration), the table with mpiddp/peer ratios, and the plots.
# With BATCH_ROWS (default 2176 = 64 samples x 34 mean rows: the same mean global batch) each configuration
# also runs with token budgets (--batch-rows, impl "mpiddp-rows"): the balance comparison of issue #15.
#   BUILD=build OUT=benchmarks/out [RANKS="1 2 4"] [HIDDEN="64 256 512"] [REPEATS=3] [BATCH_ROWS=2176|0] ./benchmarks/run_train.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-benchmarks/out}
RANKS=${RANKS:-"1 2 4"}
REPEATS=${REPEATS:-3}
HIDDEN=${HIDDEN:-"64 256 512"}
BATCH_ROWS=${BATCH_ROWS:-2176}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
DATA=$OUT/data-train
[ -d "$DATA" ] || mpirun -np 2 --oversubscribe "$BUILD/mpiddp" synth --out "$DATA" --samples 40000 --dim 64 --classes 10 --shards 4 --seed 1 >/dev/null
RAW=$OUT/train_raw.csv
rm -f "$RAW"
# timed windows of ~1 s at 2 ranks, so a passing disturbance on this shared VM moves a run less
steps() { case $1 in 64) echo 600 ;; 256) echo 120 ;; *) echo 40 ;; esac; }
port=29600
for rep in $(seq "$REPEATS"); do
  for h in $HIDDEN; do
    for np in $RANKS; do
      s=$(steps "$h")
      mpirun -np "$np" --oversubscribe "$BUILD/benchmarks/bench_train" --data "$DATA" --hidden "$h" --steps "$s" --warmup 5 --csv "$RAW"
      if [ "$BATCH_ROWS" != 0 ]; then
        mpirun -np "$np" --oversubscribe "$BUILD/benchmarks/bench_train" --data "$DATA" --hidden "$h" --steps "$s" --warmup 5 \
          --batch-rows "$BATCH_ROWS" --csv "$RAW"
      fi
      port=$((port + 1))
      mpirun -np "$np" --oversubscribe /usr/bin/python3 benchmarks/peers/torch_ddp.py --data "$DATA" --hidden "$h" --steps "$s" \
        --warmup 5 --csv "$RAW" --port $port 2>&1 | grep -v "^\[W" || true
    done
  done
done
/usr/bin/python3 benchmarks/report_train.py "$RAW" "$OUT" | tee "$OUT/train_table.txt"
