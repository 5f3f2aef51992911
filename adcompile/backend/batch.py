"""Batch-generic code: one compiled function for every batch length.

A loss over n examples records n copies of the per-example work, so its
tape, and the code generated from it, depend on n. When the arguments that
are not differentiated share a leading length n (the examples: ``X`` of
shape (n, 2) and ``y`` of shape (n,)), the function is traced at a few
small lengths instead, on the first rows of the data, and the folded
programs are made one program in n (``loops.generic.generalise``, driven by
``loops.batch_source``): loop counts and offsets affine in n, a mean's
``1 / n``. That program, with ``n`` its first argument, is compiled once
and serves every batch length, the last short batch included.

This module says which arguments are the batch (``batched``) and holds the
compiled code (``BatchCompiled``), which makes the compiled program of each
batch length (``AtLength``).

Python code may treat some lengths differently (``if len(y) >= 16``,
``X[:12]``, ``range(min(n, 10))``). The traces record each comparison made
on the length as a guard (``adcompile.lengths``): the program serves only
the lengths at which every guard answers as it did when traced
(``BatchCompiled.serves``), and where the length the call has would answer
otherwise, nothing is compiled yet (``Deferred``). What the guards cannot
see is left to the caller's check of the first answer at each new length
against ``f`` run on plain numbers (``run_plain``, at a point ``nearby``
the call's); where they differ, that length is traced as it is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..emit.codegen import CodeFacts
from ..ir.tape import Param, Tape
from ..loops.ir import Lin
from ..trace.lengths import Guard, holds
from ..trace.mode import debug_nans, no_grad
from ..trace.tensor import tensor
from ..trace.value import Value
from .program import (
    CompiledProgram,
    DirectFunction,
    DirectPlan,
    GuardCheck,
    NativeCall,
    ProgramVisitor,
    T,
    code_record,
    guard_checks,
    read_code_record,
)

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
    """Folded code for any batch length: ``fn(n, *flat, work, columns, out) -> ok``
    is its Numba function. It is not a program of its own: :meth:`at` makes the
    compiled program (``program.CompiledProgram``) for one batch length.
    """

    def __init__(
        self,
        fname: str,
        loops: Any,
        params: Sequence[Param],
        tape: Tape | Callable[[], Tape],
        lengths: tuple[int, ...],
        length_guards: Sequence[Guard] = (),
    ) -> None:
        from .numba_functions import compile_folded_source  # (Numba: imported on use)

        clock = time.perf_counter()
        self.lengths = lengths  # the lengths it was traced at: it serves n >= lengths[0]
        # ... at which the code's comparisons on n answer as traced
        self.length_guards = tuple(length_guards)
        self._loops, self._remake = loops, None  # (the program it was printed from)
        self.source, self.explanation = loops.source, loops.explanation
        self.facts: CodeFacts = loops.facts  # what the code is, in numbers (``api.summary``)
        self.params = list(params)  # at the largest length traced
        self._tape = tape  # the adjoint tape at the largest traced length (or its maker)
        self.fn = compile_folded_source(self.source, fname, [], params, "int64")
        work = loops.code.work_size  # (a, b): the work array holds a * n + b values
        self.work_size = (work.b, work.a) if isinstance(work, Lin) else (0, work)
        self.columns, self.n_out = loops.code.columns, loops.n_out
        self.timings = {**loops.timings, "compile": time.perf_counter() - clock}

    def record(self) -> dict:
        """What :meth:`restored` needs to make this code again, as JSON data."""
        return code_record(
            self, "batch", work_size=list(self.work_size), lengths=list(self.lengths)
        )

    @classmethod
    def restored(
        cls,
        record: dict,
        fname: str,
        params: Sequence[Param],
        tape: Callable[[], Tape],
        length_guards: Sequence[Guard],
        remake: Callable[[], Any],
        n: int,
    ) -> BatchCompiled:
        """The code a :meth:`record` describes, without the passes that made it: loaded
        from Numba's cache, or its first calls at length ``n`` (the call's, then the
        check's) run as Python (``python_first``); ``remake()`` makes its folded
        program again where another target's source is asked for."""
        from .numba_functions import compile_folded_source  # (Numba: imported on use)
        from .python_first import numba_later

        self = cls.__new__(cls)
        self.lengths, self.length_guards = tuple(record["lengths"]), tuple(length_guards)
        self._loops, self._remake = None, remake
        read_code_record(self, record)
        self.params, self._tape = list(params), tape
        self.work_size = tuple(record["work_size"])

        def load() -> Callable:
            return compile_folded_source(self.source, fname, [], self.params, "int64")

        clock = time.perf_counter()
        ops = self.facts.operations * max(n, 1) // self.lengths[-1]
        self.fn = numba_later(self.source, fname, load, ops, calls=2)
        self.timings = {"compile": time.perf_counter() - clock}
        return self

    @property
    def loops(self) -> Any:
        """The folded program it was printed from (``emit.fold.LoopSource``), which
        prints it for other targets; made again for code restored from disk."""
        if self._loops is None:
            self._loops = self._remake()
        return self._loops

    def serves(self, n: int) -> bool:
        """Whether this code answers for batch length ``n``."""
        return n >= self.lengths[0] and holds(self.length_guards, n)

    def at(self, n: int, params: Sequence[Param]) -> AtLength:
        """The compiled program of batch length ``n``, whose arguments are ``params``."""
        return AtLength(self, n, params)

    @property
    def tape(self) -> Tape:
        """The adjoint tape at the largest length traced."""
        if callable(self._tape):
            self._tape = self._tape()
        return self._tape


class AtLength(CompiledProgram):
    """Batch-generic code (:class:`BatchCompiled`, its ``generic``) run at one batch
    length ``n``: ``generic.fn(n, *args, work, columns, out) -> ok``."""

    gets_direct_entry = True

    def __init__(self, generic: BatchCompiled, n: int, params: Sequence[Param]) -> None:
        self.generic, self.n, self.params = generic, n, list(params)
        self.source, self.explanation = generic.source, generic.explanation
        self.facts, self.n_out = generic.facts, generic.n_out
        self.timings = dict(generic.timings)
        a, b = generic.work_size
        self.work = max(a * n + b, 1)
        self.local = threading.local()  # per thread, ``work``: its work array

    @property
    def tape(self) -> Tape:
        """The generic code's unrolled tape at the largest length traced."""
        return self.generic.tape

    def _guard_checks(self) -> tuple[GuardCheck, ...]:
        return guard_checks(self.generic.tape, self.generic.params)

    @property
    def native(self) -> NativeCall:
        g = self.generic
        return NativeCall(g.fn, (self.n,), self.work, g.columns, self.local)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        work = getattr(self.local, "work", None)
        if work is None:
            work = self.local.work = np.empty(self.work)
        out = np.empty(self.n_out)
        g = self.generic
        return g.fn(self.n, *args, work, g.columns, out), out

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.folded(self, self.generic.loops, (self.n,))

    def direct(self, plan: DirectPlan) -> DirectFunction:
        from .numba_functions import direct_native  # (Numba is imported on use)

        return direct_native(self.native, self.n_out, plan)

    def _make_numba(self) -> Callable:
        from .numba_functions import native_entry  # (Numba is imported on use)

        return native_entry(self.params, self.native)


class Deferred:
    """No code yet: the traces found comparisons on the batch length that the
    length of the call being served answers otherwise (``if len(y) >= 16`` at
    n = 64, traced at n = 8, 9, 11). A later length at which these ``guards``
    answer as traced (``serves``) may have generic code: it traces again."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = tuple(guards)

    def serves(self, n: int) -> bool:
        """Whether generic code made now might answer for batch length ``n``."""
        return n >= MIN_LENGTH and holds(self.guards, n)

    def at(self, n: int, params: Sequence[Param]) -> None:
        """No program yet (as :meth:`BatchCompiled.at`, which makes one)."""
        return None


# ------------------------------------------------------------------ checking


def run_plain(
    fun: Callable[..., Any], args: Sequence[Any], leaves: Sequence[Value] | None = None
) -> float | None:
    """``fun``'s value on plain numbers: float arrays, or Values that record nothing
    where it needs Values' methods (``.tanh()``); None when it fails on both. With
    ``leaves`` (a compiled loss's parameters, which ``fun`` reads), ``args[0]``
    holds their values: they are set for the call and restored after it."""
    saved = None
    if leaves is not None:
        saved = [p.data for p in leaves]
        for p, x in zip(leaves, np.asarray(args[0], dtype=np.float64).ravel().tolist()):
            p.data = x
        args = args[1:]
    try:
        with no_grad(), debug_nans(False), np.errstate(all="ignore"):
            for as_values in (False, True):
                try:
                    res = fun(*[_plain(a, as_values) for a in args])
                    if isinstance(res, np.ndarray):
                        res = res.reshape(-1)[0]
                    return float(res.data if isinstance(res, Value) else res)
                except Exception:
                    continue
        return None
    finally:
        if saved is not None:
            for p, x in zip(leaves, saved):
                p.data = x


def _plain(a: Any, as_values: bool) -> Any:
    if not np.ndim(a):
        return Value(float(a), requires_grad=False) if as_values else a
    arr = np.asarray(a, dtype=np.float64)
    return tensor(arr, requires_grad=False) if as_values else arr


def nearby(
    args: Sequence[Any], flat: Sequence[Any], wrt: Sequence[int], data: Sequence[int] = ()
) -> tuple[list, list]:
    """``args`` and their ``flat`` form with the differentiated arguments, and the
    float arrays among the ``data`` ones, moved a little (by 10% of 1 + |x|, in a
    fixed pseudo-random direction): a row the function treats otherwise at this
    length (``c = 1.0 if i < 12 else 0.5``) shows there even where its data is 0."""
    rng = np.random.default_rng(20250101)
    args, flat = list(args), list(flat)
    floats = [k for k in data if k not in wrt and np.asarray(flat[k]).dtype.kind == "f"]
    for k in [*wrt, *floats]:
        x = np.asarray(flat[k], dtype=np.float64)
        y = x + 0.1 * rng.uniform(-1.0, 1.0, x.shape) * (1.0 + np.abs(x))
        flat[k] = y if x.ndim else float(y)
        args[k] = y.reshape(np.shape(args[k])) if x.ndim else float(y)
    return args, flat


def rows_reversed(
    args: Sequence[Any], flat: Sequence[Any], data: Sequence[int]
) -> tuple[list, list]:
    """``args`` and their ``flat`` form with the rows of the ``data`` arguments (the
    batch) in reverse order: rows that the function weighs by their position, and
    that vanish where they are (a hinge's inactive rows), change places with others."""
    args, flat = list(args), list(flat)
    for k in data:
        shape = np.shape(args[k])
        args[k] = np.ascontiguousarray(np.asarray(args[k])[::-1])
        # (flat: the same numbers, raveled perhaps, and of the dtype the code takes)
        rows = np.asarray(flat[k]).reshape(shape)[::-1]
        flat[k] = np.ascontiguousarray(rows).reshape(np.shape(flat[k]))
    return args, flat


def agree(got: float, value: float) -> bool:
    """Whether two values of a loss agree (to 1e-9, relative; nan with nan)."""
    return (
        got == value
        or abs(got - value) <= 1e-9 * max(abs(got), abs(value), 1e-300)
        or (got != got and value != value)
    )
