#!/usr/bin/python3
"""The MPIDDP_* knobs are declared once, in mpi_ddp/core/settings.h (DDP_KNOBS), and docs/cli.md documents exactly
those, with the same defaults; no product source reads an MPIDDP_* variable except through that list; the host
CUDA emulator's MPIDDP_EMU_* variables are those cli.md lists; and every MPIDDP_* name the product's sources and
docs mention is a knob, an emulator variable or a build option.

    knobs.py SOURCE_DIR"""
import glob
import os
import re
import sys

root = sys.argv[1]
bad = []


def read(p):
    return open(os.path.join(root, p), errors="replace").read()


# the declared list: I(NAME, default, "meaning") and S(NAME, "meaning")
hdr = read("mpi_ddp/core/settings.h")
block = hdr[hdr.index("#define DDP_KNOBS"):]
block = block[:block.index("\n\n")]
declared = {}
for kind, name, rest in re.findall(r'\b([IS])\((\w+),\s*(.*?)\)\s*\\?\n', block + "\n"):
    if kind == "I":
        dflt, meaning = re.match(r'(-?\d+),\s*"(.*)"$', rest).groups()
    else:
        dflt, meaning = "unset", re.match(r'"(.*)"$', rest).group(1)
    if not meaning.strip():
        bad.append(f"settings.h: MPIDDP_{name} has no meaning")
    declared["MPIDDP_" + name] = dflt
if len(declared) < 20:
    sys.exit(f"knobs.py: read only {len(declared)} knobs from settings.h; the parser is out of date")

# cli.md's tables: rows of `MPIDDP_X` | default | ...
doc = read("docs/cli.md")
documented, emu_doc = {}, set()
for line in doc.splitlines():
    m = re.match(r"\|\s*`(MPIDDP_\w+)(?:=\w+)?`\s*\|\s*([^|]*?)\s*\|", line)
    if not m:
        continue
    name, dflt = m.groups()
    if name.startswith("MPIDDP_EMU_"):
        emu_doc.add(name)
        continue
    if name in documented:
        bad.append(f"docs/cli.md: {name} has two rows")
    documented[name] = dflt
for name, dflt in sorted(declared.items()):
    if name not in documented:
        bad.append(f"docs/cli.md: {name} (settings.h, default {dflt}) is not documented")
    elif documented[name] != dflt:
        bad.append(f"docs/cli.md: {name} default {documented[name]!r}, settings.h says {dflt!r}")
for name in sorted(set(documented) - set(declared)):
    bad.append(f"docs/cli.md: {name} is documented but not declared in settings.h")

# product sources read knobs only through the list
product = [p for d in ("mpi_ddp", "io", "app", "slurm", "include", "benchmarks", "examples")
           for p in glob.glob(os.path.join(root, d, "**", "*.[ch]*"), recursive=True)]
for p in product:
    if p.endswith("settings.c"):
        continue
    for n, line in enumerate(open(p, errors="replace"), 1):
        if re.search(r'getenv\("MPIDDP_|ddp_env_int\(', line):
            bad.append(f"{os.path.relpath(p, root)}:{n}: reads an MPIDDP_ variable outside settings.h's list")

# the emulator's variables
emu_read = set()
for p in glob.glob(os.path.join(root, "tests", "cuda_emu", "*.[ch]*")):
    emu_read |= set(re.findall(r'"(MPIDDP_EMU_\w+)"', open(p, errors="replace").read()))
for name in sorted(emu_read - emu_doc):
    bad.append(f"docs/cli.md: emulator variable {name} is not documented")
for name in sorted(emu_doc - emu_read):
    bad.append(f"docs/cli.md: emulator variable {name} is documented but the emulator does not read it")

# every MPIDDP_* name mentioned is known
cmake = "".join(read(p) for p in ("CMakeLists.txt", "tests/CMakeLists.txt")) + \
    "".join(open(p).read() for p in glob.glob(os.path.join(root, "cmake", "*.cmake")))
build = set(re.findall(r"\b(MPIDDP_[A-Z0-9_]+)\b", cmake))
build |= set(re.findall(r"#define (MPIDDP_\w+)", read("include/mpiddp.h")))  # the version macros
for p in glob.glob(os.path.join(root, "slurm", "*.sh")) + glob.glob(os.path.join(root, "scripts", "*.sh")):
    build |= set(re.findall(r"\b(MPIDDP_[A-Z0-9_]+)\b", open(p).read()))  # the scripts' own variables
texts = product + glob.glob(os.path.join(root, "docs", "*.md")) + [os.path.join(root, "README.md")]
for p in texts:
    for n, line in enumerate(open(p, errors="replace"), 1):
        for name in re.findall(r"\b(MPIDDP_[A-Z0-9_]*[A-Z0-9])\b", line):
            if name in declared or name in emu_doc or name in build or name.endswith("_H"):
                continue
            bad.append(f"{os.path.relpath(p, root)}:{n}: {name} is neither a knob, an emulator variable nor a build option")

for b in bad:
    print(b)
print(f"knobs: {len(declared)} declared, {len(documented)} documented, {len(emu_read)} emulator variables, "
      f"{len(product)} product files read: {'FAIL' if bad else 'ok'}")
sys.exit(1 if bad else 0)
