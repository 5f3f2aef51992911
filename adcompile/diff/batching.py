"""Batching: an array tape run at many points at once (``vmap`` of array code).

``batch_tape(tape, mapped, n)`` is the tape of ``tape`` at ``n`` points: the
inputs ``mapped`` hold one point per row of a new first axis, the others are
the same at every point. The tape is replayed node by node into a new
recorder. A node none of whose operands is mapped is replayed as it is (its
value is the same at every point); any other is its op's batching rule
(``ArrayOp.batch``, or ``array_ops.batch_elementwise`` for the scalar ops),
which records NumPy calls on whole batches: a point's ``x @ W`` is one
``(n, j) @ (j, k)`` product. Where an op has no rule for its operands,
:class:`~adcompile.ir.arrays.NotBatched` says which, and the caller runs the
points one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import array_ops as A
from ..ir.arrays import ArrayOp, ArrayTape, NotBatched, shape_of
from ..ir.tape import CONST, INPUT
from ..trace.arrays import ArrayTrace


def batch_tape(tape: ArrayTape, mapped: Sequence[bool], n: int) -> ArrayTape:
    """The tape of ``tape`` at ``n`` points (module doc): input ``k`` of shape ``(n,
    *shape)`` where ``mapped[k]``; each output of shape ``(n, *shape)``."""
    rec = ArrayTrace()
    vals: list[Any] = [None] * len(tape.nodes)
    batched = [False] * len(tape.nodes)
    for slot, m in zip(tape.inputs, mapped):
        vals[slot] = rec.input(((n,) if m else ()) + tape.shapes[slot])
        batched[slot] = m
    for i, node in enumerate(tape.nodes):
        op = node.op
        if op == CONST:
            vals[i] = rec.const(node.value)
        elif op != INPUT:
            args = [vals[a] for a in node.args]
            flags = [batched[a] for a in node.args]
            if not any(flags):
                vals[i] = op(*args)
                continue
            rule = op.batch if isinstance(op, ArrayOp) else A.batch_elementwise(op)
            if rule is None:
                raise NotBatched(f"{op.name} has no batching rule")
            vals[i] = rule(args, flags)
            batched[i] = True
            if shape_of(vals[i]) != (n, *tape.shapes[i]):  # (a rule's bug: never run it)
                raise NotBatched(
                    f"{op.name}: batched to {shape_of(vals[i])}, not {(n, *tape.shapes[i])}"
                )
    outs = [
        rec.operand(vals[o] if batched[o] else A.spread(rec.operand(vals[o]), n))
        for o in tape.outputs
    ]
    return rec.tape(outs, tape.names)


def run_batched(program: Any, tape: ArrayTape, args: Sequence[Any], n: int) -> np.ndarray:
    """Run ``program`` (array code of ``batch_tape(tape, ...)``) on ``args``: the
    results, one row of ``tape``'s outputs, flattened and joined, per point."""
    flat = np.empty(program.n_out)
    program.run(*args, flat)
    rows, start = [], 0
    for o in tape.outputs:
        size = n * int(np.prod(tape.shapes[o], dtype=np.int64))
        rows.append(flat[start : start + size].reshape(n, -1))
        start += size
    return np.concatenate(rows, axis=1) if len(rows) > 1 else rows[0]
