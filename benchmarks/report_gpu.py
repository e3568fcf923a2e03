#!/usr/bin/python3
"""report_gpu.py — the tables of benchmarks/run_gpu.sh (issue #22, part 2): mpiddp `--device cuda` beside
PyTorch on the same GPU and the same batches, the per-kernel table and the allreduce table.

  report_gpu.py add --train CSV --raw RUN.csv --log LOG --model mlp|transformer --config LABEL --lens LABEL
                    --data DIR --batches PREFIX --warmup W --steps S --layers L --hidden d
                    [--status ok|FAILED|TIMEOUT] [--device-mib M] [--peaks bf16,tf32,fp32]
      one run (the last row bench_train or peers/torch_tx.py appended to RUN.csv) as one row of CSV (header
      written when new). Tokens and Σ n² of the timed steps are counted here from the batch files
      (PREFIX.r<rank>, one line of global sample indices per step, warmup steps first) and the dataset's
      offsets, so both sides get the same counts.
  report_gpu.py report --train CSV --kernels CSV --allreduce CSV --out MD [--meta FILE] [--steps FILE]
                    [--compute CSV] [--attn CSV]
      writes the markdown (gpu_bench.md), and with --compute mpiddp's compute per step in the --gpu-report format
      of benchmarks/scaling_model.py (model,hidden,layers,rows_per_step,fwd_ms,bwd_ms,opt_ms).

Model FLOPs per step, the same for both sides: 6·params·tokens + 12·L·d·Σ n² (attention: scores and weighted
sums, forward and backward; padding rows and padded scores are not counted). TFLOP/s = that over the step's
wall time (per GPU); MFU = TFLOP/s over the dense peak of the precision the side computes in (mpiddp: its
--precision, given by run_gpu.sh as --impl mpiddp-cuda-bf16; PyTorch under bf16 autocast: bf16), and mfu_bf16 against
the bf16 peak for both.
"""
import argparse
import csv
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in benchmarks/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_common import fnum  # noqa: E402

TRAIN_COLS = ["model", "config", "hidden", "layers", "lens", "batch", "ranks", "steps", "impl", "precision", "attention", "status",
              "samples_per_s", "tokens_per_s", "step_ms", "data_ms", "fwd_ms", "bwd_ms", "attn_ms", "gemm_ms", "sync_ms",
              "opt_ms", "params", "tokens_per_step", "sum_n2_per_step", "gflop_per_step", "tflops", "peak_tflops", "mfu",
              "mfu_bf16", "pad_share", "device_mib", "alloc_mib", "host_rss_mib", "device"]
TX_COLS = ["impl", "ranks", "d", "layers", "heads", "ff", "lens", "batch", "steps", "samples_per_s", "rows_per_s", "step_ms",
           "data_ms", "fwd_ms", "bwd_ms", "attn_ms", "gemm_ms", "sync_ms", "opt_ms", "gflops", "sgemm_gflops", "pad_share",
           "peak_rss_mib", "private_mib", "attn", "tokens", "sum_n2", "params", "gpu_alloc_mib", "device"]
MLP_COLS = ["impl", "ranks", "d", "batch", "steps", "samples_per_s", "rows_per_s", "step_ms", "data_ms", "fwd_ms", "bwd_ms",
            "sync_ms", "opt_ms", "gflops", "sgemm_gflops", "peak_rss_mib", "private_mib", "cmax_ms", "balance"]


def fmt(x, nd=1):
    v = fnum(x)
    if v is None:
        return "–"
    if abs(v) >= 1e4:
        return f"{v:,.0f}".replace(",", " ")
    return f"{v:.{nd}f}"


def lengths(data):
    """per global sample index its number of rows (shards in sorted file-name order, as the peer reads them)"""
    import h5py
    import numpy as np
    out = []
    for s in sorted(p for p in os.listdir(data) if p.endswith(".h5") and not p.startswith(".")):
        with h5py.File(os.path.join(data, s), "r") as f:
            out.append(np.diff(f["offsets"][()].astype(np.int64)))
    return np.concatenate(out)


def count_tokens(data, prefix, warmup, steps):
    """real rows and Σ n² of the timed steps, all ranks"""
    n = lengths(data)
    d = os.path.dirname(prefix) or "."
    base = os.path.basename(prefix)
    tok = sq = 0
    files = sorted(f for f in os.listdir(d) if re.fullmatch(re.escape(base) + r"\.r\d+", f))
    for fn in files:
        with open(os.path.join(d, fn)) as fh:
            lines = [ln for ln in fh if ln.strip()]
        for ln in lines[warmup:warmup + steps]:
            k = n[[int(v) for v in ln.split()]]
            tok += int(k.sum())
            sq += float((k.astype(float) ** 2).sum())
    return tok, sq, len(files)


def add(a):
    row = {c: "" for c in TRAIN_COLS}
    row.update(model=a.model, config=a.config, hidden=a.hidden, layers=a.layers, lens=a.lens, status=a.status,
               device_mib=a.device_mib or "")
    peaks = [float(v) for v in a.peaks.split(",")]  # bf16, tf32, fp32 TFLOP/s
    last = None
    if a.raw and os.path.exists(a.raw):
        with open(a.raw) as fh:
            lines = [ln.strip() for ln in fh if ln.strip() and not ln.startswith("impl,")]
        last = lines[-1].split(",") if lines else None
    params = None
    if a.log and os.path.exists(a.log):
        m = re.findall(r"for (\d+) parameters", open(a.log, errors="replace").read())
        params = int(m[-1]) if m else None
    impl = a.impl
    if last and a.status == "ok":
        cols = MLP_COLS if len(last) == len(MLP_COLS) and a.model == "mlp" and last[0].startswith("mpiddp") else TX_COLS
        r = dict(zip(cols, last))
        impl = r["impl"]
        row.update(batch=r["batch"], ranks=r["ranks"], steps=r["steps"], samples_per_s=r["samples_per_s"],
                   tokens_per_s=r["rows_per_s"], step_ms=r["step_ms"], data_ms=r["data_ms"], fwd_ms=r["fwd_ms"],
                   bwd_ms=r["bwd_ms"], attn_ms=r.get("attn_ms", ""), gemm_ms=r.get("gemm_ms", ""), sync_ms=r.get("sync_ms", ""),
                   opt_ms=r["opt_ms"], pad_share=r.get("pad_share", "0") or "0", host_rss_mib=r["peak_rss_mib"],
                   alloc_mib=r.get("gpu_alloc_mib", ""), device=r.get("device", "") or a.device_name)
        if r.get("attn"):
            row["attention"] = r["attn"]
        if r.get("params"):
            params = int(r["params"])
        if impl.startswith("mpiddp"):
            row["attention"] = "own kernels (packed)" if a.model == "transformer" else "–"
            # bench_train's "# bench_train: attention cudnn: ..." line: cuDNN's fused SDPA where the model chose it
            said = re.findall(r"# bench_train: attention (\w+):", open(a.log, errors="replace").read()) \
                if a.log and os.path.exists(a.log) else []
            if a.model == "transformer" and said and said[0] == "cudnn":
                row["attention"] = "cuDNN fused SDPA (packed)"
            row["pad_share"] = "0"
    row["impl"] = impl
    # from --impl (mpiddp-DEVICE-PRECISION, torch-bf16-pad, ...): the CSV's impl names mpiddp without its precision
    row["precision"] = "bf16" if "bf16" in a.impl else "tf32" if "tf32" in a.impl else "fp32"
    if a.model == "mlp":
        row["attention"] = "–"
    row["device"] = row["device"] or a.device_name
    row["params"] = params if params is not None else ""
    if a.batches and a.data:
        try:
            tok, sq, nranks = count_tokens(a.data, a.batches, a.warmup, a.steps)
            ranks = int(row["ranks"] or nranks or 1)
            row["ranks"] = ranks
            row["tokens_per_step"] = f"{tok / a.steps:.1f}"
            row["sum_n2_per_step"] = f"{sq / a.steps:.0f}" if a.model == "transformer" else "0"
            if params is not None:
                fl = 6.0 * params * tok + (12.0 * a.layers * a.hidden * sq if a.model == "transformer" else 0.0)
                row["gflop_per_step"] = f"{fl / a.steps / 1e9:.3f}"
                step = fnum(row["step_ms"])
                if step:
                    tf = fl / a.steps / (step / 1e3) / 1e12 / ranks  # per GPU
                    peak = peaks[{"bf16": 0, "tf32": 1}.get(row["precision"], 2)]
                    row.update(tflops=f"{tf:.6g}", peak_tflops=f"{peak:g}", mfu=f"{tf / peak:.6g}", mfu_bf16=f"{tf / peaks[0]:.6g}")
        except Exception as e:  # noqa: BLE001  (no token count: the row keeps its measured columns)
            print(f"report_gpu: token count failed: {e}", file=sys.stderr)
    new = not os.path.exists(a.train) or os.path.getsize(a.train) == 0
    with open(a.train, "a", newline="") as fh:
        w = csv.DictWriter(fh, TRAIN_COLS)
        if new:
            w.writeheader()
        w.writerow(row)


def section(L, title):
    """a markdown section: the heading ### title between blank lines"""
    L += ["", f"### {title}", ""]


def read_csv(path):
    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def report(a):
    meta = open(a.meta).read().strip() if a.meta and os.path.exists(a.meta) else ""
    steps = open(a.steps).read().strip() if a.steps and os.path.exists(a.steps) else ""
    rows = read_csv(a.train)
    L = []
    L.append(meta)
    L.append("")
    L.append("Model FLOPs per step, counted the same way for both sides: 6·params·tokens + 12·L·d·Σn² (real rows only; "
             "padding and padded scores not counted; params as the model counts them, position table and head included). TFLOP/s = that over the step's wall time, per GPU; MFU against the "
             "dense peak of the precision the side computes in (mpiddp: its `--precision`, in the impl's name; PyTorch: bf16 under autocast), "
             "`MFU bf16` against the bf16 peak for both. Both sides train the same batches (`bench_train --batches-out`). "
             "`device MiB`: peak of nvidia-smi's memory.used during the run minus before it (includes the CUDA context, "
             "cuBLAS/NCCL workspaces); `alloc MiB`: `torch.cuda.max_memory_allocated()`.")
    section(L, "Training throughput: mpiddp beside PyTorch (same GPU, same batches)")
    if rows:
        L.append("| model | lens | B | impl | precision | attention | samples/s | tokens/s | step ms | TFLOP/s | MFU | MFU bf16 "
                 "| padding | device MiB | alloc MiB | × best PyTorch |")
        L.append("|---|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        best = {}
        for r in rows:
            if not r["impl"].startswith("mpiddp") and r["status"] == "ok" and fnum(r["samples_per_s"]):
                best[r["config"]] = max(best.get(r["config"], 0.0), fnum(r["samples_per_s"]))
        for r in rows:
            ok = r["status"] == "ok"
            ratio = ""
            if ok and r["impl"].startswith("mpiddp") and best.get(r["config"]) and fnum(r["samples_per_s"]):
                ratio = f"**{fnum(r['samples_per_s']) / best[r['config']]:.2f}**"
            mfu = f"{100 * fnum(r['mfu']):.1f}%" if fnum(r["mfu"]) is not None else "–"
            mfub = f"{100 * fnum(r['mfu_bf16']):.1f}%" if fnum(r["mfu_bf16"]) is not None else "–"
            pad = f"{100 * fnum(r['pad_share']):.0f}%" if fnum(r["pad_share"]) is not None else "–"
            L.append(f"| {r['config']} | {r['lens']} | {r['batch'] or '–'} | {r['impl']} | {r['precision']} | {r['attention'] or '–'} | "
                     + (f"{fmt(r['samples_per_s'])} | {fmt(r['tokens_per_s'], 0)} | {fmt(r['step_ms'], 2)} | {fmt(r['tflops'], 2)} | "
                        f"{mfu} | {mfub} | {pad} | {fmt(r['device_mib'], 0)} | {fmt(r['alloc_mib'], 0)} | {ratio or '–'} |"
                        if ok else f"**{r['status']}** | | | | | | | | | |"))
        section(L, "Step breakdown (ms per step, rank 0)")
        L.append("mpiddp: data = waiting for the loader and the host-to-device copy; fwd and bwd from the model's own "
                 "timers (attention and GEMM are parts of them); sync = waiting for the gradient allreduce after "
                 "backward; opt = AdamW. These are host-side timers: on a GPU, kernels queued in one phase can finish "
                 "in the next phase that waits for the stream (sync, opt), so only the step total is exact. PyTorch: CUDA "
                 "events around building/copying the batch, forward, backward (including DDP's allreduce) and the "
                 "optimizer step.")
        L.append("")
        L.append("| model | impl | step | data | fwd | bwd | attention | GEMM | sync | opt | params | tokens/step | Σn²/step | GFLOP/step |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r["status"] != "ok":
                continue
            L.append(f"| {r['config']} | {r['impl']} | {fmt(r['step_ms'], 2)} | {fmt(r['data_ms'], 2)} | {fmt(r['fwd_ms'], 2)} | "
                     f"{fmt(r['bwd_ms'], 2)} | {fmt(r['attn_ms'], 2)} | {fmt(r['gemm_ms'], 2)} | {fmt(r['sync_ms'], 2)} | "
                     f"{fmt(r['opt_ms'], 2)} | {fmt(r['params'], 0)} | {fmt(r['tokens_per_step'], 0)} | {fmt(r['sum_n2_per_step'], 0)} | "
                     f"{fmt(r['gflop_per_step'], 2)} |")
    else:
        L.append("(no training runs)")
    section(L, "Per-kernel table: `bench_kernels`")
    kern = read_csv(a.kernels)
    if kern:
        k0 = kern[0]
        L.append(f"Backend {k0['device']}; roofline {fmt(k0['peak_gflops'], 0)} GFLOP/s, {fmt(k0['peak_gbs'], 0)} GB/s. "
                 "`of roofline` = max(FLOPs/peak, bytes/bandwidth) / time: each kernel's distance from its roofline in one number.")
        L.append("")
        L.append("| config | op | shape | time us | GFLOP/s | GB/s | bound | of roofline |")
        L.append("|---|---|---|---:|---:|---:|---|---:|")
        for r in kern:
            L.append(f"| {r['config']} | {r['op']} | {r['shape']} | {fmt(r['time_us'], 1)} | {fmt(r['gflops'], 1)} | {fmt(r['gbs'], 1)} | "
                     f"{r['bound']} | {fmt(r['roofline_frac'], 2)} |")
        worst = sorted((r for r in kern if fnum(r["roofline_frac"]) is not None), key=lambda r: fnum(r["roofline_frac"]))[:5]
        if worst:
            L.append("")
            L.append("Furthest from the roofline: " + "; ".join(f"{r['op']} ({r['config']}) {fnum(r['roofline_frac']):.2f}" for r in worst) + ".")
    else:
        L.append("(not run)")
    section(L, "Attention per layer, forward + backward: `bench_kernels` beside `peers/torch_attn.py`")
    peer = read_csv(a.attn)
    if kern and peer:
        L.append("The same packed batches (bench_kernels --lens-out): mpiddp's attention_fwd + attention_bwd rows above, "
                 "PyTorch's packed attention on one [R, 3, heads, dh] tensor, both timed alike (back-to-back calls, best of the reps). Target (issue #32): "
                 "mpiddp ≤ 0.7 × PyTorch's varlen flash.")
        L.append("")
        L.append("| config | mpiddp fwd ms | mpiddp bwd ms | mpiddp ms | peer | peer fwd ms | peer bwd ms | peer ms | mpiddp ÷ peer |")
        L.append("|---|---:|---:|---:|---|---:|---:|---:|---:|")
        for r in peer:
            mine = {k["op"]: fnum(k["time_us"]) for k in kern if k["config"] == r["config"]}
            fw, bw = mine.get("attention_fwd"), mine.get("attention_bwd")
            tot = fw + bw if fw is not None and bw is not None else None
            pt = fnum(r["total_ms"])
            ratio = f"{tot / 1e3 / pt:.2f}" if tot is not None and pt else "–"
            L.append(f"| {r['config']} | {fmt(fw / 1e3 if fw is not None else None, 3)} | {fmt(bw / 1e3 if bw is not None else None, 3)} | "
                     f"{fmt(tot / 1e3 if tot is not None else None, 3)} | {r['impl']} ({r['precision']}) | {fmt(r['fwd_ms'], 3)} | "
                     f"{fmt(r['bwd_ms'], 3)} | {fmt(r['total_ms'], 3)} | {ratio} |")
    else:
        L.append("(not run)")
    section(L, "Allreduce: `bench_allreduce`")
    ar = read_csv(a.allreduce)
    if ar:
        L.append("| table | backend | ranks | bytes | time us | algbw GB/s | busbw GB/s | buckets | raw MPI us | ratio |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in ar:
            L.append(f"| {r['table']} | {r['backend']} | {r['ranks']} | {r['size_bytes']} | {fmt(r['time_us'], 1)} | {fmt(r['algbw_GBps'], 2)} | "
                     f"{fmt(r['busbw_GBps'], 2)} | {r['buckets'] or '–'} | {fmt(r['raw_time_us'], 1)} | {fmt(r['ratio'], 2)} |")
        if ar and ar[0]["ranks"] == "1":
            L.append("")
            L.append("One GPU: the allreduce is NCCL's single-rank copy (latency and launch cost), not a bus; more GPUs give bus bandwidth.")
    else:
        L.append("(not run)")
    if steps:
        section(L, "Steps")
        L.append("| step | result | seconds | note |")
        L.append("|---|---|---:|---|")
        for ln in steps.splitlines():
            p = ln.split("\t")
            p += [""] * (4 - len(p))
            L.append(f"| {p[0]} | {p[1]} | {p[2]} | {p[3]} |")
    with open(a.out, "w") as fh:
        fh.write("\n".join(L).strip() + "\n")
    if a.compute:  # mpiddp's measured compute per step, in the --gpu-report format of benchmarks/scaling_model.py
        mine = [r for r in rows if r["impl"].startswith("mpiddp") and r["status"] == "ok" and fnum(r["tokens_per_step"])]
        if mine:
            with open(a.compute, "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["model", "hidden", "layers", "rows_per_step", "fwd_ms", "bwd_ms", "opt_ms"])
                for r in mine:
                    # one rank: the wait in sync is the GPU finishing backward (kernels are asynchronous), not communication
                    bwd = fnum(r["bwd_ms"]) + ((fnum(r["sync_ms"]) or 0.0) if str(r["ranks"]) == "1" else 0.0)
                    w.writerow([r["model"], r["hidden"], r["layers"], f"{fnum(r['tokens_per_step']) / int(r['ranks'] or 1):.1f}",
                                r["fwd_ms"], f"{bwd:.3f}", r["opt_ms"]])


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("add")
    p.add_argument("--train", required=True)
    p.add_argument("--raw", default="")
    p.add_argument("--log", default="")
    p.add_argument("--model", choices=["mlp", "transformer"], required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--lens", default="")
    p.add_argument("--impl", default="")
    p.add_argument("--data", default="")
    p.add_argument("--batches", default="")
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--hidden", type=int, default=0)
    p.add_argument("--status", default="ok")
    p.add_argument("--device-mib", default="")
    p.add_argument("--device-name", default="")
    p.add_argument("--peaks", default="989,495,67")
    p = sub.add_parser("report")
    p.add_argument("--train", default="")
    p.add_argument("--kernels", default="")
    p.add_argument("--allreduce", default="")
    p.add_argument("--attn", default="", help="peers/torch_attn.py's CSV: the attention-per-layer table")
    p.add_argument("--meta", default="")
    p.add_argument("--steps", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--compute", default="", help="also write mpiddp's rows as scaling_model.py --gpu-report input")
    a = ap.parse_args()
    add(a) if a.cmd == "add" else report(a)


if __name__ == "__main__":
    main()
