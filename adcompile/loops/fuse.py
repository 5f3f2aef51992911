"""Loop fusion: adjacent loops of one trip count run as one loop.

NumPy-style code makes one loop per array operation (``x[1:] - x[:-1] ** 2``
is a loop of ``**`` and then a loop of ``-``), and a gradient tape one per
adjoint operation. :func:`fuse` merges two adjacent loops of the same trip
count into one whose repetition ``i`` runs the first loop's repetition ``i``
and then the second's, when that order computes the same values:

- the second loop reads the first only at the same repetition (those reads
  become operands inside the fused body), never at another one, and starts no
  loop-carried value from it;
- every other reader (later items, outputs, guards) reads each of the two at
  whole repetitions, so that its reads stay affine in the fused loop.

Fusing keeps the operations and their order within a repetition, so the
values are the same, bit for bit. A fused loop keeps the tape slots it came
from (``Loop.parts``), for the names of the generated code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..ir.tape import Tape
from .ir import Affine, At, Block, GuardLoop, Loop, Prev, Program, Read, Ref


def fuse(program: Program) -> Program:
    """``program`` with each run of fusable adjacent loops merged into one loop
    (the program itself, changed in place, is returned)."""
    n = 0
    while n + 1 < len(program.items):
        a, b = program.items[n], program.items[n + 1]
        fused = _pair(program, n) if type(a) is Loop and type(b) is Loop else None
        if fused is None:
            n += 1
            continue
        sa, sb, size = a.size, b.size, fused.size

        def move(r: At, n: int = n, sa: int = sa, sb: int = sb, size: int = size) -> At:
            if r.item < n:
                return r
            if r.item > n + 1:
                return At(r.item - 1, r.index)
            k, off = (sa, 0) if r.item == n else (sb, sa)
            c0, c1 = r.index.c0, r.index.c1
            return At(n, Affine(c0 // k * size + off + c0 % k, c1 // k * size))

        program.items[n : n + 2] = [fused]
        _map_refs(program, move, skip=n)
    return program


def _aligned(program: Program, n: int) -> bool:
    """Whether every read of items ``n`` and ``n + 1`` (but the second's reads of
    the first) is at whole repetitions."""
    sizes = {n: program.items[n].size, n + 1: program.items[n + 1].size}
    return all(r.index.c1 % sizes[r.item] == 0 for r in _refs(program, n + 1) if r.item in sizes)


def _pair(program: Program, n: int) -> Loop | None:
    """Loops ``n`` and ``n + 1`` as one loop, or None where they cannot be."""
    a, b = program.items[n], program.items[n + 1]
    if a.trips != b.trips or a.inner is not None or b.inner is not None:
        return None
    if not isinstance(a.trips, int) or a.trips < 2:
        return None
    inside: dict[int, int] = {}  # b's input slot -> a's body slot (the same repetition)
    for k, r in enumerate(b.reads):
        init = r.init if type(r) is Prev else None
        if type(init) is At and init.item == n:
            return None  # a carried value starting from the first loop's values
        if type(r) is At and r.item == n:
            c0, c1 = r.index.c0, r.index.c1
            if c1 != a.size or not 0 <= c0 < a.size or a.positions[c0] is None:
                return None
            inside[b.body.inputs[k]] = a.positions[c0]
    if not _aligned(program, n):
        return None
    body, reads = _merge(a, b, inside)
    parts = (a.parts or ((a.start, a.size),)) + (b.parts or ((b.start, b.size),))
    positions = a.positions + [None if j is None else body[1][j] for j in b.positions]
    tape = Tape(
        body[0],
        body[2],
        [j for j in positions if j is not None],
        a.body.guards + [g._replace(a=body[1][g.a], b=body[1][g.b]) for g in b.body.guards],
        [f"in{q}" for q in range(len(reads))],
    )
    return Loop(a.start, a.size + b.size, a.trips, tape, reads, positions, None, parts)


def _merge(a: Loop, b: Loop, inside: dict[int, int]) -> tuple[tuple, list[Read]]:
    """The fused body's nodes, b's slot -> fused slot, the fused body's inputs, and
    what each input reads."""
    nodes = list(a.body.nodes)
    new: dict[int, int] = dict(inside)
    # a read both loops make is one input of the fused body
    read_at = {r: j for r, j in zip(a.reads, a.body.inputs) if type(r) is not Prev}
    for r, j in zip(b.reads, b.body.inputs):
        if j not in new and type(r) is not Prev and r in read_at:
            new[j] = read_at[r]
    inside = dict(new)
    for j, nd in enumerate(b.body.nodes):
        if j in inside:
            continue
        new[j] = len(nodes)
        nodes.append(nd._replace(args=tuple(new[x] for x in nd.args)) if nd.args else nd)
    inputs = list(a.body.inputs)
    reads: list[Read] = list(a.reads)
    for k, j in enumerate(b.body.inputs):
        if j in inside:
            continue
        r = b.reads[k]
        inputs.append(new[j])
        reads.append(Prev(new[r.slot], r.init) if type(r) is Prev else r)
    return (nodes, new, inputs), reads


def _refs(program: Program, skip: int) -> Iterator[At]:
    """Every read of an item's value (``At``) in ``program``, but item ``skip``'s."""
    for m, item in enumerate(program.items):
        if m != skip:
            reads = (
                [r for _, refs in item.nodes for r in refs]
                if type(item) is Block
                else [r.init if type(r) is Prev else r for r in item.reads]
            )
            yield from (r for r in reads if type(r) is At)
    ends = [r for _, x, y, _ in program.guards for r in (x, y)]
    ends += [r for g in program.guard_loops for r in (g.a, g.b)]
    yield from (r for r in program.outputs + ends if type(r) is At)


def _map_refs(program: Program, fn: Callable[[At], At], skip: int = -1) -> None:
    """Replace each read of an item's value (``At``) in ``program`` by ``fn(read)``,
    but the reads of item ``skip`` (its reads are its own)."""

    def ref(r: Ref) -> Ref:
        return fn(r) if type(r) is At else r

    def read(r: Read) -> Read:
        if type(r) is Prev:
            return Prev(r.slot, ref(r.init))
        return ref(r) if type(r) is At else r

    for m, item in enumerate(program.items):
        if m == skip:
            continue
        if type(item) is Block:
            item.nodes = [(op, tuple(ref(r) for r in refs)) for op, refs in item.nodes]
        else:
            item.reads = [read(r) for r in item.reads]
    program.outputs = [ref(r) for r in program.outputs]
    program.guards = [(c, ref(x), ref(y), e) for c, x, y, e in program.guards]
    program.guard_loops = [
        GuardLoop(g.cmp, ref(g.a), ref(g.b), g.expected, g.trips, g.where)
        for g in program.guard_loops
    ]
