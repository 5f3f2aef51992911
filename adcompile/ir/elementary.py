"""The op table, elementary functions: exponentials and logarithms, roots,
trigonometric and hyperbolic functions, and the smooth activations (sigmoid,
softplus).

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

import numpy as np

from .ops import cos, cosh, defop, div, exp, numpy_fallback, sigmoid, sin, sinh, sqrt


def _sigmoid(x: float) -> float:
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    if x < 0.0:
        e = math.exp(x)
        return e / (1.0 + e)
    return x  # nan


def _softplus(x: float) -> float:
    if math.isinf(x):
        return x if x > 0 else 0.0
    return math.log1p(math.exp(-abs(x))) + max(x, 0.0)


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


defop("exp", 1, _exp, "math.exp({0})", (lambda g, out, a: g * out,), "exp", c="exp({0})")
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
defop(
    "sigmoid",
    1,
    _sigmoid,
    "(1.0 / (1.0 + math.exp(-{0})))",
    (lambda g, out, a: g * (out * (1.0 - out)),),
    lambda sp, a: 1 / (1 + sp.exp(-a)),
    domain=(-6.0, 6.0),
    c="(1.0 / (1.0 + exp(-{0})))",
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
)
