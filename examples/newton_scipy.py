"""Newton's method on Rosenbrock in 1,000 dimensions: SciPy's trust-ncg with ``ad.hvp``.

    python examples/newton_scipy.py [--n 1000]

``ad.value_and_grad(f)`` gives SciPy ``(value, gradient)`` (``jac=True``), and
``ad.hvp(f)`` has SciPy's ``hessp(x, p, *args)`` signature: the Hessian at
``x`` times ``p``, compiled, without forming the Hessian.
"""

import argparse
import time

import numpy as np
from scipy.optimize import minimize

import adcompile as ad


def rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="dimension (default 1000)")
    n = ap.parse_args().n

    x0 = 0.9 * np.cos(np.arange(n))  # benchmarks/README.md's starting point
    t0 = time.perf_counter()
    res = minimize(
        ad.value_and_grad(rosen),
        x0,
        jac=True,
        hessp=ad.hvp(rosen),
        method="trust-ncg",
        options={"gtol": 1e-8},
    )
    seconds = time.perf_counter() - t0
    print(f"trust-ncg on rosenbrock, n = {n}: {res.nit} iterations, {res.nhev} products H p")
    dist = np.max(np.abs(res.x - 1))
    print(f"minimum {res.fun:.3e}, |x - 1| = {dist:.2e} (the minimum is at x = 1)")
    print(f"{seconds:.2f} s, first calls (trace and compile) included")


if __name__ == "__main__":
    main()
