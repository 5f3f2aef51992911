"""What a function returns, flattened for the tape and rebuilt for the user.

A traced function may return a scalar, an array, or a tuple or list of
these (nested). Its *tree* records the structure: ``None`` for one scalar,
a shape tuple for an array, and ``("tuple" | "list", [subtrees])``. The
tape holds the leaves' elements as consecutive outputs.

An :class:`OutLayout` says where each part of a transform's result lies in
the flat output array of compiled code, and how the parts nest; it rebuilds
one call's result (``unpack``) or a stack of them (``unpack_rows``, for
``vmap``).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Tree = Any  # None | tuple[int, ...] | ("tuple" | "list", list[Tree])


def _is_node(tree: Tree) -> bool:
    return type(tree) is tuple and len(tree) == 2 and tree[0] in ("tuple", "list")


def flatten_output(fname: str, out: Any, leaf: Callable[[Any], Any]) -> tuple[list[Any], Tree]:
    """The scalars ``out`` holds, in order, and its tree. ``leaf`` turns one
    element (a Value or a number) into what the tape records."""
    flat: list[Any] = []

    def walk(x: Any) -> Tree:
        if isinstance(x, (tuple, list)):
            return ("tuple" if isinstance(x, tuple) else "list", [walk(e) for e in x])
        if isinstance(x, np.ndarray):
            if x.ndim == 0:
                flat.append(_element(fname, x[()], leaf))
                return None
            flat.extend(_element(fname, e, leaf) for e in x.reshape(-1))
            return tuple(x.shape)
        flat.append(_element(fname, x, leaf))
        return None

    tree = walk(out)
    return flat, tree


def _element(fname: str, x: Any, leaf: Callable[[Any], Any]) -> Any:
    if isinstance(x, bool) or not (
        hasattr(x, "_apply") or isinstance(x, (numbers.Real, np.floating, np.integer))
    ):
        raise TypeError(
            f"{fname}() must return numbers: a scalar, an array, or a tuple or list of "
            f"them, but its result holds {type(x).__name__!r}"
        )
    return leaf(x)


def leaves(tree: Tree) -> list[tuple[int, ...] | None]:
    """The shapes of the tree's leaves in order (``None`` for a scalar)."""
    if _is_node(tree):
        return [s for sub in tree[1] for s in leaves(sub)]
    return [tree]


def size(shape: tuple[int, ...] | None) -> int:
    return 1 if shape is None else int(np.prod(shape, dtype=np.int64))


def join(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The shape ``a + b`` (a scalar's shape is empty)."""
    if a is None and b is None:
        return None
    return (*(a or ()), *(b or ()))


def map_leaves(tree: Tree, fn: Callable[[int, Any], Tree]) -> Tree:
    """The tree with leaf ``k`` (its shape ``s``) replaced by ``fn(k, s)``."""
    counter = iter(range(1 << 62))

    def walk(t: Tree) -> Tree:
        if _is_node(t):
            return (t[0], [walk(s) for s in t[1]])
        return fn(next(counter), t)

    return walk(tree)


def assemble(tree: Tree, parts: Sequence[Any]) -> Any:
    """The nested result: the tree's leaves are indices into ``parts``."""
    if _is_node(tree):
        items = [assemble(s, parts) for s in tree[1]]
        return tuple(items) if tree[0] == "tuple" else items
    return parts[tree]


def part_leaves(tree: Tree, result: Any) -> list[tuple[int, Any]]:
    """(part index, value) of every leaf of ``result``, laid out as ``tree``."""
    if _is_node(tree):
        return [p for s, r in zip(tree[1], result) for p in part_leaves(s, r)]
    return [(tree, result)]


class OutLayout:
    """Where a transform's result lies in compiled code's output array.

    ``parts[k] = (start, shape)``: part ``k`` is ``out[start]`` (shape None) or
    ``out[start:start + size].reshape(shape)``; ``tree`` nests the parts
    (its leaves are part indices).
    """

    def __init__(self, parts: list[tuple[int, tuple[int, ...] | None]], tree: Tree) -> None:
        self.parts = parts
        self.tree = tree
        self.n_out = max((s + size(sh) for s, sh in parts), default=0)

    @classmethod
    def of_tree(cls, tree: Tree, start: int = 0) -> OutLayout:
        """The layout of a traced output tree laid out from ``start``."""
        parts: list = []

        def place(k: int, shape: Any) -> int:
            begin = parts[-1][0] + size(parts[-1][1]) if parts else start
            parts.append((begin, shape))
            return k

        return cls(parts, map_leaves(tree, place))

    def unpack(self, out: np.ndarray) -> Any:
        """One call's result from its output array."""
        vals = [
            out.item(s) if sh is None else out[s : s + size(sh)].reshape(sh)
            for s, sh in self.parts
        ]
        return assemble(self.tree, vals)

    def unpack_rows(self, rows: np.ndarray) -> Any:
        """The results of many calls, one output array per row, stacked along axis 0."""
        n = rows.shape[0]
        vals = [
            rows[:, s].copy() if sh is None else rows[:, s : s + size(sh)].reshape(n, *sh)
            for s, sh in self.parts
        ]
        return assemble(self.tree, vals)
