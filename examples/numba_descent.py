"""Gradient descent written entirely in Numba, calling adcompile's gradient.

``vg.numba(x0)`` returns the compiled value-and-gradient as a Numba function,
``fn(x, out) -> ok``: ``out[0]`` is the value, ``out[1:]`` the gradient. The
whole optimisation loop below runs inside ``@numba.njit``, with no trip
through Python per step.

    python examples/numba_descent.py
"""

from __future__ import annotations

import numba
import numpy as np

import adcompile as ad


def rosenbrock(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def main(n: int = 50, steps: int = 20000, lr: float = 1e-3) -> tuple[float, np.ndarray]:
    """Run ``steps`` steps of gradient descent from -0.5 everywhere; (value, x)."""
    x = np.full(n, -0.5)
    value_and_grad = ad.value_and_grad(rosenbrock).numba(x)

    @numba.njit
    def descend(x, steps, lr):
        out = np.empty(x.size + 1)
        for _ in range(steps):
            if not value_and_grad(x, out):  # a guard failed: not for this function
                return np.nan
            x -= lr * out[1:]
        return out[0]

    value = descend(x, steps, lr)
    return value, x


if __name__ == "__main__":
    value, x = main()
    print(f"after 20,000 steps in @numba.njit: f = {value:.6g}, x[:4] = {np.round(x[:4], 4)}")
