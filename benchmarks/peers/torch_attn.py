#!/usr/bin/python3
"""The PyTorch peer of bench_kernels' attention rows: one encoder layer's attention, forward plus backward, on the
packed batches bench_kernels timed (its --lens-out file: one line per configuration, tab-separated name, d, heads
and the comma-separated sample lengths). q, k and v are [R, heads, d/heads] slices of one packed [R, 3, heads, dh]
tensor, as in a layer, in bf16 on CUDA; the attention is PyTorch's packed path, found the way torch_tx.py finds
it: varlen = torch.nn.attention.varlen.varlen_attn (flash), else SDPA on nested jagged tensors, else one SDPA
call per sample (loop), else its arithmetic per sample (math: an old PyTorch on the CPU of a dry run). Timed as
bench_kernels times its ops: on CUDA 10 back-to-back calls between two events, averaged (the backward: 10
backward passes of one forward, retain_graph), the best of --reps after --warmup (on the CPU one call, wall time).
Appends one row per configuration to --csv:

  config,impl,precision,rows,samples,fwd_ms,bwd_ms,total_ms

  python3 peers/torch_attn.py --lens FILE --csv FILE [--device cuda|cpu] [--reps 10] [--warmup 3]
"""
import argparse
import csv
import os
import sys
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--lens", required=True)
ap.add_argument("--csv", required=True)
ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
ap.add_argument("--reps", type=int, default=10)
ap.add_argument("--warmup", type=int, default=3)
a = ap.parse_args()
dev = torch.device(a.device)
dtype = torch.bfloat16 if a.device == "cuda" else torch.float32


def attention(kind):
    """f(q, k, v [R, H, dh], lens, cu int32 [n+1], maxn) -> [R, H, dh]"""
    if kind == "varlen":
        from torch.nn.attention.varlen import varlen_attn  # noqa: E402  (PyTorch >= 2.10)
        return lambda q, k, v, lens, cu, maxn: varlen_attn(q, k, v, cu, cu, maxn, maxn)
    if kind == "njt":
        def f(q, k, v, lens, cu, maxn):
            nj = [torch.nested.nested_tensor_from_jagged(t, cu.long()).transpose(1, 2) for t in (q, k, v)]
            return F.scaled_dot_product_attention(*nj).transpose(1, 2).values()
        return f

    sdpa = getattr(F, "scaled_dot_product_attention", None) if kind == "loop" else None

    def one(q, k, v):  # [H, n, dh]: SDPA, or its arithmetic where this PyTorch lacks it ("math")
        if sdpa is not None:
            return sdpa(q, k, v)
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5, -1), v)

    def f(q, k, v, lens, cu, maxn):  # one call per sample
        out = [one(*(t.transpose(0, 1) for t in s3)).transpose(0, 1)
               for s3 in zip(torch.split(q, lens), torch.split(k, lens), torch.split(v, lens))]
        return torch.cat(out)
    if kind == "loop" and sdpa is None:
        raise RuntimeError("no scaled_dot_product_attention in this PyTorch")
    return f


def works(f):
    """f runs forward and backward on a small packed input here"""
    H, dh, lens = 2, 16, [3, 5]
    qkv = torch.randn(8, 3, H, dh, device=dev, dtype=dtype, requires_grad=True)
    cu = torch.tensor([0, 3, 8], device=dev, dtype=torch.int32)
    o = f(qkv[:, 0], qkv[:, 1], qkv[:, 2], lens, cu, 5)
    o.float().sum().backward()
    return tuple(o.shape) == (8, H, dh)


why, kind, fn = [], None, None
for k in ["varlen", "njt", "loop", "math"]:
    try:
        f = attention(k)
        if works(f):
            kind, fn = k, f
            break
    except Exception as e:  # noqa: BLE001  (any failure: the next path)
        why.append(f"{k}: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}")
if fn is None:
    sys.exit("torch_attn: no packed attention path works here: " + "; ".join(why))


def timed(call):
    """milliseconds of one call"""
    if a.device == "cuda":
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        call()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1)
    t = time.perf_counter()
    call()
    return (time.perf_counter() - t) * 1e3


new = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
with open(a.csv, "a", newline="") as out:
    w = csv.writer(out)
    if new:
        w.writerow(["config", "impl", "precision", "rows", "samples", "fwd_ms", "bwd_ms", "total_ms"])
    for line in open(a.lens):
        name, d, heads, lens = line.rstrip("\n").split("\t")
        d, H, lens = int(d), int(heads), [int(x) for x in lens.split(",")]
        R, dh = sum(lens), int(d) // int(heads)
        cu = torch.tensor([0] + lens, device=dev, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        torch.manual_seed(1)
        qkv = torch.randn(R, 3, H, dh, device=dev, dtype=dtype, requires_grad=True)
        dout = torch.randn(R, H, dh, device=dev, dtype=dtype)
        fw, bw = [], []
        inner = 10 if a.device == "cuda" else 1  # as bench_kernels: back-to-back calls averaged, the best of --reps
        for rep in range(a.warmup + a.reps):
            holder = {}

            def fwd():
                for _ in range(inner):
                    holder["o"] = fn(qkv[:, 0], qkv[:, 1], qkv[:, 2], lens, cu, max(lens))

            def bwd():
                for j in range(inner):
                    holder["o"].backward(dout, retain_graph=j < inner - 1)

            tf = timed(fwd) / inner
            qkv.grad = None
            tb = timed(bwd) / inner
            if rep >= a.warmup:
                fw.append(tf)
                bw.append(tb)
        mf, mb = min(fw), min(bw)
        w.writerow([name, f"torch-{kind}", "bf16" if dtype == torch.bfloat16 else "fp32", R, len(lens),
                    f"{mf:.4f}", f"{mb:.4f}", f"{mf + mb:.4f}"])
        print(f"torch_attn {name}: {kind}, {R} rows, {len(lens)} samples: fwd {mf:.3f} ms, bwd {mb:.3f} ms")
