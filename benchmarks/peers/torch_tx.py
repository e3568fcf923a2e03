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
"""
import argparse
import os
import resource
import sys
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from ckpt_to_torch import MpiddpTransformer  # noqa: E402  (the module of docs/transformer.md)

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--hidden", type=int, default=128)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--ff", type=int, default=0, help="feed-forward width (default 2*hidden, as mpiddp)")
ap.add_argument("--max-positions", type=int, default=512, help="size of pos.weight (mpiddp's default 512)")
ap.add_argument("--batches", required=True, help="PREFIX: rank r reads PREFIX.r<r>")
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--lens", default="", help="label of the length range, e.g. 4-64 (CSV column lens)")
ap.add_argument("--csv", default="tx_raw.csv")
ap.add_argument("--port", type=int, default=29517)
a = ap.parse_args()
ff = a.ff or 2 * a.hidden

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("SLURM_PROCID", 0)))
world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("SLURM_NTASKS", 1)))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(a.port))
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
dist.init_process_group("gloo", rank=rank, world_size=world)

# whole dataset in memory (what a map-style Dataset with preloading does)
shards = sorted(p for p in os.listdir(a.data) if p.endswith(".h5") and not p.startswith("."))
feats, starts, ends, labs, base = [], [], [], [], 0
for s in shards:
    with h5py.File(os.path.join(a.data, s), "r") as f:
        feats.append(f["features"][()])
        off = f["offsets"][()].astype(np.int64)
        starts.append(off[:-1] + base)
        ends.append(off[1:] + base)
        labs.append(f["labels"][()].astype(np.int64))
        base += f["features"].shape[0]
X = torch.from_numpy(np.concatenate(feats))
starts, ends = np.concatenate(starts), np.concatenate(ends)
Y = torch.from_numpy(np.concatenate(labs))
N, D = len(Y), X.shape[1]
C = int(Y.max()) + 1
del feats

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

torch.manual_seed(1)
net = MpiddpTransformer(D, a.hidden, a.layers, a.heads, ff, a.max_positions, C, positions=True, dropout=0.0)
model = torch.nn.parallel.DistributedDataParallel(net)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
Lh, dh = a.layers, a.hidden


def batch(step):
    """the step's samples zero-padded to [B, T_max, D] and the padding mask (True at padding rows)"""
    idx = plan[step]
    n = torch.from_numpy(ends[idx] - starts[idx])
    x = torch.nn.utils.rnn.pad_sequence([X[s:e] for s, e in zip(starts[idx], ends[idx])], batch_first=True)
    pad = torch.arange(x.shape[1])[None, :] >= n[:, None]
    return x, pad, Y[torch.from_numpy(idx)], n


def model_flops(n):
    """the model FLOPs mpiddp counts for one step on real rows (fwd + bwd = 3x fwd GEMM + attention work)"""
    R = int(n.sum())
    return 3.0 * (R * (2 * D * dh + Lh * (8 * dh * dh + 4 * dh * ff)) + Lh * float((4 * n.double() ** 2 * dh).sum()))


tm = {"data": 0.0, "fwd": 0.0, "bwd": 0.0, "opt": 0.0}
rows_done = samples_done = padded_rows = 0
flops = 0.0
for step in range(a.warmup + a.steps):
    if step == a.warmup:
        dist.barrier()
        tm = {k: 0.0 for k in tm}
        rows_done = samples_done = padded_rows = 0
        flops = 0.0
        t_start = time.perf_counter()
    t0 = time.perf_counter()
    x, pad, y, n = batch(step)
    t1 = time.perf_counter()
    loss = F.cross_entropy(model(x, pad), y)
    t2 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss.backward()  # includes DDP's bucketed gloo allreduce
    t3 = time.perf_counter()
    opt.step()
    t4 = time.perf_counter()
    tm["data"] += t1 - t0
    tm["fwd"] += t2 - t1
    tm["bwd"] += t3 - t2
    tm["opt"] += t4 - t3
    rows_done += int(n.sum())
    samples_done += len(y)
    padded_rows += x.shape[0] * x.shape[1]
    flops += model_flops(n)
wall = time.perf_counter() - t_start
if not torch.isfinite(loss):
    sys.exit(f"rank {rank}: non-finite loss {loss.item()}")
agg = torch.tensor([rows_done, samples_done, padded_rows], dtype=torch.float64)
dist.all_reduce(agg)
w = torch.tensor([wall], dtype=torch.float64)
dist.all_reduce(w, op=dist.ReduceOp.MAX)
rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0], dtype=torch.float64)
dist.all_reduce(rss, op=dist.ReduceOp.MAX)
anon = 0.0  # private (anonymous) resident memory now, the part that is this process's own
with open("/proc/self/status") as st:
    for line in st:
        if line.startswith("RssAnon:"):
            anon = float(line.split()[1]) / 1024.0
anon = torch.tensor([anon], dtype=torch.float64)
dist.all_reduce(anon, op=dist.ReduceOp.MAX)
if rank == 0:
    ms = 1e3 / a.steps
    wall = w.item()
    sps, rps = agg[1].item() / wall, agg[0].item() / wall
    pad_share = 1.0 - agg[0].item() / agg[2].item()
    gflops = flops / (tm["fwd"] + tm["bwd"]) / 1e9
    with open(a.csv, "a") as f:
        f.write(f"torch-ddp,{world},{a.hidden},{a.layers},{a.heads},{ff},{a.lens},{B},{a.steps},{sps:.1f},{rps:.0f},"
                f"{wall * ms:.3f},{tm['data'] * ms:.3f},{tm['fwd'] * ms:.3f},{tm['bwd'] * ms:.3f},,,,{tm['opt'] * ms:.3f},"
                f"{gflops:.2f},,{pad_share:.4f},{rss.item():.1f},{anon.item():.1f}\n")
    print(f"torch-ddp np={world} d={a.hidden} L={a.layers} heads={a.heads} ff={ff} lens={a.lens} B={B}: {sps:.0f} samples/s "
          f"{rps:.0f} rows/s, step {wall * ms:.2f} ms (data {tm['data'] * ms:.2f} fwd {tm['fwd'] * ms:.2f} "
          f"bwd+allreduce {tm['bwd'] * ms:.2f} opt {tm['opt'] * ms:.2f}), {gflops:.1f} GFLOP/s on real rows, "
          f"padding {pad_share:.1%}, peak RSS {rss.item():.1f} MiB, private {anon.item():.1f} MiB")
dist.destroy_process_group()
