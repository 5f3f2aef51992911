"""The first call of code restored from the disk cache, run as Python while Numba loads.

A process that finds its folded or straight-line code on disk
(``records.read_record``) skips every pass after tracing; what is left is Numba:
about 0.35 s to import it and load its registries before the cached machine code
can be called, once per process. The first call runs the same generated source in
CPython instead (10,000 Rosenbrock terms and their gradient: 8 ms), then Numba
loads in a thread of its own while the caller goes on; a later call waits for it,
and runs Numba's code.

Where CPython and Numba's NumPy error model part (``1.0 / 0.0`` raises in CPython
and is ``inf`` in Numba; ``math.log(0.0)``, overflow), the Python run raises and
the call waits for Numba instead. A negative float to a fractional power is
complex in CPython (nan in Numba): comparisons, ``math`` functions and storing
it raise ``TypeError``, and so does ``abs``, the one operation that would make
it real again, as the Python version's ``abs`` is ``math.fabs``. The results
agree with Numba's to rounding: CPython's ``x ** 2.0`` is libm's ``pow``,
Numba's is ``x * x``.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..trace import loader

#: "auto": the first call runs as Python where Numba has not loaded code in this
#: process yet (``jit.LOADED``) and the program is small enough
#: (``MAX_OPERATIONS``); "always" (tests), "never".
PYTHON_FIRST = "auto"
#: The most operations (of the unrolled tape, before differentiating) a first call
#: runs as Python: 40-140 ns each, with their adjoints (the chain, Rosenbrock, the
#: MLP over rows), against the 0.35 s Numba takes to load.
MAX_OPERATIONS = 2_000_000


#: Calls a program compiled fresh now runs as Python before Numba compiles it (set
#: by a transform whose inputs keep taking new branches: ``api.compiling``); 0:
#: Numba compiles it at once.
DEFERRED: ContextVar[int] = ContextVar("adcompile_deferred", default=0)

#: The threads loading Numba's code for restored programs (``wait_for_numba``).
_loading: list[threading.Thread] = []


def wait_for_numba(timeout: float | None = None) -> None:
    """Wait until the Numba code that restored programs load after their first call
    is loaded (or its load failed: the next call then loads it, and raises)."""
    while _loading:
        _loading.pop().join(timeout)


def numba_later(
    source: str, fname: str, load: Callable[[], Callable], operations: int, calls: int = 1
) -> Callable:
    """``load()`` (the Numba function of ``fname`` in ``source``, from Numba's disk
    cache), or a :class:`NumbaLater` whose first ``calls`` calls run ``fname`` as
    Python and which loads it after them, where that is worth it (see the module):
    batch-generic code runs twice in its first call, at the call's point and at
    one near it, to check the new length against ``f``."""
    jit = sys.modules.get("adcompile.backend.jit")  # (perhaps being imported by a thread)
    loaded = getattr(jit, "LOADED", False)
    wanted = PYTHON_FIRST == "always" or (
        PYTHON_FIRST == "auto" and not loaded and operations * calls <= MAX_OPERATIONS
    )
    if not wanted:
        return load()
    return _later(source, fname, load, calls, background=True)


def numba_fresh(
    source: str, fname: str, load: Callable[[], Callable], operations: int
) -> Callable:
    """``load()``, Numba compiling ``fname`` now; or, where ``DEFERRED`` asks for it, a
    :class:`NumbaLater` running that many calls as Python first, then compiling in
    the caller's thread (code that may be called once or twice, where Numba's
    seconds would be most of the cost)."""
    calls = DEFERRED.get()
    if calls <= 0 or PYTHON_FIRST == "never" or operations * calls > MAX_OPERATIONS:
        return load()
    return _later(source, fname, load, calls, background=False)


def _later(
    source: str, fname: str, load: Callable[[], Callable], calls: int, background: bool
) -> NumbaLater:
    """A :class:`NumbaLater` of ``fname`` in ``source`` (its Python version's ``abs``
    is ``math.fabs``: see the module)."""
    python = getattr(loader.load(source, fname, {"abs": math.fabs}), fname)
    py_func = getattr(loader.load(source, fname), fname)
    return NumbaLater(python, load, py_func, calls, background)


class NumbaLater:
    """A Numba function not loaded yet: the first ``calls`` calls run ``python`` (the
    same source run by CPython), then a thread runs ``load()``; later calls wait for
    it (without ``background``, the call after them loads it, in its own thread,
    and only calls whose guards hold count).
    ``py_func`` is the function Numba compiles (as a Numba dispatcher's)."""

    def __init__(
        self,
        python: Callable,
        load: Callable[[], Callable],
        py_func: Callable,
        calls: int = 1,
        background: bool = True,
    ) -> None:
        self.python, self._load, self.py_func = python, load, py_func
        self.background = background
        self._fn: Callable | None = None
        self._first = calls  # (calls left to run as Python)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # (for _first and _thread)
        self._loading = threading.Lock()  # (one load at a time)
        self.python_calls = 0  # how many calls ran as Python

    def __call__(self, *args: Any) -> Any:
        fn = self._fn
        if fn is None:
            with self._lock:
                first = self._first > 0
                self._first = max(self._first - 1, 0)
                last = first and self._first == 0
            if first:
                try:
                    with np.errstate(all="ignore"):
                        ok = self.python(*args)
                except (ArithmeticError, ValueError, TypeError):
                    ok = None  # (where CPython raises, Numba's answer is inf or nan)
                    with self._lock:
                        self._first = 0
                if not self.background and not ok and ok is not None:
                    with self._lock:  # (without background, a call whose guards
                        self._first += 1  # fail does not count: it is a miss)
                    last = False
                if (last or ok is None) and self.background:
                    self._start()
                if ok is not None:
                    self.python_calls += 1
                    return bool(ok)
            fn = self.numba()
        return fn(*args)

    @property
    def ready(self) -> bool:
        """Whether the Numba function is loaded."""
        return self._fn is not None

    def numba(self) -> Callable:
        """The Numba function: waits for the thread loading it, or loads it now (where
        a load fails, it fails here, in the caller's thread)."""
        if self._fn is None:
            with self._lock:
                thread, self._first = self._thread, 0
            if thread is not None:
                thread.join()
            with self._loading:
                if self._fn is None:
                    self._fn = self._load()
        return self._fn

    def _start(self) -> None:
        thread = threading.Thread(target=self._load_quietly, name="adcompile: loading Numba")
        with self._lock:
            if self._thread is not None:
                return
            self._thread = thread
        _loading.append(thread)
        thread.start()

    def _load_quietly(self) -> None:
        try:
            with self._loading:
                if self._fn is None:
                    self._fn = self._load()
        except Exception:  # (loaded again by ``numba()``, where it raises)
            pass


def numba_of(fn: Any) -> Any:
    """The Numba function ``fn`` is or will be (waiting for a :class:`NumbaLater`), to
    link into other Numba code."""
    return fn.numba() if isinstance(fn, NumbaLater) else fn
