#!/usr/bin/env bash
# gpu-check.sh — on a machine with an NVIDIA GPU: builds the CUDA configuration, runs the GPU-labelled
# tests and a short GPU training benchmark (CPU vs CUDA on the same data). Without a GPU it says so, exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU visible on $(hostname); nothing to do"
  exit 0
fi
nvidia-smi -L
./scripts/deps.sh
BUILD=${BUILD:-build-gpu}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMPIDDP_CUDA=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
(cd "$BUILD" && ctest --output-on-failure -L gpu)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d)
"$BUILD/mpiddp" synth --out "$W/train" --samples 20000 --dim 64 --classes 10 --shards 4 --seed 1 >/dev/null
"$BUILD/mpiddp" synth --out "$W/val" --samples 2000 --dim 64 --classes 10 --shards 1 --seed 1 --first-id 1000000 >/dev/null
printf '%-6s %8s %14s %10s\n' device hidden samples/s val/acc
for dev in cpu cuda; do
  for h in 256 1024; do
    mpirun -np 1 "$BUILD/mpiddp" train --train "$W/train" --val "$W/val" --out "$W/run-$dev-$h" --device $dev \
      --epochs 1 --batch-size 256 --hidden $h --no-progress --log-every 1000000 >/dev/null
    sps=$(awk -F, 'NR==1{for(i=1;i<=NF;i++)if($i=="train/samples_per_s")c=i;next} $c!=""{v=$c} END{print v}' "$W/run-$dev-$h/metrics.csv")
    acc=$(awk -F, 'NR==1{for(i=1;i<=NF;i++)if($i=="val/acc")c=i;next} $c!=""{v=$c} END{print v}' "$W/run-$dev-$h/metrics.csv")
    printf '%-6s %8s %14.0f %10s\n' $dev $h "$sps" "$acc"
  done
done
rm -rf "$W"
