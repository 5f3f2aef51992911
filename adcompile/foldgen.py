"""Folded code generation for the unrolled path: a tape and its segments printed
as Python with ``for`` loops (see ``adcompile.fold`` for what folding is; the
loop IR, ``adcompile.loops``, is the main path, and this generator prints the
tapes it does not take, such as a gradient tape differentiated unrolled).

Values live in locals inside a repetition; a value read from outside its
repetition (by a later loop, by straight-line code, by an output) is stored
in a work array ``v``, one row of stored positions per repetition; the
previous repetition's accumulator is a loop-carried local. Inputs are read
from the arguments directly, and constants that differ between repetitions
from a column array ``c``. A loop whose body is long calls it as a function
of its own, folded in turn (loops inside loops).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .codegen import GUARD_IFS, Param, literal, py_ident, strip_parens
from .passes import zero_flow
from .segments import (
    INPUT_CLASS,
    MIN_REPS,
    MIN_SAVED,
    Segment,
    Tables,
    count_repeats,
    find_in_tables,
)
from .tape import CONST, INPUT, Guard, Node, Tape

#: A loop whose body holds at least this many operations is *outlined*: its
#: body becomes a function of its own, folded in turn (the neurons inside the
#: loop over examples), and the loop calls it once per repetition.
OUTLINE_MIN_OPS = 96
#: Copies of at least this many values from one row of the work array are made
#: by one loop over index columns instead of runs of little loops.
GATHER_MIN = 24
#: How deep outlined bodies may nest.
OUTLINE_MAX_DEPTH = 3


# ------------------------------------------------------------------ code generation


class _TopGuard:
    """A guard checked in the function's body, outside loops: an ``if`` that
    returns False, or, where there are more than ``GUARD_IFS`` of them, a term
    of the flag ``flag`` tested once (a chain of ``if``s, one block each, makes
    Numba's SSA pass recurse once per block, and fail at a few hundred)."""

    __slots__ = ("cond", "expected", "where", "flag")

    def __init__(self, cond: str, expected: bool, where: str) -> None:
        self.cond, self.expected, self.where, self.flag = cond, expected, where, ""

    def lines(self) -> list[str]:
        note = f"# guard: {self.cond} was {self.expected} at {self.where}"
        if self.flag:
            holds = self.cond if self.expected else f"not ({self.cond})"
            return [f"    {self.flag} &= {holds}  {note}"]
        test = f"not ({self.cond})" if self.expected else self.cond
        return [f"    if {test}:  {note}", "        return False"]


@dataclass
class FoldedCode:
    """Generated source and what the caller passes besides the arguments.

    Call ``fname(*args, v, c, out)`` with ``v = numpy.empty(work_size)`` and
    ``c = columns``; it writes the outputs to ``out`` and returns False when a
    guard does not hold.
    """

    text: str  # the function's source (and the functions it calls, first)
    work_size: int  # length of the work array v
    columns: np.ndarray  # per-repetition constants, read as c[...]
    segments: list[Segment] = field(default_factory=list)
    statements: int = 0  # primitive statements printed (loop bodies once)
    functions: list[str] = field(default_factory=list)  # outlined bodies it calls
    outlined: list[Segment] = field(default_factory=list)  # segments whose body is one


def _namer(taken: set[str]) -> Callable[[str], str]:
    """``fresh(base)``: ``base``, or ``base_1``, ``base_2`` ... whichever is not taken yet."""

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    return fresh


def _affine_in(xs: Sequence[int]) -> bool:
    """Whether ``xs`` is an arithmetic progression."""
    return all(b - a == xs[1] - xs[0] for a, b in zip(xs[1:], xs[2:]))


def affine(c0: int, c1: int, var: str) -> str:
    """``c0 + c1 * var`` written plainly."""
    if c1 == 0:
        return str(c0)
    term = var if abs(c1) == 1 else f"{abs(c1)} * {var}"
    if c0 == 0:
        return term if c1 > 0 else f"-{term}"
    return f"{c0} {'+' if c1 > 0 else '-'} {term}"


class FoldGenerator:
    """Works out, then prints, the folded function of one tape.

    Operands become descriptors first (which value, read how); then the
    positions some later reader needs from memory get their columns of the
    work array, and the function is printed.
    """

    def __init__(
        self,
        tape: Tape,
        segments: Sequence[Segment],
        params: Sequence[Param],
        tables: Tables | None = None,
        outline: tuple[int, int, int] = (OUTLINE_MIN_OPS, MIN_REPS, MIN_SAVED),
        depth: int = 0,
    ) -> None:
        self.tape = tape
        self.params = list(params)
        self.segs = list(segments)
        # (least operations in an outlined body, min_reps and min_saved inside it)
        self.outline, self.depth = outline, depth
        outline_min = outline[0]
        # (slot, [(output, prev index or -1 for 0.0)], prev's name): when the slot is 0,
        # the function has nothing to add (an adjoint body whose cotangent is 0)
        self.zero_exit: tuple[int, list[tuple[int, int]], str] | None = None
        t = self.t = tables if tables is not None else Tables(tape, params)
        self.seg_of = np.full(t.n + 1, -1, np.int64)
        for s in self.segs:
            if s.start < 0 or s.stop > t.n or s.reps < 1 or s.size < 1:
                raise ValueError(f"segment {s} does not fit a tape of {t.n} slots")
            if (self.seg_of[s.start : s.stop] >= 0).any():
                raise ValueError(f"segment {s} overlaps another")
            self.seg_of[s.start : s.stop] = 0
        t.mark(self.segs)
        for sid, s in enumerate(self.segs):  # a segment must be valid, whoever found it
            self.seg_of[s.start : s.stop] = sid
            if (t.codes[s.start : s.stop] < 0).any():
                raise ValueError(f"segment {s} holds an input")
            if s.reps > 1 and count_repeats(t, s.start, s.size, s.reps) < s.reps:
                raise ValueError(f"segment {s} does not repeat exactly")
        self.stored: list[set[int]] = [set() for _ in self.segs]
        # segments read at a changing position by a later loop keep every position's
        # place in the work array (slot order), so that such a read is affine
        self.in_slot_order: set[int] = set()
        self.slot_reads: dict[int, list[tuple[int, int, int]]] = {}  # (offset, step, reps)
        # segments some reader needs at a repetition other than the last: an outlined
        # loop that is not keeps only two rows, its last and the one before
        self.early: set[int] = set()
        self.columns: list[float] = []
        self.groups = self._fuse()
        self.group_of = {sid: gi for gi, grp in enumerate(self.groups) for sid in grp}
        # loops with long bodies may become calls of a function of their own; their
        # values are then never loop locals after the loop (see _outline_lines)
        self.outlined: set[int] = set()
        if depth < OUTLINE_MAX_DEPTH:
            for grp in self.groups:
                s = self.segs[grp[0]]
                if (
                    len(grp) == 1
                    and s.reps > 1
                    and t.n_ops(s.start, s.start + s.size) >= outline_min
                ):
                    self.outlined.add(grp[0])
        self.plan = [self._plan_segment(sid) for sid in range(len(self.segs))]

    # ---- operands

    def _operands(self, sid: int) -> list[tuple[int, list[tuple[int, int, int]]]]:
        """Per computed position: (column, slot read by repetition 0, by repetition 1)."""
        t, seg = self.t, self.segs[sid]
        k = seg.size
        rows = []
        for p in range(k):
            j = seg.start + p
            if t.is_const[j]:
                continue
            n_opd = len(self.tape.nodes[j].args)
            cols = list(range(n_opd)) + list(range(2, 2 + 2 * len(t.guards_at.get(j, ()))))
            a1 = t.args[j + k] if seg.reps > 1 else t.args[j]
            rows.append((p, [(c, int(t.args[j, c]), int(a1[c])) for c in cols]))
        return rows

    def _classify(self, sid: int, a0: int, a1: int) -> tuple:
        """What an operand reads (slot a0 in repetition 0, a1 in repetition 1)."""
        t, seg = self.t, self.segs[sid]
        s0, k = seg.start, seg.size
        if seg.reps > 1 and a0 < s0 <= a1 < s0 + k and not t.is_const[a1]:
            return ("carry", a1 - s0, a0)  # the previous repetition's value
        if t.is_const[a0]:
            return ("const",)
        if a0 >= s0:
            return ("own", a0 - s0)  # a value of the same repetition
        if t.cls[a0] == INPUT_CLASS:
            return ("param", int(t.inparam[a0]), int(t.inidx[a0]), int(t.inidx[a1] - t.inidx[a0]))
        if a1 == a0:
            return ("single", a0)
        other = int(self.seg_of[a0])
        oseg = self.segs[other]
        if (a1 - a0) % oseg.size:  # a different position of it each repetition
            return ("slots", other, a0 - oseg.start, a1 - a0)
        q, pp = divmod(a0 - oseg.start, oseg.size)
        return ("mem", other, pp, q, (a1 - a0) // oseg.size)

    def _fuse(self) -> list[list[int]]:
        """Adjacent segments with the same repetition count share one loop when each
        reads the other only at the same repetition (as locals) or at earlier ones."""
        t = self.t
        groups: list[list[int]] = []
        for sid, seg in enumerate(self.segs):
            if groups:
                grp = groups[-1]
                last = self.segs[grp[-1]]
                gap = range(last.stop, seg.start)
                long = self.outline[0] if self.depth < OUTLINE_MAX_DEPTH else t.n + 1
                ok = (
                    seg.reps == last.reps
                    # a long body stays alone: it may become a function of its own
                    and t.n_ops(seg.start, seg.start + seg.size) < long
                    and all(
                        t.n_ops(s.start, s.start + s.size) < long
                        for s in map(self.segs.__getitem__, grp)
                    )
                    and all(t.codes[j] <= 0 and j not in t.guards_at for j in gap)
                    and all(
                        self._fusible(sid, a0, a1, grp)
                        for _, opds in self._operands(sid)
                        for _, a0, a1 in opds
                    )
                )
                if ok:
                    grp.append(sid)
                    continue
            groups.append([sid])
        return groups

    def _fusible(self, sid: int, a0: int, a1: int, grp: list[int]) -> bool:
        d = self._classify(sid, a0, a1)
        if d[0] in ("carry", "single"):
            return int(self.seg_of[d[-1]]) not in grp
        if d[0] == "slots":
            return d[1] not in grp
        if d[0] != "mem" or d[1] not in grp or d[3:] == (0, 1):
            return True
        q0, dq, reps = d[3], d[4], self.segs[sid].reps
        return q0 < 0 and q0 + (dq - 1) * (reps - 1) < 0  # always an earlier repetition

    def single(self, s: int) -> tuple:
        """How code after the loops reads slot ``s``."""
        t = self.t
        if t.is_const[s]:
            return ("lit", float(t.cvalue[s]))
        if t.cls[s] == INPUT_CLASS:
            return ("param", int(t.inparam[s]), int(t.inidx[s]), 0)
        sid = int(self.seg_of[s])
        if sid < 0:
            return ("line", s)
        seg = self.segs[sid]
        q, p = divmod(s - seg.start, seg.size)
        if q == seg.reps - 1 and sid not in self.outlined:  # the loop's local holds it
            return ("local", sid, p)
        self.stored[sid].add(p)
        if q != seg.reps - 1:
            self.early.add(sid)
        return ("mem", sid, p, q, 0)

    def _plan_segment(self, sid: int) -> dict:
        t, seg = self.t, self.segs[sid]
        rows: list[tuple[int, list[tuple]]] = []
        # (position, slot read by repetition 0) -> (that slot's value, last reader)
        carries: dict[tuple[int, int], tuple[tuple, int]] = {}
        for p, opds in self._operands(sid):
            descs = []
            for c, a0, a1 in opds:
                d = self._classify(sid, a0, a1)
                if d[0] == "carry":
                    before, last = carries.get(d[1:], (None, -1))
                    carries[d[1:]] = (before or self.single(a0), max(last, p))
                elif d[0] == "const":
                    vals = t.cvalue[t.args[seg.start + p : seg.stop : seg.size, c]]
                    if (vals == vals[0]).all():
                        d = ("lit", float(vals[0]))
                    else:
                        d = ("col", len(self.columns))
                        self.columns.extend(vals.tolist())
                elif d[0] == "single":
                    d = self.single(a0)
                elif d[0] == "mem":
                    if self.group_of[d[1]] == self.group_of[sid] and d[3:] == (0, 1):
                        d = ("local", d[1], d[2])  # computed earlier in the same iteration
                    else:
                        self.stored[d[1]].add(d[2])
                        if d[3:] != (self.segs[d[1]].reps - 1, 0):
                            self.early.add(d[1])
                elif d[0] == "slots":  # stored in slot order: an affine read of the slots
                    other, off, step = d[1:]
                    osz, last = self.segs[other].size, self.segs[other].reps - 1
                    if any((off + step * r) // osz != last for r in range(seg.reps)):
                        self.early.add(other)
                    self.in_slot_order.add(other)
                    self.slot_reads.setdefault(other, []).append((off, step, seg.reps))
                    size = self.segs[other].size
                    self.stored[other].update((off + step * r) % size for r in range(seg.reps))
                descs.append(d)
            rows.append((p, descs))
        return {"rows": rows, "carries": carries}

    # ---- printing

    def layout(self) -> None:
        """Each segment's stored positions: a row of the work array per repetition.

        An outlined loop's row also holds what its body carries to the next
        repetition (read back from the previous row; row -1 holds the values
        before the loop) and what goes to the outputs.
        """
        self.base, self.rank, self.width, self.pos = [], [], [], []
        self.pingpong: set[int] = set()
        self.last_only: set[int] = set()  # loops read only at their last repetition
        size = 0
        for sid, seg in enumerate(self.segs):
            pos = sorted(self.stored[sid])
            if sid in self.outlined:
                carries = self.plan[sid]["carries"]
                sources = [p for p, _ in carries]
                if len(set(sources)) < len(sources):  # one position carried two ways
                    self.outlined.discard(sid)
                else:
                    more = set(sources) | {p for s, p in self.forward if s == sid}
                    pos = sorted(set(pos) | more)
            rank = {p: r for r, p in enumerate(pos)}
            if sid in self.in_slot_order and not all(
                _affine_in(
                    [
                        len(pos) * ((off + step * r) // seg.size)
                        + rank[(off + step * r) % seg.size]
                        for r in range(reps)
                    ]
                )
                for off, step, reps in self.slot_reads[sid]
            ):
                pos = list(range(seg.size))  # slot order: every read is affine
                rank = {p: r for r, p in enumerate(pos)}
            if sid in self.outlined and sid not in self.early:
                self.pingpong.add(sid)  # rows r % 2: write one, read the other
            elif sid in self.outlined:
                size += len(pos)  # row -1
            elif sid not in self.early:
                self.last_only.add(sid)  # stored once, after the loop
            self.pos.append(pos)
            self.rank.append(rank)
            self.width.append(len(pos))
            self.base.append(size)
            rows = 2 if sid in self.pingpong else 1 if sid in self.last_only else seg.reps
            size += len(pos) * rows
        self.work_size = max(size, 1)

    def index(self, sid: int, p: int, q: int, dq: int) -> tuple[int, int]:
        m = self.width[sid]
        if sid in self.pingpong or sid in self.last_only:  # only the last row is read:
            assert dq == 0 and q == self.segs[sid].reps - 1  # it is row 0
            q = 0
        return self.base[sid] + m * q + self.rank[sid][p], m * dq

    def row(self, sid: int, q: int, dq: int) -> str:
        """Index of the first element of row ``q + dq * r`` of segment ``sid``.

        A loop that keeps two rows writes repetition r to row (reps - 1 - r) % 2,
        so that the last repetition's row is row 0 whatever the count.
        """
        m, base = self.width[sid], self.base[sid]
        if sid in self.pingpong:
            last = self.segs[sid].reps - 1
            if dq == 0:
                assert q == last
                return str(base)
            return f"{base} + {m} * (({last - q} - {self.rname}) % 2)" if m else str(base)
        return affine(base + m * q, m * dq, self.rname)

    def slots_index(self, d: tuple) -> tuple[int, int]:
        """(index, step) in the work array of a ``slots`` read (affine, see layout)."""
        other, off, step = d[1:]
        size = self.segs[other].size
        at = [self.index(other, x % size, x // size, 0)[0] for x in (off, off + step)]
        return at[0], at[1] - at[0]

    def expr(self, d: tuple, sid: int = -1) -> str:
        kind, r = d[0], self.rname
        if kind == "lit":
            return literal(d[1])
        if kind == "line":
            return self.line_names[d[1]]
        if kind == "local":
            return self.local[(d[1], d[2])]
        if kind == "own":
            return self.local[(sid, d[1])]
        if kind == "carry":
            return self.carry_name[(sid, d[1], d[2])]
        if kind == "col":
            return f"{self.cname}[{affine(d[1], 1, r)}]"
        if kind == "slots":
            return f"{self.vname}[{affine(*self.slots_index(d), r)}]"
        if kind == "param":
            p = self.params[d[1]]
            return p.name if p.size is None else f"{p.name}[{affine(d[2], d[3], r)}]"
        c0, c1 = self.index(d[1], d[2], d[3], d[4])
        return f"{self.vname}[{affine(c0, c1, r)}]"

    def names(self) -> None:
        tape = self.tape
        fresh = _namer({p.name for p in self.params} | {"math"})
        self.vname, self.cname = fresh("v"), fresh("c")
        self.rname, self.kname, self.oname = fresh("r"), fresh("k"), fresh("out")
        self.okname = fresh("ok")
        self.line_names = {
            j: fresh(py_ident(tape.name(j)))
            for j in np.flatnonzero(self.seg_of[: self.t.n] < 0).tolist()
            if self.t.codes[j] > 0
        }
        self.local: dict[tuple[int, int], str] = {}
        self.carry_name: dict[tuple[int, int, int], str] = {}
        for sid, seg in enumerate(self.segs):
            for p, _ in self.plan[sid]["rows"]:
                self.local[(sid, p)] = fresh(py_ident(tape.name(seg.start + p)))
            carries = self.plan[sid]["carries"]
            for (p, a0), (_, last) in carries.items():
                mine = self.local[(sid, p)]
                alone = sum(1 for q, _ in carries if q == p) == 1
                self.carry_name[(sid, p, a0)] = (
                    mine if alone and last <= p else fresh(mine + "_prev")
                )

    def guard_lines(self, g: Guard, a: str, b: str, indent: str) -> list[str]:
        cond = f"{a} {g.cmp} {b}"
        test = f"not ({cond})" if g.expected else cond
        return [
            f"{indent}if {test}:  # guard: {cond} was {g.expected} at {g.where}",
            f"{indent}    return False",
        ]

    def top_guard(self, g: Guard, a: str, b: str) -> _TopGuard:
        """Guard ``g`` (its sides read as ``a`` and ``b``) outside loops."""
        return _TopGuard(f"{a} {g.cmp} {b}", g.expected, g.where)

    def comment(self, j: int) -> str | None:
        tape = self.tape
        if tape.blocks is None or tape.blocks[j] < 0 or tape.primal is None:
            return None
        return f"# {tape.primal.statement(tape.blocks[j])}"

    def loop_lines(self, grp: list[int]) -> list[str]:
        if grp[0] in self.outlined:
            lines = self._outline_lines(grp[0])
            if lines is not None:
                return lines
        r, v = self.rname, self.vname
        out = []
        for sid in grp:
            out.append(f"    # folded: {self.segs[sid]}")
        out.append("    # (locals are named after repetition 0)")
        for sid in grp:
            for (p, a0), (before, _) in sorted(self.plan[sid]["carries"].items()):
                out.append(f"    {self.carry_name[(sid, p, a0)]} = {self.expr(before)}")
        out.append(f"    for {r} in range({self.segs[grp[0]].reps}):")
        for sid in grp:
            seg = self.segs[sid]
            block_comment = None
            for p, descs in self.plan[sid]["rows"]:
                j = seg.start + p
                c = self.comment(j)
                if c is not None and c != block_comment:
                    out.append(f"        {c}  (repetition 0)")
                block_comment = c
                node = self.tape.nodes[j]
                na = len(node.args)
                args = [self.expr(d, sid) for d in descs[:na]]
                name = self.local[(sid, p)]
                out.append(f"        {name} = {strip_parens(node.op.code.format(*args))}")
                self.statements += 1
                if sid in self.last_only:
                    pass  # stored after the loop
                elif p in self.stored[sid] and sid in self.pingpong:  # an outline declined
                    out.append(
                        f"        {v}[{self.row(sid, 0, 1)} + {self.rank[sid][p]}] = {name}"
                    )
                elif p in self.stored[sid]:
                    c0, c1 = self.index(sid, p, 0, 1)
                    out.append(f"        {v}[{affine(c0, c1, r)}] = {name}")
                if (sid, p) in self.forward:
                    k0, dk = self.forward[(sid, p)]
                    out.append(f"        {self.oname}[{affine(k0, dk, r)}] = {name}")
                for gi, g in enumerate(self.t.guards_at.get(j, ())):
                    a, b = (self.expr(d, sid) for d in descs[na + 2 * gi : na + 2 * gi + 2])
                    out.extend(self.guard_lines(g, a, b, "        "))
        for sid in grp:
            for p, a0 in sorted(self.plan[sid]["carries"]):
                prev = self.carry_name[(sid, p, a0)]
                if prev != self.local[(sid, p)]:
                    out.append(f"        {prev} = {self.local[(sid, p)]}")
        for sid in grp:  # what is read of the last repetition, from its locals
            if sid in self.last_only:
                for p in sorted(self.stored[sid], key=self.rank[sid].__getitem__):
                    at = self.base[sid] + self.rank[sid][p]
                    out.append(f"    {v}[{at}] = {self.local[(sid, p)]}")
        return out

    # ---- outlined bodies

    def _ext_key(self, d: tuple) -> tuple:
        """(array, step, index) of an outside read: reads of one array at rising
        indices sort together (and copy as loops)."""
        if d[0] == "mem":
            c0, c1 = self.index(d[1], d[2], d[3], d[4])
            return (("v",), c1, c0)
        if d[0] == "slots":
            c0, c1 = self.slots_index(d)
            return (("v",), c1, c0)
        if d[0] == "param" and self.params[d[1]].size is not None:
            return (("param", d[1]), d[3], d[2])
        if d[0] == "col":
            return (("c",), 1, d[1])
        return (("~", repr(d)), 0, 0)

    def _gather(
        self, dest: str, pairs: list[tuple[int, tuple]], indent: str, at0: str = ""
    ) -> tuple[list[str], list[tuple[int, tuple]]]:
        """Many reads of one row of the work array copied in one loop whose indices
        are columns of ``c``: a short function, quick to compile, where runs would
        be dozens of little loops. The lines, and the pairs left to copy otherwise."""
        rows: dict[int, list[tuple[int, int, tuple]]] = {}  # per segment: (at, offset, d)
        rest = []
        for at, d in pairs:
            if d[0] == "mem" and d[4] == 0:
                off = self.index(d[1], d[2], d[3], 0)[0] - self.base[d[1]]
                rows.setdefault(d[1], []).append((at, off, d))
            else:
                rest.append((at, d))
        lines, kv, c = [], self.kname, self.cname
        for sid, items in rows.items():
            if len(items) < GATHER_MIN:
                rest.extend((at, d) for at, _, d in items)
                continue
            start = self.base[sid]
            c0 = len(self.columns)
            self.columns.extend(float(at) for at, _, _ in items)
            self.columns.extend(float(off) for _, off, _ in items)
            c1 = c0 + len(items)
            lines.append(
                f"{indent}# {len(items)} values of one loop's rows: their places are in {c}"
            )
            lines.append(f"{indent}for {kv} in range({len(items)}):")
            lines.append(
                f"{indent}    {dest}[{at0}int({c}[{c0} + {kv}])] = "
                f"{self.vname}[{start} + int({c}[{c1} + {kv}])]"
            )
        return lines, sorted(rest)

    def _copies(
        self, pairs: list[tuple[int, tuple]], sid: int, indent: str, at0: str = ""
    ) -> list[str]:
        """``v[at0 + i] = <d>`` for each (i, d), runs at rising indices on both sides
        as loops."""
        lines, kv, v = [], self.kname, self.vname
        if sid < 0:  # reads that do not change in a loop: many from one row gather
            lines, pairs = self._gather(v, pairs, indent, at0)
        i = 0
        keys = [self._ext_key(d) for _, d in pairs]
        while i < len(pairs):
            end = i + 1
            if keys[i][0][0] != "~":
                while (
                    end < len(pairs)
                    and keys[end][:2] == keys[i][:2]
                    and keys[end][2] == keys[i][2] + (end - i)
                    and pairs[end][0] == pairs[i][0] + (end - i)
                ):
                    end += 1
            at, d = pairs[i]
            if end - i >= MIN_REPS:
                arr, idx = self.expr(d, sid).split("[", 1)  # the first read; the rest follow
                lines.append(f"{indent}for {kv} in range({end - i}):")
                lines.append(
                    f"{indent}    {v}[{at0}{affine(at, 1, kv)}] = {arr}[{idx[:-1]} + {kv}]"
                )
                i = end
            else:
                lines.append(f"{indent}{v}[{at0}{at}] = {self.expr(d, sid)}")
                i += 1
        return lines

    def _outline_lines(self, sid: int) -> list[str] | None:
        """The loop of segment ``sid`` as a call of its body, a function of its own
        folded in turn; None when folding does not shorten the body enough.

        The body writes its row of the work array (``out``), reads the values it
        carries from the previous row (``prev``; row -1 holds the first ones),
        whole rows of other loops (the forward values an adjoint reads),
        arguments read at the same element every repetition, and the rest from a
        small array ``e`` filled before the call.
        """
        t, seg, plan = self.t, self.segs[sid], self.plan[sid]
        k, v, r = seg.size, self.vname, self.rname
        rows = dict(plan["rows"])
        m, rank = self.width[sid], self.rank[sid]
        direct: set[int] = set()  # arguments read at the same element every repetition
        views: dict[tuple[int, int, int], None] = {}  # (segment, row, row step)
        misc: dict[tuple, None] = {}
        for descs in rows.values():
            for d in descs:
                if d[0] in ("own", "lit", "carry"):
                    continue
                if d[0] == "param" and (self.params[d[1]].size is None or d[3] == 0):
                    direct.add(d[1])
                elif d[0] == "mem":
                    views[(d[1], d[3], d[4])] = None
                else:
                    misc[d] = None
        fixed = sorted((d for d in misc if not self._varies(d)), key=self._ext_key)
        varying = sorted((d for d in misc if self._varies(d)), key=self._ext_key)
        ext = {d: i for i, d in enumerate(fixed + varying)}
        # the body as a tape of its own; its inputs are its arguments' elements, in order
        fresh = _namer({p.name for p in self.params})
        nodes: list[Node] = []
        names: list[str] = []
        bparams: list[Param] = []

        def inputs(name: str, size: int | None) -> int:
            bparams.append(Param(name, size))
            first = len(nodes)
            for j in range(size or 1):
                nodes.append(Node(INPUT))
                names.append(f"{name}_{j}")
            return first

        e_at = inputs(fresh("e"), max(len(ext), 1))
        prev_at = inputs(fresh("prev"), max(m, 1)) if plan["carries"] else -1
        view_at = {key: inputs(fresh(f"seg{key[0]}"), max(self.width[key[0]], 1)) for key in views}
        direct_at = {
            pi: inputs(self.params[pi].name, self.params[pi].size) for pi in sorted(direct)
        }
        n_inputs = len(nodes)
        blocks: list[int] = [-1] * n_inputs
        consts: dict[float, int] = {}
        here: dict[int, int] = {}  # body position -> slot of the body's tape

        def const(x: float) -> int:
            s = consts.get(x)
            if s is None:
                s = consts[x] = len(nodes)
                nodes.append(Node(CONST, (), x))
                names.append("k")
                blocks.append(-1)
            return s

        def slot(d: tuple) -> int:
            kind = d[0]
            if kind == "own":
                return here[d[1]]
            if kind == "lit":
                return const(d[1])
            if kind == "carry":
                return prev_at + rank[d[1]]
            fixed_element = self.params[d[1]].size is None or d[3] == 0 if kind == "param" else 0
            if kind == "param" and d[1] in direct and fixed_element:
                return direct_at[d[1]] + d[2]  # (an element that moves is in e, as misc)
            if kind == "mem":
                return view_at[(d[1], d[3], d[4])] + self.rank[d[1]][d[2]]
            return e_at + ext[d]

        guards: list[Guard] = []
        src_blocks = self.tape.blocks
        for p in range(k):
            j = seg.start + p
            if p not in rows:  # a constant
                here[p] = const(float(t.cvalue[j]))
                continue
            descs = rows[p]
            node = self.tape.nodes[j]
            na = len(node.args)
            args = tuple(slot(d) for d in descs[:na])
            here[p] = len(nodes)
            nodes.append(Node(node.op, args))
            names.append(self.tape.name(j))
            blocks.append(src_blocks[j] if src_blocks is not None else -1)
            for gi, g in enumerate(t.guards_at.get(j, ())):
                a, b = slot(descs[na + 2 * gi]), slot(descs[na + 2 * gi + 1])
                guards.append(Guard(g.cmp, a, b, g.expected, g.where))
        body = Tape(
            nodes,
            list(range(n_inputs)),
            [here[p] for p in self.pos[sid]],
            guards,
            slot_names=names,
            blocks=blocks if src_blocks is not None else None,
            primal=self.tape.primal,
        )
        bt = Tables(body, bparams)
        segs = find_in_tables(bt, self.outline[1], self.outline[2])
        ops = bt.n_ops(0, bt.n)
        if not segs or statements_in(bt, segs) > ops // (2 if self.outline[0] >= MIN_SAVED else 1):
            return None
        bname = f"{self.fname}_body{sid}" if self.depth == 0 else f"{self.fname}_{sid}"
        gen = FoldGenerator(body, segs, bparams, bt, self.outline, self.depth + 1)
        if plan["carries"]:
            gen.zero_exit = _zero_exit(body, segs, prev_at, bparams[1].size, bparams[1].name)
        inner = gen.source(
            bname, f"one repetition of the loop over slots {seg.start}..{seg.stop - 1}"
        )
        self.inner_texts.append(inner.text)
        self.functions.extend(inner.functions + [bname])
        self.outlined_segs.append(seg)
        self.statements += inner.statements
        # e, the body's work array and its columns live in ours
        e0 = self.work_size
        w0 = e0 + max(len(ext), 1)
        self.work_size = w0 + inner.work_size
        c0 = len(self.columns)
        self.columns.extend(inner.columns.tolist())
        out = [f"    # folded: {seg}; its body is {bname}(), above, called once per repetition"]
        if plan["carries"]:
            out.append("    # row -1 of its rows: what repetition 0 carries in")
            pairs = sorted((rank[p], before) for (p, _), (before, _) in plan["carries"].items())
            if sid in self.pingpong:
                at = f"{self.base[sid]} + {m} * ({seg.reps} % 2) + "
            else:
                at = f"{self.base[sid] - m} + "
            out.extend(self._copies(pairs, -1, "    ", at))
        if fixed:
            out.append(f"    # e = v[{e0}:{w0}]: what every repetition reads ...")
            out.extend(self._copies([(ext[d], d) for d in fixed], -1, "    ", f"{e0} + "))
        out.append(f"    for {r} in range({seg.reps}):")
        if varying:
            out.append("        # ... and what changes from one repetition to the next")
            out.extend(self._copies([(ext[d], d) for d in varying], sid, "        ", f"{e0} + "))
        args = [f"{v}[{e0}:{w0}]"]

        def view(o: int, q: int, dq: int) -> str:
            mo, bo = self.width[o], self.base[o]
            if o in self.pingpong:
                start = self.row(o, q, dq)
                return f"{v}[{start}:{start} + {mo}]"
            return f"{v}[{affine(bo + mo * q, mo * dq, r)}:{affine(bo + mo * q + mo, mo * dq, r)}]"

        if plan["carries"]:
            args.append(view(sid, -1, 1))
        args += [view(*key) for key in views]
        args += [self.params[pi].name for pi in sorted(direct)]
        args += [f"{v}[{w0}:{self.work_size}]", f"{self.cname}[{c0}:{len(self.columns)}]"]
        args.append(view(sid, 0, 1))
        out.append(f"        if not {bname}({', '.join(args)}):")
        out.append("            return False")
        for p in self.pos[sid]:  # loop positions that only outputs read
            if (sid, p) in self.forward:
                k0, dk = self.forward[(sid, p)]
                out.append(
                    f"        {self.oname}[{affine(k0, dk, r)}] = "
                    f"{v}[{self.row(sid, 0, 1)} + {rank[p]}]"
                )
        return out

    def _zero_exit_lines(self) -> list[str]:
        """Return early when the body's cotangent is zero: outputs are then the
        values carried in, 0.0, or values computed before the test."""
        j, outs, prev = self.zero_exit
        o, kv = self.oname, self.kname
        lines = [
            f"    if {self.line_names[j]} == 0.0:  # nothing flows back through this repetition:",
            "        # its outputs are what it carried in (or 0.0, or computed above)",
        ]
        i = 0
        while i < len(outs):
            end = i + 1
            while (
                end < len(outs)
                and outs[i][1] >= 0
                and outs[end] == (outs[i][0] + end - i, outs[i][1] + end - i)
            ):
                end += 1
            k, src = outs[i]
            if end - i >= MIN_REPS:
                lines.append(f"        for {kv} in range({end - i}):")
                lines.append(f"            {o}[{affine(k, 1, kv)}] = {prev}[{affine(src, 1, kv)}]")
            else:
                for k, src in outs[i:end]:
                    if src >= 0:
                        value = f"{prev}[{src}]"
                    else:
                        value = "0.0" if src == -1 else self.line_names[-2 - src]
                    lines.append(f"        {o}[{k}] = {value}")
            i = end
        lines.append("        return True")
        return lines

    def _varies(self, d: tuple) -> bool:
        """Whether an outside read changes from one repetition to the next."""
        if d[0] == "mem":
            return d[4] != 0
        return d[0] in ("slots", "col") or (d[0] == "param" and d[3] != 0)

    def source(self, fname: str, doc: str) -> FoldedCode:
        tape, t = self.tape, self.t
        self.fname = fname
        self.inner_texts: list[str] = []
        self.functions: list[str] = []
        self.outlined_segs: list[Segment] = []
        line_slots = [j for j in np.flatnonzero(self.seg_of[: t.n] < 0).tolist() if t.codes[j] > 0]
        line_descs = {j: [self.single(a) for a in tape.nodes[j].args] for j in line_slots}
        guard_descs = {
            j: [(self.single(g.a), self.single(g.b)) for g in gs]
            for j, gs in t.guards_at.items()
            if self.seg_of[j] < 0
        }
        self.forward = self._forward_outputs()
        out_descs = [
            None if k in self.forwarded else self.single(o) for k, o in enumerate(tape.outputs)
        ]
        self.layout()
        self.names()
        for g in t.static_guards:  # constant on both sides: decided while tracing
            assert g.holds(t.cvalue)
        arglist = ", ".join([p.name for p in self.params] + [self.vname, self.cname, self.oname])
        lines: list[str | _TopGuard] = [f"def {fname}({arglist}):"]
        if doc:
            lines.append(f'    """{doc}"""')
        self.statements = 0
        # comparisons of inputs (if x[i] > 0 in a loop) are checked first, runs as loops
        on_inputs = [j for j in sorted(guard_descs) if t.cls[j] == INPUT_CLASS]
        lines.extend(
            self._guard_runs(
                [(g, ab) for j in on_inputs for g, ab in zip(t.guards_at[j], guard_descs[j])]
            )
        )
        block_comment = None
        first = {self.segs[grp[0]].start: grp for grp in self.groups}
        jumps = sorted(first)  # where loops start
        todo = sorted((set(line_slots) | set(guard_descs) | set(jumps)) - set(on_inputs))
        after = -1
        for j in todo:
            if j < after:
                continue
            if j in first:
                grp = first[j]
                lines.extend(self.loop_lines(grp))
                block_comment = None
                after = self.segs[grp[-1]].stop
                continue
            if t.codes[j] > 0:
                c = self.comment(j)
                if c is not None and c != block_comment:
                    lines.append(f"    {c}")
                block_comment = c
                node = tape.nodes[j]
                args = [self.expr(d) for d in line_descs[j]]
                expr = strip_parens(node.op.code.format(*args))
                lines.append(f"    {self.line_names[j]} = {expr}")
                self.statements += 1
                if self.zero_exit is not None and j == self.zero_exit[0]:
                    lines.extend(self._zero_exit_lines())
            for g, (a, b) in zip(t.guards_at.get(j, ()), guard_descs.get(j, ())):
                lines.append(self.top_guard(g, self.expr(a), self.expr(b)))
        tops = [x for x in lines if isinstance(x, _TopGuard)]
        # one flag, tested before the outputs are written (not where a repetition
        # whose cotangent is zero returns early: it would skip the test)
        if len(tops) > GUARD_IFS and self.zero_exit is None:
            for x in tops:
                x.flag = self.okname
            lines.insert(2 if doc else 1, f"    {self.okname} = True  # {len(tops)} guards")
            lines += [f"    if not {self.okname}:", "        return False"]
        text = [ln for x in lines for ln in (x.lines() if isinstance(x, _TopGuard) else [x])]
        text.extend(self._outputs(out_descs))
        text.append("    return True")
        return FoldedCode(
            "\n\n\n".join(self.inner_texts + ["\n".join(text) + "\n"]),
            self.work_size,
            np.array(self.columns or [0.0], np.float64),
            list(self.segs),
            self.statements,
            self.functions,
            self.outlined_segs,
        )

    def _key(self, d: tuple) -> tuple | None:
        """(array, index) of a read that a loop can index, else None."""
        if d[0] == "mem":
            return ("mem",), self.index(d[1], d[2], d[3], 0)[0]
        if d[0] == "param" and self.params[d[1]].size is not None:
            return ("param", d[1]), d[2]
        return None

    def _guard_runs(self, items: list[tuple[Guard, tuple]]) -> list[str | _TopGuard]:
        """Guards in order; a run of the same comparison on evenly spaced reads is a loop."""

        def key(g: Guard, d: tuple) -> tuple:  # (kind of read, index)
            k = self._key(d)
            return k if k is not None else ((g.cmp, g.expected, d), 0)

        keys = [(key(g, a), key(g, b), g.cmp, g.expected) for g, (a, b) in items]
        lines, i = [], 0
        while i < len(items):
            end = i + 1
            if i + 1 < len(items):
                (fa, ia), (fb, ib), cmp, exp = keys[i]
                sa, sb = keys[i + 1][0][1] - ia, keys[i + 1][1][1] - ib
                while end < len(items):
                    (ga, ja), (gb, jb), c2, e2 = keys[end]
                    m = end - i
                    if (ga, gb, c2, e2) != (fa, fb, cmp, exp) or (ja, jb) != (
                        ia + sa * m,
                        ib + sb * m,
                    ):
                        break
                    end += 1
            g, (a, b) = items[i]
            if end - i < MIN_REPS:
                lines.append(self.top_guard(g, self.expr(a), self.expr(b)))
                i += 1
                continue
            kv = self.kname

            def read(fam: tuple, i0: int, step: int, d: tuple) -> str:
                if fam[0] == "mem":
                    return f"{self.vname}[{affine(i0, step, kv)}]"
                if fam[0] == "param":
                    return f"{self.params[fam[1]].name}[{affine(i0, step, kv)}]"
                return self.expr(d)

            lines.append(f"    for {kv} in range({end - i}):")
            lines.extend(self.guard_lines(g, read(fa, ia, sa, a), read(fb, ib, sb, b), "        "))
            i = end
        return lines

    def _forward_outputs(self) -> dict[tuple[int, int], tuple[int, int]]:
        """Loop positions that only outputs read, one per repetition at evenly spaced
        indices: the loop writes them to ``out`` itself. (segment, position) -> (k0, dk)."""
        t, where = self.t, {}
        for k, o in enumerate(self.tape.outputs):
            sid = int(self.seg_of[o])
            if sid >= 0 and not t.is_const[o]:
                seg = self.segs[sid]
                q, p = divmod(o - seg.start, seg.size)
                where.setdefault((sid, p), []).append((q, k))
        forward: dict[tuple[int, int], tuple[int, int]] = {}
        self.forwarded: set[int] = set()
        for (sid, p), qk in where.items():
            reps = self.segs[sid].reps
            if p in self.stored[sid] or len(qk) != reps or reps < 2:
                continue
            ks = dict(qk)
            if len(ks) != reps:
                continue
            k0, dk = ks.get(0, -1), ks.get(1, -1) - ks.get(0, -1)
            if all(ks.get(q) == k0 + dk * q for q in range(reps)):
                forward[(sid, p)] = (k0, dk)
                self.forwarded.update(ks.values())
        return forward

    def _outputs(self, descs: list[tuple | None]) -> list[str]:
        """``out[k] = ...``, runs of evenly spaced reads as loops (None: written by a loop)."""
        lines, left = self._gather(
            self.oname, [(k, d) for k, d in enumerate(descs) if d is not None], "    "
        )
        descs = [None] * len(descs)
        for k, d in left:
            descs[k] = d
        keys = [None if d is None else self._key(d) for d in descs]
        o, k = self.oname, 0
        while k < len(descs):
            if descs[k] is None:
                k += 1
                continue
            end = k + 1
            if keys[k] is not None and k + 1 < len(descs) and keys[k + 1] is not None:
                fam, i0 = keys[k]
                step = keys[k + 1][1] - i0
                while (
                    end < len(descs)
                    and keys[end] is not None
                    and keys[end][0] == fam
                    and keys[end][1] == i0 + step * (end - k)
                ):
                    end += 1
            if end - k >= MIN_REPS:
                fam, i0 = keys[k]
                step = keys[k + 1][1] - i0
                name = self.vname if fam[0] == "mem" else self.params[fam[1]].name
                kv = self.kname
                lines.append(f"    for {kv} in range({end - k}):")
                lines.append(f"        {o}[{affine(k, 1, kv)}] = {name}[{affine(i0, step, kv)}]")
                k = end
            else:
                lines.append(f"    {o}[{k}] = {self.expr(descs[k])}")
                k += 1
        return lines


#: ops that are zero when an operand is: where a cotangent can enter an adjoint body
_LINEAR = frozenset({"mul", "div", "neg"})


def _zero_exit(
    body: Tape, segs: Sequence[Segment], prev_at: int, width: int, prev: str, tries: int = 8
) -> tuple[int, list[tuple[int, int]], str] | None:
    """A slot whose value 0 leaves every output of ``body`` equal to a value carried
    in (an input ``prev[i]``, as i), to 0.0 (as -1) or to a slot computed before it
    (slot j as -2 - j): the cotangent an adjoint body scales.

    Products, quotients and negations of zero are zero, and ``c + 0`` is ``c``
    (nan and inf times zero aside: as in a hand-written backward pass that
    skips an example whose cotangent is zero). Only the first few computed
    slots outside loops are tried; None when none of them qualifies.
    """
    nodes = body.nodes
    if body.guards:
        return None
    inside = np.zeros(len(nodes) + 1, bool)
    for s in segs:
        inside[s.start : s.stop] = True
    cands = [
        j
        for j, nd in enumerate(nodes)
        if nd.op not in (INPUT, CONST) and not inside[j] and getattr(nd.op, "name", "") in _LINEAR
    ][:tries]
    for s in cands:
        zero, same = zero_flow(nodes, s)
        outs = []
        for k, o in enumerate(body.outputs):
            if zero[o]:
                outs.append((k, -1))
            elif prev_at >= 0 and prev_at <= same[o] < prev_at + width:  # a value carried in
                outs.append((k, same[o] - prev_at))
            elif o < s and nodes[o].op not in (INPUT, CONST) and not inside[o]:
                outs.append((k, -2 - o))  # computed before the test: its local
            else:
                break
        else:
            return s, outs, prev
    return None


def generate(
    tape: Tape,
    segments: Sequence[Segment],
    fname: str,
    params: Sequence[Param],
    doc: str = "",
    outline: tuple[int, int, int] = (OUTLINE_MIN_OPS, MIN_REPS, MIN_SAVED),
) -> FoldedCode:
    """The folded function's source, work-array size and constant columns.

    ``outline``: loops whose body has at least ``outline[0]`` operations call
    their body as a function, folded with ``min_reps, min_saved = outline[1:]``
    (small values fold eagerly, as the tests do).
    """
    return FoldGenerator(tape, segments, params, outline=outline).source(fname, doc)


def folded_source(
    tape: Tape, segments: Sequence[Segment], fname: str, params: Sequence[Param], doc: str = ""
) -> str:
    """Source of ``def fname(*params, v, c, out) -> bool`` with each segment as a loop.

    ``v`` is a float64 work array and ``c`` the constant columns; see :func:`generate`.
    """
    return generate(tape, segments, fname, params, doc).text


def statements_in(t: Tables, segments: Sequence[Segment]) -> int:
    """How many primitive statements folding ``segments`` of the tape ``t`` leaves."""
    inside = sum(t.n_ops(s.start, s.stop) - t.n_ops(s.start, s.start + s.size) for s in segments)
    return t.n_ops(0, t.n) - inside
