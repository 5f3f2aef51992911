"""The op table: every primitive defined once.

Each :class:`Op` carries everything a backend needs: how to evaluate it on
floats (with NumPy's semantics: ``1/0`` is ``inf``, ``log(-1)`` is ``nan``,
never a Python exception), its code templates for generated source (Python's
``code``, compiled by Numba, and C99's ``c``, for exported C: each stated
here, neither derived from the other), its vector-Jacobian rule, the name
of its SymPy form and the domain its tests draw inputs from.

Vector-Jacobian rules are written with the generic functions of this module
(``add``, ``mul``, ``div``, ``cos`` ...), which evaluate floats directly and
hand anything else (a tracing ``Value``) back to its own ``_apply``. So the
same rule computes a float in the eager sweep and records a tape in the
reverse-mode transform: the adjoint of a tape is itself a tape.

This module imports nothing of ours.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

INF = math.inf
NAN = math.nan


@dataclass(eq=False)
class Op:
    """One primitive: value, derivative rule, code template, SymPy form."""

    name: str
    arity: int
    eval: Callable[..., float]
    code: str
    vjp: tuple[Callable | None, ...] = ()  # per argument: (g, out, *args) -> adjoint
    sympy: str | Callable | None = None  # a name symbolic.py looks up, or a callable
    domain: tuple[float, float] = (-3.0, 3.0)
    symbol: str | None = None  # infix symbol for printing (+, *, ...)
    smooth: bool = True  # False for ops with kinks (finite differences avoid them)
    opcode: int = field(default=-1, compare=False)
    # per argument: (t, out, *args) -> tangent contribution; empty: from ``vjp``
    jvp: tuple[Callable | None, ...] = field(default=(), compare=False)
    # the C99 template (``<math.h>`` only), stated beside ``code``; None: the op has no
    # C form (``ad.export(..., target="c")`` then says to give one)
    c: str | None = field(default=None, compare=False)
    # a non-smooth op's kinks and jumps: (*operands) -> float, 0.0 on one and of opposite
    # signs on either side of each; None: the operand (one argument) or a - b (two)
    kink: Callable[..., float] | None = field(default=None, compare=False)
    # What the tape passes and the converters know of it, declared here rather than
    # matched by name elsewhere (each exact in float arithmetic unless it says not):
    # a linear function of all its operands together (so 0 where they all are 0)
    linear: bool = field(default=False, compare=False)
    # the operands it is linear in while the others stay fixed (so 0 where one is 0,
    # nan and inf aside): both of x * y, the numerator of x / y
    linear_in: tuple[int, ...] = field(default=(), compare=False)
    # e with op(x, e) == x bit for bit, sign of zero included: 1.0 for * / **, 0.0 for
    # x - 0.0, -0.0 for + (0.0 + -0.0 is 0.0, so 0.0 + x is no identity)
    identity: float | None = field(default=None, compare=False)
    commutative: bool = field(default=False, compare=False)  # op(a, b) == op(b, a)
    # op(op(a, b), c) == op(a, op(b, c)) in exact arithmetic: an n-ary form is a chain
    associative: bool = field(default=False, compare=False)
    involution: bool = field(default=False, compare=False)  # op(op(x)) == x: -(-x)
    # Python's special method that records it (``truediv``: ``__truediv__`` and
    # ``__rtruediv__``), and whether a Value also has a method of its name (``v.sin()``)
    operator: str | None = field(default=None, compare=False)
    method: bool = field(default=True, compare=False)
    # NumPy's ufuncs of other names that apply it (``np.subtract`` is sub)
    ufuncs: tuple[str, ...] = field(default=(), compare=False)

    def __call__(self, *args: Any) -> Any:
        return apply(self, *args)

    def tangent_rule(self, k: int) -> Callable | None:
        """The forward (tangent) rule of argument ``k``: ``(t, out, *args) -> dt``.

        A primitive is a scalar function, so its vector-Jacobian rule is
        ``g * d out / d arg_k``, linear in ``g``: called with the tangent ``t``
        in place of ``g`` it is exactly the forward rule. An op may still give
        its own ``jvp`` (a cheaper form); ``check_grad`` checks both.
        """
        if self.jvp:
            return self.jvp[k]
        return self.vjp[k]

    def switch(self, *xs: float) -> float:
        """Where the operands ``xs`` lie relative to this op's kinks and jumps: 0.0 on
        one, and a sign that changes across each one (finite differences whose
        stencil sees two signs cross one). Smooth ops have none: 1.0."""
        if self.smooth:
            return 1.0
        if self.kink is not None:
            return self.kink(*xs)
        return xs[0] if len(xs) == 1 else xs[0] - xs[1]

    def __repr__(self) -> str:
        return f"Op({self.name!r})"


# ---------------------------------------------------------------- dispatch

_NUMBER = (float, int)


def apply(op: Op, *args: Any) -> Any:
    """Apply ``op``: floats are evaluated, anything else records itself."""
    for a in args:
        if not isinstance(a, _NUMBER):
            if hasattr(a, "_apply"):
                return a._apply(op, args)
            if isinstance(a, np.ndarray):  # (a tracing array after it records)
                tracer = next((b for b in args if hasattr(b, "_apply")), None)
                return _apply_array(op, args) if tracer is None else tracer._apply(op, args)
            if isinstance(a, (np.floating, np.integer, bool)):
                continue
            raise TypeError(
                f"adcompile.{op.name}: unsupported operand type {type(a).__name__!r}; "
                "expected a number, an adcompile.Value or a NumPy array of them"
            )
    return op.eval(*(float(a) for a in args))


def _apply_array(op: Op, args: tuple) -> np.ndarray:
    """Element-wise application over NumPy arrays (object or float)."""
    arrays = [np.asarray(a) for a in args]
    if all(a.dtype != object for a in arrays):
        return np.vectorize(op.eval, otypes=[float])(*arrays)
    out = np.vectorize(lambda *xs: apply(op, *xs), otypes=[object])(*arrays)
    kind = next(type(a) for a in args if isinstance(a, np.ndarray))
    return out.view(kind) if kind is not np.ndarray else out  # keep ValueArray


# ---------------------------------------------------------------- float helpers


def _numpy_fallback(pyfunc: Callable, npfunc: Callable) -> Callable[..., float]:
    """Fast Python float function; where Python would raise, NumPy's answer."""

    def f(*xs: float) -> float:
        try:
            r = pyfunc(*xs)
        except (ZeroDivisionError, OverflowError, ValueError):
            r = None
        if r is None or isinstance(r, complex):
            with np.errstate(all="ignore"):
                return float(npfunc(*(np.float64(x) for x in xs)))
        return r

    f.__name__ = getattr(npfunc, "__name__", "f")
    return f


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


def _sign(x: float) -> float:
    return 1.0 if x > 0.0 else (-1.0 if x < 0.0 else x * 0.0)


def _step(x: float) -> float:
    return 1.0 if x > 0.0 else (0.0 if x == x else x)


def _relu(x: float) -> float:
    return x if x > 0.0 else (0.0 if x == x else x)


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


_add = float.__add__
_sub = float.__sub__
_mul = float.__mul__
_neg = float.__neg__
_div = _numpy_fallback(lambda a, b: a / b, np.divide)
_pow = _numpy_fallback(lambda a, b: a**b if a != -INF else None, np.power)
_exp = _numpy_fallback(math.exp, np.exp)
_log = _numpy_fallback(math.log, np.log)
_log1p = _numpy_fallback(math.log1p, np.log1p)
_expm1 = _numpy_fallback(math.expm1, np.expm1)
_sqrt = _numpy_fallback(math.sqrt, np.sqrt)
_sin = _numpy_fallback(math.sin, np.sin)
_cos = _numpy_fallback(math.cos, np.cos)
_tan = _numpy_fallback(math.tan, np.tan)
_asin = _numpy_fallback(math.asin, np.arcsin)
_acos = _numpy_fallback(math.acos, np.arccos)
_sinh = _numpy_fallback(math.sinh, np.sinh)
_cosh = _numpy_fallback(math.cosh, np.cosh)
_floor = _rounding(math.floor, "floor")
_ceil = _rounding(math.ceil, "ceil")
_trunc = _rounding(math.trunc, "trunc")
_rint = _rounding(round, "rint")  # Python's round: halves to even, as np.rint
_floor_divide = _numpy_fallback(operator.floordiv, np.floor_divide)
_remainder = _numpy_fallback(operator.mod, np.remainder)  # the divisor's sign, as Python


# ---------------------------------------------------------------- the table

OPS: dict[str, Op] = {}
#: Python's special-method names (``"add"``, ``"truediv"``, ``"neg"`` ...) -> the op
#: that operator records.
OPERATORS: dict[str, Op] = {}
#: NumPy's ufunc names that are not an op's name -> the op's (``Op.ufuncs``).
UFUNC_ALIASES: dict[str, str] = {}


def register(op: Op) -> Op:
    """Add ``op`` to the table (the one call built-in and user ops both use)."""
    if op.name in OPS:
        raise ValueError(f"an op named {op.name!r} is already defined; pick another name")
    if op.operator is not None and op.operator in OPERATORS:
        raise ValueError(f"the operator {op.operator!r} already records an op")
    op.opcode = len(OPS)
    OPS[op.name] = op
    if op.operator is not None:
        OPERATORS[op.operator] = op
    for name in op.ufuncs:
        UFUNC_ALIASES.setdefault(name, op.name)
    return op


def ufunc_op(name: str) -> Op | None:
    """The op NumPy's ufunc ``name`` applies: the op of that name (``np.sin``, ``np.maximum``,
    a user's ``erf``) or of that alias (``np.subtract``); None for none."""
    return OPS.get(UFUNC_ALIASES.get(name, name))


def defop(
    name: str,
    arity: int,
    eval: Callable[..., float],
    code: str,
    vjp: tuple[Callable | None, ...],
    sympy: str | Callable | None = None,
    domain: tuple[float, float] = (-3.0, 3.0),
    **kw: Any,
) -> Op:
    """Define and register one primitive."""
    return register(Op(name, arity, eval, code, vjp, sympy, domain, **kw))


# Each rule is ``(g, out, *args) -> contribution`` for one argument; ``None``
# marks an argument with derivative zero. Rules use the generic functions
# defined below, so they run on floats and record on Values alike.
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
defop(
    "relu",
    1,
    _relu,
    "max({0}, 0.0)",
    (lambda g, out, a: g * step(a),),
    lambda sp, a: sp.Max(a, 0),
    smooth=False,
    c="(0.0 > {0} ? 0.0 : {0})",
)
# maximum/minimum split a tie evenly between both arguments, as PyTorch does.
defop(
    "maximum",
    2,
    _maximum,
    "max({0}, {1})",
    (
        lambda g, out, a, b: g * (0.5 + 0.5 * sign(a - b)),
        lambda g, out, a, b: g * (0.5 - 0.5 * sign(a - b)),
    ),
    "Max",
    smooth=False,
    associative=True,
    c="({1} > {0} ? {1} : {0})",
)
defop(
    "minimum",
    2,
    _minimum,
    "min({0}, {1})",
    (
        lambda g, out, a, b: g * (0.5 - 0.5 * sign(a - b)),
        lambda g, out, a, b: g * (0.5 + 0.5 * sign(a - b)),
    ),
    "Min",
    smooth=False,
    associative=True,
    c="({1} < {0} ? {1} : {0})",
)
# Piecewise-constant helpers used by the rules above; their derivative is zero.
defop(
    "sign",
    1,
    _sign,
    "(1.0 if {0} > 0.0 else (-1.0 if {0} < 0.0 else 0.0))",
    (None,),
    "sign",
    smooth=False,
    c="({0} > 0.0 ? 1.0 : ({0} < 0.0 ? -1.0 : 0.0))",
)
defop(
    "step",
    1,
    _step,
    "(1.0 if {0} > 0.0 else 0.0)",
    (None,),
    lambda sp, a: sp.Heaviside(a, 0),
    smooth=False,
    c="({0} > 0.0 ? 1.0 : 0.0)",
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

#: The ops defined here (a user's ``ad.primitive`` comes after them in ``OPS``).
BUILTIN: tuple[str, ...] = tuple(OPS)


def _generic(name: str) -> Callable:
    op = OPS[name]

    def f(*args: Any) -> Any:
        return apply(op, *args)

    f.__name__ = name
    f.__doc__ = f"Element-wise {name}: floats, Values and arrays of them."
    return f


add, sub, mul, div, pow, exp, log, sqrt = map(_generic, "add sub mul div pow exp log sqrt".split())
sin, cos, sinh, cosh, sigmoid, sign, step = map(
    _generic, "sin cos sinh cosh sigmoid sign step".split()
)
absolute, floor_divide = _generic("abs"), _generic("floor_divide")


def nonzero(x: Any) -> Any:
    """1.0 where ``x != 0``, 0.0 where ``x == 0`` (nan for nan): a mask for derivative
    rules, recorded on Values as ``abs(sign(x))`` (derivative 0)."""
    return absolute(sign(x))
