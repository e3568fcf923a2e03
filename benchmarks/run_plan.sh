#!/usr/bin/env bash
# run_plan.sh — activation buffers sized to the run's plan (issue #32, item 5; docs/sizing.md#device-memory): the
# workspace bench_train plans for run_gpu.sh's configurations (2 048 samples of 16-512 rows) beside the bound
# batch x longest sample, with the device memory per row per layer that each row saves at bf16; then what the
# walk costs at start-up: `train --fast-dev-run 2` over SHARDS shards, plan off and on, in interleaved pairs at
# np 1 and 2 (median of REPS). Prints markdown. A benchmark, not a test: about a minute here.
#   BUILD=build OUT=/var/tmp/mpiddp-plan [SHARDS=10000] [REPS=5] ./benchmarks/run_plan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${BUILD:-build}" && pwd)
OUT=${OUT:-/var/tmp/mpiddp-plan}
SHARDS=${SHARDS:-10000}
REPS=${REPS:-5}
M=$BUILD/mpiddp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
mkdir -p "$OUT" && cd "$OUT"
[ -d k ] || "$M" synth --out k --samples 2048 --dim 64 --classes 10 --min-rows 16 --max-rows 512 --shards 4 --seed 1 >/dev/null
echo "### Workspace: planned against the bound (run_gpu.sh's data, bench_train, one rank)"
echo
echo "| configuration | B | steps read | planned rows | bound rows | device memory saved at bf16 |"
echo "|---|---:|---:|---:|---:|---:|"
for c in "tx d512 L8 B128:128:12:3:512:8:8" "tx d1024 L12 B128:128:8:2:1024:12:16" "tx d512 L8:32:20:3:512:8:8" \
         "tx d1024 L12:32:10:3:1024:12:16"; do
  IFS=: read -r label B s w d L H <<< "$c"
  line=$(MPIDDP_PLAN_BUFFERS=1 mpirun -np 1 "$BUILD/benchmarks/bench_train" --data k --model transformer --hidden 64 \
           --layers 1 --heads 2 --batch "$B" --steps "$s" --warmup "$w" --lens 16-512 --device cpu 2>&1 | grep '^bench_train workspace')
  planned=$(sed -n 's/^bench_train workspace: \([0-9]*\) rows.*/\1/p' <<< "$line")
  bound=$(sed -n 's/.*(bound \([0-9]*\)).*/\1/p' <<< "$line")
  # bytes per row on a GPU at bf16: L (28d + 4 heads + 16) + 30d + 4 heads + 8, f = 2d (docs/sizing.md)
  gb=$(awk -v r=$((bound - planned)) -v d="$d" -v L="$L" -v H="$H" \
         'BEGIN { printf "%.1f GB", r * (L * (28 * d + 4 * H + 16) + 30 * d + 4 * H + 8) / 1e9 }')
  echo "| $label | $B | $((s + w)) | $planned | $bound | $gb |"
done
echo
[ -d m ] || { "$M" synth --out m --samples $((2 * SHARDS)) --dim 4 --classes 3 --min-rows 2 --max-rows 20 --shards "$SHARDS" \
                --seed 1 >/dev/null && "$M" index m >/dev/null; }
[ -d mv ] || "$M" synth --out mv --samples 100 --dim 4 --classes 3 --min-rows 2 --max-rows 20 --shards 1 --seed 2 \
                --first-id 9000000 >/dev/null
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'; }
med() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# startup TITLE OPTIONS...: the batch options (--batch-size 16, or --batch-rows 64: token budgets, whose samplers
# read every sample's row count too)
startup() {
  local title=$1; shift
  echo "### Start-up: train --fast-dev-run 2 over $SHARDS shards ($((2 * SHARDS)) samples, warm page cache)$title, plan off / on"
  echo
  echo "| ranks | plan off s (median) | plan on s (median) | difference s |"
  echo "|---:|---:|---:|---:|"
  for np in 1 2; do
    off=() on=()
    for ((i = 0; i < REPS; i++)); do
      for p in 0 1; do
        rm -rf "run$p"
        t=$(MPIDDP_MAX_OPEN_SHARDS=${MAXOPEN:-0} MPIDDP_PLAN_BUFFERS=$p secs mpirun -np "$np" "$M" train --train m --val mv --out "run$p" --model transformer \
              --hidden 8 --heads 2 --layers 1 --epochs 1 --fast-dev-run 2 --no-progress "$@")
        [ -e "run$p/run.json" ] || { echo "run_plan.sh: the run (plan $p, np $np) failed" >&2; exit 1; }
        [ "$p" = 0 ] && off+=("$t") || on+=("$t")
      done
    done
    a=$(med "${off[@]}") b=$(med "${on[@]}")
    echo "| $np | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%+.3f", b - a}') |"
  done
  echo
}
startup "" --batch-size 16
# with budgets both sides need every row count: the plan hands its copy to the trainer (one read, not two); at most
# 64 open shards (MPIDDP_MAX_OPEN_SHARDS), as where the descriptor limit binds (100 000 shards), so a read opens them
MAXOPEN=64 startup " with --batch-rows 64, at most 64 open shards" --batch-rows 64
