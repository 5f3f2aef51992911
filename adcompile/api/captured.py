"""What a transform's function reads from outside its arguments (``trace.captures``).

:class:`CapturesMixin` is part of :class:`adcompile.api.transform.Transformed`: it
finds what ``fun`` reads (globals, closure cells, attributes, outer Values,
random generators), checks the watched values at each call (a change traces
again, with a :class:`~adcompile.api.events.RetraceWarning`), passes the hidden
inputs after the arguments, and traces ``fun`` with them swapped in.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir.arrays import ArrayTape
from ..ir.tape import Tape
from ..trace import captures, watching
from ..trace.arrays import NotArrayLevel
from ..trace.mode import debug_nans_enabled
from ..trace.value import Value
from .events import RetraceWarning, user_stacklevel
from .tracing import trace_array_call, trace_call, trace_expanded

#: Arguments holding at least this many numbers in their arrays are traced at array
#: level first (one node per NumPy call); smaller ones element by element, as Values,
#: whose code Numba compiles (and at array level only where that fails).
ARRAY_LEVEL_MIN = 256


class CapturesMixin:
    """Captures: found, watched, passed as hidden inputs, traced (see the module)."""

    def _adopting(self, call: Callable[[], Any]) -> Any:
        """``call()``, again after each trace that found Values made outside ``fun``
        (a model's parameters): they become inputs first (``_adopt_outer``)."""
        for _ in range(8):
            try:
                return call()
            except captures.NewOuterValues as e:
                self._adopt_outer(e.values)
        raise RuntimeError(
            f"adcompile: {self._name}() reads other Values made outside it at every trace; "
            "pass them as arguments"
        )

    def _adopt_outer(self, values: Sequence[Value]) -> None:
        """Make ``values`` (Values made outside ``fun`` that its trace read) inputs,
        read at every call, and forget what was compiled without them."""
        taken: Sequence[Value] = ()
        with self._lock:
            if self.adopt is not None:  # (a compiled loss takes some as parameters)
                taken, values = self.adopt(values)
            self._caps.add_outer(values)
            self._specs.clear()
            self._batches.clear()
            self._last = None
            self._install(None)
        if taken:
            raise LeavesGrew(taken)

    def _hidden_reader(self) -> list[Callable[[], Any]]:
        """What reads each hidden input's value, for entries."""
        return [h.read for h in self._caps.hidden]

    def _watch_check(self) -> Callable[[], int] | None:
        """The check of the values ``fun`` reads from outside, for entries (or None)."""
        caps = self._caps
        return caps.checker.changed if caps.watched and caps.checker is not None else None

    def _scan(self, swap: bool = True) -> captures.Captures:
        exclude = list(self.leaves()) if self.leaves is not None else []
        old = self._caps
        self._caps = captures.scan(self.fun, exclude, swap, gradients=self.leaves is not None)
        if old is not None and old.outer:  # (they stay inputs)
            self._caps.add_outer(old.outer)
        return self._caps

    def _check_watched(self, caps: captures.Captures) -> None:
        """Trace again when a value traced as a constant has changed since."""
        w = caps.changed()
        if w is None:
            return
        self._check_parameters(caps)
        data = (w.how == "array" and w.copy[1].kind == "f") or (
            w.how == "value" and w.copy[0] is float
        )
        with self._lock:
            self._specs.clear()
            self._batches.clear()
            self._last = None
            self._install(None)
            caps.snapshot()
        warnings.warn(
            f"{self._name}() reads {w.what}, which has changed since it was traced "
            "with its value compiled in; tracing again. "
            + (
                "Pass it as an argument (or keep it in a module global or a variable of "
                "the enclosing function) to have it read at every call instead"
                if data
                else "Such values can steer the Python code (loop counts, branches), so "
                "each change is traced, as a new shape is"
            ),
            RetraceWarning,
            stacklevel=user_stacklevel(),
        )

    def _check_parameters(self, caps: captures.Captures) -> None:
        """Refuse a compiled loss whose parameters (``leaves``) were replaced where
        its function reads them (a model made again): its gradients would go to the
        Values given, not to those read."""
        given = {id(v) for v in self.leaves()} if self.leaves is not None else set()
        for w in caps.watched:
            if w.parameter and id(_read(w)) not in given:
                raise TypeError(
                    f"{self._name}() reads {w.what}, which was one of the parameters "
                    "given to compile_loss and is now another Value (a model made "
                    "again?): the compiled gradients go to the Values given. Call "
                    "ad.compile_loss(loss_fn, model.parameters()) again"
                )

    def _fun_for_trace(self) -> Callable:
        """``fun`` taking its arguments and then the hidden inputs (swapped in)."""
        caps = self._caps
        if not caps.hidden:
            return self.fun
        h = len(caps.hidden)

        def with_hidden(*args: Any) -> Any:
            bound = caps.bind(args[-h:])
            try:
                return bound(*args[:-h])
            except captures.SwapFailed:
                raise
            except Exception as e:
                raise captures.SwapFailed() from e

        with_hidden.__name__ = self._name
        return with_hidden

    def _visible(self, args: Sequence[Any]) -> Sequence[Any]:
        """``args`` without the hidden inputs' values."""
        h = len(self._caps.hidden)
        return args[: len(args) - h] if h else args

    def _trace(self, args: Sequence[Any], sites: bool = False) -> Tape:
        """The tape of ``fun`` at ``args`` (the hidden inputs' values after them);
        with ``sites``, the user's line of each slot too."""
        names = self._names(len(args))
        fun = self._fun_for_trace()
        # constants first: the compiled path folds loops (the tape is not shown)
        multi = self.mode == "jit"  # jit returns what fun returns; gradients need a scalar
        if self.leaves is not None:  # argument 0 holds the leaves' values
            leaves = list(self.leaves())
            return self._trace_captured(fun, args[1:], leaves, names[1:], sites, True, multi)
        return self._trace_captured(fun, args, (), names, sites, True, multi)

    def _array_level_wanted(self, args: Sequence[Any], small: bool = False) -> bool:
        """Whether ``fun`` is traced at array level at ``args`` (``_trace_arrays``)."""
        caps = self._caps
        sizes = [a.size for a in self._visible(args) if isinstance(a, np.ndarray) and a.ndim]
        return not (
            not self.array_level
            or debug_nans_enabled()  # (the element-wise tape names the op that made a nan)
            or self.array_refused is not None
            or self.leaves is not None
            or (caps is not None and caps.outer)
            or not sizes
            or (sum(sizes) < ARRAY_LEVEL_MIN and not small)
        )

    def _trace_arrays(self, args: Sequence[Any], small: bool = False) -> ArrayTape | None:
        """The array-level tape of ``fun`` at ``args`` (``tracing.trace_array_call``), or
        None: where ``array_level`` is off, the arrays hold fewer than
        ``ARRAY_LEVEL_MIN`` numbers in all (unless ``small``: after tracing element
        by element failed), ``fun`` reads a model's Values, or it does what that level
        does not take (``array_refused`` then says what, and this transform traces
        element by element from then on)."""
        caps = self._caps
        if not self._array_level_wanted(args, small):
            return None
        gens = caps.generators if caps is not None else ()
        primal, names, multi = self._array_inputs(args)
        try:
            tape = trace_array_call(self._fun_for_trace(), primal, names, gens, multi, self.fun)
        except (Exception, NotArrayLevel) as e:
            self.array_refused = _refusal(e)
            return None
        if caps is not None and caps.watched:
            caps.settle()
        return tape

    def _array_inputs(self, args: Sequence[Any]) -> tuple[Sequence[Any], list[str], bool]:
        """What ``fun`` is traced at array level with: its arguments (of the call's),
        their names, and whether it may return arrays and tuples (jit; else one
        number)."""
        return args, self._names(len(args)), self.mode == "jit"

    def _trace_captured(self, fun: Callable, args: Sequence[Any], *rest: Any) -> Tape:
        """``trace_call(fun, args, *rest)`` with what ``fun`` reads from outside (its
        outer Values, its generators), then settled (``Captures.settle``)."""
        caps = self._caps
        outer = caps.outer if caps is not None else None
        gens = caps.generators if caps is not None else ()
        read = caps.read_values if caps is not None else ()  # (their .data: traced floats)
        try:
            tape = trace_call(
                fun, args, *rest, outer=outer, generators=gens, read=read, user=self.fun
            )
        except Exception as on_values:
            if not self.expand or rest[0]:  # (ad.export: its array program in elements)
                raise
            try:
                tape = trace_expanded(fun, args, rest[-1])
            except (Exception, NotArrayLevel):
                raise on_values from None
        if caps is not None and caps.watched:
            caps.settle()  # (what f itself changed while it ran is no change)
        return tape

    @property
    def captures(self) -> captures.Captures:
        """What ``fun`` reads from outside its arguments (found on first use)."""
        return self._caps if self._caps is not None else self._scan()

    def check_captures(self) -> None:
        """Trace again (with a RetraceWarning) if a value compiled in has changed."""
        caps = self.captures
        if caps.watched:
            self._check_watched(caps)


class LeavesGrew(Exception):  # noqa: N818  (not an error: the caller calls again)
    """A trace found Values made outside ``fun`` that ``adopt`` took as leaves: the
    call is made again with their values (a compiled loss's ``theta`` is longer)."""


def _read(w: watching.Watched) -> Any:
    """What ``w`` reads now (None where that fails)."""
    try:
        return w.get()
    except Exception:
        return None


def _refusal(e: BaseException) -> str:
    """Why a function is not traced at array level, in words (``ad.explain``)."""
    while isinstance(e, captures.SwapFailed) and e.__cause__ is not None:
        e = e.__cause__
    if isinstance(e, NotArrayLevel):
        return str(e)
    return f"{type(e).__name__} while tracing at array level: {e}"
