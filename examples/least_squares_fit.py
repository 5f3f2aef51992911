"""Fit y = a * exp(-b * t) + c with SciPy's least_squares and the Jacobian of ``ad.jacobian``.

    python examples/least_squares_fit.py [--points 200] [--seed 0]

``residuals(p, t, y)`` returns an array (one residual per data point);
``ad.jacobian(residuals)`` is its Jacobian with respect to ``p``, shape
(points, 3), compiled, with SciPy's ``jac(p, *args)`` signature.
"""

import argparse

import numpy as np
from scipy.optimize import least_squares

import adcompile as ad

TRUE = np.array([2.5, 1.3, 0.5])  # a, b, c
NOISE = 0.05


def residuals(p, t, y):
    a, b, c = p[0], p[1], p[2]
    return a * np.exp(-b * t) + c - y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200, help="data points (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the noise (default 0)")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    t = np.linspace(0.0, 4.0, args.points)
    y = TRUE[0] * np.exp(-TRUE[1] * t) + TRUE[2] + NOISE * rng.normal(size=t.size)

    jac = ad.jacobian(residuals)
    res = least_squares(residuals, np.array([1.0, 1.0, 0.0]), jac=jac, args=(t, y))
    print(
        f"least_squares: {res.nfev} residual calls, {res.njev} Jacobian calls, status {res.status}"
    )
    print("fitted a, b, c = " + " ".join(f"{v:.4f}" for v in res.x))
    print("true   a, b, c = " + " ".join(f"{v:.4f}" for v in TRUE))
    print(f"rms residual {np.sqrt(np.mean(res.fun**2)):.4f} (noise {NOISE})")
    print(f"Jacobian shape {jac(res.x, t, y).shape}, traced {jac.traces} time(s)")


if __name__ == "__main__":
    main()
