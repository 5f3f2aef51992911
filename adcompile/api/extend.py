"""User-defined primitives: a new elementary function with its own derivative rule.

A primitive is registered in the op table with ``ops.register``, the same call
the built-in ops use, so the Value methods, the interpreter, the compiler
(straight-line code and the tape interpreter) and the SymPy bridge all know
it. The derivative rule has the built-in ops' form: for each argument,
``(g, out, *args) -> contribution``, written with adcompile functions
(``ad.exp``, ``ad.cos``, operators ...), never ``math.*``, so that it runs on
floats and records on traced Values alike::

    import math
    import adcompile as ad

    @ad.primitive(
        vjp=lambda g, out, x: g * 2 / math.sqrt(math.pi) * ad.exp(-x * x),
        code="math.erf({0})",  # how generated code computes it ({0}, {1}: operands)
        c="erf({0})",          # the same in C99, for ad.export(..., target="c")
        sympy="erf",           # its SymPy form: a name in sympy, or lambda sp, x: ...
    )
    def erf(x):
        return math.erf(x)

    erf(0.5)                           # a float
    ad.Value(0.5).erf()                # a Value (unary primitives are Value methods)
    ad.grad(lambda x: erf(x) ** 2)(0.5)  # compiled
    ad.check_grad(lambda x: erf(x), 0.5)  # raises GradientMismatch if vjp is wrong

An optional ``jvp=`` gives a forward (tangent) rule of the same form,
``(t, out, *args) -> tangent contribution``, which forward mode then uses
instead of ``vjp``; ``check_grad`` and ``check_jacobian`` compare it too.

Compiled code needs an expression for the primitive. Give it as ``code``, a
template over ``math`` and the operands ``{0}``, ``{1}`` (what Numba
compiles). Without ``code``, the function is traced once with adcompile
functions and its tape becomes the template (and, without ``sympy``, the
SymPy form too); a function that calls ``math.*`` or branches cannot be
traced, and then ``code`` is required (a clear error says so). The choice is
made at definition time because the compiled tape interpreter holds a branch
for every op in the table.

``Function`` is the same registration in PyTorch's style: static
``forward(ctx, *xs)`` on floats and ``backward(ctx, g)``, where ``ctx`` keeps
only the inputs and the output of ``forward`` (a derivative rule must be a
function of those two).
"""

from __future__ import annotations

import ast
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..ir.ops import OPS, Op, apply, register
from ..ir.tape import CONST, INPUT
from ..trace import captures
from ..trace.mode import MODE, tracing
from ..trace.tapes import build_tape
from ..trace.value import Value

__all__ = ["primitive", "Function"]

#: Names a code template may use besides ``math`` (Numba compiles these builtins).
TEMPLATE_BUILTINS = frozenset({"abs", "max", "min", "float"})
_MAX_TEMPLATE = 2000  # longest template derived from a traced function


def _float_eval(fn: Callable, name: str) -> Callable[..., float]:
    """``fn`` on floats, with NumPy's habit of answering nan instead of raising."""

    def ev(*xs: float) -> float:
        try:
            r = fn(*xs)
        except (ZeroDivisionError, OverflowError, ValueError):
            return math.nan
        return math.nan if isinstance(r, complex) else float(r)

    ev.__name__ = name
    return ev


def _arity(fn: Callable, name: str, rules: int) -> int:
    """How many arguments ``fn`` takes (``rules``, the number of vjp rules, for ``*args``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature, such as math.hypot
        params = []
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    n = len(positional)
    if not params or (n < rules and any(p.kind == p.VAR_POSITIONAL for p in params)):
        n = rules
    if n not in (1, 2):
        raise TypeError(
            f"primitive {name!r} takes {n} arguments; primitives take 1 or 2 "
            "(the compiled tape interpreter's limit): build larger ones from smaller ones"
        )
    return n


def _placeholder(k: int) -> str:
    return "{" + str(k) + "}"


def _check_template(code: str, arity: int, name: str) -> str:
    """The template, after checking it is an expression over ``math`` and its operands."""
    operands = [f"_operand{k}" for k in range(arity)]
    slots = ", ".join(_placeholder(k) for k in range(arity))
    try:
        tree = ast.parse(code.format(*operands), mode="eval")
    except (SyntaxError, IndexError, KeyError, ValueError) as e:
        raise ValueError(
            f"primitive {name!r}: code={code!r} is not a Python expression over {slots} ({e})"
        ) from None
    allowed = {"math", *TEMPLATE_BUILTINS, *operands}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in allowed:
            raise ValueError(
                f"primitive {name!r}: code={code!r} uses {node.id!r}; generated code sees "
                f"only math, {', '.join(sorted(TEMPLATE_BUILTINS))} and the operands "
                f"{slots}"
            )
    return code


def _check_c_template(c: str, arity: int, name: str) -> str:
    """The C template, after checking it names its operands as ``code`` does."""
    try:
        c.format(*(f"_operand{k}" for k in range(arity)))
    except (IndexError, KeyError, ValueError) as e:
        slots = ", ".join(_placeholder(k) for k in range(arity))
        raise ValueError(
            f"primitive {name!r}: c={c!r} is not a template over {slots} ({e})"
        ) from None
    return c


def _literal(x: float, c: bool = False) -> str:
    """A constant in generated source (Python's, or with ``c`` C99's): negatives
    parenthesised (``(-2.0) ** x``)."""
    if x != x:
        return "NAN" if c else "math.nan"
    inf = "INFINITY" if c else "math.inf"
    text = repr(x) if math.isfinite(x) else (inf if x > 0 else "-" + inf)
    return f"({text})" if text.startswith("-") else text


def _traced(fn: Callable, arity: int) -> Any:
    """The tape of ``fn`` traced with adcompile functions, or None if it cannot be."""
    xs = [Value(0.5 + 0.25 * k) for k in range(arity)]
    try:
        with tracing() as state:
            out = fn(*xs)
    except Exception:  # math.* on a Value, float(), an unsupported call ...
        return None
    if not isinstance(out, Value) or state.guards:
        return None
    return build_tape([out], xs)


def _template_of(tape: Any, c: bool = False) -> str | None:
    """A traced tape as one expression template (``{0}``... for its inputs): Python's
    from the ops' ``code``, or with ``c`` C99's from their ``c`` (None where an op has
    none)."""
    exprs: list[str] = []
    for node in tape.nodes:
        if node.op == INPUT:
            exprs.append(_placeholder(tape.inputs.index(len(exprs))))
        elif node.op == CONST:
            exprs.append(_literal(node.value, c))
        else:
            template = node.op.c if c else node.op.code
            if template is None:
                return None
            exprs.append(template.format(*(exprs[a] for a in node.args)))
    code = exprs[tape.outputs[0]]
    return code if len(code) <= _MAX_TEMPLATE else None


def _sympy_of(tape: Any) -> Callable:
    def form(sp: Any, *args: Any) -> Any:
        from ..symbolic.bridge import tape_to_sympy

        return tape_to_sympy(tape, args)[0]

    return form


def _checked_rule(rule: Callable, name: str, k: int, kind: str = "vjp") -> Callable:
    """``rule``, refusing to freeze a traced Value into a float or to branch on one."""

    def checked(g: Any, out: Any, *args: Any) -> Any:
        if not any(isinstance(a, Value) for a in (g, out, *args)):
            return rule(g, out, *args)
        try:
            with tracing() as state:
                c = rule(g, out, *args)
        except TypeError as e:
            raise TypeError(
                f"the derivative rule of primitive {name!r} (argument {k}) failed on traced "
                f"values: {e}. Write it with adcompile functions (ad.exp, ad.cos ...) and "
                "operators, not math.*"
            ) from e
        if state.guards:
            raise TypeError(
                f"the derivative rule of primitive {name!r} (argument {k}) compares traced "
                "values (an if on them); write the branch with ad.step, ad.sign or "
                "ad.maximum so it holds at every point"
            )
        return c

    checked.__name__ = f"{name}_{kind}{k}"
    return checked


def _define(
    name: str,
    fn: Callable,
    vjp: Callable | Sequence[Callable | None],
    code: str | None,
    sympy: str | Callable | None,
    domain: tuple[float, float],
    smooth: bool,
    jvp: Callable | Sequence[Callable | None] | None = None,
    c: str | None = None,
) -> Op:
    """Check everything, then register the op (the same call the built-in ops use)."""
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"primitive name {name!r} must be a Python identifier (no leading _)")
    if name in OPS:
        raise ValueError(
            f"an op named {name!r} is already defined; pick another name (ops cannot be "
            "redefined: compiled code and tapes refer to the existing one)"
        )
    if hasattr(Value, name):
        raise ValueError(f"primitive name {name!r} is taken by a Value attribute; pick another")
    rules = (vjp,) if callable(vjp) else tuple(vjp)
    arity = _arity(fn, name, len(rules))
    if len(rules) != arity or not all(r is None or callable(r) for r in rules):
        want = (
            "one function (g, out, x) -> contribution"
            if arity == 1
            else f"a tuple of {arity} functions (g, out, *args) -> contribution, one per argument"
        )
        raise TypeError(f"primitive {name!r} takes {arity} argument(s): vjp must be {want}")
    tangents = () if jvp is None else (jvp,) if callable(jvp) else tuple(jvp)
    if jvp is not None and (
        len(tangents) != arity or not all(r is None or callable(r) for r in tangents)
    ):
        raise TypeError(
            f"primitive {name!r} takes {arity} argument(s): jvp must be "
            + (
                "one function (t, out, x) -> tangent"
                if arity == 1
                else f"a tuple of {arity} "
                "functions (t, out, *args) -> tangent contribution, one per argument"
            )
        )
    traced_code = code is None
    if code is None or sympy is None:
        tape = _traced(fn, arity)
        if code is None:
            code = _template_of(tape) if tape is not None else None
            if c is None and tape is not None:  # (C from the same tape, where it has one)
                c = _template_of(tape, c=True)
            if code is None:
                raise TypeError(
                    f"primitive {name!r} needs code=..., an expression generated code can use, "
                    "such as code='math.erf({0})' over math and the operands {0}, {1}: "
                    f"{getattr(fn, '__name__', name)} could not be traced with adcompile "
                    "functions (it calls math.* or float(), or branches on its input)"
                )
        if sympy is None and tape is not None:
            sympy = _sympy_of(tape)
    _check_template(code, arity, name)
    if c is not None:
        _check_c_template(c, arity, name)
    _watch_reads(name, [fn] if traced_code else [], (*rules, *tangents))
    return register(
        Op(
            name,
            arity,
            _float_eval(fn, name),
            code,
            tuple(None if r is None else _checked_rule(r, name, k) for k, r in enumerate(rules)),
            sympy,
            domain,
            smooth=smooth,
            jvp=tuple(
                None if r is None else _checked_rule(r, name, k, "jvp")
                for k, r in enumerate(tangents)
            ),
            c=c,
        )
    )


#: The primitives whose code (traced from their function) or derivative rules read
#: values from outside them (a global ``S``): what they read, as it was then.
_FROZEN: dict[str, list[captures.Captures]] = {}


def _watch_reads(name: str, code: Sequence[Callable], rules: Sequence[Callable | None]) -> None:
    """What ``code`` (a function its code was traced from) and ``rules`` read from
    outside them is in the op's code and derivatives: watched (``_public``)."""
    states = [captures.scan(r, swap=False) for r in (*code, *rules) if r is not None]
    if any(state.watched for state in states):
        _FROZEN[name] = [state for state in states if state.watched]


def _unchanged(op: Op, states: list[captures.Captures]) -> None:
    """Refuse to trace ``op`` where a value its code holds has changed since."""
    for state in states:
        changed = state.changed()
        if changed is not None:
            raise TypeError(
                f"the primitive {op.name}() reads {changed.what}, which has changed since "
                f"{op.name} was defined: its code and derivatives hold the value read "
                "then, where plain Python reads the new one. Pass the value in as an "
                "argument, or define the primitive again (under a new name) after the change"
            )


def _public(op: Op, fn: Callable) -> Callable:
    """The function users call: floats in, float out; Values record; arrays element-wise."""

    state = _FROZEN.get(op.name)

    def f(*args: Any) -> Any:
        if state is not None and MODE.get().trace is not None:
            _unchanged(op, state)
        return apply(op, *args)

    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = fn.__doc__ or f"The primitive {op.name} (user-defined)."
    f.__wrapped__ = fn
    f.op = op
    return f


def primitive(
    fn: Callable | None = None,
    *,
    vjp: Callable | Sequence[Callable | None],
    name: str | None = None,
    code: str | None = None,
    sympy: str | Callable | None = None,
    domain: tuple[float, float] = (-3.0, 3.0),
    smooth: bool = True,
    jvp: Callable | Sequence[Callable | None] | None = None,
    c: str | None = None,
) -> Callable:
    """Register ``fn`` with derivative rule(s) ``vjp`` as a primitive; its function (``.op``).

    ``jvp`` (optional, the same form with the tangent ``t`` in place of ``g``) is a forward
    rule of its own for forward mode (``jvp``, ``jacobian(mode="forward")``, ``hessian``);
    without it forward mode uses ``vjp``. ``check_grad`` and ``check_jacobian`` check both.
    ``c`` (optional) is its C99 template over ``<math.h>`` (``c="erf({0})"``), for
    ``ad.export(..., target="c")``; without it a primitive traced from adcompile
    functions has one from theirs, and one given by ``code`` has none.
    """

    def define(fn: Callable) -> Callable:
        op_name = name or getattr(fn, "__name__", "")
        if op_name == "<lambda>":
            raise ValueError("primitive: a lambda needs name=...")
        public = _public(_define(op_name, fn, vjp, code, sympy, domain, smooth, jvp, c), fn)
        rules = [r for r in (vjp, jvp) if r is not None]
        rules = [r for rule in rules for r in (rule if isinstance(rule, Sequence) else (rule,))]
        # (what ``captures`` scans: a global these read is watched, as one fn reads is)
        public.__adcompile_code__ = (fn, *(r for r in rules if callable(r)))
        return public

    return define if fn is None else define(fn)


# ---------------------------------------------------------------- PyTorch style


class Context:
    """What ``forward`` hands to ``backward``: only its inputs and its output."""

    __slots__ = ("saved_tensors",)

    def __init__(self) -> None:
        object.__setattr__(self, "saved_tensors", ())

    def save_for_backward(self, *values: Any) -> None:
        """Keep inputs or the output of ``forward`` for ``backward``."""
        object.__setattr__(self, "saved_tensors", values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"ctx.{name} = ...: an adcompile primitive's backward may use only the inputs "
            "and the output of forward; pass them with ctx.save_for_backward(...)"
        )


def _value_of(a: Any) -> Any:
    return a.data if isinstance(a, Value) else a


class Function:
    """A primitive in PyTorch's style: subclass with static ``forward`` and ``backward``.

    ::

        class Cube(ad.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * 3 * x * x

        Cube.apply(2.0)  # 8.0; Cube.apply(ad.Value(2.0)) records

    The class attributes ``name`` (default: the class name in lower case),
    ``code``, ``c``, ``sympy``, ``domain`` and ``smooth`` are as for ``primitive``.
    ``backward`` returns one gradient per input (a tuple for two inputs), or
    ``None`` for an input with no gradient. ``forward`` must save the same
    things at every point: it is run again on floats to learn what it saved.
    """

    name: str | None = None
    code: str | None = None
    c: str | None = None
    sympy: str | Callable | None = None
    domain: tuple[float, float] = (-3.0, 3.0)
    smooth: bool = True
    apply: Callable[..., Any]
    op: Op

    @staticmethod
    def forward(ctx: Context, *xs: Any) -> Any:
        """The value, from floats (or adcompile functions of the inputs)."""
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, g: Any) -> Any:
        """The gradient contribution for each input, from ``g`` and ``ctx.saved_tensors``."""
        raise NotImplementedError

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.forward is Function.forward:  # an abstract base for other Functions
            return
        name = cls.__dict__.get("name") or cls.__name__.lower()
        forward, backward = cls.forward, cls.backward

        def fn(*xs: Any) -> Any:
            return forward(Context(), *xs)

        fn.__signature__ = inspect.Signature(  # forward's parameters after ctx
            list(inspect.signature(forward).parameters.values())[1:]
        )
        fn.__name__ = name

        def saved(out: Any, args: Sequence[Any]) -> tuple:
            """Run forward on the floats to see what it saves; map that to ``out``/``args``."""
            ctx = Context()
            xs = [float(_value_of(a)) * 1.0 for a in args]  # distinct objects, even if equal
            res = forward(ctx, *xs)
            mapped = []
            for s in ctx.saved_tensors:
                k = next((k for k, x in enumerate(xs) if s is x), None)
                if k is not None:
                    mapped.append(args[k])
                elif s is res:
                    mapped.append(out)
                else:
                    raise TypeError(
                        f"{cls.__name__}.forward saved a value that is neither an input nor "
                        "its output; save only those (backward recomputes the rest)"
                    )
            return tuple(mapped)

        def rule(k: int) -> Callable:
            def vjp(g: Any, out: Any, *args: Any) -> Any:
                ctx = Context()
                object.__setattr__(ctx, "saved_tensors", saved(out, args))
                grads = backward(ctx, g)
                grads = grads if isinstance(grads, tuple) else (grads,)
                return 0.0 * g if grads[k] is None else grads[k]

            return vjp

        arity = _arity(fn, name, 1)
        op = _define(
            name,
            fn,
            tuple(rule(k) for k in range(arity)),
            cls.code,
            cls.sympy,
            cls.domain,
            cls.smooth,
            c=cls.c,
        )
        cls.op = op
        public = _public(op, fn)
        public.__adcompile_code__ = (forward, backward)  # (what ``captures`` scans)
        cls.apply = staticmethod(public)
