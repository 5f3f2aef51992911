"""Hand-written gradients with NumPy array operations (vectorised, no autodiff).

The chain and the random tape are sequential scalar programs: they have no
array form, so NumPy is "not applicable" there (skipped with that reason;
the plain-Python references in ``workloads.py`` play the scalar role).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import workloads as W
from . import Prepared, System

_SEQUENTIAL = (
    "not applicable: a sequential scalar program has no NumPy array form "
    "(the plain-Python reference in workloads.py is the scalar version)"
)


class NumpyHand(System):
    name = "numpy"
    description = "hand-written vectorised NumPy gradient"
    modules = ("numpy",)
    not_applicable = {"chain": _SEQUENTIAL, "compile": _SEQUENTIAL}

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        def call() -> Any:
            a, b = x[:-1], x[1:]
            d = b - a * a
            e = 1.0 - a
            f = np.sum(100.0 * d * d + e * e)
            g = np.zeros_like(x)
            g[:-1] = -400.0 * a * d - 2.0 * e
            g[1:] += 200.0 * d
            return f, g

        return Prepared(call, lambda out: (float(out[0]), out[1]))

    def mlp(self, params: list, X: np.ndarray, y: np.ndarray) -> Prepared:
        ps = [np.array(p, dtype=np.float64) for p in params]
        lr, wd = W.MLP_LR, W.MLP_WEIGHT_DECAY
        n = X.shape[0]

        def call() -> Any:
            W1, b1, W2, b2, W3, b3 = ps
            z1 = X @ W1.T + b1
            h1 = np.maximum(z1, 0.0)
            z2 = h1 @ W2.T + b2
            h2 = np.maximum(z2, 0.0)
            s = h2 @ W3[0] + b3[0]
            m = 1.0 - y * s
            loss = np.sum(np.maximum(m, 0.0)) / n + wd * sum(np.sum(p * p) for p in ps)
            ds = np.where(m > 0.0, -y / n, 0.0)
            gW3 = (ds @ h2)[None, :]
            gb3 = np.array([ds.sum()])
            dz2 = np.outer(ds, W3[0]) * (z2 > 0.0)
            gW2 = dz2.T @ h1
            gb2 = dz2.sum(axis=0)
            dz1 = (dz2 @ W2) * (z1 > 0.0)
            gW1 = dz1.T @ X
            gb1 = dz1.sum(axis=0)
            gs = [gW1, gb1, gW2, gb2, gW3, gb3]
            for p, g in zip(ps, gs):
                g += 2.0 * wd * p
                p -= lr * g
            return loss, gs

        return Prepared(
            call,
            lambda out: (float(out[0]), W.mlp_flatten(out[1])),
            params=lambda: W.mlp_flatten(ps),
        )
