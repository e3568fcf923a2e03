# lib.sh — shared helpers for the shell-driven CTest cases: paths (MPIDDP, TESTTOOL, SRC, WORK come from
# CTest), an mpirun wrapper that works as root and oversubscribed, and small assertion functions.
set -euo pipefail
: "${MPIDDP:?}" "${SRC:?}" "${WORK:?}"
PY=/usr/bin/python3
# The device train/eval run on: cpu unless a test is registered for the CUDA path (on a GPU, or on the
# host emulator with MPIDDP_CUDA_PLUGIN=libmpiddp_cudaemu.so). Tests that mean the CPU pass it explicitly.
DEVICE=${MPIDDP_TEST_DEVICE:-cpu}
# Extra train options naming the model under test: CTest registers some suites a second time with the
# Transformer encoder (MPIDDP_TEST_MODEL_ARGS="--model transformer ..."); empty for the MLP.
read -r -a MODEL_ARGS <<< "${MPIDDP_TEST_MODEL_ARGS:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl_vader_single_copy_mechanism=none
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"

mpirun_np() { local np=$1; shift; mpirun -np "$np" --oversubscribe "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "PASS: $*"; }
# expect_rc WANT CMD...: runs CMD, captures stdout/stderr in $OUT/$ERR, checks the exit code
expect_rc() {
  local want=$1; shift
  set +e; "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"; local rc=$?; set -e
  OUT=$(cat "$WORK/out.txt"); ERR=$(cat "$WORK/err.txt")
  [ "$rc" = "$want" ] || { echo "stdout: $OUT" >&2; echo "stderr: $ERR" >&2; fail "'$*' exited $rc, expected $want"; }
}
# last value of column NAME in a CSV (non-empty cells only)
csv_last() { awk -F, -v col="$2" 'NR==1{for(i=1;i<=NF;i++) if($i==col) c=i; next} c && $c!="" {v=$c} END{print v}' "$1"; }
synth() { "$MPIDDP" synth "$@" >/dev/null; }
