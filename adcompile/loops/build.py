"""Building a loop program from a tape and the segments found on it.

- ``build(tape, segments, params)``: each segment becomes a :class:`~.ir.Loop`
  whose body is one repetition's tape and whose reads are affine in the
  repetition; the rest become :class:`~.ir.Block` items; guards outside loops that
  advance together fold into :class:`~.ir.GuardLoop` (``fold_guards``).
- ``nest(loop, params)``: a long loop body folded in turn (a loop inside a loop).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir.tape import CONST, INPUT, Guard, Node, Param, Tape
from .ir import (
    Affine,
    Arg,
    At,
    Block,
    Column,
    GuardLoop,
    Item,
    Lit,
    Loop,
    Nested,
    Prev,
    Program,
    Ref,
)
from .segments import Segment

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
    spans = _spans(segments, n)
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
                if isinstance(nodes[j].op, str):
                    continue
                block.nodes.append((nodes[j].op, tuple(ref(a) for a in nodes[j].args)))
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


def _spans(segments: Sequence[Segment], n: int) -> list[tuple[int, int, Segment | None]]:
    """The tape's ``n`` slots cut into spans, in order: each segment's, and the
    straight-line ones between them (``None``); ValueError when segments overlap."""
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
    return spans


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
