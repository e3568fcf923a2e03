#!/usr/bin/env bash
# run_manyshards.sh — datasets of 100 000 shards (issue #33): the header phase of start-up (bench_open: spread
# validation at np 1 and np 2, warm and cold, and with the manifest), the time to the first step (`train
# --fast-dev-run 1`) beside the PyTorch peer that opens one h5py file per sample (peers/torch_per_file.py),
# `index` and `inspect`, then one epoch under `ulimit -n 1024` and a map budget of 256 with the peak open
# shards, descriptors and maps (run.json) and each rank's peak private memory, at 100 000 and at 4 000 shards.
# A benchmark, not a test: about 10 minutes here; the data (about 1 GB, 104 500 files) is kept in OUT.
#   BUILD=build OUT=/var/tmp/mpiddp-manyshards [SHARDS=100000] [SMALL=4000] [REPS=3] ./benchmarks/run_manyshards.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=$(cd "${BUILD:-build}" && pwd)
OUT=${OUT:-/var/tmp/mpiddp-manyshards}
SHARDS=${SHARDS:-100000}
SMALL=${SMALL:-4000}
REPS=${REPS:-3}
M=$BUILD/mpiddp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
cd "$OUT"
LOG=$OUT/manyshards.txt
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>> "$OUT/stderr.txt"; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}'; }

# one-sample shards of 2-6 rows, D 8, 4 classes (synth writes each directory's manifest); "bare" copies are hard
# links of the same files without the manifest
make_data() { # DIR SHARDS SEED FIRST_ID
  [ -f "$1/.complete" ] && return 0
  rm -rf "$1" "$1-bare"
  mpirun -np 2 "$M" synth --out "$1" --shards "$2" --samples "$2" --min-rows 2 --max-rows 6 --dim 8 --classes 4 \
    --seed "$3" --first-id "$4" > /dev/null
  touch "$1/.complete"
}
make_data s$SHARDS "$SHARDS" 7 0
make_data s$SMALL "$SMALL" 7 0
make_data v500 500 8 1000000
for d in s$SHARDS s$SMALL v500; do
  [ -f "$d/mpiddp-manifest.bin" ] || mpirun -np 2 "$M" index "$d" > /dev/null
  [ -d "$d-bare" ] || { cp -al "$d" "$d-bare"; rm -f "$d-bare/mpiddp-manifest.bin"; }
done
BIG=s$SHARDS
say "== $(date -u +%FT%TZ) $(getconf _NPROCESSORS_ONLN) cores, $(awk '/model name/ {$1=$2=$3=""; print; exit}' /proc/cpuinfo | sed 's/^ *//'), $SHARDS shards of one sample (2-6 rows, D 8)"

say "== header phase (bench_open: ddp_dataset_open, the slowest rank; reps $REPS)"
for np in 1 2; do
  # cold first: a cold run drops the page cache, so the warm repetitions come after it (the first of them warms)
  for d in "$BIG-bare" "$BIG"; do
    mpirun -np $np "$BUILD/benchmarks/bench_open" --data "$d" --reps 1 --cold | tee -a "$LOG"
    mpirun -np $np "$BUILD/benchmarks/bench_open" --data "$d" --reps "$REPS" | tee -a "$LOG"
  done
done

say "== time to the first step at np 2 (whole command: start, both datasets opened, one step, one validation batch)"
for r in $(seq "$REPS"); do
  rm -rf first-bare first-mf
  say "mpiddp, no manifest:   $(secs mpirun -np 2 "$M" train --train "$BIG-bare" --val v500-bare --out first-bare --fast-dev-run 1 --no-progress) s"
  say "mpiddp, manifest:      $(secs mpirun -np 2 "$M" train --train "$BIG" --val v500 --out first-mf --fast-dev-run 1 --no-progress) s"
  say "PyTorch per-file peer: $(secs mpirun -np 2 /usr/bin/python3 "$SRC/benchmarks/peers/torch_per_file.py" --data "$BIG" --val v500 --classes 4) s (whole command)"
  mpirun -np 2 /usr/bin/python3 "$SRC/benchmarks/peers/torch_per_file.py" --data "$BIG" --val v500 --classes 4 2>/dev/null | tee -a "$LOG"
done

say "== index and inspect"
say "index np 1: $(secs "$M" index "$BIG-bare" --manifest "$OUT/idx1.bin") s; np 2: $(secs mpirun -np 2 "$M" index "$BIG-bare" --manifest "$OUT/idx2.bin") s"
cmp -s idx1.bin idx2.bin && say "(the two manifests are identical)" || say "(the manifests of np 1 and np 2 DIFFER)"
say "inspect with the manifest: $(secs "$M" inspect "$BIG") s; without: $(secs "$M" inspect "$BIG-bare") s"

# one epoch, peak private memory per rank sampled from /proc every 0.2 s
epoch() { # NAME DATA [env...]
  local name=$1 data=$2; shift 2
  rm -rf "ep-$name"
  (ulimit -n 1024; exec env "$@" mpirun -np 2 -x MPIDDP_MAX_SHARD_MAPS "$M" train --train "$data" --val v500 --out "ep-$name" \
     --epochs 1 --batch-size 32 --no-progress > "ep-$name.log" 2>&1) &
  local job=$! peak=0 t0 t1
  t0=$(date +%s.%N)
  while kill -0 $job 2>/dev/null; do
    for p in $(pgrep -f "mpiddp train --train $data " || true); do
      a=$(awk '/^RssAnon:/ {print $2}' /proc/$p/status 2>/dev/null || echo 0)
      [ "${a:-0}" -gt "$peak" ] && peak=$a
    done
    sleep 0.2
  done
  wait $job || { cat "ep-$name.log"; say "$name: the epoch FAILED"; return 1; }
  t1=$(date +%s.%N)
  /usr/bin/python3 - "ep-$name/run.json" "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')" "$peak" <<'PY' | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))["data_cache"]
print(f"{sys.argv[2]}: epoch {sys.argv[3]} s; peak private {int(sys.argv[4]) / 1024:.0f} MiB per rank; budget {d['max_open_shards']} "
      f"shards / {d['shard_map_budget']} maps (RLIMIT_NOFILE {d['open_files_limit']}); peak {d['peak_open_shards']} shards, "
      f"{d['peak_shard_fds']} fds, {d['peak_shard_maps']} maps; train hit rate {d['train']['hit_rate']:.4f}")
PY
}
say "== one epoch at np 2, batch 32, ulimit -n 1024"
export MPIDDP_MAX_SHARD_MAPS=0
epoch "$SHARDS-ulimit1024" "$BIG"
epoch "$SMALL-ulimit1024" "s$SMALL"
export MPIDDP_MAX_SHARD_MAPS=256
epoch "$SHARDS-maps256" "$BIG"
say "== done: $LOG"
