"""The one interface of compiled code: :class:`CompiledProgram`.

Every specialisation of a transform holds one compiled program, whatever
kind of code it is: straight-line code, code folded into loops, the compiled
tape interpreter (``backend.compiled``), a loop over basis vectors around
the code of one (a large Jacobian or Hessian), or batch-generic code run at
one batch length (``backend.batch``). Its callers (the entries, vmap,
export, ``ad.explain``, the transforms) use only what this module defines
and never ask which kind they hold; where the kinds behave differently, a
method does (``native``, ``visit``, ``direct``).

What a program offers:

- ``program(*args)`` (or ``program.call``): ``(ok, outputs)`` for flat float
  arguments (a float, or a flat float64 array, as in ``params``); ``ok`` is
  False when a guard recorded while tracing does not hold for them;
- ``source``, ``explanation``: the generated source, and why it has its form;
- ``facts``: what the code is, in numbers (``codegen.CodeFacts``: its kind,
  operations, statements, loops, slots); ``timings``: the seconds each stage
  took to make it; ``from_disk``: whether Numba loaded it from its disk cache;
- ``guards``: the comparisons the code checks, as data (:class:`GuardCheck`);
- ``numba``: its Numba function for the user's own ``@numba.njit`` code,
  ``fn(*args, out) -> ok`` for every kind (``numba_signature`` says it in
  words); ``native``: the Numba function of the generated code itself and
  what it takes besides the arguments (:class:`NativeCall`), or None;
- ``tape``: the unrolled tape of what it computes (made when first asked for);
- ``generic``: the batch-generic code it runs at one length, or None.

This module only defines the interface: it imports neither Numba nor the
modules that do.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, TypeVar

import numpy as np

from ..emit.codegen import CodeFacts
from ..ir.tape import INPUT, Param, Tape

if TYPE_CHECKING:
    from ..emit.codegen import Program as OpcodeProgram

T = TypeVar("T", covariant=True)


class GuardCheck(NamedTuple):
    """One comparison compiled code checks: ``condition`` (inputs by name, other
    operands by their tape slot) was ``expected`` when traced, at ``where`` (the
    user's ``file:line``, or "")."""

    condition: str
    expected: bool
    where: str


def guard_checks(tape: Tape, params: Sequence[Param]) -> tuple[GuardCheck, ...]:
    """The guards of ``tape``, whose inputs are ``params`` flattened in order."""
    flat = [
        p.name if p.size is None else f"{p.name}[{k}]" for p in params for k in range(p.size or 1)
    ]
    names = dict(zip(tape.inputs, flat))

    def side(i: int) -> str:
        if tape.nodes[i].op == INPUT:
            return names.get(i, tape.name(i))
        return tape.operand(i)

    return tuple(
        GuardCheck(f"{side(g.a)} {g.cmp} {side(g.b)}", g.expected, g.where) for g in tape.guards
    )


@dataclass(frozen=True)
class NativeCall:
    """How a program's Numba function itself is called, past Python:
    ``fn(*lead, *args, work, columns, out) -> ok``; without ``work, columns``
    where ``work`` is None. The fast entries call it so."""

    fn: Any  # the Numba dispatcher, compiled for the program's arguments
    lead: tuple[int, ...] = ()  # arguments before the program's own (batch-generic code: n)
    work: int | None = None  # the length of the work array it takes (None: none, nor columns)
    columns: np.ndarray | None = None  # the per-repetition constants it reads
    # per thread, ``work``: a work array of that length, once a call has made one
    local: threading.local | None = None
    # the plain Python function, which numba-cuda can compile as a device
    # function (straight-line code only; None for the others)
    device: Callable | None = None

    def signature(self, params: Sequence[Param]) -> str:
        """``fn``'s arguments, in words."""
        args = [f"{n}: int64" for n in ("n",) * len(self.lead)] + [_typed(p) for p in params]
        if self.work is not None:
            args += [f"work: float64[::1] ({self.work} values)", "columns: its constants"]
        return f"({', '.join([*args, 'out: float64[::1]'])}) -> bool"


def _typed(p: Param) -> str:
    return f"{p.name}: float64" if p.size is None else f"{p.name}: float64[::1] ({p.size} values)"


@dataclass(frozen=True)
class DirectPlan:
    """What a direct entry's Numba function does (``entries.direct_entry``):
    ``fn(*args, *arrays, s)`` with ``arrays`` one per array part of the result,
    ``s`` scratch space; it returns ``success(scalars)`` (the text of the
    result, given each scalar part's text), or None where a guard fails or an
    array argument has another length than ``sizes`` (None: a float)."""

    fname: str
    sizes: tuple[int | None, ...]
    parts: tuple[tuple[int, tuple | None], ...]  # per part of the result: (start in out, shape)
    success: Callable[[dict[int, str]], str]

    def array_parts(self) -> list[int]:
        """The parts that are arrays (the others are scalars)."""
        return [k for k, (_, shape) in enumerate(self.parts) if shape is not None]


class DirectFunction(NamedTuple):
    """A direct entry's Numba function (see :class:`DirectPlan`) and how much
    scratch space it takes (0: none)."""

    fn: Any
    scratch: int


class ProgramVisitor(Protocol[T]):
    """What tells compiled programs apart where a caller must (``export`` prints
    each kind its own way): ``program.visit(visitor)`` calls the method for its
    kind."""

    def straight_line(self, program: CompiledProgram) -> T:
        """Straight-line code of ``program.tape``."""

    def folded(self, program: CompiledProgram, loops: Any, lead: tuple[int, ...]) -> T:
        """Folded code, printed from ``loops`` (``emit.fold.LoopSource``: its loop
        program, which ``loops.printed(target)`` prints for another target, and the
        Numba source ``loops.source`` of ``fname(*lead, *args, v, c, out)``, whose
        work-array size and constants ``c`` are ``loops.code``'s); run with the
        batch lengths ``lead`` first (batch-generic code), or none."""

    def interpreter(self, program: CompiledProgram, opcodes: OpcodeProgram) -> T:
        """The tape interpreter running the opcode program ``opcodes``."""

    def arrays(self, program: CompiledProgram, tape: Any) -> T:
        """NumPy code on whole arrays, printed from the array tape ``tape``
        (``ir.arrays.ArrayTape``; ``program.source`` is its Python)."""

    def basis(self, program: CompiledProgram, one: CompiledProgram, m: int, dest: Any) -> T:
        """A loop over ``m`` basis vectors ``e`` around ``one`` (whose last argument is
        ``e``); entry ``i`` of the result for ``e_j`` goes to ``out[dest[j, i]]``."""


class CompiledProgram(ABC):
    """Compiled code of one specialisation, of any kind (module doc).

    Data every program holds: ``params`` (its arguments), ``n_out`` (how many
    floats it writes), ``source``, ``explanation``, ``facts`` and ``timings``.
    """

    params: list[Param]
    n_out: int
    source: str
    explanation: str
    facts: CodeFacts
    timings: dict[str, float]
    #: the batch-generic code (``batch.BatchCompiled``) it runs at one length, or None
    generic: Any = None
    #: whether ``direct`` makes it a direct entry's function (``entries.hot_ready``)
    gets_direct_entry: ClassVar[bool] = False

    _numba: Callable | None = None
    _guards: tuple[GuardCheck, ...] | None = None

    @abstractmethod
    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        """Run on flat float arguments: ``(ok, outputs)``, ok False when a guard fails."""

    def __call__(self, *args: Any) -> tuple[bool, np.ndarray]:
        return self.call(*args)

    @property
    @abstractmethod
    def tape(self) -> Tape:
        """The unrolled tape of what the code computes (for a loop over basis
        vectors, that of one); made when first asked for where the code was not
        made from it (the reference for naming the primitive that made a nan)."""

    @property
    @abstractmethod
    def native(self) -> NativeCall | None:
        """How its Numba function is called past Python; None where it has none of
        its own (the tape interpreter: ``call`` runs it)."""

    @abstractmethod
    def visit(self, visitor: ProgramVisitor[T]) -> T:
        """``visitor``'s method for this kind of code, with what it needs."""

    @property
    def guards(self) -> tuple[GuardCheck, ...]:
        """The comparisons recorded while tracing that the code checks (read off
        ``tape`` when first asked for)."""
        if self._guards is None:
            self._guards = self._guard_checks()
        return self._guards

    def _guard_checks(self) -> tuple[GuardCheck, ...]:
        return guard_checks(self.tape, self.params)

    @property
    def numba(self) -> Callable:
        """Its Numba function for the user's own ``@numba.njit`` code (made once):
        ``fn(*args, out) -> ok``, ``args`` as ``params``, ``out`` of ``n_out``
        floats; the work arrays the code needs are made inside."""
        if self._numba is None:
            self._numba = self._make_numba()
        return self._numba

    @abstractmethod
    def _make_numba(self) -> Callable:
        """The Numba function ``numba`` returns."""

    @property
    def numba_signature(self) -> str:
        """The arguments of ``numba``, in words."""
        args = [_typed(p) for p in self.params]
        return f"({', '.join([*args, f'out: float64[::1] ({self.n_out} values)'])}) -> bool"

    @property
    def from_disk(self) -> bool:
        """Whether Numba loaded its machine code from its disk cache (code restored
        from disk whose first call runs as Python loads it after that call: not yet)."""
        native = self.native
        stats = getattr(native.fn, "stats", None) if native is not None else None
        return stats is not None and sum(stats.cache_hits.values()) > 0

    def direct(self, plan: DirectPlan) -> DirectFunction | None:
        """A direct entry's Numba function (see :class:`DirectPlan`), compiled now;
        None for code that gets no direct entry (``gets_direct_entry`` False)."""
        return None

    def record(self) -> dict | None:
        """What restores this code in another process without the passes that made
        it, as JSON data (``records.write_record``); None where it is not kept."""
        return None


def code_record(program: Any, kind: str, **more: Any) -> dict:
    """A record of compiled code (``CompiledProgram.record``), as JSON data: its kind,
    source, explanation, facts and outputs' count, a folded program's per-repetition
    constants (``columns``) where it has them, and ``more``."""
    record = {
        "kind": kind,
        "source": program.source,
        "explanation": program.explanation,
        "facts": asdict(program.facts),
        "n_out": int(program.n_out),
        **more,
    }
    columns = getattr(program, "columns", None)
    if columns is not None:
        record["columns"] = np.asarray(columns).tolist()
        record["columns_dtype"] = str(np.asarray(columns).dtype)
    return record


def read_code_record(program: Any, record: dict) -> None:
    """Set what :func:`code_record` kept on ``program`` (made without ``__init__``)."""
    program.source, program.explanation = record["source"], record["explanation"]
    program.facts = CodeFacts(**record["facts"])
    program.n_out = record["n_out"]
    if "columns" in record:
        program.columns = np.asarray(record["columns"], dtype=record["columns_dtype"])
