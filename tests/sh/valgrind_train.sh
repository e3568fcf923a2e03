# A 1-rank training run (and its forked validation children) is clean under valgrind memcheck: no invalid
# access, no uninitialised use, no definite leak outside Open MPI's own start-up (tests/valgrind/openmpi.supp).
. "$(dirname "$0")/lib.sh"
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
synth --out t --samples 60 --dim 4 --classes 2 --shards 2 --max-rows 5
synth --out v --samples 20 --dim 4 --classes 2 --shards 1 --max-rows 5 --first-id 1000
# valgrind (3.19) cannot execute AVX-512: OpenBLAS's AVX-512 kernel families die with SIGILL under it, so
# this run uses the AVX2 ones (the other tests cover the AVX-512 kernels)
case "${OPENBLAS_CORETYPE:-}" in SkylakeX|Cooperlake|SapphireRapids) export OPENBLAS_CORETYPE=Haswell ;; esac
set +e
valgrind --error-exitcode=9 --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
  --suppressions="$SRC/tests/valgrind/openmpi.supp" \
  "$MPIDDP" train --device "$DEVICE" --train t --val v --out r --epochs 2 --batch-size 8 --no-progress > vg.out 2> vg.err
rc=$?
set -e
grep -E "ERROR SUMMARY|definitely lost:" vg.err
[ $rc = 0 ] || { grep -A20 -E "Invalid|uninitialised|definitely lost in" vg.err | head -80; fail "valgrind reported errors (exit $rc)"; }
[ -f r/checkpoints/last.h5 ] || fail "the run did not finish"
pass "valgrind memcheck clean"
