#!/usr/bin/python3
"""The Transformer encoder against PyTorch: mpiddp's per-sample losses, summed gradients and two AdamW
steps (from `tx_reference`) against the module of docs/transformer.md in float64, run on the zero-padded
batch with src_key_padding_mask, on the same parameters. Tolerance: 1e-5 relative to each tensor's largest
magnitude, tensor by tensor (the AdamW steps given the same gradients; from PyTorch's own gradients 1e-4,
see below)."""
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
# Two AdamW steps with the batch-averaged gradient. AdamW divides by sqrt(v) + 1e-8, so on an element whose
# gradient is near 1e-7 the float32 rounding of its sum (a few 1e-9, from terms up to 0.3) moves the step by
# up to ~1e-2 of lr: the steps are compared (1) from mpiddp's own gradients, which the checks above tie to
# PyTorch's, to 1e-5 - the optimizer; (2) from PyTorch's gradients, to 1e-4 - the whole chain.
def adamw_steps(grads):
    m2 = MpiddpTransformer(D, d, L, heads, ff, P, C, bool(positions), 0.0)
    m2.load_state_dict({n: torch.from_numpy(f["params0"][n][()].astype(np.float64)) for n in names}, strict=True)
    opt = torch.optim.AdamW(m2.parameters(), lr=lr, weight_decay=wd)
    for _ in range(2):
        for n, p in m2.named_parameters():
            p.grad = grads[n].clone()
        opt.step()
    return dict(m2.named_parameters())


B = len(labels)
ours = adamw_steps({n: torch.from_numpy(f["grad_sum"][n][()].astype(np.float64)) / B for n in names})
theirs = adamw_steps({n: p.grad.clone() / B for n, p in model.named_parameters()})
for n in names:
    got = f["params2"][n][()]
    if n.endswith("in_proj_bias"):
        # The key bias adds q.b_k to every score of a row, which softmax ignores: mpiddp writes its exact
        # gradient, 0, where PyTorch holds rounding noise (AdamW would scale noise to +-lr steps)
        g = f["grad_sum"][n][()]
        assert np.all(g[d:2 * d] == 0.0), f"{n}: the key bias's gradient is not exactly 0"
        pg = dict(model.named_parameters())[n].grad.numpy()
        print(f"{'PyTorch key-bias gradient':48s} largest {np.max(np.abs(pg[d:2 * d])):.1e} (exactly 0 in mpiddp)")
    close("step2 " + n, got, ours[n].detach().numpy())
    close("step2 from PyTorch's gradients " + n, got, theirs[n].detach().numpy(), tol=1e-4)
print(f"PASS: {len(names)} tensors: loss, gradients and two AdamW steps match PyTorch (positions={positions})")
