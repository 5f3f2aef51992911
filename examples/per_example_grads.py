"""Per-example gradients of a logistic-regression loss with ``ad.vmap(ad.grad(loss))``.

    python examples/per_example_grads.py [--rows 20000]

``in_axes=(None, 0, 0)`` shares the weights ``w`` and maps over the rows of
``X`` and ``y``: one gradient per example, stacked along axis 0, computed by
one compiled parallel loop (no Python per row). A Python loop over
``ad.grad(loss)`` gives the same numbers, one call per row.
"""

import argparse
import time

import numpy as np

import adcompile as ad


def loss(w, x, y):
    return ad.log(1 + ad.exp(-y * (x @ w)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000, help="examples (default 20000)")
    n = ap.parse_args().rows

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 5))
    y = np.sign(X[:, 0] + 0.5 * rng.normal(size=n))
    w = np.array([1.0, -0.5, 0.25, 0.0, 2.0])

    per_example = ad.vmap(ad.grad(loss), in_axes=(None, 0, 0))
    per_example(w, X[:2], y[:2])  # first call: trace and compile
    t0 = time.perf_counter()
    G = per_example(w, X, y)
    t_vmap = time.perf_counter() - t0

    g = ad.grad(loss)
    k = min(n, 2000)
    t0 = time.perf_counter()
    loop = np.array([g(w, X[i], y[i]) for i in range(k)])
    t_loop = (time.perf_counter() - t0) * n / k
    print(f"per-example gradients: shape {G.shape}")
    print(f"largest difference from a Python loop of ad.grad: {np.max(np.abs(G[:k] - loop)):.1e}")
    print(f"vmap {t_vmap * 1e3:.1f} ms; the Python loop would take about {t_loop * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
