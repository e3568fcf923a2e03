# run_gpu_dry.sh — benchmarks/run_gpu.sh end to end without a GPU, at tiny sizes (RUN_GPU_TINY=1): synth →
# bench_train --batches-out → peers/torch_tx.py on the same batches (bf16 autocast padded, --packed, the MLP
# in bf16 and fp32) → bench_kernels → peers/torch_attn.py on its batches → bench_allreduce → report_gpu.py. mpiddp runs --device cuda on the host
# emulator where the build has libmpiddp_cudaemu.so (-DMPIDDP_CUDA_EMULATION=ON), else --device cpu; PyTorch
# runs on the CPU. Checks: exit 0, at most 5 files in OUT, every configuration ok on both sides, the tables'
# columns, a budget cut reported as "cut short" with exit 4, and that the peer's default CPU row (run_tx.sh's format) is unchanged: 24 columns, impl torch-ddp.
# No timing claim.
. "$(dirname "$0")/lib.sh"
$PY -c "import torch, h5py, numpy" 2>/dev/null || { echo "SKIP: torch/h5py missing for $PY"; exit 77; }
BUILD=$(dirname "$BENCH_DIR")
for b in bench_train bench_kernels bench_allreduce; do
  [ -x "$BENCH_DIR/$b" ] || { echo "SKIP: benchmarks not built (MPIDDP_BENCHMARKS=OFF)"; exit 77; }
done
mode=cpu
[ -f "$BUILD/libmpiddp_cudaemu.so" ] && mode=emu
O=$WORK/out
# MPIDDP_PLAN_BUFFERS=1: bench_train sizes the model to the batches it reads, as on a GPU (a plan one row short
# would fail the run on the model's workspace check)
MPIDDP_PLAN_BUFFERS=1 RUN_GPU_DEVICE=$mode RUN_GPU_TINY=1 RUN_GPU_WORK=$WORK/scratch PY=$PY bash "$SRC/benchmarks/run_gpu.sh" \
  "$O" "$BUILD" > run.log 2>&1 || { tail -40 run.log; fail "run_gpu.sh ($mode) exited non-zero"; }
for f in "$WORK"/scratch/log-*.txt; do
  grep -q '^bench_train workspace: [0-9]* rows, planned (bound [0-9]*)' "$f" || fail "$f: no planned workspace line"
done
grep -q '^== run_gpu: done' run.log || fail "no '== run_gpu: done' line"
n=$(find "$O" -type f | wc -l)
[ "$n" -le 5 ] || fail "$n files in OUT (at most 5)"
for f in gpu_bench.md gpu_train.csv gpu_kernels.csv gpu_allreduce.csv gpu_compute.csv; do [ -s "$O/$f" ] || fail "no $f"; done
# the scaling model reads mpiddp's compute from it
$PY - "$SRC/benchmarks" "$O/gpu_compute.csv" <<'EOF' || fail "scaling_model.py cannot read gpu_compute.csv"
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import scaling_model  # noqa: E402
rep = scaling_model.load_gpu_report(sys.argv[2])
assert {"tx-d32-L2", "tx-d64-L2", "mlp-H32"} <= set(rep), rep
assert all(len(v) == 3 and all(x > 0 for x in v) for v in rep.values()), rep
EOF
$PY - "$O" <<'EOF' || fail "table checks"
import csv, sys
o = sys.argv[1]
rows = list(csv.DictReader(open(f"{o}/gpu_train.csv")))
need = ["model", "config", "impl", "precision", "attention", "status", "samples_per_s", "tokens_per_s", "step_ms", "data_ms",
        "fwd_ms", "bwd_ms", "sync_ms", "opt_ms", "params", "tokens_per_step", "sum_n2_per_step", "gflop_per_step", "tflops",
        "peak_tflops", "mfu", "mfu_bf16", "device_mib", "alloc_mib"]
assert rows and all(c in rows[0] for c in need), rows[0].keys() if rows else "no rows"
bad = [(r["config"], r["impl"], r["status"]) for r in rows if r["status"] != "ok"]
assert not bad, bad
impls = {(r["config"], r["impl"]) for r in rows}
md = open(f"{o}/gpu_bench.md").read()
# where PyTorch's CPU bf16 autocast fails (no AVX-512 in its oneDNN), run_gpu.sh runs the bf16 peers in fp32 and says so
bf = "fp32" if "bf16 autocast fails on this CPU" in md else "bf16"
for cfg in ("tx d32 L2", "tx d64 L2"):
    for impl in ("mpiddp", f"torch-{bf}-pad", f"torch-{bf}-packed"):
        assert (cfg, impl) in impls, (cfg, impl, impls)
for impl in ("mpiddp", f"torch-{bf}-rows", "torch-fp32-rows"):
    assert ("mlp H32", impl) in impls, impl
for r in rows:
    assert float(r["samples_per_s"]) > 0 and float(r["tflops"]) > 0 and 0 < float(r["mfu"]) < 1, r
    assert r["precision"] == ("bf16" if "bf16" in r["impl"] else "fp32"), r
# same batches: identical token counts, Σn² and parameter count on both sides of a configuration
for cfg in {r["config"] for r in rows}:
    g = [r for r in rows if r["config"] == cfg]
    for k in ("tokens_per_step", "sum_n2_per_step", "params", "gflop_per_step"):
        assert len({r[k] for r in g}) == 1, (cfg, k, [r[k] for r in g])
packed = [r for r in rows if r["impl"] == f"torch-{bf}-packed"]
assert packed and all(r["attention"] in ("varlen", "njt", "loop") for r in packed), packed
assert all(float(r["pad_share"]) == 0 for r in packed)
assert all(float(r["pad_share"]) > 0 for r in rows if r["impl"] == f"torch-{bf}-pad")
kern = list(csv.DictReader(open(f"{o}/gpu_kernels.csv")))
assert kern and {"op", "time_us", "gflops", "gbs", "roofline_frac"} <= set(kern[0]), kern[:1]
ar = list(csv.DictReader(open(f"{o}/gpu_allreduce.csv")))
assert ar and {"size_bytes", "time_us", "busbw_GBps"} <= set(ar[0]), ar[:1]
for h in ("### Training throughput", "| samples/s | tokens/s |", "| TFLOP/s | MFU | MFU bf16 |", "### Step breakdown",
          "### Per-kernel table", "| of roofline |", "### Attention per layer", "### Allreduce", "### Steps",
          "Dry run, no GPU measurement"):
    assert h in md, h
# the attention row: mpiddp's two kernels and the peer's call on the same batch, and their ratio
att = [ln for ln in md.splitlines() if ln.startswith("| enc d 32 h 4") and "torch-" in ln]
assert len(att) == 1, att
cells = [c.strip() for c in att[0].strip("|").split("|")]
assert all(float(cells[i]) > 0 for i in (1, 2, 3, 5, 6, 7, 8)), cells
assert abs(float(cells[3]) - float(cells[1]) - float(cells[2])) < 2e-3, cells
print(f"run_gpu dry run: {len(rows)} training rows, {len(kern)} kernel rows, {len(ar)} allreduce rows: ok")
EOF
# --precision reaches the benchmarks: on the emulator every op at bf16 against the CPU within bf16's tolerance,
# attention with the bf16 storage the step uses (q|k|v, o, dO and dq|dk|dv), and the bf16 step's own forms: the
# fused residual + layernorm and the layernorm backward with bf16 copies checked, the GELU of linear1's bf16 output,
# linear1's bf16-output GEMM and the residual + layernorm of a bf16 branch (ops the CPU lacks) timed unchecked
if [ "$mode" = emu ]; then
  export MPIDDP_CUDA_PLUGIN=${MPIDDP_CUDA_PLUGIN:-$BUILD/libmpiddp_cudaemu.so}
  "$BENCH_DIR/bench_kernels" --device cuda --preset tiny --check --reps 1 --precision bf16 > kb.txt 2>&1 ||
    { cat kb.txt; fail "bench_kernels --precision bf16 --check"; }
  grep -q "^# bench_kernels: backend cuda-emu, --precision bf16" kb.txt || fail "bench_kernels ignored --precision: $(head -1 kb.txt)"
  grep -q "check against the cpu backend: ok" kb.txt || fail "bench_kernels bf16 check"
  for row in "attention_fwd | .*bf16 q|k|v, o, dO, dq|dk|dv |.* [0-9]\.[0-9]e[-+][0-9][0-9] |$" \
             "attention_bwd | .*bf16 q|k|v, o, dO, dq|dk|dv |.* [0-9]\.[0-9]e[-+][0-9][0-9] |$" \
             "residual_layernorm_fwd16 |.* [0-9]\.[0-9]e[-+][0-9][0-9] |$" "layernorm_bwd16 |.* [0-9]\.[0-9]e[-+][0-9][0-9] |$" \
             "gelu_erf_fwd16z |.* – |$" "gelu_erf_bwd16z |.* – |$" "gemm ff1 = y.W1^T + b1 | .*bf16 in and out |.* – |$" \
             "residual_layernorm_fwd16t | .*bf16 t and y |.* – |$"; do
    grep -q -- "$row" kb.txt || { cat kb.txt; fail "bench_kernels at bf16: no row matching '$row'"; }
  done
  expect_rc 2 "$BENCH_DIR/bench_kernels" --device cuda --preset tiny --reps 1 --precision fp16
fi
# a budget spent before the first command: the synthetic data is cut short, nothing else runs, exit 4 (not a
# failure), and the report lists the steps as cut short / not run
set +e
RUN_GPU_DEVICE=$mode RUN_GPU_TINY=1 RUN_GPU_BUDGET=0 RUN_GPU_RESERVE=0 RUN_GPU_WORK=$WORK/cut PY=$PY \
  bash "$SRC/benchmarks/run_gpu.sh" "$WORK/cutout" "$BUILD" > cut.log 2>&1
rc=$?
set -e
[ $rc = 4 ] || { tail -20 cut.log; fail "run_gpu.sh with no budget exited $rc, expected 4 (cut short)"; }
grep -q "| synth | cut short |" "$WORK/cutout/gpu_bench.md" || { cat "$WORK/cutout/gpu_bench.md"; fail "synth not listed as cut short"; }
grep -q "FAILED\|TIMEOUT" "$WORK/cutout/gpu_bench.md" && fail "a budget cut reported as a failure"
# the peer without the new options: run_tx.sh's row, 24 columns, impl torch-ddp
S=$WORK/scratch
$PY "$SRC/benchmarks/peers/torch_tx.py" --data "$S/data" --hidden 32 --layers 2 --heads 4 --batches "$S/bt-tx_d32_L2" \
  --steps 4 --warmup 2 --lens 4-24 --csv plain.csv --port 29697 > plain.log 2>&1 || { cat plain.log; fail "plain peer"; }
awk -F, 'NF != 24 || $1 != "torch-ddp" { bad = 1 } END { exit bad }' plain.csv || fail "the default peer row changed: $(cat plain.csv)"
grep -q "^torch-ddp np=1 d=32" plain.log || fail "the default peer's summary line changed"
pass "run_gpu.sh dry run ($mode): $(grep -c '' "$O/gpu_train.csv") lines in gpu_train.csv, tables complete; default peer row unchanged"
