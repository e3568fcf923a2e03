#!/usr/bin/python3
"""The PyTorch peer of `bench_train --model transformer`: the Transformer encoder of docs/transformer.md
(`MpiddpTransformer` of scripts/ckpt_to_torch.py, the identical module, dropout 0) under torch DDP (gloo, CPU,
one thread per rank like mpiddp's default), trained the way users train it: per step the step's samples
zero-padded to [B, T_max, D] with a bool src_key_padding_mask, model(x, pad), cross-entropy, DDP backward,
AdamW (lr 1e-3, weight decay 0.01). The whole dataset is held in memory (no DataLoader workers).

It trains exactly the batches mpiddp trained: rank r reads PREFIX.r<r> (written by bench_train
--batches-out PREFIX), line k = the space-separated global dataset indices (position in the concatenation of
the shards in sorted file-name order) of the samples rank r trains in step k, warmup steps first.
Appends one row in bench_train's transformer CSV format (impl torch-ddp; attn_ms, gemm_ms, sync_ms and
sgemm_gflops empty):

  impl,ranks,d,layers,heads,ff,lens,batch,steps,samples_per_s,rows_per_s,step_ms,data_ms,fwd_ms,bwd_ms,
  attn_ms,gemm_ms,sync_ms,opt_ms,gflops,sgemm_gflops,pad_share,peak_rss_mib,private_mib

Times are rank 0's, per step (ms): data = building the padded batch, fwd, bwd (including DDP's bucketed
gloo allreduce), opt. samples/s and rows/s count real samples and rows of all ranks over the slowest rank's
wall time. gflops = the model FLOPs mpiddp counts on REAL rows over rank 0's fwd+bwd time, per step
3·[R·(2·D·d + L·(8·d² + 4·d·f)) + L·Σ_i 4·n_i²·d] (R real rows, n_i sample lengths); the padded rows and
scores the peer also computes are not counted. pad_share = 1 - real rows / Σ B·T_max over the timed steps
of all ranks.

  mpirun -np R /usr/bin/python3 peers/torch_tx.py --data DIR --hidden d --layers L --heads H [--ff f]
      --batches PREFIX --steps N --warmup W --lens LABEL --csv FILE [--port P] [--max-positions 512]

GPU options (benchmarks/run_gpu.sh; without them nothing above changes):
  --device cuda      the model and each step's batch on the GPU (local rank's device), DDP over NCCL; phases
                     timed with CUDA events, wall time between torch.cuda.synchronize() calls
  --autocast bf16    forward under torch.autocast(bf16) (CUDA, or CPU autocast with --device cpu:
                     torch.autocast('cpu', dtype=torch.bfloat16), run_tx.sh's peer torch-bf16 with --impl torch-bf16)
  --packed [IMPL]    no padding: the same module's parameters applied to the step's packed rows [R, d], attention
                     per sample by IMPL, detected at run time in this order (auto): varlen =
                     torch.nn.attention.varlen.varlen_attn (flash, bf16/fp16 on CUDA, PyTorch >= 2.10), njt =
                     scaled_dot_product_attention on nested jagged tensors (torch.nested, layout=torch.jagged),
                     loop = SDPA (or q·kᵀ softmax ·v before PyTorch 2.0) per sample; each is tried once on a
                     small input, forward and backward, before it is used. (nn.TransformerEncoder's own nested-
                     tensor fast path is inference only.)
  --model mlp        the MLP of docs/model.md (MpiddpReference: rows, gelu-tanh, mean pool, head) on the same
                     batches (bench_train --batches-out without --model transformer); --layers/--heads ignored
  --impl LABEL       the CSV impl (default torch-ddp; with any option above torch-<fp32|bf16>-<pad|packed|rows>)
With any of these the row gains six columns after private_mib: attn (the attention path used), tokens and
sum_n2 (real rows and Σ n_i² of the timed steps, all ranks), params, gpu_alloc_mib (torch.cuda.max_memory_
allocated over the run, max over ranks; empty on the CPU) and device (the GPU's name, or cpu).
"""
import contextlib
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ beside the peers or in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import (PHASES, Mlp, all_reduce64, init_dist, load_in_memory, peak_rss_mib, peer_parser,  # noqa: E402
                         private_mib, timed_step)
from ckpt_to_torch import MpiddpTransformer  # noqa: E402  (the module of docs/transformer.md; scripts/ is on the path)

ap = peer_parser(hidden=128, port=29517, csv="tx_raw.csv")
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--ff", type=int, default=0, help="feed-forward width (default 2*hidden, as mpiddp)")
ap.add_argument("--max-positions", type=int, default=512, help="size of pos.weight (mpiddp's default 512)")
ap.add_argument("--batches", required=True, help="PREFIX: rank r reads PREFIX.r<r>")
ap.add_argument("--lens", default="", help="label of the length range, e.g. 4-64 (CSV column lens)")
ap.add_argument("--model", choices=["transformer", "mlp"], default="transformer")
ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
ap.add_argument("--autocast", choices=["none", "bf16"], default="none")
ap.add_argument("--packed", nargs="?", const="auto", default=None, choices=["auto", "varlen", "njt", "loop"])
ap.add_argument("--impl", default="")
ap.add_argument("--compile", action="store_true", help="torch.compile the DDP module (dynamic shapes): the second peer")
a = ap.parse_args()
ff = a.ff or 2 * a.hidden
# the extended row (run_gpu.sh's) for any option beyond run_tx.sh's fp32 CPU peer, or a name other than its torch-ddp
EXT = a.device != "cpu" or a.autocast != "none" or a.packed is not None or a.model != "transformer" or a.impl not in ("", "torch-ddp") \
    or a.compile
MLP = a.model == "mlp"
if MLP:
    a.layers, a.heads, ff = 0, 0, 0

rank, world = init_dist(a.port, backend=None)
CUDA = a.device == "cuda"
if CUDA:
    if not torch.cuda.is_available():
        sys.exit("--device cuda: torch.cuda.is_available() is False")
    lrank = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("SLURM_LOCALID", rank)))
    torch.cuda.set_device(lrank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
else:
    dev = torch.device("cpu")
dist.init_process_group("nccl" if CUDA else "gloo", rank=rank, world_size=world)
X, starts, ends, Y, N, D, C = load_in_memory(a.data)  # whole dataset in memory

# this rank's batches: exactly what mpiddp trained, one line per step
path = f"{a.batches}.r{rank}"
with open(path) as f:
    plan = [np.array(line.split(), dtype=np.int64) for line in f if line.strip()]
if len(plan) < a.warmup + a.steps:
    sys.exit(f"{path}: {len(plan)} steps, need --warmup + --steps = {a.warmup + a.steps}")
allidx = np.concatenate(plan[: a.warmup + a.steps])
if len(allidx) and (allidx.min() < 0 or allidx.max() >= N):
    sys.exit(f"{path}: a sample index outside the dataset's {N} samples")
B = max(len(p) for p in plan[: a.warmup + a.steps])
if int((ends - starts).max()) > a.max_positions:
    sys.exit(f"{a.data}: a sample has more than --max-positions {a.max_positions} rows")



class DeviceTransformer(MpiddpTransformer):
    """MpiddpTransformer with its position indices made on the input's device (identical values)"""

    def forward(self, x, pad):
        h = self.inp(x)
        if self.pos is not None:
            h = h + self.pos(torch.arange(x.shape[1], device=x.device))[None]
        h = self.enc(h, src_key_padding_mask=pad)
        keep = (~pad).to(h.dtype)[..., None]
        return self.head((h * keep).sum(1) / keep.sum(1))


def attn_math(q, k, v):
    """q, k, v [H, n, dh] -> [H, n, dh]"""
    s = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    return torch.matmul(torch.softmax(s, dim=-1), v)


def make_attention(kind):
    """packed attention: f(q, k, v [R, H, dh], lens (host list), cu (int64 [n+1] on the device), maxn) -> [R, H, dh]"""
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if kind == "varlen":
        from torch.nn.attention.varlen import varlen_attn  # noqa: E402  (PyTorch >= 2.10)

        def f(q, k, v, lens, cu, maxn):
            cu32 = cu.to(torch.int32)
            return varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu32, cu32, maxn, maxn)
        return f
    if kind == "njt":
        if not hasattr(torch, "jagged") or not hasattr(torch.nested, "nested_tensor_from_jagged") or sdpa is None:
            raise RuntimeError("no nested jagged tensors / SDPA in this PyTorch")

        def f(q, k, v, lens, cu, maxn):
            nj = [torch.nested.nested_tensor_from_jagged(t.contiguous(), cu).transpose(1, 2) for t in (q, k, v)]  # [n, H, j, dh]
            return sdpa(*nj).transpose(1, 2).values()
        return f

    def f(q, k, v, lens, cu, maxn):  # loop: one attention call per sample
        out = []
        for qi, ki, vi in zip(torch.split(q, lens), torch.split(k, lens), torch.split(v, lens)):
            qi, ki, vi = (t.transpose(0, 1) for t in (qi, ki, vi))  # [H, n, dh]
            out.append((sdpa(qi, ki, vi) if sdpa is not None else attn_math(qi, ki, vi)).transpose(0, 1))
        return torch.cat(out)
    return f


class Packed(torch.nn.Module):
    """the padded module's own parameters (submodule net: same names under net.) applied to packed rows:
    projections, FFN and norms on [R, d] with no padding rows, attention per sample (make_attention)"""

    def __init__(self, net, attention):
        super().__init__()
        self.net, self.attention = net, attention

    def forward(self, x, pos_idx, seg, counts, lens, cu, maxn):
        net = self.net
        h = net.inp(x)
        if net.pos is not None:
            h = h + net.pos(pos_idx)
        R, d = h.shape
        for layer in net.enc.layers:
            mha = layer.self_attn
            H = mha.num_heads
            qkv = F.linear(layer.norm1(h), mha.in_proj_weight, mha.in_proj_bias).view(R, 3, H, d // H)
            o = self.attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], lens, cu, maxn)
            h = h + mha.out_proj(o.reshape(R, d))
            h = h + layer.linear2(F.gelu(layer.linear1(layer.norm2(h))))
        h = net.enc.norm(h)
        pooled = torch.zeros(len(counts), d, dtype=h.dtype, device=h.device).index_add_(0, seg, h)
        return net.head(pooled / counts[:, None].to(h.dtype))


def autocast():
    if a.autocast == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=dev.type, dtype=torch.bfloat16)


def pick_attention():
    """the first packed attention that runs forward and backward here on a small input"""
    order = ["varlen", "njt", "loop"] if a.packed == "auto" else [a.packed]
    why = []
    H, dh, lens = 2, 16, [3, 5]
    cu = torch.tensor([0, 3, 8], device=dev)
    for kind in order:
        try:
            f = make_attention(kind)
            w = torch.randn(3 * H * dh, 3 * H * dh, device=dev, requires_grad=True)
            with autocast():
                qkv = F.linear(torch.randn(8, 3 * H * dh, device=dev), w).view(8, 3, H, dh)
                o = f(qkv[:, 0], qkv[:, 1], qkv[:, 2], lens, cu, 5)
            assert tuple(o.shape) == (8, H, dh), o.shape
            o.float().sum().backward()
            return kind, f, why
        except Exception as e:  # noqa: BLE001  (any failure: try the next path)
            why.append(f"{kind}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    sys.exit("--packed: no packed attention path works here: " + "; ".join(why))


torch.manual_seed(1)
attn_kind = "sdpa-padded" if not MLP else "none"
if MLP:
    net = Mlp(D, a.hidden, C)
elif a.device == "cpu":
    net = MpiddpTransformer(D, a.hidden, a.layers, a.heads, ff, a.max_positions, C, positions=True, dropout=0.0)
else:
    net = DeviceTransformer(D, a.hidden, a.layers, a.heads, ff, a.max_positions, C, positions=True, dropout=0.0)
n_params = sum(p.numel() for p in net.parameters())
if a.packed is not None and not MLP:
    attn_kind, attn_fn, attn_why = pick_attention()
    if rank == 0 and attn_why:
        print("torch_tx: packed attention fell back past " + "; ".join(attn_why))
    net = Packed(net, attn_fn)
net = net.to(dev)
model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[dev.index] if CUDA else None)
if a.compile:  # compiled on the first (warm-up) steps; packed batches change shape, hence dynamic
    if not hasattr(torch, "compile"):
        sys.exit(f"--compile: this PyTorch ({torch.__version__}) has no torch.compile")
    model = torch.compile(model, dynamic=True)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
Lh, dh = a.layers, a.hidden
if not a.impl:
    a.impl = "torch-ddp" if not EXT else \
        f"torch-{'bf16' if a.autocast == 'bf16' else 'fp32'}-{'rows' if MLP else 'packed' if a.packed is not None else 'pad'}" \
        + ("-compiled" if a.compile else "")


def batch(step):
    """the step's samples zero-padded to [B, T_max, D] and the padding mask (True at padding rows), the labels,
    the lengths: ((x, pad), y, n)"""
    idx = plan[step]
    n = torch.from_numpy(ends[idx] - starts[idx])
    x = torch.nn.utils.rnn.pad_sequence([X[s:e] for s, e in zip(starts[idx], ends[idx])], batch_first=True)
    pad = torch.arange(x.shape[1])[None, :] >= n[:, None]
    return (x, pad), Y[torch.from_numpy(idx)], n


def packed_batch(step):
    """the step's samples as packed rows [R, D], positions, segment ids, counts, lengths and offsets"""
    idx = plan[step]
    n = ends[idx] - starts[idx]
    rows = np.concatenate([np.arange(s, e) for s, e in zip(starts[idx], ends[idx])])
    x = X[torch.from_numpy(rows)]
    nt = torch.from_numpy(n)
    seg = torch.repeat_interleave(torch.arange(len(n)), nt)
    pos_idx = torch.from_numpy(np.concatenate([np.arange(k) for k in n]))
    cu = torch.from_numpy(np.concatenate([[0], np.cumsum(n)]))
    return x, pos_idx, seg, nt.float(), [int(k) for k in n], cu, int(n.max()), Y[torch.from_numpy(idx)], nt


def model_flops(n):
    """the model FLOPs mpiddp counts for one step on real rows (fwd + bwd = 3x fwd GEMM + attention work)"""
    R = int(n.sum())
    if MLP:  # bench_train's MLP count: R·(4·D·H + 6·H²)
        return float(R) * (4.0 * D * dh + 6.0 * dh * dh)
    return 3.0 * (R * (2 * D * dh + Lh * (8 * dh * dh + 4 * dh * ff)) + Lh * float((4 * n.double() ** 2 * dh).sum()))


def to_dev(*ts):
    return [t.to(dev, non_blocking=True) for t in ts]


def run_step(step):
    """one step on this rank; returns (loss, samples, real rows, padded rows, lengths) and marks the phases"""
    mark(0)
    if MLP or a.packed is not None:
        x, pos_idx, seg, counts, lens, cu, maxn, y, n = packed_batch(step)
        if CUDA:
            x, pos_idx, seg, counts, cu, y = to_dev(x, pos_idx, seg, counts, cu, y)
        mark(1)
        with autocast():
            out = model(x, seg, counts) if MLP else model(x, pos_idx, seg, counts, lens, cu, maxn)
        padded = x.shape[0]
    else:
        (x, pad), y, n = batch(step)
        if CUDA:
            x, pad, y = to_dev(x, pad, y)
        mark(1)
        with autocast():
            out = model(x, pad)
        padded = x.shape[0] * x.shape[1]
    loss = F.cross_entropy(out.float(), y)
    mark(2)
    opt.zero_grad(set_to_none=True)
    loss.backward()  # includes DDP's bucketed gloo allreduce
    mark(3)
    opt.step()
    mark(4)
    return loss, len(y), padded, n


T = [0.0] * 5
EV = None  # CUDA: per timed step, five events


def mark(k):
    if EV is not None and cur_step >= a.warmup:
        EV[cur_step - a.warmup][k].record()
    else:
        T[k] = time.perf_counter()


if CUDA:
    EV = [[torch.cuda.Event(enable_timing=True) for _ in range(5)] for _ in range(a.steps)]


tm = dict.fromkeys(PHASES, 0.0)
rows_done = samples_done = padded_rows = 0
flops = sum_n2 = 0.0
if CUDA:
    torch.cuda.reset_peak_memory_stats()
for cur_step in range(a.warmup + a.steps):
    if cur_step == a.warmup:
        if CUDA:
            torch.cuda.synchronize()
        dist.barrier()
        tm = {k: 0.0 for k in tm}
        rows_done = samples_done = padded_rows = 0
        flops = sum_n2 = 0.0
        t_start = time.perf_counter()
    if not EXT:  # the CPU peer of run_tx.sh, unchanged
        loss, (x, _), y, n, dt = timed_step(lambda: batch(cur_step), model, opt)
        padded = x.shape[0] * x.shape[1]
        nsamp = len(y)
    else:
        loss, nsamp, padded, n = run_step(cur_step)
        dt = [T[k + 1] - T[k] for k in range(4)]
    if EV is None or cur_step < a.warmup:
        for k, v in zip(PHASES, dt):
            tm[k] += v
    rows_done += int(n.sum())
    samples_done += nsamp
    padded_rows += padded
    flops += model_flops(n)
    sum_n2 += float((n.double() ** 2).sum())
if CUDA:
    torch.cuda.synchronize()
    tm = {k: 0.0 for k in tm}
    for ev in EV:
        for k, name in enumerate(PHASES):
            tm[name] += ev[k].elapsed_time(ev[k + 1]) / 1e3
wall = time.perf_counter() - t_start
if not torch.isfinite(loss):
    sys.exit(f"rank {rank}: non-finite loss {loss.item()}")
CDEV = dev if CUDA else torch.device("cpu")  # NCCL reduces device tensors
agg = all_reduce64([rows_done, samples_done, padded_rows, sum_n2], device=CDEV)
w = all_reduce64([wall], dist.ReduceOp.MAX, CDEV)
rss = all_reduce64([peak_rss_mib()], dist.ReduceOp.MAX, CDEV)
galloc = all_reduce64([torch.cuda.max_memory_allocated() / 1048576.0 if CUDA else 0.0], dist.ReduceOp.MAX, CDEV)
anon = all_reduce64([private_mib()], dist.ReduceOp.MAX, CDEV)
if rank == 0:
    ms = 1e3 / a.steps
    wall = w.item()
    sps, rps = agg[1].item() / wall, agg[0].item() / wall
    pad_share = 1.0 - agg[0].item() / agg[2].item()
    gflops = flops / (tm["fwd"] + tm["bwd"]) / 1e9
    extra = ""
    if EXT:
        gname = torch.cuda.get_device_name(dev).replace(",", " ") if CUDA else "cpu"
        extra = (f",{attn_kind},{agg[0].item():.0f},{agg[3].item():.0f},{n_params},"
                 f"{f'{galloc.item():.1f}' if CUDA else ''},{gname}")
    with open(a.csv, "a") as f:
        f.write(f"{a.impl},{world},{a.hidden},{a.layers},{a.heads},{ff},{a.lens},{B},{a.steps},{sps:.1f},{rps:.0f},"
                f"{wall * ms:.3f},{tm['data'] * ms:.3f},{tm['fwd'] * ms:.3f},{tm['bwd'] * ms:.3f},,,,{tm['opt'] * ms:.3f},"
                f"{gflops:.2f},,{pad_share:.4f},{rss.item():.1f},{anon.item():.1f}{extra}\n")
    if EXT:
        print(f"{a.impl} [{a.model}, {a.device}, autocast {a.autocast}, attention {attn_kind}] "
              f"{'peak allocated %.1f MiB, ' % galloc.item() if CUDA else ''}{n_params} parameters")
    print(f"{a.impl} np={world} d={a.hidden} L={a.layers} heads={a.heads} ff={ff} lens={a.lens} B={B}: {sps:.0f} samples/s "
          f"{rps:.0f} rows/s, step {wall * ms:.2f} ms (data {tm['data'] * ms:.2f} fwd {tm['fwd'] * ms:.2f} "
          f"bwd+allreduce {tm['bwd'] * ms:.2f} opt {tm['opt'] * ms:.2f}), {gflops:.1f} GFLOP/s on real rows, "
          f"padding {pad_share:.1%}, peak RSS {rss.item():.1f} MiB, private {anon.item():.1f} MiB")
dist.destroy_process_group()
