#!/usr/bin/python3
"""The PyTorch peer of bench_train: the reference model of docs/model.md under torch DDP (gloo, CPU, one thread per rank like
mpiddp's default), packed batches built from the same shards held in memory (the strongest fair
configuration: no DataLoader workers, no padding), AdamW, the same batch per rank. Launched by mpirun in
the same benchmark run; appends one row in bench_train's CSV format (impl torch-ddp).

  mpirun -np R /usr/bin/python3 peers/torch_ddp.py --data DIR --hidden H [--batch 64] [--steps N] [--warmup W] --csv F
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.dont_write_bytecode = True  # no __pycache__ beside the peers or in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import (PHASES, Mlp, all_reduce64, init_dist, load_in_memory, peak_rss_mib, peer_parser,  # noqa: E402
                         private_mib, timed_step)

a = peer_parser(hidden=64, port=29517, batch=64, csv="train_raw.csv").parse_args()

rank, world = init_dist(a.port)
X, starts, ends, Y, N, D, C = load_in_memory(a.data)  # whole dataset in memory

torch.manual_seed(1)
model = torch.nn.parallel.DistributedDataParallel(Mlp(D, a.hidden, C))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
g = torch.Generator().manual_seed(1)
perm = torch.randperm(N, generator=g).numpy()
mine = perm[rank::world]


def batch(step):
    idx = mine[(step * a.batch) % len(mine):][: a.batch]
    rows = [np.arange(starts[i], ends[i]) for i in idx]
    counts = torch.tensor([len(r) for r in rows], dtype=torch.float32)
    seg = torch.repeat_interleave(torch.arange(len(rows)), counts.long())
    return (X[torch.from_numpy(np.concatenate(rows))], seg, counts), Y[torch.from_numpy(idx)], None


tm = dict.fromkeys(PHASES, 0.0)
rows_done = samples_done = 0
for step in range(a.warmup + a.steps):
    if step == a.warmup:
        dist.barrier()
        tm = {k: 0.0 for k in tm}
        rows_done = samples_done = 0
        t_start = time.perf_counter()
    _, (x, _, _), y, _, dt = timed_step(lambda: batch(step), model, opt)
    for k, v in zip(PHASES, dt):
        tm[k] += v
    rows_done += x.shape[0]
    samples_done += len(y)
wall = time.perf_counter() - t_start
agg = all_reduce64([rows_done, samples_done])
w = all_reduce64([wall], dist.ReduceOp.MAX)
rss = all_reduce64([peak_rss_mib()], dist.ReduceOp.MAX)
anon = all_reduce64([private_mib()], dist.ReduceOp.MAX)
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
