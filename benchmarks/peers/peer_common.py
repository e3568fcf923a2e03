"""What the PyTorch peers (torch_ddp.py, torch_tx.py, torch_h5py_train.py) share: the options they share with
bench_train, the process group of an mpirun launch, the dataset held in memory, the MLP of docs/model.md on
packed rows, one timed training step and the reductions of the run's counters and memory over the ranks.
Imported by path: each peer sets sys.dont_write_bytecode and puts its own folder first on sys.path; this
module puts scripts/ there too, for the modules of scripts/ckpt_to_torch.py."""
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from ckpt_to_torch import MpiddpReference  # noqa: E402  (the module of docs/model.md)

PHASES = ("data", "fwd", "bwd", "opt")  # the step's timed phases, as the peers' tm dicts name them


def shard_names(data):
    """the dataset's shards in sorted file-name order (the order of the global sample indices)"""
    return sorted(p for p in os.listdir(data) if p.endswith(".h5") and not p.startswith("."))


def peer_parser(hidden, port, batch=None, csv=None):
    """an ArgumentParser with the options the peers share with bench_train (same names, same meanings): --data
    DIR (required), --hidden; with batch, --batch (samples per rank per step); with csv (the peers that time a
    fixed number of steps and append a row to a CSV), --steps, --warmup and --csv; and --port (the rendezvous
    port). The arguments are the peer's defaults; each peer adds its own options."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--hidden", type=int, default=hidden)
    if batch is not None:
        ap.add_argument("--batch", type=int, default=batch)
    if csv is not None:
        ap.add_argument("--steps", type=int, default=50)
        ap.add_argument("--warmup", type=int, default=5)
        ap.add_argument("--csv", default=csv)
    ap.add_argument("--port", type=int, default=port)
    return ap


def launch_env():
    """(rank, world size) of this process under mpirun (or srun)"""
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("SLURM_PROCID", 0)))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("SLURM_NTASKS", 1)))
    return rank, world


def init_dist(port, backend="gloo", threads=None):
    """the default process group over this launch's ranks (rendezvous on 127.0.0.1:port unless MASTER_ADDR/PORT
    say otherwise); intra-op threads = threads, else OMP_NUM_THREADS (default 1, as mpiddp). Returns (rank, world)."""
    rank, world = launch_env()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    torch.set_num_threads(threads if threads is not None else int(os.environ.get("OMP_NUM_THREADS", "1")))
    if backend is not None:
        dist.init_process_group(backend, rank=rank, world_size=world)
    return rank, world


def load_in_memory(data):
    """the whole dataset in memory (what a map-style Dataset with preloading does): X float32 [rows, D] of all
    shards concatenated, per global sample index its first and end row (int64 arrays), Y int64 [N]; returns
    (X, starts, ends, Y, N, D, C) with C = the largest label + 1"""
    feats, starts, ends, labs, base = [], [], [], [], 0
    for s in shard_names(data):
        with h5py.File(os.path.join(data, s), "r") as f:
            feats.append(f["features"][()])
            off = f["offsets"][()].astype(np.int64)
            starts.append(off[:-1] + base)
            ends.append(off[1:] + base)
            labs.append(f["labels"][()].astype(np.int64))
            base += f["features"].shape[0]
    X = torch.from_numpy(np.concatenate(feats))
    Y = torch.from_numpy(np.concatenate(labs))
    return X, np.concatenate(starts), np.concatenate(ends), Y, len(Y), X.shape[1], int(Y.max()) + 1


class Mlp(MpiddpReference):
    """MpiddpReference of scripts/ckpt_to_torch.py (the same parameters, created in the same order) called on a
    packed batch as segment ids and per-sample row counts, pooling in the input's dtype on its device"""

    def forward(self, x, seg, counts):
        h = F.gelu(self.l2(F.gelu(self.l1(x), approximate="tanh")), approximate="tanh")
        pooled = torch.zeros(len(counts), h.shape[1], dtype=h.dtype, device=h.device).index_add_(0, seg, h)
        return self.l3(pooled / counts[:, None].to(h.dtype))


def timed_step(make_batch, model, opt):
    """one training step: make_batch() -> (model inputs, labels, extra), cross-entropy of model(*inputs),
    backward (under DDP with its bucketed allreduce), optimizer step. Returns (loss, inputs, labels, extra,
    seconds per phase of PHASES)."""
    t0 = time.perf_counter()
    inputs, y, extra = make_batch()
    t1 = time.perf_counter()
    loss = F.cross_entropy(model(*inputs), y)
    t2 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss.backward()  # includes DDP's bucketed gloo allreduce
    t3 = time.perf_counter()
    opt.step()
    t4 = time.perf_counter()
    return loss, inputs, y, extra, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)


def all_reduce64(values, op=dist.ReduceOp.SUM, device=None):
    """values reduced over the ranks in float64 (on device: NCCL reduces device tensors), as a CPU tensor"""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op)
    return t.cpu()


def peak_rss_mib():
    """this process's peak resident memory so far (MiB)"""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def private_mib():
    """private (anonymous) resident memory now (MiB), the part that is this process's own; 0 where unknown"""
    anon = 0.0
    with open("/proc/self/status") as st:
        for line in st:
            if line.startswith("RssAnon:"):
                anon = float(line.split()[1]) / 1024.0
    return anon
