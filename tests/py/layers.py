#!/usr/bin/python3
"""The library's layers point one way (docs/architecture.md). Each folder may use the folders listed for it
and its own, plus include/mpiddp.h and system headers:

    core  <-  slurm, backend  <-  comm  <-  io  <-  model  <-  train  <-  app, benchmarks, tests

(slurm and backend use only core; io uses comm for the timed status agreement of its collectives.) Inside
backend, the shared headers (backend/) sit under its two implementations, backend/cpu and backend/cuda, which
do not use each other; the emulator's backend_cuda*_emu.cpp, each one .cu compiled for the host, count as the
.cu they compile.
Checks two things and prints every break with file and line or symbol:
  1. includes: every #include "..." of the library's sources against the rule;
  2. calls (with BUILD, a configured and built tree): the library's object files' symbol tables (nm); each
     function or variable a file uses from another file must come from a folder the rule allows, and no
     circle of calls may join two files (a circle means two files share one job, or a helper sits in the
     wrong file). The CUDA plugin's files (backend_cuda*.cu, backend_cuda_state.c, cuda_plugin.c: one shared
     object) count one by one like any other: their shared state sits in the bottom file, backend_cuda_state.c.
Exits 1 on any break.

    layers.py SRC [BUILD]"""
import collections
import os
import re
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
BUILD = sys.argv[2] if len(sys.argv) > 2 else None
CORE = {"mpi_ddp/core"}
BACKEND = {"mpi_ddp/backend", "mpi_ddp/backend/cpu", "mpi_ddp/backend/cuda"}
ALLOWED = {
    "mpi_ddp/core": CORE,
    "slurm": CORE | {"slurm"},
    "mpi_ddp/backend": CORE | {"mpi_ddp/backend"},
    "mpi_ddp/backend/cpu": CORE | {"mpi_ddp/backend", "mpi_ddp/backend/cpu"},
    "mpi_ddp/backend/cuda": CORE | {"mpi_ddp/backend", "mpi_ddp/backend/cuda", "tests/cuda_emu"},
    "mpi_ddp/comm": CORE | {"slurm", "mpi_ddp/comm"} | BACKEND,
    "io": CORE | {"slurm", "mpi_ddp/comm", "io"} | BACKEND,
    "mpi_ddp/model": CORE | {"slurm", "mpi_ddp/comm", "io", "mpi_ddp/model"} | BACKEND,
    "mpi_ddp/train": CORE | {"slurm", "mpi_ddp/comm", "io", "mpi_ddp/model", "mpi_ddp/train"} | BACKEND,
    "tests/cuda_emu": {"tests/cuda_emu"},
}
EMU_TU = re.compile(r"^tests/cuda_emu/(backend_cuda\w*)_emu\.cpp$")


def rule_of(folder, name):
    """The folder whose rule a file keeps: an emulator translation unit keeps the CUDA backend's."""
    return "mpi_ddp/backend/cuda" if EMU_TU.match(f"{folder}/{name}") else folder
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
bad, files = [], 0
for folder in ALLOWED:
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
            if tdir not in ALLOWED[rule_of(folder, name)]:
                bad.append(f"{folder}/{name}:{n}: includes {target} ({rule_of(folder, name)} may not use {tdir})")

nobj = ncalls = 0
if BUILD:
    # every object file of the library targets, named by its source path relative to the repository
    objs = {}
    for dp, _, fs in os.walk(os.path.join(BUILD, "CMakeFiles")):
        for f in fs:
            if not f.endswith(".o"):
                continue
            path = os.path.join(dp, f)
            rel = path.split(".dir/", 1)[1][:-2] if ".dir/" in path else None
            m = EMU_TU.match(rel or "")
            if m:
                rel = f"mpi_ddp/backend/cuda/{m.group(1)}.cu"
            if rel and os.path.dirname(rel) in ALLOWED and os.path.dirname(rel) != "tests/cuda_emu":
                objs[rel] = path
    defined, used = {}, {}
    for rel, path in sorted(objs.items()):
        out = subprocess.run(["nm", "-P", path], capture_output=True, text=True, check=True).stdout
        used[rel] = set()
        for line in out.splitlines():
            p = line.split()
            if len(p) < 2:
                continue
            if p[1] == "U":
                used[rel].add(p[0])
            elif p[1] in "TDBRGVW":
                defined.setdefault(p[0], rel)
    nobj = len(objs)
    if nobj < 20:
        bad.append(f"{BUILD}: only {nobj} library object files found: is it built?")
    calls = collections.defaultdict(set)
    why = {}  # (file, file it uses) -> the first symbol, for the report
    for rel, syms in used.items():
        for s in sorted(syms):
            tgt = defined.get(s)
            if tgt is None or tgt == rel:
                continue
            ncalls += 1
            calls[rel].add(tgt)
            why.setdefault((rel, tgt), s)
            src_dir, tgt_dir = os.path.dirname(rel), os.path.dirname(tgt)
            if tgt_dir not in ALLOWED[src_dir]:
                bad.append(f"{rel}: uses {s} of {tgt} ({src_dir} may not use {tgt_dir})")
    # circles of calls between files: strongly connected components of more than one file (Tarjan)
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(calls.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(calls):
        if v not in index:
            visit(v)
    for comp in comps:
        uses = [f"{a} uses {why[a, b]} of {b}" for a in comp for b in sorted(calls[a]) if b in comp]
        bad.append("a circle of calls: " + " <-> ".join(comp) + " (" + "; ".join(uses) + ")")

for b in bad:
    print(b)
print(f"layers: {files} files, {nobj} object files, {ncalls} calls between files, {len(bad)} breaks of the rule")
sys.exit(1 if bad else 0)
