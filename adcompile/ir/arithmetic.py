"""The op table, arithmetic: + - * / and unary -, ``**``, ``abs``, ``square`` and
``reciprocal``.

One ``defop`` per primitive: its float value (NumPy's semantics), derivative
rules, Python (Numba) and C99 templates, SymPy form, test domain, what the tape
passes may know of it (identity, linearity ...) and the Python operator or
NumPy ufuncs that record it. ``adcompile.ir`` imports this module, so the ops
are in ``ops.OPS`` whenever the table is.

Each rule is ``(g, out, *args) -> contribution`` for one argument; ``None``
marks an argument with derivative zero. Rules use the generic functions of
``ops`` (``div``, ``log``, ``sign`` ...), so they run on floats and record on
Values alike; a rule never branches on its arguments (it is also written down
as source, ``trace.methods``), and it divides with ``div``, which answers
NumPy's ``inf`` or ``nan`` where Python's ``/`` would raise.
"""

from __future__ import annotations

import math

import numpy as np

from .ops import defop, div, log, nonzero, numpy_fallback, pow, sign

_add = float.__add__
_sub = float.__sub__
_mul = float.__mul__
_neg = float.__neg__
_div = numpy_fallback(lambda a, b: a / b, np.divide)
_pow = numpy_fallback(lambda a, b: a**b if a != -math.inf else None, np.power)
_reciprocal = numpy_fallback(lambda a: 1.0 / a, np.reciprocal)


def _square(x: float) -> float:
    return x * x


defop(
    "add",
    2,
    _add,
    "({0} + {1})",
    (lambda g, out, a, b: g, lambda g, out, a, b: g),
    lambda sp, a, b: a + b,
    symbol="+",
    linear=True,
    identity=-0.0,
    commutative=True,
    associative=True,
    operator="add",
    method=False,
    c="({0} + {1})",
)
defop(
    "sub",
    2,
    _sub,
    "({0} - {1})",
    (lambda g, out, a, b: g, lambda g, out, a, b: -g),
    lambda sp, a, b: a - b,
    symbol="-",
    linear=True,
    identity=0.0,
    operator="sub",
    method=False,
    ufuncs=("subtract",),
    c="({0} - {1})",
)
defop(
    "mul",
    2,
    _mul,
    "({0} * {1})",
    (lambda g, out, a, b: g * b, lambda g, out, a, b: g * a),
    lambda sp, a, b: a * b,
    symbol="*",
    linear_in=(0, 1),
    identity=1.0,
    commutative=True,
    associative=True,
    operator="mul",
    method=False,
    ufuncs=("multiply",),
    c="({0} * {1})",
)
defop(
    "div",
    2,
    _div,
    "({0} / {1})",
    (lambda g, out, a, b: div(g, b), lambda g, out, a, b: -div(g * out, b)),
    lambda sp, a, b: a / b,
    domain=(0.5, 3.0),
    symbol="/",
    linear_in=(0,),
    identity=1.0,
    operator="truediv",
    method=False,
    ufuncs=("divide", "true_divide"),
    c="({0} / {1})",
)
defop(
    "neg",
    1,
    _neg,
    "(-{0})",
    (lambda g, out, a: -g,),
    lambda sp, a: -a,
    linear=True,
    linear_in=(0,),
    involution=True,
    operator="neg",
    method=False,
    ufuncs=("negative",),
    c="(-{0})",
)
# pow at 0, as JAX and PyTorch: d/dy x**y is 0 where x == 0 and y >= 0 (0**y is 0 for
# y > 0, 1 at y == 0), the limit of x**y log(x), not 0 * log(0) = nan; log's argument is
# replaced by 1 there (JAX's _replace_zero). d/dx x**y is 0 where y == 0 (x**0 is 1 for
# every x), not 0 * 0**-1 = nan: the exponent y - 1 is replaced by 0 there (PyTorch's
# mask; JAX answers nan at x = y = 0). Where x == 0 and y < 0, 0**y is inf and d/dy is
# nan, as in JAX (PyTorch says -inf). ``nonzero(t)`` is 1.0 where t != 0, else 0.0.
defop(
    "pow",
    2,
    _pow,
    "({0} ** {1})",
    (
        lambda g, out, a, b: g * b * pow(a, b - nonzero(b)),  # exponent b - 1, or 0 at b == 0
        lambda g, out, a, b: g * out * log(a + (1.0 - nonzero(a))),  # log(a), or log(1)
    ),
    lambda sp, a, b: a**b,
    domain=(0.5, 2.0),
    symbol="**",
    identity=1.0,
    operator="pow",
    method=False,
    ufuncs=("power", "float_power"),
    c="pow({0}, {1})",
)
defop(
    "abs",
    1,
    abs,
    "abs({0})",
    (lambda g, out, a: g * sign(a),),
    "Abs",
    smooth=False,
    operator="abs",
    ufuncs=("absolute", "fabs"),
    c="fabs({0})",
)
# NumPy's square and reciprocal, x * x and 1 / x as their ufuncs compute them (so
# np.square(v) is one node, not mul(v, v)). reciprocal's derivative -1 / x**2 is written
# -out * out, as PyTorch's: no division, -inf at either zero.
defop(
    "square",
    1,
    _square,
    "({0} * {0})",
    (lambda g, out, a: g * (2.0 * a),),
    lambda sp, a: a**2,
    c="({0} * {0})",
)
defop(
    "reciprocal",
    1,
    _reciprocal,
    "(1.0 / {0})",
    (lambda g, out, a: -(g * (out * out)),),
    lambda sp, a: 1 / a,
    domain=(0.5, 3.0),
    c="(1.0 / {0})",
)
