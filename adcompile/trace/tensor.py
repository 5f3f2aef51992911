"""Arrays of Values: NumPy object arrays with the element-wise methods of a Value.

``ad.tensor(x)`` turns numbers into an array of leaf Values. Everything NumPy
does on object arrays then works (broadcasting, ``@``, ``sum``, ``mean``,
ufuncs), and the result keeps the methods ``.tanh()``, ``.relu()`` ... of
every op in the op table, including ops a user defines later.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir import ops
from ..ir.array_ops import normal_axes
from .mode import in_library
from .traced import TracedFloat, frozen_data
from .ufuncs import PREDICATES, nan_to_num
from .value import Value, constant

# Arithmetic (and @) stays with NumPy's object loop, which calls the Value's
# own operators (the same ops) without a detour through Python.
_NUMPYS = frozenset(
    {np.add, np.subtract, np.multiply, np.divide, np.true_divide, np.power, np.negative}
    | {np.matmul}
)
_ELEMENTWISE: dict[ops.Op, np.ufunc] = {}  # op -> an object ufunc applying it
_ND = np.ndarray
_FLOAT64 = np.dtype(np.float64)


#: NumPy functions that order an array: nan has a place of its own there (``_ORDERS``).
_ORDERS = frozenset(
    {np.sort, np.argsort, np.argmax, np.argmin, np.median, np.percentile, np.quantile}
    | {np.partition, np.argpartition, np.nanmax, np.nanmin}
)


def _values(x: Any) -> list[Value]:
    """The Values of an array (or a list) of them."""
    return [v for v in np.asarray(x, dtype=object).flat if isinstance(v, Value)]


def _numbers_as_values(out: np.ndarray) -> np.ndarray:
    """``out`` (an object array NumPy made) with the ints its zeros are (``np.diag``,
    ``np.pad`` of an object array) as constant Values, which divide as floats in
    NumPy do: Python's ``1.0 / 0`` raises where NumPy's ``1.0 / 0.0`` is inf."""
    at = [k for k, v in enumerate(out.flat) if type(v) is int]
    if not at:
        return out
    out = out.copy()
    for k in at:
        out.flat[k] = constant(out.flat[k])
    return out


class ValueArray(np.ndarray):
    """An object array of Values with a Value's element-wise methods."""

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        for a in inputs:  # (NumPy would take a traced .data as the float it holds now)
            if type(a) is TracedFloat:
                frozen_data(a)
        test = PREDICATES.get(ufunc) if method == "__call__" and not kwargs else None
        if test is not None:  # np.isnan ... on each element: a bool array (NumPy has no
            x = np.asarray(inputs[0], dtype=object)  # object loop for them)
            flags = [test(v) if isinstance(v, Value) else bool(ufunc(v)) for v in x.flat]
            return np.array(flags, dtype=np.bool_).reshape(x.shape)
        if ufunc.__name__ == "clip" and method == "__call__" and len(inputs) == 3 and not kwargs:
            x, low, high = inputs  # (NumPy's object loop compares: nan lost, and guards)
            return np.minimum(np.maximum(x, low), high)
        if method == "reduce" and ufunc in _FOLDED and len(inputs) == 1:
            folded = _fold(ufunc, inputs[0], kwargs)
            if folded is not NotImplemented:
                return folded
        if method == "__call__" and not kwargs:
            # A ufunc named after an op (np.maximum, np.exp ...) applies that op
            # to each element: np.maximum(z, 0) records ``maximum``, a primitive
            # with its own derivative, instead of comparing with ``>=`` and
            # giving back either the Value or the 0, so every element has the
            # same structure.
            if ufunc not in _NUMPYS:
                op = ops.ufunc_op(ufunc.__name__)
                if op is not None and op.arity == ufunc.nin and ufunc.nout == 1:
                    return _view(_object_ufunc(op)(*inputs))
            if len(inputs) == 2:  # the common case, kept short: + * @ cost little more
                a, b = inputs
                r = ufunc(
                    a.view(_ND) if isinstance(a, ValueArray) else a,
                    b.view(_ND) if isinstance(b, ValueArray) else b,
                )
            else:
                r = ufunc(*[x.view(_ND) if isinstance(x, ValueArray) else x for x in inputs])
        else:
            # Everything else is NumPy's on plain object arrays, as without this hook.
            args = [x.view(_ND) if isinstance(x, ValueArray) else x for x in inputs]
            if "out" in kwargs:
                out = kwargs["out"]
                kwargs["out"] = tuple(x.view(_ND) if isinstance(x, ValueArray) else x for x in out)
                getattr(ufunc, method)(*args, **kwargs)
                return out[0] if len(out) == 1 else out
            r = getattr(ufunc, method)(*args, **kwargs)
        if type(r) is _ND:
            return r.view(ValueArray) if r.ndim else r[()]
        return tuple(map(_view, r)) if type(r) is tuple else r

    def __getattr__(self, name: str) -> Any:
        # Looked up in the op table on use, so user-defined ops are methods too.
        op = ops.OPS.get(name)
        if op is None or name.startswith("_"):
            raise AttributeError(f"'ValueArray' object has no attribute {name!r}")
        return lambda *args: _wrap(ops.apply(op, self, *args))

    def tobytes(self, order: str = "C") -> bytes:
        """Refused: the bytes of an array of Values are those of its pointers."""
        raise TypeError(
            "tobytes() of an array adcompile traces (an argument, or an array read from "
            "outside the function): it holds Values, whose bytes are not the numbers. "
            "Compute with the array itself, or make the bytes outside the function and "
            "pass what you read from them in as an argument"
        )

    tostring = tofile = tobytes

    def __array_wrap__(self, arr: Any, context: Any = None, return_scalar: bool = False) -> Any:
        # a full reduction (``.sum()``, ``.mean()``) gives the Value itself, as NumPy does
        if arr.ndim == 0:
            return arr[()]
        return super().__array_wrap__(arr, context)  # (NumPy 1.x takes two arguments)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(ops.OPS))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func is np.result_type and not in_library(1):  # (float64, as dtype says there)
            return np.result_type(*[_FLOAT64 if type(a) is ValueArray else a for a in args])
        if func is np.nan_to_num:  # (NumPy's returns an object array as it is)
            x, rest = args[0], args[1:]
            kwargs = {k: v for k, v in kwargs.items() if k != "copy"}
            rest = rest[1:]  # (copy: a new array either way)
            made = [
                nan_to_num(v, *rest, **kwargs)
                if isinstance(v, Value)
                else np.nan_to_num(v, True, *rest, **kwargs)
                for v in np.asarray(x, dtype=object).flat
            ]
            return np.array(made + [None], dtype=object)[:-1].reshape(x.shape).view(ValueArray)
        if func in _ORDERS and any(math.isnan(v.data) for v in _values(args[0])):
            raise TypeError(
                f"np.{func.__name__} of a traced array holding nan: NumPy puts nan in an "
                "order of its own, not by the comparisons a trace records. Replace the nan "
                "first (np.where(np.isnan(x), fill, x)), or leave the function uncompiled"
            )
        out = super().__array_function__(func, types, args, kwargs)
        if type(out) is _ND and out.dtype == object and out.ndim:  # (np.where ...: its
            return _numbers_as_values(out).view(ValueArray)  # ufuncs are the ops)
        return out

    @property
    def dtype(self) -> np.dtype:  # type: ignore[override]
        """An array of Values: ``float64`` to the user's code, as the floats they stand for
        (so ``if x.dtype == np.float64:`` takes plain Python's branch while tracing, and
        the eager run of check mode takes it too); ``object`` to adcompile's and
        NumPy's code, which handle the Values."""
        real = _ND.dtype.__get__(self)  # type: ignore[attr-defined]
        return _FLOAT64 if real.kind == "O" and not in_library(1) else real

    @property
    def data(self) -> np.ndarray:  # type: ignore[override]
        """The values as a float array of the same shape."""
        return data(self)

    @data.setter
    def data(self, new: Any) -> None:
        for v, x in zip(self.flat, np.broadcast_to(np.asarray(new, float), self.shape).flat):
            v.data = float(x)

    @property
    def grad(self) -> np.ndarray:
        """The gradients as a float array of the same shape."""
        return grad_of(self)

    @grad.setter
    def grad(self, new: Any) -> None:
        for v, x in zip(self.flat, np.broadcast_to(np.asarray(new, float), self.shape).flat):
            v.grad = float(x)

    def backward(self, gradient: float = 1.0) -> None:
        """Backpropagate from a single-element array (as ``Value.backward``)."""
        if self.size != 1:
            raise ValueError(
                f"backward() needs a scalar, but this array has shape {self.shape}; "
                "reduce it first, e.g. arr.sum().backward() or loss_fn(arr, target).backward()"
            )
        v = self.reshape(-1)[0]
        if not isinstance(v, Value):
            raise TypeError(f"backward() needs a Value, this array holds {type(v).__name__!r}")
        v.backward(gradient)


def _object_ufunc(op: ops.Op) -> np.ufunc:
    """The object ufunc applying ``op`` (``_elementwise``), made once per op."""
    f = _ELEMENTWISE.get(op)
    if f is None:
        f = _ELEMENTWISE[op] = _elementwise(op)
    return f


def _elementwise(op: ops.Op) -> np.ufunc:
    """An object ufunc applying ``op`` element by element (floats evaluate, Values record)."""
    apply = ops.apply
    return np.frompyfunc(lambda *xs: apply(op, *xs), op.arity, 1)


#: Reductions made a chain of their op: np.max of Values is ``maximum`` after
#: ``maximum``, which propagates nan as NumPy's does, where NumPy's object loop
#: compares (a guard on each comparison, and nan lost).
_FOLDED = frozenset({np.maximum, np.minimum})


def _fold(ufunc: np.ufunc, x: Any, kwargs: dict) -> Any:
    """``ufunc.reduce(x, **kwargs)`` as a chain of its op; NotImplemented for the
    arguments it does not take (``out``, ``where``, ``dtype``)."""
    kw = dict(kwargs)
    axis, keepdims = kw.pop("axis", 0), kw.pop("keepdims", False)
    initial = kw.pop("initial", None)
    given = initial is not None and type(initial).__name__ != "_NoValueType"
    extra = {"initial": initial} if given else {}
    if kw.pop("where", True) is not True or any(v is not None for v in kw.values()):
        return NotImplemented
    op = ops.ufunc_op(ufunc.__name__)
    f = _object_ufunc(op)
    a = np.asarray(x, dtype=object).view(_ND)
    axes = tuple(range(a.ndim)) if axis is None else normal_axes(axis, a.ndim)
    rest = [k for k in range(a.ndim) if k not in axes]
    moved = np.transpose(a, rest + list(axes)).reshape([a.shape[k] for k in rest] + [-1])
    with np.errstate(invalid="ignore"):  # (nan in, nan out, as NumPy's, unsaid)
        out = f.reduce(moved, axis=-1, **extra)
    if keepdims:
        out = np.reshape(out, [1 if k in axes else n for k, n in enumerate(a.shape)])
    return _view(np.asarray(out, dtype=object)) if np.ndim(out) else out


def _view(x: Any) -> Any:
    """A ufunc's result as NumPy's wrapping of a ValueArray gives it."""
    if isinstance(x, np.ndarray):
        return x[()] if x.ndim == 0 else x.view(ValueArray)
    return x


def _wrap(x: Any) -> Any:
    """``x`` as a ValueArray when it is an array; anything else as it is."""
    if isinstance(x, np.ndarray):
        return x[()] if x.ndim == 0 else np.asarray(x, dtype=object).view(ValueArray)
    return x


def asarray(x: Any) -> ValueArray:
    """``x`` (a list, an array, a Value or a number) as a ValueArray, Values kept as they are."""
    if isinstance(x, ValueArray):
        return x
    return np.asarray(x, dtype=object).view(ValueArray)


def tensor(x: Any, requires_grad: bool = True) -> ValueArray:
    """An array of leaf Values with the values of ``x`` (Values in ``x`` are kept)."""
    a = np.asarray(x, dtype=object)
    flat = np.empty(a.size, dtype=object)
    flat[:] = [
        e if isinstance(e, Value) else Value(float(e), requires_grad=requires_grad)
        for e in a.reshape(-1)
    ]
    return flat.reshape(a.shape).view(ValueArray)


def _floats(x: Any, attr: str) -> Any:
    a = np.asarray(x, dtype=object)
    out = np.array(
        [
            getattr(e, attr) if isinstance(e, Value) else (float(e) if attr == "data" else 0.0)
            for e in a.reshape(-1)
        ],
        dtype=float,
    ).reshape(a.shape)
    return out if isinstance(x, (np.ndarray, list, tuple)) else float(out)


def data(arr: Any) -> np.ndarray:
    """The ``.data`` of every Value in ``arr`` as a float array of the same shape."""
    return _floats(arr, "data")


def grad_of(arr: Any) -> np.ndarray:
    """The ``.grad`` of every Value in ``arr`` as a float array (0 for plain numbers)."""
    return _floats(arr, "grad")
