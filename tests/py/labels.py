#!/usr/bin/python3
"""Every CPU shell test that claims results equal bit for bit (its script says "bitwise", or compares two world
sizes' outputs) carries the `determinism` label, so scripts/test.sh reruns it under a second OpenBLAS kernel
family with oneDNN off: a bitwise claim must hold under more than one BLAS. Tests of the emulator (emu), of a
GPU, or of the long tier are exempt (they have their own passes). And every shell test whose script runs Python
($PY, python3) carries the `python` label, so that a machine without Python's packages can leave those tests out
(ctest -LE python). Reads the labels from CTest itself.

    labels.py BUILD"""
import json
import os
import re
import subprocess
import sys

build = sys.argv[1]
out = subprocess.run(["ctest", "-N", "--show-only=json-v1"], cwd=build, capture_output=True, text=True, check=True)
claim = re.compile(r"bitwise|differ(s)? (from|between) np|identical at (1 and|np)", re.I)
uses_py = re.compile(r"\$\{?PY\b|\bpython3?\b")
bad, checked = [], 0
for t in json.loads(out.stdout)["tests"]:
    cmd = t.get("command") or []
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    labels = set(props.get("LABELS", []))
    script = next((c for c in cmd if c.endswith(".sh") and "/tests/sh/" in c), None)
    if script and "python" not in labels:
        code = "\n".join(l for l in open(script, errors="replace").read().splitlines() if not l.lstrip().startswith("#"))
        if uses_py.search(code):
            bad.append(f"{t['name']} ({os.path.basename(script)}): runs Python but lacks the python label")
    if not script or labels & {"emu", "gpu", "long", "kit", "valgrind"} or os.path.basename(script).endswith("_gpu.sh"):
        continue
    text = open(script, errors="replace").read()
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#") or "bitwise" in l.lower())
    if not claim.search(text):
        continue
    checked += 1
    if "determinism" not in labels:
        bad.append(f"{t['name']} ({os.path.relpath(script, os.path.dirname(os.path.dirname(os.path.dirname(script))))}): "
                   f"claims bitwise results but lacks the determinism label")
for b in bad:
    print(b)
print(f"labels: {checked} tests claim bitwise results, {len(bad)} without the determinism label")
sys.exit(1 if bad or checked == 0 else 0)
