"""Shared test helpers: independent NumPy references and finite differences."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
from scipy.special import expit

# A failure of the loop IR raises here, instead of falling back to the unrolled path
# with a warning as it does for users.
os.environ.setdefault("ADCOMPILE_STRICT", "1")

# An independent float reference for each op (NumPy / SciPy), where one exists.
NUMPY_REF: dict[str, Callable[..., float]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "neg": np.negative,
    "pow": np.power,
    "abs": np.absolute,
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "arcsin": np.arcsin,
    "arccos": np.arccos,
    "arctan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "sigmoid": expit,
    "softplus": lambda x: np.logaddexp(0.0, x),
    "relu": lambda x: np.maximum(x, 0.0),
    "maximum": np.maximum,
    "minimum": np.minimum,
    "sign": np.sign,
    "step": lambda x: np.heaviside(x, 0.0),
}


def numpy_ref(name: str, *args: float) -> float:
    """The NumPy reference value of op ``name`` (warnings silenced, as a float)."""
    with np.errstate(all="ignore"):
        return float(NUMPY_REF[name](*(np.float64(a) for a in args)))


def central_diff(
    f: Callable[[np.ndarray], float], x: Sequence[float], d: Sequence[float], h: float = 1e-6
) -> float:
    """Central finite difference of ``f`` at ``x`` along direction ``d``."""
    x, d = np.asarray(x, float), np.asarray(d, float)
    return (f(x + h * d) - f(x - h * d)) / (2.0 * h)


def one_sided_agree(
    f: Callable[[np.ndarray], float],
    x: Sequence[float],
    d: Sequence[float],
    h: float = 1e-3,
    rtol: float = 1e-2,
) -> bool:
    """Whether left and right difference quotients agree (no kink or jump near ``x``)."""
    x, d = np.asarray(x, float), np.asarray(d, float)
    f0 = f(x)
    right = (f(x + h * d) - f0) / h
    left = (f0 - f(x - h * d)) / h
    scale = 1.0 + abs(left) + abs(right)
    return bool(np.isfinite([left, right]).all() and abs(right - left) <= rtol * scale)
