"""Array code: an array tape's NumPy source, loaded and run (``ArrayCompiled``).

The program of an array tape (``emit.arrays``) runs as Python over NumPy: each
statement is one NumPy call on whole arrays (``@`` goes to BLAS), so its cost
is NumPy's, and making it costs no compile (the source is loaded through
``trace.loader`` from a real file, as all generated code). It is one kind of
:class:`~adcompile.backend.program.CompiledProgram`; it has no Numba function
of its own yet (``native`` is None, ``numba`` says so).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..emit.arrays import array_source, out_sizes
from ..emit.codegen import CodeFacts
from ..ir.arrays import ArrayTape
from ..ir.tape import Param
from ..trace import loader
from .program import CompiledProgram, NativeCall, ProgramVisitor, T


class ArrayCompiled(CompiledProgram):
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

    @property
    def native(self) -> NativeCall | None:
        return None

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.arrays(self, self._array_tape)

    def _guard_checks(self) -> tuple:
        return ()

    def _make_numba(self) -> Any:
        raise TypeError(
            "this specialisation is array code (NumPy calls on whole arrays), which has no "
            "Numba function yet; vg.numba(*example_args) traces the function element by "
            "element for it"
        )
