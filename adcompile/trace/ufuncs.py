"""NumPy's ufuncs on Values: the op a ufunc names, or NumPy's own object loop.

``array_ufunc`` is ``Value.__array_ufunc__``'s dispatch, read from the op table:
a ufunc named after an op applies that op (``np.floor(v)``, ``np.mod(v, 2.0)``);
``np.isnan``, ``np.isinf`` and ``np.isfinite`` (``PREDICATES``) answer a bool,
through the Value's comparisons (so a guard while tracing, as every comparison);
anything else is the element-wise object loop NumPy runs without the method.

Reads Values only through their public operators (the caller gives the class and
how it applies an op).
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import ops
from .mode import MODE

#: The largest finite float: the guards compare with it, not with inf (a finite constant).
_MAX = sys.float_info.max


def isnan(v: Any) -> bool:
    """``np.isnan(v)``: ``v != v``, a guard while tracing (as every comparison)."""
    return v != v


def isinf(v: Any) -> bool:
    """``np.isinf(v)``: ``abs(v) > MAX`` (False for nan), a guard while tracing."""
    if MODE.get().trace is None:
        return math.isinf(v.data)
    return abs(v) > _MAX


def isfinite(v: Any) -> bool:
    """``np.isfinite(v)``: ``abs(v) <= MAX`` (False for nan), a guard while tracing."""
    if MODE.get().trace is None:
        return math.isfinite(v.data)
    return abs(v) <= _MAX


def nan_to_num(v: Any, nan: float = 0.0, posinf: Any = None, neginf: Any = None) -> Any:
    """``np.nan_to_num(v)``: ``v`` where finite, else the number NumPy puts there
    (nan: ``nan``; inf: ``posinf``, or the largest float), a guard while tracing."""
    if isnan(v):
        return float(nan)
    if isinf(v):
        big = posinf if v > 0 else neginf
        return float(big) if big is not None else math.copysign(_MAX, v.data)
    return v


#: The ufuncs that test a float and answer a bool, on a Value.
PREDICATES: dict[np.ufunc, Callable[[Any], bool]] = {
    np.isnan: isnan,
    np.isinf: isinf,
    np.isfinite: isfinite,
}


def array_ufunc(
    v: Any,
    cls: type,
    apply: Callable[[ops.Op, Sequence[Any]], Any],
    ufunc: np.ufunc,
    method: str,
    inputs: Sequence[Any],
    kwargs: dict,
) -> Any:
    """``ufunc`` on ``inputs``, as NumPy asks the Value ``v`` (of class ``cls``):
    ``apply(op, inputs)`` for a ufunc named after an op, a bool for a predicate (on
    ``v``), else NumPy's object loop."""
    if method == "__call__" and not kwargs:
        test = PREDICATES.get(ufunc)
        if test is not None:
            return test(v)
        op = ops.ufunc_op(ufunc.__name__)
        if (
            op is not None
            and op.arity == len(inputs)
            and ufunc.nout == 1
            and all(isinstance(a, (cls, numbers.Real)) for a in inputs)
        ):
            return apply(op, inputs)
    return object_loop(cls, ufunc, method, inputs, kwargs)


def _boxed(v: Any) -> np.ndarray:
    box = np.empty((), dtype=object)
    box[()] = v
    return box


def object_loop(
    cls: type, ufunc: np.ufunc, method: str, inputs: Sequence[Any], kwargs: dict
) -> Any:
    """What NumPy does with a ufunc on Values that define no ``__array_ufunc__``: each
    ``cls`` a 0-d object array, the element-wise object loop (calling Value methods)."""
    args = [_boxed(a) if isinstance(a, cls) else a for a in inputs]
    return getattr(ufunc, method)(*args, **kwargs)
