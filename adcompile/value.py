"""``Value``: the micrograd-compatible scalar that records what is done to it.

A Value holds its op and its operands, nothing else: no closure that points
back at the Value itself, so a dropped graph is freed by reference counting
alone. ``backward()`` lays the graph out as a tape and runs the tape's
reverse sweep. The same Values, made while tracing, become a tape for the
compiler (``build_tape``); comparisons made then are kept as guards.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import numbers
import operator
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple

import numpy as np

from . import ops
from .ops import OPS, Op
from .tape import CONST, INPUT, Guard, Node, Tape

_serial = itertools.count()


class TraceState:
    """What a trace collects besides the graph: its comparisons and source lines."""

    def __init__(self) -> None:
        self.guards: list[tuple[str, Value, Value, bool, str]] = []
        self.where: dict[int, str] = {}  # Value serial -> the user's line that made it


class NonFiniteError(FloatingPointError):
    """Under ``debug_nans``: a primitive made nan or inf from finite inputs."""


class Mode(NamedTuple):
    """Per-context settings (each thread and task has its own)."""

    grad: bool = True  # record operations (False inside no_grad)
    trace: TraceState | None = None  # set while a transform traces a function
    nans: bool = False  # raise NonFiniteError at the first nan/inf


_MODE: ContextVar[Mode] = ContextVar("adcompile_mode", default=Mode())  # noqa: B039 (immutable)


def debug_nans_enabled() -> bool:
    """Whether ``debug_nans`` is on in this context."""
    return _MODE.get().nans


def nonfinite_error(
    op: Op, inputs: Sequence[float], result: float, where: str, context: str = ""
) -> NonFiniteError:
    """The error ``debug_nans`` raises, naming the op, its inputs and the user's line."""
    args = ", ".join(repr(x) for x in inputs)
    return NonFiniteError(
        f"{op.name}({args}) = {result!r}{context} at {where}: the first non-finite value "
        "made from finite inputs. Check the inputs against the op's domain (for example "
        "log or sqrt of a negative number, division by zero, exp overflow); outside "
        "ad.debug_nans() such values follow NumPy (nan/inf) without an error"
    )


_LIBRARY_FRAMES = ("adcompile.", "numpy.")


def _caller_line(depth: int = 2) -> str:
    """``file:line`` of the first frame outside adcompile (the user's code)."""
    f = sys._getframe(depth)
    while f is not None and f.f_globals.get("__name__", "").startswith(_LIBRARY_FRAMES):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"


def _bad_operand(other: Any, what: str) -> TypeError:
    return TypeError(
        f"unsupported operand type for {what}: Value and {type(other).__name__!r}; "
        "use a number (int or float) or an adcompile.Value"
        + (" (convert text with float(...) first)" if isinstance(other, (str, bytes)) else "")
    )


def _as_float(x: Any) -> float:
    if isinstance(x, numbers.Real) and not isinstance(x, Value):
        return float(x)
    if isinstance(x, np.ndarray) and x.size == 1 and x.dtype != object:
        return float(x.reshape(()))
    raise TypeError(
        f"Value() takes a real number, not {type(x).__name__!r}"
        + ("; convert text with float(...) first" if isinstance(x, (str, bytes)) else "")
        + (
            "; a Value is already a Value: use it as it is, or v.detach()"
            if isinstance(x, Value)
            else ""
        )
    )


_new = object.__new__


def _result(op: Op, operands: tuple, data: float) -> Value:
    """The Value ``op`` made from ``operands``; it records them if any takes a gradient."""
    out = _new(Value)
    out.data = data
    out.grad = 0.0
    out.label = ""
    out._adj = None
    out._serial = next(_serial)
    mode = _MODE.get()
    if mode is not _DEFAULT_MODE:
        if mode.nans and not math.isfinite(data) and all(math.isfinite(v.data) for v in operands):
            raise nonfinite_error(op, [v.data for v in operands], data, _caller_line())
        if mode.trace is not None:
            mode.trace.where[out._serial] = _caller_line()
        if not mode.grad:
            operands = ()
    for v in operands:
        if v.requires_grad:
            out._fn = op
            out._prev = operands
            out.requires_grad = True
            return out
    out._fn = None
    out._prev = ()
    out.requires_grad = False
    return out


def _binop(name: str, reflected: bool = False) -> Callable[[Value, Any], Value]:
    """The operator method for a binary op (``__add__``, ``__rsub__`` ...)."""
    op = OPS[name]
    ev = op.eval

    def method(self: Value, other: Any) -> Value:
        if type(other) is not Value:
            if isinstance(other, numbers.Real) and not isinstance(other, Value):
                other = _const(other)
            elif isinstance(other, Value):
                pass
            elif isinstance(other, (np.ndarray, list, tuple)):
                return NotImplemented
            else:
                raise _bad_operand(other, op.symbol or op.name)
        if reflected:
            return _result(op, (other, self), ev(other.data, self.data))
        return _result(op, (self, other), ev(self.data, other.data))

    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


class Value:
    """A scalar that records the operations applied to it, as in micrograd."""

    __slots__ = (
        "data",
        "grad",
        "_fn",
        "_prev",
        "label",
        "requires_grad",
        "_serial",
        "_adj",
        "__weakref__",
    )

    def __init__(
        self,
        data: Any,
        _children: Iterable[Value] = (),
        _op: str = "",
        label: str = "",
        requires_grad: bool = True,
    ) -> None:
        self.data = data if type(data) is float else _as_float(data)
        self.grad = 0.0
        self._fn: Op | None = None
        self._prev: tuple[Value, ...] = tuple(_children)
        self.label = label
        self.requires_grad = requires_grad
        self._serial = next(_serial)
        self._adj: float | None = None  # the adjoint while backward() runs

    # -- recording ---------------------------------------------------------

    @classmethod
    def _apply(cls, op: Op, args: Sequence[Any]) -> Value:
        """Apply ``op`` to Values and numbers: the result records its operands."""
        vals = []
        for a in args:
            if type(a) is not Value:
                if isinstance(a, numbers.Real) and not isinstance(a, Value):
                    a = _const(a)
                elif isinstance(a, Value):
                    pass
                else:
                    raise _bad_operand(a, op.name)
            vals.append(a)
        return _result(op, tuple(vals), op.eval(*[v.data for v in vals]))

    @property
    def _op(self) -> str:
        """micrograd's op label: ``'+'``, ``'*'``, ``'tanh'`` ... (``''`` for leaves)."""
        fn = self._fn
        return "" if fn is None else (fn.symbol or fn.name)

    # -- operators ---------------------------------------------------------

    __add__ = _binop("add")
    __radd__ = _binop("add", reflected=True)
    __sub__ = _binop("sub")
    __rsub__ = _binop("sub", reflected=True)
    __mul__ = _binop("mul")
    __rmul__ = _binop("mul", reflected=True)
    __truediv__ = _binop("div")
    __rtruediv__ = _binop("div", reflected=True)
    __pow__ = _binop("pow")
    __rpow__ = _binop("pow", reflected=True)

    def __neg__(self) -> Value:
        return Value._apply(_NEG, (self,))

    def __pos__(self) -> Value:
        return self

    def __abs__(self) -> Value:
        return Value._apply(_ABS, (self,))

    # -- comparisons: a bool from .data; while tracing, kept as a guard -----

    def _compare(self, cmp: str, other: Any) -> bool:
        if isinstance(other, Value):
            b = other.data
        elif isinstance(other, numbers.Real):
            b = float(other)
        else:
            raise TypeError(
                f"cannot compare a Value with {type(other).__name__!r} using {cmp!r}; "
                "compare with a number or another Value"
            )
        result = bool(COMPARE_FLOATS[cmp](self.data, b))
        state = _MODE.get().trace
        if state is not None:
            rhs = other if isinstance(other, Value) else _const(b)
            state.guards.append((cmp, self, rhs, result, _caller_line(3)))
        return result

    def __lt__(self, other: Any) -> bool:
        return self._compare("<", other)

    def __le__(self, other: Any) -> bool:
        return self._compare("<=", other)

    def __gt__(self, other: Any) -> bool:
        return self._compare(">", other)

    def __ge__(self, other: Any) -> bool:
        return self._compare(">=", other)

    # == and hash() stay object identity (inherited), as in micrograd: Values
    # live in sets and dicts.

    # -- conversions -------------------------------------------------------

    def _frozen(self, how: str) -> None:
        if _MODE.get().trace is not None:
            raise TypeError(
                f"{how} was called on a traced Value: it would freeze the value seen "
                "while tracing into the compiled code. Keep it a Value: use the "
                "adcompile functions (ad.sin(x), ad.exp(x) ...), NumPy ufuncs or "
                "operators instead of math.* / float() / int() / round()"
            )

    def __float__(self) -> float:
        self._frozen("float() (or a math.* function)")
        return self.data

    def __int__(self) -> int:
        self._frozen("int()")
        return int(self.data)

    def __round__(self, ndigits: int | None = None) -> Any:
        self._frozen("round()")
        return round(self.data, ndigits)

    def item(self) -> float:
        """The value as a Python float."""
        self._frozen("item()")
        return self.data

    def detach(self) -> Value:
        """A new leaf with the same value that takes no gradient."""
        return Value(self.data, requires_grad=False)

    def __repr__(self) -> str:
        return f"Value(data={self.data}, grad={self.grad})"

    def __getattr__(self, name: str) -> Any:
        # user-defined unary ops become methods too (built-in ones are set below)
        op = OPS.get(name)
        if op is not None and op.arity == 1:
            return lambda: Value._apply(op, (self,))
        raise AttributeError(f"'Value' object has no attribute {name!r}")

    # -- reverse mode ------------------------------------------------------

    def backward(self, gradient: float = 1.0) -> None:
        """Add d self / d v to ``v.grad`` for every Value ``v`` this one depends on.

        Each call adds the same gradients again (PyTorch's ``retain_graph=True``).
        The sweep reads each op's derivative rules from the op table, as the
        tape's reverse sweep does; adjoints live on the Values while it runs.
        """
        order = topological_order([self])
        self._adj = float(gradient)
        try:
            for k in range(len(order) - 1, -1, -1):
                v = order[k]
                g = v._adj
                if g is None:
                    continue
                v._adj = None
                v.grad += g
                fn = v._fn
                if fn is None:
                    continue
                prev = v._prev
                rules = fn.vjp
                out = v.data
                if len(prev) == 1:
                    (a,) = prev
                    if a.requires_grad and rules[0] is not None:
                        c = rules[0](g, out, a.data)
                        a._adj = c if a._adj is None else a._adj + c
                    continue
                if len(prev) == 2:
                    a, b = prev
                    ad, bd = a.data, b.data
                    if a.requires_grad and rules[0] is not None:
                        c = rules[0](g, out, ad, bd)
                        a._adj = c if a._adj is None else a._adj + c
                    if b.requires_grad and rules[1] is not None:
                        c = rules[1](g, out, ad, bd)
                        b._adj = c if b._adj is None else b._adj + c
                    continue
                argvals = [p.data for p in prev]
                for rule, p in zip(rules, prev):
                    if rule is not None and p.requires_grad:
                        c = rule(g, out, *argvals)
                        p._adj = c if p._adj is None else p._adj + c
        finally:
            for v in order:
                v._adj = None


def _const(x: Any) -> Value:
    """A number used as an operand: a leaf that takes no gradient.

    Constants are immutable and never take gradients, so recent ones are shared
    (fewer allocations, less work for the garbage collector).
    """
    x = float(x)
    v = _CONSTS.get(x)
    if (
        v is not None
        and v.data == x
        and (x != 0.0 or math.copysign(1.0, x) == math.copysign(1.0, v.data))
    ):
        return v
    v = _new(Value)
    v.data = x
    v.grad = 0.0
    v._fn = None
    v._prev = ()
    v.label = ""
    v.requires_grad = False
    v._serial = next(_serial)
    v._adj = None
    if len(_CONSTS) > 4096:
        _CONSTS.clear()
    _CONSTS[x] = v
    return v


_CONSTS: dict[float, Value] = {}


_ADD, _SUB, _MUL, _DIV, _POW, _NEG, _ABS = (
    OPS[n] for n in ("add", "sub", "mul", "div", "pow", "neg", "abs")
)

COMPARE_FLOATS = {
    "<": float.__lt__,
    "<=": float.__le__,
    ">": float.__gt__,
    ">=": float.__ge__,
}


def _method(op: Op) -> Any:
    ev = op.eval
    if op.arity == 1:

        def method(self: Value) -> Value:
            return _result(op, (self,), ev(self.data))

    else:

        def method(self: Value, *args: Any) -> Value:
            return Value._apply(op, (self, *args))

    method.__name__ = op.name
    method.__doc__ = f"{op.name} of this Value (recorded)."
    return method


# Every op becomes a method named as NumPy's ufunc is (so np.sin(object_array)
# calls v.sin()), except the ones Python operators already cover.
for _op in OPS.values():
    if _op.name not in ("add", "sub", "mul", "div", "pow", "neg"):
        setattr(Value, _op.name, _method(_op))
Value.absolute = Value.abs  # np.absolute's name


def topological_order(roots: Iterable[Value]) -> list[Value]:
    """Every Value the roots depend on, each after its operands (no recursion).

    The set only answers "seen already?"; the order is creation order, which is
    a topological order because operands exist before their results.
    """
    seen: set[Value] = set()
    found: list[Value] = []
    stack = list(roots)
    pop, push, add, keep = stack.pop, stack.extend, seen.add, found.append
    while stack:
        v = pop()
        if v not in seen:
            add(v)
            keep(v)
            push(v._prev)
    found.sort(key=_serial_of)
    return found


_serial_of = operator.attrgetter("_serial")


def graph_roots(
    outputs: Sequence[Value], inputs: Sequence[Value], guards: Sequence[tuple] = ()
) -> list[Value]:
    """Everything a tape must hold: inputs, outputs and both sides of each guard."""
    return list(inputs) + list(outputs) + [g[i] for g in guards for i in (1, 2)]


def build_tape(
    outputs: Sequence[Value],
    inputs: Sequence[Value],
    guards: Sequence[tuple] = (),
    names: Sequence[str] | None = None,
    order: list[Value] | None = None,
    where: dict[int, str] | None = None,
) -> Tape:
    """Lay out the graph from ``inputs`` to ``outputs`` (and guards) as a tape.

    ``order`` is ``topological_order(graph_roots(...))`` when the caller has it.
    """
    if order is None:
        order = topological_order(graph_roots(outputs, inputs, guards))
    input_ids = {id(v) for v in inputs}
    index: dict[int, int] = {}
    nodes: list[Node] = []
    mk, input_node = tuple.__new__, Node(INPUT)
    for k, v in enumerate(order):
        fn = v._fn
        if fn is None:
            node = input_node if id(v) in input_ids else mk(Node, (CONST, (), v.data))
        elif id(v) in input_ids:
            node = input_node
        else:
            node = mk(Node, (fn, tuple([index[id(p)] for p in v._prev]), 0.0))
        index[id(v)] = k
        nodes.append(node)
    tape_guards = [
        Guard(cmp, index[id(a)], index[id(b)], res, where)
        for cmp, a, b, res, where in guards
        if nodes[index[id(a)]].op != CONST or nodes[index[id(b)]].op != CONST
    ]
    return Tape(
        nodes,
        [index[id(v)] for v in inputs],
        [index[id(v)] for v in outputs],
        tape_guards,
        names,
        where=None if where is None else [where.get(v._serial, "") for v in order],
    )


_DEFAULT_MODE = _MODE.get()

_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large graph is built.

    Value graphs hold no reference cycles (reference counting frees them), so
    the collector would only rescan the growing graph again and again. Nested
    and concurrent uses are counted; the collector's state is restored by the
    last one out.
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


@contextlib.contextmanager
def _mode(**changes: Any) -> Iterator[Mode]:
    token = _MODE.set(_MODE.get()._replace(**changes))
    try:
        yield _MODE.get()
    finally:
        _MODE.reset(token)


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Record with the default mode, whatever the caller's (``no_grad``, ``debug_nans``,
    an outer trace): what a transform records internally must not depend on it."""
    token = _MODE.set(_DEFAULT_MODE)
    try:
        yield
    finally:
        _MODE.reset(token)


def no_grad() -> contextlib.AbstractContextManager:
    """Within this block operations record nothing (results are constants)."""
    return _mode(grad=False)


def debug_nans(enabled: bool = True) -> contextlib.AbstractContextManager:
    """Within this block the first nan/inf made from finite inputs raises NonFiniteError.

    Applies to Value operations and to compiled functions alike.
    """
    return _mode(nans=enabled)


@contextlib.contextmanager
def tracing() -> Iterator[TraceState]:
    """Within this block comparisons on Values are recorded as guards."""
    state = TraceState()
    with _mode(trace=state, grad=True):
        yield state


def _function(op: Op) -> Any:
    ev = op.eval
    if op.arity == 1:

        def f(x: Any) -> Any:
            if type(x) is Value:
                return _result(op, (x,), ev(x.data))
            if type(x) is float:
                return ev(x)
            return ops.apply(op, x)

    else:

        def f(*args: Any) -> Any:
            return ops.apply(op, *args)

    f.__name__ = op.name
    f.__doc__ = (
        f"Element-wise {op.name}: a float for floats, a Value for Values, an array for arrays."
    )
    return f


FUNCTIONS = {name: _function(op) for name, op in OPS.items()}
