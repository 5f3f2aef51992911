"""Reverse mode as a tape transform: tape in, tape of value and gradient out.

The primal tape is replayed on fresh tracing Values, then the tape's own
reverse sweep runs on those Values: each derivative rule records the
primitives it uses, so the adjoint comes out as an ordinary tape that the
interpreter, the code generator, SymPy and this transform itself (second
derivatives) all accept.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from ..ir.passes import simplify
from ..ir.tape import Node, Tape, active_slots, forward_sweep, reverse_sweep
from ..trace.mode import gc_paused, recording
from ..trace.tapes import recorded_on
from ..trace.value import Value, append_nodes, constant, next_serial, serial_of


class _Adjoints(list):
    """The sweep's adjoint list; remembers which primal slot each Value is the adjoint of."""

    def __init__(self, n: int) -> None:
        super().__init__([None] * n)
        self.role: dict[int, int] = {}

    def __setitem__(self, a: int, v: Any) -> None:
        if isinstance(v, Value):
            self.role.setdefault(id(v), a)
        super().__setitem__(a, v)


def grad_tape(tape: Tape, wrt: Sequence[int] | None = None, output: int = 0) -> Tape:
    """The tape computing ``[y, dy/dx_k for k in wrt]`` for ``y = tape.outputs[output]``.

    ``wrt`` lists positions in ``tape.inputs`` (all of them by default).
    """
    with gc_paused():  # large acyclic graphs and lists: nothing for the collector
        return _grad_tape(tape, wrt, output)


def _grad_tape(tape: Tape, wrt: Sequence[int] | None, output: int) -> Tape:
    wrt = list(range(len(tape.inputs))) if wrt is None else list(wrt)
    out = tape.outputs[output]
    marks: list[tuple[int, int]] = []  # (first serial made in the block, primal slot)
    # Recorded at an arbitrary point (0.5), in the default mode: not under the
    # caller's no_grad, debug_nans or outer trace.
    with recording():
        inputs = [Value(0.5) for _ in tape.inputs]
        vals = forward_sweep(tape, inputs, const=constant)
        adj = _Adjoints(len(vals))
        adj[out] = 1.0
        reverse_sweep(
            tape,
            vals,
            adj,
            active_slots(tape, [tape.inputs[k] for k in wrt]),
            on_node=lambda i: marks.append((next_serial(), i)),
        )
        grads = []
        for k in wrt:
            g = adj[tape.inputs[k]]
            grads.append(g if isinstance(g, Value) else constant(0.0 if g is None else g))

    # The new tape starts with the primal tape as it is (slot k of both is the
    # same value); the Values the sweep recorded follow in creation order.
    n = len(tape.nodes)
    index = {id(v): k for k, v in enumerate(vals)}  # primal Value -> its slot
    recorded = recorded_on(grads, index)
    nodes: list[Node] = list(tape.nodes)
    append_nodes(recorded, index, nodes)
    outputs = [out] + [index[id(g)] for g in grads]

    # Name each slot after the primal tape: vK for primal slot K, bK for the
    # adjoint of primal slot K, tJ for a temporary; and note which primal
    # statement's adjoint block each slot belongs to.
    role = adj.role
    mark_serials = [m[0] for m in marks]
    names = [f"v{k}" for k in range(n)]
    blocks = [-1] * n
    for j, v in enumerate(recorded, n):
        a = role.get(id(v))
        names.append(f"b{a}" if a is not None else f"t{j}")
        pos = bisect.bisect_right(mark_serials, serial_of(v)) - 1
        blocks.append(marks[pos][1] if pos >= 0 else -1)
    new = Tape(
        nodes,
        tape.inputs,
        outputs,
        tape.guards,
        tape.names,
        where=None,
        slot_names=names,
        blocks=blocks,
        primal=tape,
    )
    return simplify(new)
