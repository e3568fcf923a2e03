#!/usr/bin/python3
"""The library's layers point one way (docs/architecture.md): each folder may include headers of the folders
listed for it and of its own, plus include/mpiddp.h and system headers. Prints every include that breaks the
rule, with file and line, and exits 1 if there is one.

    core  <-  io, slurm  <-  backend  <-  comm  <-  model  <-  train  <-  app, benchmarks, tests

(backend may use neither io nor slurm; comm, model and train may use io and slurm.)"""
import os, re, sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
ALLOWED = {
    "mpi_ddp/core": {"mpi_ddp/core"},
    "io": {"mpi_ddp/core", "io"},
    "slurm": {"mpi_ddp/core", "slurm"},
    "mpi_ddp/backend": {"mpi_ddp/core", "mpi_ddp/backend", "tests/cuda_emu"},
    "mpi_ddp/comm": {"mpi_ddp/core", "mpi_ddp/backend", "mpi_ddp/comm", "io", "slurm"},
    "mpi_ddp/model": {"mpi_ddp/core", "mpi_ddp/backend", "mpi_ddp/comm", "mpi_ddp/model", "io", "slurm"},
    "mpi_ddp/train": {"mpi_ddp/core", "mpi_ddp/backend", "mpi_ddp/comm", "mpi_ddp/model", "mpi_ddp/train", "io", "slurm"},
    "tests/cuda_emu": {"tests/cuda_emu"},
}
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
bad, files = [], 0
for folder, allowed in ALLOWED.items():
    d = os.path.join(ROOT, folder)
    if not os.path.isdir(d):
        bad.append(f"{folder}: missing folder")
        continue
    for name in sorted(os.listdir(d)):
        if not re.search(r"\.(c|h|cu|cuh|cpp)$", name):
            continue
        files += 1
        for n, line in enumerate(open(os.path.join(d, name), errors="replace"), 1):
            m = inc.match(line)
            if not m:
                continue
            target = m.group(1)
            if target == "mpiddp.h":
                continue
            if "/" not in target:  # a same-folder header (or the emulator's, found through its include path)
                tdir = folder if os.path.exists(os.path.join(d, target)) else "tests/cuda_emu"
            else:
                tdir = os.path.dirname(target)
            if tdir not in allowed:
                bad.append(f"{folder}/{name}:{n}: includes {target} ({tdir} is above {folder})")
for b in bad:
    print(b)
print(f"layers: {files} files, {len(bad)} includes against the rule")
sys.exit(1 if bad else 0)
