#!/usr/bin/python3
"""compare_ckpt.py A.h5 B.h5 TOL: every /params tensor (and /optim state when both have it) of two
checkpoints agree to TOL relative to the tensor's largest magnitude (TOL 0 = bitwise)."""
import sys

import h5py
import numpy as np

a, b, tol = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), float(sys.argv[3])
worst = 0.0
groups = ["params"] + (["optim/exp_avg", "optim/exp_avg_sq"] if "optim" in a and "optim" in b else [])
for g in groups:
    assert sorted(a[g].keys()) == sorted(b[g].keys()), (g, list(a[g].keys()), list(b[g].keys()))
    for k in a[g]:
        x, y = a[g][k][()], b[g][k][()]
        assert x.shape == y.shape, (g, k, x.shape, y.shape)
        if tol == 0:
            if not np.array_equal(x, y):
                sys.exit(f"{g}/{k}: not bitwise equal (max diff {np.max(np.abs(x - y)):.3e})")
            continue
        err = float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-12))
        worst = max(worst, err)
        if err > tol:
            sys.exit(f"{g}/{k}: relative difference {err:.3e} > {tol}")
print(f"checkpoints agree (worst relative difference {worst:.2e})")
