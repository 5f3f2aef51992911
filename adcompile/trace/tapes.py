"""A graph of Values laid out as a tape (``build_tape``).

The order is ``value.topological_order``'s (creation order), its nodes
``value.lay_out``'s. With ``before`` (a serial), a Value made before a trace
started is a constant of its current ``.data``; with ``hoist``, each constant
value has one slot at the front; with ``where``, each slot names the user's line
that made it. Comparisons between two constants are not kept as guards.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any

from ..ir.tape import CONST, Guard, Tape
from .mode import site_text
from .value import Value, lay_out, serial_of, topological_order


def recorded_on(roots: Sequence[Value], known: Container[int]) -> list[Value]:
    """The Values the roots depend on through Values not in ``known`` (ids), those
    not in ``known``, in creation order: what was recorded on top of them (reverse
    mode's adjoint, on top of the primal's Values)."""
    seen: set[int] = set()
    found: list[Value] = []
    stack = [v for v in roots if id(v) not in known]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        found.append(v)
        stack.extend(p for p in v.operands if id(p) not in known)
    found.sort(key=serial_of)
    return found


def graph_roots(
    outputs: Sequence[Value], inputs: Sequence[Value], guards: Sequence[tuple] = ()
) -> list[Value]:
    """Everything a tape must hold: inputs, outputs and both sides of each guard."""
    return list(inputs) + list(outputs) + [g[i] for g in guards for i in (1, 2)]


def build_tape(
    outputs: Sequence[Value],
    inputs: Sequence[Value],
    guards: Sequence[tuple] = (),
    names: Sequence[str] | None = None,
    order: list[Value] | None = None,
    where: dict[int, Any] | None = None,
    hoist: bool = False,
    before: int | None = None,
) -> Tape:
    """Lay out the graph from ``inputs`` to ``outputs`` (and guards) as a tape.

    ``order`` is ``topological_order(graph_roots(...), before)`` when the caller
    has it. With ``before``, a Value made before that serial (and not an input)
    is a constant of its current ``.data``, whatever made it.
    With ``hoist``, each constant value gets one slot, at the front (as
    ``passes.hoist_constants`` would make it, at a fraction of the cost).
    """
    if order is None:
        order = topological_order(graph_roots(outputs, inputs, guards), before)
    input_ids = {id(v) for v in inputs}
    nodes, index, firsts, order = lay_out(order, input_ids, before, hoist)
    tape_guards = [
        Guard(cmp, index[id(a)], index[id(b)], res, where)
        for cmp, a, b, res, where in guards
        if nodes[index[id(a)]].op != CONST or nodes[index[id(b)]].op != CONST
    ]
    tape = Tape(
        nodes,
        [index[id(v)] for v in inputs],
        [index[id(v)] for v in outputs],
        tape_guards,
        names,
        where=None if where is None else _where_texts(where, firsts + order),
    )
    tape.hoisted = hoist  # (passes.hoist_constants has nothing to do)
    return tape


def _where_texts(where: dict[int, Any], order: Sequence[Value]) -> list[str]:
    """The user's line (``file:line``) of each Value in ``order`` (``""`` if not recorded)."""
    texts: dict[Any, str] = {None: "?"}
    out = []
    for serial in map(serial_of, order):
        site = where.get(serial)
        if site is None and serial not in where:
            out.append("")
            continue
        text = texts.get(site)
        if text is None:
            text = texts[site] = site_text(site)
        out.append(text)
    return out
