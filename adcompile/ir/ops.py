"""The op table's machinery: the :class:`Op` record, dispatch, registration and
the generic functions derivative rules are written with.

Each :class:`Op` carries everything a backend needs: how to evaluate it on
floats (with NumPy's semantics: ``1/0`` is ``inf``, ``log(-1)`` is ``nan``,
never a Python exception; :func:`numpy_fallback` makes such a function), its
code templates for generated source (Python's ``code``, compiled by Numba, and
C99's ``c``, for exported C: each stated with the op, neither derived from the
other), its vector-Jacobian rule, the name of its SymPy form and the domain its
tests draw inputs from. :func:`defop` defines and registers one in ``OPS``.

The built-in ops are defined in the op table's modules beside this one, one
family each: ``arithmetic`` (+ - * / ** abs, square, reciprocal), ``elementary``
(exponentials, logarithms, roots, trigonometric and hyperbolic functions) and
``piecewise`` (relu, maximum, minimum, sign, step, rounding, // and %). Each
imports this module; the package ``adcompile.ir`` imports them, so ``OPS`` is
complete whenever this module is imported (Python runs a package before any
module of it).

Vector-Jacobian rules are written with the generic functions of this module
(``add``, ``mul``, ``div``, ``cos`` ...), which evaluate floats directly and
hand anything else (a tracing ``Value``) back to its own ``_apply``. So the
same rule computes a float in the eager sweep and records a tape in the
reverse-mode transform: the adjoint of a tape is itself a tape.

This module imports nothing of ours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


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
    # where NumPy has no ufunc of it: its form on float arrays, in NumPy calls (array
    # code calls it; else it would be ``np.vectorize`` of ``eval``, a Python call each)
    array: Callable[..., Any] | None = field(default=None, compare=False)

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
            if isinstance(a, np.ndarray):  # (a tracing array after it records; a
                # Value among an array of Values is one of its elements)
                tracer = next(
                    (b for b in args if hasattr(b, "_apply") and hasattr(b, "shape")), None
                )
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


def numpy_fallback(pyfunc: Callable, npfunc: Callable) -> Callable[..., float]:
    """A float function with NumPy's semantics: ``pyfunc`` (fast), and NumPy's ``npfunc``
    where Python would raise (``math.log(0)``, ``1 / 0``, ``math.exp(1000)``) or answer a
    complex number."""

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


# ---------------------------------------------------------------- generic functions
#
# What derivative rules are written with: each applies its op (looked up when called,
# as the table's modules register the ops after this module is loaded).


def _generic(name: str) -> Callable:
    def f(*args: Any) -> Any:
        return apply(OPS[name], *args)

    f.__name__ = name
    f.__doc__ = f"Element-wise {name}: floats, Values and arrays of them."
    return f


add, sub, mul, div, pow, exp, log, sqrt = map(_generic, "add sub mul div pow exp log sqrt".split())
sin, cos, sinh, cosh, sigmoid, sign, step = map(
    _generic, "sin cos sinh cosh sigmoid sign step".split()
)
absolute, floor_divide, hypot = _generic("abs"), _generic("floor_divide"), _generic("hypot")


def nonzero(x: Any) -> Any:
    """1.0 where ``x != 0``, 0.0 where ``x == 0`` (nan for nan): a mask for derivative
    rules, recorded on Values as ``abs(sign(x))`` (derivative 0)."""
    return absolute(sign(x))
