"""Compiled programs made from a tape: straight-line code, code folded into loops,
the tape interpreter, and a loop over basis vectors around one of those.

Each is a :class:`~adcompile.backend.program.CompiledProgram` (the interface every
caller uses); :func:`compile_tape` picks the kind for a tape. The Numba
functions they make are ``backend.numba_functions``'; Numba itself is reached
through ``backend.jit`` (neither module imports it with itself).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..emit.codegen import (
    CodeFacts,
    Outputs,
    module_source,
    straight_line,
    to_program,
)
from ..ir.tape import Param, Tape
from ..trace import loader
from .numba_functions import (
    comment,
    compile_direct,
    compile_folded_source,
    compile_straight_line,
    direct_native,
    interpreter_entry,
    jit_module,
    native_entry,
    signature,
)
from .program import (
    CompiledProgram,
    DirectFunction,
    DirectPlan,
    GuardCheck,
    NativeCall,
    ProgramVisitor,
    T,
    code_record,
    read_code_record,
)
from .python_first import numba_fresh, numba_later

KINDS = ("straight-line", "folded", "interpreter")


def compile_tape(
    tape: Tape,
    params: Sequence[Param],
    fname: str,
    doc: str = "",
    force: str | None = None,
    why: str | None = None,
) -> CompiledProgram:
    """``tape`` compiled to a function of flat float arguments (as in ``params``).

    Tapes of ``FOLD_MIN_SLOTS`` slots or more are folded into loops where
    that shortens them enough (:class:`LoopCompiled`); else up to
    ``STRAIGHT_LINE_LIMIT`` slots make straight-line code, larger ones run
    on the tape interpreter. ``force`` asks for one of :data:`KINDS`; ``why``
    is the reason given for the interpreter.
    """
    from .records import FOLD_MIN_SLOTS, STRAIGHT_LINE_LIMIT  # (read when called: tests set them)

    if force is not None and force not in KINDS:
        raise ValueError(
            f"force={force!r}: choose 'straight-line', 'folded' or 'interpreter' (or None)"
        )
    searched = len(tape) >= FOLD_MIN_SLOTS  # (smaller tapes are not searched for loops)
    if force == "folded" or (force is None and searched):
        from ..emit.fold import loop_source  # the value code of the tape, folded into loops

        plan = loop_source(tape, params, None, fname, doc, STRAIGHT_LINE_LIMIT)
        if plan is not None:
            return LoopCompiled(plan, params, fname, lambda: tape)
        if force == "folded":
            raise ValueError(f"force='folded': the tape of {fname} does not fold into loops")
    if force == "straight-line" or (force is None and len(tape) <= STRAIGHT_LINE_LIMIT):
        reason = (
            "as asked"
            if force
            else "no repeated segments worth folding into loops"
            if searched
            else f"tapes under {FOLD_MIN_SLOTS} slots are not searched for loops"
        )
        return StraightLineCompiled(tape, params, fname, doc, reason)
    explanation = f"{len(tape)} slots, run on the compiled tape interpreter" + (
        f": {why}."
        if why
        else " (as asked)."
        if force
        else f": straight-line code above {STRAIGHT_LINE_LIMIT} slots would take long "
        "to compile"
        + (", and folding repeated segments would not shorten it enough." if searched else ".")
    )
    return InterpreterCompiled(tape, params, fname, explanation)


class StraightLineCompiled(CompiledProgram):
    """A tape as straight-line code, one statement per primitive:
    ``fn(*args, out) -> ok``, its Numba function."""

    gets_direct_entry = True

    def __init__(
        self, tape: Tape, params: Sequence[Param], fname: str, doc: str, reason: str
    ) -> None:
        clock = time.perf_counter()
        self._tape, self.params, self.n_out = tape, list(params), len(tape.outputs)
        self.explanation = (
            f"Straight-line code: one statement per primitive ({tape.n_ops} operations; {reason})."
        )
        self.source = module_source(
            [comment(self.explanation) + straight_line(tape, fname, params, doc)]
        )
        source = self.source
        self.fn = numba_fresh(
            source, fname, lambda: compile_straight_line(source, fname, params), tape.n_ops
        )
        self.facts = CodeFacts("straight-line", tape.n_ops, tape.n_ops, slots=len(tape))
        self.timings = {"generate and compile": time.perf_counter() - clock}

    def record(self) -> dict:
        """What :meth:`restored` needs to make this code again, as JSON data."""
        return code_record(self, "straight-line")

    @classmethod
    def restored(
        cls, record: dict, params: Sequence[Param], fname: str, tape: Callable[[], Tape]
    ) -> StraightLineCompiled:
        """The code a :meth:`record` describes, without printing it again: loaded from
        Numba's cache, or its first call run as Python (``python_first``); ``tape()``
        makes its tape where it is asked for."""
        self = cls.__new__(cls)
        self._tape, self._make_tape = None, tape
        self.params = list(params)
        read_code_record(self, record)

        def load() -> Callable:
            return compile_straight_line(self.source, fname, self.params)

        clock = time.perf_counter()
        self.fn = numba_later(self.source, fname, load, self.facts.operations)
        self.timings = {"compile": time.perf_counter() - clock}
        return self

    @property
    def tape(self) -> Tape:
        if self._tape is None:
            self._tape = self._make_tape()
        return self._tape

    @property
    def native(self) -> NativeCall:
        return NativeCall(self.fn, device=self.fn.py_func)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = np.empty(self.n_out)
        return self.fn(*args, out), out

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.straight_line(self)

    def _make_numba(self) -> Callable:
        return native_entry(self.params, self.native, self.n_out)

    def direct(self, plan: DirectPlan) -> DirectFunction:
        """Straight-line code compiled once more, its outputs placed where the direct
        entry reads them: arrays it passes, and scalars returned (``compile_direct``)."""
        taken = {p.name for p in self.params}

        def fresh(name: str) -> str:
            while name in taken:
                name += "_"
            taken.add(name)
            return name

        names = {k: fresh(f"out_{k}") for k in range(len(plan.parts))}
        arrays = plan.array_parts()
        targets = [""] * self.n_out
        for k, (start, shape) in enumerate(plan.parts):
            if shape is None:
                targets[start] = names[k]
            else:
                for i in range(int(np.prod(shape))):
                    targets[start + i] = f"{names[k]}[{i}]"
        scalars = {k: names[k] for k in range(len(plan.parts)) if k not in arrays}
        outputs = Outputs(tuple(names[k] for k in arrays), tuple(targets), plan.success(scalars))
        return DirectFunction(compile_direct(self.tape, self.params, plan.fname, outputs), 0)


class InterpreterCompiled(CompiledProgram):
    """A large tape run by the compiled tape interpreter (generated once from the op
    table, ``interpreter``) on its opcode program (``codegen.to_program``)."""

    def __init__(self, tape: Tape, params: Sequence[Param], fname: str, explanation: str) -> None:
        clock = time.perf_counter()
        self._tape, self.params, self.n_out = tape, list(params), len(tape.outputs)
        self.program = to_program(tape)
        self.explanation = explanation
        self._header = comment(f"{fname}: {explanation}")  # (source: on use)
        self._source: str | None = None
        self._run, self._check = jit_module().interpreter()
        self.facts = CodeFacts("interpreter", tape.n_ops, 0, slots=len(tape))
        self.timings = {"generate and compile": time.perf_counter() - clock}

    @property
    def tape(self) -> Tape:
        return self._tape

    @property
    def source(self) -> str:  # type: ignore[override]
        """The tape it runs, printed when first asked for (a large tape takes seconds)."""
        if self._source is None:
            lines = str(self._tape).split("\n")
            self._source = self._header + "# The tape:\n" + "".join(f"# {ln}\n" for ln in lines)
        return self._source

    @source.setter
    def source(self, text: str) -> None:
        self._source = text

    @property
    def native(self) -> None:
        return None  # (two Numba functions, run and check: ``call`` runs them)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        p = self.program
        vals = p.init.copy()
        vals[p.inputs] = (
            np.concatenate([np.atleast_1d(np.asarray(a, np.float64)).ravel() for a in args])
            if args
            else []
        )
        self._run(p.opcodes, p.arg0, p.arg1, vals)
        ok = self._check(p.guards, vals) if len(p.guards) else True
        return ok, vals[p.outputs]

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.interpreter(self, self.program)

    def _make_numba(self) -> Callable:
        return interpreter_entry(self.params, self.program)


class LoopCompiled(CompiledProgram):
    """A tape folded into loops (``emit.fold.loop_source``: a primal tape
    differentiated as loops, or value code) and compiled: ``fn(*args, work,
    columns, out) -> ok``, with a work array kept per thread between calls.

    ``tape`` is the unrolled tape of the same outputs, made only when asked for.
    """

    gets_direct_entry = True

    def __init__(
        self, loops: Any, params: Sequence[Param], fname: str, unrolled: Callable[[], Tape]
    ) -> None:
        self.params = list(params)
        self.source, self.explanation = loops.source, loops.explanation
        self.facts = loops.facts
        self.program, self.grad, self._loops, self._remake = loops.program, loops.grad, loops, None
        self.timings = dict(loops.timings)
        self.columns = loops.code.columns
        self.work_size, self.n_out = loops.code.work_size, loops.n_out
        self._start(fname, unrolled)

    def _start(self, fname: str, unrolled: Callable[[], Tape], restored: bool = False) -> None:
        """Compile the code (restored: load it from Numba's cache, or run its first call
        as Python and load it after, ``python_first``)."""
        clock = time.perf_counter()

        def load() -> Callable:
            return compile_folded_source(self.source, fname, [], self.params)

        ops = self.facts.operations
        made = numba_later if restored else numba_fresh
        self.fn = made(self.source, fname, load, ops)
        self.timings["compile"] = time.perf_counter() - clock
        self.local = threading.local()
        self._unrolled = unrolled
        self._tape: Tape | None = None

    def record(self) -> dict:
        """What :meth:`restored` needs to make this code again, as JSON data."""
        return code_record(self, "loops", work_size=int(self.work_size))

    @classmethod
    def restored(
        cls,
        record: dict,
        params: Sequence[Param],
        fname: str,
        unrolled: Callable[[], Tape],
        remake: Callable[[], Any] | None = None,
    ) -> LoopCompiled:
        """The code a :meth:`record` describes, compiled (or loaded from Numba's cache)
        without folding the tape again; ``remake()`` folds it again where another
        target's source is asked for (:attr:`loops`)."""
        self = cls.__new__(cls)
        self.params = list(params)
        read_code_record(self, record)
        self.program = self.grad = self._loops = None  # (only the printers read them)
        self._remake = remake
        self.work_size = record["work_size"]
        self.timings = {}
        self._start(fname, unrolled, restored=True)
        return self

    @property
    def loops(self) -> Any:
        """The folded program this code was printed from (``emit.fold.LoopSource``), which
        prints it for other targets (``ad.export``); folded again for restored code."""
        if self._loops is None:
            if self._remake is None:
                raise ValueError("code restored from disk without a remake cannot print again")
            self._loops = self._remake()
        return self._loops

    @property
    def tape(self) -> Tape:
        """The unrolled tape of the outputs (the reference the loops are checked against)."""
        if self._tape is None:
            self._tape = self._unrolled()
        return self._tape

    @property
    def native(self) -> NativeCall:
        return NativeCall(self.fn, (), max(self.work_size, 1), self.columns, self.local)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = np.empty(self.n_out)
        # the work array is kept between calls (one per thread): a large one costs
        # more to allocate and page in than a small loop takes to run
        work = getattr(self.local, "work", None)
        if work is None:
            work = self.local.work = np.empty(max(self.work_size, 1))
        return self.fn(*args, work, self.columns, out), out

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.folded(self, self.loops, ())

    def _make_numba(self) -> Callable:
        return native_entry(self.params, self.native, self.n_out)

    def direct(self, plan: DirectPlan) -> DirectFunction:
        return direct_native(self.native, self.n_out, plan)


class BasisCompiled(CompiledProgram):
    """A Jacobian or Hessian made one basis vector at a time: a Numba loop calls
    ``one`` (compiled code whose last argument is the basis vector ``e``) with
    each unit vector and puts entry ``i`` of result ``j`` at ``out[dest[j, i]]``.

    Its Numba function is ``fn(*args, out) -> ok``; ``source`` shows the loop,
    then the code it calls. It gets no direct entry (its calls are long).
    """

    def __init__(
        self,
        one: CompiledProgram,
        params: Sequence[Param],
        m: int,
        dest: np.ndarray,
        n_out: int,
        fname: str,
    ) -> None:
        clock = time.perf_counter()
        self.one, self.params, self.n_out, self.m = one, list(params), n_out, m
        self.dest = np.ascontiguousarray(dest, dtype=np.int64)
        k = dest.shape[1]
        args = "".join(f"{p.name}, " for p in params)
        loop = (
            f"def {fname}({args}out):\n"
            f"    _e = _np.zeros({m})\n"
            f"    _res = _np.empty({k})\n"
            "    _ok = True\n"
            f"    for _j in range({m}):  # one basis vector e_j at a time\n"
            "        _e[_j] = 1.0\n"
            f"        if not _one({args}_e, _res):\n"
            "            _ok = False\n"
            "        _e[_j] = 0.0\n"
            f"        for _i in range({k}):\n"
            "            out[_dest[_j, _i]] = _res[_i]\n"
            "    return _ok\n"
        )
        names = {"_np": np, "_one": one.numba, "_dest": self.dest}
        basis_loop = getattr(loader.load(loop, f"basis_{fname}", names), fname)
        where = "with the code it calls (its .source)"
        self.fn = jit_module().compile_uncached(basis_loop, signature(params), fname, where, False)
        self.explanation = f"A loop over {m} basis vectors around: {one.explanation}"
        self.source = (
            comment(self.explanation)
            + "# _dest[j, i]: where entry i of the result for e_j goes\n"
            + loop
            + "\n\n# _one(..., e, result): the code for one basis vector\n"
            + one.source
        )
        self.facts = one.facts
        self.timings = {**one.timings, "compile the loop": time.perf_counter() - clock}

    @property
    def tape(self) -> Tape:
        return self.one.tape

    def _guard_checks(self) -> tuple[GuardCheck, ...]:
        return self.one.guards

    @property
    def native(self) -> NativeCall:
        return NativeCall(self.fn)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = np.empty(self.n_out)
        return self.fn(*args, out), out

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.basis(self, self.one, self.m, self.dest)

    def _make_numba(self) -> Callable:
        return native_entry(self.params, self.native, self.n_out)
