#!/usr/bin/env bash
# demo_run.sh MPIDDP OUTDIR — the demo's data and training, shared by scripts/demo.sh and the CTest
# demo_accuracy test: synthetic train/val sets, then 2-rank training of the reference model.
set -euo pipefail
MPIDDP=$1 OUT=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
rm -rf "$OUT" && mkdir -p "$OUT"
# same seed, disjoint sample ids: the validation set comes from the same distribution
mpirun -np 2 --oversubscribe "$MPIDDP" synth --out "$OUT/data/train" --samples 8000 --dim 32 --classes 8 --shards 4 --seed 7
mpirun -np 2 --oversubscribe "$MPIDDP" synth --out "$OUT/data/val" --samples 2000 --dim 32 --classes 8 --shards 2 --seed 7 --first-id 1000000
"$MPIDDP" inspect "$OUT/data/train" | head -3
mpirun -np 2 --oversubscribe "$MPIDDP" train --train "$OUT/data/train" --val "$OUT/data/val" --out "$OUT/run" \
  --epochs 3 --batch-size 32 --hidden 64 --lr 2e-3 --log-every 25
