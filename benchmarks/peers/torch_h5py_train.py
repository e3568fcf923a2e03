#!/usr/bin/python3
"""The PyTorch peer of run_bigdata.sh: the MLP of docs/model.md under DDP (gloo) trained on a dataset larger
than memory the only way a per-process Dataset can hold it: each sample read through h5py when it is drawn
(offsets loaded once per shard, then features[lo:hi]), a random permutation per epoch split over the ranks,
64 samples per rank per step. It stops after --seconds of training (a whole cold epoch would take far
longer) and prints samples/s, the rate it trains at cold.

  mpirun -np 2 /usr/bin/python3 peers/torch_h5py_train.py --data DIR --hidden 64 --seconds 60 [--port P]
"""
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ beside the peers or in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import MpiddpReference, all_reduce64, init_dist, peer_parser, private_mib, shard_names  # noqa: E402

ap = peer_parser(hidden=64, port=29717, batch=64)
ap.add_argument("--seconds", type=float, default=60)
a = ap.parse_args()
rank, world = init_dist(a.port, threads=1)

files = [h5py.File(os.path.join(a.data, n), "r") for n in shard_names(a.data)]
offs = [f["offsets"][()] for f in files]
labs = [f["labels"][()].astype(np.int64) for f in files]
first = np.cumsum([0] + [len(o) - 1 for o in offs])
N, D = int(first[-1]), files[0]["features"].shape[1]
C = int(max(l.max() for l in labs)) + 1


torch.manual_seed(1)
model = torch.nn.parallel.DistributedDataParallel(MpiddpReference(D, a.hidden, C))  # the bridge's MLP module
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
mine = np.random.default_rng(1).permutation(N)[rank::world]


def sample(i):  # one h5py read per sample, as a map-style Dataset.__getitem__ does
    k = int(np.searchsorted(first, i, side="right") - 1)
    j = i - first[k]
    lo, hi = offs[k][j], offs[k][j + 1]
    return files[k]["features"][lo:hi], labs[k][j]


samples = rows = step = 0
t0 = time.perf_counter()
while True:
    k = step % max(1, len(mine) // a.batch)  # a run longer than an epoch starts the order again
    idx = mine[k * a.batch:(k + 1) * a.batch]
    xs, ys = zip(*(sample(int(i)) for i in idx))
    counts = torch.tensor([len(x) for x in xs], dtype=torch.float32)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts.long(), 0)])
    loss = F.cross_entropy(model(torch.from_numpy(np.concatenate(xs)), offsets), torch.tensor(ys))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    samples += len(idx)
    rows += int(counts.sum())
    step += 1
    done = torch.tensor([time.perf_counter() - t0 >= a.seconds], dtype=torch.int32)
    dist.all_reduce(done, op=dist.ReduceOp.MAX)  # every rank stops at the same step
    if done.item():
        break
wall = time.perf_counter() - t0
agg = all_reduce64([samples, rows])
anon = private_mib()
if rank == 0:
    print(f"torch-h5py np={world}: {agg[0].item() / wall:.0f} samples/s, {agg[1].item() * D * 4 / wall / 1e6:.1f} MB/s of features "
          f"over {wall:.0f} s ({agg[0].item():.0f} of {N} samples: a cold epoch at this rate takes {N / (agg[0].item() / wall) / 60:.0f} min), "
          f"private {anon:.1f} MiB on rank 0")
dist.destroy_process_group()
