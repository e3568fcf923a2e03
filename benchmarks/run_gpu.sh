#!/usr/bin/env bash
# run_gpu.sh OUT BUILD — mpiddp on a GPU beside PyTorch on the same GPU (issue #22, part 2); run by
# scripts/device-kit.sh on a lent machine (MPIDDP_KIT=1, MPIDDP_DEADLINE = the epoch second by which it must
# have finished), or by hand: benchmarks/run_gpu.sh OUT BUILD.
#
# Per configuration, the same batches on both sides: bench_train --device cuda --batches-out writes each
# rank's sample indices per step, then benchmarks/peers/torch_tx.py trains exactly those on the same GPU
#   - the MLP (H 256): PyTorch under bf16 autocast and in fp32 (rows, no padding: the MLP has none)
#   - the transformer at B 128 (d 512 L 8, d 1024 L 12: a batch that fills the GPU), then at B 32: d 256 L 4
#     (4 heads), d 512 L 8 (8 heads), then d 1024 L 12 (16 heads) if time allows,
#     ff 2d, lengths 16-512: PyTorch's padded nn.TransformerEncoder with the key padding mask under bf16
#     autocast (SDPA), and PyTorch's packed path (--packed: varlen_attn, else nested jagged tensors + SDPA,
#     else a per-sample loop; the one used is in the table), and at d 512 L 8 (B 128 and B 32) the packed path
#     torch.compile'd (dynamic shapes; compiled during the warm-up steps) as a second peer where the budget allows
# then bench_kernels --device cuda (the issue preset, the roofline of the precision mpiddp runs at and HBM), one
# layer's attention on bench_kernels' batches in PyTorch (peers/torch_attn.py: varlen flash, bf16) beside mpiddp's,
# and bench_allreduce -d cuda. mpiddp trains at --precision bf16 on the GPU (RUN_GPU_PRECISION=fp32|tf32|bf16 to change).
# Writes at most 5 files into OUT: gpu_bench.md (markdown, ready to paste under a dated "GPU (device kit)"
# heading in benchmarks/RESULTS.md), gpu_train.csv, gpu_kernels.csv, gpu_allreduce.csv, and gpu_compute.csv
# (mpiddp's compute per step: benchmarks/scaling_model.py --gpu-report gpu_compute.csv). Progress: lines
# "== run_gpu: ...". Configurations whose estimated time does not fit before the deadline are listed as
# "not run"; every command is cut off at the deadline (less a reserve for the report), and one stopped there is
# listed as "cut short", not as a failure. Exit 0 when every step ran and passed, 4 when the budget left some
# not run or cut short and none failed, 1 when one failed (2, 3: usage, no GPU).
#
# One rank, one GPU (the peer runs as a single process, DDP over NCCL at world size 1; mpiddp under mpirun -np 1).
# Environment: PY (python with torch and h5py; default the first of python3, /usr/local/bin/python3,
# /opt/conda/bin/python3, /usr/bin/python3 that imports both), MPIRUN (default mpirun), MPIDDP_DEADLINE
# (epoch seconds; default now + RUN_GPU_BUDGET, 540 s: one device-tool command), RUN_GPU_DEVICE=cuda|emu|cpu (emu: mpiddp --device
# cuda on the host emulator build/libmpiddp_cudaemu.so and PyTorch on the CPU; cpu: both on the CPU — dry runs
# of the whole pipeline without a GPU), RUN_GPU_TINY=1 (tiny sizes: seconds), RUN_GPU_ONLY=kernels (the bench_kernels table alone), RUN_GPU_WORK (scratch
# directory, kept; default a fresh one under /tmp, removed at the end unless RUN_GPU_KEEP=1), PEAK_BF16, PEAK_TF32,
# PEAK_FP32 (TFLOP/s) and PEAK_GBS (GB/s) to override the detected GPU's datasheet peaks.
set -uo pipefail   # no -e: a failing configuration is recorded and the rest still runs
OUT=${1:?usage: run_gpu.sh OUT BUILD}
BUILD=${2:?usage: run_gpu.sh OUT BUILD}
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD=$(cd "$BUILD" && pwd) || exit 2
if [ -z "${PY:-}" ]; then   # the python with torch and h5py (the kit's prefix comes first on PATH)
  for c in python3 /usr/local/bin/python3 /opt/conda/bin/python3 /usr/bin/python3; do
    if "$c" -c 'import torch, h5py' >/dev/null 2>&1; then PY=$c; break; fi
  done
  PY=${PY:-python3}
fi
MPIRUN=${MPIRUN:-mpirun}
MODE=${RUN_GPU_DEVICE:-cuda}
TINY=${RUN_GPU_TINY:-0}
T0=$(date +%s)
DEADLINE=${MPIDDP_DEADLINE:-$((T0 + ${RUN_GPU_BUDGET:-540}))}
RESERVE=${RUN_GPU_RESERVE:-12}   # seconds kept for the report
W=${RUN_GPU_WORK:-$(mktemp -d /tmp/mpiddp-run-gpu.XXXXXX)}
mkdir -p "$W"
STEPS=$W/steps.tsv META=$W/meta.md TRAIN=$OUT/gpu_train.csv KCSV=$OUT/gpu_kernels.csv ACSV=$OUT/gpu_allreduce.csv
rm -f "$TRAIN" "$KCSV" "$ACSV" "$OUT/gpu_bench.md" "$OUT/gpu_compute.csv" "$STEPS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONDONTWRITEBYTECODE=1

say() { echo "== run_gpu: $* ($(( $(date +%s) - T0 )) s)"; }
left() { echo $(( DEADLINE - RESERVE - $(date +%s) )); }
step_rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >> "$STEPS"; }
# tcap SECONDS CMD...: CMD cut off at min(SECONDS, time left); 124 when cut off. TCAP_BUDGET=1 when the time
# left, not SECONDS, was the limit: a command stopped there was cut short by the budget, it did not fail.
tcap() {
  local cap=$1 l; shift
  TCAP_BUDGET=0 TCAP_T0=$(date +%s)
  l=$(left); [ "$l" -lt "$cap" ] && cap=$l TCAP_BUDGET=1
  TCAP_CAP=$cap
  [ "$cap" -lt 1 ] && return 124
  timeout -k 3 "$cap" "$@"
}
# status RC: of a command run by tcap: ok, "cut short" (the budget stopped it after it ran until the cap: its result
# unknown), TIMEOUT (its own limit), FAILED (also a kill well before the cap)
status() {
  if [ "$1" = 0 ]; then echo ok
  elif { [ "$1" = 124 ] || [ "$1" = 137 ]; } && [ "$TCAP_BUDGET" = 1 ] && [ $(($(date +%s) - TCAP_T0)) -ge $((TCAP_CAP - 1)) ]; then
    echo "cut short"
  elif { [ "$1" = 124 ] || [ "$1" = 137 ]; } && [ $(($(date +%s) - TCAP_T0)) -ge $((TCAP_CAP - 1)) ]; then echo TIMEOUT
  else echo FAILED; fi
}
finish() {
  local rc=${1:-0}
  trap - TERM INT
  say "report: $OUT/gpu_bench.md"
  $PY "$REPO/benchmarks/report_gpu.py" report --train "$TRAIN" --kernels "$KCSV" --allreduce "$ACSV" --meta "$META" \
      --steps "$STEPS" --out "$OUT/gpu_bench.md" --compute "$OUT/gpu_compute.csv" --attn "$W/attn.csv" || { echo "run_gpu: the report failed" >&2; rc=1; }
  [ "${RUN_GPU_KEEP:-0}" = 1 ] || [ -n "${RUN_GPU_WORK:-}" ] || rm -rf "$W"
  say "done: $(cd "$OUT" && for f in gpu_bench.md gpu_train.csv gpu_kernels.csv gpu_allreduce.csv gpu_compute.csv; do [ -f "$f" ] && printf '%s ' "$f"; done)"
  exit "$rc"
}
trap 'say "interrupted: writing what there is"; finish 143' TERM INT

# ---------------------------------------------------------------- device, peaks, what runs where
case $MODE in
  cuda) MDEV=cuda TDEV=cuda ;;
  emu)  MDEV=cuda TDEV=cpu; export MPIDDP_CUDA_PLUGIN=${MPIDDP_CUDA_PLUGIN:-$BUILD/libmpiddp_cudaemu.so}
        [ -f "$MPIDDP_CUDA_PLUGIN" ] || { echo "run_gpu: RUN_GPU_DEVICE=emu needs $MPIDDP_CUDA_PLUGIN (-DMPIDDP_CUDA_EMULATION=ON)" >&2; exit 2; } ;;
  cpu)  MDEV=cpu TDEV=cpu ;;
  *) echo "run_gpu: RUN_GPU_DEVICE=cuda|emu|cpu" >&2; exit 2 ;;
esac
GPU_NAME="" NGPU=1
if [ "$MODE" = cuda ]; then
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ -z "$GPU_NAME" ] || [ "$NGPU" -lt 1 ]; then
    echo "run_gpu: no NVIDIA GPU (nvidia-smi); RUN_GPU_DEVICE=emu|cpu for a dry run" >&2; exit 3
  fi
fi
# dense datasheet peaks (TFLOP/s: bf16, TF32, fp32; GB/s HBM). H200: the H100 SXM's compute, HBM3e 4.8 TB/s.
case $GPU_NAME in
  *H200*)           pk=(989 495 67 4800) ;;
  *H100*PCIe*)      pk=(756 378 51 2000) ;;
  *H100*NVL*)       pk=(835 418 60 3900) ;;
  *H100*)           pk=(989 495 67 3350) ;;
  *) pk=(989 495 67 3350) ;;   # no GPU (dry run) or another GPU: the H100 SXM's, said so in the report
esac
PEAK_BF16=${PEAK_BF16:-${pk[0]}} PEAK_TF32=${PEAK_TF32:-${pk[1]}} PEAK_FP32=${PEAK_FP32:-${pk[2]}} PEAK_GBS=${PEAK_GBS:-${pk[3]}}
PEAKS=$PEAK_BF16,$PEAK_TF32,$PEAK_FP32
# mpiddp's --precision: bf16 on a GPU, as the PyTorch peer's autocast; fp32 in the dry runs (the emulator's
# tensor cores are slow loops: the pipeline, not the precision, is what a dry run checks)
MPREC=${RUN_GPU_PRECISION:-$([ "$MODE" = cuda ] && echo bf16 || echo fp32)}
TORCH_V=$($PY -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo "no torch")
say "mode $MODE (mpiddp --device $MDEV, PyTorch on $TDEV), GPU ${GPU_NAME:-none} x$NGPU, torch $TORCH_V, $(( DEADLINE - T0 )) s to the deadline"
{
  if [ "$MODE" = cuda ]; then
    echo "GPU (device kit): **$GPU_NAME** ($(nvidia-smi --query-gpu=compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)), $NGPU GPU(s), $(date -u +%F), host $(hostname), PyTorch $TORCH_V, \`benchmarks/run_gpu.sh\`$([ "$TINY" = 1 ] && echo ", **tiny sizes (RUN_GPU_TINY=1)**")."
    case $GPU_NAME in *H100*|*H200*) ;; *) echo "Peaks are the H100 SXM's (this GPU's are not in run_gpu.sh: set PEAK_*)." ;; esac
  else
    echo "**Dry run, no GPU measurement**: mpiddp --device $MDEV$([ "$MODE" = emu ] && echo " on the host emulator"), PyTorch on the CPU, $(date -u +%F), host $(hostname), PyTorch $TORCH_V$([ "$TINY" = 1 ] && echo ", tiny sizes"). Peaks and MFU below are the H100 SXM's, meaningless here."
  fi
  echo
  echo "Peaks used: bf16 $PEAK_BF16, TF32 $PEAK_TF32, fp32 $PEAK_FP32 TFLOP/s dense; HBM $PEAK_GBS GB/s (datasheet)."
} > "$META"

# PyTorch's CPU bf16 autocast needs its oneDNN's bf16 kernels, which some builds lack below AVX-512 ("could not create
# a primitive descriptor iterator" with Debian's PyTorch on an AVX2-only CPU, or under ONEDNN_MAX_CPU_ISA=AVX2). A dry
# run checks the pipeline, not the peer's precision: there the bf16 variants then run without autocast, named
# torch-fp32-*, and the report says why. On a GPU the peer is never changed.
BF16_PEER=bf16
if [ "$TDEV" = cpu ]; then
  why=$($PY -c 'import torch
l = torch.nn.Linear(64, 64)
with torch.autocast("cpu", dtype=torch.bfloat16):
    l(torch.randn(64, 64)).float().sum().backward()' 2>&1 | grep -E "Error|error" | tail -1)
  if [ -n "$why" ]; then
    BF16_PEER=fp32
    say "PyTorch's CPU bf16 autocast fails here ($why): the bf16 peer variants run without autocast (torch-fp32-*)"
    { echo; echo "PyTorch's CPU bf16 autocast fails on this CPU (${why:0:160}): the dry run's bf16 peer variants ran without autocast, as torch-fp32-*."; } >> "$META"
  fi
fi

# ---------------------------------------------------------------- data: one synthetic set, lengths 16-512
if [ "$TINY" = 1 ]; then
  LENS=4-24 D=16 NS=240 SYNTH_NP=2
else
  LENS=16-512 D=64 NS=2048 SYNTH_NP=4
fi
DATA=$W/data
say "synth: $NS samples of $LENS rows x D $D"
t=$(date +%s)
if tcap 120 "$MPIRUN" -np $SYNTH_NP "$BUILD/mpiddp" synth --out "$DATA" --samples $NS --dim $D --classes 10 \
     --min-rows "${LENS%-*}" --max-rows "${LENS#*-}" --shards 4 --seed 1 > "$W/synth.log" 2>&1; then
  step_rec synth ok $(( $(date +%s) - t )) "$NS samples, $LENS rows, D $D"
else
  rc=$?; st=$(status $rc); cat "$W/synth.log" >&2; step_rec synth "$st" $(( $(date +%s) - t ))
  [ "$st" = "cut short" ] && finish 4
  finish 1
fi

# ---------------------------------------------------------------- device memory sampler (nvidia-smi)
MEMPID=""
mem_start() {
  MEMPID="" MEMBASE=""
  [ "$MODE" = cuda ] || return 0
  MEMBASE=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$W/mem.log" 2>/dev/null &
  MEMPID=$!
}
mem_stop() { # prints the peak over the baseline, MiB
  [ -n "$MEMPID" ] || return 0
  kill "$MEMPID" 2>/dev/null; wait "$MEMPID" 2>/dev/null
  awk -v b="${MEMBASE:-0}" '$1+0 > m { m = $1+0 } END { if (m > 0) print m - b }' "$W/mem.log"
  MEMPID=""
}

# ---------------------------------------------------------------- one configuration: mpiddp, then the peers
port=29700
# config MODEL LABEL HIDDEN LAYERS HEADS BATCH STEPS WARMUP EST_SECONDS PEER_VARIANTS...
# a peer variant: "bf16-pad" | "bf16-packed" | "bf16-packed-compiled" (torch.compile'd) | "bf16-rows" | "fp32-rows"
config() {
  local model=$1 label=$2 d=$3 L=$4 heads=$5 B=$6 s=$7 wu=$8 est=$9; shift 9
  local tag=${label// /_} rc t mem
  if [ "$(left)" -lt "$est" ]; then
    say "skip $label: about $est s needed, $(left) s left"
    step_rec "$label" "not run" 0 "about $est s needed, $(left) s left before the deadline"
    return
  fi
  local margs=(--model "$model" --hidden "$d" --precision "$MPREC")
  [ "$model" = transformer ] && margs+=(--layers "$L" --heads "$heads")
  say "$label: mpiddp bench_train --device $MDEV (B $B, $s steps + $wu warmup)"
  t=$(date +%s); rm -f "$W/bt-$tag".r* "$W/run-$tag.csv"
  mem_start
  tcap 120 "$MPIRUN" -np 1 "$BUILD/benchmarks/bench_train" --data "$DATA" "${margs[@]}" --batch "$B" --steps "$s" \
      --warmup "$wu" --lens "$LENS" --device "$MDEV" --csv "$W/run-$tag.csv" --batches-out "$W/bt-$tag" > "$W/log-$tag.txt" 2>&1
  rc=$?; mem=$(mem_stop)
  sed 's/^/   /' "$W/log-$tag.txt" | grep -v '^   *$' | tail -4
  local st; st=$(status $rc)
  $PY "$REPO/benchmarks/report_gpu.py" add --train "$TRAIN" --raw "$W/run-$tag.csv" --log "$W/log-$tag.txt" --model "$model" \
      --config "$label" --lens "$LENS" --impl "mpiddp-$MDEV-$MPREC" --data "$DATA" --batches "$W/bt-$tag" --warmup "$wu" --steps "$s" \
      --layers "$L" --hidden "$d" --status "$st" --device-mib "$mem" --device-name "${GPU_NAME:-$MDEV}" --peaks "$PEAKS"
  step_rec "$label: mpiddp" "$st" $(( $(date +%s) - t )) "$([ "$st" = ok ] || tail -2 "$W/log-$tag.txt" | tr '\n' ' ' | cut -c1-160)"
  [ "$st" = ok ] || return   # no batch files to replay
  local v
  for v in "$@"; do
    local prec=${v%%-*} kind=${v#*-} pargs=(--device "$TDEV")
    [ "$prec" = bf16 ] && [ "$BF16_PEER" = fp32 ] && prec=fp32 v=fp32-$kind pargs+=(--impl "torch-fp32-$kind")
    [ "$prec" = bf16 ] && pargs+=(--autocast bf16)
    case $kind in packed*) pargs+=(--packed) ;; esac
    [ "$kind" = packed-compiled ] && pargs+=(--compile)   # the second peer: torch.compile'd, packed
    [ "$model" = mlp ] && pargs+=(--model mlp)
    port=$((port + 1)); t=$(date +%s); rm -f "$W/peer-$tag.csv"
    if [ "$(left)" -lt 5 ]; then step_rec "$label: torch $v" "not run" 0 "the budget ran out"; continue; fi
    say "$label: PyTorch $v on $TDEV"
    mem_start
    tcap 120 "$PY" "$REPO/benchmarks/peers/torch_tx.py" --data "$DATA" --hidden "$d" \
        --layers "$L" --heads "$heads" --batches "$W/bt-$tag" --steps "$s" --warmup "$wu" --lens "$LENS" --csv "$W/peer-$tag.csv" \
        --port $port "${pargs[@]}" > "$W/plog-$tag-$v.txt" 2>&1
    rc=$?; mem=$(mem_stop)
    grep -v '^\[W' "$W/plog-$tag-$v.txt" | sed 's/^/   /' | tail -3
    st=$(status $rc)
    $PY "$REPO/benchmarks/report_gpu.py" add --train "$TRAIN" --raw "$W/peer-$tag.csv" --model "$model" --config "$label" \
        --lens "$LENS" --impl "torch-$v" --data "$DATA" --batches "$W/bt-$tag" --warmup "$wu" --steps "$s" --layers "$L" \
        --hidden "$d" --status "$st" --device-mib "$mem" --device-name "${GPU_NAME:-$TDEV}" --peaks "$PEAKS"
    step_rec "$label: torch $v" "$st" $(( $(date +%s) - t )) \
      "$(grep -o 'attention [a-z-]*\]' "$W/plog-$tag-$v.txt" | head -1 | tr -d ']')$([ "$st" = ok ] || grep -v '^\[W' "$W/plog-$tag-$v.txt" | tail -2 | tr '\n' ' ' | cut -c1-160)"
  done
}

kernels() {
  local est=$1 t rc
  if [ "$(left)" -lt "$est" ]; then step_rec bench_kernels "not run" 0 "about $est s needed, $(left) s left"; say "skip bench_kernels"; return; fi
  local kargs=(--device "$MDEV" --reps 5 --csv "$KCSV" --precision "$MPREC")
  if [ "$TINY" = 1 ]; then kargs+=(--preset tiny); else kargs+=(--preset issue); fi
  local pk_tf=$PEAK_FP32; [ "$MPREC" = bf16 ] && pk_tf=$PEAK_BF16; [ "$MPREC" = tf32 ] && pk_tf=$PEAK_TF32
  [ "$MDEV" = cuda ] && kargs+=(--peak-gflops $(( pk_tf * 1000 )) --peak-gbs "$PEAK_GBS")
  say "bench_kernels ${kargs[*]}"
  t=$(date +%s)
  tcap 150 "$MPIRUN" -np 1 "$BUILD/benchmarks/bench_kernels" "${kargs[@]}" --lens-out "$W/lens.tsv" > "$W/kernels.txt" 2>&1; rc=$?
  grep '^#' "$W/kernels.txt" | sed 's/^/   /'
  step_rec bench_kernels "$(status $rc)" $(( $(date +%s) - t )) "$(grep -c '^| ' "$W/kernels.txt") table lines$([ $rc = 0 ] || echo ", exit $rc")"
  [ $rc = 0 ] || { tail -5 "$W/kernels.txt" >&2; return; }
  # the attention of one layer on the same batches: PyTorch's packed path (varlen flash on a GPU)
  if [ "$(left)" -lt 10 ]; then step_rec "attention: torch" "not run" 0 "the budget ran out"; return; fi
  say "attention per layer: peers/torch_attn.py on $TDEV"
  t=$(date +%s); rm -f "$W/attn.csv"
  tcap 120 "$PY" "$REPO/benchmarks/peers/torch_attn.py" --lens "$W/lens.tsv" --csv "$W/attn.csv" --device "$TDEV" \
      $([ "$TINY" = 1 ] && echo "--reps 2 --warmup 1") > "$W/attn.txt" 2>&1; rc=$?
  sed 's/^/   /' "$W/attn.txt" | tail -4
  step_rec "attention: torch" "$(status $rc)" $(( $(date +%s) - t )) "$(grep -o 'torch_attn [^:]*: [a-z]*' "$W/attn.txt" | head -1 | sed 's/.*: //')"
}

allreduce() {
  local est=$1 t rc np=$NGPU dv=cuda e=256M
  if [ "$(left)" -lt "$est" ]; then step_rec bench_allreduce "not run" 0 "about $est s needed, $(left) s left"; say "skip bench_allreduce"; return; fi
  [ "$MDEV" = cpu ] && { dv=cpu; np=2; }
  [ "$MODE" = emu ] && np=1   # the emulator has one device
  [ "$TINY" = 1 ] && e=64K
  say "bench_allreduce -d $dv at np $np (8 B .. $e)"
  t=$(date +%s)
  tcap 120 "$MPIRUN" -np "$np" "$BUILD/benchmarks/bench_allreduce" -d "$dv" -b 8 -e "$e" -f 4 -n 20 -w 5 -o "$ACSV" > "$W/allreduce.txt" 2>&1; rc=$?
  tail -4 "$W/allreduce.txt" | sed 's/^/   /'
  step_rec "bench_allreduce -d $dv" "$(status $rc)" $(( $(date +%s) - t )) "np $np$([ $rc = 0 ] || echo ", exit $rc")"
}

# ---------------------------------------------------------------- the plan, most wanted first
# estimates (seconds, on an H100: synth, CUDA init and PyTorch start-up dominate the small ones)
if [ "${RUN_GPU_ONLY:-}" = kernels ]; then # the per-kernel table alone (seconds): a rerun after a kernel change
  kernels 30
elif [ "$TINY" = 1 ]; then
  config transformer "tx d32 L2" 32 2 4 8 4 2 1 bf16-pad bf16-packed
  config mlp "mlp H32" 32 0 0 16 6 2 1 bf16-rows fp32-rows
  kernels 1
  config transformer "tx d64 L2" 64 2 4 8 3 1 1 bf16-pad bf16-packed
  allreduce 1
else
  # a batch that fills the GPU first (issue #32's targets), then the launch-bound B 32 rows
  config transformer "tx d512 L8 B128" 512 8 8 128 12 3 75 bf16-pad bf16-packed bf16-packed-compiled
  config transformer "tx d1024 L12 B128" 1024 12 16 128 8 2 110 bf16-pad bf16-packed
  config transformer "tx d256 L4" 256 4 4 32 30 5 45 bf16-pad bf16-packed
  config transformer "tx d512 L8" 512 8 8 32 20 3 60 bf16-pad bf16-packed bf16-packed-compiled
  kernels 30
  allreduce 15
  config mlp "mlp H256" 256 0 0 64 50 5 30 bf16-rows fp32-rows
  config transformer "tx d1024 L12" 1024 12 16 32 10 3 100 bf16-pad bf16-packed
fi
# exit: 1 when a step failed or passed its own limit, else 4 when the budget left steps not run or cut short, else 0
if awk -F'\t' '$2 == "FAILED" || $2 == "TIMEOUT" { f = 1 } END { exit !f }' "$STEPS" 2>/dev/null; then finish 1
elif awk -F'\t' '$2 == "cut short" || $2 == "not run" { f = 1 } END { exit !f }' "$STEPS" 2>/dev/null; then finish 4
fi
finish 0
