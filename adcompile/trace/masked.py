"""``x[mask]`` at array level, with ``mask`` a traced boolean array: data, not a
shape.

NumPy's ``x[mask]`` has as many elements as ``mask`` holds True: a length only
the data knows. What programs do with it rarely needs that length: they reduce it
(``np.sum(x[x > 0])``), compute element-wise on it, or write it back under the
same mask (``z[m] = x[m]``, ``z[m] += y[m]``). :class:`Masked` keeps ``x`` and
``mask`` apart, of the full shape, and gives those as selects:

- element-wise NumPy ufuncs and operators on selections under one mask (and
  numbers) are a selection of the result on the whole arrays;
- ``sum``, ``mean``, ``prod``, ``max`` and ``min`` over all of it are reductions
  of ``np.where(mask, x, identity)`` (``mean`` divides by ``np.sum(mask)``; over
  no element, ``max`` is -inf and ``min`` inf where NumPy raises);
- ``z[mask] = x[mask]`` is ``z = np.where(mask, x, z)`` (``ArrayValue.__setitem__``).

Anything that needs its length or its elements in order (``len``, ``.shape``,
indexing, another mask, a full array as an operand) raises ``NotArrayLevel``,
and the function is traced element by element.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .arrays import SELECTION, ArrayValue, NotArrayLevel

#: The reductions a selection takes, and what the elements left out hold.
_REDUCTIONS: dict[Callable, float] = {
    np.sum: 0.0,
    np.prod: 1.0,
    np.max: -np.inf,
    np.amax: -np.inf,
    np.min: np.inf,
    np.amin: np.inf,
}


#: The axes that are all of a selection (it is 1-D).
_ALL = (None, 0, -1, (0,), (-1,))


def _refuse(what: str) -> NotArrayLevel:
    return NotArrayLevel(f"{what} of x[mask] with a traced mask (its length is data)")


class Masked:
    """``data[mask]``: the elements of ``data`` where ``mask`` (same shape) holds."""

    __array_priority__ = 2000.0
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, data: ArrayValue, mask: ArrayValue) -> None:
        if data.shape != mask.shape:
            raise _refuse("a mask of another shape than the array: selecting rows")
        self.data, self.mask = data, mask

    def _same(self, other: Any) -> Any:
        """``other`` as an operand on the whole arrays: a selection's data (under the
        same mask) or a number."""
        if isinstance(other, Masked):
            if other.mask.slot != self.mask.slot:
                raise _refuse("two masks")
            return other.data
        if isinstance(other, ArrayValue | np.ndarray) and np.ndim(other) > 0:
            raise _refuse("a whole array meeting x[mask]")
        return other

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method == "reduce" and kwargs.get("axis", 0) in _ALL and len(inputs) == 1:
            function = {"add": np.sum, "multiply": np.prod, "maximum": np.max}
            function["minimum"] = np.min
            if ufunc.__name__ in function:
                return self._reduce(function[ufunc.__name__])
        if method != "__call__" or kwargs:
            raise _refuse(f"np.{ufunc.__name__}.{method}")
        return Masked(ufunc(*[self._same(x) for x in inputs]), self.mask)

    def __array_function__(self, func: Callable, types: Any, args: Any, kwargs: Any) -> Any:
        if func in _REDUCTIONS and args[0] is self and len(args) == 1:
            if kwargs.get("axis") in _ALL and not kwargs.get("keepdims"):
                return self._reduce(func)  # (axis 0 of a selection is all of it)
        if func is np.mean and args[0] is self and len(args) == 1 and not kwargs:
            return self._reduce(np.sum) / np.sum(self.mask)
        raise _refuse(f"np.{getattr(func, '__name__', func)}")

    def _reduce(self, func: Callable) -> Any:
        return func(np.where(self.mask, self.data, _REDUCTIONS[func]))

    def sum(self) -> Any:
        return self._reduce(np.sum)

    def prod(self) -> Any:
        return self._reduce(np.prod)

    def max(self) -> Any:
        return self._reduce(np.max)

    def min(self) -> Any:
        return self._reduce(np.min)

    def mean(self) -> Any:
        return np.mean(self)

    def __len__(self) -> int:
        raise _refuse("len()")

    @property
    def shape(self) -> tuple:
        raise _refuse("the shape")

    @property
    def size(self) -> int:
        raise _refuse("the size")

    def __getitem__(self, index: Any) -> Any:
        raise _refuse("indexing")

    def __iter__(self) -> Any:
        raise _refuse("iteration")

    def __bool__(self) -> bool:
        raise _refuse("bool()")


def _operator(ufunc: np.ufunc, reflected: bool = False) -> Callable:
    if reflected:
        return lambda self, other: ufunc(other, self)
    return lambda self, other: ufunc(self, other)


for _name, _ufunc in {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "truediv": np.true_divide,
    "pow": np.power,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}.items():
    setattr(Masked, f"__{_name}__", _operator(_ufunc))
    if _name in ("add", "sub", "mul", "truediv", "pow"):
        setattr(Masked, f"__r{_name}__", _operator(_ufunc, reflected=True))
Masked.__neg__ = lambda self: np.negative(self)  # type: ignore[method-assign]
Masked.__abs__ = lambda self: np.absolute(self)  # type: ignore[method-assign]
SELECTION[:] = [Masked]
