"""The array ops: comparisons, ``where``, reductions, products, indexing, reshapes.

Each factory here makes one :class:`~adcompile.ir.arrays.ArrayOp` per parameter
set (an axis, an index, a shape), which states its shape rule, its NumPy
evaluation, its code template and its vector-Jacobian rules. The rules are
written with these same ops (and the scalar ops of ``ops``), so they evaluate
arrays and record on tracing arrays alike: the adjoint of an array program is
an array program. The few functions generated array code calls besides
NumPy's (``added_at``, ``updated``, ``prod_of_others``) are each op's
``constants``, as an index's arrays are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .array_values import added_at, basic, prod_of_others, updated
from .arrays import CACHE, ArrayOp, LoopForm, Shape, broadcast, shape_of
from .loop_forms import (
    broadcast_index,
    cumsum_statement,
    gathered,
    getitem_form,
    others_statement,
    scatter_statement,
    slice_text,
    unit_reshape,
)
from .ops import OPS

# ---------------------------------------------------------------- helpers on arrays
# Written with the ops below, so each evaluates arrays and records on tracers.


def unbroadcast(g: Any, shape: Shape) -> Any:
    """``g`` summed back to ``shape``, of which it is a broadcast (the adjoint of
    broadcasting)."""
    gs = shape_of(g)
    if gs == tuple(shape):
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + k for k, n in enumerate(shape) if n == 1 and gs[lead + k] != 1
    )
    if axes:
        g = reduce("sum", axes, False)(g)
    return g if shape_of(g) == tuple(shape) else reshape(tuple(shape))(g)


def expand_to(g: Any, shape: Shape, axes: tuple[int, ...] | None, keepdims: bool) -> Any:
    """The adjoint of reducing an array of ``shape`` over ``axes``: ``g`` put back
    in every reduced position."""
    if not keepdims:
        g = reshape(_kept(shape, axes))(g)
    return broadcast_to(tuple(shape))(g)


def _kept(shape: Shape, axes: tuple[int, ...] | None) -> Shape:
    return tuple(1 if axes is None or k in axes else n for k, n in enumerate(shape))


# ---------------------------------------------------------------- comparisons, where


COMPARE = {
    "less": "<",
    "less_equal": "<=",
    "greater": ">",
    "greater_equal": ">=",
    "equal": "==",
    "not_equal": "!=",
    "logical_and": None,
    "logical_or": None,
    "logical_xor": None,
    "logical_not": None,
    "isnan": None,
    "isinf": None,
    "isfinite": None,
    "signbit": None,
}
# one element of each, as scalar code (and loop nests) write it: operands are floats
# or booleans (a float is true where it is not 0, nan included, as NumPy's logic)
ELEMENT = {
    "logical_and": "(({0} != 0) and ({1} != 0))",
    "logical_or": "(({0} != 0) or ({1} != 0))",
    "logical_xor": "(({0} != 0) != ({1} != 0))",
    "logical_not": "({0} == 0)",
    "isnan": "math.isnan({0})",
    "isinf": "math.isinf({0})",
    "isfinite": "math.isfinite({0})",
    "signbit": "(math.copysign(1.0, {0}) < 0.0)",
}


def linear(op: Callable[[], ArrayOp]) -> Callable[..., Any]:
    """The forward rule of an op linear in its one operand: the op of the tangent
    (``op()`` gives the op: it is looked up when the rule runs)."""

    def rule(ts: Sequence[Any], out: Any, x: Any) -> Any:
        return op()(ts[0])

    return rule


def _zero(t: Any, x: Any) -> Any:
    """Tangent ``t``, or zeros of ``x``'s shape where there is none."""
    return t if t is not None else np.zeros(shape_of(x))


def boolean(name: str) -> ArrayOp:
    """An element-wise comparison or logical op (``less``, ``isnan`` ...): a boolean
    array, data that takes no gradient."""

    def make() -> ArrayOp:
        uf = getattr(np, name)
        symbol = COMPARE[name]
        code = (
            f"({{0}} {symbol} {{1}})"
            if symbol
            else f"np.{name}({', '.join(f'{{{k}}}' for k in range(uf.nin))})"
        )
        element = code if symbol else ELEMENT[name]
        return ArrayOp(
            name,
            uf.nin,
            uf,
            code,
            (None,) * uf.nin,
            broadcast,
            boolean=True,
            loop=LoopForm(element=element),
        )

    if name not in COMPARE:
        raise KeyError(name)
    return CACHE.get(("bool", name), make)


def _where_vjp(k: int) -> Callable:
    def rule(g: Any, out: Any, c: Any, a: Any, b: Any) -> Any:
        picked = where()(c, g, 0.0) if k == 1 else where()(c, 0.0, g)
        return unbroadcast(picked, shape_of(a if k == 1 else b))

    return rule


def where() -> ArrayOp:
    """``np.where(c, a, b)``: a select, with ``c`` data."""
    return CACHE.get(
        ("where",),
        lambda: ArrayOp(
            "where",
            3,
            np.where,
            "np.where({0}, {1}, {2})",
            (None, _where_vjp(1), _where_vjp(2)),
            broadcast,
            loop=LoopForm(element="({1} if {0} else {2})"),
            jvp=lambda ts, out, c, a, b: where()(
                c, 0.0 if ts[1] is None else ts[1], 0.0 if ts[2] is None else ts[2]
            ),
        ),
    )


# ---------------------------------------------------------------- reductions


def normal_axes(axis: Any, ndim: int) -> tuple[int, ...] | None:
    """``axis`` (None, an int or a tuple of them, negatives counted from the end) as
    a sorted tuple of axes, or None for all."""
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(
                f"axis {a} is out of bounds for array of dimension {ndim}"
            )
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return tuple(sorted(out))


def _reduced(axes: tuple[int, ...] | None, keepdims: bool) -> Callable[[Shape], Shape]:
    def rule(shape: Shape) -> Shape:
        if keepdims:
            return _kept(shape, axes)
        return tuple(n for k, n in enumerate(shape) if axes is not None and k not in axes)

    return rule


def _reduce_vjp(kind: str, axes: tuple[int, ...] | None, keepdims: bool) -> Callable:
    def rule(g: Any, out: Any, x: Any) -> Any:
        shape = shape_of(x)
        if kind == "sum":
            return expand_to(g, shape, axes, keepdims)
        if kind == "prod":
            return mul_(expand_to(g, shape, axes, keepdims), others(axes)(x))
        # max, min: the gradient goes to the extreme elements, shared equally by ties
        hit = boolean("equal")(x, expand_to(out, shape, axes, keepdims))
        ties = reduce("sum", axes, True)(hit)
        return div_(mul_(expand_to(g, shape, axes, keepdims), hit), broadcast_to(shape)(ties))

    return rule


def _reduce_jvp(kind: str, axes: tuple[int, ...] | None, keepdims: bool) -> Callable:
    """Each result element is a sum of its own operand elements' tangents, weighted by
    their derivatives: the reverse rule's at a seed of ones (1 for a sum; the others'
    product for a product; the extreme elements, ties sharing, for max and min)."""

    def rule(ts: Sequence[Any], out: Any, x: Any) -> Any:
        total = reduce("sum", axes, keepdims)
        if kind == "sum":
            return total(ts[0])
        ones = np.ones(shape_of(out)) if shape_of(out) else 1.0
        return total(mul_(_reduce_vjp(kind, axes, keepdims)(ones, out, x), ts[0]))

    return rule


def reduce(kind: str, axes: tuple[int, ...] | None, keepdims: bool) -> ArrayOp:
    """``np.sum`` / ``np.prod`` / ``np.max`` / ``np.min`` over ``axes`` (sorted, or
    None for all)."""

    def make() -> ArrayOp:
        fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[kind]
        ax = None if axes is None else (axes[0] if len(axes) == 1 else axes)
        extra = (f", axis={ax!r}" if ax is not None else "") + (
            ", keepdims=True" if keepdims else ""
        )

        def ev(x: Any) -> Any:
            return fn(x, axis=ax, keepdims=keepdims)

        return ArrayOp(
            f"{kind}[{ax!r},{keepdims}]",
            1,
            ev,
            f"np.{kind}({{0}}{extra})",
            (_reduce_vjp(kind, axes, keepdims),),
            _reduced(axes, keepdims),
            loop=LoopForm(reduce=(kind, axes, keepdims)),
            jvp=_reduce_jvp(kind, axes, keepdims),
        )

    return CACHE.get(("reduce", kind, axes, keepdims), make)


def _no_second(name: str) -> Callable:
    def rule(g: Any, out: Any, *args: Any) -> Any:
        raise NotImplementedError(f"adcompile: no second derivative of {name} on arrays yet")

    return rule


def others(axes: tuple[int, ...] | None) -> ArrayOp:
    """The product of the other elements along ``axes``, each in its place (``prod``'s
    derivative)."""
    return CACHE.get(
        ("others", axes),
        lambda: ArrayOp(
            f"prod_of_others[{axes!r}]",
            1,
            lambda x: prod_of_others(x, axes),
            f"prod_of_others({{0}}, {axes!r})",
            (_no_second("prod"),),
            lambda s: s,
            constants={"prod_of_others": prod_of_others},
            loop=LoopForm(
                statement=others_statement(None if axes is None else axes[0]),
                fits=lambda s: axes is None or len(axes) == 1,
            ),
        ),
    )


# ---------------------------------------------------------------- shapes


def reshape(shape: Shape) -> ArrayOp:
    shape = tuple(int(n) for n in shape)
    return CACHE.get(
        ("reshape", shape),
        lambda: ArrayOp(
            f"reshape[{shape}]",
            1,
            lambda x: np.reshape(x, shape),
            f"np.reshape({{0}}, {shape!r})",
            (lambda g, out, x: reshape(shape_of(x))(g),),
            lambda s: shape,
            keeps_shape=True,
            loop=LoopForm(view=unit_reshape, array=f"{{0}}.reshape({shape!r})"),
            jvp=linear(lambda: reshape(shape)),
        ),
    )


def transpose(axes: tuple[int, ...]) -> ArrayOp:
    axes = tuple(int(a) for a in axes)
    back = tuple(int(a) for a in np.argsort(axes))
    return CACHE.get(
        ("transpose", axes),
        lambda: ArrayOp(
            f"transpose[{axes}]",
            1,
            lambda x: np.transpose(x, axes),
            f"np.transpose({{0}}, {axes!r})",
            (lambda g, out, x: transpose(back)(g),),
            lambda s: tuple(s[a] for a in axes),
            loop=LoopForm(
                view=lambda index, shape, old: [index[back[k]] for k in range(len(old))],
                array="{0}.T" if axes == (1, 0) else None,
            ),
            jvp=linear(lambda: transpose(axes)),
        ),
    )


def broadcast_to(shape: Shape) -> ArrayOp:
    shape = tuple(int(n) for n in shape)
    return CACHE.get(
        ("broadcast_to", shape),
        lambda: ArrayOp(
            f"broadcast_to[{shape}]",
            1,
            lambda x: np.broadcast_to(x, shape),
            f"np.broadcast_to({{0}}, {shape!r})",
            (lambda g, out, x: unbroadcast(g, shape_of(x)),),
            lambda s: _fits(s, shape) and shape,
            keeps_shape=True,
            loop=LoopForm(view=broadcast_index),
            jvp=linear(lambda: broadcast_to(shape)),
        ),
    )


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
            jvp=lambda ts, out, *xs: concatenate(axis, n)(*map(_zero, ts, xs)),
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
    return ", ".join(parts) if len(parts) != 1 else parts[0] + ","


def _index_op(kind: str, index: tuple, extra: Any, make: Callable[..., ArrayOp]) -> ArrayOp:
    key = _index_key(index)
    names = {
        k: f"i{hashlib.sha1(repr(key[k]).encode()).hexdigest()[:6]}"
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


def _fits(small: Shape, shape: Shape) -> bool:
    """Whether ``small`` broadcasts to ``shape`` (ValueError naming both if not)."""
    if broadcast(small, shape) != tuple(shape):
        raise ValueError(f"could not broadcast input array from shape {small} into shape {shape}")
    return True


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
                lambda g, out, x, v: unbroadcast(getitem(index)(g), shape_of(v)),
            ),
            lambda sx, sv: _fits(sv, _indexed_shape(sx, index)) and sx,
            constants={**constants, "updated": updated},
            loop=LoopForm(
                statement=f"{{name}} = {{0}}.copy()\n{{name}}[{text}] = {{1}}",
                fits=lambda sx, sv: _settable(index) and sv in ((), _indexed_shape(sx, index)),
            ),
            index=index,
            remake=setitem,
            jvp=lambda ts, out, x, v: setitem(index)(
                _zero(ts[0], x), 0.0 if ts[1] is None else ts[1]
            ),
        )

    return _index_op("setitem", index, None, make)


# ---------------------------------------------------------------- the generic ops


def mul_(a: Any, b: Any) -> Any:
    return OPS["mul"](a, b)


def div_(a: Any, b: Any) -> Any:
    return OPS["div"](a, b)
