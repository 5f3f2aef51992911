"""Copies of a function whose closure cells, globals and defaults hold other
values: how ``captures`` traces a function with tracing values in place of the
data it reads from outside its arguments (its hidden inputs).
"""

from __future__ import annotations

import dis
import functools
import types
from collections.abc import Sequence
from typing import Any

#: In a set of attribute names: the code reads attributes by names made at run time.
ANY_ATTRIBUTE = "*"


@functools.lru_cache(maxsize=512)
def names_read(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """(global names, attribute names) that ``code`` and the code nested in it read.

    Strings among its constants count as both (``getattr(cfg, "scale")``,
    ``globals()["G"]``): more names than read only cost a check.
    """
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
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                stack.append(k)
            elif isinstance(k, str) and k.isidentifier():
                glob.add(k)
                attr.add(k)
    if "modules" in attr:  # (sys.modules[__name__].X: a global read as an attribute)
        glob |= attr
    if glob & {"getattr", "vars"} or "__dict__" in attr:
        attr.add(ANY_ATTRIBUTE)  # names made at run time: every attribute counts
    return frozenset(glob), frozenset(attr)


class Rebinder:
    """Copies of functions whose cells, globals and defaults hold other values.

    A function is copied when it, or a function it reaches through its cells
    and globals, reads a hidden input; the copies share one copy of each
    module's globals, so helpers call each other's copies.
    """

    def __init__(self, hidden: Sequence[Any], values: Sequence[Any]) -> None:
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
        for name in names_read(fn.__code__)[0]:
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
