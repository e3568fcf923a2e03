#!/usr/bin/python3
"""The h5py peer of bench_io: a per-sample reader as a PyTorch Dataset would write it (offsets loaded
once, then features[lo:hi] per sample). Launched by mpirun (one process per rank, no MPI needed); each
process appends its rows to the CSV in bench_io's format.

  mpirun -np 4 peers/h5py_read.py DIR SAMPLES CSV
"""
import os
import resource
import sys
import time

import h5py
import numpy as np

data, K, csv = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("SLURM_PROCID", 0)))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("SLURM_NTASKS", 1)))
local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", 0))
names = sorted(p for p in os.listdir(data) if p.endswith(".h5") and not p.startswith("."))


def mix64(x):
    m = (1 << 64) - 1
    x = (x + 0x9e3779b97f4a7c15) & m
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & m
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & m
    return x ^ (x >> 31)


def rss():
    anon = file = -1.0
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            anon = int(line.split()[1]) / 1024
        if line.startswith("RssFile:"):
            file = int(line.split()[1]) / 1024
    return anon, file


def barrier_file(tag):
    """crude cross-process barrier through the file system (the peer has no MPI)"""
    d = f"{csv}.sync-{tag}"
    os.makedirs(d, exist_ok=True)
    open(f"{d}/{rank}", "w").close()
    while len(os.listdir(d)) < size:
        time.sleep(0.01)


files = [h5py.File(f"{data}/{n}", "r") for n in names]
offsets = [f["offsets"][()] for f in files]
firsts = np.cumsum([0] + [len(o) - 1 for o in offsets])
N = int(firsts[-1])
K = min(K, N // size)
for order in ("seq", "rand"):
    for cache in ("cold", "warm"):
        if order == "seq":
            idx = [rank * K + j for j in range(K)]
        else:
            idx = [mix64(0xbe7c4 ^ (rank << 40) ^ j) % N for j in range(K)]
        if cache == "cold" and local == 0:
            for n in names:
                fd = os.open(f"{data}/{n}", os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
        barrier_file(f"{order}-{cache}-a")
        locs = [(int(np.searchsorted(firsts, i, side="right") - 1), i) for i in idx]
        if cache == "warm":
            for k, i in locs:
                o = offsets[k]
                j = i - firsts[k]
                files[k]["features"][o[j]:o[j + 1]]
        barrier_file(f"{order}-{cache}-b")
        t0 = time.perf_counter()
        nbytes = 0
        s = 0.0
        for k, i in locs:
            o = offsets[k]
            j = i - firsts[k]
            rows = files[k]["features"][o[j]:o[j + 1]]
            s += float(rows[0, 0]) + float(rows[-1, -1])
            nbytes += rows.nbytes
        dt = time.perf_counter() - t0
        anon, filemb = rss()
        with open(csv, "a") as f:
            f.write(f"{size},{rank},h5py,{order},{cache},{K},{nbytes},{dt:.6f},{anon:.1f},{filemb:.1f},{s:g}\n")
        barrier_file(f"{order}-{cache}-c")
