"""``Value``: the micrograd-compatible scalar that records what is done to it.

A Value holds its op and its operands (in two slots, ``_a`` and ``_b``: no
tuple per op), nothing else: no closure that points back at the Value itself,
so a dropped graph is freed by reference counting alone. ``backward()``
collects the Values that take a gradient, sorts them by creation (a
topological order) and runs each op's reverse step. The operator methods and
the reverse steps are Python source generated once from the op table (its
float functions and derivative rules), so the table stays the one definition
of every primitive. The same Values, made while tracing, become a tape for
the compiler (``build_tape``); comparisons made then are kept as guards, and
each op's source line is kept as (code, offset) and written out only when a
tape is built. NumPy ufuncs on a Value go through the op table too
(``Value.__array_ufunc__``: ``np.floor(v)`` is the ``floor`` op); ``np.isnan``,
``np.isinf`` and ``np.isfinite`` answer bools, guarded as comparisons are.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import numbers
import operator
import struct
import sys
import threading
import weakref
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple

import numpy as np

from ..ir import ops
from ..ir.ops import OPS, Op
from ..ir.tape import CONST, INPUT, Guard, Node, Tape
from . import loader

serials = itertools.count()


class TraceState:
    """What a trace collects besides the graph: its comparisons and source lines."""

    def __init__(self, sites: bool = False) -> None:
        self.guards: list[tuple[str, Value, Value, bool, str]] = []
        # With ``sites``: Value serial -> where the user's code made it, as (code,
        # instruction offset), made into "file:line" text only when a tape is built
        # from it. Off by default (it costs a third of a trace): the one that needs
        # it, naming the op that made a nan, traces again with it.
        self.sites = sites
        self.where: dict[int, tuple[Any, int] | None] = {}


class TracedFloat(float):
    """The ``.data`` of a Value made while tracing: a float whose comparisons and
    truthiness, made in the user's code, are kept as guards on its Value (a
    branch on ``x.data > 0`` is guarded as one on ``x > 0`` is)."""

    # A leaf's: a weak reference to it (the trace holds it); a result's: its op
    # and operands, to make it again (a reference to the result itself would be a
    # cycle, and the result may be gone by the time its ``.data`` is compared).
    __slots__ = ("owner", "op", "args")

    def value(self) -> Value | None:
        """The Value this is the ``.data`` of (made again for a result), or None."""
        if self.owner is not None:
            return self.owner()
        return _result(self.op, self.args, float(self))

    def _guard(self, cmp: str, other: Any) -> Any:
        if _MODE.get().trace is None or sys._getframe(2).f_globals.get("__name__", "").startswith(
            _LIBRARY_FRAMES
        ):
            return COMPARE_FLOATS[cmp](float(self), other)
        if type(other) is TracedFloat:
            other = other.value()
        elif not isinstance(other, (Value, numbers.Real)):
            return COMPARE_FLOATS[cmp](float(self), other)
        owner = self.value()
        if owner is None or other is None:
            return COMPARE_FLOATS[cmp](float(self), float(other))
        return owner._compare(cmp, other)

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

    __hash__ = float.__hash__

    def __bool__(self) -> bool:
        return bool(self._guard("!=", 0.0))

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """``np.isnan(x.data)``, ``np.isinf``, ``np.isfinite`` in the user's code while
        tracing: guarded as on the Value; any other ufunc sees a plain float."""
        test = _PREDICATES.get(ufunc) if method == "__call__" and not kwargs else None
        if (
            test is not None
            and _MODE.get().trace is not None
            and not sys._getframe(1).f_globals.get("__name__", "").startswith(_LIBRARY_FRAMES)
        ):
            owner = self.value()
            if owner is not None:
                return test(owner)
        args = [float(a) if type(a) is TracedFloat else a for a in inputs]
        return getattr(ufunc, method)(*args, **kwargs)

    def __reduce__(self) -> tuple:  # (pickles and copies as a plain float)
        return (float, (float(self),))


def traced_float(v: Value, op: Op | None = None, args: tuple = ()) -> None:
    """Make ``v.data`` a :class:`TracedFloat` (while tracing): of the leaf ``v``, or
    of ``op`` applied to ``args``."""
    t = TracedFloat(v.data)
    if op is None:
        t.owner = weakref.ref(v)
    else:
        t.owner, t.op, t.args = None, op, args
    v.data = t


def _frozen_data(x: Any) -> None:
    if type(x) is TracedFloat and _MODE.get().trace is not None:
        raise TypeError(
            "the .data of a traced Value was used as a number: it would freeze the "
            "value seen while tracing into the compiled code. Use the Value itself "
            "(x, not x.data), or compute the number outside the function and pass "
            "it as an argument"
        )


class NonFiniteError(FloatingPointError):
    """Under ``debug_nans``: a primitive made nan or inf from finite inputs."""


class Mode(NamedTuple):
    """Per-context settings (each thread and task has its own)."""

    grad: bool = True  # record operations (False inside no_grad)
    trace: TraceState | None = None  # set while a transform traces a function
    nans: bool = False  # raise NonFiniteError at the first nan/inf


_MODE: ContextVar[Mode] = ContextVar("adcompile_mode", default=Mode())  # noqa: B039 (immutable)
_DEFAULT_MODE = _MODE.get()
#: The mode ContextVar and its default, for fast paths that run only outside
#: every ``no_grad`` / ``debug_nans`` / tracing block (``MODE.get() is DEFAULT_MODE``).
MODE, DEFAULT_MODE = _MODE, _DEFAULT_MODE

# A Value that takes no gradient (a constant, a requires_grad=False leaf, a result
# made under no_grad) has _adj = _SINK for good: the reverse steps add into it
# without testing, and backward() never reads it. Any other Value has _adj None
# except while backward() runs.
_SINK = 0.0


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
    """``file:line`` of the first frame outside adcompile (the user's code).

    The line is found from the frame's instruction offset: ``f_lineno`` can be
    stale while a trace function (a coverage tool, hypothesis) is installed.
    """
    return _site_text(_caller_site(depth + 1))


def _caller_site(depth: int = 2) -> tuple[Any, int] | None:
    """``(code, instruction offset)`` in the first frame outside adcompile, cheaply.

    ``_site_text`` turns it into ``file:line`` when a tape or an error needs it
    (a line number costs more to find than the whole op). Only the code object
    is kept, never the frame: no cycles, no locals kept alive.
    """
    f = sys._getframe(depth)
    while f is not None and f.f_globals.get("__name__", "").startswith(_LIBRARY_FRAMES):
        f = f.f_back
    return None if f is None else (f.f_code, f.f_lasti)


def _site_text(site: tuple[Any, int] | None) -> str:
    """``file:line`` of a site ``_caller_site`` found."""
    if site is None:
        return "?"
    code, lasti = site
    line = code.co_firstlineno
    for start, end, n in code.co_lines():
        if start <= lasti < end:
            line = n if n is not None else line
            break
    return f"{code.co_filename}:{line}"


def _bad_operand(other: Any, what: str) -> TypeError:
    return TypeError(
        f"unsupported operand type for {what}: Value and {type(other).__name__!r}; "
        "use a number (int or float) or an adcompile.Value"
        + (" (convert text with float(...) first)" if isinstance(other, (str, bytes)) else "")
    )


def _as_float(x: Any) -> float:
    if isinstance(x, numbers.Real) and not isinstance(x, Value):
        _frozen_data(x)
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
    out._serial = next(serials)
    if _MODE.get() is not _DEFAULT_MODE:
        return _moded(out, op, operands)
    for v in operands:
        if v._rg:
            out._fn = op
            _link(out, operands)
            out._rg = True
            out._adj = None
            return out
    out._fn = None
    out._a = out._b = None
    out._rg = False
    out._adj = _SINK
    return out


def _moded(out: Value, op: Op, operands: tuple) -> Value:
    """``_result``'s ending outside the default mode (debug_nans, tracing, no_grad)."""
    mode = _MODE.get()
    if mode.nans and not math.isfinite(out.data) and all(math.isfinite(v.data) for v in operands):
        raise nonfinite_error(op, [v.data for v in operands], out.data, _caller_line())
    if mode.trace is not None:
        traced_float(out, op, operands)
        if mode.trace.sites:
            mode.trace.where[out._serial] = _caller_site(3)
    if mode.grad:
        for v in operands:
            if v._rg:
                out._fn = op
                _link(out, operands)
                out._rg = True
                out._adj = None
                return out
    out._fn = None
    out._a = out._b = None
    out._rg = False
    out._adj = _SINK
    return out


def _link(out: Value, operands: Sequence[Value]) -> None:
    """Record ``operands`` in ``out``: ``_a`` the first, ``_b`` the second (or a tuple
    of the rest, for three or more), so that a unary or binary op allocates no tuple."""
    n = len(operands)
    out._a = operands[0] if n else None
    out._b = None if n < 2 else (operands[1] if n == 2 else tuple(operands[1:]))


def _operand(other: Any, op: Op) -> Any:
    """A binary operator's other operand as a Value (NotImplemented for arrays)."""
    if type(other) is float or type(other) is int:
        return constant(other)
    if isinstance(other, numbers.Real) and not isinstance(other, Value):
        _frozen_data(other)
        return constant(other)
    if isinstance(other, Value):
        return other
    if isinstance(other, (np.ndarray, list, tuple)):
        return NotImplemented
    raise _bad_operand(other, op.symbol or op.name)


# Python's own float operators: an op whose eval is one of these is written
# inline in generated code (the same arithmetic, without a call).
_INFIX = {float.__add__: "+", float.__sub__: "-", float.__mul__: "*"}
_PREFIX = {float.__neg__: "-"}


def _eval_src(op: Op, args: Sequence[str], env: dict) -> str:
    """Source that evaluates ``op`` on float expressions ``args``, as ``op.eval`` does."""
    if op.arity == 2 and op.eval in _INFIX:
        return f"({args[0]} {_INFIX[op.eval]} {args[1]})"
    if op.arity == 1 and op.eval in _PREFIX:
        return f"({_PREFIX[op.eval]}{args[0]})"
    key = f"_ev_{op.name}" if op.name.isidentifier() else f"_ev_{id(op)}"
    if env.get(key, op.eval) is not op.eval:  # another op of that name (not in the table)
        key = f"_ev_{id(op)}"
    env[key] = op.eval
    return f"{key}({', '.join(args)})"


_BINOP_SRC = """
def method(self, other):
    if type(other) is not Value:
        if type(other) is float and other:
            c = _CONSTS.get(other)
            other = c if c is not None else constant(other)
        else:
            other = _operand(other, op)
            if other is NotImplemented:
                return NotImplemented
    {pair}
    out = _new(Value)
    out.data = {expr}
    out.grad = 0.0
    out.label = ""
    out._serial = next(serials)
    if _MODE.get() is not _DEFAULT_MODE:
        return _moded(out, op, (a, b))
    if a._rg or b._rg:
        out._fn = op
        out._a = a
        out._b = b
        out._rg = True
        out._adj = None
    else:
        out._fn = None
        out._a = out._b = None
        out._rg = False
        out._adj = _SINK
    return out
"""

_UNARY_SRC = """
def method(a):
    out = _new(Value)
    out.data = {expr}
    out.grad = 0.0
    out.label = ""
    out._serial = next(serials)
    if _MODE.get() is not _DEFAULT_MODE:
        return _moded(out, op, (a,))
    if a._rg:
        out._fn = op
        out._a = a
        out._b = None
        out._rg = True
        out._adj = None
    else:
        out._fn = None
        out._a = out._b = None
        out._rg = False
        out._adj = _SINK
    return out
"""


def _compiled(src: str, env: dict, name: str) -> Any:
    env.update(
        __name__=__name__,  # a library frame: error messages name the user's line
        Value=Value,
        _new=_new,
        serials=serials,
        _MODE=_MODE,
        _DEFAULT_MODE=_DEFAULT_MODE,
        _moded=_moded,
        constant=constant,
        _CONSTS=_CONSTS,
        _SINK=_SINK,
        _operand=_operand,
    )
    return loader.load(src, f"value_{name}", env).method


def _binop(
    name: str, reflected: bool = False, dunder: str | None = None
) -> Callable[[Value, Any], Value]:
    """The operator method for a binary op (``__add__``, ``__rsub__`` ...; ``dunder`` names
    the Python operator where it is not the op's name: ``mod`` for ``remainder``).

    Its source is made from the op table's entry: the op's eval, inline where
    it is Python's own float operator.
    """
    op = OPS[name]
    env: dict = {"op": op}
    src = _BINOP_SRC.format(
        pair="a, b = other, self" if reflected else "a, b = self, other",
        expr=_eval_src(op, ("a.data", "b.data"), env),
    )
    method = _compiled(src, env, name)
    method.__name__ = f"__{'r' if reflected else ''}{dunder or name}__"
    method.__qualname__ = f"Value.{method.__name__}"
    return method


def _unary(op: Op) -> Callable[[Value], Value]:
    """The method for a unary op (``v.sin()``, ``-v``), made from the op table's entry."""
    env: dict = {"op": op}
    method = _compiled(_UNARY_SRC.format(expr=_eval_src(op, ("a.data",), env)), env, op.name)
    method.__name__ = op.name
    method.__qualname__ = f"Value.{op.name}"
    method.__doc__ = f"{op.name} of this Value (recorded)."
    return method


_STATIC_HINT = (
    "that decides a trip count, an index or a shape (range(n), x[:n], np.zeros(n)) must "
    "be static: pass it as a keyword argument (f(x, n=3): an int keyword is static) or "
    "name its position in static_argnums, as in JAX: ad.grad(f, static_argnums=1), "
    "ad.jit(f, static_argnums=(1,)). A new value then traces again"
)


def _index_error(v: Value) -> str:
    """The message of ``range(v)``, ``x[:v]``, ``[0] * v`` ... on a Value (``__index__``;
    NumPy's own shape and index conversions replace it with theirs)."""
    if _MODE.get().trace is not None:
        return (
            f"a traced Value (now {float(v.data)!r}) was used as an integer, in range(), a "
            "slice, an index or a size: the positional arguments of a function that "
            "ad.grad, ad.jit ... trace are Values, which stand for floats. An integer "
            f"argument {_STATIC_HINT}"
        )
    return (
        f"a Value (holding {float(v.data)!r}) cannot be used as an integer (in range(), a "
        "slice, an index or a size): it stands for a float. Use int(v.data) for the "
        "integer it holds now"
    )


def _boxed(v: Value) -> np.ndarray:
    box = np.empty((), dtype=object)
    box[()] = v
    return box


def _object_loop(ufunc: np.ufunc, method: str, inputs: Sequence[Any], kwargs: dict) -> Any:
    """What NumPy does with a ufunc on Values that define no ``__array_ufunc__``: each
    Value a 0-d object array, the element-wise object loop (calling Value methods)."""
    args = [_boxed(a) if isinstance(a, Value) else a for a in inputs]
    return getattr(ufunc, method)(*args, **kwargs)


class Value:
    """A scalar that records the operations applied to it, as in micrograd."""

    __slots__ = (
        "data",
        "grad",
        "_fn",
        "_a",
        "_b",
        "label",
        "_rg",
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
        _link(self, tuple(_children))  # micrograd's _children (kept for _prev only)
        self.label = label
        self._rg = bool(requires_grad)
        self._serial = next(serials)
        # None, or while backward() runs the adjoint; _SINK if it takes no gradient
        self._adj: float | None = None if self._rg else _SINK

    # -- recording ---------------------------------------------------------

    @classmethod
    def _apply(cls, op: Op, args: Sequence[Any]) -> Value:
        """Apply ``op`` to Values and numbers: the result records its operands."""
        vals = []
        for a in args:
            if type(a) is not Value:
                if type(a) is float or type(a) is int:
                    a = constant(a)
                elif isinstance(a, numbers.Real) and not isinstance(a, Value):
                    _frozen_data(a)
                    a = constant(a)
                elif isinstance(a, Value):
                    pass
                else:
                    raise _bad_operand(a, op.name)
            vals.append(a)
        return _result(op, tuple(vals), op.eval(*[v.data for v in vals]))

    @property
    def requires_grad(self) -> bool:
        """Whether ``backward()`` computes a gradient for this Value (and what it depends on)."""
        return self._rg

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self._rg = bool(flag)
        self._adj = None if self._rg else _SINK

    @property
    def _prev(self) -> tuple[Value, ...]:
        """The operands (micrograd's ``_prev``), held as ``_a`` and ``_b``."""
        a = self._a
        if a is None:
            return ()
        b = self._b
        if b is None:
            return (a,)
        return (a, *b) if type(b) is tuple else (a, b)

    @property
    def _op(self) -> str:
        """micrograd's op label: ``'+'``, ``'*'``, ``'tanh'`` ... (``''`` for leaves)."""
        fn = self._fn
        return "" if fn is None else (fn.symbol or fn.name)

    @property
    def operands(self) -> tuple[Value, ...]:
        """The Values this one was computed from (micrograd's ``_prev``); () for a leaf."""
        return self._prev

    @property
    def op_label(self) -> str:
        """The label of the op that made it (micrograd's ``_op``); ``''`` for a leaf."""
        return self._op

    @property
    def is_leaf(self) -> bool:
        """Whether no op made it (a number the user wrapped, or a parameter), as
        PyTorch's ``Tensor.is_leaf``."""
        return self._fn is None

    # -- operators ---------------------------------------------------------

    # The operators (__add__, __radd__ ... __neg__, __abs__) and one method per
    # op (sin, tanh ...) are generated from the op table below the class.

    def __pos__(self) -> Value:
        return self

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
            rhs = other if isinstance(other, Value) else constant(b)
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

    # == and != follow the floats too (a guard while tracing), as a branch on
    # ``x == 0.5`` must; hash() stays object identity, as in micrograd and
    # PyTorch, so Values still live in sets and dicts (a set lookup compares
    # hashes first, and distinct Values never share one).

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (Value, numbers.Real)):
            return self._compare("==", other)
        return NotImplemented

    def __ne__(self, other: Any) -> bool:
        if isinstance(other, (Value, numbers.Real)):
            return self._compare("!=", other)
        return NotImplemented

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        """Truthiness of the float (``x != 0``), guarded while tracing."""
        return self._compare("!=", 0.0)

    # -- conversions -------------------------------------------------------

    def _frozen(self, how: str, hint: str = "") -> None:
        if _MODE.get().trace is not None:
            raise TypeError(
                f"{how} was called on a traced Value: it would freeze the value seen "
                "while tracing into the compiled code. Keep it a Value: use the "
                "adcompile functions (ad.sin(x), ad.exp(x) ...), NumPy ufuncs (np.sin(x), "
                "np.floor(x), np.isnan(x) ...) or operators instead of math.* / float() / "
                f"int() / round(){hint}"
            )

    def __float__(self) -> float:
        self._frozen("float() (or a math.* function)")
        return self.data

    def __int__(self) -> int:
        self._frozen("int()", f"; an integer argument {_STATIC_HINT}")
        return int(self.data)

    def __index__(self) -> int:
        """Refused: a Value stands for a float; the error says how to pass an integer."""
        raise TypeError(_index_error(self))

    def __round__(self, ndigits: int | None = None) -> Any:
        """Python's ``round``, on the float (an int, as for a float); refused while
        tracing. ``np.round(v)`` and ``v.round()`` give a Value."""
        self._frozen("round()", "; np.round(x) rounds a Value and is recorded")
        return round(self.data, ndigits)

    def round(self, decimals: int = 0, out: None = None) -> Value:
        """Rounded to ``decimals`` digits as ``np.round`` (``rint(x * 10**d) / 10**d``,
        halves to even); derivative 0. ``np.round(v)`` calls this."""
        if out is not None:
            raise TypeError("Value.round(out=...) is not supported: use the Value it returns")
        d = operator.index(decimals)
        if d == 0:
            return self.rint()
        if d > 0:
            return (self * 10.0**d).rint() / 10.0**d
        return (self / 10.0**-d).rint() * 10.0**-d

    def __divmod__(self, other: Any) -> tuple[Value, Value]:
        return self // other, self % other

    def __rdivmod__(self, other: Any) -> tuple[Value, Value]:
        return other // self, other % self

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """NumPy ufuncs on Values, read from the op table: a ufunc named after an op
        applies that op (``np.floor(v)``, ``np.mod(v, 2.0)``, ``np.maximum(v, 0.0)``);
        ``np.isnan``, ``np.isinf`` and ``np.isfinite`` answer a bool, guarded while
        tracing as a comparison is; anything else (an array operand, ``out=``, other
        ufuncs) is NumPy's own object loop, as it would be without this method."""
        if method == "__call__" and not kwargs:
            test = _PREDICATES.get(ufunc)
            if test is not None:
                return test(self)
            op = ops.ufunc_op(ufunc.__name__)
            if (
                op is not None
                and op.arity == len(inputs)
                and ufunc.nout == 1
                and all(isinstance(a, (Value, numbers.Real)) for a in inputs)
            ):
                return Value._apply(op, inputs)
        return _object_loop(ufunc, method, inputs, kwargs)

    def item(self) -> float:
        """The value as a Python float."""
        self._frozen("item()")
        return self.data

    def detach(self) -> Value:
        """A new leaf with the same value that takes no gradient."""
        if _MODE.get().trace is not None:
            raise TypeError(
                "detach() was called on a traced Value: the new leaf would freeze the "
                "value seen while tracing into the compiled code. Compute what needs "
                "no gradient outside the function and pass it as an argument"
            )
        return Value(float(self.data), requires_grad=False)

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
        The sweep runs each op's derivative rules from the op table (as source
        made from them once, see ``backward_step``); adjoints live on the
        Values while it runs.
        """
        if not self._rg:  # a constant: nothing to pass a gradient to
            self.grad += float(gradient)
            return
        order = _grad_order(self)
        try:
            self._adj = float(gradient)
            _sweep(order, _STEPS, backward_step)
        except BaseException:
            for v in order:
                v._adj = None
            raise


# While backward() runs, a Value's _adj is _SEEN once the sweep will reach it,
# then the sum of the contributions it has had (0 + c is c).
_SEEN = 0


def _grad_order(root: Value) -> list[Value]:
    """The Values that take a gradient from ``root``, in creation (topological) order.

    ``root`` must take a gradient; each Value found is marked ``_SEEN``.
    """
    found = [root]
    root._adj = _SEEN
    stack = [root]
    pop, push, keep = stack.pop, stack.append, found.append
    try:
        while stack:
            v = pop()
            p = v._a
            if p is not None:
                if p._adj is None:
                    p._adj = _SEEN
                    keep(p)
                    push(p)
                p = v._b
                if p is not None:
                    if type(p) is tuple:
                        for q in p:
                            if q._adj is None:
                                q._adj = _SEEN
                                keep(q)
                                push(q)
                    elif p._adj is None:
                        p._adj = _SEEN
                        keep(p)
                        push(p)
    except BaseException:
        for v in found:
            v._adj = None
        raise
    found.sort(key=serial_of)
    return found


class _Src:
    """A derivative rule's argument while the rule is turned into source."""

    __slots__ = ("src",)

    def __init__(self, src: str) -> None:
        self.src = src

    @classmethod
    def _apply(cls, op: Op, args: Sequence[Any]) -> _Src:  # what ops.apply calls
        return _Src(_eval_src(op, [_src_of(a) for a in args], _SRC_ENV))

    def _infix(self, sym: str, other: Any, reflected: bool = False) -> _Src:
        a, b = _src_of(self), _src_of(other)
        return _Src(f"({b} {sym} {a})" if reflected else f"({a} {sym} {b})")

    def __add__(self, o: Any) -> _Src:
        return self._infix("+", o)

    def __radd__(self, o: Any) -> _Src:
        return self._infix("+", o, True)

    def __sub__(self, o: Any) -> _Src:
        return self._infix("-", o)

    def __rsub__(self, o: Any) -> _Src:
        return self._infix("-", o, True)

    def __mul__(self, o: Any) -> _Src:
        return self._infix("*", o)

    def __rmul__(self, o: Any) -> _Src:
        return self._infix("*", o, True)

    def __truediv__(self, o: Any) -> _Src:
        return self._infix("/", o)

    def __rtruediv__(self, o: Any) -> _Src:
        return self._infix("/", o, True)

    def __pow__(self, o: Any) -> _Src:
        return self._infix("**", o)

    def __rpow__(self, o: Any) -> _Src:
        return self._infix("**", o, True)

    def __neg__(self) -> _Src:
        return _Src(f"(-{self.src})")

    def _branch(self, *_: Any) -> Any:
        raise TypeError("a rule that branches on its arguments is called, not written down")

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _branch
    __hash__ = None  # type: ignore[assignment]


def _src_of(x: Any) -> str:
    if isinstance(x, _Src):
        return x.src
    if type(x) in (int, float) and math.isfinite(x):
        return repr(x)
    raise TypeError(f"not a source operand: {x!r}")


_SRC_ENV: dict[str, Any] = {}


def _indented(lines: Sequence[tuple[int, str]], depth: int) -> str:
    """Statements given as ``(depth, text)``, each indented ``depth`` more levels."""
    return "\n".join("    " * (depth + d) + text for d, text in lines)


def backward_step(op: Op) -> Callable[[Value, float], None]:
    """The reverse step of ``op``: add each operand's contribution to its ``_adj``.

    Its source is made once, by running the op's derivative rules (from the
    op table) on placeholders that write down the arithmetic they do; the
    generated step then does exactly that arithmetic on floats, without the
    calls and dispatch of running the rules. A rule that cannot be written
    down this way (it branches, or calls ``math`` on its arguments) is called
    as it is.
    """
    n = op.arity
    names = [f"x{k}" for k in range(n)]
    env: dict[str, Any] = {"__name__": __name__}
    try:
        with _step_lock:
            _SRC_ENV.clear()
            exprs = []
            for rule in op.vjp:
                if rule is None:
                    exprs.append(None)
                else:
                    r = rule(_Src("g"), _Src("v.data"), *[_Src(f"{x}.data") for x in names])
                    exprs.append(_src_of(r))
            env.update(_SRC_ENV)
            risky = any(f not in _SAFE_EVALS for f in _SRC_ENV.values())
    except Exception:  # noqa: BLE001 - any rule we cannot write down is called instead
        env = {"__name__": __name__, "rules": op.vjp}
        risky = True
        exprs = [
            None
            if rule is None
            else f"rules[{k}](g, v.data, {', '.join(x + '.data' for x in names)})"
            for k, rule in enumerate(op.vjp)
        ]
    body: list[tuple[int, str]] = []  # (depth inside the function, statement)
    for x, e in zip(names, exprs):
        if e is None:
            continue
        if risky or "_ev_" in e or "rules[" in e or "/" in e or "**" in e:
            # a call costs more than the test (and Python's / and **, or a rule called
            # as it is, may raise on a constant operand, which needs no gradient)
            body += [(1, f"if {x}._rg:"), (2, f"{x}._adj += {e}")]
        else:  # float arithmetic that cannot raise: a constant's _adj is a sink
            body.append((1, f"{x}._adj += {e}"))
    unpack = _UNPACK.get(n, ["x0 = v._a", f"{', '.join(names[1:])}, = v._b"])
    lines = [(1, text) for text in unpack] + (body or [(1, "pass")])
    src = "\ndef step(v, g):\n" + _indented(lines, 0) + "\n"
    step = loader.load(src, f"value_backward_{op.name}", env).step
    step.source = src
    step.lines = lines  # its statements as (depth, text): the sweep writes them inline
    _STEPS[op] = step
    return step


_STEPS: dict[Op, Callable[[Value, float], None]] = {}
# The built-in ops' float functions, which answer nan or inf and never raise.
_SAFE_EVALS = {op.eval for op in OPS.values()}
_UNPACK = {1: ["x0 = v._a"], 2: ["x0 = v._a", "x1 = v._b"]}
_step_lock = threading.Lock()


def constant(x: Any) -> Value:
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
    v._a = v._b = None
    v.label = ""
    v._rg = False
    v._serial = next(serials)
    v._adj = _SINK
    if len(_CONSTS) > 4096:
        _CONSTS.clear()
    _CONSTS[x] = v
    return v


_CONSTS: dict[float, Value] = {}


COMPARE_FLOATS = {
    "<": float.__lt__,
    "<=": float.__le__,
    ">": float.__gt__,
    ">=": float.__ge__,
    "==": float.__eq__,
    "!=": float.__ne__,
}


def _method(op: Op) -> Any:
    if op.arity == 1:
        return _unary(op)

    def method(self: Value, *args: Any) -> Value:
        return Value._apply(op, (self, *args))

    method.__name__ = op.name
    method.__doc__ = f"{op.name} of this Value (recorded)."
    return method


for _name, _op in ops.OPERATORS.items():  # + - * / ** // % and unary -, abs()
    if _op.arity == 1:
        setattr(Value, f"__{_name}__", _unary(_op))
    else:
        setattr(Value, f"__{_name}__", _binop(_op.name, dunder=_name))
        setattr(Value, f"__r{_name}__", _binop(_op.name, reflected=True, dunder=_name))
# Every op becomes a method named as NumPy's ufunc is (so np.sin(object_array)
# calls v.sin()), except the ones only Python operators record (Op.method).
for _op in OPS.values():
    if _op.method:
        setattr(Value, _op.name, _method(_op))
Value.absolute = Value.abs  # np.absolute's name
Value.mod = Value.remainder  # np.mod's name
# math.floor(v) ... give Values too: NumPy's object loops for np.floor, np.ceil and np.trunc
# (an object array of Values) call them.
Value.__floor__, Value.__ceil__, Value.__trunc__ = Value.floor, Value.ceil, Value.trunc


def _isnan(v: Value) -> bool:
    """``np.isnan(v)``: ``v != v``, a guard while tracing (as every comparison)."""
    return v._compare("!=", v)


#: The largest finite float: the guards compare with it, not with inf (a finite constant).
_MAX = sys.float_info.max


def _isinf(v: Value) -> bool:
    """``np.isinf(v)``: ``abs(v) > MAX`` (False for nan), a guard while tracing."""
    if _MODE.get().trace is None:
        return math.isinf(v.data)
    return abs(v)._compare(">", _MAX)


def _isfinite(v: Value) -> bool:
    """``np.isfinite(v)``: ``abs(v) <= MAX`` (False for nan), a guard while tracing."""
    if _MODE.get().trace is None:
        return math.isfinite(v.data)
    return abs(v)._compare("<=", _MAX)


#: The ufuncs that test a float and answer a bool, on a Value.
_PREDICATES: dict[np.ufunc, Callable[[Value], bool]] = {
    np.isnan: _isnan,
    np.isinf: _isinf,
    np.isfinite: _isfinite,
}


def topological_order(roots: Iterable[Value], before: int | None = None) -> list[Value]:
    """Every Value the roots depend on, each after its operands (no recursion).

    The set only answers "seen already?"; the order is creation order, which is
    a topological order because operands exist before their results. With
    ``before``, a Value made before that serial is taken as it is (a leaf):
    a trace does not look behind what existed before it started.
    """
    seen: set[Value] = set()
    found: list[Value] = []
    stack = list(roots)
    pop, push, extend, add, keep = stack.pop, stack.append, stack.extend, seen.add, found.append
    if before is None:
        before = -1
    while stack:
        v = pop()
        if v not in seen:
            add(v)
            keep(v)
            if v._serial < before:
                continue
            a = v._a
            if a is not None:
                push(a)
                b = v._b
                if b is not None:
                    if type(b) is tuple:
                        extend(b)
                    else:
                        push(b)
    found.sort(key=serial_of)
    return found


serial_of = operator.attrgetter("_serial")


def recorded_on(roots: Sequence[Value], known: Container[int]) -> list[Value]:
    """The Values the roots depend on through Values not in ``known`` (ids), those
    not in ``known``, in creation order: what was recorded on top of them (reverse
    mode's adjoint, on top of the primal's Values)."""
    seen: set[int] = set()
    found: list[Value] = []
    stack = [v for v in roots if id(v) not in known]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        found.append(v)
        stack.extend(p for p in v._prev if id(p) not in known)
    found.sort(key=serial_of)
    return found


def append_nodes(values: Iterable[Value], index: dict[int, int], nodes: list[Node]) -> None:
    """Lay ``values`` (each after its operands) out at the end of ``nodes``: an op's
    result over its operands' slots, a Value made by no op a constant of its value.
    ``index`` (id of a Value -> its slot) gives the operands' slots and takes theirs."""
    mk = tuple.__new__
    for v in values:
        if v._fn is None:
            node = mk(Node, (CONST, (), v.data))
        else:
            node = mk(Node, (v._fn, tuple([index[id(p)] for p in v._prev]), 0.0))
        index[id(v)] = len(nodes)
        nodes.append(node)


def next_serial() -> int:
    """A serial no Value made so far has (every Value made later has a larger one)."""
    return next(serials)


def shared_constants() -> set[int]:
    """The ids of the constants shared now (``constant``): taken when a trace starts,
    they tell the old Values it reads that are constants from those that are not."""
    return set(map(id, _CONSTS.values()))


def outer_values(
    order: Sequence[Value], before: int, inputs: Iterable[Value], constants: set[int]
) -> list[Value]:
    """The Values of ``order`` made before serial ``before`` that are not ``inputs``
    nor shared ``constants`` (as ``shared_constants`` gave them when the trace
    started): what a trace read from outside (a model's parameters)."""
    ids = {id(v) for v in inputs}
    return [
        v
        for v in order
        if v._serial < before
        and id(v) not in ids
        and not (v._fn is None and not v._rg and (id(v) in constants or _CONSTS.get(v.data) is v))
    ]


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
    where: dict[int, Any] | None = None,
    hoist: bool = False,
    before: int | None = None,
) -> Tape:
    """Lay out the graph from ``inputs`` to ``outputs`` (and guards) as a tape.

    ``order`` is ``topological_order(graph_roots(...), before)`` when the caller
    has it. With ``before``, a Value made before that serial (and not an input)
    is a constant of its current ``.data``, whatever made it.
    With ``hoist``, each constant value gets one slot, at the front (as
    ``passes.hoist_constants`` would make it, at a fraction of the cost).
    """
    if order is None:
        order = topological_order(graph_roots(outputs, inputs, guards), before)
    input_ids = {id(v) for v in inputs}
    index: dict[int, int] = {}
    nodes: list[Node] = []
    mk, input_node = tuple.__new__, Node(INPUT)
    firsts: list[Value] = []  # with hoist: the Value of each constant slot
    if hoist:
        firsts, order = _constants_first(order, input_ids, index, nodes, before)
    old = -1 if before is None else before
    for k, v in enumerate(order, len(nodes)):
        fn = v._fn
        if fn is None or v._serial < old and id(v) not in input_ids:
            node = input_node if id(v) in input_ids else mk(Node, (CONST, (), float(v.data)))
        elif id(v) in input_ids:
            node = input_node
        else:
            b = v._b
            if b is None:
                args = (index[id(v._a)],)
            elif type(b) is tuple:
                args = tuple([index[id(p)] for p in v._prev])
            else:
                args = (index[id(v._a)], index[id(b)])
            node = mk(Node, (fn, args, 0.0))
        index[id(v)] = k
        nodes.append(node)
    tape_guards = [
        Guard(cmp, index[id(a)], index[id(b)], res, where)
        for cmp, a, b, res, where in guards
        if nodes[index[id(a)]].op != CONST or nodes[index[id(b)]].op != CONST
    ]
    tape = Tape(
        nodes,
        [index[id(v)] for v in inputs],
        [index[id(v)] for v in outputs],
        tape_guards,
        names,
        where=None if where is None else _where_texts(where, firsts + order),
    )
    tape.hoisted = hoist  # (passes.hoist_constants has nothing to do)
    return tape


def _constants_first(
    order: list[Value],
    input_ids: set[int],
    index: dict[int, int],
    nodes: list[Node],
    before: int | None = None,
) -> tuple[list[Value], list[Value]]:
    """Give each constant value one slot at the front (``index``, ``nodes``); the
    first Value of each constant value, and the Values that are not constants."""
    slot_of: dict[bytes, int] = {}
    firsts: list[Value] = []
    rest: list[Value] = []
    pack = struct.Struct("<d").pack  # by bit pattern: -0.0 and 0.0 stay apart
    old = -1 if before is None else before
    for v in order:
        if (v._fn is None or v._serial < old) and id(v) not in input_ids:
            key = pack(v.data)
            k = slot_of.get(key)
            if k is None:
                k = slot_of[key] = len(nodes)
                nodes.append(tuple.__new__(Node, (CONST, (), float(v.data))))
                firsts.append(v)
            index[id(v)] = k
        else:
            rest.append(v)
    return firsts, rest


def _where_texts(where: dict[int, Any], order: Sequence[Value]) -> list[str]:
    """The user's line (``file:line``) of each Value in ``order`` (``""`` if not recorded)."""
    texts: dict[Any, str] = {None: "?"}
    out = []
    for v in order:
        site = where.get(v._serial)
        if site is None and v._serial not in where:
            out.append("")
            continue
        text = texts.get(site)
        if text is None:
            text = texts[site] = _site_text(site)
        out.append(text)
    return out


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
def tracing(sites: bool = False) -> Iterator[TraceState]:
    """Within this block comparisons on Values are recorded as guards (and, with
    ``sites``, the user's line that made each Value)."""
    state = TraceState(sites)
    with _mode(trace=state, grad=True):
        yield state


def _function(op: Op) -> Any:
    ev = op.eval
    if op.arity == 1:
        method = _unary(op)

        def f(x: Any) -> Any:
            if type(x) is Value:
                return method(x)
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
FUNCTIONS["mod"] = FUNCTIONS["remainder"]  # np.mod's name


_SWEEP_SRC = """
def sweep(order, steps, make_step):
    for v in reversed(order):
        g = v._adj
        v._adj = None
        if g is _SEEN:  # no gradient reaches it (only through zero-derivative rules)
            continue
        v.grad += g
        fn = v._fn
        if fn is None:
            continue
{inline}
        step = steps.get(fn)
        if step is None:
            step = make_step(fn)
        step(v, g)
"""


def _make_sweep(inline: Sequence[str]) -> Callable[..., None]:
    """The reverse sweep over ``order``, the steps of the ``inline`` ops written into it."""
    env: dict[str, Any] = {"__name__": __name__, "_SEEN": _SEEN}
    parts = []
    for k, name in enumerate(inline):
        op = OPS[name]
        step = backward_step(op)
        env.update((n, x) for n, x in step.__globals__.items() if n.startswith("_ev_"))
        env[f"_op{k}"] = op
        parts.append(f"        if fn is _op{k}:\n{_indented(step.lines, 2)}\n            continue")
    src = _SWEEP_SRC.format(inline="\n".join(parts))
    sweep = loader.load(src, "value_backward_sweep", env).sweep
    sweep.source = src
    return sweep


# The Python operators' steps run inline (most ops of a typical graph are these).
_sweep = _make_sweep(("add", "mul", "sub"))
