#!/usr/bin/python3
"""The reference comparison: mpiddp's loss, gradients and two AdamW steps (from `testtool refdump`)
against PyTorch (float64) running the reference model of docs/model.md on the same parameters and packed batch.
Tolerance: 1e-5 relative to each tensor's largest magnitude."""
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


class Ref(torch.nn.Module):
    def __init__(self, d, h, c):
        super().__init__()
        self.l1, self.l2, self.l3 = torch.nn.Linear(d, h), torch.nn.Linear(h, h), torch.nn.Linear(h, c)

    def forward(self, x, offsets):
        h = F.gelu(self.l2(F.gelu(self.l1(x), approximate="tanh")), approximate="tanh")
        seg = torch.repeat_interleave(torch.arange(len(offsets) - 1), torch.diff(offsets))
        pooled = torch.zeros(len(offsets) - 1, h.shape[1]).index_add_(0, seg, h) / torch.diff(offsets)[:, None]
        return self.l3(pooled)


def load_flat(model, flat):
    k = 0
    with torch.no_grad():
        for p in model.parameters():  # l1.weight, l1.bias, l2.weight, ... : mpiddp's flat layout
            n = p.numel()
            p.copy_(torch.from_numpy(flat[k:k + n].astype(np.float64)).view_as(p))
            k += n
    assert k == len(flat)


def flat_of(tensors):
    return np.concatenate([t.detach().numpy().ravel() for t in tensors])


def close(name, got, want, tol=1e-5):
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-12)
    print(f"{name:10s} max relative error {err:.2e}")
    if not err <= tol:
        sys.exit(f"FAIL: {name} differs from PyTorch by {err:.2e} (> {tol})")


f = h5py.File(sys.argv[1], "r")
d, h, c = (int(v) for v in f["dims"][()])
lr, wd = f["lr_wd"][()]
x = torch.from_numpy(f["x"][()].astype(np.float64))
offsets = torch.from_numpy(f["offsets"][()])
labels = torch.from_numpy(f["labels"][()])
model = Ref(d, h, c)
load_flat(model, f["params0"][()])
losses = F.cross_entropy(model(x, offsets), labels, reduction="none")
close("losses", f["losses"][()], losses.detach().numpy())
losses.sum().backward()
close("grad_sum", f["grad_sum"][()], flat_of(p.grad for p in model.parameters()))
# two AdamW steps with the gradient averaged over the batch (as the trainer does for the global batch)
grads = [p.grad.clone() / len(labels) for p in model.parameters()]
opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
for _ in range(2):
    for p, g in zip(model.parameters(), grads):
        p.grad = g.clone()
    opt.step()
close("params2", f["params2"][()], flat_of(model.parameters()))
print("PASS: loss, gradients and AdamW match PyTorch")
