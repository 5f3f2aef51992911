"""Reverse and forward mode on array tapes: the value-and-gradient tape of an
``ArrayTape``, and its Jacobian-vector products (``jvp_tape``).

The same sweep as ``diff.reverse`` for scalar tapes, run on tracing arrays: the
primal is replayed into a new recorder, then each node's vector-Jacobian rules
(the scalar op's rule applied to whole arrays, or the array op's own) record
the adjoint, node by node, backwards. An element-wise op's contribution is
summed back to its operand's shape where the operand was broadcast
(``ir.array_ops.unbroadcast``). The result is itself an array tape, with the
value first, then one gradient per differentiated input, in its shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import array_ops as A
from ..ir.arrays import ArrayOp, ArrayTape, shape_of
from ..ir.tape import CONST, INPUT, active_slots, forward_sweep
from ..trace.arrays import ArrayTrace


def _fit(c: Any, shape: tuple) -> Any:
    """A contribution ``c`` to an operand of ``shape``: summed back where the operand
    was broadcast, spread out where the rule gave less (a number)."""
    if shape_of(c) != tuple(shape):
        c = A.unbroadcast(c, shape) if len(shape_of(c)) >= len(shape) else c
    if shape_of(c) != tuple(shape):
        c = A.broadcast_to(tuple(shape))(c)
    return c


def _adjoints(
    rec: ArrayTrace, tape: ArrayTape, vals: Sequence[Any], seeds: Sequence[Any], targets: list[int]
) -> list[Any]:
    """The adjoints of the slots ``targets``, recorded into ``rec``: ``vals`` are the
    primal's values replayed there, ``seeds`` the adjoint of each output."""
    active = active_slots(tape, targets)
    adj: list[Any] = [None] * len(tape.nodes)
    for o, seed in zip(tape.outputs, seeds):
        adj[o] = seed if adj[o] is None else adj[o] + seed
    for i in range(len(tape.nodes) - 1, -1, -1):
        g = adj[i]
        node = tape.nodes[i]
        if g is None or not active[i] or node.op in (CONST, INPUT):
            continue
        op = node.op
        argvals = [vals[a] for a in node.args]
        for k, a in enumerate(node.args):
            rule = op.vjp[k] if k < len(op.vjp) else None
            if rule is None or not active[a] or tape.booleans[a]:
                continue  # (None: derivative 0, as floor's)
            c = rule(g, vals[i], *argvals)
            if not isinstance(op, ArrayOp) or shape_of(c) != tape.shapes[a]:
                c = _fit(rec.operand(c), tape.shapes[a])
            adj[a] = c if adj[a] is None else adj[a] + c
    return [adj[s] if adj[s] is not None else rec.const(np.zeros(tape.shapes[s])) for s in targets]


def _replayed(tape: ArrayTape) -> tuple[ArrayTrace, list[Any], list[Any]]:
    """A new recorder with ``tape``'s inputs, and ``tape``'s slots replayed in it."""
    rec = ArrayTrace()
    inputs = [rec.input(tape.shapes[i]) for i in tape.inputs]
    return rec, inputs, forward_sweep(tape, inputs, const=rec.const)


def grad_tape(tape: ArrayTape, wrt: Sequence[int], value: bool = True) -> ArrayTape:
    """The tape of ``tape``'s value (its one output; not with ``value`` False) and its
    gradient with respect to the inputs at positions ``wrt`` (of ``tape.inputs``),
    in their shapes."""
    rec, _, vals = _replayed(tape)  # the primal, recorded again
    (out,) = tape.outputs
    start = len(rec.nodes)
    seed = rec.const(np.ones(tape.shapes[out])) if tape.shapes[out] else rec.const(1.0)
    grads = _adjoints(rec, tape, vals, [seed], [tape.inputs[p] for p in wrt])
    outs = [vals[out], *grads] if value else grads
    return rec.tape(outs, tape.names, adjoint_from=start)


def vjp_tape(tape: ArrayTape, wrt: Sequence[int]) -> ArrayTape:
    """The tape of ``u^T J``: after ``tape``'s inputs, one input ``u`` per output (of
    its shape); outputs, the vector-Jacobian product for each input of ``wrt``."""
    rec, _, vals = _replayed(tape)
    start = len(rec.nodes)
    us = [rec.input(tape.shapes[o]) for o in tape.outputs]
    grads = _adjoints(rec, tape, vals, us, [tape.inputs[p] for p in wrt])
    names = [*tape.names, *(f"u{k}" for k in range(len(us)))]
    return rec.tape(grads, names, adjoint_from=start)


def _dotted(rec: ArrayTrace, pairs: Sequence[tuple[Any, Any]]) -> Any:
    """``sum(a * b)`` over the pairs, recorded: the scalar whose derivative is sought."""
    total = None
    for a, b in pairs:
        prod = a * b
        term = A.reduce("sum", None, False)(prod) if shape_of(prod) else prod
        total = term if total is None else total + term
    return total


def hvp_tape(tape: ArrayTape, wrt: Sequence[int]) -> ArrayTape:
    """The tape of the Hessian of ``tape``'s one output times a vector: after its
    inputs, one input ``v`` per input of ``wrt`` (of its shape); outputs, ``H v``
    per input of ``wrt``. Reverse over reverse: the gradient of ``grad . v``, whose
    rules are array ops too."""
    g = grad_tape(tape, wrt, value=False)
    rec, inputs, vals = _replayed(g)
    vs = [rec.input(tape.shapes[tape.inputs[p]]) for p in wrt]
    dotted = _dotted(rec, [(vals[o], v) for o, v in zip(g.outputs, vs)])
    names = [*tape.names, *(f"v{k}" for k in range(len(vs)))]
    return grad_tape(rec.tape([rec.operand(dotted)], names), wrt, value=False)


class NoForwardRule(NotImplementedError):
    """An array op with no forward rule (``ArrayOp.jvp``) has a tangent."""


def _tangents(
    rec: ArrayTrace, tape: ArrayTape, vals: Sequence[Any], seeds: dict[int, Any]
) -> list[Any]:
    """Each slot's tangent (None: zero), recorded into ``rec`` node by node, forwards,
    from the ``seeds`` of input slots. An element-wise op's is the sum of its reverse
    rules applied to its operands' tangents (its derivative is diagonal, so the rule
    that multiplies an adjoint by it multiplies a tangent alike); an array op's is
    its own forward rule's."""
    tan: list[Any] = [None] * len(tape.nodes)
    for slot, t in seeds.items():
        tan[slot] = t
    for i, node in enumerate(tape.nodes):
        if node.op in (CONST, INPUT) or tape.booleans[i]:
            continue
        ts = [None if tape.booleans[a] else tan[a] for a in node.args]
        if all(t is None for t in ts):
            continue
        argvals = [vals[a] for a in node.args]
        if isinstance(node.op, ArrayOp):
            if node.op.jvp is None:
                raise NoForwardRule(node.op.name)
            tan[i] = rec.operand(node.op.jvp(ts, vals[i], *argvals))
            continue
        total = None
        for k, t in enumerate(ts):
            rule = node.op.vjp[k] if k < len(node.op.vjp) else None
            if t is None or rule is None:
                continue  # (None: derivative 0, as floor's)
            c = rec.operand(rule(t, vals[i], *argvals))
            total = c if total is None else total + c
        if total is not None and shape_of(total) != tape.shapes[i]:
            total = A.broadcast_to(tape.shapes[i])(total)
        tan[i] = total
    return tan


def jvp_tape(tape: ArrayTape, wrt: Sequence[int], value: bool = True) -> ArrayTape:
    """The tape of ``J t``: after ``tape``'s inputs, one tangent ``t`` per input of
    ``wrt`` (of its shape); outputs, ``tape``'s own (not with ``value`` False), then
    the directional derivative of each: one forward sweep of the ops' forward rules
    (``_tangents``). Where an op has none, two reverse sweeps instead
    (``jvp_by_reverse``)."""
    rec, xs, vals = _replayed(tape)
    ts = [rec.input(tape.shapes[tape.inputs[p]]) for p in wrt]
    try:
        tan = _tangents(rec, tape, vals, {tape.inputs[p]: t for p, t in zip(wrt, ts)})
    except NoForwardRule:
        return jvp_by_reverse(tape, wrt, value)
    outs = [
        tan[o] if tan[o] is not None else rec.const(np.zeros(tape.shapes[o])) for o in tape.outputs
    ]
    if value:
        outs = [vals[o] for o in tape.outputs] + outs
    names = [*tape.names, *(f"t{k}" for k in range(len(ts)))]
    return rec.tape([rec.operand(o) for o in outs], names)


def has_forward_rules(tape: ArrayTape) -> bool:
    """Whether every array op of ``tape`` has a forward rule (``jvp_tape`` is then one
    forward sweep)."""
    ops = [n.op for n in tape.nodes if isinstance(n.op, ArrayOp) and not n.op.boolean]
    return all(op.jvp is not None for op in ops)  # (a comparison's result is data)


def jvp_by_reverse(tape: ArrayTape, wrt: Sequence[int], value: bool = True) -> ArrayTape:
    """The tape of ``J t``: after ``tape``'s inputs, one tangent ``t`` per input of
    ``wrt`` (of its shape); outputs, ``tape``'s own (not with ``value`` False), then
    the directional derivative of each. ``J t`` is the gradient in ``u`` of
    ``(u^T J) . t``, which is linear in ``u`` (so ``u`` is 0 in the end): two reverse
    sweeps, on the vector-Jacobian rules alone."""
    n, m = len(tape.inputs), len(tape.outputs)
    v = vjp_tape(tape, wrt)
    rec, inputs, vals = _replayed(v)
    ts = [rec.input(tape.shapes[tape.inputs[p]]) for p in wrt]
    dotted = _dotted(rec, [(vals[o], t) for o, t in zip(v.outputs, ts)])
    names = [*v.names, *(f"t{k}" for k in range(len(ts)))]
    d = grad_tape(rec.tape([rec.operand(dotted)], names), range(n, n + m), value=False)
    # the same, with u = 0 and the primal's outputs first
    rec = ArrayTrace()
    xs = [rec.input(tape.shapes[i]) for i in tape.inputs]
    ts = [rec.input(tape.shapes[tape.inputs[p]]) for p in wrt]
    zeros = [rec.const(np.zeros(tape.shapes[o])) for o in tape.outputs]
    dvals = forward_sweep(d, [*xs, *zeros, *ts], const=rec.const)
    outs = [dvals[o] for o in d.outputs]
    if value:
        primal = forward_sweep(tape, xs, const=rec.const)
        outs = [primal[o] for o in tape.outputs] + outs
    return rec.tape([rec.operand(o) for o in outs], [*tape.names, *names[n + m :]])
