"""Finding repeated tape segments (the detection half of folding).

A segment is K consecutive slots repeated R times in which every position
holds the same op in every repetition and every operand is, across
repetitions, an arithmetic progression of slots: the same slot (a parameter,
a loop invariant), the same distance back (inside the repetition, or the
previous repetition's accumulator), or advancing by a fixed stride
(``x[i]``, the i-th example's data, the forward value an adjoint reads).

Detection is greedy, left to right, in time roughly linear in the tape:
hashes of op-code windows at a few widths propose periods, and a vectorised
check over whole repetitions confirms them. A repetition that breaks any
progression ends the segment. ``adcompile.loops.ir`` makes each segment a
``for`` loop whose body is written once.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.tape import CONST, INPUT, Guard, Param, Tape

#: A segment needs at least this many repetitions ...
MIN_REPS = 4
#: ... and must remove at least this many statements from the source.
MIN_SAVED = 12
#: Widths of the op-code windows whose repeats propose periods: short windows
#: find short bodies, long ones see past a body's own inner repetition (the
#: neurons of a layer) to the loop over examples around it.
WINDOWS = (4, 32, 256, 2048)

_LINE, _CONSTC, INPUT_CLASS = -1, -2, -3  # slot classes besides segment ids


@dataclass(frozen=True)
class Segment:
    """``size`` consecutive slots from ``start``, repeated ``reps`` times."""

    start: int
    size: int
    reps: int

    @property
    def stop(self) -> int:
        """One past the segment's last slot."""
        return self.start + self.size * self.reps

    def __str__(self) -> str:
        slots = "slot" if self.size == 1 else "slots"
        return (
            f"{self.size} {slots} x {self.reps} repetitions (slots {self.start}..{self.stop - 1})"
        )


# ------------------------------------------------------------------ detection


class Tables:
    """The tape as arrays: op codes, operand slots (guards' operands included)."""

    def __init__(self, tape: Tape, params: Sequence[Param] | None) -> None:
        nodes = tape.nodes
        n = self.n = len(nodes)
        ops = [nd[0] for nd in nodes]
        distinct = sorted(
            (op for op in set(ops) if type(op) is not str), key=lambda o: (o.opcode, o.name)
        )
        code_of: dict[Any, int] = {CONST: 0, INPUT: 0}
        for op in distinct:
            code_of[op] = len(code_of) - 1
        codes = np.fromiter(map(code_of.__getitem__, ops), np.int64, n)
        inputs = np.array(tape.inputs, np.int64)
        codes[inputs] = -1 - inputs  # an input is never part of a segment
        self.is_const = np.append(codes == 0, False)  # index -1 (padding) is False
        self.cvalue = np.fromiter((nd[2] for nd in nodes), np.float64, n)
        argss = [nd[1] for nd in nodes]
        lens = np.fromiter(map(len, argss), np.int64, n)
        if n and lens.max() > 2:
            j = int(np.argmax(lens))
            raise NotImplementedError(f"op {nodes[j].op.name!r} has more than 2 operands")
        flat = np.fromiter(itertools.chain.from_iterable(argss), np.int64, int(lens.sum()))
        first = np.cumsum(lens) - lens
        # a guard is checked where its last computed operand is: it joins that node
        self.guards_at: dict[int, list[Guard]] = {}
        self.static_guards: list[Guard] = []  # constant on both sides
        for g in tape.guards:
            computed = [s for s in (g.a, g.b) if not self.is_const[s]]
            if computed:
                self.guards_at.setdefault(max(computed), []).append(g)
            else:
                self.static_guards.append(g)
        self.m = 2 + 2 * max(map(len, self.guards_at.values()), default=0)
        a = np.full((n, self.m), -1, np.int64)
        has1, has2 = lens >= 1, lens >= 2
        a[has1, 0] = flat[first[has1]]
        a[has2, 1] = flat[first[has2] + 1]
        kinds: dict[tuple, int] = {}
        for j, gs in self.guards_at.items():
            a[j, 2 : 2 + 2 * len(gs)] = [s for g in gs for s in (g.a, g.b)]
            if codes[j] > 0:  # guarded ops: op and comparisons must all match
                key = (int(codes[j]), tuple((g.cmp, g.expected) for g in gs))
                codes[j] = kinds.setdefault(key, len(code_of) + len(kinds))
        self.args = a
        self.codes = codes
        self.op_prefix = np.concatenate([[0], np.cumsum(codes > 0)])  # ops before a slot
        base = np.full(n + 1, _LINE, np.int64)
        base[self.is_const] = _CONSTC
        base[inputs] = INPUT_CLASS
        self.base_cls = base
        self.cls = base.copy()
        self.seg_size: list[int] = []
        # which argument, and which element of it, each input slot reads
        sizes = [len(inputs)] if params is None else [p.size for p in params]
        counts = [1 if s is None else s for s in sizes]
        if sum(counts) != len(inputs):
            raise ValueError(
                f"the parameters hold {sum(counts)} values but the tape has {len(inputs)} inputs"
            )
        self.param_is_array = np.array([s is not None for s in sizes] + [False], bool)
        self.inparam = np.full(n + 1, -1, np.int64)
        self.inidx = np.zeros(n + 1, np.int64)
        self.inparam[inputs] = np.repeat(np.arange(len(counts)), counts)
        self.inidx[inputs] = np.concatenate([np.arange(c) for c in counts] or [[]])

    def n_ops(self, lo: int, hi: int) -> int:
        """How many primitive operations slots lo..hi-1 hold."""
        return int(self.op_prefix[hi] - self.op_prefix[lo])

    def mark(self, segments: Sequence[Segment]) -> None:
        """Classes as if exactly ``segments`` had been found."""
        self.cls = self.base_cls.copy()
        self.seg_size = []
        for sid, s in enumerate(segments):
            self.add(sid, s)

    def add(self, sid: int, s: Segment) -> None:
        self.seg_size.append(s.size)
        block = self.cls[s.start : s.stop]
        block[block == _LINE] = sid


def count_repeats(t: Tables, i: int, k: int, rm: int) -> int:
    """How many of the ``rm`` blocks of ``k`` slots from ``i`` repeat block 0 (>= 1)."""
    sl = slice(i, i + k * rm)
    codes = t.codes[sl].reshape(rm, k)
    rows = (codes[1:] == codes[0]).all(axis=1)
    big = t.args[sl].reshape(rm, k, t.m)
    t0, t1 = big[0], big[1]
    pad = t0 < 0
    d1 = t1 - t0
    # the previous repetition's value: repetition 0 reads any earlier slot instead
    carry = ~pad & (t0 < i) & (t1 >= i) & (t1 < i + k) & ~t.is_const[t1]
    cst = t.is_const[t0] & ~pad & ~carry
    same = ~pad & ~cst & (t0 >= i) & (d1 == k)  # a value of the same repetition
    other = ~pad & ~cst & ~carry & ~same
    c0 = t.cls[t0]
    inp = other & (c0 == INPUT_CLASS)
    seg = other & (c0 >= 0)
    line = other & (c0 == _LINE)
    # conditions that rows 0 and 1 settle for all rows
    if (line & (d1 != 0)).any():
        return 1
    if inp.any():
        scalar = inp & ~t.param_is_array[t.inparam[t0]]
        if (scalar & (d1 != 0)).any():
            return 1
    tr, tp = big[1:], big[:-1]
    ok = pad | (cst & t.is_const[tr]) | (same & (tr - tp == k))
    ok[1:] |= carry & (tr[1:] - tp[1:] == k)
    ok[0] |= carry
    ok |= (seg | line) & (tr - tp == d1) & (t.cls[tr] == c0) & (tr < i)
    if inp.any():
        di = t.inidx[t1] - t.inidx[t0]
        ok |= (
            inp
            & (t.inparam[tr] == t.inparam[t0])
            & (t.cls[tr] == INPUT_CLASS)
            & (t.inidx[tr] - t.inidx[tp] == di)
        )
    good = rows & ok.reshape(rm - 1, -1).all(axis=1)
    bad = np.flatnonzero(~good)
    return int(bad[0]) + 1 if len(bad) else rm


def _extent(t: Tables, i: int, k: int, min_reps: int) -> int:
    """How many times the block of ``k`` slots at ``i`` repeats (exponential search)."""
    cap = (t.n - i) // k
    if cap < min_reps:
        return 0
    if count_repeats(t, i, k, 2) < 2:  # the cheap test first: most proposals fail here
        return 1
    rm = min(cap, 2 * min_reps)
    while True:
        r = count_repeats(t, i, k, rm)
        if r < rm or rm == cap:
            return r
        rm = min(cap, 4 * rm)


def _window_hashes(codes: np.ndarray, widths: Sequence[int]) -> dict[int, np.ndarray]:
    """For each width w, a 64-bit hash of ``codes[q:q + w]`` for every q."""
    rng = np.random.default_rng(20240607)
    table = (rng.integers(0, 2**62, size=int(codes.max(initial=0)) + 1) * 2 + 1).astype(np.uint64)
    h = table[np.maximum(codes, 0)]
    inputs = codes < 0  # each input is unique: a window holding one never repeats
    h[inputs] = (rng.integers(0, 2**62, size=int(inputs.sum())) * 2 + 1).astype(np.uint64)
    out: dict[int, np.ndarray] = {}
    if not widths:
        return out
    w = 1
    m1, m2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)
    with np.errstate(over="ignore"):
        while 2 * w <= max(widths) and 2 * w <= len(codes):
            h = h[:-w] * m1 + (h[w:] ^ (h[w:] >> np.uint64(29))) * m2
            w *= 2
            if w in widths:
                out[w] = h
    return out


def _proposals(codes: np.ndarray, min_reps: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions q and periods k, sorted, where windows at q, q + k, q + 2k are equal."""
    n = len(codes)
    widths = [w for w in WINDOWS if (min_reps - 1) * w <= n]
    qs, ks = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for h in _window_hashes(codes, widths).values():
        order = np.argsort(h, kind="stable")
        hs = h[order]
        same = hs[1:] == hs[:-1]
        nxt = np.full(len(h), -1, np.int64)
        nxt[order[:-1][same]] = order[1:][same]
        q = np.flatnonzero(nxt >= 0)
        q = q[nxt[nxt[q]] == 2 * nxt[q] - q]
        k = nxt[q] - q
        keep = (q + min_reps * k <= n) & (codes[q] >= 0)
        qs.append(q[keep])
        ks.append(k[keep])
    pairs = np.sort(np.concatenate(qs) * (n + 1) + np.concatenate(ks))
    pairs = pairs[np.diff(pairs, prepend=-1) != 0]
    return pairs // (n + 1), pairs % (n + 1)


def find_segments(
    tape: Tape,
    params: Sequence[Param] | None = None,
    min_reps: int = MIN_REPS,
    min_saved: int = MIN_SAVED,
) -> list[Segment]:
    """The repeated segments of ``tape``, in slot order (see the module docstring).

    ``params`` says which argument each input reads (as for code generation);
    without it the inputs are taken as one flat array.
    """
    return find_in_tables(Tables(tape, params), min_reps, min_saved)


def find_in_tables(t: Tables, min_reps: int, min_saved: int) -> list[Segment]:
    """Greedy, left to right: at each proposed position the period that saves most."""
    t.mark([])
    min_reps = max(min_reps, 2)
    segments: list[Segment] = []
    qs, ks = _proposals(t.codes, min_reps)
    starts = np.flatnonzero(np.diff(qs, prepend=-1))  # first proposal of each position
    ends = np.append(starts[1:], len(qs))
    positions = qs[starts]
    by_k = np.lexsort((qs, ks))  # proposals by period, then position
    k_first = np.flatnonzero(np.diff(ks[by_k], prepend=-1))
    periods = ks[by_k][k_first].tolist()
    where = np.split(qs[by_k], k_first[1:])  # per period, the positions proposing it
    memo: dict[tuple[int, int], int] = {}

    def saving(q: int, k: int) -> tuple[int, int]:
        """(statements saved, repetitions) of period k from q."""
        r = memo.get((q, k))
        if r is None:
            r = memo[q, k] = _extent(t, q, k, min_reps)
        return ((r - 1) * t.n_ops(q, q + k) if r >= min_reps else 0), r

    g = 0
    while g < len(starts):
        q = int(qs[starts[g]])
        # a proposed period and its small multiples: the op codes of a body such as
        # (sub, mul, mul, sub, mul, mul) repeat every 3 slots, its operands every 6
        periods_here = {
            m * int(k)
            for k in ks[starts[g] : ends[g]]
            for m in (1, 2, 3, 4)
            if m == 1 or q + min_reps * m * int(k) <= t.n
        }
        options = [saving(q, k) + (-k,) for k in sorted(periods_here)]
        saved, r, k = max(options)  # ties: the shorter body
        k = -k
        # a loop inside a loop (one row of a matmul: 16 dot products, then the next
        # row): the whole of this repetition may itself repeat, and save more
        if r >= min_reps and q + min_reps * k * r <= t.n:
            big = saving(q, k * r)
            if big[0] > saved:
                saved, r, k = big[0], big[1], k * r
        g += 1
        if saved < min_saved:
            continue
        # A larger period that starts inside this segment and saves more (the loop
        # over examples around a loop over neurons) wins: stop this one before it.
        stop = q + k * r
        for kk in range(bisect.bisect_right(periods, k), len(periods)):
            pos = where[kk]
            lo = int(np.searchsorted(pos, q, side="right"))
            for q2 in pos[lo : lo + 2].tolist():
                if q2 < stop and saving(q2, periods[kk])[0] > saved:
                    stop = q2
                    break
        r = (stop - q) // k
        if r < min_reps or (r - 1) * t.n_ops(q, q + k) < min_saved:
            continue
        seg = Segment(q, k, r)
        t.add(len(segments), seg)
        segments.append(seg)
        memo.clear()  # classes changed: later extents see this segment
        g = int(np.searchsorted(positions, seg.stop))
    return segments
