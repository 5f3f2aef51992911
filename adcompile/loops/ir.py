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

``build(tape, segments, params)`` makes a program from a tape and the
segments ``adcompile.segments`` found on it; :meth:`Program.run` runs it
(the reference the other stages are checked against), and ``str()``
prints it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir.tape import CONST, INPUT, Guard, Node, Param, Tape
from .segments import Segment


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


#: Guards outside loops that fold into a :class:`GuardLoop`: runs of at least
#: this many.
GUARD_RUN = 3


def fold_guards(
    checks: dict[tuple[str, Ref, Ref, bool], str], min_run: int = GUARD_RUN
) -> tuple[list[tuple[str, Ref, Ref, bool]], list[str], list[GuardLoop]]:
    """The guards ``checks`` (``(cmp, a, b, expected)`` -> where it was made) as
    single guards (with their ``where``) and runs folded into guard loops.

    Guards have no effect but to fail, so their order is free: those of one
    kind (the same comparison and expected answer, reading the same argument,
    item or literal on each side) are taken in the order made, and each run of
    ``min_run`` or more whose indices advance by the same steps is a loop.
    """
    groups: dict[tuple, list[tuple[str, Ref, Ref, bool]]] = {}
    for key in checks:
        cmp, a, b, expected = key
        groups.setdefault((cmp, expected, _kind(a), _kind(b)), []).append(key)
    singles: list[tuple[str, Ref, Ref, bool]] = []
    loops: list[GuardLoop] = []
    for members in groups.values():
        idx = [(_index(a), _index(b)) for _, a, b, _ in members]
        m = 0
        while m < len(members):
            end, step = m + 1, (0, 0)
            if m + 1 < len(members):
                step = (idx[m + 1][0] - idx[m][0], idx[m + 1][1] - idx[m][1])
                while end < len(members) and idx[end] == (
                    idx[m][0] + step[0] * (end - m),
                    idx[m][1] + step[1] * (end - m),
                ):
                    end += 1
            if end - m < min_run:
                singles.append(members[m])
                m += 1
                continue
            cmp, a, b, expected = members[m]
            a, b = _advance(a, step[0]), _advance(b, step[1])
            loops.append(GuardLoop(cmp, a, b, expected, end - m, checks[members[m]]))
            m = end
    return singles, [checks[k] for k in singles], loops


def _kind(r: Ref) -> tuple:
    """What a guard's side reads, but for its index."""
    if type(r) is Lit:
        return ("lit", r.value)
    return ("arg", r.param) if type(r) is Arg else ("at", r.item)


def _index(r: Ref) -> int:
    return 0 if type(r) is Lit else r.index.c0


def _advance(r: Ref, step: int) -> Ref:
    """``r`` with its index advancing by ``step`` per repetition."""
    if type(r) is Lit:
        return r
    return type(r)(r.param if type(r) is Arg else r.item, Affine(r.index.c0, step))


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


def nest(loop: Loop, params: Sequence[Param], min_ops: int = 96) -> Nested | None:
    """Fold a long loop body (``min_ops`` operations or more) in turn; None when it
    does not repeat, or not so that its reads stay affine. ``params`` are the
    outer program's."""
    from .segments import find_segments  # (detection; imported on use)

    body = loop.body
    if body.n_ops < min_ops:
        return None
    groups: dict[tuple[int, int], dict[int, int]] = {}  # (param, c1) -> c0 -> body slot
    scalars: list[int] = []
    for k, r in enumerate(loop.reads):
        if (
            type(r) is Arg
            and params[r.param].size is not None
            and isinstance(r.index.c0, int)
            and isinstance(r.index.c1, int)
            and r.index.c0 >= 0
        ):
            groups.setdefault((r.param, r.index.c1), {})[r.index.c0] = body.inputs[k]
        else:
            scalars.append(k)
    nodes = list(body.nodes)
    inputs: list[int] = []
    params: list[Param] = []
    sources: list[tuple] = []
    for (p, c1), elems in groups.items():
        size = max(elems) + 1
        if size > 4 * len(elems) + 16:  # mostly holes: not worth an array
            scalars += [
                k
                for k, r in enumerate(loop.reads)
                if type(r) is Arg and (r.param, r.index.c1) == (p, c1)
            ]
            continue
        for e in range(size):
            if e in elems:
                inputs.append(elems[e])
            else:  # an element the body does not read
                inputs.append(len(nodes))
                nodes.append(Node(INPUT))
        params.append(Param(f"a{len(params)}", size))
        sources.append(("array", p, c1))
    for k in sorted(scalars):
        inputs.append(body.inputs[k])
        params.append(Param(f"a{len(params)}", None))
        sources.append(("read", k))
    # inputs and constants first (detection never folds a span holding an input,
    # and the body made its inputs where they were first read)
    consts = [j for j, nd in enumerate(nodes) if nd.op == CONST]
    ops = [j for j, nd in enumerate(nodes) if nd.op != CONST and nd.op != INPUT]
    order = inputs + consts + ops
    where = {old: new for new, old in enumerate(order)}
    moved = [
        nodes[j]
        if not nodes[j].args
        else nodes[j]._replace(args=tuple(where[a] for a in nodes[j].args))
        for j in order
    ]
    tape = Tape(
        moved,
        list(range(len(inputs))),
        [where[o] for o in body.outputs],
        [g._replace(a=where[g.a], b=where[g.b]) for g in body.guards],
    )
    try:
        segments = find_segments(tape, params)
        if not segments:
            return None
        program = build(tape, segments, params, "body")
    except (ValueError, NotImplementedError):
        return None
    if any(type(r) is Column for it in program.items if type(it) is Loop for r in it.reads):
        return None
    if program.statements > body.n_ops // 2:
        return None
    return Nested(program, sources)


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
                lines.append(f"    b{j} = {node.op.name}({args})")
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
    return repr(node.value) if node.op == CONST else f"b{a}"


# ------------------------------------------------------------------ building


def build(
    tape: Tape,
    segments: Sequence[Segment],
    params: Sequence[Param] | None = None,
    name: str = "f",
) -> Program:
    """The program of ``tape`` with each of ``segments`` folded into a loop.

    ``params`` say which argument each input reads (default: one flat array
    ``x``). The segments must repeat exactly (as ``find_segments`` returns
    them); a segment that does not is refused with a ``ValueError``.
    """
    nodes = tape.nodes
    n = len(nodes)
    if params is None:
        params = [Param("x", len(tape.inputs))]
    params = list(params)
    sizes = [1 if p.size is None else p.size for p in params]
    if sum(sizes) != len(tape.inputs):
        raise ValueError(
            f"the parameters hold {sum(sizes)} values but the tape has {len(tape.inputs)} inputs"
        )
    # where each slot's value lives in the program: (kind, item or param, index)
    item_of = np.full(n, -1, np.int64)  # -1: an input or a constant
    index_of = np.zeros(n, np.int64)
    param_of = np.full(n, -1, np.int64)
    inputs = np.asarray(tape.inputs, np.int64)
    param_of[inputs] = np.repeat(np.arange(len(sizes)), sizes)
    index_of[inputs] = np.concatenate([np.arange(s) for s in sizes] or [[]]).astype(np.int64)
    is_const = np.fromiter((nd.op == CONST for nd in nodes), bool, n)
    guards_at: dict[int, list[Guard]] = {}
    outer_guards: list[Guard] = []

    items: list[Item] = []
    spans: list[tuple[int, int, Segment | None]] = []
    pos = 0
    for s in sorted(segments, key=lambda s: s.start):
        if s.start < pos or s.stop > n or s.reps < 1 or s.size < 1:
            raise ValueError(f"segment {s} overlaps another or does not fit the tape")
        if pos < s.start:
            spans.append((pos, s.start, None))
        spans.append((s.start, s.stop, s))
        pos = s.stop
    if pos < n:
        spans.append((pos, n, None))
    in_loop = np.zeros(n, bool)
    for lo, hi, s in spans:
        if s is not None:
            in_loop[lo:hi] = True
    for g in tape.guards:  # checked where its last computed operand is (as detection does)
        computed = [a for a in (g.a, g.b) if not is_const[a]]
        if computed and in_loop[max(computed)]:
            guards_at.setdefault(max(computed), []).append(g)
        else:
            outer_guards.append(g)

    def ref(slot: int) -> Ref:
        if is_const[slot]:
            return Lit(nodes[slot].value)
        if param_of[slot] >= 0:
            return Arg(int(param_of[slot]), Affine(int(index_of[slot])))
        if item_of[slot] < 0:
            raise ValueError(f"slot {slot} is read before it is computed")
        return At(int(item_of[slot]), Affine(int(index_of[slot])))

    for lo, hi, s in spans:
        k = len(items)
        if s is None:
            block = Block([], [])
            for j in range(lo, hi):
                nd = nodes[j]
                if isinstance(nd.op, str):
                    continue
                block.nodes.append((nd.op, tuple(ref(a) for a in nd.args)))
                item_of[j], index_of[j] = k, len(block.slots)
                block.slots.append(j)
            if block.nodes:
                items.append(block)
            continue
        items.append(_loop(tape, s, ref, is_const, guards_at))
        item_of[lo:hi] = k
        index_of[lo:hi] = np.arange(hi - lo)
    # each distinct check once (a loop that tests a value it does not change, ``if
    # c > 0.5: break``, records the same guard at every repetition)
    checks: dict[tuple, str] = {}
    for g in outer_guards:
        checks.setdefault((g.cmp, ref(g.a), ref(g.b), g.expected), g.where)
    # and a chain of them (``max(x[i], 0.0)`` for each i) as loops
    guards, where, guard_loops = fold_guards(checks)
    outputs = [ref(o) for o in tape.outputs]
    return Program(params, items, outputs, guards, name, where, guard_loops)


def _loop(tape: Tape, s: Segment, ref, is_const: np.ndarray, guards_at: dict) -> Loop:
    """The loop of segment ``s``: its body tape and what each body input reads."""
    nodes, k, start = tape.nodes, s.size, s.start
    reads: list = []
    read_slot: dict = {}
    body: list[Node] = []
    positions: list[int | None] = [None] * k
    consts: dict[float, int] = {}
    body_inputs: list[int] = []

    def operand(slot_at) -> int:
        """The body slot of an operand that reads ``slot_at(q)`` in repetition q."""
        a0, a1 = slot_at(0), slot_at(1 if s.reps > 1 else 0)
        if s.reps > 1 and a0 < start <= a1 < start + k and not is_const[a1]:
            r = ("prev", a1 - start, ref(a0))  # a Prev once the body slot is known
        elif is_const[a0]:
            vals = [nodes[slot_at(q)].value for q in range(s.reps)]
            if all(v == vals[0] for v in vals):
                if vals[0] not in consts:
                    consts[vals[0]] = len(body)
                    body.append(Node(CONST, (), vals[0]))
                return consts[vals[0]]
            r = Column(tuple(vals))
        elif a0 >= start:
            return positions[a0 - start]  # a value of the same repetition
        else:
            r0, r1 = ref(a0), ref(a1)
            if type(r0) is not type(r1) or (r0.param if type(r0) is Arg else r0.item) != (
                r1.param if type(r1) is Arg else r1.item
            ):
                raise ValueError(f"segment {s}: slot {a0} is read unlike across repetitions")
            index = Affine(r0.index.c0, r1.index.c0 - r0.index.c0)
            r = Arg(r0.param, index) if type(r0) is Arg else At(r0.item, index)
        if r not in read_slot:
            read_slot[r] = len(body)
            body_inputs.append(len(body))
            body.append(Node(INPUT))
            reads.append(r)
        return read_slot[r]

    body_guards: list[Guard] = []
    for p in range(k):
        j = start + p
        nd = nodes[j]
        if is_const[j]:
            continue
        if nd.op == INPUT:
            raise ValueError(f"segment {s} holds an input")
        args = tuple(operand(lambda q, c=c: nodes[j + q * k].args[c]) for c in range(len(nd.args)))
        positions[p] = len(body)
        body.append(Node(nd.op, args))
        for gi, g in enumerate(guards_at.get(j, ())):
            ga = operand(lambda q, gi=gi: guards_at[j + q * k][gi].a)
            gb = operand(lambda q, gi=gi: guards_at[j + q * k][gi].b)
            body_guards.append(Guard(g.cmp, ga, gb, g.expected, g.where))
    reads = [Prev(positions[r[1]], r[2]) if type(r) is tuple else r for r in reads]
    outputs = [b for b in positions if b is not None]
    names = [f"in{q}" for q in range(len(reads))]
    return Loop(
        start, k, s.reps, Tape(body, body_inputs, outputs, body_guards, names), reads, positions
    )


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
