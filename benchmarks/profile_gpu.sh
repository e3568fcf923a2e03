#!/usr/bin/env bash
# profile_gpu.sh OUT BUILD — where mpiddp's GPU kernels spend their time, read from Nsight Compute's hardware
# counters (issue #32: profile before changing a kernel); run by scripts/device-kit.sh (DEVICE_KIT_BENCH=profile),
# the call after the kit's first, or by hand on a GPU machine with mpiddp built.
#
# Three passes over bench_kernels at a B 128-sized batch (--preset issue --config "d 512" --rows 32768: d 512 with
# 8 heads, lengths 16-512, as run_gpu.sh's d 512 L 8 B 128 row; --reps 1 --inner 1: each kernel launched twice),
# each under `mpirun -np 1 ncu --clock-control none` (leave the clocks alone):
#   attn-tf32  the attention rows at --precision tf32 (the own tensor-core kernels, k_tc_*, and k_attn_D), with
#              the sections SpeedOfLight, Occupancy, LaunchStats, WarpStateStats, MemoryWorkloadAnalysis_Tables
#              and ComputeWorkloadAnalysis: throughput, occupancy, registers, shared memory, stall reasons,
#              shared-memory bank conflicts, tensor-pipe use, and ncu's own advice (its rules)
#   attn-bf16  the same at --precision bf16 (cuDNN's fused attention where it takes the graph, else the own kernels)
#   all-bf16   every bf16 row (GEMMs, layernorm, GELU, the bf16 step's own forms) with SpeedOfLight and LaunchStats:
#              each kernel's DRAM throughput, the issue's "60% of HBM" target read from the counters
# Writes OUT/profile.md (a table per pass: per kernel, its launches, mean time, SM, memory and DRAM throughput as
# % of peak, achieved occupancy, registers, shared memory per block, the three largest stall reasons in cycles per
# issued instruction, bank conflicts, tensor pipe; then ncu's rules with the largest estimated speedups) and
# OUT/profile_<pass>.csv (ncu's raw page: every metric collected, one row per launch). Where ncu cannot read the
# counters (a gVisor machine: "LibraryNotLoaded"; ERR_NVGPUCTRPERM), profile.md says so and holds bench_kernels'
# own timing of the same rows instead, so a call is never wasted.
#
# Environment: NCU (default: ncu on PATH, else the CUDA toolkit's or /opt/nvidia/nsight-compute's newest), MPIRUN
# (mpirun), MPIDDP_DEADLINE (epoch seconds to finish by; default now + PROFILE_GPU_BUDGET, 240), PROFILE_GPU_PASSES
# (default "attn-tf32 attn-bf16 all-bf16"), PROFILE_GPU_ROWS (32768), PROFILE_GPU_CONFIG ("d 512": bench_kernels
# --config; "" for every configuration of the preset), PROFILE_GPU_DEVICE=cuda|emu|cpu (emu, cpu: a
# dry run without a GPU, bench_kernels on the host emulator or the CPU, for tests/sh/profile_gpu_dry.sh with a
# stand-in NCU). Exit 0 when every pass ran (with counters or without), 4 when the budget left a pass out, 1 when
# one failed, 2 usage, 3 no GPU.
set -uo pipefail
OUT=${1:?usage: profile_gpu.sh OUT BUILD}
BUILD=${2:?usage: profile_gpu.sh OUT BUILD}
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD=$(cd "$BUILD" && pwd) || exit 2
BK=$BUILD/benchmarks/bench_kernels
[ -x "$BK" ] || { echo "profile_gpu: $BK not built (-DMPIDDP_BENCHMARKS=ON)" >&2; exit 2; }
MODE=${PROFILE_GPU_DEVICE:-cuda} MPIRUN=${MPIRUN:-mpirun} ROWS=${PROFILE_GPU_ROWS:-32768} CF=${PROFILE_GPU_CONFIG-d 512}
PASSES=${PROFILE_GPU_PASSES:-attn-tf32 attn-bf16 all-bf16}
T0=$(date +%s)
DEADLINE=${MPIDDP_DEADLINE:-$((T0 + ${PROFILE_GPU_BUDGET:-240}))}
PY=${PY:-python3}
W=$(mktemp -d /tmp/mpiddp-profile.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
say() { echo "== profile_gpu: $* ($(( $(date +%s) - T0 )) s)"; }

case $MODE in
  cuda) DEV=cuda
        nvidia-smi -L >/dev/null 2>&1 || { echo "profile_gpu: no NVIDIA GPU (nvidia-smi); PROFILE_GPU_DEVICE=emu|cpu for a dry run" >&2; exit 3; } ;;
  emu)  DEV=cuda; export MPIDDP_CUDA_PLUGIN=${MPIDDP_CUDA_PLUGIN:-$BUILD/libmpiddp_cudaemu.so}
        [ -f "$MPIDDP_CUDA_PLUGIN" ] || { echo "profile_gpu: PROFILE_GPU_DEVICE=emu needs $MPIDDP_CUDA_PLUGIN" >&2; exit 2; } ;;
  cpu)  DEV=cpu ;;
  *) echo "profile_gpu: PROFILE_GPU_DEVICE=cuda|emu|cpu" >&2; exit 2 ;;
esac
if [ -z "${NCU:-}" ]; then
  NCU=$(command -v ncu || ls -d /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1 || true)
fi
[ -n "$NCU" ] && [ -x "$NCU" ] || { echo "profile_gpu: no ncu (Nsight Compute) found; set NCU" >&2; exit 2; }

# pass NAME: precision, bench_kernels filter, ncu kernel filter, launches profiled, sections
pass_args() {
  local full=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
              --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis)
  case $1 in
    attn-tf32) PREC=tf32 ONLY=(--only attention) KSEL=(--kernel-name "regex:k_tc_|k_attn") NL=12 SECT=("${full[@]}") ;;
    attn-bf16) PREC=bf16 ONLY=(--only attention) KSEL=() NL=24 SECT=("${full[@]}") ;;
    all-bf16)  PREC=bf16 ONLY=() KSEL=() NL=150 SECT=(--section SpeedOfLight --section LaunchStats) ;;
    *) echo "profile_gpu: unknown pass '$1' (attn-tf32, attn-bf16, all-bf16)" >&2; return 2 ;;
  esac
  if [ "$DEV" = cpu ] && [ "$PREC" = tf32 ]; then PREC=fp32; fi   # a dry run on the CPU, which has no tf32
}

MD=$OUT/profile.md rc=0 nocounters=""
{
  echo "# Nsight Compute profile of mpiddp's kernels"
  echo
  echo "- date: $(date -u +%FT%TZ); host: $(hostname); GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo "none ($MODE dry run)")"
  echo "- ncu: $("$NCU" --version 2>/dev/null | grep -io 'version [0-9.]*' | head -1 || echo "?") ($NCU), --clock-control none"
  apath=$("$MPIRUN" -np 1 "$BK" --device "$DEV" --precision bf16 --preset tiny --reps 1 --only attention 2>/dev/null |
          grep '^# attention' | sed 's/^# //' || true)
  echo "- bench_kernels --device $DEV --preset issue --rows $ROWS --reps 1 --inner 1${CF:+ --config \"$CF\"}${apath:+; at bf16 the $apath}"
  echo
  echo "Times: one launch each under the profiler (kernel replay, caches flushed between passes, clocks not locked):"
  echo "compare kernels by them, quote bench_kernels' for speed. Stalls: cycles per issued instruction, the three"
  echo "largest; bank conflicts: shared-memory loads/stores, ncu's count."
} > "$MD"

for p in $PASSES; do
  pass_args "$p" || exit 2
  left=$(( DEADLINE - 10 - $(date +%s) ))
  if [ "$left" -lt 20 ]; then
    say "$p: not run (${left} s left)"; printf '\n## %s: not run (the budget ran out)\n' "$p" >> "$MD"; [ $rc = 0 ] && rc=4; continue
  fi
  cap=$(( left < 150 ? left : 150 ))
  bk=("$BK" --device "$DEV" --precision "$PREC" --preset issue --rows "$ROWS" --reps 1 --inner 1 ${CF:+--config "$CF"} "${ONLY[@]}")
  say "$p: ncu ${SECT[*]} ${KSEL[*]} --launch-count $NL on ${bk[*]#$BUILD/}"
  t=$(date +%s)
  timeout -k 5 "$cap" "$MPIRUN" -np 1 "$NCU" --clock-control none --target-processes all "${SECT[@]}" "${KSEL[@]}" \
      --launch-count "$NL" -f -o "$W/$p" "${bk[@]}" > "$W/$p.log" 2>&1
  prc=$?
  if [ $prc = 0 ] && [ -f "$W/$p.ncu-rep" ]; then
    "$NCU" --import "$W/$p.ncu-rep" --csv --page raw --print-units base > "$OUT/profile_$p.csv" 2> "$W/$p.imp" &&
      "$NCU" --import "$W/$p.ncu-rep" --csv --page details --print-units base > "$W/$p-details.csv" 2>> "$W/$p.imp" ||
      { cat "$W/$p.imp" >&2; prc=1; }
  fi
  if [ $prc = 0 ]; then
    "$PY" "$REPO/benchmarks/report_profile.py" --title "$p: bench_kernels --precision $PREC ${ONLY[*]}" \
        --raw "$OUT/profile_$p.csv" --details "$W/$p-details.csv" >> "$MD" || { echo "profile_gpu: report_profile.py failed on $p" >&2; prc=1; }
  fi
  if [ $prc != 0 ]; then
    why=""   # the cause ncu names, the most specific first
    for pat in LibraryNotLoaded ERR_NVGPUCTRPERM 'Device not supported' '[Pp]rofil[a-z]* is not supported[^"]*' \
               'Failed to initialize the profiler[^"]*'; do
      why=$(grep -m1 -o -E "$pat" "$W/$p.log" | head -1) && [ -n "$why" ] && break
    done
    if [ -n "$why" ]; then   # the counters cannot be read here: time the same rows without the profiler
      nocounters=$why
      say "$p: ncu cannot read the counters here ($why): bench_kernels' timing instead"
      { printf '\n## %s: no hardware counters (ncu: %s); bench_kernels alone\n\n' "$p" "$why"
        timeout -k 5 "$cap" "$MPIRUN" -np 1 "${bk[@]}" 2>&1 | grep -E '^\||^# ' | sed 's/^# \(.*\)/- \1\n/'; } >> "$MD" ||
        { rc=1; continue; }
    elif [ $prc = 124 ] || [ $prc = 137 ]; then
      say "$p: cut short after $(( $(date +%s) - t )) s"; printf '\n## %s: cut short (%d s)\n' "$p" "$cap" >> "$MD"; [ $rc = 0 ] && rc=4
    else
      say "$p: FAILED (exit $prc)"; tail -15 "$W/$p.log"
      { printf '\n## %s: FAILED (exit %d)\n\n```\n' "$p" "$prc"; tail -15 "$W/$p.log" | cut -c1-200; echo '```'; } >> "$MD"; rc=1
    fi
    continue
  fi
  say "$p: ok ($(( $(date +%s) - t )) s)"
done
if [ -n "$nocounters" ]; then
  { head -2 "$MD"; echo "**No hardware counters on this machine ($nocounters): the tables are bench_kernels' timings.**"
    echo; tail -n +3 "$MD"; } > "$W/md" && cat "$W/md" > "$MD"
fi
say "done: $MD, exit $rc"
exit $rc
