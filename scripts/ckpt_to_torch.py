#!/usr/bin/python3
"""ckpt_to_torch.py — the bridge to PyTorch: loads an mpiddp checkpoint into the torch.nn.Module of its model
(docs/model.md: the MLP, or the Transformer encoder built from the checkpoint's recorded hyperparameters;
state_dict names and layouts are the checkpoint's /params, loaded with strict=True), and optionally evaluates
it on a dataset.

  /usr/bin/python3 scripts/ckpt_to_torch.py CKPT.h5 [--data DIR] [--save model.pt]

As a module:  from ckpt_to_torch import load_model;  model = load_model("last.h5")
"""
import argparse
import os
import sys

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

    forward_packed = forward  # the same call as MpiddpTransformer.forward_packed(x, offsets)


class MpiddpTransformer(torch.nn.Module):
    """Pre-LayerNorm Transformer encoder over each sample's rows (exact gelu, LayerNorm eps 1e-5), learned
    positions unless positions=False, mean pooling of the final norm over the sample's rows, linear head."""

    def __init__(self, dim, d, layers, heads, ff, max_positions, classes, positions=True, dropout=0.0):
        super().__init__()
        self.inp = torch.nn.Linear(dim, d)
        self.pos = torch.nn.Embedding(max_positions, d) if positions else None
        layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout, activation="gelu", batch_first=True,
                                                 norm_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, norm=torch.nn.LayerNorm(d), enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x, pad):
        """x: [batch, T, dim] zero-padded samples; pad: [batch, T] bool, True at padding rows"""
        h = self.inp(x)
        if self.pos is not None:
            h = h + self.pos(torch.arange(x.shape[1]))[None]
        h = self.enc(h, src_key_padding_mask=pad)
        keep = (~pad).to(h.dtype)[..., None]
        return self.head((h * keep).sum(1) / keep.sum(1))

    def forward_packed(self, x, offsets):
        """x: [rows, dim] packed rows; offsets: [n+1] sample boundaries (numpy or torch)"""
        offsets = [int(v) for v in offsets]
        n, T = len(offsets) - 1, max(offsets[i + 1] - offsets[i] for i in range(len(offsets) - 1))
        xp = torch.zeros(n, T, x.shape[1], dtype=x.dtype)
        pad = torch.ones(n, T, dtype=torch.bool)
        for i in range(n):
            k = offsets[i + 1] - offsets[i]
            xp[i, :k] = x[offsets[i]:offsets[i + 1]]
            pad[i, :k] = False
        return self(xp, pad)


def _attr(f, name, default=None):
    v = f.attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else v


def load_model(path):
    if not os.path.isfile(path):  # h5py's own error is a traceback of its C layer
        why = "is a directory" if os.path.isdir(path) else "No such file or directory"
        raise FileNotFoundError(f"{path}: cannot open checkpoint: {why}")
    try:
        f = h5py.File(path, "r")
    except OSError as e:  # not HDF5, truncated, unreadable: name the file, as mpiddp does
        raise OSError(f"{path}: cannot open checkpoint: {e}") from None
    with f:
        if _attr(f, "format") != "mpiddp-checkpoint":
            raise ValueError(f"{path}: not an mpiddp checkpoint")
        try:
            state = {k: torch.from_numpy(f["params"][k][()]) for k in f["params"]}
        except (OSError, KeyError) as e:  # no /params, a truncated tensor: h5py's error names no file
            raise ValueError(f"{path}: /params: {e.args[0] if e.args else e}") from None
        kind = _attr(f, "model", "mlp")
        hp = {k: _attr(f, "model_" + k) for k in ("layers", "heads", "ff", "max_positions", "positions", "dropout")}
    if kind == "transformer":
        d, dim = state["inp.weight"].shape
        model = MpiddpTransformer(dim, d, int(hp["layers"]), int(hp["heads"]), int(hp["ff"]), int(hp["max_positions"]),
                                  state["head.weight"].shape[0], bool(int(hp["positions"])), float(hp["dropout"]))
    elif kind in ("mlp", "reference"):  # "reference": the MLP, in checkpoints of earlier versions
        hidden, dim = state["l1.weight"].shape
        model = MpiddpReference(dim, hidden, state["l3.weight"].shape[0])
    else:
        raise ValueError(f"{path}: unknown model kind {kind!r}")
    model.load_state_dict(state, strict=True)
    return model.eval()


def evaluate(model, data, batch=512):
    if not os.path.isdir(data):
        why = "not a directory" if os.path.exists(data) else "No such file or directory"
        raise FileNotFoundError(f"{data}: dataset directory: {why}")
    shards = sorted(p for p in os.listdir(data) if p.endswith(".h5") and not p.startswith("."))
    if not shards:
        raise ValueError(f"{data}: dataset directory: no *.h5 shard files")
    first, last = (model.inp, model.head) if isinstance(model, MpiddpTransformer) else (model.l1, model.l3)
    loss_sum, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for s in shards:
            p = os.path.join(data, s)
            try:
                with h5py.File(p, "r") as f:
                    dim, classes = f["features"].shape[-1], int(f.attrs["num_classes"])
                    if (dim, classes) != (first.in_features, last.out_features):  # as mpiddp eval refuses it
                        raise ValueError(f"{data} has D={dim} and {classes} classes ({s}) but the checkpoint was "
                                         f"trained on D={first.in_features}, {last.out_features} classes")
                    feats, off, lab = f["features"][()], f["offsets"][()], f["labels"][()].astype(np.int64)
            except (OSError, KeyError) as e:  # h5py's errors name no file: say which shard (mpiddp inspect DIR checks it)
                raise ValueError(f"{p}: {e.args[0] if e.args else e}") from None
            for a in range(0, len(lab), batch):
                b = min(a + batch, len(lab))
                x = torch.from_numpy(feats[off[a]:off[b]])
                o = torch.from_numpy(off[a:b + 1] - off[a])
                y = torch.from_numpy(lab[a:b])
                logits = model.forward_packed(x, o) if isinstance(model, MpiddpTransformer) else model(x, o)
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
    try:
        m = load_model(a.ckpt)
    except (OSError, ValueError, KeyError) as e:  # one line, as mpiddp's own errors, not a traceback
        sys.exit(f"ckpt_to_torch.py: error: {e}")
    if a.save:
        sd = m.state_dict()
        torch.save(sd, a.save)
        kind = "transformer" if isinstance(m, MpiddpTransformer) else "mlp"
        print(f"wrote {a.save} (torch.save): the state_dict of the {kind} in {a.ckpt}, {len(sd)} tensors, "
              f"{sum(t.numel() for t in sd.values())} parameters")
    if a.data:
        try:
            loss, acc = evaluate(m, a.data)
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"ckpt_to_torch.py: error: {e}")
        print(f"val/loss={loss:.9g} val/acc={acc:.9g}")
    elif not a.save:
        print(m)
