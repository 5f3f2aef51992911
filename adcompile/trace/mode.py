"""What a Value's operations do depends on the context: the per-context mode.

- ``Mode`` (in the ContextVar ``MODE``): record or not (``no_grad``), trace
  (``tracing``: comparisons kept as guards, in a ``TraceState``), stop at the
  first nan/inf (``debug_nans``: ``NonFiniteError``). ``MODE.get() is
  DEFAULT_MODE`` is the fast paths' test.
- The user's line (``caller_site``, ``caller_line``, ``site_text``): the first
  frame outside adcompile and NumPy, kept cheaply as (code, offset).
- ``gc_paused``: the cyclic collector paused while a large graph is built.
- The texts of the errors a Value raises that need nothing of the Value
  (``bad_operand``, ``index_error``) and the float comparisons by symbol.

Knows nothing of ``Value`` (whose module reads this one).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple

from ..ir.ops import Op


class TraceState:
    """What a trace collects besides the graph: its comparisons and source lines."""

    def __init__(self, sites: bool = False) -> None:
        # (cmp, Value, Value, result, "file:line") per comparison made while tracing
        self.guards: list[tuple[str, Any, Any, bool, str]] = []
        # With ``sites``: Value serial -> where the user's code made it, as (code,
        # instruction offset), made into "file:line" text only when a tape is built
        # from it. Off by default (it costs a third of a trace): the one that needs
        # it, naming the op that made a nan, traces again with it.
        self.sites = sites
        self.where: dict[int, tuple[Any, int] | None] = {}


class NonFiniteError(FloatingPointError):
    """Under ``debug_nans``: a primitive made nan or inf from finite inputs."""


class Mode(NamedTuple):
    """Per-context settings (each thread and task has its own)."""

    grad: bool = True  # record operations (False inside no_grad)
    trace: TraceState | None = None  # set while a transform traces a function
    nans: bool = False  # raise NonFiniteError at the first nan/inf


#: The mode ContextVar and its default, for fast paths that run only outside
#: every ``no_grad`` / ``debug_nans`` / tracing block (``MODE.get() is DEFAULT_MODE``).
MODE: ContextVar[Mode] = ContextVar("adcompile_mode", default=Mode())  # noqa: B039 (immutable)
DEFAULT_MODE = MODE.get()


def debug_nans_enabled() -> bool:
    """Whether ``debug_nans`` is on in this context."""
    return MODE.get().nans


def nonfinite_error(
    op: Op, inputs: Sequence[float], result: float, where: str, context: str = ""
) -> NonFiniteError:
    """The error ``debug_nans`` raises, naming the op, its inputs and the user's line."""
    args = ", ".join(repr(x) for x in inputs)
    return NonFiniteError(
        f"{op.name}({args}) = {result!r}{context} at {where}: the first non-finite value "
        "made from finite inputs. Check the inputs against the op's domain (for example "
        "log or sqrt of a negative number, division by zero, exp overflow); outside "
        "ad.debug_nans() such values follow NumPy (nan/inf) without an error"
    )


#: The modules whose frames are not the user's code.
LIBRARY_FRAMES = ("adcompile.", "numpy.")
#: What a traced argument's ``.data`` (a ``TracedFloat``) holds as its ``args``: the
#: Value stands for a number the function is called with (a float in plain Python).
ARGUMENT = ("argument",)


def caller_line(depth: int = 2) -> str:
    """``file:line`` of the first frame outside adcompile (the user's code).

    The line is found from the frame's instruction offset: ``f_lineno`` can be
    stale while a trace function (a coverage tool, hypothesis) is installed.
    """
    return site_text(caller_site(depth + 1))


def in_library(depth: int) -> bool:
    """Whether the code ``depth`` frames above the caller (1: whoever called it) is
    adcompile's or NumPy's, not the user's."""
    return sys._getframe(depth + 1).f_globals.get("__name__", "").startswith(LIBRARY_FRAMES)


def caller_site(depth: int = 2) -> tuple[Any, int] | None:
    """``(code, instruction offset)`` in the first frame outside adcompile, cheaply.

    ``site_text`` turns it into ``file:line`` when a tape or an error needs it
    (a line number costs more to find than the whole op). Only the code object
    is kept, never the frame: no cycles, no locals kept alive.
    """
    f = sys._getframe(depth)
    while f is not None and f.f_globals.get("__name__", "").startswith(LIBRARY_FRAMES):
        f = f.f_back
    return None if f is None else (f.f_code, f.f_lasti)


def site_text(site: tuple[Any, int] | None) -> str:
    """``file:line`` of a site ``caller_site`` found."""
    if site is None:
        return "?"
    code, lasti = site
    line = code.co_firstlineno
    for start, end, n in code.co_lines():
        if start <= lasti < end:
            line = n if n is not None else line
            break
    return f"{code.co_filename}:{line}"


STATIC_HINT = (
    "that decides a trip count, an index or a shape (range(n), x[:n], np.zeros(n)) must "
    "be static: pass it as a keyword argument (f(x, n=3): an int keyword is static) or "
    "name its position in static_argnums, as in JAX: ad.grad(f, static_argnums=1), "
    "ad.jit(f, static_argnums=(1,)). A new value then traces again"
)


def index_error(data: float) -> str:
    """The message of ``range(v)``, ``x[:v]``, ``[0] * v`` ... on a Value holding ``data``
    (``__index__``; NumPy's own shape and index conversions replace it with theirs)."""
    if MODE.get().trace is not None:
        return (
            f"a traced Value (now {float(data)!r}) was used as an integer, in range(), a "
            "slice, an index or a size: the positional arguments of a function that "
            "ad.grad, ad.jit ... trace are Values, which stand for floats. An integer "
            f"argument {STATIC_HINT}"
        )
    return (
        f"a Value (holding {float(data)!r}) cannot be used as an integer (in range(), a "
        "slice, an index or a size): it stands for a float. Use int(v.data) for the "
        "integer it holds now"
    )


def bad_operand(other: Any, what: str) -> TypeError:
    """The error for an operand that is neither a number nor a Value."""
    return TypeError(
        f"unsupported operand type for {what}: Value and {type(other).__name__!r}; "
        "use a number (int or float) or an adcompile.Value"
        + (" (convert text with float(...) first)" if isinstance(other, (str, bytes)) else "")
    )


#: Python's float comparisons, by symbol.
COMPARE_FLOATS = {
    "<": float.__lt__,
    "<=": float.__le__,
    ">": float.__gt__,
    ">=": float.__ge__,
    "==": float.__eq__,
    "!=": float.__ne__,
}


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large graph is built.

    Value graphs hold no reference cycles (reference counting frees them), so
    the collector would only rescan the growing graph again and again. Nested
    and concurrent uses are counted; the collector's state is restored by the
    last one out.
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


#: True while check mode runs ``f`` eagerly for its reference gradient: float() of a
#: Value that depends on the inputs would cut it off from the gradient there.
FLOAT_REFUSED: ContextVar[bool] = ContextVar("adcompile_float_refused", default=False)


@contextlib.contextmanager
def floats_refused() -> Iterator[None]:
    """float() / int() / round() of a Value that takes a gradient raise TypeError."""
    token = FLOAT_REFUSED.set(True)
    try:
        yield
    finally:
        FLOAT_REFUSED.reset(token)


@contextlib.contextmanager
def _mode(**changes: Any) -> Iterator[Mode]:
    token = MODE.set(MODE.get()._replace(**changes))
    try:
        yield MODE.get()
    finally:
        MODE.reset(token)


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Record with the default mode, whatever the caller's (``no_grad``, ``debug_nans``,
    an outer trace): what a transform records internally must not depend on it."""
    token = MODE.set(DEFAULT_MODE)
    try:
        yield
    finally:
        MODE.reset(token)


def no_grad() -> contextlib.AbstractContextManager:
    """Within this block operations record nothing (results are constants)."""
    return _mode(grad=False)


def debug_nans(enabled: bool = True) -> contextlib.AbstractContextManager:
    """Within this block the first nan/inf made from finite inputs raises NonFiniteError.

    Applies to Value operations and to compiled functions alike.
    """
    return _mode(nans=enabled)


@contextlib.contextmanager
def tracing(sites: bool = False) -> Iterator[TraceState]:
    """Within this block comparisons on Values are recorded as guards (and, with
    ``sites``, the user's line that made each Value)."""
    state = TraceState(sites)
    with _mode(trace=state, grad=True):
        yield state
