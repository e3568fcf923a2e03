#!/usr/bin/python3
"""The PyTorch peer of run_manyshards.sh: the Dataset a user writes for one HDF5 file per sample. __init__
lists the directory (sorted, as mpiddp orders shards) and reads no file; __getitem__ opens the sample's file
with h5py, reads its rows and label and closes it; a DataLoader (no workers) packs 64 samples per rank into the
MLP of docs/model.md under DDP (gloo). It times one training step and one validation batch, then exits: the
peer of `mpiddp train --fast-dev-run 1`. The number of classes is given (--classes): reading it from the data
would open every file. Prints the seconds from the process's start to the end of its first step.

  mpirun -np 2 /usr/bin/python3 peers/torch_per_file.py --data DIR --val DIR --classes 4 [--port P]
"""
import os
import sys
import time

T0 = time.time()  # as close to the process's start as Python allows; the launcher's own time is not counted
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import MpiddpReference, init_dist, peer_parser, private_mib, shard_names  # noqa: E402

ap = peer_parser(hidden=64, port=29731, batch=64)
ap.add_argument("--val", required=True)
ap.add_argument("--classes", type=int, required=True)
a = ap.parse_args()
rank, world = init_dist(a.port, threads=1)


class PerFile(torch.utils.data.Dataset):
    """one sample per file, the file opened when the sample is drawn"""

    def __init__(self, root):
        self.paths = [os.path.join(root, n) for n in shard_names(root)]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with h5py.File(self.paths[i], "r") as f:
            off = f["offsets"][()]
            return f["features"][off[0]:off[1]], int(f["labels"][0])


def pack(batch):
    xs, ys = zip(*batch)
    counts = torch.tensor([len(x) for x in xs])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts, 0)])
    return torch.from_numpy(np.concatenate(xs)), offsets, torch.tensor(ys)


def loader(root, shuffle):
    ds = PerFile(root)
    sampler = torch.utils.data.distributed.DistributedSampler(ds, world, rank, shuffle=shuffle, seed=1)
    return ds, torch.utils.data.DataLoader(ds, batch_size=a.batch, sampler=sampler, collate_fn=pack)


train_ds, train = loader(a.data, True)
val_ds, val = loader(a.val, False)
t_listed = time.time()
x, off, y = next(iter(train))
torch.manual_seed(1)
model = torch.nn.parallel.DistributedDataParallel(MpiddpReference(x.shape[1], a.hidden, a.classes))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
loss = F.cross_entropy(model(x, off), y)
opt.zero_grad(set_to_none=True)
loss.backward()
opt.step()
t_step = time.time()
with torch.no_grad():
    xv, ov, yv = next(iter(val))
    F.cross_entropy(model(xv, ov), yv)
t_val = time.time()
if rank == 0:
    print(f"torch-per-file np={world}: {len(train_ds)} train files listed in {t_listed - T0:.2f} s, first step done at "
          f"{t_step - T0:.2f} s, one validation batch at {t_val - T0:.2f} s; private {private_mib():.1f} MiB on rank 0")
dist.destroy_process_group()
