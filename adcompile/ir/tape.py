"""The tape: a flat SSA list of primitive operations in recording order.

Recording order is already a topological order, so every pass over a tape is
a plain loop: forward in order, reverse backwards. Nothing here recurses.
The sweeps are generic: slots may hold floats (the interpreter, eager
``backward``) or tracing Values (the reverse-mode transform records the
adjoint as a new tape with the very same loop).
"""

from __future__ import annotations

import hashlib
import operator
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

from .ops import Op

# Leaves are not ops: an input slot takes the next argument, a constant slot
# holds its float in ``Node.value``.
INPUT = "input"
CONST = "const"


def _op_name(op: Op | str) -> str:
    return op.name if isinstance(op, Op) else f"<{op}>"


@dataclass(frozen=True)
class Param:
    """One argument of generated code: a scalar, or a flat float array."""

    name: str
    size: int | None  # None for a scalar


class Node(NamedTuple):
    """One SSA statement: ``op`` applied to the slots ``args``."""

    op: Op | str  # an Op, or INPUT / CONST for leaves
    args: tuple[int, ...] = ()
    value: float = 0.0  # a constant's value (unused otherwise)


COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


class Guard(NamedTuple):
    """A comparison made while tracing: ``slot[a] cmp slot[b]`` was ``expected``."""

    cmp: str
    a: int
    b: int
    expected: bool
    where: str = ""  # the user's source line that made the comparison

    def holds(self, vals: Sequence[float]) -> bool:
        return COMPARE[self.cmp](vals[self.a], vals[self.b]) == self.expected


class Tape:
    """A flat SSA program: nodes, which slots are inputs, outputs and guards."""

    def __init__(
        self,
        nodes: list[Node],
        inputs: list[int],
        outputs: list[int],
        guards: Sequence[Guard] = (),
        names: Sequence[str] | None = None,
        where: Sequence[str] | None = None,
        slot_names: Sequence[str] | None = None,
        blocks: Sequence[int] | None = None,
        primal: Tape | None = None,
    ) -> None:
        self.nodes = nodes
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.guards = list(guards)
        self.names = list(names) if names is not None else [f"x{i}" for i in range(len(inputs))]
        self.where = where  # per slot, the user's source line that recorded it
        # A tape made by a transform names its slots after the slots of the tape
        # it came from (``v3`` primal, ``b3`` its adjoint, ``t9`` a temporary),
        # and ``blocks[j]`` is the primal slot whose adjoint slot ``j`` pulls back.
        self.slot_names = list(slot_names) if slot_names is not None else None
        self.blocks = list(blocks) if blocks is not None else None
        self.primal = primal
        self.hoisted = False  # constants at the front, one slot per value
        # what the function returned (adcompile.outputs): None for one scalar
        self.tree: Any = None

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def n_ops(self) -> int:
        """How many primitive operations (leaves not counted)."""
        return sum(1 for n in self.nodes if isinstance(n.op, Op))

    def name(self, i: int) -> str:
        """The name of slot ``i`` (``v{i}`` unless a transform named it)."""
        return self.slot_names[i] if self.slot_names is not None else f"v{i}"

    def operand(self, i: int) -> str:
        """How slot ``i`` reads as an operand: constants inline, the rest by name."""
        node = self.nodes[i]
        return repr(node.value) if node.op == CONST else self.name(i)

    def statement(self, i: int) -> str:
        """Slot ``i`` as one line of SSA text (``v5 = sin(v4)``)."""
        node = self.nodes[i]
        if node.op == INPUT:
            return f"{self.name(i)} = input {self.names[self.inputs.index(i)]}"
        if node.op == CONST:
            return f"{self.name(i)} = {node.value!r}"
        args = ", ".join(self.operand(a) for a in node.args)
        return f"{self.name(i)} = {node.op.name}({args})"

    def __str__(self) -> str:
        lines = [self.statement(i) for i, n in enumerate(self.nodes) if n.op != CONST]
        for g in self.guards:
            lines.append(f"guard {self.operand(g.a)} {g.cmp} {self.operand(g.b)} is {g.expected}")
        lines.append("out " + ", ".join(self.operand(o) for o in self.outputs))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<Tape: {len(self.inputs)} inputs, {self.n_ops} ops, "
            f"{len(self.outputs)} outputs, {len(self.guards)} guards>"
        )

    def evaluate(self, *args: Any) -> list[float]:
        """The outputs at these inputs (floats, or arrays of them in order: the
        function's arguments), by the forward sweep. Raises ``ValueError`` where a
        guard fails: the tape holds the branches taken where it was traced."""
        if len(args) != len(self.inputs):
            import numpy as np  # (arrays: their elements are the inputs)

            args = tuple(v for a in args for v in np.ravel(np.asarray(a, dtype=float)))
        if len(args) != len(self.inputs):
            raise TypeError(f"this tape takes {len(self.inputs)} inputs, got {len(args)}")
        vals = forward_sweep(self, [float(a) for a in args])
        for g in self.guards:
            if not g.holds(vals):
                raise ValueError(
                    f"at these inputs the guard v{g.a} {g.cmp} v{g.b} is "
                    f"{not g.expected}: this tape holds the branches taken where it was "
                    "traced, not this one's; trace the function again at these inputs"
                )
        return [vals[o] for o in self.outputs]

    def digest(self, *context: Any) -> tuple[str, list[Op]]:
        """A hash of what code made from this tape depends on: every node (op,
        operand slots, a constant's exact value), inputs, outputs, guards and the
        output tree, with ``context`` (what else the code depends on). Two tapes
        with one digest give the same code; the user's line names do not count.

        Ops count by name here (the same in every process); the ops are returned,
        for a caller that must tell apart two ops of one name (one defined again).
        Linear in the tape, in C loops (about 0.1 s for 300,000 slots)."""
        import numpy as np

        nodes = self.nodes
        ops = list(map(itemgetter(0), nodes))
        args = list(map(itemgetter(1), nodes))
        ids = np.frombuffer(array("q", map(id, ops)), dtype=np.int64)
        _, first, codes = np.unique(ids, return_index=True, return_inverse=True)
        distinct = [ops[k] for k in first]  # one node's op per distinct op
        names = [_op_name(op) for op in distinct]
        rank = np.empty(len(names), dtype=np.int64)
        rank[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names))
        h = hashlib.blake2b(digest_size=20)
        h.update(repr(sorted(names)).encode())
        h.update(rank[codes].astype(np.int64).tobytes())
        h.update(array("q", map(len, args)).tobytes())
        h.update(array("q", chain.from_iterable(args)).tobytes())
        h.update(array("d", map(itemgetter(2), nodes)).tobytes())
        tail = (self.inputs, self.outputs, [tuple(g[:4]) for g in self.guards], self.tree)
        h.update(repr((tail, self.hoisted, context)).encode())
        return h.hexdigest(), [op for op in distinct if isinstance(op, Op)]

    # ``tape.to_sympy()`` is set by the package (``adcompile/__init__.py``): the SymPy
    # bridge (``symbolic.py``) builds tapes, so this module, below it, imports it not.


def active_slots(tape: Tape, wrt: Sequence[int]) -> list[bool]:
    """Which slots depend on the slots ``wrt`` (the ones that need adjoints)."""
    active = [False] * len(tape.nodes)
    for i in wrt:
        active[i] = True
    for i, node in enumerate(tape.nodes):
        if not active[i] and isinstance(node.op, Op):
            active[i] = any(active[a] for a in node.args)
    return active


def forward_sweep(
    tape: Tape, inputs: Sequence[Any], const: Callable[[float], Any] = float
) -> list[Any]:
    """Every slot's value, given the inputs (floats, or Values to record)."""
    nodes = tape.nodes
    vals: list[Any] = [None] * len(nodes)
    for pos, i in enumerate(tape.inputs):
        vals[i] = inputs[pos]
    for i, node in enumerate(nodes):
        op = node.op
        if op == CONST:
            vals[i] = const(node.value)
        elif op != INPUT:
            vals[i] = op(*[vals[a] for a in node.args])
    return vals


def reverse_sweep(
    tape: Tape,
    vals: Sequence[Any],
    adj: list[Any],
    active: Sequence[bool],
    on_node: Callable[[int], None] | None = None,
) -> list[Any]:
    """Pull adjoints back through the tape; ``adj`` holds the seeds, ``None`` is zero.

    ``vals`` and ``adj`` may hold floats or tracing Values: the loop is the
    same, which is how the adjoint of a tape becomes a tape. ``on_node(i)``,
    if given, is called before slot ``i``'s adjoint is pulled back.
    """
    nodes = tape.nodes
    for i in range(len(nodes) - 1, -1, -1):
        g = adj[i]
        if g is None or not active[i]:
            continue
        node = nodes[i]
        op = node.op
        if not isinstance(op, Op):
            continue
        if on_node is not None:
            on_node(i)
        args = node.args
        argvals = [vals[a] for a in args]
        for k, a in enumerate(args):
            rule = op.vjp[k]
            if rule is None or not active[a]:
                continue
            c = rule(g, vals[i], *argvals)
            prev = adj[a]
            adj[a] = c if prev is None else prev + c
    return adj


def tangent_sweep(tape: Tape, vals: Sequence[Any], tan: list[Any]) -> list[Any]:
    """Push tangents forward through the tape; ``tan`` holds the seeds, ``None`` is zero.

    Forward mode's counterpart of :func:`reverse_sweep`, and as generic: with
    tracing Values in ``vals`` and ``tan`` the tangent of a tape is a tape.
    """
    nodes = tape.nodes
    for i, node in enumerate(nodes):
        op = node.op
        if not isinstance(op, Op):
            continue
        args = node.args
        acc = None
        for k, a in enumerate(args):
            t = tan[a]
            if t is None:
                continue
            rule = op.tangent_rule(k)
            if rule is None:
                continue
            c = rule(t, vals[i], *[vals[b] for b in args])
            acc = c if acc is None else acc + c
        tan[i] = acc
    return tan
