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

import array
import collections
import functools
import numbers
import os
import types
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .libraries import (
    NN_MODULE,
    attribute_names,
    class_attr,
    is_library,
    library_module,
    library_object,
    method_reads,
    special_methods,
)
from .randomness import moves
from .rebind import ANY_ATTRIBUTE, Rebinder
from .rebind import names_read as _names
from .value import Value
from .watching import Checker, Watched

#: How deep helper functions (a function that calls a function ...) are followed.
MAX_DEPTH = 16
#: Containers longer than this are not searched for arrays.
MAX_CONTAINER = 64


def code_names(f: Any) -> frozenset[str]:
    """The attribute names the code of function ``f`` (and code nested in it) reads."""
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    return _names(code)[1] if code is not None else frozenset()


def _kind(value: Any) -> str | None:
    """'array' or 'number' for what can be a hidden input, 'watch' for what must be
    checked, None for what cannot change a trace by itself (functions, objects,
    containers: they are followed, and checked by identity)."""
    t = type(value)
    if t is float or isinstance(value, np.floating):
        return "number"
    if t is np.ndarray:
        if value.dtype.kind == "f" and value.size:
            return "array"
        return "watch" if value.dtype.kind in "biufc" else None
    if isinstance(value, np.ndarray) and value.dtype != object:  # (np.matrix, masked)
        return "watch"
    if isinstance(value, Value):
        return "number" if value.is_leaf else "watch"
    if value is None or isinstance(value, (bool, int, complex, str, bytes, numbers.Number)):
        return "watch"
    return None


@dataclass(frozen=True)
class Hidden:
    """A value ``f`` reads from outside its arguments that becomes an input."""

    name: str  # the input's name in generated code
    what: str  # where it lives, for messages: "X (a global of module __main__)"
    holder: Any  # a cell, a globals dict, or a function (its defaults)
    key: Any  # None for a cell, the name for a dict, (kind, index or name) for defaults
    get: Callable[[], Any]  # reads the current value

    def read(self) -> Any:
        """The current value (a Value's ``.data``)."""
        v = self.get()
        return v.data if isinstance(v, Value) else v


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
    scanner = _Scanner(caps, {id(v) for v in exclude}, swap)
    scanner.gradients = gradients
    scanner.top(f)
    caps.snapshot()
    return caps


class _Scanner:
    """Walks what ``f`` can reach by the names its code reads, from its globals,
    cells and defaults (and its object's attributes), and those of the helpers it
    reaches; each value found is a hidden input or watched, by an expression
    from its root (``_r0['cfg'].scale``)."""

    def __init__(self, caps: Captures, exclude: set[int], swap: bool) -> None:
        self.swap = swap
        self.caps = caps
        self.exclude = exclude
        self.gradients = False  # (see ``scan``)
        self.seen: set[tuple[int, bool]] = set()
        self.names: set[str] = set()
        self.hidden_ids: dict[tuple[int, Any], Hidden] = {}
        self.roots: dict[int, str] = {}

    def root(self, obj: Any) -> str:
        """The name ``obj`` has in the checks' namespace."""
        name = self.roots.get(id(obj))
        if name is None:
            name = self.roots[id(obj)] = f"_r{len(self.roots)}"
            self.caps.ns[name] = obj
        return name

    def watch(self, what: str, expr: str, how: str) -> None:
        get = eval(f"lambda: {expr}", self.caps.ns)  # noqa: S307 (our own expression)
        self.caps.watched.append(Watched(what, expr, how, get))

    def top(self, f: Any) -> None:
        if isinstance(f, types.FunctionType):
            self.function(f, self.swap, 0, f.__name__)
        elif isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
            self.function(f.__func__, self.swap, 0, f.__name__)
            attrs = _names(f.__func__.__code__)[1]
            self.other(
                f.__self__,
                attrs,
                ("self", f"the object of {f.__name__}()"),
                0,
                self.root(f.__self__),
            )
        else:
            what = ("self", f"the {type(f).__name__} object transformed")
            self.follow(f, what, False, frozenset(), 0, self.root(f))

    # -- functions: their cells, globals and defaults

    def function(self, fn: types.FunctionType, swappable: bool, depth: int, fname: str) -> None:
        if (id(fn), swappable) in self.seen or depth > MAX_DEPTH:
            return
        self.seen.add((id(fn), swappable))
        code = fn.__code__
        glob, attrs = _names(code)
        if "modules" in attrs:  # (sys.modules[...].X reads the module, not a copy's globals)
            swappable = False
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:  # not yet assigned
                continue
            place = f"a variable of the scope enclosing {fname}()"
            self.found(
                v,
                name,
                place,
                swappable,
                cell,
                None,
                attrs,
                depth,
                lambda c=cell: c.cell_contents,
                f"{self.root(cell)}.cell_contents",
            )
        g = fn.__globals__
        module = g.get("__name__", "?")
        for name in sorted(glob):
            if name in g:
                self.found(
                    g[name],
                    name,
                    f"a global of module {module}",
                    swappable,
                    g,
                    name,
                    attrs,
                    depth,
                    lambda g=g, n=name: g[n],
                    f"{self.root(g)}[{name!r}]",
                )
        params = code.co_varnames[: code.co_argcount]
        for k, v in enumerate(fn.__defaults__ or ()):
            name = params[len(params) - len(fn.__defaults__) + k]
            self.found(
                v,
                name,
                f"a default of {fname}()",
                swappable,
                fn,
                ("pos", k),
                attrs,
                depth,
                lambda fn=fn, k=k: fn.__defaults__[k],
                f"{self.root(fn)}.__defaults__[{k}]",
            )
        for name, v in (fn.__kwdefaults__ or {}).items():
            self.found(
                v,
                name,
                f"a default of {fname}()",
                swappable,
                fn,
                ("kw", name),
                attrs,
                depth,
                lambda fn=fn, n=name: fn.__kwdefaults__[n],
                f"{self.root(fn)}.__kwdefaults__[{name!r}]",
            )

    def found(
        self,
        v: Any,
        name: str,
        place: str,
        swappable: bool,
        holder: Any,
        key: Any,
        attrs: frozenset[str],
        depth: int,
        get: Callable[[], Any],
        expr: str,
    ) -> None:
        kind = _kind(v)
        if isinstance(v, Value):
            self.value_attrs(name, place, expr, attrs)
        if kind in ("array", "number") and id(v) in self.exclude:
            return
        if self.gradients and isinstance(v, Value) and v.requires_grad:
            kind = None  # (read as itself: the trace finds it, its gradient is taken)
        if isinstance(v, Value) and "requires_grad" in attrs:
            kind = None  # (read as itself: a stand-in's flag would be its own)
        if kind in ("array", "number") and swappable:
            ident = (id(holder), key)
            if ident not in self.hidden_ids:
                h = Hidden(self._unique(name), f"{name} ({place})", holder, key, get)
                self.hidden_ids[ident] = h
                self.caps.hidden.append(h)
        else:
            self.leaf(v, (name, place), expr, attrs, depth, swappable)

    def value_attrs(self, name: str, place: str, expr: str, attrs: frozenset[str]) -> None:
        """A Value's label and requires_grad, where ``f`` reads them (``if
        p.label.startswith('w')``): watched."""
        for n in ("label", "requires_grad"):
            if n in attrs:
                self.watch(f"{name}.{n} ({place})", f"{expr}.{n}", "value")

    def leaf(
        self,
        v: Any,
        what: tuple[str, str],
        expr: str,
        attrs: frozenset[str] | set[str],
        depth: int,
        swappable: bool = False,
    ) -> None:
        """A value reached by ``expr``: watched as it is, and followed if it holds more
        (a helper function found in a cell or a global may read hidden inputs)."""
        text = f"{what[0]} ({what[1]})"
        if id(v) in self.exclude:  # (an input already: which one it is, is watched)
            self.watch(text, expr, "identity")
            self.caps.watched[-1].parameter = True
            return
        if isinstance(v, types.ModuleType) and library_module(v):
            if v is os and "environ" in attrs:  # (os.environ["SCALE"]: the environment)
                self.watch(f"os.environ ({what[1]})", f"{expr}.environ", "copy")
            return
        kind = _kind(v)
        if isinstance(v, Value):
            self.watch(text, expr, "identity")  # (its .data is read as an input)
            self.caps.read_values.append(v)
            self.value_attrs(what[0], what[1], expr, attrs)
            return
        if kind is not None:
            kind = "subarray" if isinstance(v, np.ndarray) else "value"  # (np.matrix ...)
            self.watch(text, expr, "array" if type(v) is np.ndarray else kind)
            return
        if moves(v):  # (a random generator or an iterator: watched while tracing)
            self.caps.generators.append((text, v))
            return
        if isinstance(v, np.ndarray) and v.dtype == object:  # (Values: ad.tensor, weights)
            self.watch(text, expr, "items")
            return
        if isinstance(v, COPIED) or (isinstance(v, Mapping) and not isinstance(v, dict)):
            self.watch(text, expr, "copy")  # (a ChainMap, os.environ: as a dict)
            return
        if isinstance(v, weakref.ref):  # (wr().k: what it refers to, followed)
            self.leaf(v(), (f"{what[0]}()", what[1]), f"{expr}()", attrs, depth + 1)
            return
        inside = what
        if not what[1].startswith("through "):
            inside = (what[0], f"through {what[0]}, {what[1]}")
        if isinstance(v, (list, tuple, dict)):
            self.follow(v, inside, False, attrs, depth, expr)
        elif isinstance(v, _CALLABLES):
            if not (isinstance(v, types.FunctionType) and is_library(v)):
                self.watch(text, expr, "identity")  # (a helper redefined)
                self.follow(v, what, swappable, attrs, depth, expr)
            elif hasattr(v, "__adcompile_code__"):  # (a primitive: its rules, ``follow``)
                self.follow(v, what, False, attrs, depth, expr)
        elif isinstance(v, types.ModuleType):
            self.follow(v, inside, False, attrs, depth, expr)
        elif not library_object(v) or _is_transform(v):
            self.watch(text, expr, "identity")
            self.follow(v, inside, False, attrs, depth, expr)

    def follow(
        self,
        v: Any,
        what: tuple[str, str],
        swappable: bool,
        attrs: frozenset[str],
        depth: int,
        expr: str,
    ) -> None:
        """Look inside what ``f`` reads: helper functions, methods, objects, containers.

        ``what``: (the expression that reaches ``v``, where it starts), for messages;
        ``expr``: the expression that reads it in the checks.
        """
        name, place = what
        if isinstance(v, types.FunctionType):
            if not is_library(v):
                self.function(v, swappable, depth + 1, v.__name__)
            # (a primitive's function: its forward and derivative rules are the user's)
            for k, rule in enumerate(getattr(v, "__adcompile_code__", ())):
                e = f"{expr}.__adcompile_code__[{k}]"
                self.leaf(rule, (f"{name}'s rule", place), e, attrs, depth + 1)
        elif isinstance(v, types.MethodType):
            self.follow(v.__func__, what, False, attrs, depth, f"{expr}.__func__")
            if isinstance(v.__func__, types.FunctionType):
                attrs = attrs | _names(v.__func__.__code__)[1]
            self.other(v.__self__, attrs, what, depth, f"{expr}.__self__")
        elif isinstance(v, (staticmethod, classmethod)):
            self.follow(v.__func__, what, False, attrs, depth, f"{expr}.__func__")
        elif isinstance(v, functools.partial):
            self.follow(v.func, what, False, attrs, depth, f"{expr}.func")
            for k, a in enumerate(v.args):
                self.leaf(a, (f"{name}.args[{k}]", place), f"{expr}.args[{k}]", attrs, depth)
            for k, a in v.keywords.items():
                self.leaf(
                    a, (f"{name}.keywords[{k!r}]", place), f"{expr}.keywords[{k!r}]", attrs, depth
                )
        elif isinstance(v, types.ModuleType):
            if library_module(v):
                return
            d = vars(v)
            for n in sorted(attrs):
                if n in d:
                    self.leaf(d[n], (f"{name}.{n}", place), f"{expr}.{n}", attrs, depth + 1)
        else:
            self.other(v, attrs, what, depth, expr)

    def other(
        self,
        obj: Any,
        attrs: frozenset[str] | set[str],
        what: tuple[str, str],
        depth: int,
        expr: str,
    ) -> None:
        """An object: its attributes that ``f`` names (own, its class's, properties),
        its methods, a container's items and length, a transform's function."""
        name, place = what
        if (id(obj), False) in self.seen or depth > MAX_DEPTH:
            return
        self.seen.add((id(obj), False))
        if _is_transform(obj):  # another transform (ad.grad(g) ...)
            self.follow(obj.fun, what, False, attrs, depth + 1, f"{expr}.fun")
            return
        if isinstance(obj, (list, tuple, dict)) and len(obj) > MAX_CONTAINER:
            # too long to look into item by item: the same items (by identity)
            self.watch(f"the items of {name} ({place})", expr, "items")
            return
        if isinstance(obj, (list, tuple)):
            self.watch(f"len({name}) ({place})", expr, "length")
            for k, a in enumerate(obj):
                self.leaf(a, (f"{name}[{k}]", place), f"{expr}[{k}]", attrs, depth + 1)
            return
        if isinstance(obj, dict):
            keys = [k for k in obj if isinstance(k, (str, int, float, bool)) or k is None]
            self.watch(
                f"the keys of {name} ({place})", expr, "items" if len(keys) < len(obj) else "keys"
            )  # (in order: a loop over the dict goes in that order)
            for k in keys:
                self.leaf(obj[k], (f"{name}[{k!r}]", place), f"{expr}[{k!r}]", attrs, depth + 1)
            return
        if library_object(obj):
            return
        cls = obj if isinstance(obj, type) else type(obj)
        if not isinstance(obj, type):
            call = type(obj).__call__ if callable(obj) else None
            if isinstance(call, types.FunctionType):
                self.function(call, False, depth + 1, f"{cls.__name__}.__call__")
                attrs = attrs | _names(call.__code__)[1]
            attrs = attrs | special_methods(cls)  # (bag[1]: what __getitem__ reads)
        d = getattr(obj, "__dict__", None)
        if type(obj).__module__ == NN_MODULE and isinstance(d, dict):
            attrs = attrs | set(d)  # (its methods are library code, not scanned)
        if ANY_ATTRIBUTE in attrs:  # (getattr with a name made at run time)
            attrs = attrs | {n for n in attribute_names(obj) if not n.startswith("__")}
        attrs = method_reads(cls, attrs)  # (m.weights() reads m.w: watched too)
        for n in sorted(attrs - {ANY_ATTRIBUTE}):
            e, w = f"{expr}.{n}", (f"{name}.{n}", place)
            if not isinstance(obj, type) and isinstance(d, dict) and n in d:
                self.leaf(d[n], w, e, attrs, depth + 1)
                continue
            found = class_attr(cls, n)
            if found is None:
                continue
            if isinstance(found, property):
                if found.fget is not None:
                    self.follow(found.fget, w, False, attrs, depth + 1, f"{expr}.__class__")
                try:
                    self.leaf(getattr(obj, n), w, e, attrs, depth + 1)
                except Exception:  # (the property fails now: f will say so)
                    pass
            elif isinstance(found, types.FunctionType):
                if not is_library(found):
                    self.function(found, False, depth + 1, f"{cls.__name__}.{n}")
            elif isinstance(found, (staticmethod, classmethod)):
                self.follow(found.__func__, w, False, attrs, depth + 1, e)
            elif not callable(found) or isinstance(found, type):
                self.leaf(getattr(obj, n), w, e, attrs, depth + 1)

    def _unique(self, name: str) -> str:
        base, k = name, 2
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name


#: Containers checked by their contents, against a copy (sets, deques, bytearrays).
COPIED = (set, frozenset, collections.deque, bytearray, array.array, memoryview)

_CALLABLES = (
    types.FunctionType,
    types.MethodType,
    functools.partial,
    staticmethod,
    classmethod,
)


def _is_transform(obj: Any) -> bool:
    """Whether ``obj`` is an adcompile transform (``ad.grad(g)`` ...) of a function."""
    if not type(obj).__module__.startswith("adcompile"):  # (before any attribute: a
        return False  # user's __getattr__ may raise anything for a name it lacks)
    return callable(getattr(obj, "fun", None))
