"""The reverse sweep of a loop program, printed: each adjoint loop written once.

A part of the loop printer (``loopgen``): :class:`ReversePrinter` is mixed into
its generator, whose ``Layout`` says where values and adjoints live. It prints,
last item first, the vector-Jacobian product of each unit's body
(``loops.grad.Adjoint``): the forward values it reads loaded where first used,
the cotangents coming in (stored adjoints, pinned locals, the cotangent carried
from the repetition after), the product's statements, and the cotangents going
out (a gradient element, an adjoint, the carried cotangent; reads of one
argument at indices whose offsets differ by whole strides summed in a shift
register). A repetition whose cotangent is zero skips the rest (``continue``).
Statements are the renderer's (``render``); expressions are built with the
generator's target ``t``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.tape import CONST, INPUT
from ..loops.grad import Adjoint, Unit
from ..loops.ir import Affine, Arg, At, Lin, NotAffine, Prev, Read, at_length
from ..loops.layout import index
from .render import Assign, Comment, Continue, Fill, For, If, strip_parens


class Write(Assign):
    """A gradient element's update, ``out[index] += ct``; printed as ``=`` when no
    element of the gradient is written twice (``assign``, set by ``_assign_once``).

    ``stand_in``: the write of 0.0 that a skipped repetition does in place of
    another write: needed only where writes are ``=`` (nothing else sets the
    element then), ``pass`` where they add.
    """

    def __init__(self, index: str, ct: str, stand_in: bool = False) -> None:
        super().__init__(f"out[{index}]", ct, "+", noop=stand_in)
        self.index, self.ct, self.stand_in = index, ct, stand_in

    @property
    def assign(self) -> bool:
        return self.op == ""

    @assign.setter
    def assign(self, value: bool) -> None:
        self.op = "" if value else "+"
        self.noop = self.stand_in and not value


class Indented:
    """A statement one level deeper than the statements around it."""

    __slots__ = ("line",)

    def __init__(self, line: Any) -> None:
        self.line = line


@dataclass
class _Unit:
    """What the reverse of one unit is being printed from (``ReversePrinter``)."""

    u: Unit
    adj: Adjoint
    var: str | None  # the loop variable, or None for a block
    operand: dict[int, str] = field(default_factory=dict)  # vjp slot -> its expression
    pending: dict[int, tuple[str, str]] = field(default_factory=dict)  # slot -> (local, load)
    lines: list = field(default_factory=list)  # the body's statements (relative depth 0)
    carries: dict[int, str] = field(default_factory=dict)  # prev read -> carried cotangent
    start: dict[str, str] = field(default_factory=dict)  # carried cotangent -> its start

    def use(self, a: int) -> str:
        """Slot ``a``'s expression, loading it first where it is a forward value."""
        if a in self.pending:
            name, load = self.pending.pop(a)
            self.lines.append(Assign(name, load))
        return self.operand[a]


class ReversePrinter:
    """The reverse sweep of the generator it is mixed into (see the module doc)."""

    def reverse_lines(self, seeds: dict[int, str]) -> list:
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
                end = b + u.trips * self.awidth[n]
                self.emit(1, Fill("v", f"{self._w}{b}", f"{self._w}{end}", "0.0"))
            for name in self.pinned[n].values():
                self.emit(1, Assign(name, "0.0"))

    def _reverse_units(self) -> None:
        """The reverse of every unit with an adjoint, last first."""
        for u, adj in reversed(list(zip(self.units, self.grad.adjoints))):
            if adj is not None:
                self.pos_of = {j: p for p, j in enumerate(u.positions) if j is not None}
                self.trips = u.trips
                self._reverse_unit(u, adj)

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
        self.emit(1, Comment("the reverse sweep: adjoints, last item first"))
        self.writes: list[tuple[int, int, int, int]] = []  # (param, c0, c1, count)
        self.trips = 1
        zeroing = len(self.lines)
        if at > 1:
            self.emit(1, Fill("out", 1, at, "0.0"))
        self._zero_adjoints()
        self.emit(1, Assign("out[0]", self.ref(self.program.outputs[0], None)))
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
        self.lines[zeroing : zeroing + 1] = [
            (
                1,
                Assign(f"out[{r[0]}]", "0.0")
                if len(r) == 1
                else Fill("out", r[0], r[-1] + 1, "0.0"),
            )
            for r in runs
        ]

    # ---- one unit

    def _reverse_unit(self, u: Unit, adj: Adjoint) -> None:
        n = u.item
        st = _Unit(u, adj, self.i if u.loop else None)
        st.carries = {
            k: f"d{self._sid(n, self.pos_of[u.reads[k].slot])}_{k}"
            for k in adj.routes
            if type(u.reads[k]) is Prev
        }
        st.start = {c: "0.0" for c in st.carries.values()}
        nest = self.nests.get(n)  # (a body folded in turn loads its own)
        if nest is None:
            self._vjp_reads(st)
        self._incoming(st)
        if nest is not None:  # the body folded in turn: its own reverse, inside the loop
            self._reverse_nested(u, adj, nest, st.carries, st.start, st.lines)
            return
        passing: set[int] = set()  # (a block first in a folded body's reverse: its reads
        # that pass a cotangent on to the outer loop's carried value)
        if u.loop:
            exit_ = adj.zero_exit(set(st.carries))
        elif self.ctx is not None and self._first_reversed(u):
            passing = {k for k, r in enumerate(u.reads) if self.ctx.carried(r)}
            exit_ = adj.zero_exit(passing, min_saved=1)  # (it skips every later unit)
        else:
            exit_ = None
        exit_at, unloaded = self._vjp_statements(st, exit_)
        before, after, skip = self._outgoing(st)
        if exit_at >= 0:
            self._zero_exit(st, exit_, exit_at, unloaded, passing, skip)
        self._emit_unit(st, before, after)

    def _vjp_reads(self, st: _Unit) -> None:
        """The forward values the vjp reads: constants, reads, and values loaded from
        the work array where first used (``st.pending``)."""
        u, adj, n, var = st.u, st.adj, st.u.item, st.var
        input_of = {j: k for k, j in enumerate(u.body.inputs)}
        for s, j in sorted(adj.primal.items()):
            if j not in adj.uses:
                continue
            node = u.body.nodes[j]
            if node.op == CONST:
                st.operand[s] = self.t.lit(node.value)
            elif j in input_of:
                k = input_of[j]
                r = u.reads[k]
                if type(r) is Prev:
                    p = self.pos_of[r.slot]
                    name = self._prev_name(u, k)
                    if k in self.prev_stored[n]:
                        load = self.vidx(n, self.prev_stored[n][k], 0, 1, self.i)
                    else:
                        first = self.ref(r.init, None)
                        before = self.vidx(n, p, -1, 1, self.i)
                        load = self.t.select(f"{self.i} > 0", before, first)
                    st.pending[s] = (name, load)
                    st.operand[s] = name
                else:
                    st.operand[s] = self.ref(r, var, u, k)
            else:
                st.operand[s] = self.name(u, j)
                if u.loop or self.vbase[n] is not None:
                    p = self.pos_of[j]
                    st.pending[s] = (st.operand[s], self.vidx(n, p, 0, 1, var))

    def _incoming(self, st: _Unit) -> None:
        """The cotangents coming in: ``ct<slot> = ...`` per output of the body."""
        u, n, var = st.u, st.u.item, st.var
        m = len(u.body.inputs)
        for q, p in enumerate(st.adj.cts):
            j = u.positions[p]
            terms = []
            slot = self._sid(n, p)
            if self.abase[n] is not None and p in self.arank[n]:
                terms.append(self.aidx(n, p, 0, 1, var))
            mine = [c for k, c in st.carries.items() if u.reads[k].slot == j]
            for f, name in self.pinned[n].items():
                if f % u.size == p:
                    rep = f // u.size
                    if not u.loop:
                        terms.append(name)
                    elif rep == u.trips - 1 and mine and st.start[mine[0]] == "0.0":
                        st.start[mine[0]] = name  # the first repetition reversed
                    else:
                        terms.append(self.t.select(f"{self.i} == {rep}", name, "0.0", True))
            terms += mine
            st.operand[st.adj.vjp.inputs[m + q]] = f"ct{slot}"
            st.lines.append(Assign(f"ct{slot}", " + ".join(terms) if terms else "0.0"))

    def _vjp_statements(self, st: _Unit, exit_: Any) -> tuple[int, dict]:
        """The vjp's own statements; where the zero exit goes (-1: none) and what
        was not loaded yet there."""
        vjp = st.adj.vjp
        exit_at, unloaded = -1, {}
        taken: dict[str, int] = {}
        names = vjp.slot_names or [f"t{s}" for s in range(len(vjp.nodes))]
        for s, node in enumerate(vjp.nodes):
            if s in st.operand or s in st.adj.primal:  # (a forward value it does not read)
                continue
            if node.op == CONST:
                st.operand[s] = self.t.lit(node.value)
                continue
            if node.op == INPUT:  # a read the vjp does not need (kept by prune)
                continue
            nm = self._vjp_name(st.u, names[s])
            taken[nm] = taken.get(nm, 0) + 1
            if taken[nm] > 1:
                nm = f"{nm}_{taken[nm] - 1}"
            st.operand[s] = nm
            expr = self.t.op(node.op, [st.use(a) for a in node.args])
            st.lines.append(Assign(nm, strip_parens(expr)))
            self.statements += 1
            if exit_ is not None and s == exit_[0]:
                exit_at, unloaded = len(st.lines), dict(st.pending)
        return exit_at, unloaded

    def _outgoing(self, st: _Unit) -> tuple[list, list, list]:
        """The cotangents going out; the statements before the loop, after it, and
        what a skipped repetition still does (``_zero_exit``)."""
        u, adj, var = st.u, st.adj, st.var
        groups: dict[tuple[int, int], list[tuple[Arg, str]]] = {}
        fixed: dict[Read, str] = {}
        for k, o in zip(adj.routes, adj.vjp.outputs):
            ct = st.use(o)
            if k in st.carries:
                st.lines.append(Assign(st.carries[k], ct))
                continue
            if adj.vjp.nodes[o].op == CONST and adj.vjp.nodes[o].value == 0.0:
                continue
            r = u.reads[k]
            if u.loop and type(r) is Arg and r.index.c1 and r.param in self.goff:
                groups.setdefault((r.param, r.index.c1), []).append((r, ct))
                continue
            if u.loop and type(r) in (Arg, At) and r.index.c1 == 0:
                # the same element every repetition: summed in a local, added once
                if r not in fixed:
                    fixed[r] = f"s{self.px}{u.item}_{len(fixed)}"
                st.lines.append(Assign(fixed[r], ct, "+"))
                continue
            stmt = self.add(r, var, ct)
            if stmt:
                st.lines.append(stmt)
        before = [Assign(name, "0.0") for name in fixed.values()]
        after = [line for r, name in fixed.items() if (line := self.add(r, None, name))]
        skip: list = []  # what a repetition whose cotangent is zero still does
        for k, ((param, c1), members) in enumerate(groups.items()):
            self._shift(u, param, c1, members, st.lines, before, after, skip, k)
        return before, after, skip

    def _zero_exit(
        self, st: _Unit, exit_: Any, exit_at: int, unloaded: dict, passing: set, skip: list
    ) -> None:
        """``if <cotangent> == 0.0: ... continue`` where the vjp's cotangent is zero."""
        s, outs = exit_
        # a gradient element the skipped part would have set (``=``, written once)
        # is set to 0.0 instead; the shift registers' elements are written above
        covered = {w.index for w in skip if isinstance(w, Write)}
        skip += [
            Write(w.index, "0.0", stand_in=True)
            for w in st.lines[exit_at:]
            if isinstance(w, Write) and w.index not in covered
        ]
        for k, same in zip(st.adj.routes, outs):
            if k in st.carries or k in passing:
                value = (
                    "0.0"
                    if same is None
                    else unloaded[same][1]
                    if same in unloaded
                    else st.operand[same]
                )
                if k in st.carries:
                    skip.insert(0, Assign(st.carries[k], value))
                elif same is not None:  # the outer loop's carried cotangent
                    skip.insert(0, self.add(st.u.reads[k], None, value))
        note = "nothing flows back through this repetition"
        st.lines[exit_at:exit_at] = (
            [If(f"{st.operand[s]} == 0.0", note)]
            + [Indented(line) for line in skip]
            + [Indented(Continue())]
        )

    def _emit_unit(self, st: _Unit, before: list, after: list) -> None:
        """The reverse of one unit: its starts, its loop (or block), what follows."""
        u = st.u
        self.emit(1, Comment(f"reverse of {'L' if u.loop else 'B'}{u.item}"))
        for c in st.carries.values():
            self.emit(1, Assign(c, st.start[c]))
        for line in before:
            self.emit(1, line)
        if u.loop:
            self.emit(1, For(self.i, u.trips, down=True))
        for line in st.lines:
            self.emit(2 if u.loop else 1, line)
        for k, c in st.carries.items():
            stmt = self.add(u.reads[k].init, None, c)
            if stmt:
                self.emit(1, stmt)
        for line in after:
            self.emit(1, line)

    def _reverse_nested(
        self,
        u: Unit,
        adj: Adjoint,
        nest: Any,
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
        self.emit(1, Comment(f"reverse of L{n}, its body folded in turn"))
        for c in carries.values():
            self.emit(1, Assign(c, start[c]))
        self.emit(1, For(self.i, u.trips, down=True))
        if nest.gen.work:
            self.emit(2, Assign(f"w{n}", index(nest.base, nest.gen.work, self.i), type="long"))
        for line in lines:
            self.emit(2, line)
        for c in carries.values():  # the body's reverse adds to them
            self.emit(2, Assign(c, "0.0"))
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
        lines: list,
        before: list,
        after: list,
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
        before += [Assign(name, "0.0") for name in reg.values()]
        total = " + ".join([reg[hi - 1], *by_q[hi]])
        lines.append(Write(index(g + c0 + c1 * hi, c1, self.i), total))
        for d in range(hi - 1, lo, -1):
            lines.append(Assign(reg[d], " + ".join([reg[d - 1], *by_q.get(d, [])])))
        lines.append(Assign(reg[lo], " + ".join(by_q[lo])))
        after += [Write(str(g + c0 + c1 * d), name) for d, name in reg.items()]
        # a skipped repetition still moves the register along
        skip.append(Write(index(g + c0 + c1 * hi, c1, self.i), reg[hi - 1]))
        skip += [Assign(reg[d], reg[d - 1]) for d in range(hi - 1, lo, -1)]
        skip.append(Assign(reg[lo], "0.0"))

    def _vjp_name(self, u: Unit, name: str) -> str:
        """``b{k}``, the adjoint of body slot k, after the tape slot of repetition 0."""
        if name.startswith("b") and name[1:].isdigit():
            j = int(name[1:])
            if j in self.pos_of:
                return f"b{self._sid(u.item, self.pos_of[j])}"
            return f"g{self.px}{u.item}_{j}"
        tag = f"{self.px}{u.item}"
        return f"t{tag}_{name[1:]}" if name.startswith("t") else f"t{tag}_{name}"
