"""Two moons the PyTorch way: Sequential, Linear, BCEWithLogitsLoss, Adam; eager, then compiled.

    python examples/moons_pytorch_style.py [--points 100] [--epochs 60] [--eager]

Without ``--eager`` the same loss is compiled once with ``ad.compile_loss``
and every step runs compiled code; the loop does not change.
"""

import argparse
import random

import numpy as np

import adcompile as ad
from adcompile import nn, optim
from adcompile.datasets import make_moons

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--points", type=int, default=100)
ap.add_argument("--epochs", type=int, default=60)
ap.add_argument("--eager", action="store_true", help="build a Value graph every step")
args = ap.parse_args()

X, y = make_moons(args.points, noise=0.1, seed=1)
targets = (y > 0).astype(float)  # BCE wants labels in {0, 1}
random.seed(0)
model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
criterion = nn.BCEWithLogitsLoss()
opt = optim.Adam(model.parameters(), lr=0.05)


def loss_fn(X, t):
    logits = [model(x)[0] for x in X]
    return criterion(logits, t)


step = None if args.eager else ad.compile_loss(loss_fn, model.parameters())
for epoch in range(args.epochs):
    loss = loss_fn(X.tolist(), targets.tolist()) if step is None else step(X, targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if epoch % 10 == 0 or epoch == args.epochs - 1:
        logits = np.array([model(x)[0].data for x in X.tolist()])
        acc = np.mean((logits > 0) == (targets > 0))
        print(f"epoch {epoch:3d}  loss {loss.item():.4f}  accuracy {acc:.0%}")
n_floats = sum(np.size(v) for v in model.state_dict().values())
print(f"state_dict: {len(model.state_dict())} tensors, {n_floats} floats")
