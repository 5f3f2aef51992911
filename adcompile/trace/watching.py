"""Values a compiled function depends on, checked at every call (``captures``
finds them): :class:`Watched` is one, :class:`Checker` checks them all with
one generated function.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import loader


@dataclass
class Watched:
    """A value the trace depends on, checked at each call against what it was.

    ``expr`` reads it from the roots the scan started at (a function's globals
    or cells, an object), so a container or object replaced on the way is seen
    too. ``how``: "value" (numbers, strings: equal and of the same type),
    "array" (shape, dtype and bytes), "identity" (functions, objects, Values:
    the same object), "length" (a container's ``len``), "items" (a long
    container's items, each the same object), "keys" (a dict's keys, in order),
    "copy" (a set, deque or bytearray: equal to a copy), "subarray" (an ndarray
    subclass, ``np.matrix`` or a masked array: its type, shape, dtype, bytes, mask).
    ``parameter``: the Value is one of a compiled loss's parameters (an input
    already), checked by identity.
    """

    what: str
    expr: str
    how: str
    get: Callable[[], Any] = field(repr=False, default=lambda: None)
    obj: Any = None
    copy: Any = None
    parameter: bool = False

    def snapshot(self) -> None:
        """Keep the current value (and a copy of an array's contents)."""
        try:
            self.obj = self.get()
        except Exception:  # gone: any later value counts as a change
            self.obj, self.copy = MISSING, None
            return
        try:
            self.copy = _contents(self.obj, self.how)
        except Exception:  # (of another kind now, ``lin.bias = None``: by identity)
            self.how, self.copy = "identity", self.obj

    def changed(self) -> bool:
        """Whether the value differs from the one kept (an equal new number is none)."""
        try:
            now = self.get()
        except Exception:
            return self.obj is not MISSING
        if self.obj is MISSING:
            return True
        return not _matches(now, self.copy, self.how)


MISSING = object()


def _items(v: Any) -> tuple:
    """A container's items (a dict's keys and values) as ids, for an "items" watch."""
    if isinstance(v, dict):
        return tuple(map(id, v)) + tuple(map(id, v.values()))
    if isinstance(v, np.ndarray):
        return (v.shape, *map(id, v.ravel()))
    return tuple(map(id, v))


def _sub(v: Any) -> tuple:
    """What a "subarray" watch compares: type, shape, dtype, bytes and mask."""
    mask = np.ma.getmaskarray(v).tobytes() if isinstance(v, np.ma.MaskedArray) else None
    return (type(v), v.shape, v.dtype, np.asarray(v).tobytes(), mask)


def _copied(v: Any) -> Any:
    """What a "copy" watch compares with: a copy (a memoryview's bytes; a mapping that
    is no dict, such as a ChainMap or ``os.environ``, as a dict: its copy would share
    its maps)."""
    if isinstance(v, memoryview):
        return v.tobytes()
    if isinstance(v, Mapping) and not isinstance(v, dict):
        return dict(v)
    return copy.copy(v)


def _contents(v: Any, how: str) -> Any:
    if how == "items":
        # (the items kept alive, so that their ids stay theirs)
        if isinstance(v, np.ndarray):
            return (tuple(v.ravel()), _items(v))
        return (tuple(v.items()) if isinstance(v, dict) else tuple(v), _items(v))
    if how == "array":
        return (v.shape, v.dtype, v.tobytes()) if type(v) is np.ndarray else MISSING
    if how == "length":
        return len(v)
    if how == "keys":
        return tuple(v)
    if how == "identity":
        return v
    if how == "copy":
        return (type(v), _copied(v))
    if how == "subarray":
        return _sub(v) if isinstance(v, np.ndarray) else MISSING
    return (type(v), v)


def _matches(now: Any, copy: Any, how: str) -> bool:
    """Whether ``now`` is what ``copy`` was taken of (see :class:`Watched`); False
    where it cannot be compared (``lin.bias = None`` where an array of Values was)."""
    try:
        return _compare(now, copy, how)
    except Exception:
        return False


def _compare(now: Any, copy: Any, how: str) -> bool:
    if how == "identity":
        return now is copy
    if how == "items":
        return _items(now) == copy[1]
    if how == "length":
        return len(now) == copy
    if how == "keys":
        return tuple(now) == copy
    if how == "subarray":
        return isinstance(now, np.ndarray) and _sub(now) == copy
    if how == "array":
        return (
            type(now) is np.ndarray
            and (now.shape, now.dtype) == copy[:2]
            and now.tobytes() == copy[2]
        )
    t, v = copy
    try:
        return type(now) is t and bool(now == v or (now != now and v != v))
    except Exception:
        return False


class Checker:
    """One generated function that checks every watched value, in order (about
    50 ns a value): the index of the first that changed, -1 if none, -2 if one
    could not be read (then :meth:`Captures.changed` looks again, one by one).

    A path through an object checked by identity starts from the kept object
    (``_c0.scale``, not ``_r0['cfg'].scale``): the check before it made sure
    they are the same.
    """

    def __init__(self, watched: Sequence[Watched], ns: dict[str, Any]) -> None:
        self.ns = dict(ns)
        lines = ["    try:"]
        known: list[tuple[str, str]] = []  # (expression, the kept object's name)
        for k, w in enumerate(watched):
            expr = w.expr
            for prefix, name in known:
                if expr.startswith(prefix) and expr[len(prefix) : len(prefix) + 1] in (".", "["):
                    expr = name + expr[len(prefix) :]
                    break
            lines.append(f"        _v = {expr}")
            if w.how == "identity":
                test = f"_v is not _c{k}"
                known.insert(0, (w.expr, f"_c{k}"))  # (longest paths first)
            elif w.how == "length":
                test = f"len(_v) != _c{k}"
            elif w.how == "items":
                test = f"_items(_v) != _c{k}"
            elif w.how == "keys":
                test = f"tuple(_v) != _c{k}"
            elif w.how == "subarray":
                test = f"_sub(_v) != _c{k}"
            elif w.how == "array":
                test = (
                    f"type(_v) is not _nd or _v.shape != _s{k} or _v.dtype != _d{k} "
                    f"or _v.tobytes() != _c{k}"
                )
            elif type(w.obj) is float:  # equal, or both nan (an equal int computes the same)
                test = f"_v != _c{k} and (_v == _v or _c{k} == _c{k})"
            else:  # equal and of the same type (an int steers range() as a float cannot)
                test = f"_v != _c{k} or type(_v) is not _t{k}"
            lines.append(f"        if {test}:")
            lines.append(f"            return {k}")
        lines += ["    except Exception:", "        return -2", "    return -1"]
        # the kept values are the function's defaults (fast locals), set by keep()
        self.params = sorted(
            {m for line in lines for m in re.findall(r"\b_[ctsd]\d+\b", line)},
            key=lambda m: (int(m[2:]), m[1]),
        )
        head = f"def changed({', '.join(p + '=None' for p in self.params)}):"
        self.source = head + "\n" + "\n".join(lines) + "\n"
        self.ns["_nd"], self.ns["_items"], self.ns["_sub"] = np.ndarray, _items, _sub
        self.changed: Callable[[], int] = loader.load(self.source, "watched", self.ns).changed
        self.watched = list(watched)

    def keep(self) -> None:
        """Take each watched value's kept copy as the one to compare with."""
        ns: dict[str, Any] = {}
        for k, w in enumerate(self.watched):
            c = w.copy
            if w.obj is MISSING:
                ns[f"_c{k}"], ns[f"_t{k}"], ns[f"_s{k}"], ns[f"_d{k}"] = MISSING, None, None, None
            elif w.how == "array":
                ns[f"_s{k}"], ns[f"_d{k}"], ns[f"_c{k}"] = c if c is not MISSING else (None,) * 3
            elif w.how in ("identity", "length", "keys", "subarray"):
                ns[f"_c{k}"] = c
            elif w.how == "items":
                ns[f"_c{k}"] = c[1]
            else:
                ns[f"_t{k}"], ns[f"_c{k}"] = c
        self.changed.__defaults__ = tuple(ns.get(p) for p in self.params)
