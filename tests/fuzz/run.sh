#!/usr/bin/env bash
# run.sh [SECONDS] — builds the libFuzzer target with clang (ASan+UBSan), replays every regression input,
# then fuzzes from the committed seed corpus for SECONDS (default 60; 0 = replay only). Exit 1 on a crash.
set -euo pipefail
cd "$(dirname "$0")"
SECS=${1:-60}
OUT=${FUZZ_OUT:-../../build-fuzz}
mkdir -p "$OUT"
CFLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -I../.. -I../../include"
# word splitting of pkg-config's output is intended
clang $CFLAGS fuzz_shard.c ../../io/shard.c ../../mpi_ddp/status.c ../../slurm/env.c -o "$OUT/fuzz_shard" \
  $(pkg-config --cflags --libs hdf5-openmpi ompi-c)
# HDF5 is not instrumented and has its own bugs on corrupt input (tests/fuzz/regressions/hdf5-*): its faults
# must reach the validation guard, so ASan leaves SIGSEGV and memcpy (which HDF5 calls) alone
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:allow_user_segv_handler=1:allocator_may_return_null=1:replace_intrin=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
n=0
for r in regressions/*; do
  [ -e "$r" ] || continue
  timeout 60 "$OUT/fuzz_shard" -runs=1 "$r" > "$OUT/regression.log" 2>&1 || { cat "$OUT/regression.log"; echo "fuzz: regression $r fails"; exit 1; }
  n=$((n + 1))
done
echo "fuzz: $n regression input(s) replayed without a crash or hang"
[ "$SECS" = 0 ] && exit 0
work=$(mktemp -d)
cp corpus/* "$work"/
# -fork: jobs run in child processes, so a job that ends after a guarded HDF5 fault is simply replaced
set +e
"$OUT/fuzz_shard" -fork=1 -seed=1 -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -artifact_prefix="$OUT/crash-" "$work" > "$OUT/fuzz.log" 2>&1
rc=$?
set -e
rm -rf "$work"
grep -E "^#[0-9]+" "$OUT/fuzz.log" | tail -2
if [ $rc != 0 ]; then tail -60 "$OUT/fuzz.log"; echo "fuzz: FAILED (exit $rc); the input is under $OUT/crash-*"; exit 1; fi
echo "fuzz: no crash in $SECS s"
