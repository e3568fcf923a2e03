#!/usr/bin/env python3
"""scaling_model.py — a training step's time at 1..1024 GPUs from its parts (issue #22, part 3).

    step = data (exposed) + forward + backward + exposed gradient allreduce + optimizer + checkpoint / steps

* compute per rank (forward + backward + optimizer): measured (bench_train on this machine; a GPU report CSV
  from the device kit with --gpu-report) or, for GPUs without a report, a per-op roofline estimate;
* the gradient allreduce of mpi_ddp/comm/sync.c: the flat gradient buffer cut into buckets of --bucket-mb from
  its END (backward finishes the last layer first); a bucket is launched as soon as backward has made every
  gradient in it final, the buckets run one after another on the communication stream (NCCL) and overlap
  the rest of backward, so only what is left after backward ends is exposed. On CPU (validation) sync.c
  reduces each bucket with a blocking MPI_Allreduce from inside backward: nothing overlaps, all is exposed;
* each bucket's allreduce in alpha-beta costs, the cheapest of NCCL's algorithms:
      ring   2(p-1)/p * n/BW + 2(p-1) alpha
      tree   2 log2(p) alpha + 2 n/BW
      hierarchical (p = g x N, g GPUs per node): reduce-scatter and all-gather inside the node on NVLink
             (ring over g), between nodes ring or tree over N on each GPU's 1/g shard through its own NIC;
* data: the features of a step's rows read by the loader thread (hidden behind the step unless slower)
  plus the host-to-device copy; checkpoints: params + AdamW moments written by rank 0 once per epoch.

Modes
  scaling_model.py --validate [--build DIR] [--work DIR]
      measures this machine afresh (< 5 min on the 2-core dev VM): bench_train at np 1 (compute per step),
      bench_allreduce at np 2 (alpha, beta by least squares over message sizes), predicts the np 2 step
      of each configuration (not fitted to it), measures it with bench_train at np 2 and prints
      "max relative error E".
  scaling_model.py [--gpu-report FILE] [--bucket-mb 25] [--out benchmarks/results]
      weak-scaling efficiency and epoch time at 1, 2, 4, ..., 1024 H100 GPUs (8 per node) for the MLP
      (H 256) and the Transformer (d 512 L 8, d 1024 L 12): markdown table on stdout, scaling_model.csv,
      scaling_model.png (gnuplot), scaling_model.md, and the bucket size / token budget that keep weak
      scaling >= 90% at 1024 GPUs.
  scaling_model.py --selftest
      unit checks (no timing): the alpha-beta fit on synthetic data, the bucket schedule, and the table's
      invariants (efficiency <= 1, non-increasing in p). tests/sh/scaling_model.sh runs it.
"""
import argparse
import csv
import math
import os
import re
import subprocess
import sys

import numpy as np

# ----------------------------------------------------------------------------- published figures (stated)
# H100 SXM5 (NVIDIA H100 Tensor Core GPU datasheet): dense peaks and HBM3 bandwidth.
H100 = {"bf16": 989e12, "tf32": 495e12, "fp32": 67e12, "hbm": 3.35e12}
# mpiddp's CUDA backend runs exact fp32 GEMMs (cublasSgemm with CUBLAS_PEDANTIC_MATH, no TF32): fp32 peak.
# Intra-node: NVLink 4 (DGX H100 datasheet: 18 links, 900 GB/s bidirectional per GPU, NVSwitch); NCCL
# all_reduce_perf (NVIDIA nccl-tests) on 8x H100 SXM reports ~360 GB/s bus bandwidth with ring/tree and
# ~480 GB/s with NVLink SHARP (NVLS); we take the ring figure, 360 GB/s, and ~1 us per NVLink hop.
NVLINK_BUSBW = 360e9
NVLINK_ALPHA = 1.0e-6
# Inter-node: one ConnectX-7 400 Gb/s NDR InfiniBand NIC per GPU (DGX H100 datasheet): 50 GB/s line rate;
# nccl-tests multi-node all_reduce on DGX H100 pods runs each NIC at ~46 GB/s (~92% of line rate); ~5 us per
# inter-node hop (NCCL's latency for small messages across nodes).
IB_BW = 46e9
IB_ALPHA = 5.0e-6
NCCL_LAUNCH = 5e-6        # per collective call: kernel launch + the event ordering it after backward
KERNEL_MIN = 3e-6         # a kernel's floor on the GPU (launch and tail), per op in the roofline estimate
GEMM_EFF = 0.70           # fraction of fp32 peak cuBLAS SGEMM reaches on large shapes (assumed)
MEM_EFF = 0.80            # fraction of HBM bandwidth element-wise kernels reach (assumed)
ATTN_EFF = 0.25           # fraction of fp32 peak of the per-row attention kernels (kern_enc.h, no tensor cores; assumed)
PCIE_BW = 50e9            # host-to-device batch copy, PCIe Gen5 x16 (~50 GB/s achieved)
LOADER_BW = 3.6e9         # one rank's loader thread copying a step's features out of the mapped, cached dataset:
                          # bench_io's warm random mmap reads, 3.66 GB/s at 1 rank (RESULTS.md, this VM)
CKPT_BW = 2e9             # rank 0's checkpoint write bandwidth (assumed: shared file system)
GPUS_PER_NODE = 8
GPU_MEM = 80e9

D_FEATURES, CLASSES = 64, 10
EPOCH_TOKENS = 1e9        # the epoch the table's epoch time refers to: 10^9 rows (tokens)
LENS = (16, 512)          # transformer sample lengths, uniform
DEFAULT_TOKENS = 8192     # rows per GPU per step for the table


# ----------------------------------------------------------------------------- models: parameters and gradient order
def mlp_layout(H, D=D_FEATURES, C=CLASSES):
    """(n_params, backward segments): each segment (lo, hi, compute weight) in backward order, as
    model_mlp.c marks them ready: head [W3, end), layer 2 [W2, W3), layer 1 [W1, W2)."""
    w1 = 0
    w2 = H * D + H
    w3 = w2 + H * H + H
    n = w3 + C * H + C
    return n, [(w3, n, 2 * C * H), (w2, w3, 4 * H * H), (w1, w2, 2 * D * H)]


def mlp_step_flops(H, rows, D=D_FEATURES):
    return rows * (4.0 * D * H + 6.0 * H * H)  # bench_train's count: fwd + bwd GEMMs per row


def tx_layout(d, L, f=None, D=D_FEATURES, C=CLASSES, P=512):
    """model_transformer.c's layout: inp (+pos) | layers 0..L-1 | final norm, head. Backward releases the
    head + final norm, then layer L-1 .. 0, then the input projection and positions."""
    f = f or 2 * d
    body_lo = d * D + d + P * d
    per = 3 * d * d + 3 * d + d * d + d + f * d + f + d * f + d + 4 * d
    top = body_lo + L * per
    n = top + 2 * d + C * d + C
    segs = [(top, n, 2 * C * d)]
    for l in range(L - 1, -1, -1):
        segs.append((body_lo + l * per, body_lo + (l + 1) * per, 4 * d * (4 * d + 2 * f)))
    segs.append((0, body_lo, 2 * d * D))
    return n, segs


def tx_step_flops(d, L, tokens, sum_n2, f=None):
    """model FLOPs of a training step: 6 x (non-embedding) params x tokens + attention 12 L d sum n^2."""
    f = f or 2 * d
    return 6.0 * L * (4 * d * d + 2 * d * f) * tokens + 6.0 * d * D_FEATURES * tokens + 12.0 * L * d * sum_n2


def mean_n2_over_n(lo=LENS[0], hi=LENS[1]):
    n = np.arange(lo, hi + 1, dtype=float)
    return float((n * n).mean() / n.mean())


# ----------------------------------------------------------------------------- collectives
def ring(n, p, bw, alpha):
    return 0.0 if p <= 1 else 2.0 * (p - 1) / p * n / bw + 2.0 * (p - 1) * alpha


def tree(n, p, bw, alpha):
    return 0.0 if p <= 1 else 2.0 * math.log2(p) * alpha + 2.0 * n / bw


class Net:
    """NCCL-like allreduce time of n bytes on p GPUs, g per node."""

    def __init__(self, g=GPUS_PER_NODE, nvl_bw=NVLINK_BUSBW, nvl_alpha=NVLINK_ALPHA, ib_bw=IB_BW, ib_alpha=IB_ALPHA,
                 launch=NCCL_LAUNCH):
        self.g, self.nvl_bw, self.nvl_alpha, self.ib_bw, self.ib_alpha, self.launch = g, nvl_bw, nvl_alpha, ib_bw, ib_alpha, launch

    def algos(self, n, p):
        if p <= 1:
            return {"none": 0.0}
        if p <= self.g:  # one node: NVLink only
            return {"ring": self.launch + ring(n, p, self.nvl_bw, self.nvl_alpha),
                    "tree": self.launch + tree(n, p, self.nvl_bw, self.nvl_alpha)}
        g, N = self.g, p // self.g
        intra = ring(n, g, self.nvl_bw, self.nvl_alpha)  # reduce-scatter + all-gather inside the node
        # a flat ring over all p: every GPU's NIC carries one of g channels across each node boundary
        flat_bw = min(self.nvl_bw, g * self.ib_bw)
        flat = 2.0 * (p - 1) / p * n / flat_bw + 2.0 * (N * (g - 1) * self.nvl_alpha + N * self.ib_alpha)
        # NCCL's tree: a chain inside the node, a double binary tree between nodes
        tr = 2.0 * (g - 1) * self.nvl_alpha + 2.0 * math.log2(N) * self.ib_alpha + 2.0 * n / flat_bw
        return {"ring": self.launch + flat, "tree": self.launch + tr,
                "hier-ring": self.launch + intra + ring(n / g, N, self.ib_bw, self.ib_alpha),
                "hier-tree": self.launch + intra + tree(n / g, N, self.ib_bw, self.ib_alpha)}

    def allreduce(self, n, p):
        a = self.algos(n, p)
        k = min(a, key=a.get)
        return a[k], k


class FittedNet:
    """The validation's network: one alpha-beta line t = a + b n fitted on this machine (ring at p = 2)."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def allreduce(self, n, p):
        return (0.0, "none") if p <= 1 else (self.a + self.b * n, "mpi")


def fit_alpha_beta(sizes, times):
    """Least squares of t = a + b n in relative error (weights 1/t: the sizes span decades), a, b >= 0.
    Returns (a, b); for a ring at p ranks alpha = a / (2(p-1)) and BW = 2(p-1)/p / b."""
    s = np.asarray(sizes, float)
    t = np.asarray(times, float)
    A = np.stack([np.ones_like(s), s], axis=1) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if a < 0:  # refit through the origin
        a, b = 0.0, float((s / t) @ np.ones_like(t) / ((s / t) @ (s / t)))
    if b < 0:
        a, b = float(np.median(t)), 0.0
    return float(a), float(b)


# ----------------------------------------------------------------------------- the step
def buckets(n_total, bucket_bytes):
    """sync.c's buckets: k = 0 at the end of the buffer; returns [(lo, hi)]."""
    per = max(1, bucket_bytes // 4)
    nb = (n_total + per - 1) // per
    return [(max(0, n_total - (k + 1) * per), n_total - k * per) for k in range(nb)]


def comm_schedule(n_params, segs, t_bwd, bucket_bytes, net, p, overlap=True, n_ctl=2):
    """Simulates sync.c: (exposed comm seconds, number of buckets, algorithm of the largest bucket).
    segs: backward segments (lo, hi, weight) in release order; segment k is final after the fraction
    sum(weights[:k+1]) / sum(weights) of backward. The control floats are ready from the start."""
    total = n_params + n_ctl
    bks = buckets(total, bucket_bytes)
    if p <= 1:
        return 0.0, len(bks), "none"
    wsum = float(sum(w for _, _, w in segs))
    events, acc, ready_lo = [], 0.0, n_params
    for lo, hi, w in segs:  # (time, lowest index ready so far): ranges arrive from the end backwards
        acc += w
        if hi >= ready_lo and lo < ready_lo:
            ready_lo = lo
        events.append((t_bwd * acc / wsum, ready_lo))
    t_comm, end, alg, big = 0.0, 0.0, "", -1
    for lo, hi in bks:
        launch = next((t for t, r in events if r <= lo), t_bwd)
        dt, a = net.allreduce(4.0 * (hi - lo), p)
        if hi - lo > big:
            big, alg = hi - lo, a
        t_comm += dt
        end = max(end, launch) + dt
    exposed = max(0.0, end - t_bwd) if overlap else t_comm
    return exposed, len(bks), alg


def gpu_compute_estimate(model, tokens, gpu_ops=None):
    """Roofline estimate of fwd, bwd, opt seconds of one step on an H100 (fp32, mpiddp's CUDA backend):
    per op max(FLOPs / (peak x eff), bytes / (HBM x eff), KERNEL_MIN). Returns (fwd, bwd, opt, note)."""
    peak, hbm = H100["fp32"], H100["hbm"] * MEM_EFF
    ops = gpu_ops if gpu_ops is not None else model_ops(model, tokens)
    fwd = bwd = 0.0
    for name, phase, flops, nbytes, kind in ops:
        eff = GEMM_EFF if kind == "gemm" else ATTN_EFF if kind == "attn" else 1.0
        t = max(flops / (peak * eff) if flops else 0.0, nbytes / hbm, KERNEL_MIN)
        if phase == "fwd":
            fwd += t
        else:
            bwd += t
    n = model["n_params"]
    opt = max(n * 4 * 7 / hbm, KERNEL_MIN) + max(n * 4 / hbm, KERNEL_MIN)  # adamw (p, g, m, v r/w) + sumsq
    return fwd, bwd, opt


def model_ops(model, R):
    """The ops of one training step (name, phase, FLOPs, bytes, kind) — the same counts bench_kernels uses."""
    ops = []
    if model["kind"] == "mlp":
        H, D, C = model["H"], D_FEATURES, CLASSES
        B = R / 34.0
        g = lambda M, N, K: (2.0 * M * N * K, 4.0 * (M * K + K * N + M * N))
        for nm, ph, (M, N, K) in [("gemm x.W1", "fwd", (R, H, D)), ("gemm a1.W2", "fwd", (R, H, H)), ("gemm p.W3", "fwd", (B, C, H)),
                                  ("gemm dW3", "bwd", (C, H, B)), ("gemm dp", "bwd", (B, H, C)), ("gemm dW2", "bwd", (H, H, R)),
                                  ("gemm da1", "bwd", (R, H, H)), ("gemm dW1", "bwd", (H, D, R))]:
            f, b = g(M, N, K)
            ops.append((nm, ph, f, b, "gemm"))
        ops += [("bias_gelu", "fwd", 0, 12.0 * R * H, "mem"), ("bias_gelu_pool", "fwd", 0, 8.0 * R * H, "mem"),
                ("softmax_xent", "fwd", 0, 12.0 * B * C, "mem"), ("pool_gelu_backward", "bwd", 0, 8.0 * R * H, "mem"),
                ("gelu_backward", "bwd", 0, 12.0 * R * H, "mem")]
        return ops
    d, L, f, heads = model["d"], model["L"], model["f"], model["heads"]
    n2 = model["n2_per_token"] * R
    B = R / model["mean_len"]
    g = lambda M, N, K: (2.0 * M * N * K, 4.0 * (M * K + K * N + M * N))
    ops.append(("gemm inp", "fwd", *g(R, d, D_FEATURES), "gemm"))
    ops.append(("embed_fwd", "fwd", 0, 12.0 * R * d, "mem"))
    for _ in range(L):
        for nm, (M, N, K) in [("qkv", (R, 3 * d, d)), ("out", (R, d, d)), ("l1", (R, f, d)), ("l2", (R, d, f))]:
            fl, by = g(M, N, K)
            ops.append(("gemm " + nm, "fwd", fl, by, "gemm"))
            ops.append(("gemm d" + nm, "bwd", 2 * fl, 2 * by, "gemm"))
        ops += [("layernorm_fwd", "fwd", 0, 2 * 8.0 * R * d, "mem"), ("add_bias", "fwd", 0, 8.0 * R * 3 * d, "mem"),
                ("attention_fwd", "fwd", 4.0 * d * n2, 4.0 * R * 5 * d, "attn"),
                ("residual_fwd", "fwd", 0, 2 * 12.0 * R * d, "mem"), ("gelu_erf_fwd", "fwd", 0, 12.0 * R * f, "mem"),
                ("residual_bwd", "bwd", 0, 2 * 8.0 * R * d, "mem"), ("gelu_erf_bwd", "bwd", 0, 12.0 * R * f, "mem"),
                ("layernorm_bwd", "bwd", 0, 2 * 16.0 * R * d, "mem"), ("colsum", "bwd", 0, 4.0 * R * 3 * d, "mem"),
                ("attention_bwd", "bwd", 10.0 * d * n2, 4.0 * R * 9 * d, "attn")]
    ops += [("layernorm_fwd", "fwd", 0, 8.0 * R * d, "mem"), ("pool_mean_fwd", "fwd", 0, 4.0 * R * d, "mem"),
            ("pool_mean_bwd", "bwd", 0, 4.0 * R * d, "mem"), ("layernorm_bwd", "bwd", 0, 16.0 * R * d, "mem"),
            ("gemm dinp", "bwd", *g(d, D_FEATURES, R), "gemm"), ("embed_bwd", "bwd", 0, 8.0 * R * d, "mem")]
    return ops


def make_model(name):
    if name.startswith("mlp"):
        H = int(name.split("H")[1])
        n, segs = mlp_layout(H)
        return {"name": name, "kind": "mlp", "H": H, "n_params": n, "segs": segs, "mem_row": 4.0 * (3 * H + 64)}
    m = re.match(r"tx-d(\d+)-L(\d+)", name)
    d, L = int(m.group(1)), int(m.group(2))
    n, segs = tx_layout(d, L)
    heads = max(4, d // 64)
    f = 2 * d
    return {"name": name, "kind": "tx", "d": d, "L": L, "f": f, "heads": heads, "n_params": n, "segs": segs,
            "n2_per_token": mean_n2_over_n(), "mean_len": (LENS[0] + LENS[1]) / 2.0,
            "mem_row": 4.0 * (L * (8 * d + 2 * f + heads + 4) + 8 * d + f + heads + 2)}


def gpu_step(model, tokens, p, net, bucket_mb, report=None):
    """Seconds of one step per GPU at p GPUs and its parts."""
    if report is not None:
        fwd, bwd, opt = (x * tokens for x in report)
    else:
        fwd, bwd, opt = gpu_compute_estimate(model, tokens)
    comp = fwd + bwd
    exposed, nb, alg = comm_schedule(model["n_params"], model["segs"], bwd, int(bucket_mb * 1048576), net, p)
    feat = tokens * D_FEATURES * 4.0
    read = feat / LOADER_BW  # each rank's loader thread, steady state (dataset in the page cache)
    data = max(0.0, read - comp - exposed - opt) + feat / PCIE_BW  # the loader hides reads behind the step
    steps_epoch = max(1.0, EPOCH_TOKENS / (tokens * p))
    ckpt = (3 * 4.0 * model["n_params"] / CKPT_BW) / steps_epoch
    step = data + fwd + bwd + exposed + opt + ckpt
    return {"step": step, "fwd": fwd, "bwd": bwd, "opt": opt, "comm": exposed, "data": data, "ckpt": ckpt,
            "buckets": nb, "algo": alg, "epoch_s": step * steps_epoch}


def load_gpu_report(path):
    """Per-token compute (fwd, bwd, opt seconds per row) per model name from the kit's report CSV. Accepted:
    a header with model,hidden,layers,rows_per_step,fwd_ms,bwd_ms,opt_ms (model mlp|transformer); or
    bench_train's own --csv rows (the transformer's run_tx.sh format, the MLP's train_raw format)."""
    out = {}
    with open(path) as f:
        rows = list(csv.reader(f))
    if rows and "rows_per_step" in rows[0]:
        h = rows[0]
        for r in rows[1:]:
            x = dict(zip(h, r))
            name = f"mlp-H{x['hidden']}" if x["model"] == "mlp" else f"tx-d{x['hidden']}-L{x['layers']}"
            rps = float(x["rows_per_step"])
            out[name] = tuple(float(x[k]) / 1e3 / rps for k in ("fwd_ms", "bwd_ms", "opt_ms"))
        return out
    for r in rows:
        if len(r) >= 24 and r[0] == "mpiddp":  # transformer: np d L heads ff lens B steps sps rps step data fwd bwd ...
            rps = float(r[10]) * float(r[11]) / 1e3 / int(r[1])
            out[f"tx-d{r[2]}-L{r[3]}"] = (float(r[13]) / 1e3 / rps, float(r[14]) / 1e3 / rps, float(r[18]) / 1e3 / rps)
        elif len(r) >= 19 and r[0].startswith("mpiddp"):  # MLP: impl np H batch steps sps rps step data fwd bwd sync opt
            rps = float(r[6]) * float(r[7]) / 1e3 / int(r[1])
            out[f"mlp-H{r[2]}"] = (float(r[9]) / 1e3 / rps, float(r[10]) / 1e3 / rps, float(r[12]) / 1e3 / rps)
    return out


# ----------------------------------------------------------------------------- default mode: the table
PS = [2 ** k for k in range(11)]
MODELS = ["mlp-H256", "tx-d512-L8", "tx-d1024-L12"]


def predict(net, bucket_mb, tokens, report, models=MODELS):
    rows = []
    for name in models:
        m = make_model(name)
        rep = report.get(name)
        base = gpu_step(m, tokens, 1, net, bucket_mb, rep)
        for p in PS:
            s = gpu_step(m, tokens, p, net, bucket_mb, rep)
            rows.append({"model": name, "gpus": p, "nodes": max(1, p // GPUS_PER_NODE), "tokens_per_gpu": tokens,
                         "bucket_mb": bucket_mb, "params": m["n_params"], "buckets": s["buckets"], "algo": s["algo"],
                         "step_ms": s["step"] * 1e3, "compute_ms": (s["fwd"] + s["bwd"] + s["opt"]) * 1e3,
                         "comm_exposed_ms": s["comm"] * 1e3, "data_ms": s["data"] * 1e3, "ckpt_ms": s["ckpt"] * 1e3,
                         "efficiency": base["step"] / s["step"], "tokens_per_s": tokens * p / s["step"],
                         "epoch_s": s["epoch_s"], "compute_source": "report" if rep else "roofline"})
    return rows


def search_90(net, report, models=MODELS):
    """For each model and bucket size: the smallest token budget per GPU (powers of 2) with efficiency >= 0.9
    at 1024 GPUs that fits in 80 GB of activations."""
    res = []
    for name in models:
        m = make_model(name)
        for mb in (1, 5, 25, 100):
            found = None
            for k in range(6, 21):
                tok = 2 ** k
                if tok * m["mem_row"] + 16 * m["n_params"] > GPU_MEM:
                    break
                e = gpu_step(m, tok, 1, net, mb, report.get(name))["step"] / gpu_step(m, tok, 1024, net, mb, report.get(name))["step"]
                if e >= 0.9:
                    found = (tok, e)
                    break
            res.append((name, mb, found))
    return res


def gnuplot_png(csvpath, png, tokens=DEFAULT_TOKENS, bucket_mb=25.0):
    script = f"""set terminal pngcairo size 1000,450
set output '{png}'
set datafile separator ','
set multiplot layout 1,2 title 'mpiddp weak scaling on H100 (model estimate, {tokens} tokens/GPU, {bucket_mb:g} MiB buckets)'
set logscale x 2
set xlabel 'GPUs (8 per node)'
set ylabel 'weak-scaling efficiency'
set yrange [0:1.05]
set key bottom left
set grid
plot for [m in "mlp-H256 tx-d512-L8 tx-d1024-L12"] '{csvpath}' using ($2):(strcol(1) eq m && $5 == {bucket_mb:g} && $4 == {tokens} ? $14 : 1/0) with linespoints title m
set ylabel 'epoch time, s (10^9 tokens)'
set logscale y
set yrange [*:*]
set key top right
plot for [m in "mlp-H256 tx-d512-L8 tx-d1024-L12"] '{csvpath}' using ($2):(strcol(1) eq m && $5 == {bucket_mb:g} && $4 == {tokens} ? $16 : 1/0) with linespoints title m
unset multiplot
"""
    try:
        subprocess.run(["gnuplot"], input=script.encode(), check=True)
        return True
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"scaling_model: no plot ({e})", file=sys.stderr)
        return False


COLS = ["model", "gpus", "nodes", "tokens_per_gpu", "bucket_mb", "params", "buckets", "algo", "step_ms", "compute_ms",
        "comm_exposed_ms", "data_ms", "ckpt_ms", "efficiency", "tokens_per_s", "epoch_s", "compute_source"]


def default_mode(args):
    net = Net(nvl_bw=args.nvlink_busbw * 1e9, ib_bw=args.ib_bw * 1e9, nvl_alpha=args.nvlink_alpha * 1e-6, ib_alpha=args.ib_alpha * 1e-6)
    report = load_gpu_report(args.gpu_report) if args.gpu_report else {}
    rows = predict(net, args.bucket_mb, args.tokens, report)
    extra = []
    for mb in (1, 5, 100):  # the CSV also holds the other bucket sizes and token budgets
        if mb != args.bucket_mb:
            extra += predict(net, mb, args.tokens, report)
    for tok in (2048, 32768):
        extra += predict(net, args.bucket_mb, tok, report)
    os.makedirs(args.out, exist_ok=True)
    cpath = os.path.join(args.out, "scaling_model.csv")
    with open(cpath, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLS)
        w.writeheader()
        for r in rows + extra:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    lines = []
    lines.append(f"Assumptions: H100 SXM fp32 {H100['fp32'] / 1e12:.0f} TFLOP/s (mpiddp's GEMMs are exact fp32), HBM {H100['hbm'] / 1e12:.2f} TB/s; "
                 f"GEMM {GEMM_EFF:.0%} / attention {ATTN_EFF:.0%} of peak, element-wise {MEM_EFF:.0%} of HBM, {KERNEL_MIN * 1e6:.0f} us per kernel at least; "
                 f"NVLink bus bandwidth {net.nvl_bw / 1e9:.0f} GB/s, {net.nvl_alpha * 1e6:.1f} us/hop; InfiniBand {net.ib_bw / 1e9:.0f} GB/s per GPU, "
                 f"{net.ib_alpha * 1e6:.1f} us/hop; {NCCL_LAUNCH * 1e6:.0f} us per NCCL call; {args.tokens} tokens per GPU per step "
                 f"(transformer lengths {LENS[0]}-{LENS[1]}); {args.bucket_mb:g} MiB buckets; epoch = 1e9 tokens; compute: "
                 + ("the GPU report " + args.gpu_report if report else "roofline estimate (no GPU report)") + ".")
    lines.append("")
    lines.append("| model | params | GPUs | nodes | buckets | algorithm | step ms | compute ms | exposed comm ms | data ms | efficiency | tokens/s | epoch (1e9 tokens) |")
    lines.append("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lines.append(f"| {r['model']} | {r['params'] / 1e6:.2f} M | {r['gpus']} | {r['nodes']} | {r['buckets']} | {r['algo']} | {r['step_ms']:.3f} | "
                     f"{r['compute_ms']:.3f} | {r['comm_exposed_ms']:.3f} | {r['data_ms']:.3f} | {r['efficiency']:.3f} | "
                     f"{r['tokens_per_s']:,.0f} | {fmt_time(r['epoch_s'])} |")
    lines.append("")
    lines.append("Weak scaling >= 90% at 1024 GPUs: the smallest token budget per GPU (powers of 2, within 80 GB) per bucket size:")
    lines.append("")
    lines.append("| model | bucket MiB | tokens per GPU per step | efficiency at 1024 |")
    lines.append("|---|---:|---:|---:|")
    for name, mb, found in search_90(net, report):
        lines.append(f"| {name} | {mb} | {found[0] if found else 'none'} | {found[1]:.3f} |" if found else f"| {name} | {mb} | none within memory | – |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "scaling_model.md"), "w") as f:
        f.write(text + "\n")
    png = os.path.join(args.out, "scaling_model.png")
    if gnuplot_png(cpath, png, args.tokens, args.bucket_mb):
        print(f"\nwrote {cpath}, {png}, {os.path.join(args.out, 'scaling_model.md')}")
    return 0


def fmt_time(s):
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.1f} s"


# ----------------------------------------------------------------------------- self test
def selftest():
    ok = True

    def check(c, msg):
        nonlocal ok
        if not c:
            ok = False
            print("FAIL:", msg)

    rng = np.random.default_rng(1)
    s = np.array([2.0 ** k for k in range(10, 25)])
    a0, b0 = 12e-6, 1 / 7.5e9
    t = (a0 + b0 * s) * (1 + 0.02 * rng.standard_normal(len(s)))
    a, b = fit_alpha_beta(s, t)
    check(abs(a - a0) / a0 < 0.1 and abs(b - b0) / b0 < 0.05, f"alpha-beta fit: {a} {b} vs {a0} {b0}")
    a, b = fit_alpha_beta(s, a0 + b0 * s)
    check(abs(a - a0) / a0 < 1e-6 and abs(b - b0) / b0 < 1e-6, "exact fit")
    # buckets: cover the buffer from the end, contiguous
    bk = buckets(1000, 400)
    check(bk == [(900, 1000), (800, 900), (700, 800), (600, 700), (500, 600), (400, 500), (300, 400), (200, 300), (100, 200), (0, 100)],
          f"buckets {bk}")
    check(len(buckets(make_model("tx-d1024-L12")["n_params"] + 2, 25 << 20)) == 16, "d1024 L12 in 25 MiB buckets")
    # the last bucket is exposed, earlier ones hide: a single huge bucket is fully exposed
    net = Net()
    m = make_model("tx-d512-L8")
    one, nb1, _ = comm_schedule(m["n_params"], m["segs"], 0.05, 1 << 30, net, 64)
    full = net.allreduce(4.0 * (m["n_params"] + 2), 64)[0]
    check(nb1 == 1 and abs(one - full) < 1e-12, "one bucket: all exposed")
    many, _, _ = comm_schedule(m["n_params"], m["segs"], 0.05, 5 << 20, net, 64)
    check(many < one, "smaller buckets overlap backward")
    nov, _, _ = comm_schedule(m["n_params"], m["segs"], 0.05, 5 << 20, net, 64, overlap=False)
    check(nov >= many, "blocking >= overlapped")
    # collectives: ring formula, monotone in n and p
    check(abs(ring(1e6, 2, 1e9, 1e-6) - (1e-3 + 2e-6)) < 1e-12, "ring at p=2")
    check(abs(tree(1e6, 4, 1e9, 1e-6) - (4e-6 + 2e-3)) < 1e-12, "tree at p=4")
    for p in PS[1:]:
        check(net.allreduce(1e8, p)[0] >= net.allreduce(1e6, p)[0], f"allreduce monotone in n at p={p}")
    # the table: efficiency 1 at p = 1, <= 1, non-increasing in p, epoch time decreasing
    for tok in (2048, 8192):
        for mb in (1, 25):
            rows = predict(net, mb, tok, {})
            for name in MODELS:
                r = [x for x in rows if x["model"] == name]
                check(abs(r[0]["efficiency"] - 1) < 1e-12, f"{name}: efficiency 1 at p=1")
                for x, y in zip(r, r[1:]):
                    check(y["efficiency"] <= x["efficiency"] + 1e-12, f"{name} tok {tok} mb {mb}: efficiency rises {x['gpus']}->{y['gpus']}")
                    check(y["epoch_s"] < x["epoch_s"], f"{name}: epoch time not decreasing at {y['gpus']}")
                check(all(0 < x["efficiency"] <= 1 + 1e-12 for x in r), f"{name}: efficiency in (0, 1]")
    # the report reader
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("model,hidden,layers,rows_per_step,fwd_ms,bwd_ms,opt_ms\ntransformer,512,8,8192,10,20,1\n")
    rep = load_gpu_report(f.name)
    os.unlink(f.name)
    check(abs(rep["tx-d512-L8"][1] - 20e-3 / 8192) < 1e-15, "gpu report")
    print("scaling_model selftest:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__[__doc__.index("Modes"):])
    ap.add_argument("--validate", action="store_true", help="measure this machine and check the model at np 2")
    ap.add_argument("--selftest", action="store_true", help="unit checks on synthetic data (no timing)")
    ap.add_argument("--build", default=os.path.join(here, "..", "build"), help="build directory (validation)")
    ap.add_argument("--work", default="/tmp/mpiddp-scaling-model", help="scratch directory (validation)")
    ap.add_argument("--repeats", type=int, default=3, help="validation: runs per measurement (the best is used)")
    ap.add_argument("--fit-max", type=int, default=4 << 20,
                    help="validation: largest message in the alpha-beta fit (bytes; the gradients here are < 2 MB)")
    ap.add_argument("--steps-scale", type=float, default=1.0, help="validation: scale the timed steps")
    ap.add_argument("--launcher", default="mpirun -np {np} --oversubscribe",
                    help="validation: how multi-rank runs start ({np} = ranks), e.g. 'srun -N{np} -n{np} --mpi=pmix' "
                         "(binaries and --work must be on a path every node sees)")
    ap.add_argument("--gpu-report", help="the device kit's report CSV (GPU compute per step)")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="rows (tokens) per GPU per step")
    ap.add_argument("--nvlink-busbw", type=float, default=NVLINK_BUSBW / 1e9, help="GB/s")
    ap.add_argument("--nvlink-alpha", type=float, default=NVLINK_ALPHA * 1e6, help="us per hop")
    ap.add_argument("--ib-bw", type=float, default=IB_BW / 1e9, help="GB/s per GPU")
    ap.add_argument("--ib-alpha", type=float, default=IB_ALPHA * 1e6, help="us per hop")
    ap.add_argument("--out", default=os.path.join(here, "results"))
    args = ap.parse_args()
    if args.selftest:
        return selftest()
    if args.validate:
        import scaling_validate  # measures this machine: bench_train and bench_allreduce through mpirun
        scaling_validate.LAUNCHER = args.launcher
        return scaling_validate.validate(args)
    return default_mode(args)


if __name__ == "__main__":
    sys.exit(main())
