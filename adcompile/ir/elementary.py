"""The op table, elementary functions: exponentials and logarithms (in bases e, 2
and 10, log1p, expm1, logaddexp), roots, trigonometric functions and their
inverses (arctan2 and hypot too), hyperbolic functions and their inverses, and
the smooth activations (sigmoid, softplus).

One ``defop`` per primitive, as in ``arithmetic``: float value (NumPy's
semantics), derivative rules, Python (Numba) and C99 templates, SymPy form and
test domain. ``adcompile.ir`` imports this module, so the ops are in
``ops.OPS`` whenever the table is.

Each rule is ``(g, out, *args) -> contribution`` for one argument; ``None``
marks an argument with derivative zero. Rules use the generic functions of
``ops`` (``div``, ``log``, ``sign`` ...), so they run on floats and record on
Values alike; a rule never branches on its arguments (it is also written down
as source, ``trace.methods``), and it divides with ``div``, which answers
NumPy's ``inf`` or ``nan`` where Python's ``/`` would raise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .ops import (
    cos,
    cosh,
    defop,
    div,
    exp,
    hypot,
    nonzero,
    numpy_fallback,
    sigmoid,
    sin,
    sinh,
    sqrt,
)

#: ln 2, ln 10 and log2(e) rounded to floats (NumPy's NPY_LOGE2, NPY_LOGE10, NPY_LOG2E).
_LN2 = 0.6931471805599453
_LN10 = 2.302585092994046
_LOG2E = 1.4426950408889634


def _sigmoid(x: float) -> float:
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    if x < 0.0:
        e = math.exp(x)
        return e / (1.0 + e)
    return x  # nan


def _sigmoid_array(x: Any) -> Any:
    """``_sigmoid`` on float arrays: the same formula on either side of 0."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus_array(x: Any) -> Any:
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


def _softplus(x: float) -> float:
    if math.isinf(x):
        return x if x > 0 else 0.0
    return math.log1p(math.exp(-abs(x))) + max(x, 0.0)


def _logaddexp(a: float, b: float) -> float:
    """NumPy's ``npy_logaddexp``: the larger operand plus ``log1p`` of the smaller one's
    exponential (never overflowing); ``a + log 2`` where ``a == b`` (infinities of one
    sign stay), nan for nan."""
    if a == b:
        return a + _LN2
    if a > b:
        return a + math.log1p(math.exp(b - a))
    if a < b:
        return b + math.log1p(math.exp(a - b))
    return a - b  # nan


def _logaddexp2(a: float, b: float) -> float:
    """NumPy's ``npy_logaddexp2``, as ``_logaddexp`` in base 2 (``log2(1 + t)`` as
    ``log2(e) * log1p(t)``)."""
    if a == b:
        return a + 1.0
    if a > b:
        return a + _LOG2E * math.log1p(2.0 ** (b - a))
    if a < b:
        return b + _LOG2E * math.log1p(2.0 ** (a - b))
    return a - b  # nan


def _cbrt(x: float) -> float:
    """The real cube root, as the op's template computes it (``math.cbrt`` is Python
    3.11's, and Numba has none): ``|x| ** (1/3)``, then one Newton step, with the sign
    of ``x``; zeros, infinities and nan as they are."""
    a = abs(x)
    if not 0.0 < a < math.inf:
        return x
    r = a ** (1.0 / 3.0)
    return math.copysign(r + (a / (r * r) - r) / 3.0, x)


def _atan2_cut(y: float, x: float) -> float:
    """Where ``arctan2(y, x)`` jumps: 0.0 on its branch cut (``y = 0``, ``x <= 0``, the
    origin included), the sign of ``y`` beside it; 1.0 where ``x > 0``. (The sign also
    changes across ``x = 0`` below the axis, where the angle is smooth: finite
    differences there are only distrusted, never wrong.)"""
    return y if x <= 0.0 else 1.0


def _hypot_kink(a: float, b: float) -> float:
    """Where ``hypot`` has its kink, the origin: on the axis ``b = 0`` it is ``|a|``, whose
    kink ``a`` marks, on ``a = 0`` it is ``|b|`` (``b``); 1.0 off the axes."""
    return a if b == 0.0 else (b if a == 0.0 else 1.0)


def _one_at_zero(r: Any) -> Any:
    """``r``, or 1 where ``r`` is 0: the radius ``hypot(y, x)`` as the denominator of the
    rules of hypot and arctan2, which so answer 0 at the origin (as pow's rule replaces
    log's argument 0 by 1, JAX's ``_replace_zero``)."""
    return r + (1.0 - nonzero(r))


def _arctan2_dy(g: Any, out: Any, y: Any, x: Any) -> Any:
    r = _one_at_zero(hypot(y, x))
    return g * div(div(x, r), r)


def _arctan2_dx(g: Any, out: Any, y: Any, x: Any) -> Any:
    r = _one_at_zero(hypot(y, x))
    return -(g * div(div(y, r), r))


_exp = numpy_fallback(math.exp, np.exp)
_log = numpy_fallback(math.log, np.log)
_log1p = numpy_fallback(math.log1p, np.log1p)
_expm1 = numpy_fallback(math.expm1, np.expm1)
_sqrt = numpy_fallback(math.sqrt, np.sqrt)
_sin = numpy_fallback(math.sin, np.sin)
_cos = numpy_fallback(math.cos, np.cos)
_tan = numpy_fallback(math.tan, np.tan)
_asin = numpy_fallback(math.asin, np.arcsin)
_acos = numpy_fallback(math.acos, np.arccos)
_sinh = numpy_fallback(math.sinh, np.sinh)
_cosh = numpy_fallback(math.cosh, np.cosh)
_exp2 = numpy_fallback(lambda a: 2.0**a, np.exp2)
_log10 = numpy_fallback(math.log10, np.log10)
_log2 = numpy_fallback(math.log2, np.log2)
_hypot = numpy_fallback(math.hypot, np.hypot)
_acosh = numpy_fallback(math.acosh, np.arccosh)
_atanh = numpy_fallback(math.atanh, np.arctanh)


defop("exp", 1, _exp, "math.exp({0})", (lambda g, out, a: g * out,), "exp", c="exp({0})")
# 2**x: Python's and Numba's float power (math.exp2 is Python 3.11's); d/dx = ln 2 * out.
defop(
    "exp2",
    1,
    _exp2,
    "(2.0 ** {0})",
    (lambda g, out, a: g * (out * _LN2),),
    lambda sp, a: 2**a,
    c="exp2({0})",
)
defop(
    "log",
    1,
    _log,
    "math.log({0})",
    (lambda g, out, a: div(g, a),),
    "log",
    domain=(0.1, 5.0),
    c="log({0})",
)
# d/dx log10(x) = 1 / (x ln 10), log2 likewise, as PyTorch: inf at 0, nan below.
defop(
    "log10",
    1,
    _log10,
    "math.log10({0})",
    (lambda g, out, a: div(g, a * _LN10),),
    lambda sp, a: sp.log(a, 10),
    domain=(0.1, 5.0),
    c="log10({0})",
)
defop(
    "log2",
    1,
    _log2,
    "math.log2({0})",
    (lambda g, out, a: div(g, a * _LN2),),
    lambda sp, a: sp.log(a, 2),
    domain=(0.1, 5.0),
    c="log2({0})",
)
defop(
    "log1p",
    1,
    _log1p,
    "math.log1p({0})",
    (lambda g, out, a: div(g, 1.0 + a),),
    lambda sp, a: sp.log(1 + a),
    domain=(-0.9, 3.0),
    c="log1p({0})",
)
defop(
    "expm1",
    1,
    _expm1,
    "math.expm1({0})",
    # exp(a), not JAX's and PyTorch's out + 1, which rounds to 0 below a = -37
    (lambda g, out, a: g * exp(a),),
    lambda sp, a: sp.exp(a) - 1,
    c="expm1({0})",
)
# log(exp(a) + exp(b)) and log2(2**a + 2**b) as NumPy computes them (``_logaddexp``,
# written out in both templates). The derivatives, the weights exp(a - out) and
# exp(b - out), are written sigmoid(a - b) and sigmoid(b - a), PyTorch's
# 1 / (1 + exp(b - a)): in [0, 1], never overflowing, accurate however far apart or
# large a and b are (JAX's exp(a - out) carries out's rounding error, up to half an ulp
# of a: 6e-11 at a = 1e6); 1 and 0 where one operand is infinite (where JAX's, +inf
# replaced by 0, says exp(b) for d/db at a = inf), nan where both are infinite of one
# sign. logaddexp2's: sigmoid((a - b) ln 2) and sigmoid((b - a) ln 2).
defop(
    "logaddexp",
    2,
    _logaddexp,
    (
        "({0} + 0.6931471805599453 if {0} == {1} else "
        "({0} + math.log1p(math.exp({1} - {0})) if {0} > {1} else "
        "({1} + math.log1p(math.exp({0} - {1})) if {0} < {1} else {0} - {1})))"
    ),
    (
        lambda g, out, a, b: g * sigmoid(a - b),
        lambda g, out, a, b: g * sigmoid(b - a),
    ),
    lambda sp, a, b: sp.log(sp.exp(a) + sp.exp(b)),
    c=(
        "({0} == {1} ? {0} + 0.6931471805599453 : "
        "({0} > {1} ? {0} + log1p(exp({1} - {0})) : "
        "({0} < {1} ? {1} + log1p(exp({0} - {1})) : {0} - {1})))"
    ),
)
defop(
    "logaddexp2",
    2,
    _logaddexp2,
    (
        "({0} + 1.0 if {0} == {1} else "
        "({0} + 1.4426950408889634 * math.log1p(2.0 ** ({1} - {0})) if {0} > {1} else "
        "({1} + 1.4426950408889634 * math.log1p(2.0 ** ({0} - {1})) if {0} < {1} else {0} - {1})))"
    ),
    (
        lambda g, out, a, b: g * sigmoid((a - b) * _LN2),
        lambda g, out, a, b: g * sigmoid((b - a) * _LN2),
    ),
    lambda sp, a, b: sp.log(2**a + 2**b, 2),
    c=(
        "({0} == {1} ? {0} + 1.0 : "
        "({0} > {1} ? {0} + 1.4426950408889634 * log1p(exp2({1} - {0})) : "
        "({0} < {1} ? {1} + 1.4426950408889634 * log1p(exp2({0} - {1})) : {0} - {1})))"
    ),
)
defop(
    "sqrt",
    1,
    _sqrt,
    "math.sqrt({0})",
    (lambda g, out, a: div(g, 2.0 * out),),
    "sqrt",
    domain=(0.1, 5.0),
    c="sqrt({0})",
)
# The real cube root, of x's sign, as NumPy's cbrt (``_cbrt``: one Newton step after
# pow, whose rounded exponent 1/3 is 1e-14 off at 1e300). d/dx = 1 / (3 out**2): +inf at
# 0 (of either sign: the limit from both sides).
_CBRT_ROOT = "(abs({0}) ** (1.0 / 3.0))"
defop(
    "cbrt",
    1,
    _cbrt,
    (
        f"(math.copysign({_CBRT_ROOT} + (abs({{0}}) / ({_CBRT_ROOT} * {_CBRT_ROOT}) - "
        f"{_CBRT_ROOT}) / 3.0, {{0}}) if 0.0 < abs({{0}}) < math.inf else {{0}})"
    ),
    (lambda g, out, a: div(g, 3.0 * (out * out)),),
    lambda sp, a: sp.sign(a) * sp.Abs(a) ** sp.Rational(1, 3),
    c="cbrt({0})",
)
defop(
    "sin",
    1,
    _sin,
    "math.sin({0})",
    (lambda g, out, a: g * cos(a),),
    "sin",
    domain=(-10.0, 10.0),
    c="sin({0})",
)
defop(
    "cos",
    1,
    _cos,
    "math.cos({0})",
    (lambda g, out, a: -(g * sin(a)),),
    "cos",
    domain=(-10.0, 10.0),
    c="cos({0})",
)
defop(
    "tan",
    1,
    _tan,
    "math.tan({0})",
    (lambda g, out, a: g * (1.0 + out * out),),
    "tan",
    domain=(-1.2, 1.2),
    c="tan({0})",
)
defop(
    "arcsin",
    1,
    _asin,
    "math.asin({0})",
    # (1 - a)(1 + a), not 1 - a*a: accurate near |a| = 1, where 1 - a*a cancels
    (lambda g, out, a: div(g, sqrt((1.0 - a) * (1.0 + a))),),
    "asin",
    domain=(-0.9, 0.9),
    c="asin({0})",
)
defop(
    "arccos",
    1,
    _acos,
    "math.acos({0})",
    (lambda g, out, a: -div(g, sqrt((1.0 - a) * (1.0 + a))),),
    "acos",
    domain=(-0.9, 0.9),
    c="acos({0})",
)
defop(
    "arctan",
    1,
    math.atan,
    "math.atan({0})",
    (lambda g, out, a: div(g, 1.0 + a * a),),
    "atan",
    domain=(-5.0, 5.0),
    c="atan({0})",
)
# arctan2(y, x), NumPy's order: the angle of the point (x, y), C99's atan2. d/dy = x / r**2
# and d/dx = -y / r**2 with r = hypot(y, x), as (x / r) / r: no overflow or underflow
# where x*x + y*y would (beyond 1e154 or below 1e-154; JAX's and PyTorch's forms). At
# the origin, where the angle has no limit, both are 0, as PyTorch (JAX answers 0/0 =
# nan), and as hypot's rules there. The angle jumps by 2 pi across the branch cut
# (y = +-0, x < 0) and its derivative does not: the rules hold on the cut, and ``kink``
# marks it for finite differences.
defop(
    "arctan2",
    2,
    math.atan2,
    "math.atan2({0}, {1})",
    (_arctan2_dy, _arctan2_dx),
    "atan2",
    domain=(-3.0, -0.5),  # the third quadrant (arctan(y / x) is pi off), not the origin
    smooth=False,
    kink=_atan2_cut,
    c="atan2({0}, {1})",
)
# hypot(a, b) = sqrt(a*a + b*b) without overflow or underflow, C99's (as NumPy). d/da =
# a / out and d/db = b / out; at the origin, its kink, both are 0, as JAX (PyTorch
# answers 0/0 = nan).
defop(
    "hypot",
    2,
    _hypot,
    "math.hypot({0}, {1})",
    (
        lambda g, out, a, b: g * div(a, _one_at_zero(out)),
        lambda g, out, a, b: g * div(b, _one_at_zero(out)),
    ),
    lambda sp, a, b: sp.sqrt(a**2 + b**2),
    domain=(-3.0, -0.5),  # negative operands, away from the origin (its kink)
    smooth=False,
    kink=_hypot_kink,
    c="hypot({0}, {1})",
)
defop("sinh", 1, _sinh, "math.sinh({0})", (lambda g, out, a: g * cosh(a),), "sinh", c="sinh({0})")
defop("cosh", 1, _cosh, "math.cosh({0})", (lambda g, out, a: g * sinh(a),), "cosh", c="cosh({0})")
defop(
    "tanh",
    1,
    math.tanh,
    "math.tanh({0})",
    (lambda g, out, a: g * (1.0 - out * out),),
    "tanh",
    c="tanh({0})",
)
# The error function (scipy.special.erf and erfc: ufuncs of these names; GELU's
# exact form): its derivative 2/sqrt(pi) exp(-x*x).
_TWO_OVER_SQRT_PI = 1.1283791670955126
defop(
    "erf",
    1,
    math.erf,
    "math.erf({0})",
    (lambda g, out, a: g * (_TWO_OVER_SQRT_PI * exp(-(a * a))),),
    "erf",
    c="erf({0})",
)
defop(
    "erfc",
    1,
    math.erfc,
    "math.erfc({0})",
    (lambda g, out, a: g * (-_TWO_OVER_SQRT_PI * exp(-(a * a))),),
    "erfc",
    c="erfc({0})",
)
# The inverse hyperbolic functions' derivatives, 1 / sqrt(1 + x*x), 1 / sqrt(x*x - 1) and
# 1 / (1 - x*x), written 1 / hypot(1, x), 1 / (sqrt(x - 1) sqrt(x + 1)) and
# 1 / ((1 - x)(1 + x)): the first two finite beyond |x| = 1e154, where x*x overflows
# (and PyTorch's and JAX's forms answer 0), the last two accurate next to |x| = 1, where
# x*x - 1 cancels (x - 1 and 1 - x are exact there).
defop(
    "arcsinh",
    1,
    math.asinh,
    "math.asinh({0})",
    (lambda g, out, a: div(g, hypot(1.0, a)),),
    "asinh",
    domain=(-5.0, 5.0),
    c="asinh({0})",
)
defop(
    "arccosh",
    1,
    _acosh,
    "math.acosh({0})",
    (lambda g, out, a: div(g, sqrt(a - 1.0) * sqrt(a + 1.0)),),
    "acosh",
    domain=(1.1, 5.0),
    c="acosh({0})",
)
defop(
    "arctanh",
    1,
    _atanh,
    "math.atanh({0})",
    (lambda g, out, a: div(g, (1.0 - a) * (1.0 + a)),),
    "atanh",
    domain=(-0.9, 0.9),
    c="atanh({0})",
)
defop(
    "sigmoid",
    1,
    _sigmoid,
    "(1.0 / (1.0 + math.exp(-{0})))",
    (lambda g, out, a: g * (out * (1.0 - out)),),
    lambda sp, a: 1 / (1 + sp.exp(-a)),
    domain=(-6.0, 6.0),
    c="(1.0 / (1.0 + exp(-{0})))",
    array=_sigmoid_array,
    ufuncs=("expit",),  # (scipy.special.expit, a ufunc of that name)
)
defop(
    "softplus",
    1,
    _softplus,
    "(math.log1p(math.exp(-abs({0}))) + max({0}, 0.0))",
    (lambda g, out, a: g * sigmoid(a),),
    lambda sp, a: sp.log(1 + sp.exp(a)),
    domain=(-6.0, 6.0),
    c="(log1p(exp(-fabs({0}))) + (0.0 > {0} ? 0.0 : {0}))",
    array=_softplus_array,
)
