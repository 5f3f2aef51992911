"""Layout of generated loop code: which values are stored where in the work array.

Layout (which values are stored where):

- a loop's value ``p`` of repetition ``i`` is a local inside the repetition
  (named after the tape slot of repetition 0), and is stored in ``v`` when a
  later item reads it or its reverse loop needs it: packed, at ``base +
  rank[p] + width * i``, when every reader reads whole repetitions, else at
  ``base + size * i + p``; a value read only at the last repetition is the
  local the loop leaves behind;
- a block's values are locals, also stored when a loop reads them at an
  index that advances;
- the adjoint of a value read at an index that advances lives in ``v`` too
  (zeroed each call); one read only at fixed indices is a local;
- a loop-carried value (``prev``) is a local carried from one repetition to
  the next, and its cotangent is carried back the same way; where several
  ``prev`` reads carry one value with different starts (``t = g(t, s); s =
  t``), each but the first has a local of its own, set to the value at the
  end of each repetition.
"""

from __future__ import annotations

from collections.abc import Sequence

from .grad import Unit
from .ir import At, Block, Column, Loop, Prev, Read

#: Reads of an adjoint at fixed indices kept in locals, at most this many per loop.
PINNED_MAX = 4


def index(c0: int, c1: int, var: str | None) -> str:
    """``c0 + c1 * var`` printed short (``var`` None: repetition 0)."""
    if var is None or c1 == 0:
        return str(c0)
    term = var if abs(c1) == 1 else f"{abs(c1)} * {var}"
    if c0 == 0:
        return term if c1 > 0 else f"-{term}"
    return f"{c0} + {term}" if c1 > 0 else f"{c0} - {term}"


def index2(c0: int, terms: Sequence[tuple[int, str | None]]) -> str:
    """``c0 + sum(c * var)`` printed short."""
    out = str(c0) if c0 != 0 else ""
    for c, var in terms:
        if var is None or c == 0:
            continue
        term = var if abs(c) == 1 else f"{abs(c)} * {var}"
        if not out:
            out = term if c > 0 else f"-{term}"
        else:
            out += f" + {term}" if c > 0 else f" - {term}"
    return out or "0"


class Layout:
    """Where the values and adjoints of a program's items live (a part of the code
    generator, ``loopgen``; it reads the generator's ``program``, ``units``,
    ``grad``, ``ctx``, ``px`` and ``_w``)."""

    def _take(self, n: int) -> int:
        base, self.work = self.work, self.work + n
        return base

    def _layout(self) -> None:
        """Where every stored value and adjoint lives, in phases: what is read,
        what must be stored, how repetitions are packed, then the bases."""
        us = self.units
        adjoints = self.grad.adjoints if self.grad else [None] * len(us)
        self.fwd_out = self._forward_outputs()
        # the outputs those loops write
        self.fwd_done = {
            k for k0, dk, m in self.fwd_out.values() for k in range(k0, k0 + dk * m, dk)
        }
        reads, checked = self._reads()
        stored, strided, incoming, last = self._stored(reads, checked, adjoints)
        self.stored = stored
        self._ranks(reads, checked, incoming, adjoints)
        self._bases(strided, incoming, last, adjoints)
        # columns of per-repetition constants
        self.cbase: dict[tuple[int, int], int] = {}
        for u in us:
            for k, r in enumerate(u.reads):
                if type(r) is Column:
                    self.cbase[u.item, k] = len(self.columns)
                    self.columns.extend(r.values)

    def _reads(self) -> tuple[list[Read], list[Read]]:
        """What the outputs and the loops' bodies read, and what the guards outside
        loops read (stored too: they have no adjoints)."""
        program = self.program
        outs = (
            [k for k in range(len(program.outputs)) if k not in self.fwd_done]
            if self.ctx is None
            else self.ctx.needed
        )
        reads: list[Read] = [program.outputs[q] for q in outs]
        for u in self.units:
            reads += [r.init if type(r) is Prev else r for r in u.reads]
        checked = [r for g in program.guards for r in g[1:3]]
        checked += [r for gl in program.guard_loops for r in (gl.a, gl.b)]
        return reads, checked

    def _stored(self, reads: list[Read], checked: list[Read], adjoints: list) -> tuple:
        """Per item: the positions stored for later reads, whether it is read at an
        advancing index, the reads the adjoints come in by, and the positions read
        at the last repetition."""
        program, n_items = self.program, len(self.units)
        stored: list[set[int]] = [set() for _ in range(n_items)]
        strided = [False] * n_items  # read at an index that advances
        incoming: list[list[At]] = [[] for _ in range(n_items)]  # adjoint reads
        last: list[set[int]] = [set() for _ in range(n_items)]  # read at the last repetition
        for r in reads + checked:
            if type(r) is not At:
                continue
            item = program.items[r.item]
            if type(item) is Loop and self._last(r):
                last[r.item].add(r.index.c0 % item.size)
            if type(item) is Loop and not self._last(r):
                size = item.size
                if r.index.c1 % size == 0:
                    stored[r.item].add(r.index.c0 % size)
                else:
                    stored[r.item].update(range(size))
            if r.index.c1 != 0:
                strided[r.item] = True
        if self.grad:
            seeded = [program.outputs[q] for q in self.grad.seeds]
            for r in seeded + reads:
                if type(r) is At:
                    incoming[r.item].append(r)
        for u, adj in zip(self.units, adjoints):
            if adj is None or not u.loop or program.items[u.item].inner is not None:
                continue  # (a body folded in turn stores its values itself)
            pos_of = {j: p for p, j in enumerate(u.positions) if j is not None}
            for j in adj.uses:
                if j in pos_of:
                    stored[u.item].add(pos_of[j])
        return stored, strided, incoming, last

    def _ranks(
        self, reads: list[Read], checked: list[Read], incoming: list[list[At]], adjoints: list
    ) -> None:
        """How each item's stored values (``rank``, ``width``) and adjoints
        (``arank``, ``awidth``) are packed per repetition, and where the values its
        prev reads read are stored (``prev_stored``)."""
        program, stored = self.program, self.stored
        self.prev_stored: list[dict[int, int]] = [{} for _ in self.units]
        # a loop read only at whole repetitions keeps its stored values packed:
        # value p of repetition i at base + rank[p] + width * i
        self.rank: list[dict[int, int]] = []
        self.width: list[int] = []
        self.arank: list[dict[int, int]] = []  # the same for adjoints
        self.awidth: list[int] = []
        for u in self.units:
            aligned = all(
                r.index.c1 % u.size == 0
                for r in reads + checked
                if type(r) is At and r.item == u.item
            )
            if u.loop and aligned:
                got = sorted({r.index.c0 % u.size for r in incoming[u.item]})
                self.arank.append({p: k for k, p in enumerate(got)})
            else:
                self.arank.append({p: p for p in range(u.size)})
            self.awidth.append(len(self.arank[-1]))
            adj = adjoints[u.item]
            # the prev reads whose values the reverse reads (a body folded in turn:
            # every one, as its own reverse may read one that the body's vjp does
            # not, a loop inside starting from it)
            nested = u.loop and program.items[u.item].inner is not None
            prev = [
                k
                for k, r in enumerate(u.reads)
                if adj is not None and type(r) is Prev and (nested or u.body.inputs[k] in adj.uses)
            ]
            if u.loop and aligned:
                # the value a prev read reads is stored with its repetition, as
                # pseudo-position size + k, so that the reverse loads it as it is
                rank = {p: k for k, p in enumerate(sorted(stored[u.item]))}
                for k in prev:
                    rank[u.size + k] = len(rank)
                    self.prev_stored[u.item][k] = u.size + k
            else:  # read across repetitions: every value at its flat index
                pos_of = {j: p for p, j in enumerate(u.positions) if j is not None}
                stored[u.item].update(pos_of[u.reads[k].slot] for k in prev)
                rank = {p: p for p in range(u.size)}
            self.rank.append(rank)
            self.width.append(len(rank))

    def _read_back(self, adjoints: list) -> list[bool]:
        """Per item: whether another item's reverse reads its values. Inside a body
        folded in turn such blocks are stored per repetition of the outer loop (a
        local would hold the last repetition's value when the reverse runs)."""
        read_back = [False] * len(self.units)
        for u, adj in zip(self.units, adjoints):
            if adj is None:
                continue
            for k, r in enumerate(u.reads):
                if type(r) is At and u.body.inputs[k] in adj.uses:
                    read_back[r.item] = True
        return read_back

    def _bases(
        self, strided: list[bool], incoming: list[list[At]], last: list[set[int]], adjoints: list
    ) -> None:
        """Where each item's values (``vbase``) and adjoints (``abase``) start in the
        work array, the adjoints kept in named locals instead (``pinned``), and the
        plan of each loop whose body is folded in turn (``nest_plan``)."""
        program, stored = self.program, self.stored
        read_back = self._read_back(adjoints)
        n_items = len(self.units)
        self.nest_plan: dict[int, tuple] = {}  # loops whose body is folded in turn
        self.vbase: list[int | None] = [None] * n_items
        self.abase: list[int | None] = [None] * n_items
        self.pinned: list[dict[int, str]] = [{} for _ in range(n_items)]
        for u, adj in zip(self.units, adjoints):
            n = u.item
            if (u.loop and self.width[n] and (stored[n] or self.prev_stored[n])) or (
                not u.loop
                and (strided[n] or (self.ctx is not None and (adj is not None or read_back[n])))
            ):
                self.vbase[n] = self._take(u.trips * self.width[n])
            nested = program.items[n].inner if u.loop else None
            if nested is not None:
                inner = self.grad.inner.get(n) if self.grad and adj is not None else None
                pos = self.pos_of_unit(u)
                carried = {pos[r.slot] for r in u.reads if type(r) is Prev}
                want = stored[n] | last[n] | carried
                needed = [q for q, j in enumerate(u.body.outputs) if pos[j] in want]
                self.nest_plan[n] = (nested, adj, inner, needed)
            if adj is None:
                continue
            flat = list(dict.fromkeys(r.index.c0 for r in incoming[n] if r.index.c1 == 0))
            if not u.loop and not strided[n]:
                self.pinned[n] = {f: f"a{self._sid(n, f)}" for f in flat}
            elif u.loop and all(r.index.c1 == 0 for r in incoming[n]) and len(flat) <= PINNED_MAX:
                # named after the value's slot in repetition 0, and which one it is
                self.pinned[n] = {
                    f: f"a{self._sid(n, f % u.size)}_{k}" for k, f in enumerate(flat)
                }
            else:
                self.abase[n] = self._take(u.trips * self.awidth[n])

    def _forward_outputs(self) -> dict[tuple[int, int], tuple[int, int, int]]:
        """Value code (no reverse), outer program: loop positions that are outputs at
        every repetition, at evenly spaced output indices, which the loop writes to
        ``out`` itself. (item, position) -> (k0, dk, repetitions): repetition ``i``
        is output ``k0 + dk * i``."""
        program = self.program
        if self.grad is not None or self.ctx is not None or self.lengths:
            return {}
        where: dict[tuple[int, int], dict[int, int]] = {}
        for k, r in enumerate(program.outputs):
            if type(r) is not At or r.index.c1 != 0:
                continue
            item = program.items[r.item]
            if type(item) is Loop and item.inner is None:
                q, p = divmod(r.index.c0, item.size)
                where.setdefault((r.item, p), {}).setdefault(q, k)  # (a repeat: printed)
        found = {}
        for (n, p), ks in where.items():
            trips, u = self.program.items[n].trips, self.units[n]
            j = u.positions[p]
            if trips < 2 or len(ks) != trips or j is None or isinstance(u.body.nodes[j].op, str):
                continue
            k0, dk = ks[0], ks[1] - ks[0]
            if dk and all(ks[q] == k0 + dk * q for q in range(trips)):
                found[(n, p)] = (k0, dk, trips)
        return found

    @staticmethod
    def pos_of_unit(u: Unit) -> dict[int, int]:
        """Body slot -> the position it holds."""
        return {j: p for p, j in enumerate(u.positions) if j is not None}

    def vidx(self, n: int, p: int, rep0: int, rep1: int, var: str | None) -> str:
        """Where value ``p`` of repetition ``rep0 + rep1 * var`` of item ``n`` is stored."""
        w = self.width[n]
        return self._v(index(self.vbase[n] + self.rank[n][p] + w * rep0, w * rep1, var))

    def aidx(self, n: int, p: int, rep0: int, rep1: int, var: str | None) -> str:
        """Where the adjoint of value ``p`` of repetition ``rep0 + rep1 * var`` is summed."""
        w = self.awidth[n]
        return self._v(index(self.abase[n] + self.arank[n][p] + w * rep0, w * rep1, var))

    def _last(self, r: At) -> bool:
        """Whether ``r`` reads a loop's value of its last repetition: the local
        the loop leaves behind, not stored."""
        item = self.program.items[r.item]
        if self.ctx is not None:  # (locals do not outlive the outer repetition)
            return False
        return type(item) is Loop and r.index.c1 == 0 and r.index.c0 // item.size == item.trips - 1

    def _sid(self, n: int, f: int) -> str:
        """The name part of value ``f`` of item ``n``: its tape slot (in a loop body
        folded in turn, after the outer loop's ``px``)."""
        return f"{self.px}{self._slot(n, f)}"

    def _v(self, index: str) -> str:
        """``v[index]``; in a body folded in turn, from its outer repetition's region."""
        return f"v[{self._w}{index}]"

    def _slot(self, n: int, f: int) -> int:
        """The tape slot of value ``f`` of item ``n`` (for names)."""
        item = self.program.items[n]
        return item.slots[f] if type(item) is Block else item.slot(f)
