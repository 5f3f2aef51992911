"""The loop IR: a folded program as data, not text.

A tape records a Python loop unrolled: n copies of the same few primitives.
A :class:`Program` holds the same computation with each repeated segment
written once, as a :class:`Loop` whose body is itself a :class:`Tape`, and
the rest as straight-line :class:`Block` items::

    program rosen(x[100]):
      L0 = loop i in range(99):              # tape slots 101..694, 6 per repetition
        b0 = input x[i + 1]
        b1 = input x[i]
        b2 = input prev b7 (first: 0.0)
        ...
      out L0[98].b7

What a body reads, per repetition ``i``, is one of a few named operand
types: an argument element or a value of an earlier item at an index
affine in ``i`` (:class:`Arg`, :class:`At`), a literal (:class:`Lit`), a
constant that differs per repetition (:class:`Column`), or its own value
of the previous repetition (:class:`Prev`). Those reads are the body tape's
inputs, so a body can be interpreted, differentiated or folded again by
the code that handles any tape. Guards outside loops that differ only by an
advancing index (``max(x[i], 0.0)`` for each i) are one :class:`GuardLoop`.

An array tape (``ir.arrays``) lowers to the same items
(``loops.array_scan.scan``): a block's statements are array nodes (an
argument and a constant are statements of their own, ``input x`` and ``const
array(3, 4)``), a loop is a *scan* whose body is an array tape, and
:attr:`Loop.moving` holds the indices that move with its repetition
(``xs[t]``). ``emit.array_loops`` prints such a program as loop nests.

``loops.build.build(tape, segments, params)`` makes a program from a tape and
the segments ``loops.segments`` found on it; :meth:`Program.run` runs it (the
reference the other stages are checked against), and ``str()`` prints it.
``loops.generic.generalise`` makes one program for every batch length out of
programs traced at a few lengths; :class:`Lin` and :class:`NFloat` are its
numbers affine in the length ``n``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir.tape import CONST, INPUT, Guard, Param, Tape


@dataclass(frozen=True)
class Affine:
    """``c0 + c1 * i``: an index (or repetition) that may advance with the loop."""

    c0: int
    c1: int = 0

    def at(self, i: int) -> int:
        """The value at repetition ``i``."""
        return self.c0 + self.c1 * i

    def __str__(self) -> str:
        if not self.c1:
            return str(self.c0)
        term = "i" if abs(self.c1) == 1 else f"{abs(self.c1)} * i"
        if not self.c0:
            return term if self.c1 > 0 else f"-{term}"
        if self.c1 < 0:
            return f"{self.c0} - {term}"
        return f"{term} {'+' if self.c0 > 0 else '-'} {abs(self.c0)}"


# ------------------------------------------------------------------ operands


@dataclass(frozen=True)
class Arg:
    """Element ``index`` of argument ``param`` (flattened)."""

    param: int
    index: Affine


@dataclass(frozen=True)
class Lit:
    """A constant, the same at every repetition."""

    value: float


@dataclass(frozen=True)
class Column:
    """Constants that differ per repetition: ``values[i]``."""

    values: tuple[float, ...]


@dataclass(frozen=True)
class At:
    """The value at ``index`` of an earlier item: a block's statement, or for a
    loop, position ``index % size`` of repetition ``index // size``."""

    item: int
    index: Affine


@dataclass(frozen=True)
class Prev:
    """A loop body's own value ``slot`` of the previous repetition; the first
    repetition reads ``init`` instead. Several reads may carry one slot with
    different inits (``t = g(t, s); s = t``: both read the last ``t``)."""

    slot: int
    init: Arg | Lit | At


Ref = Arg | Lit | At
Read = Arg | Lit | Column | At | Prev


@dataclass(frozen=True)
class GuardLoop:
    """Guards outside loops that differ only by indices advancing together:
    ``a cmp b`` was ``expected`` at each ``i in range(trips)``, the reads ``a``
    and ``b`` at ``i`` (their indices affine in ``i``; a literal is the same at
    every ``i``). A chain of ``max(x[i], 0.0)`` records one guard per element of
    ``x``; they are checked as one loop, not as one ``if`` each."""

    cmp: str
    a: Ref
    b: Ref
    expected: bool
    trips: int
    where: str = ""

    def holds(self, read: Callable[[Ref, int], float]) -> bool:
        """Whether the guard holds at every ``i``, ``read(r, i)`` reading ``r`` there
        (``reader``'s ``read``)."""
        g = Guard(self.cmp, 0, 1, self.expected)
        return all(g.holds([read(self.a, i), read(self.b, i)]) for i in range(self.trips))


# ------------------------------------------------------------------ items


@dataclass
class Block:
    """Straight-line statements: ``nodes[k]`` is op ``nodes[k][0]`` of the refs
    ``nodes[k][1]``; ``slots[k]`` is the tape slot it came from."""

    nodes: list[tuple[object, tuple[Ref, ...]]]
    slots: list[int]


@dataclass
class Loop:
    """``body`` run ``trips`` times; its input ``k`` reads ``reads[k]``.

    ``positions[p]`` is the body slot holding position ``p`` of a repetition
    (``None`` for a constant there, which readers see as a literal); the tape
    slot of position ``p`` in repetition ``i`` was ``start + i * size + p``.
    """

    start: int
    size: int
    trips: int
    body: Tape
    reads: list[Read]
    positions: list[int | None]
    # the body folded in turn (loops inside loops; ``nest``), or None
    inner: Nested | None = None
    # loops fused into this one (``loopfuse``): the (start, size) of each, in order
    parts: tuple[tuple[int, int], ...] | None = None
    # a scan's indexing ops whose ints move with the repetition (``xs[t]``): body
    # slot -> its index, the moving ints :class:`Affine` in ``i`` (the op is that
    # of repetition 0)
    moving: dict[int, tuple] = field(default_factory=dict)

    def slot(self, p: int) -> int:
        """The tape slot position ``p`` of repetition 0 came from (for names)."""
        if self.parts is None:
            return self.start + p
        for start, size in self.parts:
            if p < size:
                return start + p
            p -= size
        raise IndexError(p)

    def span(self, trips: object = None) -> str:
        """``1004..2002`` (the tape slots it came from; ``trips`` printed for a
        count that is not a number), or several such ranges for fused loops."""
        parts = self.parts or ((self.start, self.size),)
        if trips is not None:
            return ", ".join(f"{start}.." for start, _ in parts)
        return ", ".join(f"{start}..{start + size * self.trips - 1}" for start, size in parts)


Item = Block | Loop


@dataclass
class Nested:
    """A loop body folded in turn: ``program`` computes the body's outputs (its
    positions, in order) from *virtual parameters*: ``sources[v]`` says what
    parameter ``v`` is, ``("array", p, c1)`` (argument ``p`` seen from the
    outer repetition ``i``: its element ``e`` is ``p[e + c1 * i]``) or
    ``("read", k)`` (a scalar: the body's read ``k``)."""

    program: Program
    sources: list[tuple]


@dataclass
class Program:
    """A tape's computation as straight-line blocks and loops (see the module doc)."""

    params: list[Param]
    items: list[Item]
    outputs: list[Ref]
    guards: list[tuple[str, Ref, Ref, bool]] = field(default_factory=list)
    name: str = "f"
    # per guard, the user's source line that made it ("" where not known)
    guard_where: list[str] = field(default_factory=list)
    # guards outside loops folded into loops of their own (``fold_guards``)
    guard_loops: list[GuardLoop] = field(default_factory=list)
    # an array program's value-and-gradient: the first tape slot of the adjoint
    adjoint_from: int | None = None

    # ---- running (the reference interpreter)

    def run(self, args: Sequence[float | np.ndarray]) -> tuple[bool, list[float]]:
        """(whether every guard holds, the outputs) for these arguments."""
        flat = [np.atleast_1d(np.asarray(a, dtype=np.float64)).ravel() for a in args]
        if len(flat) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(flat)}")
        values: list[np.ndarray] = []
        ok = True
        read = reader(flat, values)
        for item in self.items:
            if type(item) is Block:
                out = np.empty(len(item.nodes))
                values.append(out)  # (a statement reads the block's earlier ones)
                for k, (op, refs) in enumerate(item.nodes):
                    out[k] = op.eval(*[read(r, 0) for r in refs])
                continue
            out = np.zeros((item.trips, item.size))
            body = item.body
            vals = [0.0] * len(body.nodes)
            for i in range(item.trips):
                prev = vals[:]
                for k, r in enumerate(item.reads):
                    if type(r) is Prev:
                        v = read(r.init, i) if i == 0 else prev[r.slot]
                    else:
                        v = read(r, i)
                    vals[body.inputs[k]] = v
                for j, node in enumerate(body.nodes):
                    if node.op == CONST:
                        vals[j] = node.value
                    elif node.op != INPUT:
                        vals[j] = node.op.eval(*[vals[a] for a in node.args])
                ok = ok and all(g.holds(vals) for g in body.guards)
                for p, j in enumerate(item.positions):
                    if j is not None:
                        out[i, p] = vals[j]
            values.append(out.ravel())
        for cmp, a, b, expected in self.guards:
            ok = ok and Guard(cmp, 0, 1, expected).holds([read(a, 0), read(b, 0)])
        ok = ok and all(gl.holds(read) for gl in self.guard_loops)
        return ok, [read(r, 0) for r in self.outputs]

    # ---- printing

    def __str__(self) -> str:
        params = ", ".join(
            p.name if p.size is None else f"{p.name}[{p.size}]" for p in self.params
        )
        lines = [f"program {self.name}({params}):"]
        for n, item in enumerate(self.items):
            if type(item) is Block:
                for k, (op, refs) in enumerate(item.nodes):
                    if isinstance(op, str):  # (an array program's argument or constant)
                        arg = refs[0]
                        what = self.params[arg.param].name if op == INPUT else _value(arg.value)
                        lines.append(f"  B{n}[{k}] = {op} {what}")
                        continue
                    args = ", ".join(self._ref(r) for r in refs)
                    lines.append(f"  B{n}[{k}] = {op.name}({args})")
                continue
            lines.append(
                f"  L{n} = loop i in range({item.trips}):  # tape slots {item.span()}, "
                f"{item.size} per repetition"
            )
            body = item.body
            for k, j in enumerate(body.inputs):
                lines.append(f"    b{j} = input {self._read(item.reads[k])}")
            for j, node in enumerate(body.nodes):
                if isinstance(node.op, str):
                    continue
                args = ", ".join(_body_operand(body, a) for a in node.args)
                name = node.op.name
                if j in item.moving:  # (``getitem[3]`` at repetition 0: ``getitem[i + 3]``)
                    name = name.split("[")[0] + f"[{', '.join(map(str, item.moving[j]))}]"
                lines.append(f"    b{j} = {name}({args})")
            for g in body.guards:
                a, b = _body_operand(body, g.a), _body_operand(body, g.b)
                lines.append(f"    guard {a} {g.cmp} {b} is {g.expected}")
        for cmp, a, b, expected in self.guards:
            lines.append(f"  guard {self._ref(a)} {cmp} {self._ref(b)} is {expected}")
        for gl in self.guard_loops:
            a, b = self._ref(gl.a), self._ref(gl.b)
            lines.append(f"  guard i in range({gl.trips}): {a} {gl.cmp} {b} is {gl.expected}")
        lines.append("  out " + ", ".join(self._ref(r) for r in self.outputs))
        return "\n".join(lines)

    def _ref(self, r: Ref) -> str:
        if type(r) is Lit:
            return repr(r.value)
        if type(r) is Arg:
            p = self.params[r.param]
            return p.name if p.size is None else f"{p.name}[{r.index}]"
        item = self.items[r.item]
        if type(item) is Block:
            return f"B{r.item}[{r.index}]"
        k = item.size
        if r.index.c1 % k == 0:  # the same position of a repetition that advances
            rep = Affine(r.index.c0 // k, r.index.c1 // k)
            j = item.positions[r.index.c0 % k]
            return f"L{r.item}[{rep}].b{j}"
        return f"L{r.item}.flat[{r.index}]"

    def _read(self, r: Read) -> str:
        if type(r) is Prev:
            return f"prev b{r.slot} (first: {self._ref(r.init)})"
        if type(r) is Column:
            shown = ", ".join(repr(v) for v in r.values[:3])
            return f"column[i] of ({shown}{', ...' if len(r.values) > 3 else ''})"
        return self._ref(r)

    @property
    def statements(self) -> int:
        """Primitive statements written (each loop body once)."""
        n = 0
        for item in self.items:
            if type(item) is Block:
                n += len(item.nodes)
            elif item.inner is not None:
                n += item.inner.program.statements
            else:
                n += item.body.n_ops
        return n


def reader(flat: Sequence[np.ndarray], values: Sequence[np.ndarray]):  # noqa: ANN201
    """``read(r, i)``: the value read ``r`` reads at repetition ``i``, given the
    flat arguments and each item's values so far (``Prev`` is the caller's)."""

    def read(r: Read, i: int) -> float:
        if type(r) is Lit:
            return r.value
        if type(r) is Arg:
            return float(flat[r.param][r.index.at(i)])
        if type(r) is At:
            return float(values[r.item][r.index.at(i)])
        return r.values[i]  # Column

    return read


def _body_operand(body: Tape, a: int) -> str:
    node = body.nodes[a]
    return _value(node.value) if node.op == CONST else f"b{a}"


def _value(v: object) -> str:
    """A constant as the program prints it (an array by its shape)."""
    return f"array{v.shape}" if isinstance(v, np.ndarray) else repr(v)


# ------------------------------------------------------------------ the batch length


class NotAffine(ValueError):
    """A number of a generic program is not affine in the batch length there."""


@dataclass(frozen=True)
class Lin:
    """``a + b * n``, ``b != 0``: a count or an offset affine in the batch length n.

    Arithmetic with ints stays exact (:func:`lin` gives back a plain int when
    ``b`` is 0); ``//`` and ``%`` by an int are defined when it divides ``b``.
    It prints as Python source in ``n``.
    """

    a: int
    b: int

    def __add__(self, o: int | Lin) -> int | Lin:
        a, b = _parts(o)
        return lin(self.a + a, self.b + b)

    __radd__ = __add__

    def __sub__(self, o: int | Lin) -> int | Lin:
        a, b = _parts(o)
        return lin(self.a - a, self.b - b)

    def __rsub__(self, o: int | Lin) -> int | Lin:
        a, b = _parts(o)
        return lin(a - self.a, b - self.b)

    def __neg__(self) -> int | Lin:
        return lin(-self.a, -self.b)

    def __mul__(self, k: int | Lin) -> int | Lin:
        if isinstance(k, Lin):
            raise NotAffine(f"({self}) * ({k}) is not affine in n")
        return lin(self.a * k, self.b * k)

    __rmul__ = __mul__

    def __floordiv__(self, m: int) -> int | Lin:
        if not isinstance(m, int) or self.b % m:
            raise NotAffine(f"({self}) // {m} is not affine in n")
        return lin(self.a // m, self.b // m)

    def __mod__(self, m: int) -> int:
        if not isinstance(m, int) or self.b % m:
            raise NotAffine(f"({self}) % {m} depends on n")
        return self.a % m

    def at(self, n: int) -> int:
        return self.a + self.b * n

    def __str__(self) -> str:
        term = "n" if abs(self.b) == 1 else f"{abs(self.b)} * n"
        if self.b > 0:
            return term if not self.a else f"{term} {'+' if self.a > 0 else '-'} {abs(self.a)}"
        return f"-{term}" if not self.a else f"{self.a} - {term}"


def lin(a: int, b: int) -> int | Lin:
    """``a + b * n``: a plain int when ``b`` is 0."""
    return int(a) if b == 0 else Lin(int(a), int(b))


def _parts(o: int | Lin) -> tuple[int, int]:
    if isinstance(o, Lin):
        return o.a, o.b
    if isinstance(o, (int, np.integer)) and not isinstance(o, bool):
        return int(o), 0
    raise NotAffine(f"{o!r} is not an integer")


def at_length(x: int | Lin, n: int) -> int:
    """A count of a generic program at batch length ``n``."""
    return x.at(n) if isinstance(x, Lin) else x


class NFloat(float):
    """A constant that depends on the batch length (a mean's ``1 / n``): it prints
    as its expression in ``n``; its float value is the one at the last length traced."""

    expr: str

    def __new__(cls, value: float, expr: str) -> NFloat:
        self = super().__new__(cls, value)
        self.expr = expr
        return self

    def __repr__(self) -> str:
        return self.expr

    def __hash__(self) -> int:
        return hash((float(self), self.expr))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NFloat) and other.expr == self.expr
