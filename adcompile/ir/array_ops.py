"""The array ops: comparisons, ``where``, reductions and reshapes.

Each factory here makes one :class:`~adcompile.ir.arrays.ArrayOp` per parameter
set (an axis, a shape), which states its shape rule, its NumPy evaluation, its
code template, its vector-Jacobian and forward rules and its batching rule.
The rules are written with these same ops (and the scalar ops of ``ops``), so
they evaluate arrays and record on tracing arrays alike: the adjoint of an
array program is an array program. The few functions generated array code
calls besides NumPy's (``prod_of_others`` here) are each op's ``constants``,
as an index's arrays are. Indexing, concatenation and ``cumsum`` are in
``array_index``, products in ``array_products``.

A batching rule (``batch(args, mapped)``) gives the op's result at many points
at once: the operands ``mapped`` hold one point per row of a new first axis,
the others are the same at every point. Element-wise ops broadcast
(``batch_elementwise``); the others move their axes one on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .array_values import others_tangent, prod_of_others
from .arrays import CACHE, ArrayOp, LoopForm, Shape, broadcast, shape_of
from .loop_forms import broadcast_index, others_statement, unit_reshape
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


# ---------------------------------------------------------------- batching helpers


def points(args: Sequence[Any], mapped: Sequence[bool]) -> int:
    """The number of points of a batching rule's operands (module doc)."""
    return next(shape_of(a)[0] for a, m in zip(args, mapped) if m)


def point_shape(a: Any, mapped: bool) -> Shape:
    """The shape of operand ``a`` at one point."""
    return shape_of(a)[1:] if mapped else shape_of(a)


def lift(a: Any, rank: int) -> Any:
    """Mapped ``a`` (points first) with ones after its first axis, so its point has
    ``rank`` axes: it broadcasts against operands the same at every point."""
    s = shape_of(a)
    return a if len(s) == rank + 1 else reshape((s[0],) + (1,) * (rank + 1 - len(s)) + s[1:])(a)


def spread(a: Any, n: int) -> Any:
    """``a``, the same at every point, as a mapped operand of ``n`` points."""
    return broadcast_to((n, *shape_of(a)))(a)


def batch_elementwise(op: Callable[..., Any]) -> Callable[..., Any]:
    """The batching rule of an element-wise op: mapped operands lifted to the points'
    broadcast rank, then the op itself (NumPy's broadcasting does the rest)."""

    def rule(args: Sequence[Any], mapped: Sequence[bool]) -> Any:
        rank = len(broadcast(*(point_shape(a, m) for a, m in zip(args, mapped))))
        return op(*(lift(a, rank) if m else a for a, m in zip(args, mapped)))

    return rule


def moved_axes(axes: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    """A point's ``axes`` (None: all of its ``rank``) in its mapped operand."""
    return tuple(range(1, rank + 1)) if axes is None else tuple(a + 1 for a in axes)


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


def zero_of(t: Any, x: Any) -> Any:
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
            batch=lambda args, mapped: batch_elementwise(boolean(name))(args, mapped),
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
            batch=lambda args, mapped: batch_elementwise(where())(args, mapped),
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
            batch=lambda args, mapped: _batch_reduce(reduce, args[0], axes, keepdims, kind),
        )

    return CACHE.get(("reduce", kind, axes, keepdims), make)


def _batch_reduce(make: Callable, x: Any, axes: Any, keepdims: bool, *kind: str) -> Any:
    """A reduction (``make(*kind, axes, keepdims)``) of mapped ``x``, over its points'
    ``axes``; over none where a point has none (a number: NumPy's ``axis=()``, which
    is not ``x`` itself: a sum of booleans counts, the product of no others is 1)."""
    return make(*kind, moved_axes(axes, len(shape_of(x)) - 1), keepdims)(x)


def _none_yet(what: str) -> Callable:
    def rule(g: Any, out: Any, *args: Any) -> Any:
        raise NotImplementedError(f"adcompile: no {what} on arrays yet")

    return rule


def others(axes: tuple[int, ...] | None) -> ArrayOp:
    """The product of the other elements along ``axes``, each in its place (``prod``'s
    derivative). Its derivative along ``t`` is ``others_dot(axes)(x, t)``, which is
    its adjoint too (prod's Hessian is symmetric)."""
    return CACHE.get(
        ("others", axes),
        lambda: ArrayOp(
            f"prod_of_others[{axes!r}]",
            1,
            lambda x: prod_of_others(x, axes),
            f"prod_of_others({{0}}, {axes!r})",
            (lambda g, out, x: others_dot(axes)(x, g),),
            lambda s: s,
            constants={"prod_of_others": prod_of_others},
            jvp=lambda ts, out, x: others_dot(axes)(x, ts[0]),
            loop=None
            if axes is not None and len(axes) != 1
            else LoopForm(statement=others_statement(None if axes is None else axes[0])),
            batch=lambda args, mapped: _batch_reduce(
                lambda moved, _: others(moved), args[0], axes, False
            ),
        ),
    )


def others_dot(axes: tuple[int, ...] | None) -> ArrayOp:
    """``others(axes)``'s derivative at ``x`` along ``t`` (``array_values.others_tangent``):
    linear in ``t`` with a symmetric matrix, so its adjoint in ``t`` is itself; it
    has no derivative in ``x`` (prod's third) at array level."""

    def batch(args: Sequence[Any], mapped: Sequence[bool]) -> Any:
        n = points(args, mapped)
        x, t = (a if m else spread(a, n) for a, m in zip(args, mapped))
        return others_dot(moved_axes(axes, len(shape_of(x)) - 1))(x, t)

    return CACHE.get(
        ("others_dot", axes),
        lambda: ArrayOp(
            f"others_tangent[{axes!r}]",
            2,
            lambda x, t: others_tangent(x, t, axes),
            f"others_tangent({{0}}, {{1}}, {axes!r})",
            (_none_yet("third derivative of prod"), lambda g, out, x, t: others_dot(axes)(x, g)),
            lambda sx, st: sx,
            constants={"others_tangent": others_tangent},
            batch=batch,
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
            batch=lambda args, mapped: reshape((shape_of(args[0])[0], *shape))(args[0]),
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
            batch=lambda args, mapped: transpose((0, *(a + 1 for a in axes)))(args[0]),
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
            lambda s: fits_into(s, shape) and shape,
            keeps_shape=True,
            loop=LoopForm(view=broadcast_index),
            jvp=linear(lambda: broadcast_to(shape)),
            batch=lambda args, mapped: broadcast_to((shape_of(args[0])[0], *shape))(
                lift(args[0], len(shape))
            ),
        ),
    )


def fits_into(small: Shape, shape: Shape) -> bool:
    """Whether ``small`` broadcasts to ``shape`` (ValueError naming both if not)."""
    if broadcast(small, shape) != tuple(shape):
        raise ValueError(f"could not broadcast input array from shape {small} into shape {shape}")
    return True


# ---------------------------------------------------------------- the generic ops


def mul_(a: Any, b: Any) -> Any:
    return OPS["mul"](a, b)


def div_(a: Any, b: Any) -> Any:
    return OPS["div"](a, b)
