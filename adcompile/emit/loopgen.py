"""Python source from the loop IR: each loop body printed once, its adjoint once.

``generate(program_or_grad, params, fname)`` prints a
:class:`~adcompile.loops.ir.Program` (the value only) or a
:class:`~adcompile.loops.grad.GradProgram` (value and gradient) as one
function ``fname(*params, v, c, out) -> bool`` for Numba. ``v`` is a work
array of ``Generated.work_size`` floats, ``c`` the per-repetition constants
(``Generated.columns``); the outputs go to ``out``, and the result is
False when a guard recorded while tracing does not hold.

Where each value lives is ``looplayout``'s; the pipeline (fold, differentiate,
print) is ``loops``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..ir.tape import CONST, INPUT, Param
from ..loops.grad import Adjoint, GradProgram, Unit, units
from ..loops.ir import (
    Affine,
    Arg,
    At,
    Block,
    Column,
    Lin,
    Lit,
    Loop,
    Nested,
    NotAffine,
    Prev,
    Program,
    Read,
    at_length,
)
from ..loops.layout import Layout, index, index2
from .codegen import GUARD_IFS, literal, strip_parens

#: Outputs no loop writes are copied by a loop of their own where at least this
#: many in a row read one stored loop value, argument or constant, evenly spaced.
MIN_RUN = 4

_CLASH = re.compile(r"v|c|i|j|n|ok|out|math|(v|b|ct|a|p|d|t|g|r|s|w)\d.*")


@dataclass
class Generated:
    """Source of one function, and what its caller passes besides the arguments."""

    text: str
    work_size: int
    columns: np.ndarray
    statements: int


class _Write:
    """A gradient element's update, ``out[index] += ct``; printed as ``=`` when no
    element of the gradient is written twice (``_Gen._assign_once``).

    ``stand_in``: the write of 0.0 that a skipped repetition does in place of
    another write: needed only where writes are ``=`` (nothing else sets the
    element then), ``pass`` where they add.
    """

    __slots__ = ("index", "ct", "indent", "assign", "stand_in")

    def __init__(self, index: str, ct: str, stand_in: bool = False) -> None:
        self.index, self.ct, self.indent, self.assign = index, ct, "", False
        self.stand_in = stand_in

    def __str__(self) -> str:
        if self.stand_in and not self.assign:
            return f"{self.indent}pass"
        return f"{self.indent}out[{self.index}] {'=' if self.assign else '+='} {self.ct}"


class _Indented:
    """A line one level deeper than the lines around it."""

    __slots__ = ("line",)

    def __init__(self, line: str | _Write) -> None:
        self.line = line


def _slots(k: int) -> str:
    return f"{k} slot" if k == 1 else f"{k} slots"


def generate(
    what: Program | GradProgram,
    params: Sequence[Param],
    fname: str,
    doc: str = "",
    lengths: Sequence[int] | None = None,
) -> Generated:
    """The source of ``what`` (see the module doc); with ``lengths`` (the batch
    lengths it was traced at), generic in n, which the function takes first."""
    return _Gen(what, list(params), lengths).source(fname, doc)


class _Gen(Layout):
    """Prints a program (and its reverse); ``Layout`` says where values live."""

    def __init__(
        self,
        what: Program | GradProgram,
        params: list[Param],
        lengths: Sequence[int] | None = None,
        ctx: _Nest | None = None,
    ) -> None:
        # generic in the batch length n (counts are Lin): the lengths it was traced at
        self.lengths = list(lengths) if lengths else None
        # a loop body folded in turn is printed by a generator of its own, inside
        # its loop: names after ``px``, work-array indices from ``w{item}``
        self.ctx = ctx
        self.px = f"{ctx.u.item}x" if ctx else ""
        self._w = f"w{ctx.u.item} + " if ctx else ""
        self.i = "j" if ctx else "i"  # the loop variable (outer loops: i, inner: j)
        self.nests: dict[int, _Nest] = {}
        self.grad = what if isinstance(what, GradProgram) else None
        self.program = self.grad.program if self.grad else what
        self.units: list[Unit] = self.grad.units if self.grad else units(self.program)
        # a parameter named like a local of the generated code is renamed there
        self.params = [
            Param(f"arg_{p.name}", p.size) if _CLASH.fullmatch(p.name) else p for p in params
        ]
        self.lines: list[str | _Write] = []
        self.writes_out: list[_Write] = []
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
            return literal(r.value)
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

    def add(self, r: Read, var: str | None, ct: str) -> str | _Write | None:
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
            return _Write(index(self.goff[r.param] + r.index.c0, r.index.c1, var), ct)
        if type(r) is At:
            if self.grad.adjoints[r.item] is None:  # not differentiated: no adjoint
                return None
            base = self.abase[r.item]
            item = self.program.items[r.item]
            if base is not None and type(item) is Loop and r.index.c1 % item.size == 0:
                k = item.size
                at = self.aidx(r.item, r.index.c0 % k, r.index.c0 // k, r.index.c1 // k, var)
                return f"{at} += {ct}"
            if base is not None:
                return f"{self._v(index(base + r.index.c0, r.index.c1, var))} += {ct}"
            return f"{self.pinned[r.item][r.index.c0]} += {ct}"
        return None  # Lit, Column: constants

    def emit(self, depth: int, line: str | _Write | _Indented) -> None:
        if isinstance(line, _Indented):
            self.emit(depth + 1, line.line)
        elif isinstance(line, _Write):
            line.indent = "    " * depth
            self.writes_out.append(line)
            self.lines.append(line)
        else:
            self.lines.append("    " * depth + line)

    # ---- the function

    def source(self, fname: str, doc: str) -> Generated:
        names = [p.name for p in self.params]
        lead = ["n"] if self.lengths else []
        self.emit(0, f"def {fname}({', '.join(lead + names + ['v', 'c', 'out'])}):")
        if doc:
            self.emit(1, f'"""{doc}"""')
        for u in self.units:
            self.pos_of = {j: p for p, j in enumerate(u.positions) if j is not None}
            self._forward(u)
        self._program_guards()
        if self.grad is None:
            self._outputs()
        else:
            self._reverse()
        self.emit(1, "return True")
        text = "\n".join(map(str, self.lines)) + "\n"
        return Generated(text, self.work, np.array(self.columns, np.float64), self.statements)

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
                self.emit(1, f"out[{k}] = {self.ref(r, None)}")
                i += 1
                continue
            if type(r) is Lit:
                self.emit(1, f"out[{k}:{k + end - i}] = {literal(r.value)}")
            else:
                stepped = type(r)(r.item if type(r) is At else r.param, Affine(r.index.c0, step))
                self.emit(1, f"for i in range({end - i}):")
                self.emit(2, f"out[{index(k, 1, 'i')}] = {self.ref(stepped, 'i')}")
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
            self.emit(1, f"# {len(guards)} guards, checked together")
            self.emit(1, "ok = True")
        for k, (cmp, a, b, expected) in enumerate(guards):
            at = where[k] if k < len(where) else ""
            a_, b_ = self.ref(a, None), self.ref(b, None)
            if flag:
                self._guard_flag(1, a_, cmp, b_, expected, at)
            else:
                self._guard(1, a_, cmp, b_, expected, at)
        if flag:
            self.emit(1, "if not ok:")
            self.emit(2, "return False")
        for gl in self.program.guard_loops:
            var = self.i
            self.emit(1, f"# {gl.trips} guards, one per {var}")
            self.emit(1, f"for {var} in range({gl.trips}):")
            a_, b_ = self.ref(gl.a, var), self.ref(gl.b, var)
            self._guard(2, a_, gl.cmp, b_, gl.expected, gl.where)

    def _guard_flag(
        self, depth: int, a: str, cmp: str, b: str, expected: bool, where: str
    ) -> None:
        """A guard folded into the flag ``ok`` (no branch: see ``_program_guards``)."""
        cond = f"{a} {cmp} {b}"
        test = cond if expected else f"not ({cond})"
        note = f"  # guard: {cond} was {expected}" + (f" at {where}" if where else "")
        self.emit(depth, f"ok &= {test}{note}")

    def _guard(self, depth: int, a: str, cmp: str, b: str, expected: bool, where: str) -> None:
        cond = f"{a} {cmp} {b}"
        test = f"not ({cond})" if expected else cond
        note = f"  # guard: {cond} was {expected}" + (f" at {where}" if where else "")
        self.emit(depth, f"if {test}:{note}")
        self.emit(depth + 1, "return False")

    def _forward(self, u: Unit) -> None:
        body, n = u.body, u.item
        var = self.i if u.loop else None
        depth = 2 if u.loop else 1
        operand: dict[int, str] = {}
        for j, node in enumerate(body.nodes):
            if node.op == CONST:
                operand[j] = literal(node.value)
        prelude, tail = [], []
        first = self._first_prev(u)
        for k, j in enumerate(body.inputs):
            r = u.reads[k]
            if type(r) is Prev:
                carried = self.name(u, r.slot)
                if first[r.slot] != k:
                    # another prev of the same slot, with a start of its own: a local
                    # of its own, set to the slot's value at the end of each repetition
                    operand[j] = self._prev_name(u, k)
                    self.emit(1, f"{operand[j]} = {self.ref(r.init, None)}")
                    tail.append(f"{operand[j]} = {carried}")
                    continue
                late = [a for a, nd in enumerate(body.nodes) if j in nd.args and a > r.slot] + [
                    g for g in body.guards if j in (g.a, g.b)
                ]
                if late:  # read after this repetition overwrites it: keep a copy
                    operand[j] = self._prev_name(u, k)
                    prelude.append(f"{operand[j]} = {carried}")
                else:
                    operand[j] = carried
                self.emit(1, f"{carried} = {self.ref(r.init, None)}")
            else:
                operand[j] = self.ref(r, var, u, k)
        if u.loop:
            item = self.program.items[n]
            what = "body slots" if self.ctx else "tape slots"  # (of L<item>'s body)
            slots = f"{what} {item.span(u.trips if self.lengths else None)}"
            label = f"L{self.ctx.u.item}.L{n}" if self.ctx else f"L{n}"
            self.emit(1, f"# {label}: {_slots(u.size)} x {u.trips} repetitions ({slots})")
            self.emit(1, f"for {self.i} in range({u.trips}):")
            for line in prelude:
                self.emit(2, line)
            for k, pseudo in self.prev_stored[n].items():
                self.emit(2, f"{self.vidx(n, pseudo, 0, 1, self.i)} = {operand[body.inputs[k]]}")
        base = self.vbase[n]
        if n in self.nests:
            self._forward_nested(u, operand)
            for line in tail:
                self.emit(2, line)
            return
        for j, node in enumerate(body.nodes):
            if isinstance(node.op, str):
                continue
            operand[j] = self.name(u, j)
            expr = node.op.code.format(*(operand[a] for a in node.args))
            self.emit(depth, f"{operand[j]} = {strip_parens(expr)}")
            self.statements += 1
            p = self.pos_of[j]
            if base is not None and (p in self.stored[n] or not u.loop):
                self.emit(depth, f"{self.vidx(n, p, 0, 1, var)} = {operand[j]}")
            if (n, p) in self.fwd_out:  # an output at every repetition: written here
                k0, dk, _ = self.fwd_out[n, p]
                self.emit(depth, f"out[{index(k0, dk, var)}] = {operand[j]}")
        for g in body.guards:
            self._guard(depth, operand[g.a], g.cmp, operand[g.b], g.expected, g.where)
        for line in tail:
            self.emit(depth, line)

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
            self.emit(2, f"w{n} = {index(nest.base, nest.gen.work, self.i)}")
        for line in nest.gen.forward_lines():
            self._splice(2, line)
        self.statements += nest.gen.statements
        base = self.vbase[n]
        for q in nest.needed:  # the body's outputs that are read: the loop's values
            j = u.body.outputs[q]
            p = self.pos_of[j]
            name = self.name(u, j)
            self.emit(2, f"{name} = {nest.gen.ref(nest.nested.program.outputs[q], None)}")
            if base is not None and p in self.stored[n]:
                self.emit(2, f"{self.vidx(n, p, 0, 1, self.i)} = {name}")

    def _splice(self, depth: int, line: str | _Write) -> None:
        """A line an inner generator made at depth 1, at ``depth``."""
        if isinstance(line, _Write):
            line.indent = "    " * (depth - 1) + line.indent
            self.writes_out.append(line)
            self.lines.append(line)
        else:
            self.lines.append("    " * (depth - 1) + line)

    def forward_lines(self) -> list[str | _Write]:
        """(A body folded in turn) its forward, at depth 1."""
        for u in self.units:
            self.pos_of = {j: p for p, j in enumerate(u.positions) if j is not None}
            self._forward(u)
        self._program_guards()
        lines, self.lines = self.lines, []
        return lines

    def reverse_lines(self, seeds: dict[int, str]) -> list[str | _Write]:
        """(A body folded in turn) its reverse, the cotangents of its outputs
        ``seeds[q]`` coming in, at depth 1."""
        self.goff, self.writes, self.trips = {}, [], 1
        self._zero_adjoints()
        for q, ct in seeds.items():
            stmt = self.add(self.program.outputs[q], None, ct)
            if stmt:
                self.emit(1, stmt)
        self._reverse_units()
        lines, self.lines = self.lines, []
        return lines

    def _zero_adjoints(self) -> None:
        """Each call (or outer repetition) starts its adjoints at zero."""
        for u, adj in zip(self.units, self.grad.adjoints):
            n = u.item
            if adj is None:
                continue
            if self.abase[n] is not None:
                b = self.abase[n]
                self.emit(1, f"{self._v(f'{b}:{self._w}{b + u.trips * self.awidth[n]}')} = 0.0")
            for name in self.pinned[n].values():
                self.emit(1, f"{name} = 0.0")

    def _reverse_units(self) -> None:
        """The reverse of every unit with an adjoint, last first."""
        for u, adj in reversed(list(zip(self.units, self.grad.adjoints))):
            if adj is not None:
                self.pos_of = {j: p for p, j in enumerate(u.positions) if j is not None}
                self.trips = u.trips
                self._reverse_unit(u, adj)

    # ---- reverse

    def _reverse(self) -> None:
        gp = self.grad
        self.goff: dict[int, int] = {}
        at = 1
        for p in gp.wrt:
            self.goff[p] = at
            size = self.params[p].size
            if isinstance(size, Lin):  # (batch arguments are the ones not differentiated)
                raise NotAffine(f"the gradient of {self.params[p].name} has a length in n")
            at += 1 if size is None else size
        self.emit(1, "# the reverse sweep: adjoints, last item first")
        self.writes: list[tuple[int, int, int, int]] = []  # (param, c0, c1, count)
        self.trips = 1
        zeroing = len(self.lines)
        if at > 1:
            self.emit(1, f"out[1:{at}] = 0.0")
        self._zero_adjoints()
        self.emit(1, f"out[0] = {self.ref(self.program.outputs[0], None)}")
        seed = self.add(self.program.outputs[0], None, "1.0")
        if seed:
            self.emit(1, seed)
        self._reverse_units()
        if at > 1 and not self.nests:  # (writes inside bodies folded in turn: not counted)
            self._assign_once(zeroing, at)

    def _assign_once(self, zeroing: int, at: int) -> None:
        """When no gradient element is added to twice, store instead of adding,
        and zero only the elements nothing writes."""
        seen = []
        for length in self.lengths or [0]:  # generic code: as at each length traced
            counts = np.zeros(at, np.int64)
            for param, c0, c1, count in self.writes:
                c0, count = at_length(c0, length), at_length(count, length)
                np.add.at(counts, self.goff[param] + c0 + c1 * np.arange(count), 1)
            if counts[1:].max(initial=0) > 1:
                return
            seen.append(counts)
        if any(not np.array_equal(c, seen[0]) for c in seen):
            return
        for w in self.writes_out:
            w.assign = True
        zero = np.flatnonzero(counts[1:] == 0) + 1
        runs = np.split(zero, np.flatnonzero(np.diff(zero) != 1) + 1) if len(zero) else []
        text = [
            f"    out[{r[0]}] = 0.0" if len(r) == 1 else f"    out[{r[0]}:{r[-1] + 1}] = 0.0"
            for r in runs
        ]
        self.lines[zeroing : zeroing + 1] = text

    def _reverse_unit(self, u: Unit, adj) -> None:
        n, body, vjp = u.item, u.body, adj.vjp
        var = self.i if u.loop else None
        depth = 2 if u.loop else 1
        input_of = {j: k for k, j in enumerate(body.inputs)}
        operand: dict[int, str] = {}
        lines: list[str] = []
        carries = {
            k: f"d{self._sid(n, self.pos_of[u.reads[k].slot])}_{k}"
            for k in adj.routes
            if type(u.reads[k]) is Prev
        }
        start = {c: "0.0" for c in carries.values()}
        # forward values the vjp reads, each loaded where it is first used
        pending: dict[int, tuple[str, str]] = {}  # slot -> (local, what it loads)
        nest = self.nests.get(n)  # (a body folded in turn loads its own)
        for s, j in sorted(adj.primal.items()) if nest is None else ():
            if j not in adj.uses:
                continue
            node = body.nodes[j]
            if node.op == CONST:
                operand[s] = literal(node.value)
            elif j in input_of:
                k = input_of[j]
                r = u.reads[k]
                if type(r) is Prev:
                    p = self.pos_of[r.slot]
                    name = self._prev_name(u, k)
                    if k in self.prev_stored[n]:
                        pending[s] = (name, self.vidx(n, self.prev_stored[n][k], 0, 1, self.i))
                    else:
                        first = self.ref(r.init, None)
                        before = self.vidx(n, p, -1, 1, self.i)
                        pending[s] = (name, f"{before} if {self.i} > 0 else {first}")
                    operand[s] = name
                else:
                    operand[s] = self.ref(r, var, u, k)
            else:
                operand[s] = self.name(u, j)
                if u.loop or self.vbase[n] is not None:
                    p = self.pos_of[j]
                    pending[s] = (operand[s], self.vidx(n, p, 0, 1, var))

        def use(a: int) -> str:
            if a in pending:
                name, load = pending.pop(a)
                lines.append(f"{name} = {load}")
            return operand[a]

        # cotangents coming in
        m = len(body.inputs)
        for q, p in enumerate(adj.cts):
            j = u.positions[p]
            terms = []
            slot = self._sid(n, p)
            if self.abase[n] is not None and p in self.arank[n]:
                terms.append(self.aidx(n, p, 0, 1, var))
            mine = [c for k, c in carries.items() if u.reads[k].slot == j]
            for f, name in self.pinned[n].items():
                if f % u.size == p:
                    rep = f // u.size
                    if not u.loop:
                        terms.append(name)
                    elif rep == u.trips - 1 and mine and start[mine[0]] == "0.0":
                        start[mine[0]] = name  # the first repetition reversed
                    else:
                        terms.append(f"({name} if {self.i} == {rep} else 0.0)")
            terms += mine
            operand[vjp.inputs[m + q]] = f"ct{slot}"
            lines.append(f"ct{slot} = {' + '.join(terms) if terms else '0.0'}")
        if nest is not None:  # the body folded in turn: its own reverse, inside the loop
            self._reverse_nested(u, adj, nest, carries, start, lines)
            return
        # the vjp's own statements
        passing: set[int] = set()  # (a block first in a folded body's reverse: its reads
        # that pass a cotangent on to the outer loop's carried value)
        if u.loop:
            exit_ = adj.zero_exit(set(carries))
        elif self.ctx is not None and self._first_reversed(u):
            passing = {k for k, r in enumerate(u.reads) if self.ctx.carried(r)}
            exit_ = adj.zero_exit(passing, min_saved=1)  # (it skips every later unit)
        else:
            exit_ = None
        exit_at, unloaded = -1, {}
        taken: dict[str, int] = {}
        names = vjp.slot_names or [f"t{s}" for s in range(len(vjp.nodes))]
        for s, node in enumerate(vjp.nodes):
            if s in operand or s in adj.primal:  # (a forward value the vjp does not read)
                continue
            if node.op == CONST:
                operand[s] = literal(node.value)
                continue
            if node.op == INPUT:  # a read the vjp does not need (kept by prune)
                continue
            nm = self._vjp_name(u, names[s])
            taken[nm] = taken.get(nm, 0) + 1
            if taken[nm] > 1:
                nm = f"{nm}_{taken[nm] - 1}"
            operand[s] = nm
            expr = node.op.code.format(*(use(a) for a in node.args))
            lines.append(f"{nm} = {strip_parens(expr)}")
            self.statements += 1
            if exit_ is not None and s == exit_[0]:
                exit_at, unloaded = len(lines), dict(pending)
        # cotangents going out
        groups: dict[tuple[int, int], list[tuple[Arg, str]]] = {}
        fixed: dict[Read, str] = {}
        for k, o in zip(adj.routes, vjp.outputs):
            ct = use(o)
            if k in carries:
                lines.append(f"{carries[k]} = {ct}")
                continue
            if vjp.nodes[o].op == CONST and vjp.nodes[o].value == 0.0:
                continue
            r = u.reads[k]
            if u.loop and type(r) is Arg and r.index.c1 and r.param in self.goff:
                groups.setdefault((r.param, r.index.c1), []).append((r, ct))
                continue
            if u.loop and type(r) in (Arg, At) and r.index.c1 == 0:
                # the same element every repetition: summed in a local, added once
                if r not in fixed:
                    fixed[r] = f"s{self.px}{u.item}_{len(fixed)}"
                lines.append(f"{fixed[r]} += {ct}")
                continue
            stmt = self.add(r, var, ct)
            if stmt:
                lines.append(stmt)
        before = [f"{name} = 0.0" for name in fixed.values()]
        after = [line for r, name in fixed.items() if (line := self.add(r, None, name))]
        skip: list = []  # what a repetition whose cotangent is zero still does
        for k, ((param, c1), members) in enumerate(groups.items()):
            self._shift(u, param, c1, members, lines, before, after, skip, k)
        if exit_at >= 0:
            s, outs = exit_
            # a gradient element the skipped part would have set (``=``, written once)
            # is set to 0.0 instead; the shift registers' elements are written above
            covered = {w.index for w in skip if isinstance(w, _Write)}
            skip += [
                _Write(w.index, "0.0", stand_in=True)
                for w in lines[exit_at:]
                if isinstance(w, _Write) and w.index not in covered
            ]
            for k, same in zip(adj.routes, outs):
                if k in carries or k in passing:
                    value = (
                        "0.0"
                        if same is None
                        else unloaded[same][1]
                        if same in unloaded
                        else operand[same]
                    )
                    if k in carries:
                        skip.insert(0, f"{carries[k]} = {value}")
                    elif same is not None:  # the outer loop's carried cotangent
                        skip.insert(0, self.add(u.reads[k], None, value))
            note = "  # nothing flows back through this repetition"
            lines[exit_at:exit_at] = (
                [f"if {operand[s]} == 0.0:{note}"]
                + [_Indented(line) for line in skip]
                + [_Indented("continue")]
            )
        kind = "L" if u.loop else "B"
        self.emit(1, f"# reverse of {kind}{n}")
        for c in carries.values():
            self.emit(1, f"{c} = {start[c]}")
        for line in before:
            self.emit(1, line)
        if u.loop:
            self.emit(1, f"for {self.i} in range({u.trips - 1}, -1, -1):")
        for line in lines:
            self.emit(depth, line)
        for k, c in carries.items():
            stmt = self.add(u.reads[k].init, None, c)
            if stmt:
                self.emit(1, stmt)
        for line in after:
            self.emit(1, line)

    def _reverse_nested(
        self,
        u: Unit,
        adj: Adjoint,
        nest: _Nest,
        carries: dict[int, str],
        start: dict[str, str],
        lines: list,
    ) -> None:
        n = u.item
        nest.mode, nest.carries = "rev", carries
        outs = [p for p, j in enumerate(u.positions) if j is not None]
        seeds = {outs.index(p): f"ct{self._sid(n, p)}" for p in adj.cts}
        before = nest.gen.statements
        inner = nest.gen.reverse_lines(seeds)
        self.statements += nest.gen.statements - before
        self.emit(1, f"# reverse of L{n}, its body folded in turn")
        for c in carries.values():
            self.emit(1, f"{c} = {start[c]}")
        self.emit(1, f"for {self.i} in range({u.trips - 1}, -1, -1):")
        if nest.gen.work:
            self.emit(2, f"w{n} = {index(nest.base, nest.gen.work, self.i)}")
        for line in lines:
            self.emit(2, line)
        for c in carries.values():  # the body's reverse adds to them
            self.emit(2, f"{c} = 0.0")
        for line in inner:
            self._splice(2, line)
        for k, c in carries.items():
            stmt = self.add(u.reads[k].init, None, c)
            if stmt:
                self.emit(1, stmt)

    def _shift(
        self,
        u: Unit,
        param: int,
        c1: int,
        members: list[tuple[Arg, str]],
        lines: list[str],
        before: list[str],
        after: list[str],
        skip: list,
        group: int,
    ) -> None:
        """Add the cotangents of reads ``x[c0 + c1 * i]`` of one argument
        (``group`` numbers the (argument, stride) pairs of one body, so that each
        pair's register has names of its own).

        Reads whose offsets differ by whole strides (``x[i]`` and ``x[i + 1]``)
        reach the same element in neighbouring repetitions. Each element's
        cotangent is summed in locals carried from one repetition to the next
        (a shift register) and added to the gradient once, when its last
        contribution is in: one memory update per element, not one per read.
        """
        c0 = members[0][0].index.c0
        by_q: dict[int, list[str]] = {}
        for r, ct in members:
            d = r.index.c0 - c0
            if d % c1:  # another residue: added directly
                lines.append(self.add(r, self.i, ct))
                continue
            by_q.setdefault(d // c1, []).append(ct)
        if len(by_q) < 2:
            for q, cts in by_q.items():
                for ct in cts:
                    lines.append(self.add(Arg(param, Affine(c0 + c1 * q, c1)), self.i, ct))
            return
        lo, hi = min(by_q), max(by_q)
        g = self.goff[param]
        self.writes.append((param, c0 + c1 * lo, c1, u.trips + hi - lo))
        reg = {d: f"r{self.px}{u.item}_{group}_{d - lo}" for d in range(lo, hi)}
        before += [f"{name} = 0.0" for name in reg.values()]
        total = " + ".join([reg[hi - 1], *by_q[hi]])
        lines.append(_Write(index(g + c0 + c1 * hi, c1, self.i), total))
        for d in range(hi - 1, lo, -1):
            lines.append(f"{reg[d]} = {' + '.join([reg[d - 1], *by_q.get(d, [])])}")
        lines.append(f"{reg[lo]} = {' + '.join(by_q[lo])}")
        after += [_Write(str(g + c0 + c1 * d), name) for d, name in reg.items()]
        # a skipped repetition still moves the register along
        skip.append(_Write(index(g + c0 + c1 * hi, c1, self.i), reg[hi - 1]))
        skip += [f"{reg[d]} = {reg[d - 1]}" for d in range(hi - 1, lo, -1)]
        skip.append(f"{reg[lo]} = 0.0")

    def _vjp_name(self, u: Unit, name: str) -> str:
        """``b{k}``, the adjoint of body slot k, after the tape slot of repetition 0."""
        if name.startswith("b") and name[1:].isdigit():
            j = int(name[1:])
            if j in self.pos_of:
                return f"b{self._sid(u.item, self.pos_of[j])}"
            return f"g{self.px}{u.item}_{j}"
        tag = f"{self.px}{u.item}"
        return f"t{tag}_{name[1:]}" if name.startswith("t") else f"t{tag}_{name}"


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
        self.gen = _Gen(what, list(nested.program.params), ctx=self)

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
            return f"({outer.vidx(n, p, -1, 1, outer.i)} if {outer.i} > 0 else {first})"
        return outer.ref(read, outer.i, u, k)

    def carried(self, r: Read) -> bool:
        """Whether read ``r`` of the body's program is the outer loop's ``prev``, whose
        cotangent is carried to the repetition before."""
        if type(r) is not Arg:
            return False
        kind = self.nested.sources[r.param]
        return kind[0] == "read" and kind[1] in self.carries

    def add_arg(self, r: Arg, var: str | None, ct: str) -> str | _Write | None:
        kind = self.nested.sources[r.param]
        outer = self.outer
        if kind[0] == "array":
            _, p, c1 = kind
            if p not in outer.goff:
                return None
            idx = index2(outer.goff[p] + r.index.c0, [(r.index.c1, var), (c1, outer.i)])
            return _Write(idx, ct)
        k = kind[1]
        if k in self.carries:
            return f"{self.carries[k]} += {ct}"
        if self.adj is None or k not in self.adj.routes:
            return None
        return outer.add(self.u.reads[k], outer.i, ct)


__all__ = ["Generated", "generate"]
