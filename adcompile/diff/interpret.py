"""Evaluate any tape on floats, forward and in reverse."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..ir.tape import CONST, INPUT, Tape, active_slots, reverse_sweep


def values(tape: Tape, args: Sequence[float]) -> list[float]:
    """Every slot's float value, given the inputs."""
    nodes = tape.nodes
    if len(args) != len(tape.inputs):
        raise TypeError(f"this tape takes {len(tape.inputs)} inputs, got {len(args)}")
    vals = [0.0] * len(nodes)
    for pos, i in enumerate(tape.inputs):
        vals[i] = float(args[pos])
    for i, node in enumerate(nodes):
        op = node.op
        if op == CONST:
            vals[i] = node.value
        elif op != INPUT:
            vals[i] = op.eval(*[vals[a] for a in node.args])
    return vals


def evaluate(tape: Tape, args: Sequence[float]) -> list[float]:
    """The tape's outputs."""
    vals = values(tape, args)
    return [vals[o] for o in tape.outputs]


def guards_hold(tape: Tape, vals: Sequence[float]) -> bool:
    """Whether every comparison made while tracing comes out the same way."""
    return all(g.holds(vals) for g in tape.guards)


def value_and_grad(
    tape: Tape, args: Sequence[float], output: int = 0
) -> tuple[float, list[float]]:
    """The output ``output`` and its gradient with respect to every input."""
    vals = values(tape, args)
    out = tape.outputs[output]
    adj: list = [None] * len(vals)
    adj[out] = 1.0
    reverse_sweep(tape, vals, adj, active_slots(tape, tape.inputs))
    return vals[out], [0.0 if adj[i] is None else adj[i] for i in tape.inputs]


def first_nonfinite(tape: Tape, args: Sequence[float]) -> tuple[int, list[float]] | None:
    """The first slot whose op made nan or inf from finite operands, and all values."""
    vals = values(tape, args)
    for i, node in enumerate(tape.nodes):
        if (
            node.op != CONST
            and node.op != INPUT
            and not math.isfinite(vals[i])
            and all(math.isfinite(vals[a]) for a in node.args)
        ):
            return i, vals
    return None
