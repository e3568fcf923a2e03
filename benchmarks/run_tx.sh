#!/usr/bin/env bash
# run_tx.sh — bench_train --model transformer (mpiddp: packed batches, attention per sample) beside
# peers/torch_tx.py (PyTorch DDP, gloo: the identical module on zero-padded batches with
# src_key_padding_mask) in one invocation, on THE SAME BATCHES: bench_train writes each rank's batches
# (--batches-out), the peers train exactly those. PEERS picks the peers (default both): torch = fp32 (impl
# torch-ddp, the issue's targets), torch-bf16 = the same peer under torch.autocast('cpu', bfloat16) (impl
# torch-bf16, --autocast bf16). Configurations (4 heads, ff 2d, batch per rank):
#   d 128 L 2 lengths 4-64 B 64 | d 128 L 2 16-256 B 16 | d 256 L 2 4-64 B 64 | d 256 L 4 16-256 B 16
# x RANKS, the whole matrix REPEATS times; then report_tx.py writes tx.csv (the median run of each
# configuration), tx_table.md, the mpiddp/peer ratios (x peer: torch-ddp, x bf16: torch-bf16), weak scaling,
# the targets and the plots.
# Synthetic data: D 64, 10 classes; 20 000 samples of 4-64 rows and 6 000 of 16-256 rows, 4 shards each.
# Timed windows: ~6 s of the peer at 2 ranks on the 2-core dev VM (mpiddp: ~2-3 s at 2-2.5x the peer);
# STEPS_SCALE=0.5 halves them. ~5 minutes at REPEATS=2 on that VM with PEERS=torch, ~7 with both peers.
# BATCH_ROWS=N: mpiddp batches by token budgets (--batch-rows N, balanced across ranks) and the peer trains
# those same batches, zero-padded (default 0: sample-count batches of B per rank, as users build them).
#   BUILD=build OUT=benchmarks/out [RANKS="1 2"] [REPEATS=2] [STEPS_SCALE=1] [WARMUP=3] [BATCH_ROWS=0]
#   [PEERS="torch torch-bf16"] [PRECISION=fp32|bf16] ./benchmarks/run_tx.sh
# PRECISION: mpiddp's --precision (bf16: the CPU's oneDNN bf16 GEMMs; the issue's bf16 target is the
# "x bf16" column of a PRECISION=bf16 run). The report's rows say impl mpiddp either way: keep OUT apart.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-benchmarks/out}
RANKS=${RANKS:-"1 2"}
REPEATS=${REPEATS:-2}
STEPS_SCALE=${STEPS_SCALE:-1}
WARMUP=${WARMUP:-3}
BATCH_ROWS=${BATCH_ROWS:-0}
PEERS=${PEERS-"torch torch-bf16"}
PRECISION=${PRECISION:-fp32}
for peer in $PEERS; do
  case $peer in torch | torch-bf16) ;; *) echo "run_tx.sh: PEERS: unknown peer '$peer' (torch, torch-bf16)" >&2; exit 2 ;; esac
done
rows_opt=()
[ "$BATCH_ROWS" = 0 ] || rows_opt=(--batch-rows "$BATCH_ROWS")
HEADS=4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
data() { echo "$OUT/data-tx-$1"; }  # one dataset per length range
synth() {  # LENS SAMPLES
  local dir min max
  dir=$(data "$1"); min=${1%-*}; max=${1#*-}
  [ -d "$dir" ] || mpirun -np 2 --oversubscribe "$BUILD/mpiddp" synth --out "$dir" --samples "$2" --dim 64 --classes 10 \
    --min-rows "$min" --max-rows "$max" --shards 4 --seed 1 >/dev/null
}
synth 4-64 20000
synth 16-256 6000
RAW=$OUT/tx_raw.csv
rm -f "$RAW"
# d layers lens batch steps (steps at STEPS_SCALE=1: ~6 s of the peer's timed steps at 2 ranks)
CONFIGS=("128 2 4-64 64 60" "128 2 16-256 16 40" "256 2 4-64 64 20" "256 4 16-256 16 8")
port=29800
for rep in $(seq "$REPEATS"); do
  for cfg in "${CONFIGS[@]}"; do
    read -r d L lens B s0 <<<"$cfg"
    s=$(awk -v s="$s0" -v k="$STEPS_SCALE" 'BEGIN { n = int(s * k + 0.5); print (n < 2 ? 2 : n) }')
    for np in $RANKS; do
      tag=d$d-L$L-$lens-np$np
      rm -f "$OUT/batches-$tag".r*
      mpirun -np "$np" --oversubscribe "$BUILD/benchmarks/bench_train" --data "$(data "$lens")" --model transformer \
        --hidden "$d" --layers "$L" --heads $HEADS --batch "$B" --steps "$s" --warmup "$WARMUP" --lens "$lens" \
        --csv "$RAW" --batches-out "$OUT/batches-$tag" --precision "$PRECISION" "${rows_opt[@]}"
      for peer in $PEERS; do
        peer_opt=()
        [ "$peer" = torch-bf16 ] && peer_opt=(--autocast bf16 --impl torch-bf16)
        port=$((port + 1))
        mpirun -np "$np" --oversubscribe /usr/bin/python3 benchmarks/peers/torch_tx.py --data "$(data "$lens")" --hidden "$d" \
          --layers "$L" --heads $HEADS --batches "$OUT/batches-$tag" --steps "$s" --warmup "$WARMUP" --lens "$lens" \
          --csv "$RAW" --port $port "${peer_opt[@]}" 2>&1 | grep -v "^\[W" || true
      done
    done
  done
done
PRECISION=$PRECISION /usr/bin/python3 benchmarks/report_tx.py "$RAW" "$OUT" | tee "$OUT/tx_table.txt"
