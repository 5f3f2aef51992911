"""Folding: repeated tape segments become ``for`` loops.

A Python loop over n elements records n copies of the same few primitives,
and so does its adjoint. This pass finds *segments*: K consecutive slots
repeated R times in which every position holds the same op in every
repetition and every operand is, across repetitions, an arithmetic
progression of slots: the same slot (a parameter, a loop invariant), the
same distance back (inside the repetition, or the previous repetition's
accumulator), or advancing by a fixed stride (``x[i]``, ``x[i + 1]``, the
i-th example's data, the forward value an adjoint reads). The code
generator prints each segment once, inside a ``for`` loop, so the source
stays short whatever n is.

Detection (``adcompile.segments``) is greedy, left to right, in time roughly
linear in the tape. A repetition that breaks any progression ends the
segment; what is left runs as straight-line code. A loop whose body is long
calls it as a function of its own, folded in turn (loops inside loops).

This is the unrolled path, for tapes the loop IR (``adcompile.loops``: the
primal folded first, its loops differentiated as loops) does not take. Its
parts: detection (``adcompile.segments``), printing folded code
(``adcompile.foldgen``), and here, describing what was folded and deciding
whether folding pays (``plan``, ``fold_source``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .codegen import Param, module_source
from .foldgen import (  # noqa: F401  (generate and folded_source are this module's API too)
    OUTLINE_MAX_DEPTH,
    OUTLINE_MIN_OPS,
    FoldedCode,
    FoldGenerator,
    affine,
    folded_source,
    generate,
    statements_in,
)
from .passes import hoist_constants
from .segments import (  # noqa: F401  (find_segments is this module's API too)
    MIN_REPS,
    MIN_SAVED,
    Segment,
    Tables,
    find_in_tables,
    find_segments,
)
from .tape import Guard, Tape

# ------------------------------------------------------------------ printing and explaining


def describe(tape: Tape, segments: Sequence[Segment]) -> str:
    """The tape as SSA text, each folded segment printed once (``fold 3 x 998:``).

    Inside a fold, ``v[18 + 3*r]`` is slot 18 + 3 r, for repetition r.
    """
    t = Tables(tape, None)
    starts = {s.start: s for s in segments}
    lines: list[str] = []
    j = 0
    while j < len(tape.nodes):
        seg = starts.get(j)
        if seg is None:
            if not t.is_const[j]:
                lines.append(tape.statement(j))
                lines.extend(_guard_text(tape, g) for g in t.guards_at.get(j, ()))
            j += 1
            continue
        k = seg.size
        lines.append(f"fold {k} x {seg.reps}: slots {seg.start}..{seg.stop - 1}, r = 0..")
        lines[-1] += f"{seg.reps - 1}"

        def slot(c: int, s0: int) -> str:
            a0 = int(t.args[s0, c])
            a1 = int(t.args[s0 + k, c]) if seg.reps > 1 else a0
            if t.is_const[a0] and not (seg.reps > 1 and seg.start <= a1 < seg.start + k):
                vals = t.cvalue[t.args[s0 : seg.stop : k, c]]
                return repr(float(vals[0])) if (vals == vals[0]).all() else f"c{s0}_{c}[r]"
            if seg.reps > 1 and a0 < seg.start <= a1 and a0 != a1 - k:  # carried in
                return f"v[{affine(a1 - k, k, 'r')}] (v[{a0}] for r = 0)".replace(" * ", "*")
            return f"v[{affine(a0, a1 - a0, 'r')}]".replace(" * ", "*")

        for p in range(k):
            s0 = seg.start + p
            node = tape.nodes[s0]
            if t.is_const[s0]:
                continue
            opds = ", ".join(slot(c, s0) for c in range(len(node.args)))
            lhs = f"v[{affine(s0, k, 'r')}]".replace(" * ", "*")
            lines.append(f"    {lhs} = {node.op.name}({opds})")
            for gi, g in enumerate(t.guards_at.get(s0, ())):
                a, b = slot(2 + 2 * gi, s0), slot(3 + 2 * gi, s0)
                lines.append(f"    guard {a} {g.cmp} {b} is {g.expected}")
        j = seg.stop
    for g in t.static_guards:
        lines.append(_guard_text(tape, g))
    lines.append("out " + ", ".join(tape.operand(o) for o in tape.outputs))
    return "\n".join(lines)


def _guard_text(tape: Tape, g: Guard) -> str:
    return f"guard {tape.operand(g.a)} {g.cmp} {tape.operand(g.b)} is {g.expected}"


def explain(tape: Tape, segments: Sequence[Segment], statements: int | None = None) -> str:
    """One paragraph for ``ad.show_code``: what was folded, how many times."""
    return _explain(Tables(tape, None), segments, statements)


def _explain(
    t: Tables,
    segments: Sequence[Segment],
    statements: int | None,
    outlined: Sequence[Segment] = (),
) -> str:
    ops = t.n_ops(0, t.n)
    if not segments:
        return (
            f"No repeated segments were found among this tape's {ops} operations, "
            "so nothing was folded into loops."
        )
    folded = sum(t.n_ops(s.start, s.stop) for s in segments)
    parts = [str(s) for s in segments[:4]]
    if len(segments) > 4:
        parts.append(f"and {len(segments) - 4} more")
    text = (
        f"Folded {len(segments)} repeated segment{'s' * (len(segments) > 1)} of the tape "
        f"into for loops: {'; '.join(parts)}. {folded} of its {ops} operations run in "
        f"loops whose body is written once, {ops - folded} as straight-line code"
    )
    if statements is not None:
        text += f": the source has {statements} statements instead of {ops}"
    text += "."
    if outlined:
        which = ", ".join(f"slots {s.start}..{s.stop - 1}" for s in outlined)
        text += (
            f" The loop{'s' * (len(outlined) > 1)} over {which} call{'s' * (len(outlined) == 1)} "
            "a function per repetition: its body, folded in turn."
        )
    return text


def folded_statements(tape: Tape, segments: Sequence[Segment]) -> int:
    """How many primitive statements the folded source prints (what Numba compiles)."""
    return statements_in(Tables(tape, None), segments)


# ------------------------------------------------------------------ compiling


@dataclass
class Plan:
    """What folding would do to a tape: its segments and the statements left to compile."""

    segments: list[Segment]
    statements: int  # primitive statements the folded source prints
    ops: int  # primitive operations in the tape (what straight-line code prints)
    tables: Tables = field(repr=False)
    tape: Tape = field(repr=False)  # the tape folded: constants moved to its front
    code: FoldedCode | None = field(default=None, repr=False)  # when generated already
    fname: str = ""
    doc: str = ""

    def worth_it(self, limit: int) -> bool:
        """Fold when it at least halves the statements and leaves at most ``limit``."""
        return bool(self.segments) and self.statements <= min(limit, self.ops // 2)


def plan(
    tape: Tape,
    params: Sequence[Param],
    fname: str = "f",
    doc: str = "",
    limit: int | None = None,
    min_saved: int = MIN_SAVED,
) -> Plan:
    """Find the segments of ``tape`` and count what the folded source would print.

    The tape is folded with its constants moved to its front (``Plan.tape``).
    When the loops' bodies printed flat would leave more than ``limit``
    statements, long bodies are outlined (folded in turn) and the source is
    generated here to count them; ``Plan.code`` keeps it.
    """
    tape = hoist_constants(tape)
    t = Tables(tape, params)
    segments = find_in_tables(t, MIN_REPS, min_saved)
    p = Plan(segments, statements_in(t, segments), t.n_ops(0, t.n), t, tape, None, fname, doc)
    if limit is not None and segments and not p.worth_it(limit):
        if any(t.n_ops(s.start, s.start + s.size) >= OUTLINE_MIN_OPS for s in segments):
            p.code = FoldGenerator(tape, segments, params, t).source(fname, doc)
            p.statements = p.code.statements
    return p


@dataclass
class FoldedSource:
    """The folded source of a tape, ready to compile (``adcompile.jit.FoldedFunction``).

    ``tape`` is the tape folded (constants moved to its front when found
    here), ``code`` the generated function and what its caller passes,
    ``source`` the module text with ``explanation`` as its header comment,
    ``timings`` the seconds spent finding segments and generating.
    """

    tape: Tape
    segments: list[Segment]
    code: FoldedCode
    explanation: str
    source: str
    timings: dict[str, float]


def fold_source(
    tape: Tape,
    params: Sequence[Param],
    fname: str,
    doc: str = "",
    segments: Sequence[Segment] | Plan | None = None,
) -> FoldedSource:
    """The folded source of ``tape``. ``segments`` may be given (a list, or a
    :class:`Plan` already made for this tape and these params); by default they
    are found here."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[stage] = now - clock
        clock = now

    code = None
    if isinstance(segments, Plan):
        tape = segments.tape
        t, found = segments.tables, list(segments.segments)
        if segments.code is not None and (segments.fname, segments.doc) == (fname, doc):
            code = segments.code
    elif segments is None:  # found here, on the tape with its constants in front
        p = plan(tape, params)
        tape, t, found = p.tape, p.tables, list(p.segments)
    else:
        t, found = Tables(tape, params), list(segments)
    lap("find")
    if code is None:
        code = FoldGenerator(tape, found, params, t).source(fname, doc)
    explanation = _explain(t, found, code.statements, code.outlined)
    header = "".join(f"# {ln}\n" for ln in _wrap(explanation, 76))
    source = module_source([header + code.text])
    lap("generate")
    return FoldedSource(tape, found, code, explanation, source, timings)


def _wrap(text: str, width: int) -> list[str]:
    lines, cur = [], ""
    for word in text.split():
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return lines + ([cur] if cur else [])
