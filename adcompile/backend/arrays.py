"""Array code: an array tape's NumPy source, loaded and run (``ArrayCompiled``).

The program of an array tape (``emit.arrays``) runs as Python over NumPy: each
statement is one NumPy call on whole arrays (``@`` goes to BLAS), so its cost
is NumPy's, and making it costs no compile (the source is loaded through
``trace.loader`` from a real file, as all generated code). It is one kind of
:class:`~adcompile.backend.program.CompiledProgram`; it has no Numba function
of its own (``native`` is None, ``numba`` says so).

Its loop nests (``emit.array_loops``: element-wise chains fused, products by
BLAS) are its second version (:class:`LoopVersion`): after ``HOT_CALLS`` calls
they are compiled by Numba in a thread of their own, run once beside the
NumPy code on that call's arguments (their answers must agree), timed against
it, and called from then on where they are the faster (NumPy's ufuncs are SIMD
code, Numba's loops call libm's ``exp`` one element at a time: a program of
few operations on long arrays can be the faster as NumPy calls).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..emit.array_loops import NotLowered, loop_source
from ..emit.arrays import array_source, out_sizes
from ..emit.codegen import CodeFacts
from ..ir.arrays import ArrayTape
from ..ir.tape import Param
from ..trace import loader
from .program import CompiledProgram, NativeCall, ProgramVisitor, T

#: Calls of a program of array code before its loop nests are made (as direct
#: entries: compiling them takes 0.7 to 4 s of a core, and slows the calls
#: meanwhile, which a minimisation of tens of calls would not win back).
HOT_CALLS = 100
#: Loop nests compile in a thread of their own (False: in the call that makes them).
BACKGROUND = True
#: "loops": keep the loop nests once they agree, however they time (the tests);
#: "numpy": never make them; None: keep the faster.
PREFER: str | None = None
#: A Jacobian's unit vectors run this many numbers an array at a time
#: (``ArrayBasisCompiled``).
BASIS_BLOCK = 2**16
#: Array tapes of more nodes than this, their repeated runs folded into loops, get
#: no loop nests (Numba takes about 40 ms a node to compile them).
LOOP_MAX_NODES = 400
_making: list[threading.Thread] = []
_failed: list[BaseException] = []


def wait_for_loops(timeout: float | None = None) -> None:
    """Wait until the loop nests being made in the background are made (or not);
    with ``ADCOMPILE_STRICT=1``, raise what failed there."""
    while _making:
        _making.pop().join(timeout)
    if _failed:
        raise _failed.pop()


Made = tuple[str, dict[str, np.ndarray]]


class LoopVersion:
    """The loop nests of a program of NumPy code (module doc), printed by ``make()``
    when hot: (source, constant arrays), whose function named ``fname`` takes the
    constant arrays after ``out``; or None where it has none. ``outcome`` says,
    once decided, which version runs and why."""

    def __init__(self, make: Callable[[], Made | None], fname: str) -> None:
        self.make, self.fname = make, fname
        self.source: str | None = None
        self.calls = 0
        self.outcome: str | None = None
        self.seconds: dict[str, float] = {}

    def tick(self, owner: Any, args: tuple) -> None:
        """One call of ``owner`` (whose ``run(*args, out)`` is its NumPy code) with
        ``args``: at the ``HOT_CALLS``-th, make the loop nests."""
        self.calls += 1
        if self.calls != HOT_CALLS or PREFER == "numpy":
            return
        copies = tuple(np.array(a) if isinstance(a, np.ndarray) else a for a in args)
        if not BACKGROUND:
            self._make(owner, copies)
            return
        thread = threading.Thread(
            target=self._make, args=(owner, copies), name="adcompile: loop nests", daemon=True
        )
        _making.append(thread)
        thread.start()

    def _make(self, owner: Any, args: tuple) -> None:
        from . import jit  # (Numba is imported where it is first needed)

        try:
            clock = time.perf_counter()
            made = self.make()
            if made is None:
                self.outcome = "NumPy code (no loop nests: an op has no loop form, or too long)"
                return
            self.source, consts_by_name = made
            consts = tuple(consts_by_name.values())
            fn = jit.njit(getattr(loader.load(self.source, self.fname), self.fname))

            def loops(*a: Any) -> Any:
                return fn(*a, *consts)

            numpy_code = owner.run
            want, got = np.empty(owner.n_out), np.empty(owner.n_out)
            numpy_code(*args, want)
            loops(*args, got)
            self.seconds["compile"] = time.perf_counter() - clock
            if not _agree(got, want):
                raise AssertionError(
                    "adcompile: the loop nests of this array code disagree with its NumPy "
                    f"code (largest difference {np.nanmax(np.abs(got - want))}); the NumPy "
                    "code goes on"
                )
            self.seconds["numpy"] = _best(numpy_code, args, want)
            self.seconds["loops"] = _best(loops, args, got)
            if PREFER == "loops" or self.seconds["loops"] < self.seconds["numpy"]:
                owner.run = loops
                owner.source = self.source
                owner.explanation += (
                    f" From call {HOT_CALLS} on, its loop nests compiled by Numba run instead "
                    f"(element-wise chains fused; {_us(self.seconds['loops'])} a call against "
                    f"{_us(self.seconds['numpy'])} for the NumPy code)."
                )
                self.outcome = "loop nests (the faster)"
            else:
                self.outcome = "NumPy code (the faster)"
        except Exception as e:  # (a bug in adcompile: the NumPy code goes on)
            self.outcome = f"NumPy code (loop nests failed: {type(e).__name__}: {e})"
            if os.environ.get("ADCOMPILE_STRICT", "") not in ("", "0"):
                if threading.current_thread() is threading.main_thread():
                    raise
                _failed.append(e)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"


def _agree(got: np.ndarray, want: np.ndarray) -> bool:
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max(initial=0.0)))
    return bool(np.allclose(got, want, rtol=1e-7, atol=1e-9 * scale, equal_nan=True))


def _best(fn: Callable, args: tuple, out: np.ndarray, repeat: int = 5) -> float:
    best = math.inf
    for _ in range(repeat):
        clock = time.perf_counter()
        fn(*args, out)
        best = min(best, time.perf_counter() - clock)
    return best


def loop_version(
    tape: ArrayTape, params: list[Param], fname: str, doc: str, generic: bool = False
) -> Made | None:
    """The loop source of ``tape`` (and its constant arrays), or None where an op
    has no loop form or the tape, its repeated runs folded, is longer than
    ``LOOP_MAX_NODES``. ``generic``: to be made one program in the batch length
    (every product by ``np.dot``: which are small depends on the length)."""
    try:
        small = 0 if generic else None
        return loop_source(tape, params, fname, doc, small=small, max_nodes=LOOP_MAX_NODES)
    except NotLowered:
        return None


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
        self.run = getattr(loader.load(self.source, fname, {"np": np, **names}), fname)
        self.loops = LoopVersion(lambda: loop_version(tape, params, fname, doc), fname)
        ops = tape.n_ops
        self.explanation = (
            f"Array code: {ops} NumPy calls on whole arrays, one statement each "
            f"({len(tape.inputs)} array and number arguments)."
        )
        self.facts = CodeFacts("arrays", ops, ops, slots=len(tape.nodes))
        self.timings = {"generate and load": time.perf_counter() - clock}

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = np.empty(self.n_out)
        self.run(*args, out)
        if self.loops is not None and self.loops.calls < HOT_CALLS:
            self.loops.tick(self, args)
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
    ``e_j`` goes to ``out[dest[j, i]]``. ``one`` is batched over ``e``
    (``diff.batching``): a block of unit vectors at a time, each block one run of
    NumPy code of at most ``BASIS_BLOCK`` numbers an array; where it does not batch,
    the loop over the unit vectors is Python's."""

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
        self._blocks: dict[int, ArrayCompiled | None] = {}
        tape = one.tape
        widest = max((math.prod(tape.shapes[i]) for i in range(len(tape.nodes))), default=1)
        self.block = max(1, min(m, BASIS_BLOCK // max(widest, 1)))

    def _batched(self, c: int) -> ArrayCompiled | None:
        """``one`` at ``c`` unit vectors at once (None: it does not batch)."""
        if c not in self._blocks:
            from ..diff.batching import batch_tape
            from ..ir.arrays import NotBatched

            tape, k = self.one.tape, len(self.params)
            mapped = [p >= k for p in range(len(tape.inputs))]
            try:
                code = batch_tape(tape, mapped, c)
            except NotBatched:
                self._blocks[c] = None
            else:
                self._blocks[c] = ArrayCompiled(code, self.one.params, "basis_block", "")
        return self._blocks[c]

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        from ..diff.batching import run_batched

        out = np.empty(self.n_out)
        tape = self.one.tape
        for start in range(0, self.m, self.block):
            c = min(self.block, self.m - start)
            program = self._batched(c)
            if program is None:
                return self._one_by_one(args)
            e = np.zeros((c, self.m))
            e[np.arange(c), start + np.arange(c)] = 1.0
            parts = [e[:, a] if scalar else e[:, a:b] for a, b, scalar in self._pieces]
            slots = tape.inputs[len(args) :]
            shaped = [p.reshape(c, *tape.shapes[s]) for p, s in zip(parts, slots)]
            out[self.dest[start : start + c]] = run_batched(program, tape, [*args, *shaped], c)
        return True, out

    def _one_by_one(self, args: tuple) -> tuple[bool, np.ndarray]:
        """``call``, a unit vector at a time."""
        out = np.empty(self.n_out)
        res = np.empty(self.dest.shape[1])
        e = np.zeros(self.m)
        views = [None if scalar else e[a:b] for a, b, scalar in self._pieces]  # (of e)
        fn = self.one.run
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
        self,
        source: str,
        names: dict,
        fname: str,
        tape: ArrayTape,
        lengths: tuple,
        loops: Callable[[], Made | None] | None = None,
    ) -> None:
        clock = time.perf_counter()
        self.source, self.lengths, self.tape = source, lengths, tape  # (tape: at lengths[0])
        self.n_out = sum(out_sizes(tape))
        ops = tape.n_ops
        self.run = getattr(loader.load(source, fname, {"np": np, **names}), fname)
        self.loops = None if loops is None else LoopVersion(loops, fname)
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
        self.n_out = generic.n_out
        self.facts = generic.facts
        self.timings = dict(generic.timings)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = np.empty(self.n_out)
        generic = self.generic
        generic.run(self.n, *args, out)
        if generic.loops is not None and generic.loops.calls < HOT_CALLS:
            generic.loops.tick(generic, (self.n, *args))
        return True, out

    @property
    def source(self) -> str:  # type: ignore[override]
        """The code it runs (its loop nests, once they are kept)."""
        return self.generic.source

    @property
    def explanation(self) -> str:  # type: ignore[override]
        return self.generic.explanation

    @property
    def tape(self) -> ArrayTape:
        """The array tape at the first length it was made at."""
        return self.generic.tape

    def visit(self, visitor: ProgramVisitor[T]) -> T:
        return visitor.arrays(self, self.generic.tape)
