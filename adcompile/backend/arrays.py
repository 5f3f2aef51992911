"""Array code: an array tape's NumPy source, loaded and run (``ArrayCompiled``).

The program of an array tape (``emit.arrays``) runs as Python over NumPy: each
statement is one NumPy call on whole arrays (``@`` goes to BLAS), so its cost
is NumPy's, and making it costs no compile (the source is loaded through
``trace.loader`` from a real file, as all generated code). It is one kind of
:class:`~adcompile.backend.program.CompiledProgram`; it has no Numba function
of its own yet (``native`` is None, ``numba`` says so).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ..emit.arrays import array_source, out_sizes
from ..emit.codegen import CodeFacts
from ..ir.arrays import ArrayTape
from ..ir.tape import Param
from ..trace import loader
from .program import CompiledProgram, NativeCall, ProgramVisitor, T


class NumPyCode:
    """What every program of NumPy code shares (a mixin before ``CompiledProgram``):
    no Numba function of its own, no guards (selection by data is data: ``where``,
    masks)."""

    @property
    def native(self) -> NativeCall | None:
        return None

    def _guard_checks(self) -> tuple:
        return ()

    def _make_numba(self) -> Any:
        raise TypeError(
            "this specialisation is array code (NumPy calls on whole arrays), which has no "
            "Numba function yet; vg.numba(*example_args) traces the function element by "
            "element for it"
        )


class ArrayCompiled(NumPyCode, CompiledProgram):
    """An array tape's NumPy code (module doc)."""

    def __init__(self, tape: ArrayTape, params: list[Param], fname: str, doc: str) -> None:
        clock = time.perf_counter()
        self.params = params
        self._array_tape = tape
        self.source, names = array_source(tape, params, fname, doc)
        self.n_out = sum(out_sizes(tape))
        self._fn = getattr(loader.load(self.source, fname, {"np": np, **names}), fname)
        ops = tape.n_ops
        self.explanation = (
            f"Array code: {ops} NumPy calls on whole arrays, one statement each "
            f"({len(tape.inputs)} array and number arguments)."
        )
        self.facts = CodeFacts("arrays", ops, ops, slots=len(tape.nodes))
        self.timings = {"generate and load": time.perf_counter() - clock}

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = np.empty(self.n_out)
        self._fn(*args, out)
        return True, out

    @property
    def tape(self) -> ArrayTape:
        return self._array_tape

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.arrays(self, self._array_tape)


class ArrayBasisCompiled(NumPyCode, CompiledProgram):
    """A Jacobian or Hessian of array code, made one basis vector at a time: ``one``
    (array code whose last arguments are the basis vector ``e``, split into inputs
    of ``shapes``) runs with each unit vector, and entry ``i`` of its result for
    ``e_j`` goes to ``out[dest[j, i]]``. The loop is Python's, around NumPy code."""

    def __init__(
        self,
        one: ArrayCompiled,
        params: list[Param],
        m: int,
        dest: np.ndarray,
        shapes: list[tuple[int, ...] | None],
        n_out: int,
    ) -> None:
        self.one, self.params, self.m, self.n_out = one, list(params), m, n_out
        self.dest = np.ascontiguousarray(dest, dtype=np.int64)
        bounds = np.cumsum([0, *(math.prod(s or ()) for s in shapes)]).tolist()
        self._pieces = [(a, b, not s) for a, b, s in zip(bounds, bounds[1:], shapes)]
        self.explanation = f"A loop over {m} basis vectors around: {one.explanation}"
        self.source = (
            f"# {self.explanation}\n# for each unit vector e_j (split into "
            f"{', '.join(p.name for p in one.params[len(params) :])}), entry i of the "
            "result goes to out[dest[j, i]]\n" + one.source
        )
        self.facts = one.facts
        self.timings = dict(one.timings)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = np.empty(self.n_out)
        res = np.empty(self.dest.shape[1])
        e = np.zeros(self.m)
        views = [None if scalar else e[a:b] for a, b, scalar in self._pieces]  # (of e)
        fn = self.one._fn
        for j in range(self.m):
            e[j] = 1.0
            fn(*args, *(e[p[0]] if v is None else v for p, v in zip(self._pieces, views)), res)
            e[j] = 0.0
            out[self.dest[j]] = res
        return True, out

    @property
    def tape(self) -> ArrayTape:
        return self.one.tape

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.basis(self, self.one, self.m, self.dest)


class ArrayBatchCompiled:
    """Array code for every batch length (``emit.array_batch``): ``fn(n, *args, out)``.
    Not a program of its own: :meth:`at` makes the program of one length. It serves
    every length from 2 on, but for those where its first answer disagreed with
    ``f`` run on plain numbers, or NumPy refused a shape (``refused``)."""

    def __init__(
        self, source: str, names: dict, fname: str, tape: ArrayTape, lengths: tuple
    ) -> None:
        clock = time.perf_counter()
        self.source, self.lengths, self.tape = source, lengths, tape  # (tape: at lengths[0])
        self.n_out = sum(out_sizes(tape))
        ops = tape.n_ops
        self.fn = getattr(loader.load(source, fname, {"np": np, **names}), fname)
        self.refused: set[int] = set()
        self.explanation = (
            f"Array code for every batch length n (traced at {', '.join(map(str, lengths))}): "
            f"{ops} NumPy calls on whole arrays, one statement each."
        )
        self.facts = CodeFacts("arrays", ops, ops, slots=ops, generic=True)
        self.timings = {"generate and load": time.perf_counter() - clock}

    def serves(self, n: int) -> bool:
        """Whether it answers for batch length ``n`` (a length of 1 broadcasts as no
        other does: it is traced as it is)."""
        return n >= 2 and n not in self.refused

    def at(self, n: int, params: list[Param]) -> ArrayAtLength:
        return ArrayAtLength(self, n, params)


class ArrayAtLength(NumPyCode, CompiledProgram):
    """:class:`ArrayBatchCompiled` run at one batch length ``n``."""

    def __init__(self, generic: ArrayBatchCompiled, n: int, params: list[Param]) -> None:
        self.generic, self.n, self.params = generic, n, list(params)
        self.n_out, self.source = generic.n_out, generic.source
        self.explanation, self.facts = generic.explanation, generic.facts
        self.timings = dict(generic.timings)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = np.empty(self.n_out)
        self.generic.fn(self.n, *args, out)
        return True, out

    @property
    def tape(self) -> ArrayTape:
        """The array tape at the first length it was made at."""
        return self.generic.tape

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.arrays(self, self.generic.tape)
