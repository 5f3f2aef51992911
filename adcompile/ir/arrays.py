"""Array nodes: the ops of a tape whose slots hold whole NumPy arrays.

An array program (``ArrayTape``) is a tape like any other: an SSA list of
nodes in recording order, read by the same sweeps. Its slots hold arrays of a
known shape (a 0-d array is a scalar), so a NumPy call on an argument is one
node, however large the argument.

Two kinds of op appear in it:

- every op of the scalar table (``ops.OPS``), applied element-wise with NumPy's
  broadcasting: its NumPy form is the ufunc of its name or of one of its
  ``ufuncs`` aliases (``np.subtract`` for ``sub``), else ``np.vectorize`` of its
  own ``eval`` (``sigmoid``), which is what the op does to a float array outside
  a trace; its vector-Jacobian rule is the scalar rule, applied to whole
  arrays, then summed back to the operand's shape (``array_ops.unbroadcast``);
- array ops (:class:`ArrayOp`, made in ``array_ops`` and ``array_products``):
  comparisons, ``where``, reductions, ``matmul``, indexing, reshapes,
  concatenation, ``cumsum``, ``einsum``. Each states its shape rule, its NumPy
  evaluation, its code template and its vector-Jacobian rules, which are
  written with the array ops themselves (so they evaluate arrays, and record on
  tracing arrays: the adjoint of an array program is an array program).

Ops with parameters (an axis, an index, a shape) are made by factories and kept
one per parameter set; the parameters are part of the op's name, so two tapes
with one digest compute the same thing. This module imports only ``ops`` and
``tape``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from .ops import Op, apply
from .tape import CONST, INPUT, Node, Tape

Shape = tuple[int, ...]


@dataclass(frozen=True)
class LoopForm:
    """How an array op is written in loop nests (``emit.array_loops``); one of:

    - ``element``: a template of one element of the result from the elements of
      its operands at the same index (broadcast), as scalar code writes it;
    - ``view``: ``view(index, shape, operand_shape)``, the operand's index (texts)
      of a result's index, or None where it has none (a reshape across axes);
      ``array``, where set, writes the view of a whole array (``{0}.T``);
    - ``reduce``: (kind, axes or None, keepdims), an accumulating loop;
    - ``statement``: Numba code making the whole result from whole arrays
      (``np.dot({0}, {1})``; ``{name}``: the result), where ``fits(*shapes)``; or
      ``statement_of(*shapes)``, the code for operands of those shapes;
      ``product`` marks a matrix product (of 1-D and 2-D operands), which a small
      one is written as loops instead (``emit.array_loops.SMALL_PRODUCT``).

    ``consts``: constant arrays the form reads by name (the loop code takes them
    as arguments).
    """

    element: str | None = None
    view: Callable[[Sequence[str], Shape, Shape], Sequence[str] | None] | None = None
    array: str | None = None
    reduce: tuple[str, tuple[int, ...] | None, bool] | None = None
    statement: str | None = None
    statement_of: Callable[..., str] | None = None
    fits: Callable[..., bool] | None = None
    product: bool = False
    # the constant arrays its text reads, by name (an index's integers)
    consts: dict[str, Any] | None = None


class ArrayOp(Op):
    """An op on whole arrays (not element-wise): ``eval`` takes and returns NumPy
    arrays, ``shape_of(*shapes)`` gives the result's shape, ``code`` is a Python
    template over NumPy (``{0}``: the first operand's text), ``loop`` its form in
    loop nests (None: it has none, and its program stays NumPy code), ``vjp`` its
    reverse rules and ``jvp`` its forward rule (``diff.arrays``)."""

    def __init__(
        self,
        name: str,
        arity: int,
        eval: Callable[..., Any],
        code: str,
        vjp: tuple[Callable | None, ...],
        shape_of: Callable[..., Shape],
        boolean: bool = False,
        constants: dict[str, Any] | None = None,
        keeps_shape: bool = False,
        loop: LoopForm | None = None,
        index: tuple | None = None,
        remake: Callable[[tuple], ArrayOp] | None = None,
        jvp: Callable[..., Any] | None = None,
        batch: Callable[[Sequence[Any], Sequence[bool]], Any] | None = None,
    ) -> None:
        super().__init__(name, arity, eval, code, vjp, smooth=False, method=False)
        self.loop = loop
        # the forward rule: ``jvp(tangents, out, *args)``, the tangent of the result from
        # the operands' (None where an operand has none: zero); None: it has none
        self.jvp = jvp
        # its batching rule: ``batch(args, mapped)``, the result at every point at once,
        # where the operands ``mapped`` hold their points along a new first axis (and
        # the rest are the same for every point); None: it has none (``diff.batching``)
        self.batch = batch
        # an indexing op's index, and the op of its kind at another index (whose ints
        # may be the texts of loop code, ``"(3 + r0)"``: a scan's repetition)
        self.index, self.remake = index, remake
        self.shape_of = shape_of
        self.boolean = boolean  # its result is a boolean array (data: no derivative)
        # what its code names besides NumPy: an index's arrays, a helper function
        self.constants = constants or {}
        # its operand, unchanged, where the result has the operand's shape (a reshape)
        self.keeps_shape = keeps_shape

    def __call__(self, *args: Any) -> Any:
        if all(isinstance(a, (np.ndarray, np.generic, float, int)) for a in args):
            return self.eval(*args)
        return apply(self, *args)  # (a tracing operand records it)


class NotBatched(NotImplementedError):
    """An op has no batching rule for its operands (``ArrayOp.batch``): the program
    runs point by point instead."""


class OpCache:
    """Array ops by their parameters: one op per parameter set, made on first use."""

    def __init__(self) -> None:
        self.ops: dict[tuple, ArrayOp] = {}

    def get(self, key: tuple, make: Callable[[], ArrayOp]) -> ArrayOp:
        op = self.ops.get(key)
        if op is None:
            op = self.ops[key] = make()
        return op


CACHE = OpCache()


# ---------------------------------------------------------------- element-wise ops


_FORMS: dict[int, tuple[Callable, str]] = {}


def numpy_form(op: Op) -> tuple[Callable, str]:
    """How scalar ``op`` applies to float arrays: (function, the name generated code
    calls it by). NumPy's ufunc of its name or alias where NumPy has one, else
    its ``array`` form (``sigmoid``), else ``np.vectorize`` of its ``eval``, named after
    the op (``sigmoid_``)."""
    form = _FORMS.get(id(op))
    if form is None:
        for name in (op.name, *op.ufuncs):
            uf = getattr(np, name, None)
            if isinstance(uf, np.ufunc) and uf.nin == op.arity:
                form = (uf, f"np.{name}")
                break
        else:
            fn = op.array or np.vectorize(op.eval, otypes=[float])
            form = (fn, f"{op.name}_")
        _FORMS[id(op)] = form
    return form


def elementwise_code(op: Op, operands: Sequence[str]) -> str:
    """Generated code applying scalar ``op`` to whole arrays: its infix form where it
    has one (``(v1 + v2)``), else its NumPy form (``np.exp(v1)``)."""
    if op.symbol is not None or op.operator == "neg":
        return op.code.format(*operands)
    return f"{numpy_form(op)[1]}({', '.join(operands)})"


def broadcast(*shapes: Shape) -> Shape:
    """NumPy's broadcast of ``shapes``; ValueError names them where they do not fit."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(
            "operands could not be broadcast together with shapes "
            + " ".join(str(tuple(s)) for s in shapes)
        ) from None


def shape_of(x: Any) -> Shape:
    """``x``'s shape (an array, a tracing array or a number: ``()``)."""
    return tuple(np.shape(x))


# ---------------------------------------------------------------- the array tape


class ArrayTape(Tape):
    """A tape whose slots hold arrays: ``shapes[i]`` is slot ``i``'s shape,
    ``booleans[i]`` whether it holds a boolean array. Constants hold floats or
    arrays (``Node.value``)."""

    def __init__(
        self,
        nodes: list[Node],
        inputs: list[int],
        outputs: list[int],
        names: Sequence[str],
        shapes: Sequence[Shape],
        booleans: Sequence[bool],
        slot_names: Sequence[str] | None = None,
    ) -> None:
        super().__init__(nodes, inputs, outputs, (), names, slot_names=slot_names)
        self.shapes = [tuple(s) for s in shapes]
        self.booleans = list(booleans)
        # in a value-and-gradient tape, the first slot of the adjoint (None: none)
        self.adjoint_from: int | None = None

    def statement(self, i: int) -> str:
        text = super().statement(i) if self.nodes[i].op != CONST else self._const(i)
        return f"{text}  # {self.shapes[i]}" if self.shapes[i] else text

    def _const(self, i: int) -> str:
        v = self.nodes[i].value
        if isinstance(v, np.ndarray):
            return f"{self.name(i)} = array of shape {v.shape}"
        return f"{self.name(i)} = {v!r}"

    def operand(self, i: int) -> str:
        node = self.nodes[i]
        if node.op == CONST and not isinstance(node.value, np.ndarray):
            return repr(node.value)
        return self.name(i)

    def evaluate(self, *args: Any) -> list[Any]:
        """The outputs at these inputs (arrays of the input shapes, or numbers)."""
        if len(args) != len(self.inputs):
            raise TypeError(f"this tape takes {len(self.inputs)} inputs, got {len(args)}")
        vals = sweep(self, [np.asarray(a, dtype=float) for a in args])
        return [vals[o] for o in self.outputs]

    def digest(self, *context: Any) -> tuple[str, list[Op]]:
        h = hashlib.blake2b(digest_size=20)
        ops: dict[int, Op] = {}
        for node, shape in zip(self.nodes, self.shapes):
            op = node.op
            if isinstance(op, Op):
                ops.setdefault(id(op), op)
                h.update(f"{op.name}{node.args}{shape}".encode())
            elif isinstance(node.value, np.ndarray):
                h.update(f"{op}{node.value.shape}{node.value.dtype}".encode())
                h.update(np.ascontiguousarray(node.value).tobytes())
            else:
                h.update(f"{op}{node.value!r}{shape}".encode())
        h.update(repr((self.inputs, self.outputs, self.tree, context)).encode())
        return h.hexdigest(), list(ops.values())


def evaluate_node(op: Op, vals: Sequence[Any]) -> Any:
    """One node's value on arrays (scalar ops by their NumPy form)."""
    if isinstance(op, ArrayOp):
        return op.eval(*vals)
    with np.errstate(all="ignore"):
        return numpy_form(op)[0](*vals)


def sweep(
    tape: Tape,
    inputs: Sequence[Any],
    evaluate: Callable[[Op, list[Any]], Any] = evaluate_node,
    const: Callable[[Any], Any] | None = None,
) -> list[Any]:
    """Every slot's value (arrays), given the inputs: the interpreter of array tapes.
    ``evaluate(op, operands)`` gives a node's value, ``const`` a constant's (as it
    is where None)."""
    vals: list[Any] = [None] * len(tape.nodes)
    for pos, i in enumerate(tape.inputs):
        vals[i] = inputs[pos]
    for i, node in enumerate(tape.nodes):
        if node.op == CONST:
            vals[i] = node.value if const is None else const(node.value)
        elif node.op != INPUT:
            vals[i] = evaluate(node.op, [vals[a] for a in node.args])
    return vals


def code_names(tape: Tape) -> dict[str, Any]:
    """What the ops of ``tape`` name in their code besides NumPy (``ArrayOp.constants``)."""
    return dict(
        chain.from_iterable(
            n.op.constants.items() for n in tape.nodes if isinstance(n.op, ArrayOp)
        )
    )
