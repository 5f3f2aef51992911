"""Data a function reads from outside its arguments, found so that it is never baked in.

A loss written JAX-style reads ``X`` and ``y`` from its enclosing scope or
from module globals rather than taking them as arguments. Tracing would
record their values as constants, and an in-place change (``X[:] = ...``)
would then leave the compiled code answering for the old data. So, before a
transform traces ``f``, :func:`scan` reads ``f``'s code and sorts what it
reads from outside into two kinds:

* **hidden inputs**: float arrays and real numbers in ``f``'s closure cells,
  in the module globals it reads, and in its parameters' defaults (and those
  of the plain Python helper functions it calls, found the same way). They
  become extra inputs of the compiled code, read afresh at every call, at
  the cost of an argument. While tracing, ``f`` is called as a copy of
  itself (:meth:`Captures.bind`) whose cells, globals and defaults hold
  tracing values instead: nothing of the user's is modified.
* **watched values**: what cannot be swapped that way (attributes, class
  attributes and properties of objects, items of containers, helper
  functions and other objects by identity, integers and other values that
  may steer the Python code), each read by an expression from its root
  (``adcompile.watching``). They are traced as constants, and every call
  checks them against what they were; :meth:`Captures.changed` names the
  first that differs, so the caller traces again instead of answering with
  stale values.
* **outer Values**: ``Value`` objects made before the trace (a model's
  parameters) that the trace read; the trace finds them
  (``api.trace_call``), and they become one more hidden input, an array of
  their ``.data`` (:meth:`Captures.add_outer`).
* **random generators** the function reaches: a trace that draws from one is
  refused (``adcompile.randomness``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .rebind import Rebinder
from .rebind import names_read as _names
from .scanner import MAX_CONTAINER, MAX_DEPTH, Hidden, Scanner
from .value import Value
from .watching import Checker, Watched

__all__ = ["MAX_CONTAINER", "MAX_DEPTH", "Captures", "Hidden", "scan"]


def code_names(f: Any) -> frozenset[str]:
    """The attribute names the code of function ``f`` (and code nested in it) reads."""
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    return _names(code)[1] if code is not None else frozenset()


@dataclass
class Captures:
    """What ``f`` reads from outside its arguments (see the module doc)."""

    fun: Callable
    hidden: list[Hidden] = field(default_factory=list)
    watched: list[Watched] = field(default_factory=list)
    # Values made outside f that its trace read (a model's parameters): the last
    # hidden input is their ``.data``, read at every call (see add_outer)
    outer: list[Value] = field(default_factory=list)
    # the roots the watched expressions start from (name -> object)
    ns: dict[str, Any] = field(default_factory=dict)
    # random generator objects f reaches ((what, generator)): a trace that moves
    # one is refused (adcompile.randomness)
    generators: list[tuple[str, Any]] = field(default_factory=list)
    checker: Checker | None = None
    # the Values f reaches from outside (read as Values, they become ``outer``): their
    # ``.data`` are traced floats while f is traced, so a branch on one is guarded and
    # a number made of one is refused by name (it would be compiled in)
    read_values: list[Value] = field(default_factory=list)

    def add_outer(self, values: Sequence[Value]) -> None:
        """Make ``values`` (Values made outside ``f``) inputs, read at every call."""
        if self.outer:
            self.hidden.pop()
        known = {id(v) for v in self.outer}
        self.outer.extend(v for v in values if id(v) not in known)
        outer = self.outer
        n = len(outer)

        def read() -> np.ndarray:
            return np.fromiter([v.data for v in outer], np.float64, n)

        what = (
            f"{n} Value(s) made outside {getattr(self.fun, '__name__', 'f')}() "
            "(a model's parameters), read at every call"
        )
        self.hidden.append(Hidden(OUTER_NAME, what, None, OUTER_NAME, read))

    def values(self) -> tuple:
        """The hidden inputs' current values, in order."""
        return tuple([h.read() for h in self.hidden])

    def changed(self) -> Watched | None:
        """The first watched value that changed since :meth:`snapshot`, or None."""
        if self.checker is None:
            return None
        k = self.checker.changed()
        if k == -1:
            return None
        if k >= 0:
            return self.watched[k]
        for w in self.watched:  # one could not be read: which?
            if w.changed():
                return w
        return None

    def snapshot(self) -> None:
        """Keep the watched values as they are now (just before a trace)."""
        for w in self.watched:
            w.snapshot()
        if self.watched:
            if self.checker is None:
                self.checker = Checker(self.watched, self.ns)
            self.checker.keep()

    def settle(self) -> None:
        """After a trace: keep what ``f`` itself changed while it ran (a counter it
        increments, a list it appends to) as it now is. The compiled code does not
        repeat such side effects; a change made after the trace is still seen."""
        moved = False
        for w in self.watched:
            if w.changed():
                w.snapshot()
                moved = True
        if moved and self.checker is not None:
            self.checker.keep()

    def bind(self, values: Sequence[Any]) -> Callable:
        """A copy of ``fun`` that reads ``values`` where it read the hidden inputs."""
        if not self.hidden:
            return self.fun
        for h, v in zip(self.hidden, values):  # (a Value's stand-in: its label)
            was = h.get()
            if isinstance(v, Value) and isinstance(was, Value):
                v.label = was.label
        return Rebinder(self.hidden, values).method(self.fun)

    def listing(self) -> list[str]:
        """What is read at every call and what is watched, a line each (ad.explain)."""
        out = [f"input: {h.what}" for h in self.hidden]
        out += [f"watched ({w.how}): {w.what}" for w in self.watched]
        return out


class SwapFailed(Exception):
    """``f`` raised while it read tracing values in place of its hidden inputs."""


class NewOuterValues(SwapFailed):  # (passes wherever SwapFailed passes, up to the transform)
    """A trace read Values made outside it (a model's parameters) that are not yet
    inputs: the transform makes them inputs and traces again."""

    def __init__(self, values: Sequence[Value]) -> None:
        super().__init__(f"{len(values)} Values made outside the traced function")
        self.values = list(values)


#: The hidden input holding the outer Values' ``.data``, in generated code.
OUTER_NAME = "outer_values"


def scan(
    f: Callable, exclude: Sequence[Any] = (), swap: bool = True, gradients: bool = False
) -> Captures:
    """What ``f`` reads from outside its arguments. ``exclude``: Values that are
    inputs already (a compiled loss's parameters), left as they are. With
    ``swap=False`` nothing becomes a hidden input: everything is watched. With
    ``gradients`` (a compiled loss), a Value that takes a gradient is read as itself,
    never swapped for its number: the trace finds it, and its gradient is taken."""
    caps = Captures(f)
    Scanner(caps, {id(v) for v in exclude}, swap, gradients).top(f)
    caps.snapshot()
    return caps
