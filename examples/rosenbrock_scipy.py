"""Minimise the Rosenbrock function with SciPy's BFGS and adcompile's compiled gradient.

    python examples/rosenbrock_scipy.py [--n 10]

``ad.value_and_grad`` returns ``(value, gradient)`` in one compiled call,
which is what ``scipy.optimize.minimize(..., jac=True)`` wants.
"""

import argparse

import numpy as np
from scipy.optimize import minimize

import adcompile as ad


def rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--n", type=int, default=10, help="dimension (default 10)")
n = ap.parse_args().n

value_and_grad = ad.value_and_grad(rosen)
x0 = np.full(n, -1.0)
res = minimize(value_and_grad, x0, jac=True, method="BFGS", options={"gtol": 1e-10})
print(f"BFGS on rosenbrock, n = {n}: {res.nit} iterations, {res.nfev} compiled calls")
print(f"minimum {res.fun:.3e} at x = {np.array2string(res.x, precision=6)}")
print(f"|x - 1| = {np.max(np.abs(res.x - 1)):.2e} (the minimum is at x = 1)")
print(f"traced {value_and_grad.traces} time(s); generated code: value_and_grad.source")
