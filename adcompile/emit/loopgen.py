"""Source from the loop IR: each loop body printed once, its adjoint once.

``generate(program_or_grad, params, fname)`` prints a
:class:`~adcompile.loops.ir.Program` (the value only) or a
:class:`~adcompile.loops.grad.GradProgram` (value and gradient) as one
function ``fname(*params, v, c, out)``. ``v`` is a work array of
``Generated.work_size`` floats, ``c`` the per-repetition constants
(``Generated.columns``); the outputs go to ``out``. The result says whether the
guards recorded while tracing hold: for Numba (``render.NUMBA``, the default)
False when one does not, in exported code (``render.PYTHON``, ``render.C99``)
the failing guard's number, 0 when none fails. ``Generated.guards`` describes
each guard by its number.

The function is said as statements (``render``), and printed by the one
renderer in the target's language. Where each value lives is
``loops.layout``'s; the reverse sweep is printed by ``loopgen_reverse``; the
pipeline (fold, differentiate, print) is ``emit.fold``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir.tape import CONST, Param
from ..loops.grad import Adjoint, GradProgram, Unit, units
from ..loops.ir import Affine, Arg, At, Block, Column, Lit, Loop, Nested, Prev, Program, Read
from ..loops.layout import Layout, index, index2
from .codegen import GUARD_IFS
from .loopgen_reverse import Indented, ReversePrinter, Write
from .render import (
    NUMBA,
    Assign,
    Comment,
    Fill,
    Flag,
    FlagGuard,
    FlagTest,
    For,
    Function,
    Guard,
    GuardInfo,
    Line,
    Return,
    Target,
    render,
    strip_parens,
)

#: Outputs no loop writes are copied by a loop of their own where at least this
#: many in a row read one stored loop value, argument or constant, evenly spaced.
MIN_RUN = 4

_CLASH = re.compile(r"v|c|i|j|n|ok|out|math|k_|(v|b|ct|a|p|d|t|g|r|s|w)\d.*")


@dataclass
class Generated:
    """Source of one function, and what its caller passes besides the arguments.

    ``guards`` describes each guard by the number it returns in exported code;
    ``lines`` and ``function`` are what the text was rendered from (``printed_as``
    renders them again, as another function or in another language)."""

    text: str
    work_size: int
    columns: np.ndarray
    statements: int
    guards: list[GuardInfo] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list, repr=False)
    function: Function | None = field(default=None, repr=False)
    target: Target = NUMBA

    def printed_as(self, function: Function) -> str:
        """The same statements as ``function`` (another name, arrays of its own)."""
        return render(function, self.lines, self.target)


def _slots(k: int) -> str:
    return f"{k} slot" if k == 1 else f"{k} slots"


def generate(
    what: Program | GradProgram,
    params: Sequence[Param],
    fname: str,
    doc: str = "",
    lengths: Sequence[int] | None = None,
    target: Target = NUMBA,
) -> Generated:
    """The source of ``what`` (see the module doc) in ``target``'s language; with
    ``lengths`` (the batch lengths it was traced at), generic in n, which the function
    takes first."""
    return _Gen(what, list(params), lengths, target=target).source(fname, doc)


class _Gen(Layout, ReversePrinter):
    """Prints a program (and its reverse); ``Layout`` says where values live."""

    def __init__(
        self,
        what: Program | GradProgram,
        params: list[Param],
        lengths: Sequence[int] | None = None,
        ctx: _Nest | None = None,
        target: Target = NUMBA,
    ) -> None:
        self.t = target  # the language expressions are built in
        # generic in the batch length n (counts are Lin): the lengths it was traced at
        self.lengths = list(lengths) if lengths else None
        # a loop body folded in turn is printed by a generator of its own, inside
        # its loop: names after ``px``, work-array indices from ``w{item}``
        self.ctx = ctx
        self.px = f"{ctx.u.item}x" if ctx else ""
        self._w = f"w{ctx.u.item} + " if ctx else ""
        self.i = "j" if ctx else "i"  # the loop variable (outer loops: i, inner: j)
        # the guards as numbered, shared with the generators of bodies folded in turn
        self.guard_info: list[GuardInfo] = ctx.outer.guard_info if ctx else []
        self.nests: dict[int, _Nest] = {}
        self.grad = what if isinstance(what, GradProgram) else None
        self.program = self.grad.program if self.grad else what
        self.units: list[Unit] = self.grad.units if self.grad else units(self.program)
        # a parameter named like a local of the generated code is renamed there
        self.params = [
            Param(f"arg_{p.name}", p.size) if _CLASH.fullmatch(p.name) else p for p in params
        ]
        self.lines: list[Line] = []
        self.writes_out: list[Write] = []
        self.statements = 0
        self.work = 0
        self.columns: list[float] = []
        self._layout()
        for n, (nested, adj, inner, needed) in self.nest_plan.items():
            u = self.units[n]
            nest = self.nests[n] = _Nest(self, u, nested, adj, inner, needed)
            nest.base = self._take(u.trips * nest.gen.work) if nest.gen.work else 0

    def _first_reversed(self, u: Unit) -> bool:
        """Whether ``u`` is reversed first and takes every cotangent coming in (then
        a zero there leaves the rest of the reverse nothing to do)."""
        gp = self.grad
        last = max(w.item for w, a in zip(self.units, gp.adjoints) if a is not None)
        seeded = [self.program.outputs[q] for q in gp.seeds]
        return u.item == last and all(type(r) is At and r.item == u.item for r in seeded)

    # ---- expressions

    def name(self, u: Unit, j: int) -> str:
        """The local of body slot ``j`` (a computed value) of unit ``u``."""
        p = self.pos_of[j]
        return f"v{self._sid(u.item, p)}"

    def ref(self, r: Read, var: str | None, u: Unit | None = None, k: int = -1) -> str:
        """How a read reads at repetition ``var``."""
        if type(r) is Lit:
            return self.t.lit(r.value)
        if type(r) is Arg:
            if self.ctx:
                return self.ctx.ref_arg(r, var)
            p = self.params[r.param]
            if p.size is None:
                return p.name
            return f"{p.name}[{index(r.index.c0, r.index.c1, var)}]"
        if type(r) is Column:
            return f"c[{index(self.cbase[u.item, k], 1, var)}]"
        item = self.program.items[r.item]
        if type(item) is Block and self.vbase[r.item] is None:
            return f"v{self.px}{item.slots[r.index.c0]}"
        if self._last(r):
            return f"v{self.px}{item.slot(r.index.c0 % item.size)}"
        if type(item) is Loop and r.index.c1 % item.size == 0:
            k = item.size
            return self.vidx(r.item, r.index.c0 % k, r.index.c0 // k, r.index.c1 // k, var)
        return self._v(index(self.vbase[r.item] + r.index.c0, r.index.c1, var))

    def add(self, r: Read, var: str | None, ct: str) -> Assign | None:
        """The statement adding cotangent ``ct`` where read ``r`` came from."""
        if type(r) is Arg:
            if self.ctx:
                return self.ctx.add_arg(r, var, ct)
            if r.param not in self.goff:
                return None
            inside = var is not None
            self.writes.append(
                (r.param, r.index.c0, r.index.c1 if inside else 0, self.trips if inside else 1)
            )
            return Write(index(self.goff[r.param] + r.index.c0, r.index.c1, var), ct)
        if type(r) is At:
            if self.grad.adjoints[r.item] is None:  # not differentiated: no adjoint
                return None
            base = self.abase[r.item]
            item = self.program.items[r.item]
            if base is not None and type(item) is Loop and r.index.c1 % item.size == 0:
                k = item.size
                at = self.aidx(r.item, r.index.c0 % k, r.index.c0 // k, r.index.c1 // k, var)
                return Assign(at, ct, "+")
            if base is not None:
                return Assign(self._v(index(base + r.index.c0, r.index.c1, var)), ct, "+")
            return Assign(self.pinned[r.item][r.index.c0], ct, "+")
        return None  # Lit, Column: constants

    def emit(self, depth: int, line: object) -> None:
        """Say statement ``line`` at ``depth`` (1: the function's body)."""
        if isinstance(line, Indented):
            self.emit(depth + 1, line.line)
            return
        if isinstance(line, Write):
            self.writes_out.append(line)
        self.lines.append((depth, line))

    def _number(self, cond: str, expected: bool, where: str) -> int:
        """The next guard's number, its :class:`GuardInfo` kept."""
        k = len(self.guard_info) + 1
        self.guard_info.append(GuardInfo(k, cond, expected, where))
        return k

    # ---- the function

    def source(self, fname: str, doc: str) -> Generated:
        for u in self.units:
            self.pos_of = {j: p for p, j in enumerate(u.positions) if j is not None}
            self._forward(u)
        self._program_guards()
        if self.grad is None:
            self._outputs()
        else:
            self._reverse()
        self.emit(1, Return())
        lead = ["n"] if self.lengths else []
        function = Function(fname, self.params, ["v", "c", "out"], doc, lead)
        text = render(function, self.lines, self.t)
        columns = np.array(self.columns, np.float64)
        return Generated(
            text,
            self.work,
            columns,
            self.statements,
            self.guard_info,
            self.lines,
            function,
            self.t,
        )

    def _outputs(self) -> None:
        """``out[k] = ...`` for the outputs no loop wrote; a run of at least
        ``MIN_RUN`` reads of one stored loop position, one argument or one
        constant, evenly spaced, as a loop (or a slice)."""
        outputs = self.program.outputs
        rest = [(k, r) for k, r in enumerate(outputs) if k not in self.fwd_done]
        i = 0
        while i < len(rest):
            k, r = rest[i]
            end, step = i + 1, self._output_step(r, rest[i + 1][1]) if i + 1 < len(rest) else None
            while (
                step is not None
                and end < len(rest)
                and rest[end][0] == k + end - i
                and self._output_step(rest[end - 1][1], rest[end][1]) == step
            ):
                end += 1
            if step is None or end - i < MIN_RUN:
                self.emit(1, Assign(f"out[{k}]", self.ref(r, None)))
                i += 1
                continue
            if type(r) is Lit:
                self.emit(1, Fill("out", k, k + end - i, self.t.lit(r.value)))
            else:
                stepped = type(r)(r.item if type(r) is At else r.param, Affine(r.index.c0, step))
                self.emit(1, For("i", end - i))
                self.emit(2, Assign(f"out[{index(k, 1, 'i')}]", self.ref(stepped, "i")))
            i = end

    def _output_step(self, a: Read, b: Read) -> int | None:
        """How far output read ``b`` is from ``a`` when both read one stored loop
        position (in whole repetitions), one array argument, or one constant (0);
        None when they cannot be one loop."""
        if type(a) is Lit and type(b) is Lit:
            return 0 if repr(a.value) == repr(b.value) else None  # (nan, -0.0 alike)
        if type(a) is not type(b) or type(a) not in (At, Arg) or a.index.c1 or b.index.c1:
            return None
        step = b.index.c0 - a.index.c0
        if type(a) is Arg:
            return step if a.param == b.param and self.params[a.param].size is not None else None
        item = self.program.items[a.item]
        if a.item != b.item or type(item) is not Loop or not step or step % item.size:
            return None
        return step if self.vbase[a.item] is not None else None

    def _program_guards(self) -> None:
        """The guards outside loops, checked after the forward sweep: a run of them
        as a loop (``loops.ir.GuardLoop``); more than ``GUARD_IFS`` single ones as
        one flag, ``ok &= ...``, tested once (a chain of ``if``s, one block each,
        makes Numba's SSA pass recurse once per block, and fail at a few hundred)."""
        where = self.program.guard_where
        guards = self.program.guards
        flag = len(guards) > GUARD_IFS
        if flag:
            self.emit(1, Comment(f"{len(guards)} guards, checked together"))
            self.emit(1, Flag("ok"))
        for k, (cmp, a, b, expected) in enumerate(guards):
            at = where[k] if k < len(where) else ""
            cond = f"{self.ref(a, None)} {cmp} {self.ref(b, None)}"
            number = self._number(cond, expected, at)
            if flag:
                self.emit(1, FlagGuard("ok", cond, expected, at, number))
            else:
                self.emit(1, Guard(cond, expected, at, number))
        if flag:
            self.emit(1, FlagTest("ok"))
        for gl in self.program.guard_loops:
            var = self.i
            self.emit(1, Comment(f"{gl.trips} guards, one per {var}"))
            self.emit(1, For(var, gl.trips))
            cond = f"{self.ref(gl.a, var)} {gl.cmp} {self.ref(gl.b, var)}"
            if isinstance(gl.trips, int):  # a number, and a message, per element
                first = len(self.guard_info) + 1
                for r in range(gl.trips):
                    text = (
                        f"{self.ref(_at(gl.a, r), None)} {gl.cmp} {self.ref(_at(gl.b, r), None)}"
                    )
                    self._number(text, gl.expected, gl.where)
                self.emit(2, Guard(cond, gl.expected, gl.where, first, var))
            else:
                self.emit(
                    2,
                    Guard(cond, gl.expected, gl.where, self._number(cond, gl.expected, gl.where)),
                )

    def _forward(self, u: Unit) -> None:
        operand, prelude, tail = self._forward_reads(u)
        n, var = u.item, self.i if u.loop else None
        depth = 2 if u.loop else 1
        if u.loop:
            item = self.program.items[n]
            what = "body slots" if self.ctx else "tape slots"  # (of L<item>'s body)
            slots = f"{what} {item.span(u.trips if self.lengths else None)}"
            label = f"L{self.ctx.u.item}.L{n}" if self.ctx else f"L{n}"
            self.emit(1, Comment(f"{label}: {_slots(u.size)} x {u.trips} repetitions ({slots})"))
            self.emit(1, For(self.i, u.trips))
            for line in prelude:
                self.emit(2, line)
            for k, pseudo in self.prev_stored[n].items():
                at = self.vidx(n, pseudo, 0, 1, self.i)
                self.emit(2, Assign(at, operand[u.body.inputs[k]]))
        base = self.vbase[n]
        if n in self.nests:
            self._forward_nested(u, operand)
            for line in tail:
                self.emit(2, line)
            return
        for j, node in enumerate(u.body.nodes):
            if isinstance(node.op, str):
                continue
            operand[j] = self.name(u, j)
            expr = self.t.op(node.op, [operand[a] for a in node.args])
            self.emit(depth, Assign(operand[j], strip_parens(expr)))
            self.statements += 1
            p = self.pos_of[j]
            if base is not None and (p in self.stored[n] or not u.loop):
                self.emit(depth, Assign(self.vidx(n, p, 0, 1, var), operand[j]))
            if (n, p) in self.fwd_out:  # an output at every repetition: written here
                k0, dk, _ = self.fwd_out[n, p]
                self.emit(depth, Assign(f"out[{index(k0, dk, var)}]", operand[j]))
        for g in u.body.guards:
            cond = f"{operand[g.a]} {g.cmp} {operand[g.b]}"
            number = self._number(cond, g.expected, g.where)
            self.emit(depth, Guard(cond, g.expected, g.where, number))
        for line in tail:
            self.emit(depth, line)

    def _forward_reads(self, u: Unit) -> tuple[dict[int, str], list, list]:
        """What the body of ``u`` reads: its operands (constants and reads), what starts
        the values carried from one repetition to the next (said here, before the loop),
        what a repetition copies first (``prelude``) and last (``tail``)."""
        body, var = u.body, self.i if u.loop else None
        operand: dict[int, str] = {}
        for j, node in enumerate(body.nodes):
            if node.op == CONST:
                operand[j] = self.t.lit(node.value)
        prelude, tail = [], []
        first = self._first_prev(u)
        for k, j in enumerate(body.inputs):
            r = u.reads[k]
            if type(r) is not Prev:
                operand[j] = self.ref(r, var, u, k)
                continue
            carried = self.name(u, r.slot)
            if first[r.slot] != k:
                # another prev of the same slot, with a start of its own: a local
                # of its own, set to the slot's value at the end of each repetition
                operand[j] = self._prev_name(u, k)
                self.emit(1, Assign(operand[j], self.ref(r.init, None)))
                tail.append(Assign(operand[j], carried))
                continue
            late = [a for a, nd in enumerate(body.nodes) if j in nd.args and a > r.slot] + [
                g for g in body.guards if j in (g.a, g.b)
            ]
            if late:  # read after this repetition overwrites it: keep a copy
                operand[j] = self._prev_name(u, k)
                prelude.append(Assign(operand[j], carried))
            else:
                operand[j] = carried
            self.emit(1, Assign(carried, self.ref(r.init, None)))
        return operand, prelude, tail

    @staticmethod
    def _first_prev(u: Unit) -> dict[int, int]:
        """Per body slot carried to the next repetition, its first ``prev`` read.

        Several reads may carry one slot with different starts (``t = g(t, s);
        s = t``: both read the last ``t``, but start from ``t`` and ``s``). The
        first is the slot's own local; each other one needs a local of its own.
        """
        first: dict[int, int] = {}
        for k, r in enumerate(u.reads):
            if type(r) is Prev:
                first.setdefault(r.slot, k)
        return first

    def _prev_name(self, u: Unit, k: int) -> str:
        """The local holding ``prev`` read ``k`` of unit ``u`` (a copy of the value
        carried in): ``p<slot>``, with ``_k`` where the slot has several reads."""
        r = u.reads[k]
        name = f"p{self._sid(u.item, self.pos_of[r.slot])}"
        return name if self._first_prev(u)[r.slot] == k else f"{name}_{k}"

    def _forward_nested(self, u: Unit, operand: dict[int, str]) -> None:
        """The forward of a loop whose body is folded in turn, inside its ``for``."""
        n, nest = u.item, self.nests[u.item]
        nest.mode, nest.operand = "fwd", operand
        if nest.gen.work:
            self.emit(2, Assign(f"w{n}", index(nest.base, nest.gen.work, self.i), type="long"))
        for line in nest.gen.forward_lines():
            self._splice(2, line)
        self.statements += nest.gen.statements
        base = self.vbase[n]
        for q in nest.needed:  # the body's outputs that are read: the loop's values
            j = u.body.outputs[q]
            p = self.pos_of[j]
            name = self.name(u, j)
            self.emit(2, Assign(name, nest.gen.ref(nest.nested.program.outputs[q], None)))
            if base is not None and p in self.stored[n]:
                self.emit(2, Assign(self.vidx(n, p, 0, 1, self.i), name))

    def _splice(self, depth: int, line: Line) -> None:
        """A line an inner generator said at its depth 1, at ``depth``."""
        d, stmt = line
        if isinstance(stmt, Write):
            self.writes_out.append(stmt)
        self.lines.append((depth + d - 1, stmt))

    def forward_lines(self) -> list[Line]:
        """(A body folded in turn) its forward, at depth 1."""
        for u in self.units:
            self.pos_of = {j: p for p, j in enumerate(u.positions) if j is not None}
            self._forward(u)
        self._program_guards()
        lines, self.lines = self.lines, []
        return lines


def _at(r: Read, rep: int) -> Read:
    """Read ``r`` of a guard loop at its repetition ``rep`` (a literal: as it is)."""
    if type(r) is Lit:
        return r
    c0 = r.index.c0 + r.index.c1 * rep
    return type(r)(r.param if type(r) is Arg else r.item, Affine(c0, 0))


class _Nest:
    """A loop body folded in turn (``Loop.inner``), printed inside its loop by a
    generator of its own: its virtual parameters read, and send cotangents to,
    what the outer body's reads do (see ``loops.ir.Nested``)."""

    def __init__(
        self,
        outer: _Gen,
        u: Unit,
        nested: Nested,
        adj: Adjoint | None,
        inner: GradProgram | None,
        needed: list[int],
    ) -> None:
        self.outer, self.u, self.nested, self.adj = outer, u, nested, adj
        self.needed = needed  # the body outputs read outside the body's repetition
        self.mode = "fwd"
        self.operand: dict[int, str] = {}  # the outer body inputs' forward operands
        self.carries: dict[int, str] = {}  # prev reads -> their carried cotangents
        self.base = 0  # where the body's own work region starts (per repetition: work)
        what = inner if inner is not None else nested.program
        self.gen = _Gen(what, list(nested.program.params), ctx=self, target=outer.t)

    def ref_arg(self, r: Arg, var: str | None) -> str:
        kind = self.nested.sources[r.param]
        outer, u = self.outer, self.u
        if kind[0] == "array":
            _, p, c1 = kind
            idx = index2(r.index.c0, [(r.index.c1, var), (c1, outer.i)])
            return f"{outer.params[p].name}[{idx}]"
        k = kind[1]
        read = u.reads[k]
        if self.mode == "fwd":
            return self.operand[u.body.inputs[k]]
        if type(read) is Prev:  # the value carried in, as the forward loop stored it
            n, p = u.item, outer.pos_of[read.slot]
            if k in outer.prev_stored[n]:
                return outer.vidx(n, outer.prev_stored[n][k], 0, 1, outer.i)
            first = outer.ref(read.init, None)
            return outer.t.select(f"{outer.i} > 0", outer.vidx(n, p, -1, 1, outer.i), first, True)
        return outer.ref(read, outer.i, u, k)

    def carried(self, r: Read) -> bool:
        """Whether read ``r`` of the body's program is the outer loop's ``prev``, whose
        cotangent is carried to the repetition before."""
        if type(r) is not Arg:
            return False
        kind = self.nested.sources[r.param]
        return kind[0] == "read" and kind[1] in self.carries

    def add_arg(self, r: Arg, var: str | None, ct: str) -> Assign | None:
        kind = self.nested.sources[r.param]
        outer = self.outer
        if kind[0] == "array":
            _, p, c1 = kind
            if p not in outer.goff:
                return None
            idx = index2(outer.goff[p] + r.index.c0, [(r.index.c1, var), (c1, outer.i)])
            return Write(idx, ct)
        k = kind[1]
        if k in self.carries:
            return Assign(self.carries[k], ct, "+")
        if self.adj is None or k not in self.adj.routes:
            return None
        return outer.add(self.u.reads[k], outer.i, ct)


__all__ = ["Generated", "generate"]
