#!/usr/bin/env bash
# emu_coverage.sh BUILD [MIN] — gcov line coverage of the GPU code after the emu-labelled tests ran in BUILD
# (configured with -DMPIDDP_CUDA_EMULATION=ON -DMPIDDP_COVERAGE=ON): every file of mpi_ddp/backend/cuda/ that
# libmpiddp_cudaemu.so compiles (the kernels, the GEMMs, cuDNN's attention, cuda_plugin.c, backend_cuda_state.c),
# and the NCCL half of gradient sync (sync_nccl.c) with the NCCL bootstrap (comm_nccl.c). Prints one line per
# file and fails when any is below MIN percent (default 95).
set -euo pipefail
BUILD=$(realpath "${1:?usage: emu_coverage.sh BUILD [MIN]}")
MIN=${2:-95}
SRC=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# file to measure -> object (.gcda) that holds its counters: each .cu through its tests/cuda_emu/*_emu.cpp, the
# library's sources through its object library mpiddp_core
E=CMakeFiles/mpiddp_cudaemu.dir
G=mpi_ddp/backend/cuda
declare -A OBJ=([$G/cuda_plugin.c]=$E/$G/cuda_plugin.c.gcda [$G/backend_cuda_state.c]=$E/$G/backend_cuda_state.c.gcda
                [mpi_ddp/comm/sync_nccl.c]=CMakeFiles/mpiddp_core.dir/mpi_ddp/comm/sync_nccl.c.gcda
                [mpi_ddp/comm/comm_nccl.c]=CMakeFiles/mpiddp_core.dir/mpi_ddp/comm/comm_nccl.c.gcda)
CU=(backend_cuda backend_cuda_gemm backend_cuda_enc backend_cuda_norm backend_cuda_attn backend_cuda_attn_tc backend_cuda_sdpa)
FILES=()
for k in "${CU[@]}"; do OBJ[$G/$k.cu]=$E/tests/cuda_emu/${k}_emu.cpp.gcda; FILES+=("$G/$k.cu"); done
FILES+=($G/cuda_plugin.c $G/backend_cuda_state.c mpi_ddp/comm/sync_nccl.c mpi_ddp/comm/comm_nccl.c)
# cuDNN's attention, where configure found cuDNN's headers (the plugin then compiles cudnn_sdpa.c)
if [ -e "$BUILD/$E/$G/cudnn_sdpa.c.o" ]; then
  for k in cudnn_sdpa cudnn_sdpa_bwd cudnn_sdpa_desc; do OBJ[$G/$k.c]=$E/$G/$k.c.gcda; FILES+=($G/$k.c); done
fi
fail=0
printf '%-44s %9s %8s\n' file lines covered
for f in "${FILES[@]}"; do
  gcda="$BUILD/${OBJ[$f]}"
  if [ ! -e "$gcda" ]; then echo "$f: no coverage data ($gcda): did the emu tests run in a -DMPIDDP_COVERAGE=ON build?"; fail=1; continue; fi
  # gcov prints "File '<path>'" then "Lines executed:P% of N" for every source the object covers
  line=$(cd "$tmp" && gcov -n -o "$(dirname "$gcda")" "$gcda" 2>/dev/null |
         awk -v want="$SRC/$f" '/^File /{cur=$2; gsub(/\x27/, "", cur)} /^Lines executed/{ if (cur == want) { print; exit } }')
  pct=$(printf '%s' "$line" | sed -n 's/Lines executed:\([0-9.]*\)% of \([0-9]*\)/\1/p')
  n=$(printf '%s' "$line" | sed -n 's/Lines executed:\([0-9.]*\)% of \([0-9]*\)/\2/p')
  if [ -z "$pct" ]; then echo "$f: gcov found no lines"; fail=1; continue; fi
  printf '%-44s %9s %7s%%\n' "$f" "$n" "$pct"
  awk -v p="$pct" -v m="$MIN" 'BEGIN{exit !(p >= m)}' || { echo "  below $MIN%"; fail=1; }
done
exit $fail
