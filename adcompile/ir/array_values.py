"""What the NumPy code of array ops calls at run time, beside NumPy itself: a
functional update (``updated``), an add at an index (``added_at``), the product
of the others (``prod_of_others``, ``np.prod``'s derivative) and its derivative
along a vector (``others_tangent``). Plain NumPy: they run
on float arrays, and on arrays of Values where an array tape is expanded into
elements (``api.tracing.trace_expanded``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

Shape = tuple[int, ...]


def basic(index: tuple) -> bool:
    """Whether ``index`` is a basic index (no arrays in it)."""
    return not any(isinstance(item, np.ndarray) for item in index)


def prod_of_others(x: Any, axes: tuple[int, ...] | None) -> np.ndarray:
    """Each element's product of the others along ``axes``, without dividing (exact
    where ``x`` holds zeros): exclusive products from the left and the right."""
    flat = _to_last(np.asarray(x, dtype=_float(x)), axes)
    left = np.cumprod(np.concatenate([np.ones_like(flat[..., :1]), flat[..., :-1]], -1), -1)
    rev = flat[..., ::-1]
    right = np.cumprod(np.concatenate([np.ones_like(rev[..., :1]), rev[..., :-1]], -1), -1)
    return _from_last(left * right[..., ::-1], np.shape(x), axes)


def others_tangent(x: Any, t: Any, axes: tuple[int, ...] | None) -> np.ndarray:
    """The derivative of ``prod_of_others(x, axes)`` along ``t``: each element's sum,
    over the others k, of ``t[k]`` times the product of the rest. Products from
    the left and the right with their derivatives, carried along the axis (no
    division: exact where ``x`` holds zeros). Its matrix is symmetric (prod's
    Hessian), so it is its own transpose: the adjoint of ``prod_of_others`` too."""
    kind = _float(x, t)
    xs = _to_last(np.asarray(x, dtype=kind), axes)
    ts = _to_last(np.broadcast_to(np.asarray(t, dtype=kind), np.shape(x)), axes)
    n = xs.shape[-1]
    left, dleft = np.ones(xs.shape[:-1], dtype=kind), np.zeros(xs.shape[:-1], dtype=kind)
    lefts = []
    for j in range(n):  # (the products of those before j, and their derivatives)
        lefts.append((left, dleft))
        left, dleft = left * xs[..., j], dleft * xs[..., j] + left * ts[..., j]
    out = np.empty(xs.shape, dtype=kind)
    right, dright = np.ones_like(left), np.zeros_like(left)
    for j in range(n - 1, -1, -1):
        left, dleft = lefts[j]
        out[..., j] = dleft * right + left * dright
        right, dright = right * xs[..., j], dright * xs[..., j] + right * ts[..., j]
    return _from_last(out, np.shape(x), axes)


def _to_last(x: np.ndarray, axes: tuple[int, ...] | None) -> np.ndarray:
    """``x`` with the ``axes`` moved last and joined into one."""
    axes = tuple(range(x.ndim)) if axes is None else axes
    rest = [k for k in range(x.ndim) if k not in axes]
    moved = np.transpose(x, rest + list(axes))
    return moved.reshape(moved.shape[: len(rest)] + (-1,))


def _from_last(y: np.ndarray, shape: Shape, axes: tuple[int, ...] | None) -> np.ndarray:
    axes = tuple(range(len(shape))) if axes is None else axes
    rest = [k for k in range(len(shape)) if k not in axes]
    order = rest + list(axes)
    y = y.reshape(tuple(shape[k] for k in order))
    return np.transpose(y, np.argsort(order))


def added_at(g: Any, shape: Shape, index: tuple) -> np.ndarray:
    """An array of ``shape``, zero but for ``g`` added at ``index`` (repeated indices
    add up)."""
    z = np.zeros(shape, dtype=_float(g))
    if basic(index):
        z[index] = g
    else:
        np.add.at(z, index, g)
    return z


def _float(*xs: Any) -> type:
    """float, or object where an operand holds objects (an array of Values: an array
    tape expanded into elements, ``api.tracing.trace_expanded``)."""
    return object if any(np.asarray(x).dtype == object for x in xs) else float


def updated(x: Any, index: tuple, v: Any) -> np.ndarray:
    """``x`` with ``x[index] = v``, as a new array."""
    y = np.array(x, dtype=_float(x, v))
    y[index] = v
    return y
