"""Tape-to-tape clean-ups: exact algebraic identities and dead-code removal."""

from __future__ import annotations

import struct
from collections.abc import Container

from .ops import Op
from .tape import CONST, INPUT, Guard, Node, Tape

_node = tuple.__new__  # Node(op, args, value) without NamedTuple's keyword handling


def _is(node: Node, value: float) -> bool:
    """Whether ``node`` is the constant ``value``, bit for bit (``-0.0`` is not ``0.0``)."""
    return node.op == CONST and struct.pack("<d", node.value) == struct.pack("<d", value)


def _identity(node: Node, nodes: list[Node]) -> int | None:
    """The operand slot this node equals exactly, if it is an identity: an operand
    and the op's identity element (``x * 1``, ``1 * x``, ``x - 0``), or ``--x``.

    ``0 + x`` is kept: it is no identity (``0.0 + -0.0`` is ``0.0``; add's is
    ``-0.0``), and it is how a sum starts (``total = 0.0`` then ``total = total
    + t``): kept, a loop's first repetition is the same as the others, so that
    the whole loop folds.
    """
    op, args = node.op, node.args
    if op.involution:
        inner = nodes[args[0]]
        return inner.args[0] if inner.op is op else None
    unit = op.identity
    if op.commutative and _is(nodes[args[0]], unit):
        return args[1]
    if _is(nodes[args[1]], unit):
        return args[0]
    return None


def simplify(tape: Tape) -> Tape:
    """Drop exact identities (``x * 1``, ``x - 0``, ``--x``), fold constants and
    remove every slot that reaches no output or guard."""
    nodes: list[Node] = []
    alias: list[int] = []
    append, keep = nodes.append, alias.append
    for node in tape.nodes:
        op = node.op
        if isinstance(op, Op):
            args = node.args
            moved = tuple([alias[a] for a in args])
            if moved != args:
                node = _node(Node, (op, moved, 0.0))
            same = _identity(node, nodes) if op.identity is not None or op.involution else None
            if same is not None:
                keep(same)
                append(node)  # placeholder, dead after aliasing
                continue
            if all(nodes[a].op == CONST for a in moved):
                node = _node(Node, (CONST, (), op.eval(*[nodes[a].value for a in moved])))
        keep(len(nodes))
        append(node)
    outputs = [alias[o] for o in tape.outputs]
    guards = [g._replace(a=alias[g.a], b=alias[g.b]) for g in tape.guards]
    return prune(tape, nodes, outputs, guards)


def prune(
    tape: Tape,
    nodes: list[Node] | None = None,
    outputs: list[int] | None = None,
    guards: list[Guard] | None = None,
) -> Tape:
    """The same tape without the slots that reach no output or guard."""
    nodes = tape.nodes if nodes is None else nodes
    outputs = tape.outputs if outputs is None else outputs
    guards = tape.guards if guards is None else guards
    live = [False] * len(nodes)
    for i in list(outputs) + list(tape.inputs) + [s for g in guards for s in (g.a, g.b)]:
        live[i] = True
    for i in range(len(nodes) - 1, -1, -1):
        if live[i]:
            for a in nodes[i].args:
                live[a] = True
    new_index = [-1] * len(nodes)
    kept: list[Node] = []
    for i, node in enumerate(nodes):
        if live[i]:
            new_index[i] = len(kept)
            args = node.args
            if args:
                moved = tuple([new_index[a] for a in args])
                if moved != args:
                    node = _node(Node, (node.op, moved, node.value))
            kept.append(node)

    def keep(per_slot: list | None) -> list | None:
        return None if per_slot is None else [x for x, lv in zip(per_slot, live) if lv]

    return Tape(
        kept,
        [new_index[i] for i in tape.inputs],
        [new_index[o] for o in outputs],
        [g._replace(a=new_index[g.a], b=new_index[g.b]) for g in guards],
        tape.names,
        where=keep(tape.where),
        slot_names=keep(tape.slot_names),
        blocks=keep(tape.blocks),
        primal=tape.primal,
    )


def hoist_constants(tape: Tape) -> Tape:
    """The same tape with every constant moved to the front, once per value.

    A constant recorded inside one repetition of a loop (``0.0`` as a sum
    starts) would otherwise make that repetition one slot longer than the
    others, and the loop would not fold from its start.
    """
    if tape.hoisted:
        return tape
    nodes = tape.nodes
    consts: dict[bytes, int] = {}
    order: list[int] = []  # new position -> old slot
    new_index = [-1] * len(nodes)
    for i, node in enumerate(nodes):
        if node.op == CONST:
            key = struct.pack("<d", node.value)
            j = consts.get(key)
            if j is None:
                j = consts[key] = len(order)
                order.append(i)
            new_index[i] = j
    for i, node in enumerate(nodes):
        if node.op != CONST:
            new_index[i] = len(order)
            order.append(i)
    kept: list[Node] = []
    for i in order:
        node = nodes[i]
        if node.args:
            node = _node(Node, (node.op, tuple([new_index[a] for a in node.args]), node.value))
        kept.append(node)

    def perm(per_slot: list | None) -> list | None:
        return None if per_slot is None else [per_slot[i] for i in order]

    hoisted = Tape(
        kept,
        [new_index[i] for i in tape.inputs],
        [new_index[o] for o in tape.outputs],
        [g._replace(a=new_index[g.a], b=new_index[g.b]) for g in tape.guards],
        tape.names,
        where=perm(tape.where),
        slot_names=perm(tape.slot_names),
        blocks=perm(tape.blocks),
        primal=tape.primal,
    )
    hoisted.hoisted = True
    return hoisted


def is_leaf(node: Node) -> bool:
    return node.op == INPUT or node.op == CONST


def zero_flow(
    nodes: list[Node], s: int, skip: Container[int] = frozenset()
) -> tuple[list[bool], list[int]]:
    """What follows from slot ``s`` being 0, slot by slot after it: which slots are
    then 0 (a constant 0.0; a product, quotient or negation of 0; a sum or
    difference of zeros), and which slot each then equals (``c + 0`` is ``c``;
    itself otherwise). ``skip``: slots left as they are (values known before).

    nan and inf times zero aside, as in a hand-written backward pass that skips
    work whose cotangent is zero.
    """
    zero = [nd.op == CONST and nd.value == 0.0 for nd in nodes]
    same = list(range(len(nodes)))
    zero[s] = True
    for j in range(s + 1, len(nodes)):
        if j in skip:
            continue
        op, a = nodes[j].op, nodes[j].args
        if not isinstance(op, Op):
            continue
        if any(zero[a[k]] for k in op.linear_in):
            zero[j] = True
        elif op.linear:
            zero[j] = all(zero[k] for k in a)
        if op.identity == 0.0 and len(a) == 2:  # x + 0, x - 0 (a zero of either sign)
            if zero[a[1]]:
                same[j] = same[a[0]]
            elif op.commutative and zero[a[0]]:
                same[j] = same[a[1]]
    return zero, same
