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

from .passes import simplify
from .tape import Tape, active_slots, forward_sweep, reverse_sweep
from .value import Value, _const, _serial, build_tape, graph_roots, topological_order


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
    wrt = list(range(len(tape.inputs))) if wrt is None else list(wrt)
    inputs = [Value(0.5) for _ in tape.inputs]
    vals = forward_sweep(tape, inputs, const=_const)
    out = tape.outputs[output]
    adj = _Adjoints(len(vals))
    adj[out] = 1.0
    marks: list[tuple[int, int]] = []  # (first serial made in the block, primal slot)
    reverse_sweep(
        tape,
        vals,
        adj,
        active_slots(tape, [tape.inputs[k] for k in wrt]),
        on_node=lambda i: marks.append((next(_serial), i)),
    )
    grads = []
    for k in wrt:
        g = adj[tape.inputs[k]]
        grads.append(g if isinstance(g, Value) else _const(0.0 if g is None else g))
    y = vals[out] if isinstance(vals[out], Value) else _const(vals[out])
    guards = [(g.cmp, vals[g.a], vals[g.b], g.expected, g.where) for g in tape.guards]
    roots = graph_roots([y, *grads], inputs, guards)
    order = topological_order(roots)
    new = build_tape([y, *grads], inputs, guards, tape.names, order=order)

    # Name each slot after the primal tape: vK for primal slot K, bK for the
    # adjoint of primal slot K, tJ for a temporary; and note which primal
    # statement's adjoint block each slot belongs to.
    primal_of = {id(v): k for k, v in enumerate(vals)}
    mark_serials = [m[0] for m in marks]
    names, blocks = [], []
    for j, v in enumerate(order):
        k = primal_of.get(id(v))
        if k is not None:
            names.append(f"v{k}")
            blocks.append(-1)
            continue
        a = adj.role.get(id(v))
        names.append(f"b{a}" if a is not None else f"t{j}")
        pos = bisect.bisect_right(mark_serials, v._serial) - 1
        blocks.append(marks[pos][1] if pos >= 0 else -1)
    new.slot_names, new.blocks, new.primal = names, blocks, tape
    return simplify(new)
