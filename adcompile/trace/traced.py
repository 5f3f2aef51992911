"""``TracedFloat``: the ``.data`` of a Value made while tracing.

A float whose comparisons and truthiness, made in the user's code, are kept as
guards on its Value (a branch on ``x.data > 0`` is guarded as one on ``x > 0``
is), through the Value's own comparison operators; ``np.isnan(x.data)`` ... are
guarded as on the Value. Used as a plain number it would freeze the traced value
into compiled code: ``frozen_data`` refuses that. A TracedFloat never holds its
Value (that would be a cycle): a leaf's holds a weak reference to it, a result's
its op and operands and the function that makes the Value again. ``as_float``:
what ``Value(x)`` takes (refusing a traced ``.data`` too).
"""

from __future__ import annotations

import numbers
import operator
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.ops import Op
from .mode import COMPARE_FLOATS, MODE, in_library
from .numeric import Numeric
from .text import traced_text
from .ufuncs import PREDICATES

#: The Values' comparison operators, by symbol (a guard while tracing).
COMPARE_VALUES = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


class TracedFloat(float):
    """The ``.data`` of a Value made while tracing: a float whose comparisons and
    truthiness, made in the user's code, are kept as guards on its Value (a
    branch on ``x.data > 0`` is guarded as one on ``x > 0`` is)."""

    # A leaf's: owner a weak reference to it (the trace holds it), op None; a
    # result's: its op and operands, and as owner the function that makes it again
    # from them (a reference to the result itself would be a cycle, and the result
    # may be gone by the time its ``.data`` is compared).
    __slots__ = ("owner", "op", "args")

    def value(self) -> Any:
        """The Value this is the ``.data`` of (made again for a result), or None."""
        op = self.op
        if op is None:
            return self.owner()
        return self.owner(op, self.args, float(self))

    def _guard(self, cmp: str, other: Any) -> Any:
        if MODE.get().trace is None or in_library(2):
            return COMPARE_FLOATS[cmp](float(self), other)
        if type(other) is TracedFloat:
            other = other.value()
        elif not isinstance(other, (Numeric, numbers.Real)):  # (a Value, or a number)
            return COMPARE_FLOATS[cmp](float(self), other)
        owner = self.value()
        if owner is None or other is None:
            return COMPARE_FLOATS[cmp](float(self), float(other))
        return COMPARE_VALUES[cmp](owner, other)

    def __lt__(self, other: Any) -> Any:
        return self._guard("<", other)

    def __le__(self, other: Any) -> Any:
        return self._guard("<=", other)

    def __gt__(self, other: Any) -> Any:
        return self._guard(">", other)

    def __ge__(self, other: Any) -> Any:
        return self._guard(">=", other)

    def __eq__(self, other: Any) -> Any:
        return self._guard("==", other)

    def __ne__(self, other: Any) -> Any:
        return self._guard("!=", other)

    def __hash__(self) -> int:
        """The float's hash, but refused in the user's code while tracing: a set or dict
        lookup that misses (``x.data in {1.0}``) compares nothing, so no guard would
        keep its "absent" from being compiled in."""
        if MODE.get().trace is not None and not in_library(1):
            raise TypeError(
                "hash() of a traced Value's .data (a set or dict key, or `in` on a set or "
                "dict): a lookup that misses compares nothing, so its answer could not be "
                "guarded. Compare with == instead (`x.data == 1.0 or x.data == 2.0`, or "
                "`x.data in (1.0, 2.0)`: a tuple compares with ==, guarded)"
            )
        return float.__hash__(self)

    def __bool__(self) -> bool:
        return bool(self._guard("!=", 0.0))

    def __float__(self) -> float:
        """The float, but refused in the user's code while tracing: ``float(x.data)``
        would be a number of the trace, compiled in where plain Python reads the
        value of each call."""
        if MODE.get().trace is not None and not in_library(1):
            frozen_data(self)
        return float.__float__(self)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """``np.isnan(x.data)``, ``np.isinf``, ``np.isfinite`` in the user's code while
        tracing: guarded as on the Value; any other ufunc is refused there (its result
        would be a number of the trace), and sees a plain float elsewhere."""
        test = PREDICATES.get(ufunc) if method == "__call__" and not kwargs else None
        if MODE.get().trace is not None and not in_library(1):
            if test is None:  # (np.exp(x.data): a number of the trace, compiled in)
                frozen_data(self)
            owner = self.value()
            if owner is not None:
                return test(owner)
        args = [float.__float__(a) if type(a) is TracedFloat else a for a in inputs]
        return getattr(ufunc, method)(*args, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """``np.isclose(x.data, 2.0)`` in the user's code while tracing: refused (its
        result would be a number of the trace); elsewhere, NumPy's on the float."""
        if MODE.get().trace is not None and not in_library(1):
            frozen_data(self)
        plain = [float.__float__(a) if type(a) is TracedFloat else a for a in args]
        return func._implementation(*plain, **kwargs)

    def __repr__(self) -> str:
        return traced_text(float.__repr__(self))

    def __format__(self, spec: str) -> str:
        return traced_text(float.__format__(self, spec))

    def _plain(self) -> float:
        """The float, where the user's code reads it while tracing: refused."""
        if MODE.get().trace is not None and not in_library(2):
            frozen_data(self)
        return float.__float__(self)

    def is_integer(self) -> bool:
        return float.is_integer(self._plain())

    def as_integer_ratio(self) -> tuple[int, int]:
        return float.as_integer_ratio(self._plain())

    def hex(self) -> str:
        return float.hex(self._plain())

    def __reduce__(self) -> tuple:  # (pickles and copies as a plain float)
        return (float, (float(self),))


# Arithmetic on a TracedFloat in the user's code while tracing (``x.data * 2``,
# ``abs(y.data - 1)``) is done on its Value, and gives that Value's ``.data``: a
# branch on it is then guarded, and using it as a number is refused, as for
# ``x.data`` itself. Elsewhere (the Values' own operators, which do their
# arithmetic on ``.data``) it is the float's.
_BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
}
_UNARY = {"__neg__": operator.neg, "__pos__": operator.pos, "__abs__": operator.abs}
#: Conversions to an int: their answer would be a number of the trace.
_TO_INT = ("__int__", "__trunc__", "__floor__", "__ceil__")


def _in_user_code() -> bool:
    """Whether the arithmetic calling this was written in the user's code, while tracing."""
    return MODE.get().trace is not None and not in_library(2)


def _on_value(plain: Any, fn: Callable, operands: tuple) -> Any:
    """``fn`` on the Values of the TracedFloats among ``operands`` (the float's
    answer ``plain`` where one has none, or where Python's is not a float)."""
    if type(plain) is not float and type(plain) is not tuple:  # (tuple: divmod)
        return plain  # NotImplemented, or (-2.0) ** 0.5, a complex
    values = []
    for a in operands:
        if type(a) is TracedFloat:
            a = a.value()
            if a is None:
                return plain
        elif not isinstance(a, (numbers.Real, Numeric)):
            return NotImplemented
        values.append(a)
    out = fn(*values)
    if type(out) is tuple:  # (divmod)
        return tuple(o.data for o in out)
    return out.data if isinstance(out, Numeric) else plain


def _binary(name: str, fn: Callable, swapped: bool) -> Callable:
    plain = getattr(float, name)

    def method(self: TracedFloat, other: Any) -> Any:
        if in_library(1) or MODE.get().trace is None:
            return plain(self, other)  # (the hot case: a Value's operator)
        if isinstance(other, Numeric):  # (x.data * y, y a traced argument: (x * y).data)
            if swapped:
                return NotImplemented  # (y * x.data: a Value's operator, which refuses it)
            return _on_value(plain(self, float.__float__(other.data)), fn, (self, other))
        if not isinstance(other, numbers.Real):
            return NotImplemented  # (an array's operator, which refuses it)
        operands = (other, self) if swapped else (self, other)
        return _on_value(plain(self, other), fn, operands)

    method.__name__ = name
    return method


def _unary(name: str, fn: Callable) -> Callable:
    plain = getattr(float, name)

    def method(self: TracedFloat) -> Any:
        if not _in_user_code():
            return plain(self)
        return _on_value(plain(self), fn, (self,))

    method.__name__ = name
    return method


def _to_int(name: str) -> Callable:
    plain = getattr(float, name)

    def method(self: TracedFloat) -> Any:
        if _in_user_code():
            frozen_data(self)
        return plain(self)

    method.__name__ = name
    return method


def _round(self: TracedFloat, ndigits: Any = None) -> Any:
    """``round(x.data, 3)`` is rounded on the Value; ``round(x.data)``, an int, is refused."""
    if not _in_user_code():
        return float.__round__(self, ndigits)
    if ndigits is None:
        frozen_data(self)
    return _on_value(float.__round__(self, ndigits), lambda v: v.round(ndigits), (self,))


for _name, _fn in _BINARY.items():
    setattr(TracedFloat, f"__{_name}__", _binary(f"__{_name}__", _fn, False))
    setattr(TracedFloat, f"__r{_name}__", _binary(f"__r{_name}__", _fn, True))
for _name, _fn in _UNARY.items():
    setattr(TracedFloat, _name, _unary(_name, _fn))
for _name in _TO_INT:
    setattr(TracedFloat, _name, _to_int(_name))
TracedFloat.__round__ = _round  # type: ignore[method-assign]
TracedFloat.__divmod__ = _binary("__divmod__", divmod, False)  # type: ignore[method-assign]
TracedFloat.__rdivmod__ = _binary("__rdivmod__", divmod, True)  # type: ignore[method-assign]


def traced_float(
    v: Any, op: Op | None = None, args: tuple = (), make: Callable[..., Any] | None = None
) -> None:
    """Make ``v.data`` a :class:`TracedFloat` (while tracing): of the leaf Value ``v``
    (``args`` ``ARGUMENT`` where it stands for an argument), or of ``op`` applied to
    ``args``, ``make(op, args, data)`` making the Value again."""
    t = TracedFloat(v.data)
    if op is None:
        t.owner, t.op, t.args = weakref.ref(v), None, args
    else:
        t.owner, t.op, t.args = make, op, args
    v.data = t


class RefusedGrad(float):
    """The ``.grad`` of a Value made outside a traced function, or of one standing for
    an argument, while the function is traced: any use of it as a number raises
    (the compiled code would keep the gradient read then, where plain Python reads
    the one of each call; an argument's is no Value's in plain Python)."""

    __slots__ = ("label",)

    def refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"the traced function read {self.label}.grad, the gradient of a Value made "
            "outside it (or of an argument) while it was traced: the compiled code would "
            "keep the number read then, where plain Python reads it at each call. Read "
            "gradients outside the function, or pass them in as an argument"
        )

    def __reduce__(self) -> tuple:  # (copies as a plain float)
        return (float, (float.__float__(self),))


for _name in (
    "add sub mul truediv floordiv mod pow divmod radd rsub rmul rtruediv rfloordiv rmod "
    "rpow rdivmod neg pos abs float int bool round trunc floor ceil lt le gt ge eq ne "
    "array_ufunc array_function"
).split():  # (every use as a number: refused)
    setattr(RefusedGrad, f"__{_name}__", RefusedGrad.refuse)


def refused_grad(v: Any) -> RefusedGrad:
    """A :class:`RefusedGrad` of ``v.grad``, named after ``v``."""
    g = RefusedGrad(float.__float__(v.grad) if isinstance(v.grad, float) else 0.0)
    g.label = v.label or "p"
    return g


def frozen_data(x: Any) -> None:
    """Refuse a TracedFloat used as a number while tracing (``Value(x.data)``, ``x + y.data``)."""
    if type(x) is RefusedGrad:
        x.refuse()
    if type(x) is TracedFloat and MODE.get().trace is not None:
        raise TypeError(
            "the .data of a traced Value was used as a number: it would freeze the "
            "value seen while tracing into the compiled code. Use the Value itself "
            "(x, not x.data), or compute the number outside the function and pass "
            "it as an argument"
        )


def returned_data(x: Any) -> None:
    """Refuse a TracedFloat returned by the traced function: a number of the trace in
    compiled code, and in plain Python one no derivative flows through."""
    if type(x) is TracedFloat:
        raise TypeError(
            "the function returned the .data of a traced Value (or a number computed "
            "from it): compiled, it would be the value seen while tracing. Return the "
            "Value itself (x, not x.data)"
        )


def as_float(x: Any) -> float:
    """A number given to ``Value()``, as a float: not a traced ``.data`` (while
    tracing), text or a Value."""
    if isinstance(x, numbers.Real) and not isinstance(x, Numeric):
        frozen_data(x)
        return float(x)
    if isinstance(x, np.ndarray) and x.size == 1 and x.dtype != object:
        return float(x.reshape(()))
    raise TypeError(
        f"Value() takes a real number, not {type(x).__name__!r}"
        + ("; convert text with float(...) first" if isinstance(x, (str, bytes)) else "")
        + (
            "; a Value is already a Value: use it as it is, or v.detach()"
            if isinstance(x, Numeric)
            else ""
        )
    )
