"""The op table, piecewise ops: relu, maximum, minimum, sign, step, the rounding
functions (floor, ceil, trunc, rint), floor division and remainder.

One ``defop`` per primitive, as in ``arithmetic``: float value (NumPy's
semantics), derivative rules (JAX's and PyTorch's conventions at kinks and
jumps, stated with each), Python (Numba) and C99 templates, SymPy form, test
domain and where its kinks and jumps are (``kink``). ``adcompile.ir`` imports
this module, so the ops are in ``ops.OPS`` whenever the table is.

Each rule is ``(g, out, *args) -> contribution`` for one argument; ``None``
marks an argument with derivative zero. Rules use the generic functions of
``ops`` (``div``, ``log``, ``sign`` ...), so they run on floats and record on
Values alike; a rule never branches on its arguments (it is also written down
as source, ``trace.methods``), and it divides with ``div``, which answers
NumPy's ``inf`` or ``nan`` where Python's ``/`` would raise.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .ops import defop, floor_divide, numpy_fallback, sign, step

NAN = math.nan

_div = numpy_fallback(lambda a, b: a / b, np.divide)


def _sign(x: float) -> float:
    return 1.0 if x > 0.0 else (-1.0 if x < 0.0 else x * 0.0)


def _step(x: float) -> float:
    return 1.0 if x > 0.0 else (0.0 if x == x else x)


def _relu(x: float) -> float:
    return x if x > 0.0 else (0.0 if x == x else x)


def _step_array(x: Any) -> Any:
    """``_step`` on float arrays (nan stays nan)."""
    return np.where(x > 0.0, 1.0, np.where(x == x, 0.0, x))


def _relu_array(x: Any) -> Any:
    """``_relu`` on float arrays (nan stays nan; -0.0 gives 0.0)."""
    return np.where((x > 0.0) | (x != x), x, 0.0)


def _maximum(a: float, b: float) -> float:
    if a != a or b != b:
        return NAN
    return a if a >= b else b


def _minimum(a: float, b: float) -> float:
    if a != a or b != b:
        return NAN
    return a if a <= b else b


#: 2**52: every float of at least this magnitude is an integer (or inf).
_BIG = 4503599627370496.0


def _rounding(to_int: Callable[[float], int], name: str) -> Callable[[float], float]:
    """NumPy's rounding ufunc ``name`` on a float, from Python's ``to_int`` (``math.floor``,
    ``round`` ...), which answers an int and raises on inf and nan: a float, with the
    sign of a zero kept (``ceil(-0.5)`` is ``-0.0``), inf and nan as they are."""

    def f(x: float) -> float:
        if abs(x) < _BIG:
            return math.copysign(float(to_int(x)), x)
        return x  # an integer already, inf or nan

    f.__name__ = name
    return f


def _integer_crossing(x: float) -> float:
    """0.0 where ``x`` is an integer, with a sign that changes across each integer and
    nowhere else: ``(x - n) * (-1)**n``, ``n`` the nearest integer (the sign of
    ``sin(pi x)``, computed exactly). The kinks of ops that jump at integers."""
    if not abs(x) < _BIG:
        return x * 0.0  # every float this large is an integer (nan stays nan)
    n = round(x)
    return (x - n) * (-1.0 if n % 2 else 1.0)


def _half_crossing(x: float) -> float:
    """``_integer_crossing`` for jumps at half-integers (where ``rint`` jumps)."""
    return _integer_crossing(x - 0.5)


def _quotient_crossing(a: float, b: float) -> float:
    """``_integer_crossing`` of ``a / b``: where ``a // b`` and ``a % b`` jump."""
    return _integer_crossing(_div(a, b))


_floor = _rounding(math.floor, "floor")
_ceil = _rounding(math.ceil, "ceil")
_trunc = _rounding(math.trunc, "trunc")
_rint = _rounding(round, "rint")  # Python's round: halves to even, as np.rint
_floor_divide = numpy_fallback(operator.floordiv, np.floor_divide)
_remainder = numpy_fallback(operator.mod, np.remainder)  # the divisor's sign, as Python


defop(
    "relu",
    1,
    _relu,
    "({0} if not {0} <= 0.0 else 0.0)",  # (nan stays nan, as _relu)
    (lambda g, out, a: g * step(a),),
    lambda sp, a: sp.Max(a, 0),
    smooth=False,
    c="(0.0 > {0} ? 0.0 : {0})",
    array=_relu_array,
)
# maximum/minimum split a tie evenly between both arguments, as PyTorch does.
defop(
    "maximum",
    2,
    _maximum,
    "(({0} + {1}) if {0} != {0} or {1} != {1} else ({0} if {0} >= {1} else {1}))",
    (
        lambda g, out, a, b: g * (0.5 + 0.5 * sign(a - b)),
        lambda g, out, a, b: g * (0.5 - 0.5 * sign(a - b)),
    ),
    "Max",
    smooth=False,
    associative=True,
    c="({0} != {0} || {1} != {1} ? {0} + {1} : ({0} >= {1} ? {0} : {1}))",
)
defop(
    "minimum",
    2,
    _minimum,
    "(({0} + {1}) if {0} != {0} or {1} != {1} else ({0} if {0} <= {1} else {1}))",
    (
        lambda g, out, a, b: g * (0.5 - 0.5 * sign(a - b)),
        lambda g, out, a, b: g * (0.5 + 0.5 * sign(a - b)),
    ),
    "Min",
    smooth=False,
    associative=True,
    c="({0} != {0} || {1} != {1} ? {0} + {1} : ({0} <= {1} ? {0} : {1}))",
)
# Piecewise-constant helpers used by the rules above; their derivative is zero.
defop(
    "sign",
    1,
    _sign,
    "(1.0 if {0} > 0.0 else (-1.0 if {0} < 0.0 else {0} * 0.0))",
    (None,),
    "sign",
    smooth=False,
    c="({0} > 0.0 ? 1.0 : ({0} < 0.0 ? -1.0 : {0} * 0.0))",
)
defop(
    "step",
    1,
    _step,
    "(1.0 if {0} > 0.0 else (0.0 if {0} == {0} else {0}))",
    (None,),
    lambda sp, a: sp.Heaviside(a, 0),
    smooth=False,
    c="({0} > 0.0 ? 1.0 : ({0} == {0} ? 0.0 : {0}))",
    array=_step_array,
)


# Rounding, floor division and remainder follow NumPy's float ufuncs (and Python's
# operators: ``%`` takes the divisor's sign) and JAX's derivatives: floor, ceil, trunc,
# rint and // are piecewise constant, derivative 0 (also on their jumps); x % y is
# x - y * (x // y), derivative 1 in x and -(x // y) in y. Python's math.floor answers
# an int (and Numba's an int64, garbage for inf and nan), so the templates round only
# below 2**52 (larger floats are integers already) and keep the sign of a zero.
_ROUNDED = "(math.copysign({1}, {0}) if abs({0}) < 4503599627370496.0 else {0})"
defop(
    "floor",
    1,
    _floor,
    _ROUNDED.format("{0}", "float(math.floor({0}))"),
    (None,),
    "floor",
    smooth=False,
    kink=_integer_crossing,
    c="floor({0})",
)
defop(
    "ceil",
    1,
    _ceil,
    _ROUNDED.format("{0}", "float(math.ceil({0}))"),
    (None,),
    "ceiling",
    smooth=False,
    kink=_integer_crossing,
    c="ceil({0})",
)
defop(
    "trunc",
    1,
    _trunc,
    _ROUNDED.format("{0}", "float(math.trunc({0}))"),
    (None,),
    "trunc",
    smooth=False,
    kink=_integer_crossing,
    c="trunc({0})",
)
# |x| + 2**52 - 2**52 rounds |x| < 2**52 to an integer, halves to even, in IEEE float
# arithmetic on every target (Python's and Numba's round answer an int).
defop(
    "rint",
    1,
    _rint,
    _ROUNDED.format("{0}", "((abs({0}) + 4503599627370496.0) - 4503599627370496.0)"),
    (None,),
    "rint",
    smooth=False,
    kink=_half_crossing,
    c="rint({0})",
)
# C's fmod has the dividend's sign; Python's (and NumPy's) remainder the divisor's:
# NumPy's npy_divmod, written out.
_C_FMOD = "fmod({0}, {1})"
_C_SHIFT = f"({_C_FMOD} != 0.0 && ({_C_FMOD} < 0.0) != ({{1}} < 0.0))"
_C_QUOTIENT = f"(({{0}} - {_C_FMOD}) / {{1}} - ({_C_SHIFT} ? 1.0 : 0.0))"
defop(
    "floor_divide",
    2,
    _floor_divide,
    "({0} // {1})",
    (None, None),
    "floor_divide",
    smooth=False,
    symbol="//",
    operator="floordiv",
    kink=_quotient_crossing,
    c=(
        f"({{1}} == 0.0 ? {{0}} / {{1}} : ({_C_QUOTIENT} != 0.0 ? floor({_C_QUOTIENT}) + "
        f"({_C_QUOTIENT} - floor({_C_QUOTIENT}) > 0.5 ? 1.0 : 0.0) : "
        "copysign(0.0, {0} / {1})))"
    ),
)
defop(
    "remainder",
    2,
    _remainder,
    "({0} % {1})",
    (lambda g, out, a, b: g, lambda g, out, a, b: -(g * floor_divide(a, b))),
    "Mod",
    smooth=False,
    symbol="%",
    operator="mod",
    kink=_quotient_crossing,
    c=f"({_C_SHIFT} ? {_C_FMOD} + {{1}} : copysign({_C_FMOD}, {{1}}))",
)
