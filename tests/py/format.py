#!/usr/bin/python3
"""Every C, CUDA and C++ file of the repository is formatted as .clang-format says (clang-format --dry-run).

    format.py SOURCE_DIR"""
import os
import subprocess
import sys

root = sys.argv[1]
exts = (".c", ".h", ".cu", ".cpp")
try:
    listed = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
except (OSError, subprocess.CalledProcessError):  # a source tree without git: walk the project's folders
    listed = [os.path.relpath(os.path.join(d, f), root)
              for top in ("app", "mpi_ddp", "io", "slurm", "include", "benchmarks", "examples", "tests")
              for d, _, fs in os.walk(os.path.join(root, top)) for f in fs]
files = sorted(f for f in listed if f.endswith(exts) and not f.startswith("tests/fuzz/regressions/"))
if len(files) < 100:
    sys.exit(f"format.py: found only {len(files)} source files under {root}")
bad = []
for i in range(0, len(files), 50):
    r = subprocess.run(["clang-format", "--dry-run", "--Werror", *files[i:i + 50]], cwd=root, capture_output=True, text=True)
    if r.returncode:
        bad += sorted({l.split(":")[0] for l in r.stderr.splitlines() if ": error:" in l})
for f in bad:
    print(f"{f}: not formatted (clang-format -i {f})")
print(f"format: {len(files)} files, {len(bad)} not formatted")
sys.exit(1 if bad else 0)
