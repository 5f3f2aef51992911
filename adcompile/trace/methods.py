"""The source of ``Value``'s generated methods, written from the op table.

Each operator method (``__add__``, ``__rsub__``, ``sin`` ...), each op's reverse
step and the reverse sweep are Python source made once from the op table's entry
(its float function, inline where it is Python's own float operator, and its
derivative rules, run on placeholders that write down the arithmetic they do),
then loaded through ``loader`` as real files. This module writes the text and
loads it; the names the text reads (``Value``, ``_moded``, the adjoints'
sentinels ...) are given by the caller (``value``), whose Values the generated
code handles: nothing here reads a Value.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..ir.ops import OPS, Op
from . import loader

# Python's own float operators: an op whose eval is one of these is written
# inline in generated code (the same arithmetic, without a call).
_INFIX = {float.__add__: "+", float.__sub__: "-", float.__mul__: "*"}
_PREFIX = {float.__neg__: "-"}


def _eval_src(op: Op, args: Sequence[str], env: dict, inline: bool = True) -> str:
    """Source that evaluates ``op`` on float expressions ``args``, as ``op.eval`` does:
    inline where it is a float operator, unless not ``inline`` (while tracing, where
    ``.data`` is a ``TracedFloat``, whose operators are for the user's code)."""
    if inline and op.arity == 2 and op.eval in _INFIX:
        return f"({args[0]} {_INFIX[op.eval]} {args[1]})"
    if inline and op.arity == 1 and op.eval in _PREFIX:
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
    out.grad = 0.0
    out.label = ""
    out._serial = next(serials)
    if _MODE.get() is not _DEFAULT_MODE:
        out.data = {moded}
        return _moded(out, op, (a, b))
    out.data = {expr}
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
    out.grad = 0.0
    out.label = ""
    out._serial = next(serials)
    if _MODE.get() is not _DEFAULT_MODE:
        out.data = {moded}
        return _moded(out, op, (a,))
    out.data = {expr}
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


def binop(op: Op, names: dict[str, Any], reflected: bool = False, dunder: str = "") -> Any:
    """The operator method for a binary op (``__add__``, ``__rsub__`` ...; ``dunder`` names
    the Python operator where it is not the op's name: ``mod`` for ``remainder``), its
    text reading ``names`` (``Value``, ``_new``, ``serials`` ...: see the template)."""
    env: dict = {"op": op}
    src = _BINOP_SRC.format(
        pair="a, b = other, self" if reflected else "a, b = self, other",
        expr=_eval_src(op, ("a.data", "b.data"), env),
        moded=_eval_src(op, ("a.data", "b.data"), env, inline=False),
    )
    env.update(names)
    method = loader.load(src, f"value_{op.name}", env).method
    method.__name__ = f"__{'r' if reflected else ''}{dunder or op.name}__"
    method.__qualname__ = f"Value.{method.__name__}"
    return method


def nary(op: Op, apply: Callable[[Op, tuple], Any]) -> Any:
    """The method for an op of two or more operands (``v.maximum(w)``): ``apply(op,
    (self, *args))``, the Value's own recording of an op."""

    def method(self: Any, *args: Any) -> Any:
        return apply(op, (self, *args))

    method.__name__ = op.name
    method.__doc__ = f"{op.name} of this Value (recorded)."
    return method


def unary(op: Op, names: dict[str, Any]) -> Any:
    """The method for a unary op (``v.sin()``, ``-v``), its text reading ``names``."""
    env: dict = {"op": op}
    src = _UNARY_SRC.format(
        expr=_eval_src(op, ("a.data",), env),
        moded=_eval_src(op, ("a.data",), env, inline=False),
    )
    env.update(names)
    method = loader.load(src, f"value_{op.name}", env).method
    method.__name__ = op.name
    method.__qualname__ = f"Value.{op.name}"
    method.__doc__ = f"{op.name} of this Value (recorded)."
    return method


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


def backward_step(op: Op, module: str) -> Callable[[Any, float], None]:
    """The reverse step of ``op``: add each operand's contribution to its ``_adj``.

    Its source is made once, by running the op's derivative rules (from the
    op table) on placeholders that write down the arithmetic they do; the
    generated step then does exactly that arithmetic on floats, without the
    calls and dispatch of running the rules. A rule that cannot be written
    down this way (it branches, or calls ``math`` on its arguments) is called
    as it is. ``module``: the ``__name__`` its code runs under.
    """
    n = op.arity
    names = [f"x{k}" for k in range(n)]
    env: dict[str, Any] = {"__name__": module}
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
        env = {"__name__": module, "rules": op.vjp}
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
    return step


# The built-in ops' float functions, which answer nan or inf and never raise.
_SAFE_EVALS = {op.eval for op in OPS.values()}
_UNPACK = {1: ["x0 = v._a"], 2: ["x0 = v._a", "x1 = v._b"]}
_step_lock = threading.Lock()


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


def sweep(
    inline: Sequence[str], step_of: Callable[[Op], Any], module: str, seen: Any
) -> Callable[..., None]:
    """The reverse sweep over ``order``, the steps of the ``inline`` ops written into it
    (``step_of(op)``: its step, as ``backward_step`` made it); ``seen``: the adjoint of a
    Value no gradient has reached yet; ``module``: the ``__name__`` its code runs under."""
    env: dict[str, Any] = {"__name__": module, "_SEEN": seen}
    parts = []
    for k, name in enumerate(inline):
        op = OPS[name]
        step = step_of(op)
        env.update((n, x) for n, x in step.__globals__.items() if n.startswith("_ev_"))
        env[f"_op{k}"] = op
        parts.append(f"        if fn is _op{k}:\n{_indented(step.lines, 2)}\n            continue")
    src = _SWEEP_SRC.format(inline="\n".join(parts))
    sweep = loader.load(src, "value_backward_sweep", env).sweep
    sweep.source = src
    return sweep
