#!/usr/bin/env bash
# emu_coverage.sh BUILD [MIN] — gcov line coverage of the GPU code after the emu-labelled tests ran in BUILD
# (configured with -DMPIDDP_CUDA_EMULATION=ON -DMPIDDP_COVERAGE=ON): backend_cuda.cu, its GEMMs
# (backend_cuda_gemm.cu), the encoder's kernels and ops (backend_cuda_enc.cu, _norm.cu, _attn.cu, _attn_tc.cu) cuda_plugin.c and backend_cuda_state.c as
# compiled into libmpiddp_cudaemu.so, and the NCCL half of gradient sync (sync_nccl.c) with the NCCL
# bootstrap (comm_nccl.c). Prints one line per file and fails when any is below MIN percent (default 95).
set -euo pipefail
BUILD=$(realpath "${1:?usage: emu_coverage.sh BUILD [MIN]}")
MIN=${2:-95}
SRC=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# file to measure -> object (.gcda) that holds its counters
declare -A OBJ=(
  [mpi_ddp/backend/backend_cuda.cu]=CMakeFiles/mpiddp_cudaemu.dir/mpi_ddp/backend/backend_cuda_emu.cpp.gcda
  [mpi_ddp/backend/backend_cuda_gemm.cu]=CMakeFiles/mpiddp_cudaemu.dir/mpi_ddp/backend/backend_cuda_gemm_emu.cpp.gcda
  [mpi_ddp/backend/backend_cuda_enc.cu]=CMakeFiles/mpiddp_cudaemu.dir/mpi_ddp/backend/backend_cuda_enc_emu.cpp.gcda
  [mpi_ddp/backend/backend_cuda_norm.cu]=CMakeFiles/mpiddp_cudaemu.dir/mpi_ddp/backend/backend_cuda_norm_emu.cpp.gcda
  [mpi_ddp/backend/backend_cuda_attn.cu]=CMakeFiles/mpiddp_cudaemu.dir/mpi_ddp/backend/backend_cuda_attn_emu.cpp.gcda
  [mpi_ddp/backend/backend_cuda_attn_tc.cu]=CMakeFiles/mpiddp_cudaemu.dir/mpi_ddp/backend/backend_cuda_attn_tc_emu.cpp.gcda
  [mpi_ddp/backend/cuda_plugin.c]=CMakeFiles/mpiddp_cudaemu.dir/mpi_ddp/backend/cuda_plugin.c.gcda
  [mpi_ddp/backend/backend_cuda_state.c]=CMakeFiles/mpiddp_cudaemu.dir/mpi_ddp/backend/backend_cuda_state.c.gcda
  [mpi_ddp/comm/sync_nccl.c]=CMakeFiles/mpiddp.dir/mpi_ddp/comm/sync_nccl.c.gcda
  [mpi_ddp/comm/comm_nccl.c]=CMakeFiles/mpiddp.dir/mpi_ddp/comm/comm_nccl.c.gcda
)
fail=0
printf '%-36s %9s %8s\n' file lines covered
FILES=(mpi_ddp/backend/backend_cuda.cu mpi_ddp/backend/backend_cuda_gemm.cu mpi_ddp/backend/backend_cuda_enc.cu
       mpi_ddp/backend/backend_cuda_norm.cu mpi_ddp/backend/backend_cuda_attn.cu mpi_ddp/backend/backend_cuda_attn_tc.cu mpi_ddp/backend/cuda_plugin.c mpi_ddp/backend/backend_cuda_state.c mpi_ddp/comm/sync_nccl.c mpi_ddp/comm/comm_nccl.c)
for f in "${FILES[@]}"; do
  gcda="$BUILD/${OBJ[$f]}"
  if [ ! -e "$gcda" ]; then echo "$f: no coverage data ($gcda): did the emu tests run in a -DMPIDDP_COVERAGE=ON build?"; fail=1; continue; fi
  # gcov prints "File '<path>'" then "Lines executed:P% of N" for every source the object covers
  line=$(cd "$tmp" && gcov -n -o "$(dirname "$gcda")" "$gcda" 2>/dev/null |
         awk -v want="$SRC/$f" '/^File /{cur=$2; gsub(/\x27/, "", cur)} /^Lines executed/{ if (cur == want) { print; exit } }')
  pct=$(printf '%s' "$line" | sed -n 's/Lines executed:\([0-9.]*\)% of \([0-9]*\)/\1/p')
  n=$(printf '%s' "$line" | sed -n 's/Lines executed:\([0-9.]*\)% of \([0-9]*\)/\2/p')
  if [ -z "$pct" ]; then echo "$f: gcov found no lines"; fail=1; continue; fi
  printf '%-36s %9s %7s%%\n' "$f" "$n" "$pct"
  awk -v p="$pct" -v m="$MIN" 'BEGIN{exit !(p >= m)}' || { echo "  below $MIN%"; fail=1; }
done
exit $fail
