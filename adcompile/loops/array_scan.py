"""Scans: the repeated runs of an array tape lowered into the loop IR.

A Python loop over time steps (``for t in range(200): h = np.tanh(W @ h + U @
xs[t])``) records the same few array nodes once per step, and its adjoint the
same few again, backwards. ``scan`` finds such runs (``reps`` repetitions of
``period`` nodes whose ops, shapes and reads agree) and gives the tape as a
``loops.ir.Program``: each run a :class:`~adcompile.loops.ir.Loop` whose body is
an array tape of one repetition, the nodes between runs
:class:`~adcompile.loops.ir.Block` statements. A body's input reads one of:

- the body's own node of the previous repetition, a *carry* (``h``):
  :class:`~adcompile.loops.ir.Prev`, whose first repetition reads the value
  before the loop (``h0``);
- a node outside the run, the same in every repetition (``W``): an ``At`` of
  its block, or of a loop's last repetition (as the loop left it);
- a node of another run, at a repetition affine in this one's (the adjoint reads
  the forward run's states backwards): an ``At`` whose index advances;
- a number that moves by the same step each repetition (``t + 1.0``): a
  :class:`~adcompile.loops.ir.Column`.

An int index that moves with the step (``xs[t]``) is an
:class:`~adcompile.loops.ir.Affine` in :attr:`Loop.moving`. :func:`run` runs
such a program with NumPy (the reference its loop nests are checked against);
``emit.array_loops`` prints it. Reads only ``ir`` and ``loops.ir``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.arrays import ArrayOp, ArrayTape, evaluate_node
from ..ir.tape import CONST, INPUT, Node, Param
from .ir import Affine, Arg, At, Block, Column, Item, Lit, Loop, Prev, Program, Read, Ref

#: A run is folded from this many repetitions on, of at most ``MAX_PERIOD`` nodes.
MIN_REPS = 4
MAX_PERIOD = 64


@dataclass
class _Run:
    start: int
    period: int
    reps: int

    def holds(self, a: int) -> bool:
        return self.start <= a < self.start + self.period * self.reps

    def where(self, a: int) -> tuple[int, int]:
        """(step, position in the body) of node ``a``."""
        return divmod(a - self.start, self.period)


# ---------------------------------------------------------------- finding runs


def _key(tape: ArrayTape, i: int) -> Any:
    node = tape.nodes[i]
    op, shape = node.op, tape.shapes[i]
    if op == INPUT:
        return ("input", i)
    if op == CONST:
        v = node.value
        if isinstance(v, np.ndarray):
            return ("const", v.shape, v.dtype.str, v.tobytes() if v.size <= 64 else id(v))
        return ("const",)  # (a number: its value may move with the step, ``_signature``)
    if isinstance(op, ArrayOp) and op.index is not None:
        pattern = tuple("#" if isinstance(k, (int, np.integer)) else repr(k) for k in op.index)
        return (op.name.split("[")[0], pattern, shape, tape.booleans[i], len(node.args))
    return (id(op), shape, tape.booleans[i])


def _runs(tape: ArrayTape) -> list[_Run]:
    """The runs to fold: the one covering most nodes first, then the most among the
    rest, and so on; each checked read by read (``_check``)."""
    keys = [_key(tape, i) for i in range(len(tape.nodes))]
    n, taken, runs = len(keys), [False] * len(keys), []
    while True:
        best: _Run | None = None
        for p in range(1, MAX_PERIOD + 1):
            s = 0
            while s + p < n:
                e = s
                while e + p < n and not taken[e + p] and not taken[e] and keys[e] == keys[e + p]:
                    e += 1
                if e - s >= p * (MIN_REPS - 1):
                    run = _check(tape, keys, _Run(s, p, 1 + (e - s) // p))
                    cover = run.period * run.reps if run else 0
                    if run and (best is None or cover > best.period * best.reps):
                        best = run
                s = e + 1
        if best is None:
            return sorted(runs, key=lambda r: r.start)
        runs.append(best)
        for a in range(best.start, best.start + best.period * best.reps):
            taken[a] = True


def _check(tape: ArrayTape, keys: list, run: _Run) -> _Run | None:
    """The longest run from ``run.start`` (or from a step later) of at most
    ``run.reps`` steps whose reads agree step by step (module doc), or None."""
    for skip in (0, 1):
        start, reps = run.start + skip * run.period, run.reps - skip
        sigs = [_signature(tape, _Run(start, run.period, reps), r) for r in range(reps)]
        good = 1
        while good < reps and _same(sigs, good):
            good += 1
        if good >= MIN_REPS and _same(sigs, 0):
            return _Run(start, run.period, good)
    return None


def _signature(tape: ArrayTape, run: _Run, r: int) -> list[tuple]:
    """Step ``r``'s reads: per body node, per argument, ("in", position), ("carry",
    position) or ("out", node); and the ints of a moving index ("index", ints)."""
    base, sig = run.start + r * run.period, []
    for q in range(run.period):
        node = tape.nodes[base + q]
        reads = []
        for a in node.args:
            if base <= a:
                reads.append(("in", a - base))
            elif base - run.period <= a and a >= run.start:
                reads.append(("carry", a - base + run.period))
            elif a >= run.start:
                reads.append(("far",))
            else:
                reads.append(("out", a))
        op = node.op
        if isinstance(op, ArrayOp) and op.index is not None:
            ints = tuple(int(k) for k in op.index if isinstance(k, (int, np.integer)))
            reads.append(("index", ints))
        if op == CONST and not isinstance(node.value, np.ndarray):
            reads.append(("const", float(node.value)))
        sig.append(tuple(reads))
    return sig


def _same(sigs: list[list[tuple]], r: int) -> bool:
    """Whether step ``r`` reads as step 1 does (step 0: a carry of step 1 is a read
    from before the run), numbers that move moving by the same step each time."""
    one = sigs[1] if len(sigs) > 1 else sigs[0]
    for q, reads in enumerate(sigs[r]):
        for k, got in enumerate(reads):
            want = one[q][k]
            if want[0] == "carry" and r == 0:
                if got[0] != "out":
                    return False
                continue
            if got[0] != want[0] or got[0] == "far":
                return False
            if got[0] in ("in", "carry") and got != want:
                return False
            if got[0] in ("out", "index", "const"):
                two = sigs[2][q][k] if len(sigs) > 2 else want
                if two[0] != want[0] or not _affine(want[1], two[1], got[1], r):
                    return False
    return True


def _affine(one: Any, two: Any, got: Any, r: int) -> bool:
    """Whether ``got`` (step r) is ``one + (two - one) * (r - 1)``, element by element."""
    ones, twos, gots = (x if isinstance(x, tuple) else (x,) for x in (one, two, got))
    return len(gots) == len(ones) and all(
        g == a + (b - a) * (r - 1) for a, b, g in zip(ones, twos, gots)
    )


# ---------------------------------------------------------------- the program


def scan(tape: ArrayTape, params: Sequence[Param]) -> Program:
    """``tape`` in the loop IR (module doc): its repeated runs as loops, the rest as
    blocks (one block where it has no runs)."""
    runs = _runs(tape)
    while True:
        try:
            return _Lowering(tape, params, runs).program()
        except _NotFolded:
            runs = []
        except _Trim as trim:  # a read that would leave the run it reads: fewer steps
            run = runs[trim.run]
            if trim.reps < MIN_REPS:
                runs = runs[: trim.run] + runs[trim.run + 1 :]
            else:
                runs[trim.run] = _Run(run.start, run.period, trim.reps)


def run(program: Program, args: Sequence[Any]) -> list[Any]:
    """The outputs of an array program (``scan``) at these arguments, by NumPy, node
    by node and repetition by repetition."""
    args = [np.asarray(a, dtype=float) for a in args]
    values: list[list] = []  # per item: its statements' values, or each repetition's

    def read(r: Read, i: int) -> Any:
        if type(r) is Lit:
            return r.value
        if type(r) is Arg:
            return args[r.param]
        if type(r) is Column:
            return r.values[i]
        item, at = program.items[r.item], r.index.at(i)
        if type(item) is Block:
            return values[r.item][at]
        return values[r.item][at // item.size][at % item.size]

    for item in program.items:
        if type(item) is Block:
            got: list = []
            values.append(got)
            for op, refs in item.nodes:
                vals = [read(ref, 0) for ref in refs]
                got.append(vals[0] if isinstance(op, str) else evaluate_node(op, vals))
            continue
        steps: list[list] = []
        values.append(steps)
        body, vals = item.body, []
        for i in range(item.trips):
            prev, vals = vals, [None] * len(body.nodes)
            for slot, r in zip(body.inputs, item.reads):
                if type(r) is Prev:
                    vals[slot] = read(r.init, 0) if i == 0 else prev[r.slot]
                else:
                    vals[slot] = read(r, i)
            for j, node in enumerate(body.nodes):
                if node.op == CONST:
                    vals[j] = node.value
                elif node.op != INPUT:
                    op = node.op
                    if j in item.moving:
                        op = op.remake(tuple(_at(x, i) for x in item.moving[j]))
                    vals[j] = evaluate_node(op, [vals[a] for a in node.args])
            steps.append([vals[j] for j in item.positions])
    return [read(o, 0) for o in program.outputs]


def _at(x: Any, i: int) -> Any:
    return x.at(i) if isinstance(x, Affine) else x


class _Lowering:
    def __init__(self, tape: ArrayTape, params: Sequence[Param], runs: list[_Run]) -> None:
        self.tape, self.params, self.runs = tape, list(params), runs
        self.items: list[Item] = []
        self.at: dict[int, At] = {}  # a node outside runs -> its statement
        self.loops: dict[int, int] = {}  # run -> its loop's item

    def _run_of(self, a: int) -> int | None:
        return next((k for k, run in enumerate(self.runs) if run.holds(a)), None)

    def program(self) -> Program:
        tape, i = self.tape, 0
        while i < len(tape.nodes):
            k = self._run_of(i)
            if k is None:
                self._statement(i)
                i += 1
                continue
            self._loop(k)
            run = self.runs[k]
            i = run.start + run.period * run.reps
        outputs: list[Ref] = [self._ref(o) for o in tape.outputs]
        return Program(self.params, self.items, outputs, adjoint_from=tape.adjoint_from)

    def _statement(self, i: int) -> None:
        node = self.tape.nodes[i]
        if node.op == INPUT:
            refs: tuple = (Arg(self.tape.inputs.index(i), Affine(0)),)
        elif node.op == CONST:
            refs = (Lit(node.value),)
        else:
            refs = tuple(self._ref(a) for a in node.args)
        if not self.items or type(self.items[-1]) is not Block:
            self.items.append(Block([], []))
        block = self.items[-1]
        block.nodes.append((node.op, refs))
        block.slots.append(i)
        self.at[i] = At(len(self.items) - 1, Affine(len(block.nodes) - 1))

    def _ref(self, a: int, a_next: int | None = None, reader: int | None = None) -> At:
        """What reads node ``a``: where the reader is in run ``reader``, ``a_next`` is
        what its step 1 reads in its place (a read that moves with the step)."""
        k = self._run_of(a)
        moving = a_next is not None and a_next != a
        if k is None:
            if moving:
                raise _NotFolded("a read that moves across nodes of no run")
            return self.at[a]
        run = self.runs[k]
        r, q = run.where(a)
        if not moving:
            return At(self.loops[k], Affine(q + run.period * r))
        r2, q2 = run.where(a_next)
        if q2 != q or not run.holds(a_next):
            raise _NotFolded("a read that moves across the body of another run")
        step, reps = r2 - r, self.runs[reader].reps
        if not 0 <= r + step * (reps - 1) < run.reps:  # (its last steps read outside)
            fits = r // -step + 1 if step < 0 else (run.reps - 1 - r) // step + 1
            raise _Trim(reader, fits)
        return At(self.loops[k], Affine(q + run.period * r, run.period * step))

    def _loop(self, k: int) -> None:
        tape, run = self.tape, self.runs[k]
        body = _Body()
        at: dict[int, int] = {}  # position -> its body slot
        carries: dict[int, tuple[int, At]] = {}  # carried position -> (its input, init)
        one = run.start + run.period  # step 1 (its reads)
        for q in range(run.period):
            i, node, moved = run.start + q, tape.nodes[run.start + q], tape.nodes[one + q]
            args = []
            for a, b in zip(node.args, moved.args):
                if run.holds(b) and b < one:  # a carry: step 0 reads a node before the run
                    pos, init = b - run.start, self._ref(a)
                    if pos not in carries:
                        carries[pos] = (body.input(None, tape, a), init)
                    elif carries[pos][1] != init:
                        raise _NotFolded("a carry read from two nodes before the run")
                    args.append(carries[pos][0])
                elif run.holds(a):
                    args.append(at[a - run.start])
                else:
                    args.append(body.input(self._ref(a, b, k), tape, a))
            if node.op == CONST and not isinstance(node.value, np.ndarray) and moved != node:
                values = [tape.nodes[i + run.period * r].value for r in range(run.reps)]
                at[q] = body.input(Column(tuple(float(v) for v in values)), tape, i)
                continue
            at[q] = body.add(node._replace(args=tuple(args)), tape, i)
            op = node.op
            if isinstance(op, ArrayOp) and op.index is not None:
                index = tuple(_moving(a, b) for a, b in zip(op.index, moved.op.index))
                if index != op.index:
                    body.moving[at[q]] = index
        for pos, (slot, init) in carries.items():
            body.reads[body.inputs.index(slot)] = Prev(at[pos], init)
        positions = [at[q] for q in range(run.period)]
        self.loops[k] = len(self.items)
        made = ArrayTape(
            body.nodes,
            body.inputs,
            positions,
            [],
            body.shapes,
            body.booleans,
            slot_names=body.names,
        )
        self.items.append(
            Loop(run.start, run.period, run.reps, made, body.reads, positions, moving=body.moving)
        )


def _moving(a: Any, b: Any) -> Any:
    """An index's item at step 0, as an :class:`Affine` in the step where it moves."""
    if isinstance(a, (int, np.integer)) and a != b:
        return Affine(int(a), int(b) - int(a))
    return a


class _Body:
    """A loop body being built: an array tape's nodes, its inputs and their reads."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.shapes: list[tuple] = []
        self.booleans: list[bool] = []
        self.names: list[str] = []
        self.inputs: list[int] = []
        self.reads: list[Any] = []
        self.moving: dict[int, tuple] = {}
        self.read_by: dict[Read, int] = {}  # (one input per read)

    def add(self, node: Node, tape: ArrayTape, like: int) -> int:
        """Add ``node``, of the shape and name of the tape's node ``like``."""
        self.nodes.append(node)
        self.shapes.append(tape.shapes[like])
        self.booleans.append(tape.booleans[like])
        self.names.append(tape.name(like))
        return len(self.nodes) - 1

    def input(self, read: Read | None, tape: ArrayTape, like: int) -> int:
        """The input reading ``read`` (a carry's: None, set once its slot is known)."""
        if read is not None and read in self.read_by:
            return self.read_by[read]
        slot = self.add(Node(INPUT), tape, like)
        self.inputs.append(slot)
        self.reads.append(read)
        if read is not None:
            self.read_by[read] = slot
        return slot


class _NotFolded(ValueError):
    pass


class _Trim(Exception):
    """Run ``run`` folds only its first ``reps`` steps."""

    def __init__(self, run: int, reps: int) -> None:
        super().__init__(run, reps)
        self.run, self.reps = run, reps
