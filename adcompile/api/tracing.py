"""Tracing a call: arguments in, a tape out; and tapes replayed on Values.

- :func:`function_name`, :func:`flatten_args` (a call's floats and structure key;
  ``TracedArgs`` when an argument holds Values);
- :func:`trace_call`: ``f`` run once on tracing Values, its tape;
- :func:`trace_array_call`: ``f`` run once on tracing arrays, its array tape;
- :func:`data_point`, :func:`replay`, :func:`values_like`: a transform called on
  Values (inside another trace) records by replaying its tape on them.

No transform state here: plain functions of what they are given.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir.array_ops import reshape
from ..ir.arrays import ArrayOp, ArrayTape, sweep
from ..ir.outputs import OutLayout, assemble, flatten_output, map_leaves
from ..ir.tape import COMPARE, CONST, Tape, forward_sweep
from ..trace import captures, randomness
from ..trace.arguments import param_names
from ..trace.arrays import ArrayTrace, ArrayValue, NotArrayLevel
from ..trace.creation import new_arrays_in, values_made
from ..trace.mode import ARGUMENT, tracing
from ..trace.tapes import build_tape, graph_roots
from ..trace.traced import refused_grad, returned_data, traced_float
from ..trace.value import (
    Value,
    constant,
    next_serial,
    outer_values,
    shared_constants,
    topological_order,
)

# ------------------------------------------------------------------ arguments


def function_name(f: Callable) -> str:
    """``f``'s name as an identifier (what generated code and messages call it)."""
    return (
        "".join(
            ch if ch.isalnum() or ch == "_" else "_" for ch in getattr(f, "__name__", "f")
        ).strip("_")
        or "f"
    )


_F64 = np.dtype(np.float64)


class TracedArgs(Exception):
    """Raised by flatten_args when an argument is a Value (an outer trace, or eager use)."""


def flatten_args(
    fname: str, args: Sequence[Any], hidden: Sequence[captures.Hidden] = (), skip: int = 0
) -> tuple[list[Any], tuple]:
    """Each argument as a float or a flat float64 array, and the call's structure key.

    The last ``len(hidden)`` arguments are values ``f`` reads from outside its
    arguments (``adcompile.captures``); errors name them as such.
    """
    flat: list[Any] = []
    key: list[Any] = []
    for k, a in enumerate(args):
        t = type(a)
        if t is float:
            flat.append(a)
            key.append(None)
        elif t is np.ndarray and (a.dtype is _F64 or a.dtype == _F64):
            flat.append(a if a.ndim == 1 else a.ravel())
            key.append(a.shape)
        elif isinstance(a, Value) or isinstance(a, np.ndarray) and a.dtype == object:
            raise TracedArgs
        elif isinstance(a, numbers.Real) and not isinstance(a, bool):
            flat.append(float(a))
            key.append(None)
        elif isinstance(a, (np.ndarray, list, tuple)):
            arr = np.asarray(a)
            if arr.dtype.kind not in "fiu":
                raise TypeError(
                    f"{_which(fname, args, hidden, k, skip)} is an array of {arr.dtype}; pass "
                    "numbers (a float or a NumPy float array)"
                )
            arr = np.ascontiguousarray(arr, dtype=np.float64)
            flat.append(arr.ravel())
            key.append(arr.shape)
        else:
            raise TypeError(
                f"{_which(fname, args, hidden, k, skip)} has unsupported type {t.__name__!r}; "
                "pass a Python number or a NumPy array of floats"
            )
    return flat, tuple(key)


def _which(
    fname: str, args: Sequence[Any], hidden: Sequence[captures.Hidden], k: int, skip: int
) -> str:
    """How an error names argument ``k``: by position (not counting ``skip`` values
    passed before the user's arguments), or as what ``f`` reads."""
    j = k - (len(args) - len(hidden))
    if j >= 0:
        return f"{hidden[j].what}, which {fname}() reads from outside its arguments,"
    return f"argument {k - skip} of {fname}()"


def _traced_inputs(
    args: Sequence[Any], names: Sequence[str]
) -> tuple[list[Any], list[Value], list[str]]:
    """Tracing Values standing for the arguments (object arrays for arrays; a batch
    argument of a trace for batch-generic code as a ``lengths.BatchArray``)."""
    from ..trace.lengths import batch_marks, batch_view

    marks = batch_marks()
    traced, inputs, input_names = [], [], []
    for a, name in zip(args, names):
        if isinstance(a, np.ndarray) and a.ndim > 0 or isinstance(a, (list, tuple)):
            arr = np.asarray(a, dtype=np.float64)
            vals = [Value(float(x)) for x in arr.ravel()]
            obj = np.empty(arr.shape, dtype=object)
            obj.ravel()[:] = vals if vals else []
            for j in range(len(vals)):
                vals[j].label = f"{name}_{j}"
            traced.append(batch_view(obj) if marks and id(a) in marks else as_tensor(obj))
            inputs.extend(vals)
            input_names.extend(f"{name}_{j}" for j in range(len(vals)))
        else:
            v = Value(float(np.asarray(a, dtype=np.float64)), label=name)
            traced.append(v)
            inputs.append(v)
            input_names.append(name)
    return traced, inputs, input_names


def as_tensor(obj: np.ndarray) -> np.ndarray:
    try:
        from ..trace.tensor import ValueArray
    except ImportError:  # pragma: no cover - tensor.py is optional sugar
        return obj
    return obj.view(ValueArray)


def _scalar_output(fname: str, out: Any) -> Value:
    if isinstance(out, np.ndarray):
        if out.size != 1:
            raise TypeError(
                f"{fname}() must return a scalar, but it returned an array of shape "
                f"{out.shape}; reduce it first (for example with .sum() or a loss), or "
                f"use ad.jacobian({fname}) for the derivatives of every element"
            )
        out = out.reshape(-1)[0]
    if isinstance(out, Value):
        return out
    if isinstance(out, numbers.Real) and not isinstance(out, bool):
        returned_data(out)
        return constant(float(out))
    if isinstance(out, (list, tuple, dict)):
        raise TypeError(
            f"{fname}() must return a scalar (a Value or a number), but it returned a "
            f"{type(out).__name__}; to return other values beside the loss (an accuracy) "
            "use has_aux=True (ad.value_and_grad(f, has_aux=True) gives ((loss, aux), "
            f"gradient)), for the derivatives of several outputs ad.jacobian({fname}), "
            "or reduce them to one number (a sum or a loss)"
        )
    raise TypeError(
        f"{fname}() must return a scalar (a Value or a number), but it returned "
        f"{type(out).__name__!r}"
    )


@randomness.once_more_if_shared
def trace_call(
    f: Callable,
    args: Sequence[Any],
    leaves: Sequence[Value] = (),
    names: Sequence[str] | None = None,
    sites: bool = False,
    hoist: bool = False,
    multi: bool = False,
    outer: Sequence[Value] | None = None,
    generators: Sequence[tuple[str, Any]] = (),
    read: Sequence[Value] = (),
    user: Any = None,
) -> Tape:
    """Call ``f`` once on tracing Values standing for ``args``; its tape.

    ``leaves`` are existing Values (a model's parameters) that ``f`` reads; they
    become the tape's first inputs. ``names`` name the arguments (default: the
    parameters of ``f``). With ``sites`` the tape's ``where`` names the user's
    line of each slot (tracing takes longer); without, ``where`` is None. With
    ``hoist``, constants come first, one slot per value (what folding wants).
    With ``multi``, ``f`` may return an array or a tuple or list of numbers and
    arrays: the tape has one output per element, and ``tape.tree`` (see
    ``adcompile.outputs``) records the structure (None for one scalar).

    Values made before the trace (a model's parameters, or results made from
    them) that ``f`` reads are taken as they are, never looked behind. Without
    ``outer`` they are constants of their ``.data``. With ``outer`` (a list,
    maybe empty), the last argument is an array of the ``.data`` of the Values
    in ``outer``, which stand for its elements as inputs; reading any other such
    Value raises ``captures.NewOuterValues`` naming them. The ``.data`` of the
    leaves, of ``outer`` and of ``read`` (other Values ``f`` reaches) are traced
    floats while ``f`` runs: a branch on one is guarded, a number made of one
    refused.

    A draw from NumPy's or Python's global random generator, or from one of
    ``generators`` ((what, generator) pairs ``f`` reaches), raises
    ``randomness.RandomDrawError``: the compiled code would repeat it.
    """
    fname = function_name(f)
    flatten_args(fname, args)  # the same argument checks as a compiled call
    names = param_names(f, len(args)) if names is None else list(names)
    start = next_serial()
    constants = shared_constants() if outer is not None else set()
    traced, inputs, input_names = _traced_inputs(args, names)
    if outer:  # the last argument's elements are these Values themselves
        inputs[len(inputs) - len(outer) :] = outer
    draws = randomness.Watch(generators)
    kept = _KeptData(fname, (*leaves, *(outer or ()), *read), inputs)
    # (np.zeros(n) in the user's code, ``user`` or ``f``: an array of Values, written into)
    with kept, tracing(sites) as state, new_arrays_in(values_made, user or f):
        called = len(inputs) - len(outer or ())  # (the arguments' numbers; then Values)
        for k, v in enumerate((*inputs, *leaves, *read)):
            # (a branch on x.data is guarded, as one on x is)
            traced_float(v, args=ARGUMENT if k < called else ())
        kept.mark()
        out = f(*traced)
    draws.check(fname, captures.code_names(f))
    if multi:
        ys, tree = flatten_output(fname, out, _output_leaf)
    else:
        ys, tree = [_scalar_output(fname, out)], None
    leaf_names = [v.label or f"params_{k}" for k, v in enumerate(leaves)]
    all_inputs = [*leaves, *inputs]
    order = topological_order(graph_roots(ys, all_inputs, state.guards), start)
    if outer is not None:
        new = outer_values(order, start, all_inputs, constants)
        if new:
            raise captures.NewOuterValues(new)
    tape = build_tape(
        ys,
        all_inputs,
        state.guards,
        [*leaf_names, *input_names],
        order=order,
        where=state.where if sites else None,
        hoist=hoist,
        before=start,
    )
    tape.tree = tree
    return tape


class _KeptData:
    """The ``.data`` of Values made outside a traced function (``kept``: made traced
    floats while it runs, then put back) and of its inputs: one the function assigns
    (``p.data = ...``) is refused, as the compiled code would not assign it again."""

    def __init__(self, fname: str, kept: Sequence[Value], inputs: Sequence[Value]) -> None:
        self.fname, self.kept, self.inputs = fname, kept, inputs
        # what they held before: put back as it was (an outer trace's traced float too)
        self.before: list[Any] = [v.data for v in kept]
        self.given: list[Any] = list(self.before)
        self.seen: list[Any] = []

    def mark(self) -> None:
        """Take the traced floats they hold now as theirs; their ``.grad`` refuses to be
        read as a number (``trace.traced.RefusedGrad``) until the trace ends."""
        self.given, self.seen = [v.data for v in self.kept], [v.data for v in self.inputs]
        each = {id(v): v for v in (*self.kept, *self.inputs)}.values()  # (once each)
        self.grads = [(v, v.grad, refused_grad(v)) for v in each]
        for v, _, refused in self.grads:
            v.grad = refused

    def __enter__(self) -> _KeptData:
        self.grads: list[tuple[Value, Any, Any]] = []
        return self

    def __exit__(self, kind: Any, *rest: Any) -> None:
        values = (*self.kept, *self.inputs)
        written = [v for v, t in zip(values, (*self.given, *self.seen)) if v.data is not t]
        for v, t in zip(self.kept, self.before):
            v.data = t
        graded = [v for v, _, refused in self.grads if v.grad is not refused]
        for v, grad, _ in self.grads:
            v.grad = grad
        if graded and kind is None:
            raise TypeError(
                f"{self.fname}() assigned the .grad of a Value made outside it while it "
                f"was traced ({graded[0].label or 'p'}.grad = ...): the compiled code "
                "would not do it again at each call. Zero gradients outside the function"
            )
        if written:  # (an error it made, such as a Value as the .data, comes after)
            raise TypeError(
                f"{self.fname}() assigned the .data of a Value made outside it while it "
                f"was traced ({written[0].label or 'p'}.data = ...): the compiled code "
                "would not do it again at each call. Update parameters outside the "
                "function (after backward()), or pass the numbers in as arguments"
            )


@randomness.once_more_if_shared
def trace_array_call(
    f: Callable,
    args: Sequence[Any],
    names: Sequence[str],
    generators: Sequence[tuple] = (),
    multi: bool = False,
    user: Callable | None = None,
) -> ArrayTape:
    """``f`` traced at array level (``trace.arrays``): one node per NumPy call on its
    arguments, whatever their sizes. Raises ``NotArrayLevel`` (or the error ``f``
    raised) where ``f`` does what that level does not take; the caller then traces
    it with :func:`trace_call`. The same draws from random generators are refused.
    ``f`` returns one number, or with ``multi`` arrays and numbers in tuples and
    lists too (one output per leaf; the tape's ``tree`` says how they nest).
    ``user`` is the user's own function where ``f`` wraps it: new arrays its module
    makes with NumPy are arrays of the trace (``trace.creation``)."""
    from ..trace import numpy_api  # noqa: F401  (NumPy's functions' rules)

    fname = function_name(f)
    rec = ArrayTrace()
    traced = []
    for a in args:
        if isinstance(a, Value) or isinstance(a, np.ndarray) and a.dtype == object:
            raise NotArrayLevel("an argument holds Values")
        if isinstance(a, (numbers.Integral, np.integer)):  # (a count, an index: not data)
            raise NotArrayLevel("an integer argument")
        traced.append(rec.input(np.shape(a)))
    draws = randomness.Watch(generators)
    with tracing(), new_arrays_in(rec, user or f):  # (np.zeros(n), written into)
        out = f(*traced)
    draws.check(fname, captures.code_names(f))
    if multi:
        leaves: list[ArrayValue] = []
        tree = _array_tree(rec, out, leaves, fname)
        tape = rec.tape(leaves, list(names))
        tape.tree = tree
        return tape
    if isinstance(out, (np.ndarray, np.generic)) and out.size == 1 or _is_number(out):
        out = rec.const(float(np.asarray(out).reshape(())))
    if not isinstance(out, ArrayValue) or out.size != 1 or out.dtype != np.float64:
        raise NotArrayLevel(f"{fname}() returned {type(out).__name__}, not one number")
    if out.shape:
        out = rec.record(reshape(()), [out])
    return rec.tape([out], list(names))


#: An array-level tape is expanded into elements (``trace_expanded``) only where its
#: nodes hold at most this many numbers in all (each becomes a Value's operation).
EXPAND_MAX = 200_000


class TooLargeToExpand(ValueError):
    """An array-level tape too large to expand into elements (``trace_expanded``)."""


def trace_expanded(f: Callable, args: Sequence[Any], multi: bool = False) -> Tape:
    """``f``'s element-wise tape, for a function that runs on traced arrays but not on
    arrays of Values (``np.logaddexp.reduce``, ``z = np.zeros(n)`` written into): it
    is traced at array level, then each array node is applied to arrays of Values
    (NumPy's object loops, the op table's rules), so the tape is the one of what its
    NumPy calls compute, element by element. Raises ``NotArrayLevel`` (or what ``f``
    raised) where ``f`` is not traced at array level, ``TooLargeToExpand`` where the
    expansion would exceed ``EXPAND_MAX`` numbers."""
    names = param_names(f, len(args))
    arrays = trace_array_call(f, args, names, multi=multi)
    size = sum(math.prod(s) for s in arrays.shapes)
    if size > EXPAND_MAX:
        raise TooLargeToExpand(
            f"{function_name(f)}() runs on whole arrays only (not element by element), and "
            f"its {arrays.n_ops} NumPy calls hold {size} numbers, more than "
            f"EXPAND_MAX={EXPAND_MAX} to expand into elements; check it at a smaller size"
        )

    def elementwise(*xs: Any) -> Any:
        objects = [np.asarray(x, dtype=object) for x in xs]
        vals = sweep(arrays, objects, _on_values, _as_objects)
        outs = [vals[o] for o in arrays.outputs]
        return assemble(map_leaves(arrays.tree, lambda k, s: k), outs) if multi else outs[0]

    elementwise.__name__ = function_name(f)
    return trace_call(elementwise, args, (), names, True, multi=multi)


def trace_or_expand(f: Callable, args: Sequence[Any], multi: bool = False) -> Tape:
    """``f``'s element-wise tape (``trace_call``, with its lines), or where ``f`` does
    not run on arrays of Values, its array-level tape expanded into elements
    (``trace_expanded``): the tape ``ad.trace``, ``to_sympy`` and the checks read."""
    try:
        return trace_call(f, args, sites=True, multi=multi)
    except Exception as on_values:  # (np.logaddexp.reduce, np.zeros written into)
        try:
            return trace_expanded(f, args, multi)
        except TooLargeToExpand as e:
            raise e from on_values
        except (Exception, NotArrayLevel):
            raise on_values from None


def _as_objects(v: Any) -> Any:
    """A constant, float arrays as arrays of objects (a write puts a Value in them)."""
    return v.astype(object) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v


def _on_values(op: Any, args: list) -> Any:
    """One array node applied to arrays of Values (``trace_expanded``)."""
    if not isinstance(op, ArrayOp):
        return op(*args)  # (element by element: ops.apply)
    if op.boolean and any(np.asarray(a).dtype == object for a in args):
        # (np.isfinite has no loop for objects; on one Value it answers, and guards)
        return np.frompyfunc(op.eval, op.arity, 1)(*args).astype(bool)
    return op.eval(*args)


def _array_tree(rec: ArrayTrace, out: Any, leaves: list, fname: str) -> Any:
    """The output tree of ``out`` (``ir.outputs``), its leaves appended to ``leaves``
    as float arrays of ``rec``."""
    if isinstance(out, (tuple, list)):
        kind = "tuple" if isinstance(out, tuple) else "list"
        return (kind, [_array_tree(rec, o, leaves, fname) for o in out])
    if _is_number(out) or isinstance(out, (np.ndarray, np.generic)) and out.dtype.kind in "fiu":
        out = rec.const(np.asarray(out, dtype=float))
    if not isinstance(out, ArrayValue) or out.dtype != np.float64:
        raise NotArrayLevel(f"{fname}() returned {type(out).__name__}, not numbers")
    leaves.append(out)
    return tuple(out.shape) if out.shape else None


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _output_leaf(x: Any) -> Value:
    if isinstance(x, Value):
        return x
    returned_data(x)
    return constant(float(x))


def data_point(args: Sequence[Any]) -> list[Any]:
    """The numbers that arguments holding Values stand for (floats, float arrays)."""
    return [
        np.vectorize(lambda v: v.data if isinstance(v, Value) else v, otypes=[float])(a)
        if isinstance(a, np.ndarray)
        else (a.data if isinstance(a, Value) else a)
        for a in args
    ]


def replay(code: Tape, args: Sequence[Any]) -> list[Any]:
    """``code``'s outputs computed on ``args`` (Values, arrays of them, numbers) by
    recording them: how a transform called inside another one records."""
    flat_in: list[Any] = []
    for a in args:
        flat_in.extend(np.asarray(a, dtype=object).ravel() if isinstance(a, np.ndarray) else [a])
    vals = forward_sweep(code, flat_in, const=constant)
    for g in code.guards:  # comparing Values records the guards in an outer trace
        COMPARE[g.cmp](vals[g.a], vals[g.b])
    return [vals[o] for o in code.outputs]


def slot_text(tape: Tape, i: int) -> str:
    """Slot ``i`` as a guard message names it: an input by name, a constant by value."""
    node = tape.nodes[i]
    if node.op == CONST:
        return repr(node.value)
    if i in tape.inputs:
        return tape.names[tape.inputs.index(i)]
    return f"v{i}"


def values_like(layout: OutLayout | Any, values: Sequence[Any]) -> Any:
    """Values laid out as ``layout`` (an OutLayout, or an output tree laid out from
    0; see ``adcompile.outputs``): arrays as ValueArrays."""
    flat = np.empty(len(values), dtype=object)
    flat[:] = list(values)
    if not isinstance(layout, OutLayout):
        layout = OutLayout.of_tree(layout)
    parts = [
        flat[s] if sh is None else as_tensor(flat[s : s + int(np.prod(sh))].reshape(sh))
        for s, sh in layout.parts
    ]
    return assemble(layout.tree, parts)
