"""Reverse mode on array tapes: the value-and-gradient tape of an ``ArrayTape``.

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


def grad_tape(tape: ArrayTape, wrt: Sequence[int]) -> ArrayTape:
    """The tape of ``tape``'s value (its one output) and its gradient with respect
    to the inputs at positions ``wrt`` (of ``tape.inputs``), in their shapes."""
    rec = ArrayTrace()
    inputs = [rec.input(tape.shapes[i]) for i in tape.inputs]
    vals = forward_sweep(tape, inputs, const=rec.const)  # the primal, recorded again
    (out,) = tape.outputs
    targets = [tape.inputs[p] for p in wrt]
    active = active_slots(tape, targets)
    start = len(rec.nodes)
    adj: list[Any] = [None] * len(tape.nodes)
    adj[out] = rec.const(np.ones(tape.shapes[out])) if tape.shapes[out] else rec.const(1.0)
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
                continue
            c = rule(g, vals[i], *argvals)
            if not isinstance(op, ArrayOp) or shape_of(c) != tape.shapes[a]:
                c = _fit(rec.operand(c), tape.shapes[a])
            adj[a] = c if adj[a] is None else adj[a] + c
    grads = [
        adj[s] if adj[s] is not None else rec.const(np.zeros(tape.shapes[s])) for s in targets
    ]
    return rec.tape([vals[out], *grads], tape.names, adjoint_from=start)
