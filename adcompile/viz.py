"""Graph pictures: Graphviz DOT text of a Value's graph or of a tape, as micrograd's draw_dot.

``to_dot`` needs nothing installed; ``draw`` renders through the ``graphviz``
package and the system's ``dot``. Graphs larger than ``max_nodes`` are
summarised: the op counts, and only the nodes nearest the output.
"""

from __future__ import annotations

import collections
import os
import shutil
from typing import Any, NamedTuple

import numpy as np

from .ir.tape import CONST, INPUT, Tape
from .trace.value import Value, topological_order


class GraphvizMissing(RuntimeError):
    """``draw`` needs the ``graphviz`` package and the system's ``dot`` program."""


class _Item(NamedTuple):
    fields: list[str]  # the lines of the record node
    op: str  # "" for leaves
    args: tuple[int, ...]


def _value_items(roots: list[Value]) -> tuple[list[_Item], list[int]]:
    order = topological_order(roots)
    index = {id(v): k for k, v in enumerate(order)}
    items = [
        _Item(
            ([v.label] if v.label else []) + [f"data {v.data:.4g}", f"grad {v.grad:.4g}"],
            v.op_label,
            tuple(index[id(p)] for p in v.operands),
        )
        for v in order
    ]
    return items, [index[id(v)] for v in roots]


def _tape_items(tape: Tape) -> tuple[list[_Item], list[int]]:
    items = []
    for i, node in enumerate(tape.nodes):
        name = tape.name(i)
        if node.op == INPUT:
            items.append(_Item([name, f"input {tape.names[tape.inputs.index(i)]}"], "", ()))
        elif node.op == CONST:
            items.append(_Item([name, repr(node.value)], "", ()))
        else:
            items.append(_Item([name], node.op.name, node.args))
    return items, list(tape.outputs)


def _near(items: list[_Item], outputs: list[int], keep: int) -> set[int]:
    """The ``keep`` nodes closest to the outputs (breadth first, no recursion)."""
    kept: set[int] = set()
    queue = collections.deque(outputs)
    while queue and len(kept) < keep:
        k = queue.popleft()
        if k not in kept:
            kept.add(k)
            queue.extend(items[k].args)
    return kept


def _esc(s: str) -> str:
    """Text made safe inside a quoted record label."""
    for ch in '\\"{}|<>':
        s = s.replace(ch, "\\" + ch)
    return s


def to_dot(obj: Value | Tape | Any, max_nodes: int = 500, keep: int = 60) -> str:
    """Graphviz DOT text: one record per Value (label, data, grad) and one node per op.

    ``obj`` is a Value, a list or array of Values, or a Tape. Graphs of more than
    ``max_nodes`` nodes are summarised: op counts and the ``keep`` nodes nearest the output.
    """
    if isinstance(obj, Tape):
        items, outputs = _tape_items(obj)
    else:
        roots = [obj] if isinstance(obj, Value) else list(np.asarray(obj, dtype=object).flat)
        bad = [type(r).__name__ for r in roots if not isinstance(r, Value)]
        if bad or not roots:
            raise TypeError(
                f"to_dot takes a Value, Values or a Tape, not {bad[0] if bad else 'nothing'!r}"
            )
        items, outputs = _value_items(roots)
    drawn = set(range(len(items))) if len(items) <= max_nodes else _near(items, outputs, keep)
    lines = ["digraph G {", "  rankdir=LR;", "  node [fontname=Helvetica, fontsize=10];"]
    if len(drawn) < len(items):
        counts = collections.Counter(it.op or "leaf" for it in items)
        table = "".join(f"{_esc(op)}: {c}\\l" for op, c in counts.most_common())
        lines.append(
            f'  summary [shape=note, label="{len(items)} nodes, the {len(drawn)} nearest '
            f'the output drawn\\l{table}"];'
        )
    outs = set(outputs)
    for k in sorted(drawn):
        it = items[k]
        bold = ", penwidth=2" if k in outs else ""
        label = " | ".join(_esc(f) for f in it.fields)
        lines.append(f'  n{k} [shape=record, label="{{ {label} }}"{bold}];')
        if it.op:
            lines.append(f'  n{k}_op [label="{_esc(it.op)}", shape=ellipse];')
            lines.append(f"  n{k}_op -> n{k};")
            lines += [f"  n{a} -> n{k}_op;" for a in it.args if a in drawn]
            if any(a not in drawn for a in it.args):
                lines.append(f"  summary -> n{k}_op [style=dashed];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def draw(obj: Value | Tape | Any, path: str | os.PathLike, **kwargs: Any) -> str:
    """Render ``to_dot(obj)`` to ``path`` (.png, .svg or .pdf) with Graphviz; returns the path."""
    fmt = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "png"
    if fmt not in ("png", "svg", "pdf"):
        raise ValueError(f"draw writes .png, .svg or .pdf files, not {os.fspath(path)!r}")
    try:
        import graphviz
    except ImportError:
        graphviz = None
    if graphviz is None or shutil.which("dot") is None:
        raise GraphvizMissing(
            "draw() needs the graphviz Python package and the Graphviz 'dot' program: "
            "pip install graphviz, and apt-get install graphviz (or brew install graphviz); "
            "ad.to_dot(value) gives the DOT text without them"
        )
    with open(path, "wb") as f:
        f.write(graphviz.Source(to_dot(obj, **kwargs)).pipe(format=fmt))
    return os.fspath(path)
