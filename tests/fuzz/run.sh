#!/usr/bin/env bash
# run.sh [SECONDS] — builds the libFuzzer target with clang (ASan+UBSan), replays every regression input,
# then fuzzes from the committed seed corpus for SECONDS (default 60; 0 = replay only).
#
# HDF5 1.10 itself has memory bugs on corrupt files (tests/fuzz/regressions/hdf5-*). It is not
# instrumented, so its faults either reach the validation guard (SIGSEGV, hangs) or are caught by an
# ASan interceptor it calls (strdup, memcpy). Every crash is therefore triaged: a report whose faulting
# frame is inside libhdf5 is HDF5's (mpiddp contains it: validation runs in a forked child, see
# io/dataset.c); a report whose faulting frame is mpiddp's code fails this script.
set -euo pipefail
cd "$(dirname "$0")"
SECS=${1:-60}
OUT=${FUZZ_OUT:-../../build-fuzz}
mkdir -p "$OUT"
CFLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -I../.. -I../../include"
# word splitting of pkg-config's output is intended
clang $CFLAGS fuzz_shard.c ../../io/shard.c ../../io/shard_validate.c ../../io/sigbus.c ../../mpi_ddp/core/status.c ../../mpi_ddp/core/settings.c -o "$OUT/fuzz_shard" \
  $(pkg-config --cflags --libs hdf5-openmpi ompi-c)
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:allow_user_segv_handler=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# triage FILE: prints ok | hdf5 | ours
triage() {
  if timeout 60 "$OUT/fuzz_shard" -runs=1 "$1" > "$OUT/triage.log" 2>&1; then echo ok; return; fi
  # first frame with a source location or in a shared library: the interceptor frames have neither
  local frame
  frame=$(grep -E '^ +#[0-9]+ ' "$OUT/triage.log" | grep -E '\.c:[0-9]+|\.so' | grep -vE 'libc\.so|libclang_rt' | head -1)
  case "$frame" in
    *libhdf5*) echo hdf5 ;;
    *) echo ours ;;
  esac
}

n=0; h=0
for r in regressions/*; do
  [ -e "$r" ] || continue
  case $(triage "$r") in
    ours) cat "$OUT/triage.log"; echo "fuzz: regression $r crashes in mpiddp code"; exit 1 ;;
    hdf5) h=$((h + 1)) ;;
  esac
  n=$((n + 1))
done
echo "fuzz: $n regression input(s) replayed: no fault in mpiddp code ($h fault(s) inside HDF5, contained)"
[ "$SECS" = 0 ] && exit 0
work=$(mktemp -d)
cp corpus/* "$work"/
rm -f "$OUT"/crash-* "$OUT"/timeout-* "$OUT"/oom-*
# -fork: jobs run in child processes; crashes are collected and triaged below instead of stopping the run
set +e
"$OUT/fuzz_shard" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -seed=1 -max_total_time="$SECS" -timeout=10 \
  -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$OUT/" "$work" > "$OUT/fuzz.log" 2>&1
rc=$?
set -e
rm -rf "$work"
grep -E "^#[0-9]+" "$OUT/fuzz.log" | tail -1 || true
# with -fork, libFuzzer exits with the status of the job running when time is up (a contained HDF5 crash
# gives 134): only a run that did not reach its time limit is a libFuzzer failure; crashes are triaged below
[ $rc = 0 ] || grep -q "INFO: fuzzed for .* seconds, wrapping up" "$OUT/fuzz.log" ||
  { tail -40 "$OUT/fuzz.log"; echo "fuzz: libFuzzer failed (exit $rc)"; exit 1; }
ours=0; theirs=0
for c in "$OUT"/crash-* "$OUT"/timeout-*; do
  [ -e "$c" ] || continue
  case $(triage "$c") in
    ours) ours=$((ours + 1)); cat "$OUT/triage.log" | tail -40; echo "fuzz: $c crashes in mpiddp code" ;;
    *) theirs=$((theirs + 1)) ;;
  esac
done
[ $ours = 0 ] || { echo "fuzz: FAILED: $ours input(s) crash mpiddp code (kept under $OUT; add them to tests/fuzz/regressions)"; exit 1; }
echo "fuzz: $SECS s: no fault in mpiddp code; $theirs input(s) fault inside HDF5 (contained; kept under $OUT)"
