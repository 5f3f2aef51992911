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
* **watched values**: what cannot be swapped that way (an array reached
  through an object's attribute, a container, a module attribute, another
  transform; integer arrays and other numbers, which may steer the Python
  code). They are traced as constants, and every call checks them
  (identity, then contents) against the copy kept at trace time;
  :meth:`Captures.changed` names the first that differs, so the caller traces
  again instead of answering with stale values.
"""

from __future__ import annotations

import dis
import functools
import numbers
import sysconfig
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .value import Value

#: How deep helper functions (a function that calls a function ...) are followed.
MAX_DEPTH = 6
#: Containers longer than this are not searched for arrays.
MAX_CONTAINER = 64

_LIBRARY_MODULES = (
    "adcompile",
    "numpy",
    "scipy",
    "sympy",
    "numba",
    "math",
    "builtins",
    "functools",
    "torch",
    "jax",
)
_LIBRARY_PATHS = tuple(
    p for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "purelib", "platlib")} if p
)


def _is_library(fn: types.FunctionType) -> bool:
    module = (fn.__globals__.get("__name__") or "").split(".")[0]
    return module in _LIBRARY_MODULES or fn.__code__.co_filename.startswith(_LIBRARY_PATHS)


@functools.lru_cache(maxsize=512)
def _names(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """(global names, attribute names) that ``code`` and the code nested in it read."""
    glob: set[str] = set()
    attr: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                glob.add(ins.argval)
            elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR"):
                attr.add(ins.argval)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return frozenset(glob), frozenset(attr)


def _kind(value: Any) -> str | None:
    """'array' or 'number' for what can be a hidden input, 'watch' for what must be
    checked, None for what cannot change a trace (functions, modules ...)."""
    t = type(value)
    if t is float or isinstance(value, np.floating):
        return "number"
    if t is np.ndarray:
        if value.dtype.kind == "f" and value.size:
            return "array"
        return "watch" if value.dtype.kind in "biufc" else None
    if isinstance(value, Value):
        return "number" if value._fn is None else "watch"
    if isinstance(value, (bool, int, complex, str, bytes, numbers.Number)):
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
class Watched:
    """A value traced as a constant, checked at each call against its copy."""

    what: str
    get: Callable[[], Any]
    obj: Any = None
    copy: Any = None

    def snapshot(self) -> None:
        """Keep the current value (and a copy of an array's contents)."""
        try:
            self.obj = self.get()
        except Exception:  # gone: any later value counts as a change
            self.obj, self.copy = _MISSING, None
            return
        self.copy = _contents(self.obj)

    def changed(self) -> bool:
        """Whether the value's contents differ from the copy kept (an equal new
        object is no change)."""
        try:
            now = self.get()
        except Exception:
            return self.obj is not _MISSING
        return not _matches(now, self.copy)


_MISSING = object()


def _contents(v: Any) -> Any:
    if type(v) is np.ndarray:
        return v.copy()
    if isinstance(v, Value):
        return ("Value", v.data)
    return v


def _matches(now: Any, copy: Any) -> bool:
    """Whether ``now`` has the contents ``copy`` was taken of."""
    if type(copy) is np.ndarray:
        return (
            type(now) is np.ndarray
            and now.shape == copy.shape
            and now.dtype == copy.dtype
            and bool(np.array_equal(now, copy, equal_nan=copy.dtype.kind in "fc"))
        )
    if isinstance(now, Value):
        now = ("Value", now.data)
    try:
        return type(now) is type(copy) and bool(now == copy or (now != now and copy != copy))
    except Exception:
        return False


@dataclass
class Captures:
    """What ``f`` reads from outside its arguments (see the module doc)."""

    fun: Callable
    hidden: list[Hidden] = field(default_factory=list)
    watched: list[Watched] = field(default_factory=list)

    def values(self) -> tuple:
        """The hidden inputs' current values, in order."""
        return tuple([h.read() for h in self.hidden])

    def changed(self) -> Watched | None:
        """The first watched value that changed since :meth:`snapshot`, or None."""
        for w in self.watched:
            if w.changed():
                return w
        return None

    def snapshot(self) -> None:
        """Keep the watched values as they are now (just before a trace)."""
        for w in self.watched:
            w.snapshot()

    def bind(self, values: Sequence[Any]) -> Callable:
        """A copy of ``fun`` that reads ``values`` where it read the hidden inputs."""
        if not self.hidden:
            return self.fun
        return _Rebinder(self.hidden, values).method(self.fun)


class SwapFailed(Exception):
    """``f`` raised while it read tracing values in place of its hidden inputs."""


def scan(f: Callable, exclude: Sequence[Any] = (), swap: bool = True) -> Captures:
    """What ``f`` reads from outside its arguments. ``exclude``: Values that are
    inputs already (a compiled loss's parameters), left as they are. With
    ``swap=False`` nothing becomes a hidden input: everything is watched."""
    caps = Captures(f)
    _Scanner(caps, {id(v) for v in exclude}, swap).top(f)
    caps.snapshot()
    return caps


class _Scanner:
    def __init__(self, caps: Captures, exclude: set[int], swap: bool) -> None:
        self.swap = swap
        self.caps = caps
        self.exclude = exclude
        self.seen: set[tuple[int, bool]] = set()
        self.names: set[str] = set()
        self.hidden_ids: dict[tuple[int, Any], Hidden] = {}

    def top(self, f: Any) -> None:
        if isinstance(f, types.FunctionType):
            self.function(f, self.swap, 0, f.__name__)
        elif isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
            self.function(f.__func__, self.swap, 0, f.__name__)
            attrs = _names(f.__func__.__code__)[1]
            self.other(f.__self__, attrs, ("self", f"the object of {f.__name__}()"), 0)
        else:
            what = ("self", f"the {type(f).__name__} object transformed")
            self.follow(f, what, False, frozenset(), 0)

    # -- functions: their cells, globals and defaults

    def function(self, fn: types.FunctionType, swappable: bool, depth: int, fname: str) -> None:
        if (id(fn), swappable) in self.seen or depth > MAX_DEPTH:
            return
        self.seen.add((id(fn), swappable))
        code = fn.__code__
        glob, attrs = _names(code)
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:  # not yet assigned
                continue
            self.found(
                v,
                name,
                f"a variable of the scope enclosing {fname}()",
                swappable,
                cell,
                None,
                attrs,
                depth,
                lambda c=cell: c.cell_contents,
            )
        g = fn.__globals__
        module = g.get("__name__", "?")
        for name in glob:
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
    ) -> None:
        kind = _kind(v)
        if kind in ("array", "number") and id(v) in self.exclude:
            return
        if kind in ("array", "number") and swappable:
            ident = (id(holder), key)
            if ident not in self.hidden_ids:
                h = Hidden(self._unique(name), f"{name} ({place})", holder, key, get)
                self.hidden_ids[ident] = h
                self.caps.hidden.append(h)
        elif kind is not None:
            if id(v) not in self.exclude:
                self.caps.watched.append(Watched(f"{name} ({place})", get))
        else:
            self.follow(v, (name, f"through {name}, {place}"), swappable, attrs, depth)

    def follow(
        self, v: Any, what: tuple[str, str], swappable: bool, attrs: frozenset[str], depth: int
    ) -> None:
        """Look inside what ``f`` reads: helper functions, methods, objects, containers.

        ``what``: (the expression that reaches ``v``, where it starts), for messages.
        """
        expr, place = what
        if isinstance(v, types.FunctionType):
            if not _is_library(v):
                self.function(v, swappable, depth + 1, v.__name__)
        elif isinstance(v, types.MethodType):
            self.follow(v.__func__, what, False, attrs, depth)
            if isinstance(v.__func__, types.FunctionType):
                attrs = attrs | _names(v.__func__.__code__)[1]
            self.other(v.__self__, attrs, what, depth)
        elif isinstance(v, functools.partial):
            self.follow(v.func, what, False, attrs, depth)
            for k, a in enumerate(v.args):
                self.leaf(a, (f"{expr}.args[{k}]", place), lambda p=v, k=k: p.args[k])
            for k, a in v.keywords.items():
                self.leaf(a, (f"{expr}.keywords[{k!r}]", place), lambda p=v, k=k: p.keywords[k])
        elif isinstance(v, types.ModuleType):
            d = vars(v)
            for name in attrs:
                if name in d:
                    self.leaf(d[name], (f"{expr}.{name}", place), lambda d=d, n=name: d[n])
        else:
            self.other(v, attrs, what, depth)

    def other(
        self, obj: Any, attrs: frozenset[str] | set[str], what: tuple[str, str], depth: int
    ) -> None:
        """An object: its attributes that ``f`` names, its methods, a container's items,
        a transform's function (all watched: they cannot be swapped)."""
        expr, place = what
        if (id(obj), False) in self.seen or depth > MAX_DEPTH or isinstance(obj, type):
            return
        self.seen.add((id(obj), False))
        inner = getattr(obj, "fun", None)  # another transform (ad.grad(g) ...)
        if callable(inner) and type(obj).__module__.startswith("adcompile"):
            self.follow(inner, what, False, attrs, depth + 1)
            return
        if isinstance(obj, (list, tuple)) and len(obj) <= MAX_CONTAINER:
            for k, a in enumerate(obj):
                self.leaf(a, (f"{expr}[{k}]", place), lambda o=obj, k=k: o[k])
            return
        if isinstance(obj, dict) and len(obj) <= MAX_CONTAINER:
            for k, a in obj.items():
                self.leaf(a, (f"{expr}[{k!r}]", place), lambda o=obj, k=k: o[k])
            return
        if type(obj).__module__.split(".")[0] in _LIBRARY_MODULES:
            return
        call = type(obj).__call__ if callable(obj) else None
        if isinstance(call, types.FunctionType):
            self.function(call, False, depth + 1, f"{type(obj).__name__}.__call__")
            attrs = attrs | _names(call.__code__)[1]
        d = getattr(obj, "__dict__", None)
        for name in attrs:
            if isinstance(d, dict) and name in d:
                self.leaf(d[name], (f"{expr}.{name}", place), lambda o=obj, n=name: getattr(o, n))
            method = getattr(type(obj), name, None)
            if isinstance(method, types.FunctionType) and not _is_library(method):
                self.function(method, False, depth + 1, f"{type(obj).__name__}.{name}")

    def leaf(self, v: Any, what: tuple[str, str], get: Callable[[], Any]) -> None:
        """A value reached through an attribute or container: watched if it matters."""
        if _kind(v) is not None and id(v) not in self.exclude:
            self.caps.watched.append(Watched(f"{what[0]} ({what[1]})", get))
        elif isinstance(v, (list, tuple, dict)) and (id(v), False) not in self.seen:
            self.other(v, set(), what, MAX_DEPTH)

    def _unique(self, name: str) -> str:
        base, k = name, 2
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name


class _Rebinder:
    """Copies of functions whose cells, globals and defaults hold other values.

    A function is copied when it, or a function it reaches through its cells
    and globals, reads a hidden input; the copies share one copy of each
    module's globals, so helpers call each other's copies.
    """

    def __init__(self, hidden: Sequence[Hidden], values: Sequence[Any]) -> None:
        self.subs: dict[tuple[int, Any], Any] = {
            (id(h.holder), h.key): v for h, v in zip(hidden, values)
        }
        self.done: dict[int, Any] = {}
        self.globals: dict[int, dict] = {}
        self.memo: dict[int, bool] = {}

    def needed(self, fn: types.FunctionType) -> bool:
        """Whether ``fn`` or a function it reaches reads a hidden input."""
        found = self.memo.get(id(fn))
        if found is not None:
            return found
        self.memo[id(fn)] = False  # (recursion: assume not, until found)
        subs, g = self.subs, fn.__globals__
        found = any(
            (id(fn), ("pos", k)) in subs for k in range(len(fn.__defaults__ or ()))
        ) or any((id(fn), ("kw", k)) in subs for k in fn.__kwdefaults__ or {})
        for cell in fn.__closure__ or ():
            if found:
                break
            if (id(cell), None) in subs:
                found = True
                break
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            found = isinstance(v, types.FunctionType) and self.needed(v)
        for name in _names(fn.__code__)[0]:
            if found:
                break
            if (id(g), name) in subs:
                found = True
            elif isinstance(g.get(name), types.FunctionType):
                found = self.needed(g[name])
        self.memo[id(fn)] = found
        return found

    def method(self, f: Any) -> Any:
        """``f`` (a function or a bound method) reading the substituted values."""
        if isinstance(f, types.MethodType):
            return types.MethodType(self.function(f.__func__), f.__self__)
        return self.function(f)

    def function(self, fn: Any) -> Any:
        if not isinstance(fn, types.FunctionType) or not self.needed(fn):
            return fn
        if id(fn) in self.done:
            return self.done[id(fn)]
        g, fresh = self._globals(fn.__globals__)
        later: list[tuple[types.CellType, Any]] = []  # cells filled once ``new`` is known
        cells = None
        if fn.__closure__ is not None:
            cells = tuple(self._cell(c, later) for c in fn.__closure__)
        defaults = fn.__defaults__ and tuple(
            self.subs.get((id(fn), ("pos", k)), v) for k, v in enumerate(fn.__defaults__)
        )
        new = types.FunctionType(fn.__code__, g, fn.__name__, defaults, cells)
        if fn.__kwdefaults__:
            new.__kwdefaults__ = {
                k: self.subs.get((id(fn), ("kw", k)), v) for k, v in fn.__kwdefaults__.items()
            }
        new.__qualname__ = fn.__qualname__
        new.__dict__.update(fn.__dict__)
        self.done[id(fn)] = new
        for cell, inner in later:
            cell.cell_contents = self.function(inner)
        if fresh:  # the module's helpers, now that this function is registered
            for name, v in fn.__globals__.items():
                if isinstance(v, types.FunctionType) and self.needed(v):
                    g[name] = self.function(v)
        return new

    def _cell(self, cell: types.CellType, later: list) -> types.CellType:
        if (id(cell), None) in self.subs:
            return types.CellType(self.subs[(id(cell), None)])
        try:
            v = cell.cell_contents
        except ValueError:  # not assigned yet: keep the user's cell
            return cell
        if isinstance(v, types.FunctionType) and self.needed(v):
            new = types.CellType()
            later.append((new, v))
            return new
        return cell

    def _globals(self, g: dict) -> tuple[dict, bool]:
        """(``g`` with the hidden inputs substituted, whether it is new), or (``g``, False)."""
        if id(g) in self.globals:
            return self.globals[id(g)], False
        names = [n for n in g if (id(g), n) in self.subs]
        helpers = any(isinstance(v, types.FunctionType) and self.needed(v) for v in g.values())
        if not names and not helpers:
            return g, False
        new = self.globals[id(g)] = dict(g)
        for name in names:
            new[name] = self.subs[(id(g), name)]
        return new, True
