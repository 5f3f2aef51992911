"""Tape <-> SymPy: the module that imports SymPy (``adcompile.symbolic_transforms``
joins it with tracing and compiling: ``to_sympy(f, *args)``, ``sympy_value_and_grad``).

``tape_to_sympy`` turns a tape into SymPy expressions in one forward loop,
one expression per slot, so shared subexpressions stay shared and deep tapes
never recurse. ``from_sympy`` goes the other way: it walks SymPy's expression
DAG with an explicit stack and a cache keyed by subexpression and records
our primitives, which makes reverse mode on a SymPy expression possible
(``sympy_value_and_grad``) without ever expanding a symbolic derivative.

The functions ``from_sympy`` understands come from the op table: every op
whose SymPy form is a name (``"sin"``, ``"Abs"``, ``"Max"`` ... and those of
user-defined primitives) maps back to that op, and an undefined SymPy
function named after an op (what ``tape_to_sympy`` makes for ops without a
SymPy form) maps back to it too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
from sympy.codegen import cfunctions

from ..ir.ops import OPS, Op
from ..ir.passes import prune
from ..ir.tape import CONST, INPUT, Node, Tape

__all__ = ["tape_to_sympy", "from_sympy", "as_symbols", "sympy_form"]


# ------------------------------------------------------------ tape -> SymPy


def sympy_constant(value: float) -> sympy.Expr:
    """A float as SymPy reads it best: an Integer when exact, else a Float."""
    if math.isfinite(value):
        if value == int(value) and abs(value) < 2**53:
            return sympy.Integer(int(value))
        return sympy.Float(value)
    if value != value:
        return sympy.nan
    return sympy.oo if value > 0 else -sympy.oo


# ------------------------------------------------------------ step functions
#
# SymPy leaves the derivative of floor, ceiling and Mod unevaluated (a sum of deltas at
# the jumps), so sympy.diff of a tape using them could not be evaluated anywhere. The
# tape's SymPy forms are these subclasses (printed as SymPy's own), whose derivative is
# the one the ops' rules use, as in JAX: 0 for the rounding functions and for x // y,
# 1 and -floor(x / y) for Mod(x, y). ``from_sympy`` maps SymPy's own classes and these
# to the same ops.


class floor(sympy.floor):  # named as SymPy's, so that it prints as SymPy's
    """SymPy's floor, with derivative 0 (JAX's convention, also at the integers)."""

    def fdiff(self, argindex: int = 1) -> sympy.Expr:
        return sympy.S.Zero


class ceiling(sympy.ceiling):
    """SymPy's ceiling, with derivative 0 (JAX's convention, also at the integers)."""

    def fdiff(self, argindex: int = 1) -> sympy.Expr:
        return sympy.S.Zero


class _Rounding(sympy.Function):
    """A rounding function of one real argument (SymPy has no trunc or rint):
    evaluated on numbers exactly, derivative 0."""

    nargs = 1

    @classmethod
    def _round(cls, x: sympy.Number) -> sympy.Integer:
        raise NotImplementedError

    @classmethod
    def eval(cls, x: sympy.Expr) -> sympy.Expr | None:
        if x.is_Number:
            if x.is_finite is False or x is sympy.nan:
                return x
            return cls._round(sympy.Rational(x))  # (exact: a Float is not equal to 1/2)
        return None

    def fdiff(self, argindex: int = 1) -> sympy.Expr:
        return sympy.S.Zero

    def _eval_evalf(self, prec: int) -> sympy.Expr | None:
        x = self.args[0].evalf(prec)
        return self.func(x).evalf(prec) if x.is_Number else None

    def _eval_is_integer(self) -> bool | None:
        return self.args[0].is_finite


class trunc(_Rounding):
    """Rounding toward zero (NumPy's trunc), derivative 0."""

    @classmethod
    def _round(cls, x: sympy.Number) -> sympy.Integer:
        return sympy.floor(x) if x >= 0 else sympy.ceiling(x)


class rint(_Rounding):
    """Rounding to the nearest integer, halves to even (NumPy's rint), derivative 0."""

    @classmethod
    def _round(cls, x: sympy.Number) -> sympy.Integer:
        low = sympy.floor(x)
        rest = x - low
        half = sympy.Rational(1, 2)
        return low + 1 if rest > half or (rest == half and low % 2 == 1) else low


class Mod(sympy.Mod):
    """SymPy's Mod (Python's remainder: the divisor's sign), with the derivatives of
    ``x - y * floor(x / y)``: 1 in x and -floor(x / y) in y (as JAX's)."""

    def fdiff(self, argindex: int = 1) -> sympy.Expr:
        if argindex == 1:
            return sympy.S.One
        p, q = self.args
        return -floor(p / q)


def floor_divide(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    """``a // b``: floor(a / b), derivative 0."""
    return floor(a / b)


#: SymPy forms named by ops (``Op.sympy``) that are looked up here before in ``sympy``.
FORMS: dict[str, Callable[..., sympy.Expr]] = {
    "floor": floor,
    "ceiling": ceiling,
    "trunc": trunc,
    "rint": rint,
    "Mod": Mod,
    "floor_divide": floor_divide,
}


def sympy_form(op: Op) -> Callable[..., sympy.Expr]:
    """How ``op`` applies to SymPy expressions (an undefined function if it has no form)."""
    form = op.sympy
    if form is None:
        return sympy.Function(op.name)
    if isinstance(form, str):
        found = FORMS.get(form) or getattr(sympy, form, None)
        if not callable(found):
            raise TypeError(f"op {op.name!r}: sympy={form!r} names no SymPy function")
        return found
    return lambda *args: form(sympy, *args)


def limit_at(expr: sympy.Expr, point: dict[sympy.Symbol, float]) -> tuple[float, str]:
    """``expr`` at ``point`` as a float, and how it was found (``""``: by substitution).

    Where substitution is undefined there (``y * x**y / x`` or ``x**y * log(x)`` at
    ``x = 0``: SymPy's derivatives of a tape are often written so), the limit: the other
    symbols set to their (exact) values, the two-sided limit in one symbol, tried for
    each symbol in turn until one is a finite real number; the second element then says
    which (``"limit x -> 0"``). nan if none is.
    """
    subs = {s: sympy.Float(float(v), 30) for s, v in point.items()}
    try:
        z = complex(expr.evalf(30, subs=subs))
        if math.isfinite(z.real) and abs(z.imag) <= 1e-12 * max(1.0, abs(z.real)):
            return z.real, ""
    except (TypeError, ValueError, ZeroDivisionError):
        pass
    exact = {s: sympy.Rational(float(v)) for s, v in point.items()}
    for s in sorted(expr.free_symbols & set(exact), key=str):
        rest = expr.subs({t: v for t, v in exact.items() if t != s})
        for direction in ("+-", "+", "-"):
            try:
                found = sympy.limit(rest, s, exact[s], dir=direction)
            except (NotImplementedError, ValueError, TypeError):
                continue
            if found.is_real and found.is_finite:
                if direction != "+-":  # one side only: take it if the other agrees
                    other = "-" if direction == "+" else "+"
                    try:
                        if sympy.limit(rest, s, exact[s], dir=other) != found:
                            break
                    except (NotImplementedError, ValueError, TypeError):
                        break
                return float(found), f"limit {s} -> {float(point[s]):g}"
            break
    return math.nan, ""


#: Slots deeper than this are built unevaluated: SymPy's automatic simplification
#: asks recursive questions (``is_number``, ordering) that would exceed Python's
#: recursion limit on a deep tape.
EVALUATE_DEPTH = 100


def tape_to_sympy(tape: Tape, inputs: Sequence[Any] | None = None) -> list[sympy.Expr]:
    """The tape's outputs as SymPy expressions, one per output.

    The inputs are symbols named after ``tape.names`` (``x``, ``x_0, x_1 ...``)
    unless ``inputs`` gives other expressions to substitute for them. Each slot
    is built once from its operands' expressions, so shared subexpressions stay
    shared; slots nested deeper than ``EVALUATE_DEPTH`` are left unevaluated.
    """
    if inputs is None:
        inputs = [sympy.Symbol(name) for name in tape.names]
    if len(inputs) != len(tape.inputs):
        raise ValueError(f"this tape takes {len(tape.inputs)} inputs, got {len(inputs)}")
    n = len(tape.nodes)
    vals: list[Any] = [None] * n
    depth = [0] * n
    for pos, i in enumerate(tape.inputs):
        vals[i] = sympy.sympify(inputs[pos])
    forms: dict[str, Callable] = {}
    for i, node in enumerate(tape.nodes):
        op = node.op
        if op == CONST:
            vals[i] = sympy_constant(node.value)
        elif op != INPUT:
            form = forms.get(op.name)
            if form is None:
                form = forms[op.name] = sympy_form(op)
            args = [vals[a] for a in node.args]
            d = depth[i] = 1 + max((depth[a] for a in node.args), default=0)
            if d <= EVALUATE_DEPTH:
                vals[i] = form(*args)
            elif op.name in ("add", "sub"):  # a long sum: one flat Add, not a deep chain
                vals[i] = sympy.Add(
                    *_terms(args[0]), *_terms(args[1], op.name == "sub"), evaluate=False
                )
            else:
                with sympy.evaluate(False):
                    vals[i] = form(*args)
    return [vals[o] for o in tape.outputs]


def _terms(e: Any, negate: bool = False) -> tuple:
    """The terms of ``e`` as a sum's (its own where it is an Add), negated or not."""
    terms = e.args if isinstance(e, sympy.Add) else (e,)
    return tuple(sympy.Mul(-1, t, evaluate=False) for t in terms) if negate else terms


# ------------------------------------------------------------ SymPy -> tape


def _function_table() -> dict[Any, Op]:
    """SymPy function class -> op, read from the op table's SymPy names."""
    table: dict[Any, Op] = {cfunctions.log1p: OPS["log1p"], cfunctions.expm1: OPS["expm1"]}
    for op in OPS.values():
        if isinstance(op.sympy, str):
            for form in (FORMS.get(op.sympy), getattr(sympy, op.sympy, None)):
                if isinstance(form, type):
                    table.setdefault(form, op)
    return table


def _number(expr: sympy.Expr) -> float:
    try:
        return float(expr)
    except OverflowError:
        return math.inf if expr > 0 else -math.inf
    except TypeError:
        raise TypeError(f"from_sympy: the constant {expr} is not a real number") from None


def _negative_power(e: sympy.Basic) -> bool:
    """``b**-k`` with a numeric ``k``: a division by ``b**k``."""
    return e.is_Pow and e.exp.is_Number and e.exp.is_extended_negative


def _unsupported(expr: sympy.Basic) -> TypeError:
    names = sorted({f.__name__ for f in _function_table()} | {"Heaviside"})
    what = getattr(expr.func, "__name__", type(expr).__name__)
    hint = ""
    if isinstance(expr, sympy.Function) and not isinstance(expr, sympy.Piecewise):
        hint = f", or define it with adcompile.primitive(..., sympy={what!r})"
    return TypeError(
        f"from_sympy: unsupported SymPy function {what!r} in {expr}; supported are "
        f"+ - * / **, numbers and {', '.join(names)}. Rewrite the expression with "
        f"these{hint}"
    )


class _Converter:
    """SymPy DAG -> tape nodes, iteratively: each subexpression is converted once.

    No new SymPy expressions are made on the way (building one would make SymPy
    walk it recursively): ``x - 2*y`` reuses the slot of the magnitude ``2*y``
    that converting the product ``-2*y`` recorded, and ``x/y**2`` divides by
    a power of ``y``'s slot.
    """

    def __init__(self, symbols: Sequence[sympy.Symbol]) -> None:
        self.nodes = [Node(INPUT) for _ in symbols]
        self.consts: dict[str, int] = {}
        self.slot: dict[sympy.Basic, int] = {s: k for k, s in enumerate(symbols)}
        self.magnitude: dict[sympy.Basic, int] = {}  # product with a negative sign -> |product|
        self.table = _function_table()
        self.index = {s: k for k, s in enumerate(symbols)}
        self.order_of: dict[sympy.Basic, tuple] = {}
        self.spans: dict[sympy.Basic, tuple[int, int]] = {}

    # -- recording, with constant folding

    def const(self, value: float) -> int:
        key = repr(value)
        slot = self.consts.get(key)
        if slot is None:
            slot = self.consts[key] = len(self.nodes)
            self.nodes.append(Node(CONST, (), value))
        return slot

    def op(self, name: str, *args: int) -> int:
        op = OPS[name]
        if all(self.nodes[a].op == CONST for a in args):
            return self.const(op.eval(*(self.nodes[a].value for a in args)))
        self.nodes.append(Node(op, args))
        return len(self.nodes) - 1

    def chain(self, name: str, slots: Sequence[int]) -> int:
        acc = slots[0]
        for s in slots[1:]:
            acc = self.op(name, acc, s)
        return acc

    def power(self, base: int, k: float) -> int:
        if k == 1.0:
            return base
        if k == 0.5:
            return self.op("sqrt", base)
        if k == 2.0:
            return self.op("mul", base, base)
        return self.op("pow", base, self.const(k))

    # -- the walk

    def function(self, e: sympy.Basic) -> Op | str | None:
        """The op a SymPy function application maps to (``"heaviside"`` for Heaviside)."""
        if isinstance(e, sympy.Heaviside):
            return "heaviside"
        op = self.table.get(e.func)
        if op is None and isinstance(e, sympy.core.function.AppliedUndef):
            op = OPS.get(e.func.__name__)
        n = len(e.args)
        if op is not None and (n == op.arity or op.associative and n > 2):
            return op  # Max(a, b, c): a chain of maximum
        return None

    def children(self, e: sympy.Basic) -> tuple:
        """The subexpressions whose slots ``e`` is computed from."""
        if e.is_Mul:
            return tuple(f.base if _negative_power(f) else f for f in self.ordered(e))
        if e.is_Pow:
            return (e.base,) if e.exp.is_Number else (e.base, e.exp)
        return self.ordered(e) if e.is_Add else e.args

    def ordered(self, e: sympy.Basic) -> tuple:
        """The terms of a sum or product in the order of the symbols they use.

        SymPy sorts ``x0 + x1 + ... + x10`` by name (``x0, x1, x10, x11 ...``);
        recording the terms in the symbols' order keeps a loop's repetitions
        strided, so that the tape folds into loops.
        """
        cached = self.order_of.get(e)
        if cached is None:
            span = self.span

            def key(t: sympy.Basic) -> tuple:
                lo, hi = span(t)  # by first symbol, then by shape (the same every time)
                return (lo, hi, type(t).__name__)

            cached = self.order_of[e] = tuple(sorted(e.args, key=key))
        return cached

    def span(self, root: sympy.Basic) -> tuple[int, int]:
        """The lowest and highest index of the given symbols ``root`` uses
        (``(-1, -1)`` for none); one visit per subexpression of the DAG."""
        spans = self.spans
        stack = [root]
        while stack:
            e = stack[-1]
            if e in spans:
                stack.pop()
                continue
            if e.is_Symbol or not e.args:
                k = self.index.get(e, -1)
                spans[e] = (k, k)
                stack.pop()
                continue
            pending = [a for a in e.args if a not in spans]
            if pending:
                stack.extend(pending)
                continue
            used = [spans[a] for a in e.args if spans[a][0] >= 0]
            spans[e] = (min(u[0] for u in used), max(u[1] for u in used)) if used else (-1, -1)
            stack.pop()
        return spans[root]

    def convert(self, root: sympy.Basic) -> int:
        slot = self.slot
        stack = [root]
        while stack:
            e = stack[-1]
            if e in slot:
                stack.pop()
                continue
            if e.is_Atom or e.is_Number or e.is_NumberSymbol:
                if e.is_Symbol:
                    same_name = any(str(s) == str(e) for s in self.slot if s.is_Symbol)
                    raise ValueError(
                        f"from_sympy: the expression uses the symbol {e}, which is not "
                        "among the symbols given; list every free symbol"
                        + (" (one named so is given, with other assumptions)" if same_name else "")
                    )
                slot[e] = self.const(_number(e))
                stack.pop()
                continue
            if not (e.is_Add or e.is_Mul or e.is_Pow) and self.function(e) is None:
                try:  # a function of numbers, such as erf(1), is a constant
                    slot[e] = self.const(float(e))
                except (TypeError, ValueError):
                    raise _unsupported(e) from None
                stack.pop()
                continue
            pending = [k for k in self.children(e) if k not in slot]
            if pending:
                stack.extend(reversed(pending))
                continue
            slot[e] = self.emit(e)
            stack.pop()
        return slot[root]

    def emit(self, e: sympy.Basic) -> int:
        slot = self.slot
        if e.is_Add:
            terms = []  # (subtract, slot)
            for t in self.ordered(e):
                if t.is_Number:
                    v = _number(t)
                    terms.append((v < 0, self.const(abs(v))))
                elif t in self.magnitude:
                    terms.append((True, self.magnitude[t]))
                else:
                    terms.append((False, slot[t]))
            first = next((k for k, (neg, _) in enumerate(terms) if not neg), 0)
            neg, acc = terms.pop(first)
            acc = self.op("neg", acc) if neg else acc
            for neg, s in terms:
                acc = self.op("sub" if neg else "add", acc, s)
            return acc
        if e.is_Mul:
            negative, num, den = False, [], []
            for f in self.ordered(e):
                if f.is_Rational:
                    p, q = int(f.p), int(f.q)
                    negative ^= p < 0
                    if abs(p) != 1:
                        num.append(self.const(float(abs(p))))
                    if q != 1:
                        den.append(self.const(float(q)))
                elif f.is_Number:
                    v = _number(f)
                    negative ^= v < 0
                    num.append(self.const(abs(v)))
                elif _negative_power(f):
                    den.append(self.power(slot[f.base], -_number(f.exp)))
                else:
                    num.append(slot[f])
            acc = self.chain("mul", num) if num else self.const(1.0)
            if den:
                acc = self.op("div", acc, self.chain("mul", den))
            if not negative:
                return acc
            self.magnitude[e] = acc
            return self.op("neg", acc)
        if e.is_Pow:
            base, x = slot[e.base], e.exp
            if not x.is_Number:
                return self.op("pow", base, slot[x])
            k = _number(x)
            if k < 0:
                return self.op("div", self.const(1.0), self.power(base, -k))
            return self.power(base, k)
        args = [slot[a] for a in e.args]
        op = self.function(e)
        if op == "heaviside":
            return self.heaviside(e, args)
        return self.chain(op.name, args) if op.associative else self.op(op.name, *args)

    def heaviside(self, e: sympy.Heaviside, args: list[int]) -> int:
        """Heaviside(x, h0) with ``step`` (which is 0 at 0): exact for any h0."""
        h0 = _number(e.args[1]) if len(e.args) > 1 else 0.5
        pos = self.op("step", args[0])
        if h0 == 0.0:
            return pos
        neg = self.op("step", self.op("neg", args[0]))
        at_zero = self.op("sub", self.op("sub", self.const(1.0), pos), neg)
        return self.op("add", pos, self.op("mul", self.const(h0), at_zero))


def as_symbols(symbols: Any) -> list[sympy.Symbol]:
    """``symbols`` (a Symbol or a sequence of them) as a list; TypeError/ValueError if not."""
    if isinstance(symbols, str):
        raise TypeError(
            f"from_sympy: symbols must be SymPy Symbols, not the string {symbols!r}; make "
            f"them with sympy.symbols({symbols!r})"
        )
    try:
        syms = [symbols] if isinstance(symbols, sympy.Basic) else list(symbols)
    except TypeError:
        syms = [symbols]
    for s in syms:
        if not isinstance(s, sympy.Symbol):
            raise TypeError(
                f"from_sympy: symbols must be SymPy Symbols (one, or a list of them), got "
                f"{s!r}; make them with sympy.symbols('x y')"
            )
    if len(set(syms)) != len(syms):
        raise ValueError("from_sympy: the same symbol is listed twice")
    return syms


#: What ``from_sympy`` takes, for its error messages.
EXPECTED = (
    "from_sympy(expr, symbols) expects a SymPy expression or a string SymPy can parse "
    "(such as 'x**2 + sin(y)'), or a list of them, and the SymPy Symbols it uses "
    "(sympy.symbols('x y'))"
)


def _as_expression(e: Any) -> sympy.Expr:
    """``e`` as a SymPy expression: TypeError if it is not one (ValueError for a string)."""
    if isinstance(e, sympy.Expr):
        return e
    try:
        expr = sympy.sympify(e)
    except (sympy.SympifyError, SyntaxError, TypeError):
        if isinstance(e, str):
            raise ValueError(f"{EXPECTED}; SymPy cannot parse {e!r}") from None
        raise TypeError(f"{EXPECTED}; got {type(e).__name__} {e!r}") from None
    if not isinstance(expr, sympy.Expr):
        error = ValueError if isinstance(e, str) else TypeError
        raise error(f"{EXPECTED}; got {e!r}, of type {type(expr).__name__}, not an expression")
    return expr


def from_sympy(expr: Any, symbols: Any) -> Tape:
    """A tape computing ``expr`` (or a sequence of expressions) with ``symbols`` as inputs.

    ``expr`` is a SymPy expression or a string SymPy parses into one; TypeError otherwise
    (ValueError for a string).
    """
    syms = as_symbols(symbols)
    exprs = list(expr) if isinstance(expr, (list, tuple, sympy.MatrixBase)) else [expr]
    conv = _Converter(syms)
    outputs = [conv.convert(_as_expression(e)) for e in exprs]
    tape = Tape(conv.nodes, list(range(len(syms))), outputs, names=[str(s) for s in syms])
    return prune(tape)  # drops what converting left unused (the sign of ``-y`` in ``x - y``)
