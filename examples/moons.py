"""Two moons with micrograd's MLP, trained with compiled gradients (what `adcompile demo` does).

    python examples/moons.py [--points 100] [--epochs 100] [--out moons.png]

The model, the loss and the training loop are micrograd's; the one change is
``ad.compile_loss``: the loss is traced once with the parameters as inputs,
and every later step runs compiled code that writes the gradients into
``p.grad``.
"""

import argparse
import random

import numpy as np

import adcompile as ad
from adcompile.datasets import make_moons
from adcompile.nn import MLP, HingeLoss

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--points", type=int, default=100)
ap.add_argument("--epochs", type=int, default=100)
ap.add_argument("--out", default="moons.png", help="PNG of the decision boundary ('' for none)")
args = ap.parse_args()

X, y = make_moons(args.points, noise=0.1, seed=1)
random.seed(1)
model = MLP(2, [16, 16, 1])
params = model.parameters()
hinge = HingeLoss()


def loss_fn(X, y):
    """Max-margin loss plus L2, as in micrograd's demo notebook."""
    return hinge([model(x) for x in X], y) + 1e-4 * sum(p * p for p in params)


step = ad.compile_loss(loss_fn, params)  # was: loss = loss_fn(X, y) every step
for k in range(args.epochs):
    loss = step(X, y)
    model.zero_grad()
    loss.backward()  # adds the compiled gradients into p.grad
    lr = 1.0 - 0.9 * k / args.epochs
    for p in params:
        p.data -= lr * p.grad
    if k % 10 == 0 or k == args.epochs - 1:
        scores = [model(x).data for x in X.tolist()]
        acc = np.mean((np.array(scores) > 0) == (y > 0))
        print(f"step {k:3d}  loss {loss.data:.4f}  accuracy {acc:.0%}")

if args.out:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs, ys = np.meshgrid(np.linspace(-2, 3, 60), np.linspace(-1.5, 2, 60))
    grid = np.column_stack([xs.ravel(), ys.ravel()]).tolist()
    z = np.array([model(p).data > 0 for p in grid]).reshape(xs.shape)
    plt.contourf(xs, ys, z, alpha=0.4, cmap="Spectral")
    plt.scatter(X[:, 0], X[:, 1], c=y, cmap="Spectral", edgecolors="k")
    plt.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")
