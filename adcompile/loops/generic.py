"""One loop program for every batch length.

``generalise(programs, ks)``: programs built from traces at a few batch lengths
``ks`` become one program whose trip counts, indices and per-length constants
are affine in the length ``n`` (:class:`~.ir.Lin`, :class:`~.ir.NFloat`); None
when they differ otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.tape import Tape
from .ir import (
    Affine,
    Arg,
    At,
    Block,
    Column,
    GuardLoop,
    Lin,
    Lit,
    Loop,
    NFloat,
    NotAffine,
    Param,
    Prev,
    Program,
    lin,
)


class _NotOne(Exception):
    pass


def generalise(programs: Sequence[Program], ks: Sequence[int]) -> Program | None:
    """One program for every batch length n, from the programs traced at the
    lengths ``ks`` (three): every number that differs between them must be
    affine in n (loop counts, offsets: then a :class:`Lin`) or, outside loop
    bodies, affine in n or in ``1 / n`` (an :class:`NFloat`); the rest must be
    the same. None when they are not one program."""
    if len(programs) != 3 or len(ks) != 3:
        raise ValueError("generalise takes the programs at three lengths")
    try:
        return _unify(list(programs), list(ks))
    except (_NotOne, NotAffine):
        return None


def _unify(objs: list, ks: list[int]):  # noqa: ANN202 (any part of a program)
    first = objs[0]
    t = type(first)
    if any(type(o) is not t for o in objs):
        raise _NotOne
    if t is int:
        if all(o == first for o in objs):
            return first
        (k0, k1, k2), (v0, v1, v2) = ks, objs
        b, r = divmod(v1 - v0, k1 - k0)
        a = v0 - b * k0
        if r or v2 != a + b * k2:
            raise _NotOne
        return lin(a, b)
    if isinstance(first, float):
        if all(o == first for o in objs):
            return first
        return _fit_float(objs, ks)
    if (
        first is None
        or t in (bool, str)
        or not hasattr(first, "__dict__")
        and t
        not in (
            list,
            tuple,
        )
    ):
        if t is str or all(o == first for o in objs):  # (str: names, taken from the first)
            return first
        raise _NotOne
    if t in (list, tuple):
        if len({len(o) for o in objs}) != 1:
            raise _NotOne
        return t(_unify(list(parts), ks) for parts in zip(*objs))
    if t is Tape:  # a loop body: the same at every length
        if not all(_same_tape(first, o) for o in objs[1:]):
            raise _NotOne
        return first
    if t is Loop:
        return Loop(
            first.start,  # (names only)
            _unify([o.size for o in objs], ks),
            _unify([o.trips for o in objs], ks),
            _unify([o.body for o in objs], ks),
            _unify([o.reads for o in objs], ks),
            _unify([o.positions for o in objs], ks),
            None,
            first.parts,  # (names only)
        )
    if t is Block:
        return Block(_unify([o.nodes for o in objs], ks), list(first.slots))
    if t is Program:
        return Program(
            _unify([o.params for o in objs], ks),
            _unify([o.items for o in objs], ks),
            _unify([o.outputs for o in objs], ks),
            _unify([o.guards for o in objs], ks),
            first.name,
            list(first.guard_where),
            _unify([o.guard_loops for o in objs], ks),
        )
    if t is Affine:
        c0 = _unify([o.c0 for o in objs], ks)
        c1 = _unify([o.c1 for o in objs], ks)
        if isinstance(c1, Lin):
            raise _NotOne  # a stride that depends on n
        return Affine(c0, c1)
    if t in (Arg, At, Lit, Column, Prev, Param, GuardLoop):
        names = list(first.__dataclass_fields__)
        return t(*[_unify([getattr(o, f) for o in objs], ks) for f in names])
    if all(o is first for o in objs):  # an Op
        return first
    raise _NotOne


def _fit_float(vals: list[float], ks: list[int]) -> NFloat:
    (k0, k1, k2), (v0, v1, v2) = ks, [float(v) for v in vals]

    def close(x: float, y: float) -> bool:
        return abs(x - y) <= 1e-12 * max(abs(x), abs(y))

    q = (v1 - v0) / (k1 - k0)
    p = v0 - q * k0
    if close(v2, p + q * k2):
        return NFloat(v2, f"({p!r} + {q!r} * n)" if p else f"({q!r} * n)")
    q = (v1 - v0) / (1 / k1 - 1 / k0)
    p = v0 - q / k0
    if close(v2, p + q / k2):
        return NFloat(v2, f"({p!r} + {q!r} / n)" if p else f"({q!r} / n)")
    raise _NotOne


def _same_tape(a: Tape, b: Tape) -> bool:
    return (
        a.nodes == b.nodes
        and a.inputs == b.inputs
        and a.outputs == b.outputs
        and [g[:4] for g in a.guards] == [g[:4] for g in b.guards]
    )
