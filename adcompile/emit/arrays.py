"""Printing an array tape as Python over NumPy: one statement per array node.

``array_source`` prints ``fname(*params, out) -> True``: each parameter arrives
as a float or a flat float64 array (as every compiled program takes them) and
is given its shape; each node is one NumPy statement named after its slot
(``v7 = (v2 @ v0)``, ``v9 = np.sum(v8, axis=1)``), and ``del`` frees each
array after its last use (so NumPy reuses the memory); each output is written,
flattened, into ``out`` in order. NumPy's domain rules hold as in the user's
own NumPy code (``log(-1)`` is nan, with NumPy's warnings silenced inside). The
names the code reads besides ``np`` (array constants, an index's arrays,
``np.vectorize`` forms of ops NumPy has no ufunc for, an op's helper functions)
come back with the source, for the loader.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir.array_products import matmul
from ..ir.arrays import ArrayOp, ArrayTape, code_names, elementwise_code, numpy_form
from ..ir.ops import Op
from ..ir.tape import CONST, INPUT, Param


def literal(v: float) -> str:
    """A float as generated code writes it (``np.inf``, ``np.nan``, ``(-0.0)``): a
    negative one parenthesised, as ``(-2.0) ** x`` must be."""
    if math.isnan(v):
        return "np.nan"
    if math.isinf(v):
        return "np.inf" if v > 0 else "(-np.inf)"
    text = repr(float(v))
    return f"({text})" if text.startswith("-") else text


# names array code gives its own variables (slots, loop temporaries, indices,
# constants, a statement's temporaries ``_s_v12``), and those it reads: a
# parameter of one of them is renamed
_CLASH = re.compile(r"(v|t|x|i|_c)\d+|n|np|math|out|_\w+_v\d+")


def code_params(params: Sequence[Param]) -> list[Param]:
    """``params`` as array code names them: ``arg_<name>`` where a name is one the
    code gives its own variables or reads (``v0``, ``n``, ``np``), so that no
    statement reads a parameter its code has overwritten."""
    return [Param(f"arg_{p.name}", p.size) if _CLASH.fullmatch(p.name) else p for p in params]


def out_sizes(tape: ArrayTape) -> list[int]:
    """How many floats each output of ``tape`` writes into ``out``."""
    return [math.prod(tape.shapes[o]) for o in tape.outputs]


def array_source(
    tape: ArrayTape, params: Sequence[Param], fname: str, doc: str
) -> tuple[str, dict[str, Any]]:
    """The module source of ``fname(*params, out)`` computing ``tape``'s outputs into
    ``out`` (flattened, in order), and the names it reads besides NumPy."""
    names: dict[str, Any] = {}
    params = code_params(params)

    def operand(i: int) -> str:
        node = tape.nodes[i]
        if node.op == CONST and not isinstance(node.value, np.ndarray):
            return literal(node.value)
        if node.op == CONST:  # (a constant array: a name the code reads)
            names[tape.name(i)] = node.value
        return tape.name(i)

    # each local's last reader: freed after it (NumPy's memory is reused, not kept)
    last = {a: i for i, node in enumerate(tape.nodes) for a in node.args}
    for o in tape.outputs:
        last[o] = len(tape.nodes)
    local = {i for i, n in enumerate(tape.nodes) if n.op != CONST}
    done: dict[int, list[str]] = {}
    for a, i in last.items():
        if a in local:
            done.setdefault(i, []).append(tape.name(a))
    # an output made by a ufunc or a matmul is made in its place in out (no copy)
    places: dict[int, tuple[int, int]] = {}
    start = 0
    for o, size in zip(tape.outputs, out_sizes(tape)):
        places.setdefault(o, (start, start + size))
        start += size
    written: set[int] = set()
    body: list[str] = []
    for pos, i in enumerate(tape.inputs):
        p, shape = params[pos], tape.shapes[i]
        flat = p.size is None and not shape or len(shape) == 1
        body.append(f"{tape.name(i)} = {p.name if flat else f'np.reshape({p.name}, {shape!r})'}")
    for i, node in enumerate(tape.nodes):
        if i == tape.adjoint_from:
            body.append("# the adjoint: reverse mode, node by node backwards")
        op = node.op
        if op in (INPUT, CONST):
            continue
        operands = [_uniform(tape, a, i) or operand(a) for a in node.args]
        into = _written_into(op, places.pop(i, None), tape.shapes[i], operands)
        body.append(f"{tape.name(i)} = {into or _expression(op, operands, names)}")
        if into:
            written.add(i)
        if i in done:
            body.append(f"del {', '.join(done[i])}")
    start = 0
    for o, size in zip(tape.outputs, out_sizes(tape)):
        if o in written:
            written.discard(o)  # (there already; a second place of it is copied)
        elif tape.shapes[o]:
            body.append(f"out[{start}:{start + size}] = np.ravel({operand(o)})")
        else:
            body.append(f"out[{start}] = {operand(o)}")
        start += size
    body.append("return True")
    args = ", ".join([p.name for p in params] + ["out"])
    ops = sum(1 for n in tape.nodes if isinstance(n.op, Op))
    head = [
        "# generated by adcompile",
        "import numpy as np",
        "",
        "",
        f"# Array code: one NumPy statement per array node ({ops} operations).",
        f"def {fname}({args}):",
        f'    """{doc}"""',
        '    with np.errstate(all="ignore"):',
    ]
    names.update(code_names(tape))
    return "\n".join(head + ["        " + line for line in body]) + "\n", names


def _uniform(tape: ArrayTape, a: int, i: int) -> str | None:
    """Operand ``a`` of node ``i`` as a number, where it is a float constant array of
    one value that node ``i`` (element-wise, or ``where``) would broadcast to its own
    shape anyway: ``np.where(v10, 0.0001, 0.0)``, not an array of n copies (in code
    generic in the batch length, a number that follows n, as ``(1.0 / n)``)."""
    node, const = tape.nodes[i], tape.nodes[a]
    value = const.value
    if const.op != CONST or not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        return None
    if isinstance(node.op, ArrayOp) and node.op.name != "where":
        return None
    if not value.size or not np.all(value == value.flat[0]):
        return None
    others = [tape.shapes[b] for b in node.args if b != a]
    if np.broadcast_shapes(*others, ()) != tuple(tape.shapes[i]):
        return None
    return literal(float(value.flat[0]))


def _written_into(
    op: Op, place: tuple[int, int] | None, shape: tuple, operands: list[str]
) -> str | None:
    """``op`` of ``operands`` computed into ``out[place]`` (NumPy's ``out=``), where its
    result is an output there and ``op`` is a ufunc or matmul; else None."""
    if place is None or not shape:
        return None
    if isinstance(op, ArrayOp):
        called = "np.matmul" if op is matmul() else None
    else:
        fn, called = numpy_form(op)
        called = called if isinstance(fn, np.ufunc) else None
    if called is None:
        return None
    a, b = place
    return f"{called}({', '.join(operands)}, out=np.reshape(out[{a}:{b}], {shape!r}))"


def _expression(op: Op, operands: list[str], names: dict[str, Any]) -> str:
    if isinstance(op, ArrayOp):
        return op.code.format(*operands)
    fn, called = numpy_form(op)
    if not called.startswith("np."):
        names[called] = fn
    return elementwise_code(op, operands)
