#!/usr/bin/python3
"""ckpt_to_torch.py — the bridge to PyTorch: loads an mpiddp checkpoint into a torch.nn.Module of the reference model (docs/model.md)
(state_dict names and layouts are the checkpoint's /params), and optionally evaluates it on a dataset.

  /usr/bin/python3 scripts/ckpt_to_torch.py CKPT.h5 [--data DIR] [--save model.pt]

As a module:  from ckpt_to_torch import load_model;  model = load_model("last.h5")
"""
import argparse
import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F


class MpiddpReference(torch.nn.Module):
    """Per-row 2-layer gelu(tanh) encoder, mean pooling over each sample's rows, linear head."""

    def __init__(self, dim, hidden, classes):
        super().__init__()
        self.l1 = torch.nn.Linear(dim, hidden)
        self.l2 = torch.nn.Linear(hidden, hidden)
        self.l3 = torch.nn.Linear(hidden, classes)

    def forward(self, x, offsets):
        """x: [rows, dim] packed rows of a batch; offsets: [n+1] int64 sample boundaries"""
        h = F.gelu(self.l2(F.gelu(self.l1(x), approximate="tanh")), approximate="tanh")
        counts = torch.diff(offsets)
        seg = torch.repeat_interleave(torch.arange(len(counts)), counts)
        pooled = torch.zeros(len(counts), h.shape[1], dtype=h.dtype).index_add_(0, seg, h) / counts[:, None].to(h.dtype)
        return self.l3(pooled)


def load_model(path):
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") not in (b"mpiddp-checkpoint", "mpiddp-checkpoint"):
            raise ValueError(f"{path}: not an mpiddp checkpoint")
        state = {k: torch.from_numpy(f["params"][k][()]) for k in f["params"]}
    hidden, dim = state["l1.weight"].shape
    model = MpiddpReference(dim, hidden, state["l3.weight"].shape[0])
    model.load_state_dict(state)
    return model.eval()


def evaluate(model, data, batch=512):
    shards = sorted(p for p in os.listdir(data) if p.endswith(".h5") and not p.startswith("."))
    loss_sum, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for s in shards:
            with h5py.File(os.path.join(data, s), "r") as f:
                feats, off, lab = f["features"][()], f["offsets"][()], f["labels"][()].astype(np.int64)
            for a in range(0, len(lab), batch):
                b = min(a + batch, len(lab))
                x = torch.from_numpy(feats[off[a]:off[b]])
                o = torch.from_numpy(off[a:b + 1] - off[a])
                y = torch.from_numpy(lab[a:b])
                logits = model(x, o)
                loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
                correct += (logits.argmax(1) == y).sum().item()
                n += b - a
    return loss_sum / n, correct / n


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("--data", help="evaluate on this dataset directory")
    ap.add_argument("--save", help="write the module's state_dict with torch.save")
    a = ap.parse_args()
    m = load_model(a.ckpt)
    if a.save:
        torch.save(m.state_dict(), a.save)
    if a.data:
        loss, acc = evaluate(m, a.data)
        print(f"val/loss={loss:.9g} val/acc={acc:.9g}")
    elif not a.save:
        print(m)
