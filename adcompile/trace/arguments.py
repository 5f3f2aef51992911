"""Arguments as the compiled code takes them: pytrees flattened, statics set apart.

A transform's compiled code takes numbers and float64 arrays. Users also pass,
as to JAX:

- tuples, lists and dicts of numbers and arrays, nested (pytrees): flattened to
  their leaves, in order (a dict's in its own key order); the gradient has the
  argument's structure. A list or tuple holding only numbers (nested or not) is
  an array, as ``np.asarray`` makes it, and its gradient an ``ndarray`` (but a
  namedtuple, whose fields ``f`` reads by name, is a tree);
- arrays of another float dtype (float32): computed in float64, the gradient
  given back in the argument's dtype;
- static arguments (``static_argnums``): hashable values that are part of the
  specialisation (a new value traces again), never inputs;
- integer and boolean arrays that are not differentiated (labels, indexes):
  static too, by their contents (:class:`IntData`), so ``f`` reads them as they
  are (``logp[np.arange(n), labels]``).

``plan`` says how one call's arguments map to leaves; ``Plan.regroup`` puts a
result over leaves back into the arguments' structure.
"""

from __future__ import annotations

import hashlib
import inspect
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .value import Value

F64 = np.dtype(np.float64)

#: A leaf: a number or an array (its place in the tree is the tree definition's).
LEAF = "*"


def _numbers_only(a: Any) -> bool:
    """Whether a list or tuple holds only numbers, at any depth (then it is an array)."""
    for e in a:
        if isinstance(e, (list, tuple)):
            if not _numbers_only(e):
                return False
        elif isinstance(e, bool) or not isinstance(e, numbers.Real):
            return False
    return True


class IntData:
    """An integer or boolean array argument that is not differentiated, as a static
    argument: hashed and compared by its dtype, shape and bytes (a copy: the
    caller's array may change), and given to ``f`` as the array it is."""

    __slots__ = ("array", "_key")

    def __init__(self, a: np.ndarray) -> None:
        self.array = np.array(a)
        self.array.setflags(write=False)
        digest = hashlib.sha1(self.array.tobytes()).hexdigest()
        self._key = (self.array.dtype.str, self.array.shape, digest)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntData) and other._key == self._key

    def __repr__(self) -> str:
        return f"IntData({self.array.dtype}{list(self.array.shape)})"


def int_data(a: Any) -> bool:
    """Whether ``a`` is an integer or boolean array (data, when not differentiated)."""
    return type(a) is np.ndarray and a.dtype.kind in "biu"


def is_tree(a: Any) -> bool:
    """Whether argument ``a`` is a container of arrays and numbers (not itself one)."""
    t = type(a)
    if t is dict or (isinstance(a, tuple) and hasattr(t, "_fields")):
        return True  # (a namedtuple of numbers too: f reads its fields by name)
    if t is list or isinstance(a, tuple):
        return not _numbers_only(a)
    return False


def narrow(a: Any) -> bool:
    """Whether ``a`` is a float of another dtype than float64 (float32 ...)."""
    if type(a) is np.ndarray:
        return a.dtype.kind == "f" and a.dtype != F64
    return isinstance(a, np.floating) and not isinstance(a, float)


def flatten(a: Any, path: str, leaves: list[Any], paths: list[str]) -> Any:
    """``a``'s tree definition (hashable); its leaves appended to ``leaves`` and
    where they are (``"[0]['w']"`` after ``path``) to ``paths``."""
    t = type(a)
    if t is dict:
        keys = tuple(a)
        kids = tuple(flatten(a[k], f"{path}[{k!r}]", leaves, paths) for k in keys)
        return ("dict", keys, kids)
    if (t is list or isinstance(a, tuple)) and (hasattr(t, "_fields") or not _numbers_only(a)):
        kids = tuple(flatten(e, f"{path}[{k}]", leaves, paths) for k, e in enumerate(a))
        return (t, kids)
    if a is None:
        return None
    if isinstance(a, (np.ndarray, list, tuple, numbers.Real)) and not isinstance(a, bool):
        leaves.append(a)
        paths.append(path)
        return LEAF
    raise TypeError(
        f"{path} is a {t.__name__}; pass numbers and arrays of floats (in tuples, lists "
        "and dicts), or name the argument in static_argnums"
    )


def flatten_arg(a: Any, what: str, leaves: list[Any], paths: list[str]) -> Any:
    """``flatten`` of argument ``a``, called ``what`` in errors."""
    try:
        return flatten(a, "", leaves, paths)
    except TypeError as e:
        text = str(e)
        where = text[: text.index(" is a ")]
        at = f", at {where}," if where else ""
        raise TypeError(f"{what}{at}" + text[len(where) :]) from None


def unflatten(tree: Any, leaves: Any) -> Any:
    """The structure ``tree`` with the next leaves of iterator ``leaves`` in it."""
    if tree is None:
        return None
    if tree == LEAF:
        return next(leaves)
    if tree[0] == "dict":
        return {k: unflatten(kid, leaves) for k, kid in zip(tree[1], tree[2])}
    t, kids = tree
    items = [unflatten(kid, leaves) for kid in kids]
    if t is list:
        return items
    if t is tuple:
        return tuple(items)
    return t(*items) if hasattr(t, "_fields") else t(items)  # namedtuple or other tuple


def cast_like(g: Any, a: Any) -> Any:
    """Gradient ``g`` of leaf ``a`` in ``a``'s float dtype (float32 in, float32 out)."""
    if narrow(a):
        return np.asarray(g).astype(a.dtype) if isinstance(a, np.ndarray) else type(a)(g)
    return g


@dataclass(frozen=True)
class Plan:
    """How one call's arguments become the leaves the compiled code takes."""

    signature: tuple  # what a transform over the leaves is made for (hashable)
    leaves: list[Any]  # the call's leaves, in order
    names: list[str]  # a name per leaf (for generated code)
    trees: list[Any]  # per dynamic argument: its tree definition (LEAF for a plain one)
    starts: list[int]  # per dynamic argument: its first leaf
    dynamic: list[int]  # the positions of the dynamic arguments in the call
    statics: dict[int, Any]  # position -> value of each static argument

    def _leaves_of(self, p: int) -> range:
        """The leaves of the argument at position ``p`` of the call."""
        k = self.dynamic.index(p)
        end = self.starts[k + 1] if k + 1 < len(self.starts) else len(self.leaves)
        return range(self.starts[k], end)

    def leaf_argnums(self, wrt: Sequence[int]) -> tuple[int, ...]:
        """The leaves of the differentiated arguments (positions in the call)."""
        return tuple(j for p in wrt for j in self._leaves_of(p))

    def regroup(self, result: Any, mode: str, wrt: Sequence[int], many: bool) -> Any:
        """A result over leaves (``argnums`` = ``leaf_argnums(wrt)``, a tuple) as the
        transform of the original arguments returns it."""
        if mode == "jit":
            return result
        value, grads = result if mode == "value_and_grad" else (None, result)
        it = iter(grads)
        shaped = []
        for p in wrt:
            mine = [cast_like(next(it), self.leaves[j]) for j in self._leaves_of(p)]
            shaped.append(unflatten(self.trees[self.dynamic.index(p)], iter(mine)))
        g = tuple(shaped) if many else shaped[0]
        return g if mode == "grad" else (value, g)

    def cast(self, result: Any, mode: str, wrt: Sequence[int], many: bool) -> Any:
        """A result of the arguments themselves (no pytree) with each gradient in its
        argument's float dtype."""
        if mode == "jit":
            return result
        value, grads = result if mode == "value_and_grad" else (None, result)
        if many:
            grads = tuple(cast_like(g, self.leaves[p]) for g, p in zip(grads, wrt))
        else:
            grads = cast_like(grads, self.leaves[wrt[0]])
        return grads if mode == "grad" else (value, grads)


def plan(fname: str, args: Sequence[Any], names: Sequence[str], static: Sequence[int]) -> Plan:
    """The leaves of a call's arguments; ``static`` are the static positions (>= 0)."""
    leaves: list[Any] = []
    leaf_names: list[str] = []
    trees, starts, dynamic, statics = [], [], [], {}
    for p, a in enumerate(args):
        if p in static:
            try:
                hash(a)
            except TypeError:
                raise TypeError(
                    f"argument {p} of {fname}() is static (static_argnums) but a "
                    f"{type(a).__name__}, which is not hashable; pass a tuple, a number or "
                    "a string, or leave it out of static_argnums"
                ) from None
            statics[p] = a
            continue
        dynamic.append(p)
        starts.append(len(leaves))
        paths: list[str] = []
        tree = flatten_arg(a, f"argument {p} of {fname}()", leaves, paths)
        trees.append(tree)
        base = names[p] if p < len(names) else f"arg{p}"
        if tree == LEAF:
            leaf_names.append(base)
        else:
            leaf_names.extend(f"{base}_{k}" for k in range(len(paths)))
    signature = (len(args), tuple(trees), tuple(sorted(statics.items(), key=_first)))
    return Plan(signature, leaves, leaf_names, trees, starts, dynamic, statics)


def _first(item: tuple) -> int:
    return item[0]


def needs_plan(args: Sequence[Any], static: Sequence[int]) -> bool:
    """Whether a call needs a ``Plan`` (static arguments, pytrees, float32 ...)."""
    if static:
        return True
    for a in args:
        t = type(a)
        if t is float or (t is np.ndarray and a.dtype is F64):
            continue
        if is_tree(a) or narrow(a) or int_data(a):
            return True
    return False


def rebuild(trees: tuple, statics: dict[int, Any], leaves: Sequence[Any]) -> list[Any]:
    """A call's arguments from its dynamic arguments' ``trees``, its ``statics``
    (position -> value) and ``leaves`` (Values while tracing) in order."""
    it = iter(leaves)
    args: list[Any] = []
    dyn = iter(trees)
    for p in range(len(trees) + len(statics)):
        a = statics[p] if p in statics else unflatten(next(dyn), it)
        args.append(a.array if isinstance(a, IntData) else a)
    return args


def call_on_leaves(fun: Callable, p: Plan) -> Callable:
    """``fun`` as a function of the leaves of calls planned as ``p`` (it holds the
    plan's structure, not the call's values)."""
    trees, statics = tuple(p.trees), dict(p.statics)

    def on_leaves(*leaves: Any, **kwargs: Any) -> Any:
        return fun(*rebuild(trees, statics, leaves), **kwargs)

    on_leaves.user_function = fun  # (whose module makes its arrays: ``trace.creation``)
    return on_leaves


# ------------------------------------------------------------------ names and checks


def shape_text(shape: Any) -> str:
    return "a number" if shape is None else f"shape {tuple(shape)}"


def param_names(f: Callable, n: int) -> list[str]:
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for k in range(n):
        if k < len(params) and params[k].kind in (
            params[k].POSITIONAL_ONLY,
            params[k].POSITIONAL_OR_KEYWORD,
        ):
            names.append(params[k].name)
        else:
            names.append(f"arg{k}")
    return names


def keyword_is_input(v: Any) -> bool:
    """Whether a keyword argument is an input of the compiled code (a float, an array,
    a Value), else part of the specialisation: ints are (they size ranges and
    slices, as with JAX's ``static_argnames``), as are strings, bools, None ..."""
    return isinstance(v, (Value, np.ndarray)) or (
        isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral)
    )


def argnum_positions(argnums: int | Sequence[int], nargs: int, fname: str) -> list[int]:
    """The positions ``argnums`` names among ``nargs`` positional arguments of
    ``fname()`` (negative ones counted from the end); ValueError when one does not fit."""
    nums = list(argnums) if isinstance(argnums, (tuple, list)) else [argnums]
    for k in nums:
        if not isinstance(k, int) or not -nargs <= k < nargs:
            raise ValueError(
                f"argnums={argnums!r} does not fit {fname}() called "
                f"with {nargs} positional arguments"
            )
    return [k % nargs for k in nums]
