"""NumPy's functions and ufuncs on traced arrays: one handler each, in NumPy's terms.

Each handler takes NumPy's own arguments and records the nodes of
``ir.array_ops`` that compute the same thing, in the same order of operations
as NumPy (``np.mean`` is a sum, then one division; ``np.var`` and ``np.std``
follow NumPy's formula; ``np.linalg.norm`` of a vector is ``sqrt(x @ x)``), so
the compiled answer is NumPy's. An argument a handler does not take (``out=``,
``dtype=``, ``where=``, an ``ord`` other than the 2-norm's) raises
``NotArrayLevel`` naming it, and the function is traced element by element
instead. The table is ``trace.arrays.HANDLED``; a ufunc goes through
:func:`ufunc_call`.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import array_index as X
from ..ir import array_ops as A
from ..ir.array_products import einsum, einsum_ok, matmul
from ..ir.ops import OPS, ufunc_op
from . import masked  # noqa: F401  (x[mask] with a traced mask)
from .arrays import HANDLED, NO_RULE, ArrayTrace, ArrayValue, NotArrayLevel, numpy_name

_NOT_GIVEN = object()


def _handles(*funcs: Callable) -> Callable[[Callable], Callable]:
    def register(handler: Callable) -> Callable:
        for f in funcs:
            HANDLED[f] = handler
        return handler

    return register


def _trace(*xs: Any) -> ArrayTrace:
    for x in xs:
        if isinstance(x, ArrayValue):
            return x.trace
        if isinstance(x, (list, tuple)):
            for e in x:
                if isinstance(e, ArrayValue):
                    return e.trace
    raise NotArrayLevel("no traced array among the operands")


def _as(x: Any, trace: ArrayTrace | None = None) -> ArrayValue:
    return (trace or _trace(x)).operand(x)


def _refuse(name: str, **given: Any) -> None:
    """Refuse the arguments of ``name`` given other than their defaults."""
    for arg, value in given.items():
        if arg == "dtype" and value is not None and np.dtype(value) == np.float64:
            continue  # (the arrays' own: float64 or booleans, counted as float64)
        if value is not None and value is not _NOT_GIVEN and value is not np._NoValue:
            raise NotArrayLevel(f"np.{name}(..., {arg}=...) at array level")


def _op(name: str) -> Any:
    return OPS[name]


# ---------------------------------------------------------------- ufuncs

_REDUCE = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min"}


def ufunc_call(
    trace: ArrayTrace, ufunc: np.ufunc, method: str, inputs: Sequence[Any], kwargs: dict
) -> Any:
    """A NumPy ufunc called on traced arrays (``__array_ufunc__``)."""
    name = ufunc.__name__
    if method == "reduce" and name in _REDUCE and set(kwargs) <= {"axis", "keepdims"}:
        return _reduce(_REDUCE[name], inputs[0], kwargs.get("axis", 0), kwargs.get("keepdims"))
    if method == "reduce" and name == "logaddexp" and set(kwargs) <= {"axis", "keepdims"}:
        return _logsumexp(inputs[0], kwargs.get("axis", 0), bool(kwargs.get("keepdims")))
    if method == "accumulate" and name == "add" and set(kwargs) <= {"axis"}:
        return cumsum(inputs[0], kwargs.get("axis", 0))
    if method != "__call__" or kwargs:
        raise NotArrayLevel(f"{numpy_name(ufunc)}.{method} with {sorted(kwargs)} at array level")
    if name in A.COMPARE:
        return trace.record(A.boolean(name), inputs)
    if name == "matmul":
        return trace.record(matmul(), inputs)
    op = ufunc_op(name)
    if op is not None and op.arity == len(inputs):
        return trace.record(op, inputs)
    composite = _COMPOSITE_UFUNCS.get(name)
    if composite is None:
        raise NotArrayLevel(f"{numpy_name(ufunc)}{NO_RULE}")
    return composite(*[trace.operand(x) for x in inputs])


HANDLED[np.ufunc] = ufunc_call


@_handles(np.result_type)
def _result_type(*given: Any) -> np.dtype:
    return np.result_type(*[a.dtype if isinstance(a, ArrayValue) else a for a in given])


_COMPOSITE_UFUNCS: dict[str, Callable] = {"positive": lambda x: x.copy()}  # (others: ops)


# ---------------------------------------------------------------- reductions


def _count(shape: tuple, axes: tuple | None) -> int:
    return math.prod(shape if axes is None else (shape[a] for a in axes))


def _logsumexp(a: Any, axis: Any, keepdims: bool) -> ArrayValue:
    """``np.logaddexp.reduce``: log(sum(exp(x))) along ``axis``, shifted by the largest
    element (kept finite) so that nothing overflows; its gradient is the softmax."""
    x = _as(a)
    top = _reduce("max", x, axis, True)
    top = np.where(np.isfinite(top), top, 0.0)
    total = np.log(_reduce("sum", np.exp(x - top), axis, True)) + top
    return total if keepdims else _reduce("sum", total, axis, False)


def _reduce(kind: str, a: Any, axis: Any, keepdims: Any) -> ArrayValue:
    x = _as(a)
    axes = A.normal_axes(axis, x.ndim)
    return x.trace.record(A.reduce(kind, axes, bool(keepdims)), [x])


@_handles(np.sum)
def sum_(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOT_GIVEN, where=_NOT_GIVEN):  # noqa: ANN001, ANN201
    _refuse("sum", dtype=dtype, out=out, initial=initial, where=where)
    return _reduce("sum", a, axis, keepdims)


@_handles(np.prod)
def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOT_GIVEN, where=_NOT_GIVEN):  # noqa: ANN001, ANN201
    _refuse("prod", dtype=dtype, out=out, initial=initial, where=where)
    return _reduce("prod", a, axis, keepdims)


def _extreme(kind: str) -> Callable:
    def handler(a, axis=None, out=None, keepdims=False, initial=_NOT_GIVEN, where=_NOT_GIVEN):  # noqa: ANN001, ANN202
        _refuse(kind, out=out, initial=initial, where=where)
        return _reduce(kind, a, axis, keepdims)

    return handler


HANDLED[np.max] = HANDLED[np.amax] = _extreme("max")
HANDLED[np.min] = HANDLED[np.amin] = _extreme("min")


@_handles(np.mean)
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=_NOT_GIVEN):  # noqa: ANN001, ANN201
    _refuse("mean", dtype=dtype, out=out, where=where)
    x = _as(a)
    total = _reduce("sum", x, axis, keepdims)
    return total / float(_count(x.shape, A.normal_axes(axis, x.ndim)))


def _var(name: str, a: Any, axis: Any, ddof: Any, keepdims: Any, extra: dict) -> ArrayValue:
    _refuse(name, **extra)
    x = _as(a)
    axes = A.normal_axes(axis, x.ndim)
    n = _count(x.shape, axes)
    centred = x - _reduce("sum", x, axis, True) / float(n)
    return _reduce("sum", centred * centred, axis, keepdims) / float(max(n - ddof, 0))


@_handles(np.var)
def var(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims=False,
    *,
    where=_NOT_GIVEN,
    mean=_NOT_GIVEN,
    correction=_NOT_GIVEN,
):  # noqa: ANN001, ANN201, E501
    return _var(
        "var",
        a,
        axis,
        ddof,
        keepdims,
        dict(dtype=dtype, out=out, where=where, mean=mean, correction=correction),
    )  # noqa: E501


@_handles(np.std)
def std(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims=False,
    *,
    where=_NOT_GIVEN,
    mean=_NOT_GIVEN,
    correction=_NOT_GIVEN,
):  # noqa: ANN001, ANN201, E501
    v = _var(
        "std",
        a,
        axis,
        ddof,
        keepdims,
        dict(dtype=dtype, out=out, where=where, mean=mean, correction=correction),
    )  # noqa: E501
    return _op("sqrt")(v)


@_handles(np.cumsum)
def cumsum(a, axis=None, dtype=None, out=None):  # noqa: ANN001, ANN201
    _refuse("cumsum", dtype=dtype, out=out)
    x = _as(a)
    if axis is None:
        x, axis = reshape(x, (x.size,)), 0
    (ax,) = A.normal_axes(axis, x.ndim)
    return x.trace.record(X.cumsum(ax), [x])


@_handles(np.diff)
def diff(a, n=1, axis=-1, prepend=_NOT_GIVEN, append=_NOT_GIVEN):  # noqa: ANN001, ANN201
    _refuse("diff", prepend=prepend, append=append)
    x = _as(a)
    (ax,) = A.normal_axes(axis, x.ndim)
    for _ in range(n):
        head = (slice(None),) * ax
        x = x[head + (slice(1, None),)] - x[head + (slice(None, -1),)]
    return x


@_handles(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):  # noqa: ANN001, ANN201, A002
    v = _as(x)
    vector = isinstance(axis, numbers.Integral) or (axis is None and v.ndim == 1)
    if vector and isinstance(ord, numbers.Real) and ord not in (2, 0):  # (p-norms)
        a = np.abs(v)
        if ord in (math.inf, -math.inf):
            return _reduce("max" if ord > 0 else "min", a, axis, keepdims)
        return _reduce("sum", a if ord == 1 else a**ord, axis, keepdims) ** (1.0 / ord)
    if ord not in (None, 2, "fro") or (ord == 2 and (axis is None and v.ndim != 1)):
        raise NotArrayLevel(f"np.linalg.norm(..., ord={ord!r}) at array level")
    if axis is None:
        flat = reshape(v, (v.size,))
        out = _op("sqrt")(flat.trace.record(matmul(), [flat, flat]))
        return reshape(out, (1,) * v.ndim) if keepdims else out
    return _op("sqrt")(_reduce("sum", v * v, axis, keepdims))


# ---------------------------------------------------------------- products


@_handles(np.dot)
def dot(a, b, out=None):  # noqa: ANN001, ANN201
    _refuse("dot", out=out)
    t = _trace(a, b)
    x, y = t.operand(a), t.operand(b)
    if x.ndim == 0 or y.ndim == 0:
        return x * y
    if x.ndim > 2 or y.ndim > 2:
        raise NotArrayLevel("np.dot of arrays of more than two dimensions")
    return t.record(matmul(), [x, y])


@_handles(np.inner)
def inner(a, b):  # noqa: ANN001, ANN201
    t = _trace(a, b)
    x, y = t.operand(a), t.operand(b)
    if x.ndim == 0 or y.ndim == 0:
        return x * y
    if x.ndim == 1 and y.ndim == 1:
        return t.record(matmul(), [x, y])
    return tensordot(x, y, ([x.ndim - 1], [y.ndim - 1]))  # (over the last axes)


@_handles(np.outer)
def outer(a, b, out=None):  # noqa: ANN001, ANN201
    _refuse("outer", out=out)
    t = _trace(a, b)
    x, y = t.operand(a), t.operand(b)
    return reshape(x, (x.size, 1)) * reshape(y, (1, y.size))


@_handles(np.einsum)
def einsum_(spec, *operands, **kwargs):  # noqa: ANN001, ANN201
    if kwargs or len(operands) != 2 or not isinstance(spec, str) or not einsum_ok(spec):
        raise NotArrayLevel(f"np.einsum({spec!r}, ...) at array level (two operands, '->')")
    t = _trace(*operands)
    return t.record(einsum(spec), [t.operand(o) for o in operands])


@_handles(np.tensordot)
def tensordot(a, b, axes=2):  # noqa: ANN001, ANN201
    t = _trace(a, b)
    x, y = t.operand(a), t.operand(b)
    if isinstance(axes, (numbers.Integral, np.integer)):
        ax = list(range(x.ndim - int(axes), x.ndim)), list(range(int(axes)))
    else:
        ax = [list(np.atleast_1d(axes[0])), list(np.atleast_1d(axes[1]))]
    ax = [[int(i) % x.ndim for i in ax[0]], [int(i) % y.ndim for i in ax[1]]]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    la = [next(letters) for _ in range(x.ndim)]
    lb = [next(letters) for _ in range(y.ndim)]
    for i, j in zip(*ax):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in ax[0]] + [
        c for k, c in enumerate(lb) if k not in ax[1]
    ]
    spec = f"{''.join(la)},{''.join(lb)}->{''.join(out)}"
    if not einsum_ok(spec):
        raise NotArrayLevel(f"np.tensordot(..., axes={axes!r}) at array level")
    return t.record(einsum(spec), [x, y])


# ---------------------------------------------------------------- diagonals


@_handles(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):  # noqa: ANN001, ANN201
    x, k = _as(a), operator.index(offset)
    if x.ndim != 2:
        raise NotArrayLevel("np.diagonal of other than a matrix")
    (first,), (second,) = A.normal_axes(axis1, 2), A.normal_axes(axis2, 2)
    if first == second:
        raise ValueError("axis1 and axis2 cannot be the same")
    if first == 1:  # (the diagonal of the transpose: offset k counts along axis2 = 0)
        x = transpose(x)
    r, c = max(-k, 0), max(k, 0)
    i = np.arange(max(0, min(x.shape[0] - r, x.shape[1] - c)))
    return x[i + r, i + c]


@_handles(np.trace)
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):  # noqa: ANN001, ANN201
    _refuse("trace", dtype=dtype, out=out)
    return _reduce("sum", diagonal(a, offset, axis1, axis2), None, False)


@_handles(np.diag)
def diag(v, k=0):  # noqa: ANN001, ANN201
    """A matrix's diagonal, or a matrix of zeros with ``v`` written on its ``k``-th
    diagonal (no product: ``0 * inf`` would be nan)."""
    x, k = _as(v), operator.index(k)
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    i, m = np.arange(x.shape[0]), x.shape[0] + abs(k)
    out = x.trace.operand(np.zeros((m, m)))
    out[i + max(-k, 0), i + max(k, 0)] = x
    return out


# ---------------------------------------------------------------- selections


@_handles(np.where)
def where(condition, *xy):  # noqa: ANN001, ANN201
    if len(xy) != 2:
        raise NotArrayLevel("np.where with one argument (its length is data)")
    t = _trace(condition, *xy)
    return t.record(A.where(), [condition, *xy])


@_handles(np.clip)
def clip(a, a_min=_NOT_GIVEN, a_max=_NOT_GIVEN, out=None, **kwargs):  # noqa: ANN001, ANN201
    _refuse("clip", out=out, **{k: v for k, v in kwargs.items() if k not in ("min", "max")})
    lo = kwargs.get("min", a_min)
    hi = kwargs.get("max", a_max)
    x = _as(a, _trace(a, lo, hi))
    if lo is not None and lo is not _NOT_GIVEN:
        x = _op("maximum")(x, lo)
    if hi is not None and hi is not _NOT_GIVEN:
        x = _op("minimum")(x, hi)
    return x


@_handles(np.round, np.around)
def round_(a, decimals=0, out=None):  # noqa: ANN001, ANN201
    _refuse("round", out=out)
    x = _as(a)
    if decimals == 0:
        return _op("rint")(x)
    if decimals > 0:  # NumPy's way: scaled, rounded to an integer, scaled back
        return _op("rint")(x * 10.0**decimals) / 10.0**decimals
    return _op("rint")(x / 10.0**-decimals) * 10.0**-decimals


# ---------------------------------------------------------------- shapes


def _resolve(shape: Any, size: int) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (numbers.Integral, np.integer)) else tuple(shape)
    shape = tuple(int(n) for n in shape)
    if shape.count(-1) == 1:
        known = math.prod(n for n in shape if n != -1)
        shape = tuple(size // known if n == -1 else n for n in shape)
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
    return shape


@_handles(np.reshape)
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):  # noqa: ANN001, ANN201
    if order != "C":
        raise NotArrayLevel(f"np.reshape(..., order={order!r}) at array level")
    x = _as(a)
    new = _resolve(shape if shape is not None else newshape, x.size)
    return x.viewed_as(
        A.reshape(new),
        lambda p: np.reshape(p, new),
        lambda base, v: base.trace.record(A.reshape(base.shape), [v]),
    )


@_handles(np.ravel)
def ravel(a, order="C"):  # noqa: ANN001, ANN201
    return reshape(a, (-1,), order)


@_handles(np.transpose)
def transpose(a, axes=None):  # noqa: ANN001, ANN201
    x = _as(a)
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(int(i) % x.ndim for i in axes)
    undo = tuple(int(k) for k in np.argsort(axes))
    return x.viewed_as(
        A.transpose(axes),
        lambda p: np.transpose(p, axes),
        lambda base, v: base.trace.record(A.transpose(undo), [v]),
    )


@_handles(np.swapaxes)
def swapaxes(a, axis1, axis2):  # noqa: ANN001, ANN201
    x = _as(a)
    order = list(range(x.ndim))
    i, j = int(axis1) % x.ndim, int(axis2) % x.ndim
    order[i], order[j] = order[j], order[i]
    return transpose(x, order)


@_handles(np.expand_dims)
def expand_dims(a, axis):  # noqa: ANN001, ANN201
    x = _as(a)
    axes = (axis,) if isinstance(axis, (numbers.Integral, np.integer)) else tuple(axis)
    ndim = x.ndim + len(axes)
    new = A.normal_axes(axes, ndim) or ()
    it = iter(x.shape)
    return reshape(x, tuple(1 if k in new else next(it) for k in range(ndim)))


@_handles(np.squeeze)
def squeeze(a, axis=None):  # noqa: ANN001, ANN201
    x = _as(a)
    axes = A.normal_axes(axis, x.ndim)
    if axes is not None and any(x.shape[k] != 1 for k in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    drop = [k for k, n in enumerate(x.shape) if n == 1 and (axes is None or k in axes)]
    return reshape(x, tuple(n for k, n in enumerate(x.shape) if k not in drop))


@_handles(np.broadcast_to)
def broadcast_to(array, shape, subok=False):  # noqa: ANN001, ANN201
    x = _as(array)
    shape = (shape,) if isinstance(shape, (numbers.Integral, np.integer)) else tuple(shape)
    shape = tuple(int(n) for n in shape)
    return x.viewed_as(A.broadcast_to(shape), lambda p: np.broadcast_to(p, shape), None)


@_handles(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):  # noqa: ANN001, ANN201
    _refuse("concatenate", out=out, dtype=dtype)
    t = _trace(arrays)
    xs = [t.operand(a) for a in arrays]
    if axis is None:
        xs, axis = [reshape(x, (x.size,)) for x in xs], 0
    (ax,) = A.normal_axes(axis, xs[0].ndim)
    return t.record(X.concatenate(ax, len(xs)), xs)


def _split(ary: Any, sections: Any, axis: int, equal: bool) -> list:
    x = _as(ary)
    (ax,) = A.normal_axes(axis, x.ndim)
    n = x.shape[ax]
    if isinstance(sections, (numbers.Integral, np.integer)):
        k = int(sections)
        if k <= 0:
            raise ValueError("number sections must be larger than 0.")
        if equal and n % k:
            raise ValueError("array split does not result in an equal division")
        each, extra = divmod(n, k)
        bounds = np.cumsum([0] + [each + 1] * extra + [each] * (k - extra)).tolist()
    else:
        bounds = [0, *(int(i) for i in sections), n]
    lead = (slice(None),) * ax
    return [x[(*lead, slice(a, b))] for a, b in zip(bounds, bounds[1:])]


@_handles(np.split)
def split(ary, indices_or_sections, axis=0):  # noqa: ANN001, ANN201
    return _split(ary, indices_or_sections, axis, True)


@_handles(np.array_split)
def array_split(ary, indices_or_sections, axis=0):  # noqa: ANN001, ANN201
    return _split(ary, indices_or_sections, axis, False)


@_handles(np.stack)
def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):  # noqa: ANN001, ANN201
    _refuse("stack", out=out, dtype=dtype)
    t = _trace(arrays)
    xs = [t.operand(a) for a in arrays]
    return concatenate([expand_dims(x, axis) for x in xs], axis % (xs[0].ndim + 1))


@_handles(np.hstack)
def hstack(tup, dtype=None, casting="same_kind"):  # noqa: ANN001, ANN201
    t = _trace(tup)
    xs = [t.operand(a) for a in tup]
    return concatenate(xs, 0 if xs[0].ndim == 1 else 1, dtype=dtype)


@_handles(np.vstack)
def vstack(tup, dtype=None, casting="same_kind"):  # noqa: ANN001, ANN201
    t = _trace(tup)
    xs = [t.operand(a) for a in tup]
    return concatenate([reshape(x, (1, x.size)) if x.ndim == 1 else x for x in xs], 0, dtype=dtype)


# ---------------------------------------------------------------- new arrays, facts


def _like(fill: Callable[[tuple], np.ndarray]) -> Callable:
    def handler(a, dtype=None, order="K", subok=True, shape=None, **kw):  # noqa: ANN001, ANN202
        x = _as(a)
        return x.trace.const(fill(x.shape if shape is None else tuple(np.atleast_1d(shape))))

    return handler


HANDLED[np.zeros_like] = HANDLED[np.empty_like] = _like(np.zeros)
HANDLED[np.ones_like] = _like(np.ones)


@_handles(np.full_like)
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw):  # noqa: ANN001, ANN201
    x = _as(a)
    if isinstance(fill_value, ArrayValue):
        return x.trace.record(A.broadcast_to(x.shape), [fill_value]) * 1.0
    return x.trace.const(np.full(x.shape, float(fill_value)))


@_handles(np.copy)
def copy(a, order="K", subok=False):  # noqa: ANN001, ANN201
    return _as(a).copy()


@_handles(np.shape)
def shape(a):  # noqa: ANN001, ANN201
    return _as(a).shape


@_handles(np.ndim)
def ndim(a):  # noqa: ANN001, ANN201
    return _as(a).ndim


@_handles(np.size)
def size(a, axis=None):  # noqa: ANN001, ANN201
    x = _as(a)
    return x.size if axis is None else x.shape[axis]
