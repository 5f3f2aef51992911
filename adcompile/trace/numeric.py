"""A Value as a Python number: comparisons, ``float()``, ``int()``, ``round()``,
``divmod()``, ``item()``, ``repr()``, and why ``range(v)`` is refused.

``Numeric`` is ``Value``'s base class (a mixin with no state of its own): its
methods read only the Value's ``.data``, its public operators and the hook
``_compare``, which ``Value`` implements (a bool from ``.data``; while tracing,
kept as a guard). Only Values are ``Numeric``. Each conversion that would freeze
a traced value into compiled code is refused while tracing, with an error saying
what to do instead.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any

from .mode import ARGUMENT, FLOAT_REFUSED, MODE, STATIC_HINT, index_error
from .text import traced_text


class Numeric:
    """What a Value does as a Python number (the float it holds, ``.data``)."""

    __slots__ = ()
    data: float  # (the Value's slots)
    grad: float

    def __new__(cls, data: Any = None, *args: Any, **kwargs: Any) -> Any:
        """A new one; while tracing, ``Value(x)`` of a traced Value is ``x`` itself
        (micrograd code wraps its data, ``list(map(Value, row))``, and the Values of a
        traced row stand for the numbers: they must stay connected)."""
        if type(data) is cls and MODE.get().trace is not None:
            return data
        return object.__new__(cls)

    def conjugate(self) -> Any:
        """A real number is its own conjugate (np.var and np.std of Values ask for it)."""
        return self

    conj = conjugate

    def _backward(self) -> None:
        """micrograd's backward step by hand, as in its lecture: ``.grad`` times the
        local derivative into each operand's ``.grad``."""
        operands, fn = self._prev, self._fn  # type: ignore[attr-defined]
        for v, rule in zip(operands, fn.vjp if fn is not None else ()):
            if rule is not None and v.requires_grad:
                v.grad += rule(self.grad, self.data, *[u.data for u in operands])

    # -- comparisons: a bool from .data; while tracing, kept as a guard -----

    def _compare(self, cmp: str, other: Any) -> bool:
        """``self cmp other`` (``"<"``, ``"=="`` ...): Value's, which keeps it as a guard
        while tracing."""
        raise NotImplementedError

    def __lt__(self, other: Any) -> bool:
        return self._compare("<", other)

    def __le__(self, other: Any) -> bool:
        return self._compare("<=", other)

    def __gt__(self, other: Any) -> bool:
        return self._compare(">", other)

    def __ge__(self, other: Any) -> bool:
        return self._compare(">=", other)

    # == and != follow the floats too (a guard while tracing), as a branch on
    # ``x == 0.5`` must; hash() stays object identity, as in micrograd and
    # PyTorch, so Values still live in sets and dicts (a set lookup compares
    # hashes first, and distinct Values never share one). While tracing, the hash
    # of a Value standing for an argument (a float in plain Python) is refused:
    # ``x in {1.0, 2.0}`` and ``d.get(x)`` look a float up by its hash, which an
    # identity cannot match, and would silently answer "absent". A model's
    # parameters, Values in plain Python too, keep their identity.

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (Numeric, numbers.Real)):
            return self._compare("==", other)
        return NotImplemented

    def __ne__(self, other: Any) -> bool:
        if isinstance(other, (Numeric, numbers.Real)):
            return self._compare("!=", other)
        return NotImplemented

    def __hash__(self) -> int:
        if MODE.get().trace is not None and getattr(self.data, "args", None) is ARGUMENT:
            raise TypeError(
                "hash() of a traced Value (a set or dict key, or `in` on a set or dict): "
                "its hash is its identity, so `x in {1.0, 2.0}` or `d.get(x)` would not "
                "find the float it holds. Compare with == instead (`x == 1.0 or x == "
                "2.0`, or `x in (1.0, 2.0)`: a tuple compares with ==, guarded), or look "
                "up x.data"
            )
        return object.__hash__(self)

    def __bool__(self) -> bool:
        """Truthiness of the float (``x != 0``), guarded while tracing."""
        return self._compare("!=", 0.0)

    # -- conversions: refused while tracing ---------------------------------

    def _frozen(self, how: str, hint: str = "") -> None:
        if FLOAT_REFUSED.get() and getattr(self, "_rg", False):
            raise TypeError(f"{how} of a Value that takes a gradient (no gradient flows on)")
        if MODE.get().trace is not None:
            raise TypeError(
                f"{how} was called on a traced Value: it would freeze the value seen "
                "while tracing into the compiled code. Keep it a Value: use the "
                "adcompile functions (ad.sin(x), ad.exp(x) ...), NumPy ufuncs (np.sin(x), "
                "np.floor(x), np.isnan(x) ...) or operators instead of math.* / float() / "
                f"int() / round(){hint}"
            )

    def __float__(self) -> float:
        self._frozen(
            "float() (or a math.* function, or a conversion to a float array: "
            "np.asarray(x, dtype=float), np.array(x, dtype=...))",
            "; the arguments arrive as float64 arrays already, so a conversion of one "
            "can be left out (x.astype(float) is taken)",
        )
        return self.data

    def __int__(self) -> int:
        self._frozen("int()", f"; an integer argument {STATIC_HINT}")
        return int(self.data)

    def __index__(self) -> int:
        """Refused: a Value stands for a float; the error says how to pass an integer."""
        raise TypeError(index_error(self.data))

    def __round__(self, ndigits: int | None = None) -> Any:
        """Python's ``round``, on the float (an int, as for a float); refused while
        tracing. ``np.round(v)`` and ``v.round()`` give a Value."""
        self._frozen("round()", "; np.round(x) rounds a Value and is recorded")
        return round(self.data, ndigits)

    def round(self, decimals: int = 0, out: None = None) -> Any:
        """Rounded to ``decimals`` digits as ``np.round`` (``rint(x * 10**d) / 10**d``,
        halves to even); derivative 0. ``np.round(v)`` calls this."""
        if out is not None:
            raise TypeError("Value.round(out=...) is not supported: use the Value it returns")
        d = operator.index(decimals)
        if d == 0:
            return self.rint()  # type: ignore[attr-defined]
        if d > 0:
            return (self * 10.0**d).rint() / 10.0**d  # type: ignore[operator]
        return (self / 10.0**-d).rint() * 10.0**-d  # type: ignore[operator]

    def __divmod__(self, other: Any) -> tuple[Any, Any]:
        return self // other, self % other  # type: ignore[operator]

    def __rdivmod__(self, other: Any) -> tuple[Any, Any]:
        return other // self, other % self

    def item(self) -> float:
        """The value as a Python float."""
        self._frozen("item()")
        return self.data

    def __repr__(self) -> str:
        data, grad = float.__float__(self.data), float.__float__(self.grad)  # (traced ones)
        return traced_text(f"Value(data={data}, grad={grad})")

    def __format__(self, spec: str) -> str:
        """``f"{v:.3f}"`` formats ``.data``; ``f"{v}"`` is ``str(v)`` (``TracedText``)."""
        return traced_text(format(float.__float__(self.data), spec) if spec else str(self))
