"""Array products: ``matmul`` (``@``, BLAS for float arrays) and two-operand ``einsum``.

Each is an :class:`~adcompile.ir.arrays.ArrayOp` like those of ``array_ops``,
its vector-Jacobian rules written with array ops (a product's adjoint is a
product with the other operand, transposed), so they record on tracing arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .array_ops import lift, point_shape, points, reshape, transpose, unbroadcast
from .arrays import CACHE, ArrayOp, LoopForm, Shape, broadcast, shape_of
from .loop_forms import einsum_statement

# ---------------------------------------------------------------- products


def _matmul_shape(a: Shape, b: Shape) -> Shape:
    if not a or not b:
        raise ValueError("matmul: an operand is a scalar; use * instead")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
            f"(size {b2[-2]} is different from {a2[-1]}), shapes {a} and {b}"
        )
    out = broadcast(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _swap(x: Any) -> Any:
    n = len(shape_of(x))
    return transpose(tuple(range(n - 2)) + (n - 1, n - 2))(x)


def _matmul_vjp(k: int) -> Callable:
    def rule(g: Any, out: Any, a: Any, b: Any) -> Any:
        sa, sb = shape_of(a), shape_of(b)
        a2 = reshape((1,) + sa)(a) if len(sa) == 1 else a
        b2 = reshape(sb + (1,))(b) if len(sb) == 1 else b
        g2 = reshape(_matmul_shape(shape_of(a2), shape_of(b2)))(g)
        if k == 0:
            d = matmul()(g2, _swap(b2))
            return reshape(sa)(unbroadcast(d, shape_of(a2)))
        d = matmul()(_swap(a2), g2)
        return reshape(sb)(unbroadcast(d, shape_of(b2)))

    return rule


def bilinear(op: Callable[[], ArrayOp]) -> Callable[..., Any]:
    """The forward rule of a product: ``op(ta, b) + op(a, tb)``, of the operands that
    have tangents."""

    def rule(ts: Any, out: Any, a: Any, b: Any) -> Any:
        terms = [op()(ta, b) for ta in ts[:1] if ta is not None]
        terms += [op()(a, tb) for tb in ts[1:] if tb is not None]
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]

    return rule


def _batched(a: Shape, b: Shape) -> tuple[str, str, str] | None:
    """The einsum letters of a matmul of more than two axes whose stacked axes are
    the same on both sides, or on one side only (no broadcasting of ones); or None."""
    if len(a) < 2 or len(b) < 2 or max(len(a), len(b)) > 8:
        return None
    sa, sb = a[:-2], b[:-2]
    if sa and sb and sa != sb:
        return None
    batch = "abcdef"[: max(len(sa), len(sb))]
    left = (batch if sa else "") + "ij"
    right = (batch if sb else "") + "jk"
    return left, right, batch + "ik"


def _matmul_statement(a: Shape, b: Shape) -> str:
    """``np.dot`` (BLAS) for operands of one or two axes; a batched product as the
    loops of an einsum."""
    if len(a) <= 2 and len(b) <= 2:
        return "{name} = np.dot({0}, {1})"
    left, right, out = _batched(a, b)
    return einsum_statement(left, right, out)


def matmul() -> ArrayOp:
    """``a @ b`` (``np.matmul``: BLAS for float arrays)."""
    return CACHE.get(
        ("matmul",),
        lambda: ArrayOp(
            "matmul",
            2,
            np.matmul,
            "({0} @ {1})",
            (_matmul_vjp(0), _matmul_vjp(1)),
            _matmul_shape,
            loop=LoopForm(
                statement_of=_matmul_statement,
                fits=lambda a, b: len(a) <= 2 and len(b) <= 2 or _batched(a, b) is not None,
                product=True,
            ),
            jvp=bilinear(matmul),
            batch=_batch_matmul,
        ),
    )


def _batch_matmul(args: Any, mapped: Any) -> Any:
    """``a @ b`` at every point. Rows of vectors against one matrix are one product
    (``(n, j) @ (j, k)``, the points' vectors as a matrix's rows); otherwise a vector
    is a matrix of one row (or column), mapped operands are lifted to a common rank,
    and the stacked product broadcasts over the points."""
    (a, b), (ma, mb) = args, mapped
    sa, sb = point_shape(a, ma), point_shape(b, mb)
    if ma and not mb and len(sa) == 1 and len(sb) <= 2:
        return matmul()(a, b)
    if mb and not ma and len(sb) == 1 and len(sa) <= 2:
        return matmul()(b, a if len(sa) == 1 else transpose((1, 0))(a))
    n = points(args, mapped)
    a2 = reshape(((n,) if ma else ()) + (1,) + sa)(a) if len(sa) == 1 else a
    b2 = reshape(((n,) if mb else ()) + sb + (1,))(b) if len(sb) == 1 else b
    rank = max(len(sa), len(sb), 2)
    got = matmul()(lift(a2, rank) if ma else a2, lift(b2, rank) if mb else b2)
    return reshape((n, *_matmul_shape(sa, sb)))(got)


def _batch_einsum(a: str, b: str, out: str, args: Any, mapped: Any) -> Any:
    """``einsum`` at every point: the points' axis is one more letter, of the mapped
    operands and of the result."""
    p = next(c for c in "zyxwvutsrqponmlkjihgfedcba" if c not in a + b + out)
    ma, mb = mapped
    return einsum(f"{p * ma}{a},{p * mb}{b}->{p}{out}")(*args)


def einsum_ok(spec: str) -> bool:
    """Whether :func:`einsum` takes ``spec``: two operands, an explicit output, no
    letter twice in one operand, every operand's letters in the output or the
    other operand (so each operand's adjoint is an einsum too)."""
    if "->" not in spec or "." in spec:
        return False
    ins, out = spec.replace(" ", "").split("->")
    parts = ins.split(",")
    if len(parts) != 2 or len(set(out)) != len(out):
        return False
    a, b = parts
    return (
        len(set(a)) == len(a)
        and len(set(b)) == len(b)
        and set(a) <= set(out) | set(b)
        and set(b) <= set(out) | set(a)
        and set(out) <= set(a) | set(b)
    )


def einsum(spec: str) -> ArrayOp:
    """``np.einsum(spec, a, b)`` for a spec :func:`einsum_ok` takes."""
    spec = spec.replace(" ", "")
    (a, b), out = spec.split("->")[0].split(","), spec.split("->")[1]

    def shape(sa: Shape, sb: Shape) -> Shape:
        size: dict[str, int] = {}
        for letters, s in ((a, sa), (b, sb)):
            if len(letters) != len(s):
                raise ValueError(f"einsum {spec!r}: operand of shape {s} for {letters!r}")
            for c, n in zip(letters, s):
                if size.setdefault(c, n) != n:
                    raise ValueError(f"einsum {spec!r}: {c!r} is {size[c]} and {n}")
        return tuple(size[c] for c in out)

    return CACHE.get(
        ("einsum", spec),
        lambda: ArrayOp(
            f"einsum[{spec}]",
            2,
            lambda x, y: np.einsum(spec, x, y),
            f"np.einsum({spec!r}, {{0}}, {{1}})",
            (
                lambda g, o, x, y: einsum(f"{out},{b}->{a}")(g, y),
                lambda g, o, x, y: einsum(f"{a},{out}->{b}")(x, g),
            ),
            shape,
            loop=LoopForm(statement=einsum_statement(a, b, out)),
            jvp=bilinear(lambda: einsum(spec)),
            batch=lambda args, mapped: _batch_einsum(a, b, out, args, mapped),
        ),
    )
