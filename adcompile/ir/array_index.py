"""The array ops that index: ``getitem``, its adjoint ``scatter_add``, ``setitem``
(a functional update), and the two whose rules slice, ``concatenate`` and
``cumsum``.

Made as ``array_ops`` makes its ops (one per parameter set, every rule in one
place). An index is a tuple of ints, slices, None, Ellipsis and constant
integer or boolean arrays; its arrays are the op's ``constants``, named after
their bytes. A batching rule indexes past the points' axis (``x[:, index]``);
where an index's arrays stand apart (NumPy then moves their axes first) it has
none, and the program runs point by point.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .array_ops import (
    fits_into,
    lift,
    linear,
    point_shape,
    points,
    spread,
    unbroadcast,
    where,
    zero_of,
)
from .array_values import added_at, basic, updated
from .arrays import CACHE, ArrayOp, LoopForm, NotBatched, Shape, shape_of
from .loop_forms import cumsum_statement, gathered, getitem_form, scatter_statement, slice_text


def concatenate(axis: int, n: int) -> ArrayOp:
    """``np.concatenate`` of ``n`` arrays along ``axis`` (non-negative)."""

    def part(k: int) -> Callable:
        def rule(g: Any, out: Any, *xs: Any) -> Any:
            start = sum(shape_of(x)[axis] for x in xs[:k])
            stop = start + shape_of(xs[k])[axis]
            return getitem((slice(None),) * axis + (slice(start, stop),))(g)

        return rule

    def shape(*shapes: Shape) -> Shape:
        first = shapes[0]
        for s in shapes:
            if len(s) != len(first) or any(
                a != b for j, (a, b) in enumerate(zip(s, first)) if j != axis
            ):
                raise ValueError(
                    "all the input array dimensions except for the concatenation axis "
                    f"must match exactly, but shapes are {', '.join(map(str, shapes))}"
                )
        return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1 :]

    operands = ", ".join(f"{{{k}}}" for k in range(n))
    return CACHE.get(
        ("concatenate", axis, n),
        lambda: ArrayOp(
            f"concatenate[{axis},{n}]",
            n,
            lambda *xs: np.concatenate(xs, axis=axis),
            f"np.concatenate(({operands},), axis={axis})",
            tuple(part(k) for k in range(n)),
            shape,
            loop=LoopForm(
                statement=f"{{name}} = np.concatenate(({operands},), axis={axis})",
                fits=lambda *shapes: all(shapes),
            ),
            jvp=lambda ts, out, *xs: concatenate(axis, n)(*map(zero_of, ts, xs)),
            batch=lambda args, mapped: concatenate(axis + 1, n)(
                *(a if m else spread(a, points(args, mapped)) for a, m in zip(args, mapped))
            ),
        ),
    )


def cumsum(axis: int) -> ArrayOp:
    def rule(g: Any, out: Any, x: Any) -> Any:
        flip = getitem((slice(None),) * axis + (slice(None, None, -1),))
        return flip(cumsum(axis)(flip(g)))

    return CACHE.get(
        ("cumsum", axis),
        lambda: ArrayOp(
            f"cumsum[{axis}]",
            1,
            lambda x: np.cumsum(x, axis=axis),
            f"np.cumsum({{0}}, axis={axis})",
            (rule,),
            lambda s: s,
            loop=LoopForm(statement=cumsum_statement(axis)),
            jvp=linear(lambda: cumsum(axis)),
            batch=lambda args, mapped: cumsum(axis + 1)(args[0]),
        ),
    )


# ---------------------------------------------------------------- indexing


def _index_key(index: tuple) -> tuple:
    """A hashable, exact form of a normalised index (arrays by their bytes)."""
    key = []
    for item in index:
        if isinstance(item, np.ndarray):
            key.append(("a", item.dtype.str, item.shape, hashlib.sha1(item.tobytes()).hexdigest()))
        elif isinstance(item, slice):
            key.append(("s", item.start, item.stop, item.step))
        else:
            key.append(item)
    return tuple(key)


def index_text(index: tuple, names: dict[int, str]) -> str:
    """An index as Python writes it (``1:, None, k3``); arrays by their names."""
    parts = []
    for k, item in enumerate(index):
        if isinstance(item, slice):
            parts.append(slice_text(item))
        elif item is None:
            parts.append("None")
        elif item is Ellipsis:
            parts.append("...")
        elif isinstance(item, np.ndarray):
            parts.append(names[k])
        else:
            parts.append(str(item))
    if not parts:
        return "()"  # (a 0-d array's one element)
    return ", ".join(parts) if len(parts) != 1 else parts[0] + ","


def batched_index(index: tuple) -> tuple:
    """``index`` past a first axis of points (``x[:, index]``); NotBatched where its
    arrays (and the ints among them) stand apart, as NumPy then moves their axes
    before the points'."""
    arrays = any(isinstance(i, np.ndarray) for i in index)
    advanced = (np.ndarray, int) if arrays else np.ndarray  # (ints too, beside arrays)
    at = [k for k, i in enumerate(index) if isinstance(i, advanced)]
    if at and at[-1] - at[0] + 1 != len(at):
        raise NotBatched("an index whose arrays stand apart (NumPy moves their axes first)")
    return (slice(None), *index)


def _index_op(kind: str, index: tuple, extra: Any, make: Callable[..., ArrayOp]) -> ArrayOp:
    key = _index_key(index)
    names = {  # (one per place: two arrays of one content are two names)
        k: f"i{hashlib.sha1(repr((k, key[k])).encode()).hexdigest()[:6]}"
        for k, item in enumerate(index)
        if isinstance(item, np.ndarray)
    }
    text = index_text(index, names)
    constants = {names[k]: index[k] for k in names}
    return CACHE.get((kind, key, extra), lambda: make(text, constants))


def getitem(index: tuple) -> ArrayOp:
    """``x[index]``: ``index`` a tuple of ints, slices, None, Ellipsis and constant
    integer or boolean arrays."""

    def make(text: str, constants: dict) -> ArrayOp:
        return ArrayOp(
            f"getitem[{text}]",
            1,
            lambda x: np.asarray(x)[index],
            f"{{0}}[{text}]",
            (lambda g, out, x: scatter_add(index, shape_of(x))(g),),
            lambda s: _indexed_shape(s, index),
            constants=constants,
            loop=getitem_form(index, text, list(constants)),
            index=index,
            remake=getitem,
            jvp=linear(lambda: getitem(index)),
            batch=lambda args, mapped: getitem(batched_index(index))(args[0]),
        )

    return _index_op("getitem", index, None, make)


def _settable(index: tuple) -> bool:
    """Whether Numba writes ``z[index] = v`` as NumPy does: ints and slices only (an
    int may be the text of one in loop code)."""
    return all(isinstance(i, (int, np.integer, slice, str)) for i in index)


def _indexed_shape(shape: Shape, index: tuple) -> Shape:
    """The shape of ``x[index]`` for ``x`` of ``shape`` (NumPy's rule, on a view of no
    memory; IndexError as NumPy's)."""
    at = tuple(0 if isinstance(i, str) else i for i in index)  # (a scan's step: in range)
    return np.broadcast_to(np.bool_(False), shape)[at].shape


def scatter_add(index: tuple, shape: Shape) -> ArrayOp:
    """An array of ``shape``, zero but where ``x[index]`` is: there it adds ``g``
    (``getitem``'s adjoint; repeated indices add up)."""
    shape = tuple(shape)

    def make(text: str, constants: dict) -> ArrayOp:
        return ArrayOp(
            f"scatter_add[{shape}][{text}]",
            1,
            lambda g: added_at(g, shape, index),
            f"added_at({{0}}, {shape!r}, np.s_[{text}])",
            (lambda g, out, x: getitem(index)(g),),
            lambda s: shape,
            constants={**constants, "added_at": added_at},
            loop=_scatter_form(index, text, list(constants), shape),
            jvp=linear(lambda: scatter_add(index, shape)),
            index=index,
            remake=lambda at: scatter_add(at, shape),
            batch=lambda args, mapped: scatter_add(
                batched_index(index), (shape_of(args[0])[0], *shape)
            )(args[0]),
        )

    return _index_op("scatter_add", index, shape, make)


def _scatter_form(index: tuple, text: str, names: list[str], shape: Shape) -> LoopForm | None:
    """``scatter_add``'s loop form: zeros, then ``g`` written where a basic index
    reads; for an index of arrays (``gathered``), each row added in a loop."""
    if basic(index):
        return LoopForm(
            statement=f"{{name}} = np.zeros({shape!r})\n{{name}}[{text}] = {{0}}",
            fits=lambda s: _settable(index),
        )
    found = gathered(index, names)
    if found is None:
        return None
    items, consts = found
    return LoopForm(statement=scatter_statement(items, shape), consts=consts)


def setitem(index: tuple) -> ArrayOp:
    """``x`` with ``x[index] = v`` (a functional update: a new array)."""

    def make(text: str, constants: dict) -> ArrayOp:
        return ArrayOp(
            f"setitem[{text}]",
            2,
            lambda x, v: updated(x, index, v),
            f"updated({{0}}, np.s_[{text}], {{1}})",
            (
                lambda g, out, x, v: setitem(index)(g, 0.0),
                lambda g, out, x, v: unbroadcast(
                    _kept_writes(getitem(index)(g), x, index), shape_of(v)
                ),
            ),
            lambda sx, sv: fits_into(sv, _indexed_shape(sx, index)) and sx,
            constants={**constants, "updated": updated},
            loop=_setitem_form(index, text, list(constants)),
            index=index,
            remake=setitem,
            jvp=lambda ts, out, x, v: setitem(index)(
                zero_of(ts[0], x), 0.0 if ts[1] is None else ts[1]
            ),
            batch=lambda args, mapped: _batch_setitem(index, args, mapped),
        )

    return _index_op("setitem", index, None, make)


def _setitem_form(index: tuple, text: str, names: list[str]) -> LoopForm | None:
    """``setitem``'s loop form: a copy, then ``v`` written where a basic index reads;
    for an index of arrays (``gathered``), each row in order, a loop."""
    if basic(index):
        return LoopForm(
            statement=f"{{name}} = {{0}}.copy()\n{{name}}[{text}] = {{1}}",
            fits=lambda sx, sv: _settable(index) and sv in ((), _indexed_shape(sx, index)),
        )
    found = gathered(index, names)
    if found is None:
        return None
    items, consts = found
    return LoopForm(
        statement_of=lambda sx, sv: scatter_statement(items, sx, write=True, scalar=not sv),
        fits=lambda sx, sv: sv in ((), _indexed_shape(sx, index)),
        consts=consts,
    )


def _kept_writes(g: Any, x: Any, index: tuple) -> Any:
    """``g`` (of ``x[index]``'s shape) where ``x[index] = v`` keeps what it writes: where
    an index repeats an element, NumPy keeps the last write to it, and the others
    take no gradient."""
    if basic(index):
        return g
    shape = shape_of(x)
    ids = np.arange(math.prod(shape)).reshape(shape)[index]
    if np.unique(ids).size == ids.size:
        return g
    order = np.arange(ids.size).reshape(ids.shape)
    kept = np.full(math.prod(shape), -1)
    kept.reshape(shape)[index] = order  # (what NumPy's assignment keeps, asked of NumPy)
    return where()(kept[ids] == order, g, 0.0)


def _batch_setitem(index: tuple, args: Sequence[Any], mapped: Sequence[bool]) -> Any:
    """``x[:, index] = v`` at every point: ``x`` spread where it is the same at every
    point, a mapped ``v`` lifted to the rank of what it is written into."""
    (x, v), (mx, mv) = args, mapped
    n = points(args, mapped)
    into = _indexed_shape(point_shape(x, mx), index)
    return setitem(batched_index(index))(
        x if mx else spread(x, n), lift(v, len(into)) if mv else v
    )
