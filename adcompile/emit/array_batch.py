"""Array code generic in the batch length, from the code of four lengths.

The NumPy source of an array tape (``emit.arrays``) names the batch length n
only in numbers: shapes (``np.reshape(X, (300, 8))``, ``np.broadcast_to(v9,
(300, 3))``), a mean's count (``v17 / 300.0``), its derivative's ``1 / n``. The
same function printed at lengths n, n + 1, n + 2 and 2 n + 5 (``lengths``) gives
four sources; where they are the same text but for numbers, each number that
differs is a function of n, found from its values: ``k * n + m`` (integers, or
floats of integers), or ``p / n``, holding at all four. A constant array whose
shape follows n is made at run time where it holds one value throughout
(``np.full``). :func:`generic_source` writes the one program, ``fname(n,
*params, out)``; it gives None where the sources differ otherwise (Python code
that branches on the length, data whose size is n captured from outside), or a
number fits no such form.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Sequence
from typing import Any

import numpy as np

from .arrays import literal


def generic_source(
    sources: Sequence[str], names: Sequence[dict[str, Any]], n: int
) -> tuple[str, dict[str, Any]] | None:
    """The source of one program in ``n`` from ``sources`` (and the ``names`` each
    reads besides NumPy), printed at ``lengths(n)`` (each form is found from the
    first two and must hold at all: ``min(n, 302)`` is ``n`` near 300, not at
    ``2 n + 5``); or None."""
    streams = [list(tokenize.generate_tokens(io.StringIO(s).readline)) for s in sources]
    if len({len(t) for t in streams}) != 1:
        return None
    made = _constants(names, n)
    if made is None:
        return None
    kept, built = made
    edits: dict[tuple[int, int], str] = {}
    for toks in zip(*streams):
        first = toks[0]
        if first.type == tokenize.NAME and first.string in built:
            edits[first.start] = built[first.string]
        if all(t.string == first.string for t in toks):
            continue
        if any(t.type != tokenize.NUMBER or t.type != first.type for t in toks):
            return None
        expr = _fit([float(t.string) for t in toks], n, "." not in first.string)
        if expr is None:
            return None
        edits[first.start] = expr
    lines = sources[0].splitlines(keepends=True)
    for (row, col), text in sorted(edits.items(), reverse=True):
        line = lines[row - 1]
        old = next(t for t in streams[0] if t.start == (row, col))
        lines[row - 1] = line[:col] + text + line[old.end[1] :]
    source = "".join(lines)
    at = source.index("def ")
    head = source.index("(", at) + 1
    return source[:head] + "n, " + source[head:], kept


def lengths(n: int) -> tuple[int, ...]:
    """The batch lengths a program in ``n`` is made from: three in a row, and a far one."""
    return (n, n + 1, n + 2, 2 * n + 5)


def _fit(values: list[float], n: int, integer: bool) -> str | None:
    """An expression in ``n`` giving ``values`` at ``lengths(n)``, exactly."""
    a, b = values[0], values[1]
    at = lengths(n)
    k = b - a
    if k == int(k) and a - k * n == int(a - k * n):
        k, m = int(k), int(a - k * n)
        if all(k * x + m == v for x, v in zip(at, values)):
            if k == 0:
                return f"({m})" if integer and m < 0 else str(m) if integer else literal(m)
            text = "n" if k == 1 else f"{k} * n"
            text = text if m == 0 else f"({text} + {m})" if m > 0 else f"({text} - {-m})"
            return text if integer else f"float({text})"
    p = a * n
    if not integer and all(p / x == v for x, v in zip(at, values)):
        return f"({p!r} / n)"
    return None


def _constants(
    names: Sequence[dict[str, Any]], n: int
) -> tuple[dict[str, Any], dict[str, str]] | None:
    """The names the generic code reads (the same at every length) and, for constant
    arrays whose shape follows n, the expression that makes each; or None."""
    if len({tuple(sorted(d)) for d in names}) != 1:
        return None
    kept: dict[str, Any] = {}
    built: dict[str, str] = {}
    for key, first in names[0].items():
        vals = [d[key] for d in names]
        if not isinstance(first, np.ndarray):
            if any(v is not first for v in vals):
                return None
            kept[key] = first
        elif all(v.shape == first.shape and np.array_equal(v, first) for v in vals):
            kept[key] = first
        else:
            made = _full(vals, n)
            if made is None:
                return None
            built[key] = made
    return kept, built


def _full(arrays: list[np.ndarray], n: int) -> str | None:
    """``np.full(shape, value)`` in ``n`` where the arrays hold one value each,
    and their shapes and values follow n; else None."""
    if len({a.ndim for a in arrays}) != 1 or any(a.size == 0 for a in arrays):
        return None
    values = [float(a.flat[0]) for a in arrays]
    if any(not np.all(a == v) for a, v in zip(arrays, values)) or arrays[0].dtype.kind != "f":
        return None
    value = literal(values[0]) if len(set(values)) == 1 else _fit(values, n, False)
    if value is None:
        return None
    dims = []
    for d in zip(*(a.shape for a in arrays)):
        expr = _fit([float(x) for x in d], n, True)
        if expr is None:
            return None
        dims.append(expr)
    shape = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
    return f"np.full({shape}, {value})"
