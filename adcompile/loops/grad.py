"""Reverse mode on the loop IR: a loop's adjoint is a loop, built once from its body.

``grad(program, wrt)`` takes a folded primal :class:`~adcompile.loops.ir.Program`
and returns a :class:`GradProgram`: the forward program as it is, and for each
item that the output depends on, the *vector-Jacobian product* of its body,
a small tape built once by ``reverse.grad_tape`` on that body (n
repetitions of a loop share it). Run backwards over the repetitions, it
takes the cotangents of what a repetition computed and gives those of what
it read, which are then added where the read came from:

- an argument element ``x[c0 + c1*i]``: the gradient at that index;
- a value of an earlier item: that item's adjoint at that index;
- ``prev``, the body's own value of the previous repetition: carried to the
  repetition before (the first repetition's goes to the ``prev``'s initial
  value);
- a literal or a column of constants: nowhere.

(A literal that depends on the batch length, an ``NFloat``, stays a read in
a block's body rather than a constant, so that the vjp reads it as it is.)

A straight-line block is reversed the same way, as one repetition.

The vjp tape's inputs are the body's reads, then the cotangents of the
positions that receive one (``Adjoint.cts``); its outputs are the
cotangents of the reads that pass one on (``Adjoint.routes``). It reads the
body's forward values at the same repetition, which the code generator
loads from where the forward loop stored them.

:meth:`GradProgram.run` is the reference interpreter; it agrees with the
unrolled ``grad_tape`` to rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..diff.reverse import grad_tape
from ..ir.ops import OPS, Op
from ..ir.passes import prune, zero_flow
from ..ir.tape import CONST, INPUT, Guard, Node, Tape, forward_sweep
from .ir import Arg, At, Block, Lit, Loop, NFloat, Prev, Program, Read, reader

_MUL, _ADD = OPS["mul"], OPS["add"]


@dataclass
class Unit:
    """An item of a program as a body tape run ``trips`` times (a block: once).

    ``positions[p]`` is the body slot of the item's value ``p`` (None for a
    constant there); ``reads[k]`` is what body input ``k`` reads.
    """

    item: int
    trips: int
    body: Tape
    reads: list[Read]
    positions: list[int | None]
    loop: bool

    @property
    def size(self) -> int:
        return len(self.positions)


@dataclass
class Adjoint:
    """The reverse of one unit (see the module doc)."""

    vjp: Tape
    cts: list[int]  # positions whose cotangent is a vjp input (after the reads)
    routes: list[int]  # reads whose cotangent is a vjp output, in order
    primal: dict[int, int]  # vjp slot -> the body slot whose forward value it is
    uses: set[int]  # body slots whose forward values the vjp reads

    def zero_exit(
        self, carried: set[int], tries: int = 8, min_saved: int = 16
    ) -> tuple[int, list] | None:
        """A vjp slot whose value 0 makes the rest of a repetition's reverse add
        nothing: every output (cotangent of read ``routes[k]``) is then 0, or,
        for the reads in ``carried`` (a ``prev``'s), a cotangent coming in or a
        slot computed before it.

        Products, quotients and negations of zero are zero, and ``c + 0`` is
        ``c`` (nan and inf times zero aside, as in a hand-written backward pass
        that skips an example whose cotangent is zero: the hinge of a
        classifier that is right with margin). Returns ``(slot, outs)`` with
        ``outs[k]`` None (zero) or the slot it equals; None when no slot of the
        first ``tries`` products qualifies, or when fewer than ``min_saved``
        operations would be skipped (a test per repetition then costs more).
        """
        vjp, nodes = self.vjp, self.vjp.nodes
        cands = [  # products, quotients, negations: 0 where an operand is
            j
            for j, nd in enumerate(nodes)
            if j not in self.primal and isinstance(nd.op, Op) and nd.op.linear_in
        ][:tries]
        cts = set(vjp.inputs[len(vjp.inputs) - len(self.cts) :])
        later = np.cumsum([j not in self.primal and nd.args != () for j, nd in enumerate(nodes)])
        for s in cands:
            if later[-1] - later[s] < min_saved:
                break
            zero, same = zero_flow(nodes, s, self.primal.keys())  # (forward values stay)
            outs: list = []
            for k, o in zip(self.routes, vjp.outputs):
                if zero[o]:
                    outs.append(None)
                elif k in carried and (same[o] in cts or same[o] < s or same[o] in self.primal):
                    outs.append(same[o])
                else:
                    break
            else:
                return s, outs
        return None


@dataclass
class GradProgram:
    """A program and the reverse of each item the output depends on.

    Its outputs are those of ``reverse.grad_tape`` on the unrolled tape: the
    value, then the gradient for each element of the parameters ``wrt``.
    """

    program: Program
    units: list[Unit]
    adjoints: list[Adjoint | None]
    wrt: list[int]  # parameter numbers differentiated
    active: list[np.ndarray]  # per item, which of its values depend on wrt
    seeds: list[int] = field(default_factory=lambda: [0])  # outputs with a cotangent
    # per unit whose body is folded in turn (Loop.inner): the body program's reverse
    inner: dict[int, GradProgram] = field(default_factory=dict)

    @property
    def statements(self) -> int:
        """Primitive statements of the forward and the reverse (each body once)."""
        n = self.program.statements
        for u, a in zip(self.units, self.adjoints):
            if a is None:
                continue
            inner = self.inner.get(u.item)
            n += a.vjp.n_ops if inner is None else inner.statements - inner.program.statements
        return n

    def run(self, args: Sequence[float | np.ndarray]) -> tuple[bool, list[float]]:
        """(whether every guard holds, [value, gradient...]), by interpreting."""
        return _run(self, args)

    def __str__(self) -> str:
        lines = [str(self.program), "reverse:"]
        for u, adj in reversed(list(zip(self.units, self.adjoints))):
            if adj is None:
                continue
            what = f"L{u.item}" if u.loop else f"B{u.item}"
            rng = f"for i in reversed(range({u.trips}))" if u.loop else "once"
            lines.append(
                f"  {what}: {rng}, {adj.vjp.n_ops} operations: cotangents of "
                f"positions {adj.cts} -> reads {adj.routes}"
            )
        return "\n".join(lines)


# ------------------------------------------------------------------ building


def units(program: Program) -> list[Unit]:
    """Every item as a :class:`Unit` (a block becomes a body run once)."""
    out = []
    for n, item in enumerate(program.items):
        if type(item) is Loop:
            reads, positions = list(item.reads), list(item.positions)
            out.append(Unit(n, item.trips, item.body, reads, positions, True))
        else:
            out.append(_block_unit(n, item))
    return out


def _block_unit(n: int, block: Block) -> Unit:
    nodes: list[Node] = []
    inputs: list[int] = []
    reads: list[Read] = []
    seen: dict = {}
    positions: list[int | None] = []

    def slot(r) -> int:
        if type(r) is At and r.item == n:
            return positions[r.index.c0]
        key = (type(r), r)
        if key not in seen:
            seen[key] = len(nodes)
            if type(r) is Lit and type(r.value) is not NFloat:
                nodes.append(Node(CONST, (), r.value))
            else:
                inputs.append(len(nodes))
                nodes.append(Node(INPUT))
                reads.append(r)
        return seen[key]

    for op, refs in block.nodes:
        args = tuple(slot(r) for r in refs)
        positions.append(len(nodes))
        nodes.append(Node(op, args))
    outputs = [p for p in positions if p is not None]
    body = Tape(nodes, inputs, outputs, [], [f"in{k}" for k in range(len(inputs))])
    return Unit(n, 1, body, reads, positions, False)


def _reads_position(program: Program, r: At) -> list[int]:
    """The positions of item ``r.item`` that read ``r`` may take."""
    item = program.items[r.item]
    size = item.size if type(item) is Loop else len(item.nodes)
    if type(item) is Loop and r.index.c1 % size == 0:
        return [r.index.c0 % size]
    if type(item) is Block and r.index.c1 == 0:
        return [r.index.c0]
    return list(range(size))


def grad(
    program: Program, wrt: Sequence[int] | None = None, seeds: Sequence[int] = (0,)
) -> GradProgram:
    """The reverse of ``program`` for its first output, by parameters ``wrt``
    (parameter numbers; all by default). ``seeds``: the outputs whose cotangents
    come in (a loop body folded in turn has several)."""
    wrt = list(range(len(program.params))) if wrt is None else list(wrt)
    us = units(program)
    active: list[np.ndarray] = []

    def read_active(r: Read) -> bool:
        if type(r) is Arg:
            return r.param in wrt
        if type(r) is At:
            return bool(any(active[r.item][p] for p in _reads_position(program, r)))
        return False  # Lit, Column; Prev is decided with its loop

    act_ins: list[list[bool]] = []
    for u in us:
        act_in = [False if type(r) is Prev else read_active(r) for r in u.reads]
        while True:
            act = _active_body(u.body, act_in)
            changed = False
            for k, r in enumerate(u.reads):
                if type(r) is Prev and not act_in[k] and (act[r.slot] or read_active(r.init)):
                    act_in[k] = changed = True
            if not changed:
                break
        act_ins.append(act_in)
        active.append(np.array([j is not None and act[j] for j in u.positions], bool))

    # which positions receive a cotangent from outside their repetition
    receives = [np.zeros(u.size, bool) for u in us]
    refs = [program.outputs[q] for q in seeds]
    for u in us:
        refs += [r.init if type(r) is Prev else r for r in u.reads]
    for r in refs:
        if type(r) is At and read_active(r):
            receives[r.item][_reads_position(program, r)] = True
    adjoints: list[Adjoint | None] = []
    for u, act, rec, act_in in zip(us, active, receives, act_ins):
        carried = {r.slot for r in u.reads if type(r) is Prev}
        cts = [p for p, j in enumerate(u.positions) if act[p] and (rec[p] or j in carried)]
        routes = [k for k, r in enumerate(u.reads) if act_in[k]]
        if not cts or not routes:
            adjoints.append(None)
            continue
        adjoints.append(_vjp(u, cts, routes))
    gp = GradProgram(program, us, adjoints, wrt, active, list(seeds))
    for u, adj, act_in in zip(us, adjoints, act_ins):
        nested = program.items[u.item].inner if u.loop else None
        if nested is None or adj is None:
            continue
        outs = [p for p, j in enumerate(u.positions) if j is not None]
        vwrt = [
            v
            for v, src in enumerate(nested.sources)
            if (src[0] == "array" and src[1] in wrt) or (src[0] == "read" and act_in[src[1]])
        ]
        vseeds = [q for q, p in enumerate(outs) if p in adj.cts]
        gp.inner[u.item] = grad(nested.program, vwrt, vseeds)
    return gp


def _active_body(body: Tape, act_in: list[bool]) -> list[bool]:
    act = [False] * len(body.nodes)
    for k, j in enumerate(body.inputs):
        act[j] = act_in[k]
    for j, node in enumerate(body.nodes):
        if node.args and not act[j]:
            act[j] = any(act[a] for a in node.args)
    return act


def _vjp(u: Unit, cts: list[int], routes: list[int]) -> Adjoint:
    """The body's vjp: d(sum_p ct_p * value_p) / d(reads routes)."""
    body = u.body
    nodes = list(body.nodes)
    n = len(nodes)
    ct_slots = list(range(n, n + len(cts)))
    nodes += [Node(INPUT)] * len(cts)
    total = -1
    for p, c in zip(cts, ct_slots):
        nodes.append(Node(_MUL, (u.positions[p], c)))
        if total >= 0:
            nodes.append(Node(_ADD, (total, len(nodes) - 1)))
        total = len(nodes) - 1
    names = [f"in{k}" for k in range(len(body.inputs))] + [f"ct{p}" for p in cts]
    wrapper = Tape(nodes, body.inputs + ct_slots, [total], [], names)
    g = grad_tape(wrapper, wrt=routes)
    vjp = prune(g, outputs=g.outputs[1:], guards=[])
    primal = {}
    for j, name in enumerate(vjp.slot_names or ()):
        if name[0] == "v" and int(name[1:]) < n:
            primal[j] = int(name[1:])
    read = {a for s, nd in enumerate(vjp.nodes) if s not in primal for a in nd.args}
    read |= set(vjp.outputs)
    uses = {j for s, j in primal.items() if s in read}
    return Adjoint(vjp, cts, routes, primal, uses)


# ------------------------------------------------------------------ the reference


def _run(gp: GradProgram, args: Sequence[float | np.ndarray]) -> tuple[bool, list[float]]:
    program = gp.program
    flat = [np.atleast_1d(np.asarray(a, dtype=np.float64)).ravel() for a in args]
    values: list[np.ndarray] = []  # per item, its values (trips * size)
    body_vals: list[np.ndarray] = []  # per unit, every body slot per repetition
    ok = True
    read = reader(flat, values)
    for u in gp.units:
        body = u.body
        bv = np.zeros((u.trips, len(body.nodes)))
        for i in range(u.trips):
            ins = []
            for r in u.reads:
                if type(r) is Prev:
                    ins.append(read(r.init, i) if i == 0 else bv[i - 1, r.slot])
                else:
                    ins.append(read(r, i))
            vals = forward_sweep(body, ins)
            bv[i] = vals
            ok = ok and all(g.holds(vals) for g in body.guards)
        out = np.zeros((u.trips, u.size))
        for p, j in enumerate(u.positions):
            if j is not None:
                out[:, p] = bv[:, j]
        values.append(out.ravel())
        body_vals.append(bv)
    for cmp, a, b, expected in program.guards:
        ok = ok and Guard(cmp, 0, 1, expected).holds([read(a, 0), read(b, 0)])
    ok = ok and all(gl.holds(read) for gl in program.guard_loops)

    adj = [np.zeros_like(v) for v in values]
    grads = [np.zeros_like(f) for f in flat]

    def add(r: Read, i: int, c: float) -> None:
        if type(r) is Arg:
            grads[r.param][r.index.at(i)] += c
        elif type(r) is At:
            adj[r.item][r.index.at(i)] += c

    add(program.outputs[0], 0, 1.0)
    for u, a in reversed(list(zip(gp.units, gp.adjoints))):
        if a is None:
            continue
        carry = {k: 0.0 for k, r in enumerate(u.reads) if type(r) is Prev}
        for i in range(u.trips - 1, -1, -1):
            ct = [adj[u.item][i * u.size + p] for p in a.cts]
            for q, p in enumerate(a.cts):
                j = u.positions[p]
                ct[q] += sum(c for k, c in carry.items() if u.reads[k].slot == j)
            ins = [body_vals[u.item][i, j] for j in u.body.inputs]
            outs = forward_sweep(a.vjp, ins + ct)
            for k in carry:
                carry[k] = 0.0
            for k, o in zip(a.routes, a.vjp.outputs):
                r = u.reads[k]
                if type(r) is Prev:
                    carry[k] = outs[o]
                else:
                    add(r, i, outs[o])
        for k, c in carry.items():
            add(u.reads[k].init, 0, c)
    grad = [g for p in gp.wrt for g in grads[p]]
    value = read(program.outputs[0], 0)
    return ok, [value, *grad]


__all__ = ["Adjoint", "GradProgram", "Unit", "grad", "units"]
