"""Batch-generic code: one compiled function for every batch length.

A loss over n examples records n copies of the per-example work, so its
tape, and the code generated from it, depend on n. When the arguments that
are not differentiated share a leading length n (the examples: ``X`` of
shape (n, 2) and ``y`` of shape (n,)), the function is traced at a few
small lengths instead, on the first rows of the data. Their folded sources
must be one program: the same tokens, up to the names of locals and to
number literals that are affine in the length (loop counts, offsets into
the work array) or in its reciprocal (the ``1 / n`` of a mean). That
program, written in ``n``, is compiled once and serves every batch length,
the last short batch included.

Python code may still treat some lengths differently (``range(min(n,
10))``): the caller checks the first answer at each new length against
``f`` run on plain floats, and traces the full length when they differ.
"""

from __future__ import annotations

import io
import itertools
import re
import threading
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .codegen import Param, module_source
from .tape import Tape

#: The lengths the function is traced at (three, to check that a literal is
#: affine rather than assume it).
SIZES = (4, 5, 6)
#: ... and, when those do not agree, at these too, one by one.
MORE_SIZES = (8, 9, 10)
#: Batches shorter than this are traced as they are.
MIN_LENGTH = 16


def batched(
    shapes: Sequence[tuple | None], wrt: Sequence[int], min_length: int = MIN_LENGTH
) -> tuple[int, list[int]] | None:
    """(n, the arguments whose leading length is n), or None (also when n < ``min_length``).

    The batched arguments are the arrays that are not differentiated whose
    first dimension is n, the leading length most of them share (the first
    such array's on a tie).
    """
    data = [k for k, s in enumerate(shapes) if k not in wrt and s is not None and len(s) >= 1]
    if not data:
        return None
    lengths = [shapes[k][0] for k in data]
    n = max(lengths, key=lengths.count)  # the most common; the first of those
    if n < min_length:
        return None
    return n, [k for k in data if shapes[k][0] == n]


# ------------------------------------------------------------------ generalising


def _fit(values: Sequence[float], ks: Sequence[int], integer: bool, n: str = "n") -> str | None:
    """``values`` (one per length in ``ks``) as an expression in ``n``, or None."""
    (k0, k1, k2), (v0, v1, v2) = ks, values
    if integer:
        a, r = divmod(v1 - v0, k1 - k0)
        b = v0 - a * k0
        if r or v2 != a * k2 + b:
            return None
        if a == 0:
            return str(b)
        term = n if a == 1 else f"{a} * {n}"
        return (
            f"({term} {'+' if b >= 0 else '-'} {abs(b)})" if b else term if a == 1 else f"({term})"
        )

    def close(x: float, y: float) -> bool:
        return abs(x - y) <= 1e-12 * max(abs(x), abs(y))

    a = (v1 - v0) / (k1 - k0)
    b = v0 - a * k0
    if close(v2, a * k2 + b):
        return f"({a!r} * {n} + {b!r})" if b else f"({a!r} * {n})"
    a = (v1 - v0) / (1 / k1 - 1 / k0)
    b = v0 - a / k0
    if close(v2, a / k2 + b):
        return f"({a!r} / {n} + {b!r})" if b else f"({a!r} / {n})"
    return None


_NUMBER = re.compile(r"(?<![A-Za-z_\d])\d+")  # counts, not slot names (v12)


def _comment(texts: Sequence[str], ks: Sequence[int], n: str) -> str:
    """A comment that differs between the lengths, its counts written in n (the
    last length's comment when more than counts differ: slot names)."""
    parts = [_NUMBER.split(t) for t in texts]
    nums = [_NUMBER.findall(t) for t in texts]
    if len({len(p) for p in parts}) != 1 or any(p != parts[0] for p in parts):
        return texts[-1]
    out = [parts[0][0]]
    for i in range(len(nums[0])):
        vals = [int(ns[i]) for ns in nums]
        e = str(vals[0]) if len(set(vals)) == 1 else _fit(vals, ks, True, n)
        out.append((e or nums[-1][i]).strip("()") + parts[0][i + 1])
    return "".join(out)


def generalise(
    texts: Sequence[str], ks: Sequence[int], n: str = "n"
) -> tuple[str, list[int]] | None:
    """One source for every length, from the sources at lengths ``ks`` (see the
    module docstring), and the lines where a number became an expression in
    ``n``; None when they are not one program."""
    toks = [list(tokenize.generate_tokens(io.StringIO(t).readline)) for t in texts]
    if len({len(t) for t in toks}) != 1:
        return None
    rows: list[int] = []
    fwd: list[dict[str, str]] = [{} for _ in texts]  # last text's names -> each text's
    back: list[dict[str, str]] = [{} for _ in texts]
    edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []
    for group in zip(*toks):
        last = group[-1]
        strings = [tk.string for tk in group]
        if len({tk.type for tk in group}) != 1:
            return None
        kind = last.type
        if kind == tokenize.NAME:  # locals named after slots: one consistent renaming
            for i, s in enumerate(strings):
                if fwd[i].setdefault(last.string, s) != s:
                    return None
                if back[i].setdefault(s, last.string) != last.string:
                    return None
            continue
        if len(set(strings)) == 1:
            continue
        if kind == tokenize.NUMBER:
            integer = all(re.fullmatch(r"\d+", s) for s in strings)
            vals = [int(s) if integer else float(s) for s in strings]
            e = _fit(vals, ks, integer, n)
            if e is None:
                return None
            edits.append((last.start, last.end, e))
            rows.append(last.start[0])
        elif kind in (tokenize.COMMENT, tokenize.STRING):  # comments and docstrings
            edits.append((last.start, last.end, _comment(strings, ks, n)))
        else:
            return None
    lines = texts[-1].splitlines(keepends=True)
    for (r0, c0), (r1, c1), new in sorted(edits, reverse=True):
        if r0 != r1:  # a string over several lines: not what the generator writes
            return None
        line = lines[r0 - 1]
        lines[r0 - 1] = line[:c0] + new + line[c1:]
    return "".join(lines), rows


# ------------------------------------------------------------------ compiling


@dataclass
class _Traced:
    text: str
    work: int
    columns: np.ndarray
    n_out: int
    functions: list[str]
    explanation: str


class BatchCompiled:
    """Folded code for any batch length: ``call_n(n, *flat) -> (ok, outputs)``.

    ``fn(n, *flat, work, columns, out) -> ok`` is the Numba function itself.
    """

    kind = "folded"

    def __init__(
        self,
        fname: str,
        source: str,
        functions: list[str],
        params: Sequence[Param],
        work: tuple[int, int],
        columns: np.ndarray,
        n_out: int,
        explanation: str,
        tape: Tape | Callable[[], Tape],
        lengths: tuple[int, ...],
    ) -> None:
        from .jit import compile_folded_source  # the Numba side, imported on use

        self.lengths = lengths  # the lengths it was traced at: it serves n >= lengths[0]
        self.source = source
        self.explanation = explanation
        self._tape = tape  # the adjoint tape at the largest traced length (or its maker)
        self.fn = compile_folded_source(source, fname, functions, params, "int64")
        self.work_size = work  # (a, b): the work array holds a * n + b values
        self.columns = columns
        self.n_out = n_out
        self._local = threading.local()

    @property
    def tape(self) -> Tape:
        """The adjoint tape at the largest length traced."""
        if callable(self._tape):
            self._tape = self._tape()
        return self._tape

    def call_n(self, n: int, *args: Any) -> tuple[bool, np.ndarray]:
        """Run for batch length ``n`` on flat float arguments."""
        size = max(self.work_size[0] * n + self.work_size[1], 1)
        work = getattr(self._local, "work", None)
        if work is None or len(work) < size:
            work = self._local.work = np.empty(size)
        out = np.empty(self.n_out)
        return self.fn(n, *args, work, self.columns, out), out


def _one_program(traced: dict[int, _Traced], ks: tuple[int, int, int]) -> tuple | None:
    """(source in n, n's name, work-array size (a, b)) if the traces at ``ks`` are
    one program, else None."""
    ts = [traced[k] for k in ks]
    if len({t.n_out for t in ts}) != 1 or any(
        not np.array_equal(t.columns, ts[0].columns) or t.functions != ts[0].functions for t in ts
    ):
        return None
    # the batch length, the function's first argument, is called n unless a name is n
    names = set(re.findall(r"[A-Za-z_]\w*", ts[-1].text))
    n = next(s for s in ("n", "n_", "n__", "n_batch", "n_examples") if s not in names)
    if _fit([t.work for t in ts], ks, True) is None:
        return None
    found = generalise([t.text for t in ts], ks, n)
    if found is None:
        return None
    a, _ = divmod(ts[1].work - ts[0].work, ks[1] - ks[0])
    return found[0], n, (a, ts[0].work - a * ks[0])


def compile_batch(
    trace_at: Callable[[int], tuple[Tape, list[Param]]], fname: str, doc: str
) -> BatchCompiled | None:
    """Trace at each of ``SIZES`` (``trace_at(k)`` -> tape to compile, its params),
    generalise the folded sources and compile; None when they are not one program.

    Folding may start a loop one statement later at one length than at another
    (the same loop, rotated); then a few more lengths are traced, and any three
    that agree will do.
    """
    from . import fold
    from .jit import STRAIGHT_LINE_LIMIT

    traced: dict[int, _Traced] = {}
    tapes: dict[int, tuple[Tape, list[Param]]] = {}
    found = None
    for k in (*SIZES, *MORE_SIZES):
        tape, params = tapes[k] = trace_at(k)
        # short loops fold too: at a small length, a loop over the examples is short
        plan = fold.plan(tape, params, fname, doc, STRAIGHT_LINE_LIMIT, min_saved=2)
        if not plan.segments:
            return None
        code = plan.code or fold.generate(plan.tape, plan.segments, fname, params, doc)
        traced[k] = _Traced(
            code.text,
            code.work_size,
            code.columns,
            len(tape.outputs),
            code.functions,
            fold._explain(plan.tables, plan.segments, code.statements, code.outlined),
        )
        if len(traced) < 3:
            continue
        others = sorted(traced)[:-1] if k in MORE_SIZES else []
        triples = [tuple(SIZES)] if k == SIZES[-1] else []
        triples += [(a, b, k) for a, b in itertools.combinations(reversed(others), 2)]
        for ks in triples:
            found = _one_program(traced, tuple(sorted(ks)))
            if found is not None:
                ks = tuple(sorted(ks))
                break
        if found is not None:
            break
    if found is None:
        return None
    text, n, work = found
    # every function takes n first: the outer one, and the bodies it calls (a mean's
    # 1 / n reaches the adjoint's loop body)
    last = traced[ks[-1]]
    for name in [*last.functions, fname]:
        text = re.sub(rf"\b{name}\((?!\))", f"{name}({n}, ", text)
    explanation = (
        f"Generic in the batch length {n}: traced at {n} = {', '.join(map(str, ks))} and "
        f"checked to be one program whose loop counts and offsets are written in {n}. "
        f"At {n} = {ks[-1]}: " + last.explanation
    )
    header = "".join(f"# {ln}\n" for ln in fold._wrap(explanation, 76))
    tape, params = tapes[ks[-1]]
    return BatchCompiled(
        fname,
        module_source([header + text]),
        last.functions,
        params,
        work,
        last.columns,
        last.n_out,
        explanation,
        tape,
        ks,
    )
