#!/usr/bin/python3
"""The Transformer encoder against PyTorch: mpiddp's per-sample losses, summed gradients and two AdamW
steps (from `tx_reference`) against the module of docs/model.md ("transformer") in float64, run on the
zero-padded batch with src_key_padding_mask, on the same parameters. Tolerance: 1e-5 relative to each
tensor's largest magnitude, tensor by tensor."""
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "..", "scripts"))
from ckpt_to_torch import MpiddpTransformer  # noqa: E402  (the bridge's module is the one under test)

torch.set_default_dtype(torch.float64)
f = h5py.File(sys.argv[1], "r")
D, d, L, heads, ff, P, C, positions = (int(v) for v in f["config"][()])
lr, wd, dropout = f["lr_wd_dropout"][()]
assert dropout == 0.0, "the PyTorch comparison runs without dropout (its masks are PyTorch's own)"
model = MpiddpTransformer(D, d, L, heads, ff, P, C, bool(positions), 0.0)
names = [n for n, _ in model.named_parameters()]
assert sorted(names) == sorted(f["params0"].keys()), (names, list(f["params0"].keys()))
model.load_state_dict({n: torch.from_numpy(f["params0"][n][()].astype(np.float64)) for n in names}, strict=True)
model.train()  # no dropout (p = 0); the padded path, not the inference fast path

x = torch.from_numpy(f["x"][()].astype(np.float64))
offsets = f["offsets"][()]
labels = torch.from_numpy(f["labels"][()])
logits = model.forward_packed(x, offsets)
losses = F.cross_entropy(logits, labels, reduction="none")


def close(name, got, want, tol=1e-5):
    want = np.asarray(want, dtype=np.float64)
    err = np.max(np.abs(np.asarray(got, dtype=np.float64) - want)) / max(np.max(np.abs(want)), 1e-12)
    print(f"{name:48s} max relative error {err:.2e}")
    if not err <= tol:
        sys.exit(f"FAIL: {name} differs from PyTorch by {err:.2e} (> {tol})")


close("losses", f["losses"][()], losses.detach().numpy())
losses.sum().backward()
for n, p in model.named_parameters():
    close("grad " + n, f["grad_sum"][n][()], p.grad.numpy())
grads = {n: p.grad.clone() / len(labels) for n, p in model.named_parameters()}
opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
for _ in range(2):
    for n, p in model.named_parameters():
        p.grad = grads[n].clone()
    opt.step()
for n, p in model.named_parameters():
    got, want = f["params2"][n][()], p.detach().numpy()
    if n.endswith("in_proj_bias"):
        # The key bias adds q.b_k to every score of a row, which softmax ignores: mpiddp writes its exact
        # gradient, 0, where PyTorch holds rounding noise (AdamW would scale noise to +-lr steps)
        g = f["grad_sum"][n][()]
        assert np.all(g[d:2 * d] == 0.0), f"{n}: the key bias's gradient is not exactly 0"
        print(f"{'PyTorch key-bias gradient':48s} largest {np.max(np.abs(p.grad.numpy()[d:2 * d])):.1e} (exactly 0 in mpiddp)")
    close("step2 " + n, got, want)
print(f"PASS: {len(names)} tensors: loss, gradients and two AdamW steps match PyTorch (positions={positions})")
