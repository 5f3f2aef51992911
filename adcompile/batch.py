"""Batch-generic code: one compiled function for every batch length.

A loss over n examples records n copies of the per-example work, so its
tape, and the code generated from it, depend on n. When the arguments that
are not differentiated share a leading length n (the examples: ``X`` of
shape (n, 2) and ``y`` of shape (n,)), the function is traced at a few
small lengths instead, on the first rows of the data, and the folded
programs are made one program in n (``loopir.generalise``, driven by
``loops.batch_source``): loop counts and offsets affine in n, a mean's
``1 / n``. That program, with ``n`` its first argument, is compiled once
and serves every batch length, the last short batch included.

This module says which arguments are the batch (``batched``) and holds the
compiled code (``BatchCompiled``).

Python code may still treat some lengths differently (``range(min(n,
10))``): the caller checks the first answer at each new length against
``f`` run on plain floats, and traces the full length when they differ.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .codegen import Param
from .tape import Tape

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


# ------------------------------------------------------------------ compiling


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
