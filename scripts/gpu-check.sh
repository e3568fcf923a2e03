#!/usr/bin/env bash
# gpu-check.sh — everything that needs a real NVIDIA GPU, in one command, with one report file
# (gpu-check-report.txt, or $REPORT): the gpu-labelled tests (CUDA backend against its CPU twin); the
# --device cuda suites at the ranks the node has GPUs for (np 1 always: the CUDA run against the CPU run,
# gradient accumulation, bitwise resume, eval, cuda -> cpu resume, the Transformer encoder with dropout and
# token budgets; np 2 too with 2 GPUs; the full tests/sh suites at np 1, 2 and 4 with 4 or more);
# compute-sanitizer memcheck, racecheck and synccheck over test_cuda_backend and memcheck over a short
# training run of each model; bench_allreduce -d cuda and bench_train --device cuda beside the CPU.
# Where no NVIDIA device node exists it says so and exits 0. Where one exists, any failure — the plugin
# not loading, a device query failing, a test, the sanitizer, a benchmark, a step running out of time —
# makes it exit non-zero.
#
# Knobs (scripts/device-kit.sh run sets them): BUILD (build-gpu); GPU_CHECK_NO_BUILD=1 (use BUILD as it
# is); GPU_CHECK_NO_DEPS=1 (never call scripts/deps.sh); GPU_CHECK_APPEND=1 (append to REPORT);
# GPU_CHECK_CSV_DIR (where the benchmark CSVs go; default BUILD); GPU_CHECK_BENCH=0 (no benchmarks);
# GPU_CHECK_DEADLINE (epoch seconds: every step is cut to the time left; steps it keeps from starting or
# cuts short are reported NOT RUN and make the exit 4, not a failure, when every step that ran passed).
set -uo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$0")/.."
# --device cuda at the world sizes this node has GPUs for (a node with more ranks than GPUs is refused)
suite_np() { # suite_np NP WORKDIR: the claims of ddp_identity, checkpoints_gpu and exact_validation at NP ranks
  local np=$1 w=$2 mp=(mpirun -np "$1" --oversubscribe "$B/mpiddp") SRC=$PWD
  rm -rf "$w"; mkdir -p "$w"; cd "$w" || return 1
  "$B/mpiddp" synth --out t --samples 400 --dim 8 --classes 3 --min-rows 2 --max-rows 6 --shards 2 --seed 3 >/dev/null &&
  "$B/mpiddp" synth --out v --samples 301 --dim 8 --classes 3 --min-rows 2 --max-rows 6 --shards 2 --seed 3 --first-id 9000 >/dev/null || return 1
  local bs=$((16 / np)) m
  for m in mlp transformer; do
    local a=(--train t --val v --lr 0.01 --hidden 24 --no-progress --grad-clip 1.0 --epochs 2 --log-every 1)
    [ $m = transformer ] && a+=(--model transformer --heads 4 --dropout 0.1)
    echo "-- $m at np $np: cuda tracks cpu (1e-4 after 50 steps), accumulation (1e-5), bitwise resume, eval"
    "${mp[@]}" train --device cuda "${a[@]}" --batch-size $bs --out $m-cuda >/dev/null || { echo "cuda run failed"; return 1; }
    "${mp[@]}" train --device cpu "${a[@]}" --batch-size $bs --out $m-cpu >/dev/null || return 1
    "$PY" "$SRC/tests/py/compare_ckpt.py" $m-cpu/checkpoints/last.h5 $m-cuda/checkpoints/last.h5 1e-4 || { echo "$m: cuda differs from cpu"; return 1; }
    "${mp[@]}" train --device cuda "${a[@]}" --batch-size $((bs / 2)) --accumulate 2 --out $m-acc >/dev/null || return 1
    "$PY" "$SRC/tests/py/compare_ckpt.py" $m-cuda/checkpoints/last.h5 $m-acc/checkpoints/last.h5 1e-5 || { echo "$m: accumulation differs"; return 1; }
    MPIDDP_TEST_STOP_AT_STEP=37 MPIDDP_TEST_STOP_RANK=$((np - 1)) "${mp[@]}" train --device cuda "${a[@]}" --batch-size $bs --out $m-part >/dev/null || return 1
    "${mp[@]}" train --device cuda "${a[@]}" --batch-size $bs --out $m-part --resume auto >/dev/null || return 1
    "$PY" "$SRC/tests/py/compare_ckpt.py" $m-cuda/checkpoints/last.h5 $m-part/checkpoints/last.h5 0 || { echo "$m: resume on cuda not bitwise"; return 1; }
    "${mp[@]}" eval --device cuda --ckpt $m-cuda/checkpoints/last.h5 --data v --out $m-pcuda.csv --batch-size 7 > $m-ecuda.txt || return 1
    "${mp[@]}" eval --device cpu --ckpt $m-cuda/checkpoints/last.h5 --data v --out $m-pcpu.csv --batch-size 7 > $m-ecpu.txt || return 1
    "$PY" - $m <<'PY' || { echo "$m: eval on cuda and cpu disagree"; return 1; }
import csv, sys
m = sys.argv[1]
a = dict(x.split("=") for x in open(f"{m}-ecuda.txt").read().split())
b = dict(x.split("=") for x in open(f"{m}-ecpu.txt").read().split())
assert a["val/acc"] == b["val/acc"] and a["val/macro_f1"] == b["val/macro_f1"], (a, b)
assert abs(float(a["val/loss"]) - float(b["val/loss"])) <= 1e-5 * float(b["val/loss"]), (a, b)
ra, rb = list(csv.DictReader(open(f"{m}-pcuda.csv"))), list(csv.DictReader(open(f"{m}-pcpu.csv")))
assert len(ra) == len(rb) == 301 and len({r["sample_id"] for r in ra}) == 301
worst = max(abs(float(x["prob"]) - float(y["prob"])) for x, y in zip(ra, rb))
assert all(x["pred"] == y["pred"] for x, y in zip(ra, rb)) and worst <= 1e-5, worst
print(f"{m}: eval cuda == cpu (acc {a['val/acc']}, largest prob difference {worst:.1e})")
PY
    MPIDDP_TEST_STOP_AT_STEP=37 "${mp[@]}" train --device cuda "${a[@]}" --batch-size $bs --out $m-mixed >/dev/null || return 1
    "${mp[@]}" train --device cpu "${a[@]}" --batch-size $bs --out $m-mixed --resume auto >/dev/null || return 1
    "$PY" "$SRC/tests/py/compare_ckpt.py" $m-cpu/checkpoints/last.h5 $m-mixed/checkpoints/last.h5 1e-4 || { echo "$m: cuda -> cpu resume diverged"; return 1; }
  done
  echo "-- token budgets (--batch-rows) on cuda at np $np, transformer: tracks cpu (1e-3: AdamW's first steps amplify near-zero gradients here, 4e-4 on the emulator)"
  local tb=(--train t --val v --lr 0.003 --hidden 24 --no-progress --grad-clip 1.0 --epochs 1 --model transformer --heads 2 --batch-rows $((48 / np)))
  "${mp[@]}" train --device cuda "${tb[@]}" --out rows-cuda >/dev/null && "${mp[@]}" train --device cpu "${tb[@]}" --out rows-cpu >/dev/null &&
    "$PY" "$SRC/tests/py/compare_ckpt.py" rows-cpu/checkpoints/last.h5 rows-cuda/checkpoints/last.h5 1e-3 || { echo "token budgets: cuda differs"; return 1; }
  echo "PASS: --device cuda at np $np"
}
if [ "${1:-}" = --suite-np ]; then # internal: gpu-check.sh --suite-np NP DIR, with B and PY in the environment
  suite_np "$2" "$3"; exit $?
fi
T0=$(date +%s)
REPORT=${REPORT:-$PWD/gpu-check-report.txt}
if ! ls /dev/nvidia* >/dev/null 2>&1 && [ ! -e /proc/driver/nvidia/gpus ]; then
  echo "gpu-check: no NVIDIA device node on $(hostname); nothing to check here" | tee "$REPORT"
  exit 0
fi
[ "${GPU_CHECK_APPEND:-0}" = 1 ] || : > "$REPORT"
. "$PWD/scripts/steps.sh"
STEPS_REPORT=$REPORT STEPS_DEADLINE=${GPU_CHECK_DEADLINE:-$((T0 + 86400))}
section() { printf '\n== %s (%d s)\n' "$*" $(( $(date +%s) - T0 )) | tee -a "$REPORT"; }
run() { run_t 600 "$@"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
section "machine"
{ hostname; date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv; } >>"$REPORT" 2>&1 ||
  steps_fail nvidia-smi
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "GPUs: $ngpu" | tee -a "$REPORT"
# The tests' helpers call /usr/bin/python3; where that one lacks h5py and numpy but the python3 on PATH
# (a virtual environment, as on the lent GPU machines) has them, lend it that environment's packages.
PY=/usr/bin/python3
for p in "$(command -v python3)" /usr/bin/python3; do
  [ -n "$p" ] && "$p" -c 'import h5py, numpy' 2>/dev/null && { PY=$p; break; }
done
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null && "$PY" -c 'import h5py, numpy' 2>/dev/null; then
  export PYTHONPATH="$("$PY" -c 'import site; print(":".join(site.getsitepackages()))')${PYTHONPATH:+:$PYTHONPATH}"
  echo "python: /usr/bin/python3 lacks h5py; using $PY's site-packages through PYTHONPATH" | tee -a "$REPORT"
fi
BUILD=${BUILD:-build-gpu}
if [ "${GPU_CHECK_NO_BUILD:-0}" != 1 ]; then
  [ "$(id -u)" = 0 ] && [ "${GPU_CHECK_NO_DEPS:-0}" != 1 ] && command -v apt-get >/dev/null &&
    ./scripts/deps.sh >/dev/null   # elsewhere: load the modules INSTALL names
  section "build ($BUILD, MPIDDP_CUDA=ON)"
  run cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMPIDDP_CUDA=ON -DMPIDDP_TESTS=ON -DMPIDDP_BENCHMARKS=ON
  run cmake --build "$BUILD" -j"$(nproc)"
fi
B=$(realpath "$BUILD")
CSV=${GPU_CHECK_CSV_DIR:-$B}
section "mpiddp env --device cuda"
run_t 60 "$B/mpiddp" env --device cuda
section "gpu-labelled tests"
run_t 300 bash -c "cd '$B' && ctest --output-on-failure --no-tests=error -L gpu"

section "--device cuda at np 1 (the CUDA run against the CPU run, accumulation, resume, eval, both models)"
run_t 240 env B="$B" PY="$PY" bash "$SELF" --suite-np 1 "$B/gpu-check/np1"
if [ "$ngpu" -ge 2 ]; then
  section "--device cuda at np 2"
  run_t 240 env B="$B" PY="$PY" bash "$SELF" --suite-np 2 "$B/gpu-check/np2"
fi
if [ "$ngpu" -ge 4 ]; then
  section "multi-rank suites with --device cuda (np 1, 2, 4; one GPU per rank)"
  for t in ddp_identity exact_validation checkpoints_gpu faults_gpu; do
    run_t 300 env MPIDDP="$B/mpiddp" TESTTOOL="$B/tests/testtool" EXAMPLE="$B/example_user_model" SRC="$PWD" \
      BENCH_DIR="$B/benchmarks" WORK="$B/gpu-check/$t" MPIDDP_TEST_DEVICE=cuda bash "tests/sh/$t.sh"
  done
  for t in ddp_identity exact_validation batch_rows; do # the Transformer encoder's kernels, dropout on
    run_t 300 env MPIDDP="$B/mpiddp" TESTTOOL="$B/tests/testtool" EXAMPLE="$B/example_user_model" SRC="$PWD" \
      BENCH_DIR="$B/benchmarks" WORK="$B/gpu-check/${t}_tx" MPIDDP_TEST_DEVICE=cuda \
      MPIDDP_TEST_MODEL_ARGS="--model transformer --heads 4 --dropout 0.1" bash "tests/sh/$t.sh"
  done
else
  section "the tests/sh suites at np 2 and 4 with --device cuda: SKIPPED, they need 4 GPUs on one node and this one has $ngpu"
fi

section "compute-sanitizer: memcheck, racecheck, synccheck over test_cuda_backend, test_cuda_norm, test_cuda_attn and test_gemm_epi; memcheck over short training runs (fp32, and the transformer at bf16)"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$CS" ]; then
  steps_fail "compute-sanitizer not found (CUDA toolkit's bin/)"
else
  # --report-api-errors no: the sanitizer looks for memory errors, races and barrier misuse. A CUDA call that
  # returns an error is the program's to check (mpiddp checks every one and fails with its name; the tests
  # provoke some on purpose, e.g. an invalid device ordinal), and NCCL's initialisation probes kernel images
  # with calls that fail by design (cudaErrorNoKernelImageForDevice inside ncclCommInitRank, seen on an H200).
  for tool in memcheck racecheck synccheck; do
    for t in test_cuda_backend test_cuda_norm test_cuda_attn test_gemm_epi; do
      run_t 180 "$CS" --tool $tool --report-api-errors no --error-exitcode 1 "$B/tests/$t"
    done
  done
  W=$(mktemp -d)
  "$B/mpiddp" synth --out "$W/t" --samples 600 --dim 16 --classes 4 --min-rows 2 --max-rows 40 --shards 2 --seed 1 >/dev/null
  "$B/mpiddp" synth --out "$W/v" --samples 100 --dim 16 --classes 4 --min-rows 2 --max-rows 40 --shards 1 --seed 1 --first-id 9000 >/dev/null
  run_t 150 "$CS" --tool memcheck --report-api-errors no --error-exitcode 1 "$B/mpiddp" train --device cuda --train "$W/t" --val "$W/v" --out "$W/mlp" \
    --epochs 1 --batch-size 16 --hidden 32 --no-progress --fast-dev-run 12
  run_t 150 "$CS" --tool memcheck --report-api-errors no --error-exitcode 1 "$B/mpiddp" train --device cuda --train "$W/t" --val "$W/v" --out "$W/tx" \
    --model transformer --heads 4 --layers 2 --hidden 32 --dropout 0.1 --batch-rows 256 --no-progress --fast-dev-run 12
  # bf16 without dropout: the cuBLASLt epilogues, and the residual gradient read in place (docs/transformer.md)
  run_t 150 "$CS" --tool memcheck --report-api-errors no --error-exitcode 1 "$B/mpiddp" train --device cuda --train "$W/t" --val "$W/v" --out "$W/tx16" \
    --model transformer --heads 4 --layers 2 --hidden 32 --dropout 0 --batch-rows 256 --no-progress --fast-dev-run 12 --precision bf16
  rm -rf "$W"
fi

if [ "${GPU_CHECK_BENCH:-1}" = 1 ]; then
  section "bench_allreduce -d cuda (NCCL) at np = $ngpu"
  run_t 90 mpirun -np "$ngpu" "$B/benchmarks/bench_allreduce" -d cuda -b 1K -e 256M -f 4 -o "$CSV/allreduce_cuda.csv"
  section "bench_train: cpu vs cuda, 1 rank"
  W=$(mktemp -d)
  run_t 60 "$B/mpiddp" synth --out "$W/train" --samples 20000 --dim 64 --classes 10 --shards 4 --seed 1
  for dev in cpu cuda; do
    for h in 256 1024; do
      run_t 90 mpirun -np 1 "$B/benchmarks/bench_train" --data "$W/train" --hidden $h --batch 256 --steps 50 --device $dev --csv "$CSV/train_gpu.csv"
    done
  done
  for dev in cpu cuda; do # the Transformer encoder, d 256 L 4, lengths 4-64
    run_t 120 mpirun -np 1 "$B/benchmarks/bench_train" --data "$W/train" --model transformer --hidden 256 --layers 4 --heads 4 \
      --batch 64 --steps 20 --lens 4-64 --device $dev --csv "$CSV/train_gpu.csv"
  done
  grep -h "^mpiddp " "$REPORT" | tail -6
  rm -rf "$W"
fi
section "result"
steps_result gpu-check; rc=$?
echo "report: $REPORT"
exit $rc
