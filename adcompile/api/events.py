"""Compile events and announcements: what a transform says about its traces.

- :class:`CompileEvent`: one trace and compile (why, what, how long), as
  ``ad.explain`` and ``ADCOMPILE_LOG=compiles`` report it; :func:`summary` words
  a compiled program's facts.
- :class:`Announce`: the stderr line of a trace and compile that takes longer
  than ``ANNOUNCE_AFTER`` seconds (read here, at each compile).
- :class:`RetraceWarning`, and :func:`user_stacklevel`, which points a warning at
  the user's frame; :func:`loop_ir_failed` warns (or raises, in strict mode) when
  folding fails.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import warnings
from typing import Any

from ..backend.program import CompiledProgram
from ..emit.codegen import CodeFacts
from ..trace.arguments import shape_text

#: A trace and compile still running after this many seconds says so on stderr
#: (``ADCOMPILE_QUIET=1`` silences it).
ANNOUNCE_AFTER = 1.0


def summary(facts: CodeFacts) -> str:
    """What compiled code is, in a few words, from its facts (``CompiledProgram.facts``):
    "folded into loops: 24 statements for 197 operations" ..."""
    if facts.kind == "folded":
        what = (
            f"folded into loops: {facts.statements} statements for {facts.operations} operations"
        )
        return "one program for every batch length, " + what if facts.generic else what
    arrays = f"array code: {facts.operations} NumPy calls on whole arrays"
    if facts.how:
        return f"{facts.how}; {arrays}" if facts.kind == "arrays" else facts.how
    if facts.kind == "arrays":
        return "one program for every batch length, " + arrays if facts.generic else arrays
    if facts.kind == "straight-line":
        return "Straight-line code"
    return f"{facts.slots} slots, run on the compiled tape interpreter"


@dataclasses.dataclass
class CompileEvent:
    """One trace and compile of a transform (or a new batch length that code
    generic in the batch length served without one): why, what, how long."""

    reason: str
    produced: str = ""
    seconds: float = 0.0
    stages: dict[str, float] = dataclasses.field(default_factory=dict)
    key: tuple = ()
    from_disk: bool = False  # Numba's machine code loaded from the disk cache
    traced: bool = True
    facts: CodeFacts | None = None  # what was made, in numbers (``produced`` words them)

    def line(self, name: str) -> str:
        """The event in one line (what ``ADCOMPILE_LOG=compiles`` prints)."""
        what = "served" if not self.traced else "traced and compiled"
        disk = ", Numba's code loaded from the disk cache" if self.from_disk else ""
        return (
            f"adcompile: {what} {name} in {self.seconds:.2f} s: {self.reason}; "
            f"{self.produced}{disk}"
        )


def key_text(key: tuple) -> str:
    return ", ".join(shape_text(s) for s in key) or "no arguments"


class Announce:
    """Says on stderr that a trace and compile is running, once it has taken
    ``ANNOUNCE_AFTER`` seconds, and then what it made and how long it took."""

    def __init__(self, fname: str) -> None:
        self.fname = fname
        self.fired = threading.Event()
        self.what = ""
        self.timer: threading.Timer | None = None

    def __enter__(self) -> Announce:
        if os.environ.get("ADCOMPILE_QUIET", "") not in ("", "0"):
            return self
        self.start = time.perf_counter()
        self.timer = threading.Timer(ANNOUNCE_AFTER, self._fire)
        self.timer.daemon = True
        self.timer.start()
        return self

    def _fire(self) -> None:
        self.fired.set()
        print(
            f"adcompile: tracing and compiling {self.fname} (first call with these shapes; "
            "ADCOMPILE_QUIET=1 silences this) ...",
            file=sys.stderr,
            flush=True,
        )

    def done(self, compiled: CompiledProgram) -> None:
        """What was compiled (see :func:`summary`)."""
        self.what = summary(compiled.facts)

    def __exit__(self, *exc: Any) -> None:
        if self.timer is None:
            return
        self.timer.cancel()
        if self.fired.is_set() and exc[0] is None:
            seconds = time.perf_counter() - self.start
            print(
                f"adcompile: compiled {self.fname} in {seconds:.1f} s ({self.what})",
                file=sys.stderr,
                flush=True,
            )


class RetraceWarning(UserWarning):
    """A transformed function keeps being traced again (new shapes or branches)."""


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the first frame outside adcompile."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_globals.get("__name__", "").startswith("adcompile"):
        f, level = f.f_back, level + 1
    return level


def loop_ir_failed(name: str, error: Exception) -> None:
    """The loop IR failed on a program (a bug in adcompile): compile the unrolled tape
    instead, and say so; with ``ADCOMPILE_STRICT=1`` (the test suite), raise."""
    if os.environ.get("ADCOMPILE_STRICT", "") not in ("", "0"):
        raise error
    warnings.warn(
        f"adcompile: folding {name}() into loops failed ({type(error).__name__}: {error}); "
        "it is compiled as an unrolled tape instead, which takes longer. Please report "
        "this with the function",
        RuntimeWarning,
        stacklevel=user_stacklevel(),
    )
