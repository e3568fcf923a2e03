#!/usr/bin/python3
"""The PyTorch peer of bench_train: the reference model of docs/model.md under torch DDP (gloo, CPU, one thread per rank like
mpiddp's default), packed batches built from the same shards held in memory (the strongest fair
configuration: no DataLoader workers, no padding), AdamW, the same batch per rank. Launched by mpirun in
the same benchmark run; appends one row in bench_train's CSV format (impl torch-ddp).

  mpirun -np R /usr/bin/python3 peers/torch_ddp.py --data DIR --hidden H [--batch 64] [--steps N] [--warmup W] --csv F
"""
import argparse
import os
import resource
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--hidden", type=int, default=64)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--csv", default="train_raw.csv")
ap.add_argument("--port", type=int, default=29517)
a = ap.parse_args()

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("SLURM_PROCID", 0)))
world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("SLURM_NTASKS", 1)))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(a.port))
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
dist.init_process_group("gloo", rank=rank, world_size=world)

# whole dataset in memory (what a map-style Dataset with preloading does)
shards = sorted(p for p in os.listdir(a.data) if p.endswith(".h5") and not p.startswith("."))
feats, offs, labs, base = [], [], [], 0
for s in shards:
    with h5py.File(os.path.join(a.data, s), "r") as f:
        feats.append(f["features"][()])
        offs.append(f["offsets"][()][:-1] + base)
        labs.append(f["labels"][()].astype(np.int64))
        base += f["features"].shape[0]
X = torch.from_numpy(np.concatenate(feats))
starts = np.concatenate(offs)
ends = np.append(starts[1:], base)
Y = torch.from_numpy(np.concatenate(labs))
N, D = len(Y), X.shape[1]
C = int(Y.max()) + 1


class Ref(torch.nn.Module):
    def __init__(self, d, h, c):
        super().__init__()
        self.l1, self.l2, self.l3 = torch.nn.Linear(d, h), torch.nn.Linear(h, h), torch.nn.Linear(h, c)

    def forward(self, x, seg, counts):
        h = F.gelu(self.l2(F.gelu(self.l1(x), approximate="tanh")), approximate="tanh")
        pooled = torch.zeros(len(counts), h.shape[1]).index_add_(0, seg, h) / counts[:, None]
        return self.l3(pooled)


torch.manual_seed(1)
model = torch.nn.parallel.DistributedDataParallel(Ref(D, a.hidden, C))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
g = torch.Generator().manual_seed(1)
perm = torch.randperm(N, generator=g).numpy()
mine = perm[rank::world]


def batch(step):
    idx = mine[(step * a.batch) % len(mine):][: a.batch]
    rows = [np.arange(starts[i], ends[i]) for i in idx]
    counts = torch.tensor([len(r) for r in rows], dtype=torch.float32)
    seg = torch.repeat_interleave(torch.arange(len(rows)), counts.long())
    return X[torch.from_numpy(np.concatenate(rows))], seg, counts, Y[torch.from_numpy(idx)]


tm = {"data": 0.0, "fwd": 0.0, "bwd": 0.0, "opt": 0.0}
rows_done = samples_done = 0
for step in range(a.warmup + a.steps):
    if step == a.warmup:
        dist.barrier()
        tm = {k: 0.0 for k in tm}
        rows_done = samples_done = 0
        t_start = time.perf_counter()
    t0 = time.perf_counter()
    x, seg, counts, y = batch(step)
    t1 = time.perf_counter()
    loss = F.cross_entropy(model(x, seg, counts), y)
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
    rows_done += x.shape[0]
    samples_done += len(y)
wall = time.perf_counter() - t_start
agg = torch.tensor([rows_done, samples_done], dtype=torch.float64)
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
    with open(a.csv, "a") as f:
        f.write(f"torch-ddp,{world},{a.hidden},{a.batch},{a.steps},{agg[1].item() / wall:.1f},{agg[0].item() / wall:.0f},"
                f"{wall * ms:.3f},{tm['data'] * ms:.3f},{tm['fwd'] * ms:.3f},{tm['bwd'] * ms:.3f},,{tm['opt'] * ms:.3f},,,{rss.item():.1f},{anon.item():.1f}\n")
    print(f"torch-ddp np={world} H={a.hidden}: {agg[1].item() / wall:.0f} samples/s, step {wall * ms:.2f} ms "
          f"(data {tm['data'] * ms:.2f} fwd {tm['fwd'] * ms:.2f} bwd+allreduce {tm['bwd'] * ms:.2f} opt {tm['opt'] * ms:.2f}), "
          f"peak RSS {rss.item():.1f} MiB, private {anon.item():.1f} MiB")
dist.destroy_process_group()
