"""An array program (``loops.array_scan.scan``) laid out for the loop-nest printer.

``emit.array_loops`` prints one flat array tape in which each loop's body stands
once, between the nodes before and after it (a :class:`Span` says where, and
what the loop code around it does). ``lay_out`` makes that tape from the
program, and the names of what the loop IR holds as data:

- a carry (``Prev``) is ``p_v12``: the body node's value of the previous step
  (before the first step: the value it starts from);
- a read of a loop at a repetition other than its last is a row of the array
  that keeps each step's value: ``S_v30[(3 + r0)]``, or ``S_v30[4]``;
- a number that moves with the step (``Column``) is ``(0.5 + 1.0 * r0)``, and an
  index's int that does (``Loop.moving``) is written the same way.

Reads of a loop at its last repetition read the body's node as the loop left it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.arrays import ArrayTape
from ..ir.loop_forms import affine_text
from ..ir.tape import INPUT, Node
from ..loops.ir import Affine, Arg, Block, Column, Loop, Prev, Program, Read


@dataclass
class Span:
    """One loop of the laid-out tape: body nodes ``first`` to ``last`` (exclusive)
    run ``reps`` times, the step named ``var``. ``carries``: (name, node before the
    loop, body node): ``name`` holds the body node's value of the previous step,
    the node's before the first. ``stacks``: (name, body node): ``name[r]`` keeps
    step r's value."""

    first: int
    last: int
    reps: int
    var: str
    carries: list[tuple[str, int, int]] = field(default_factory=list)
    stacks: list[tuple[str, int]] = field(default_factory=list)


def lay_out(tape: ArrayTape, program: Program) -> tuple[ArrayTape, list[Span]]:
    """The flat tape of ``program`` (made from ``tape``: its shapes and names), and
    its loops (module doc)."""
    return _Layout(tape, program).tape()


class _Layout:
    def __init__(self, tape: ArrayTape, program: Program) -> None:
        self.source, self.program = tape, program
        self.nodes: list[Node] = []
        self.shapes: list[tuple] = []
        self.booleans: list[bool] = []
        self.names: list[str] = []
        self.slots: list[int | None] = []  # the tape slot each node stands for
        self.placed: dict[tuple[int, int], int] = {}  # (item, statement or body slot) -> node
        self.stacked: dict[tuple[int, int], str] = {}  # (loop item, position) -> its stack
        self.span: dict[int, Span] = {}  # loop item -> its span

    def _add(self, node: Node, shape: tuple, boolean: bool, name: str, slot: int | None) -> int:
        self.nodes.append(node)
        self.shapes.append(tuple(shape))
        self.booleans.append(boolean)
        self.names.append(name)
        self.slots.append(slot)
        return len(self.nodes) - 1

    def tape(self) -> tuple[ArrayTape, list[Span]]:
        program, spans, inputs = self.program, [], {}
        for n, item in enumerate(program.items):
            if type(item) is Block:
                for k, (op, refs) in enumerate(item.nodes):
                    slot = item.slots[k]
                    node = self.source.nodes[slot]
                    if op == INPUT:
                        inputs[refs[0].param] = len(self.nodes)
                    args = tuple(self._read(r) for r in refs) if not isinstance(op, str) else ()
                    self.placed[n, k] = self._add(
                        node._replace(args=args),
                        self.source.shapes[slot],
                        self.source.booleans[slot],
                        self.source.name(slot),
                        slot,
                    )
                continue
            self.span[n] = self._loop(n, item, f"r{len(spans)}")
            spans.append(self.span[n])
        outputs = [self._read(o) for o in program.outputs]
        flat = ArrayTape(
            self.nodes,
            [inputs[p] for p in range(len(inputs))],
            outputs,
            self.source.names,
            self.shapes,
            self.booleans,
            slot_names=self.names,
        )
        start = program.adjoint_from
        if start is not None:
            after = (j for j, s in enumerate(self.slots) if s is not None and s >= start)
            flat.adjoint_from = min(after, default=None)
        for (n, q), name in self.stacked.items():
            loop = program.items[n]
            self.span[n].stacks.append((name, self.placed[n, loop.positions[q]]))
        return flat, spans

    def _loop(self, n: int, loop: Loop, var: str) -> Span:
        """Loop item ``n``'s body laid out, its step named ``var``."""
        body = loop.body
        span = Span(len(self.nodes), 0, loop.trips, var)
        slot_of = {j: loop.slot(p) for p, j in enumerate(loop.positions) if j is not None}
        reads = dict(zip(body.inputs, loop.reads))
        carried: list[tuple[str, int, int]] = []  # (name, node before, body slot)
        for j, node in enumerate(body.nodes):
            slot = slot_of.get(j)
            if j in reads:
                read = reads[j]
                if type(read) is Prev:
                    init = self._read(read.init)
                    name = f"p_{self.source.name(slot_of[read.slot])}"
                    carried.append((name, init, read.slot))
                elif type(read) is Column:
                    v, step = read.values[0], read.values[1] - read.values[0]
                    name = f"({v!r} + {step!r} * {var})"
                else:
                    self.placed[n, j] = self._read(read, var)
                    continue
                made = Node(INPUT)
            else:
                op = node.op
                if j in loop.moving:  # (its ints as the step's code: ``xs[(3 + r0),]``)
                    index = [_text(x, var) for x in loop.moving[j]]
                    op = op.remake(tuple(index))
                args = tuple(self.placed[n, a] for a in node.args)
                made, name = node._replace(op=op, args=args), body.name(j)
            self.placed[n, j] = self._add(made, body.shapes[j], body.booleans[j], name, slot)
        span.last = len(self.nodes)
        span.carries = [(name, init, self.placed[n, j]) for name, init, j in carried]
        return span

    def _read(self, r: Read, var: str | None = None) -> int:
        """The node a read reads: a statement, a loop's body node as the loop left
        it, or a new input naming one row of its stack (``S_v30[(3 + r0)]``)."""
        if type(r) is Arg:
            raise TypeError("an array program reads its arguments as statements")
        item = self.program.items[r.item]
        if type(item) is Block:
            return self.placed[r.item, r.index.c0]
        size, q = item.size, r.index.c0 % item.size
        rep = Affine(r.index.c0 // size, r.index.c1 // size)
        j = item.positions[q]
        if rep.c1 == 0 and rep.c0 == item.trips - 1:
            return self.placed[r.item, j]
        stack = self.stacked.setdefault((r.item, q), f"S_{self.source.name(item.slot(q))}")
        row = affine_text(rep.c0, rep.c1, var) if rep.c1 else str(rep.c0)
        body = item.body
        return self._add(Node(INPUT), body.shapes[j], body.booleans[j], f"{stack}[{row}]", None)


def _text(x: object, var: str) -> object:
    return affine_text(x.c0, x.c1, var) if isinstance(x, Affine) else x
