"""Scans: the repeated runs of an array tape folded into loops (``fold``).

A Python loop over time steps (``for t in range(200): h = np.tanh(W @ h + U @
xs[t])``) records the same few array nodes once per step, and its adjoint the
same few again, backwards. ``fold`` finds such runs (``reps`` repetitions of
``period`` nodes whose ops, shapes and reads agree) and gives the tape with each
run's first repetition only, its *body*, plus what the loop code around it
needs (:class:`Span`). A read in a repetition is one of:

- of a node of its own repetition (the same in every one);
- of the previous repetition's node, a *carry* (``h``): the first repetition
  reads the value before the loop (``h0``) instead;
- of a node outside the run, the same in every repetition (``W``);
- of a repetition of another run, at a step affine in this one's (the adjoint
  reads the forward run's states backwards): that run keeps the value of each
  step (a *stack*), and the read is of one row of it.

An int index that moves with the step (``xs[t]``) is written in the step's
variable. Reads from outside a run of its last repetition read the body's
value as the loop left it. The body is printed once, inside ``for r in
range(reps)`` (``emit.array_loops``). Reads only ``ir``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.arrays import ArrayOp, ArrayTape
from ..ir.loop_forms import affine_text
from ..ir.tape import CONST, INPUT, Node

#: A run is folded from this many repetitions on, of at most ``MAX_PERIOD`` nodes.
MIN_REPS = 4
MAX_PERIOD = 64


@dataclass
class Span:
    """One loop of a folded tape: body nodes ``first`` to ``last`` (exclusive, in the
    folded tape) run ``reps`` times, the step named ``var``. ``carries``: (name,
    node before the loop, body node): ``name`` holds the body node's value of the
    previous step, the node's before the first. ``stacks``: (name, body node):
    ``name[r]`` keeps step r's value."""

    first: int
    last: int
    reps: int
    var: str
    carries: list[tuple[str, int, int]] = field(default_factory=list)
    stacks: list[tuple[str, int]] = field(default_factory=list)


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


def fold(tape: ArrayTape) -> tuple[ArrayTape, list[Span]]:
    """``tape`` with its repeated runs folded (module doc), and their loops; the
    tape itself and no loops where it has none."""
    runs = _runs(tape)
    while runs:
        try:
            return _Folder(tape, runs).folded()
        except _NotFolded:
            return tape, []
        except _Trim as trim:  # a read that would leave the run it reads: fewer steps
            run = runs[trim.run]
            if trim.reps < MIN_REPS:
                runs = runs[: trim.run] + runs[trim.run + 1 :]
            else:
                runs[trim.run] = _Run(run.start, run.period, trim.reps)
    return tape, []


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
        pattern = tuple(
            "#" if isinstance(k, (int, np.integer)) else repr(k) for k in op.index
        )
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


# ---------------------------------------------------------------- the folded tape


class _Folder:
    def __init__(self, tape: ArrayTape, runs: list[_Run]) -> None:
        self.tape, self.runs = tape, runs
        self.nodes: list[Node] = []
        self.shapes: list[tuple] = []
        self.booleans: list[bool] = []
        self.names: list[str] = []
        self.new: dict[int, int] = {}  # old node -> folded node
        self.stacked: dict[tuple[int, int], str] = {}  # (run, position) -> its stack

    def _add(self, node: Node, shape: tuple, boolean: bool, name: str) -> int:
        self.nodes.append(node)
        self.shapes.append(tuple(shape))
        self.booleans.append(boolean)
        self.names.append(name)
        return len(self.nodes) - 1

    def _run_of(self, a: int) -> int | None:
        return next((k for k, run in enumerate(self.runs) if run.holds(a)), None)

    def folded(self) -> tuple[ArrayTape, list[Span]]:
        tape, spans = self.tape, []
        i = 0
        while i < len(tape.nodes):
            k = self._run_of(i)
            if k is None:
                node = tape.nodes[i]
                args = tuple(self._read(a, None, None, None) for a in node.args)
                self.new[i] = self._add(
                    node._replace(args=args), tape.shapes[i], tape.booleans[i], tape.name(i)
                )
                i += 1
                continue
            spans.append(self._body(k))
            run = self.runs[k]
            i = run.start + run.period * run.reps
        folded = ArrayTape(
            self.nodes,
            [self.new[i] for i in tape.inputs],
            [self._read(o, None, None, None) for o in tape.outputs],
            tape.names,
            self.shapes,
            self.booleans,
            slot_names=self.names,
        )
        if tape.adjoint_from is not None:
            folded.adjoint_from = min(
                (j for i, j in self.new.items() if i >= tape.adjoint_from), default=None
            )
        for (k, q), name in self.stacked.items():  # (spans are in the order of runs)
            spans[k].stacks.append((name, self.new[self.runs[k].start + q]))
        return folded, spans

    def _body(self, k: int) -> Span:
        tape, run = self.tape, self.runs[k]
        var = f"r{k}"
        first = len(self.nodes)
        carries: dict[int, tuple[int, int]] = {}  # position -> (its name's node, init)
        one = run.start + run.period  # step 1 (its reads)
        for q in range(run.period):
            i, node = run.start + q, tape.nodes[run.start + q]
            args = []
            for j, a in enumerate(node.args):
                b = tape.nodes[one + q].args[j]
                if run.holds(b) and b < one:  # a carry: step 0 reads a node before the run
                    pos = b - run.start
                    init = self._read(a, None, None, None)
                    if pos not in carries:
                        name = f"p_{tape.name(pos + run.start)}"
                        carries[pos] = (
                            self._add(Node(INPUT), tape.shapes[a], tape.booleans[a], name),
                            init,
                        )
                    elif carries[pos][1] != init:
                        raise _NotFolded("a carry read from two nodes before the run")
                    args.append(carries[pos][0])
                elif run.holds(a):
                    args.append(self.new[a])
                else:
                    args.append(self._read(a, tape.nodes[one + q].args[j], var, k))
            op = node.op
            if isinstance(op, ArrayOp) and op.index is not None:
                op = self._moving(op, tape.nodes[one + q].op, var)
            moved = tape.nodes[one + q]
            if op == CONST and not isinstance(node.value, np.ndarray) and moved != node:
                v, step = float(node.value), float(moved.value - node.value)  # (a number)
                text = f"({v!r} + {step!r} * {var})"
                self.new[i] = self._add(Node(INPUT), (), False, text)
                continue
            made = node._replace(op=op, args=tuple(args))
            self.new[i] = self._add(made, tape.shapes[i], tape.booleans[i], tape.name(i))
        span = Span(first, len(self.nodes), run.reps, var)
        span.carries = [
            (self.names[pseudo], init, self.new[run.start + pos])
            for pos, (pseudo, init) in carries.items()
        ]
        return span

    def _moving(self, op: ArrayOp, next_op: ArrayOp, var: str) -> ArrayOp:
        """``op`` with each int of its index that moves from step to step written in
        the step's variable (``xs[t]``: ``xs[(3 + r0),]``)."""
        index = []
        for a, b in zip(op.index, next_op.index):
            if isinstance(a, (int, np.integer)) and a != b:
                index.append(affine_text(int(a), int(b) - int(a), var))
            else:
                index.append(a)
        return op if index == list(op.index) else op.remake(tuple(index))

    def _read(self, a: int, a_next: int | None, var: str | None, reader: int | None) -> int:
        """The folded node a node reads for old node ``a`` (``a_next``: what step 1 of
        the reader's run ``reader`` reads, where the reader is in a run)."""
        k = self._run_of(a)
        moving = a_next is not None and a_next != a
        if k is None:
            if moving:
                raise _NotFolded("a read that moves across nodes of no run")
            return self.new[a]
        run = self.runs[k]
        r, q = run.where(a)
        if not moving and r == run.reps - 1:
            return self.new[run.start + q]  # the last step: as the loop left it
        if moving:
            r2, q2 = run.where(a_next)
            if q2 != q or not run.holds(a_next):
                raise _NotFolded("a read that moves across the body of another run")
            step, reps = r2 - r, self.runs[reader].reps
            if not 0 <= r + step * (reps - 1) < run.reps:  # (its last steps read outside)
                fits = r // -step + 1 if step < 0 else (run.reps - 1 - r) // step + 1
                raise _Trim(reader, fits)
            at = affine_text(r, step, var)
        else:
            at = str(r)
        stack = self.stacked.setdefault((k, q), f"S_{self.tape.name(run.start + q)}")
        return self._add(
            Node(INPUT), self.tape.shapes[a], self.tape.booleans[a], f"{stack}[{at}]"
        )


class _NotFolded(ValueError):
    pass


class _Trim(Exception):
    """Run ``run`` folds only its first ``reps`` steps."""

    def __init__(self, run: int, reps: int) -> None:
        super().__init__(run, reps)
        self.run, self.reps = run, reps
