"""The loop pipeline: fold a primal tape into the loop IR, fold long bodies in
turn, differentiate the program as loops and print it.

``loop_source`` does it for one tape; ``batch_source`` traces at three batch
lengths and makes one program in n (``loops.generic.generalise``). Both return the
module source and what the caller needs to compile it (``backend.compiled.LoopCompiled``,
``backend.batch.BatchCompiled``), or None where the loop IR does not take the tape.
A tape it does not differentiate as loops is differentiated unrolled and its
derivative tape folded here as value code (``backend.compiled.compile_tape``).
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..ir.passes import hoist_constants
from ..ir.tape import Param, Tape
from ..loops.build import build, nest
from ..loops.fuse import fuse
from ..loops.generic import generalise
from ..loops.grad import GradProgram, grad
from ..loops.ir import Block, Lin, Loop, NotAffine, Program
from ..loops.segments import Segment, find_segments
from .codegen import CodeFacts, module_source
from .loopgen import Generated, generate
from .render import Target

#: A loop body of this many operations is long: folding it in turn (loops
#: inside loops) could shorten it (``loop_source``'s report).
LONG_BODY = 96

#: Fold long loop bodies in turn (loops inside loops).
NEST = True


def _slots(k: int | Lin) -> str:
    return f"{k} slot" if k == 1 else f"{k} slots"


def _nested(loops: list[Loop]) -> str:
    """``; the body of 1 folded in turn into 3 loops`` (loops inside loops), or ""."""
    inner = [lp.inner for lp in loops if lp.inner is not None]
    if not inner:
        return ""
    k = sum(1 for nb in inner for it in nb.program.items if type(it) is Loop)
    which = "the body of 1" if len(inner) == 1 else f"the bodies of {len(inner)}"
    return f"; {which} folded in turn into {k} loop{'s' if k != 1 else ''} inside it"


def _fold_bodies(program: Program, long_body: int = LONG_BODY) -> None:
    """Fold each long loop body in turn (loops inside loops), where it repeats."""
    if not NEST:
        return
    for item in program.items:
        if type(item) is Loop and item.body.n_ops >= long_body:
            item.inner = nest(item, program.params, long_body)


def fold_program(
    tape: Tape,
    segments: Sequence[Segment],
    params: Sequence[Param],
    fname: str = "f",
    long_body: int = LONG_BODY,
) -> Program:
    """The loop program of ``tape`` with ``segments`` folded into loops: adjacent
    loops fused (``loopfuse``), bodies of ``long_body`` operations or more folded
    in turn."""
    program = fuse(build(tape, segments, params, fname))
    _fold_bodies(program, long_body)
    return program


@dataclass
class LoopSource:
    """A primal tape folded, differentiated as loops and printed (``loop_source``)."""

    program: Program
    grad: GradProgram | None
    code: Generated
    source: str  # the module, with ``explanation`` as its header comment
    explanation: str
    n_out: int
    timings: dict[str, float]
    facts: CodeFacts | None = None  # what the code is, in numbers (``api.summary``)
    fname: str = "f"
    doc: str = ""
    lengths: tuple[int, ...] = ()  # the batch lengths of code generic in n, or ()

    def printed(self, target: Target) -> Generated:
        """The same program printed for another target (``render.PYTHON``, ``C99``)."""
        what = self.grad if self.grad is not None else self.program
        lengths = self.lengths or None
        return generate(what, self.program.params, self.fname, self.doc, lengths, target)


def loop_source(
    tape: Tape,
    params: Sequence[Param],
    wrt: Sequence[int] | None,
    fname: str,
    doc: str = "",
    limit: int = 1000,
    report: dict | None = None,
) -> LoopSource | None:
    """Fold the primal ``tape``, differentiate the folded program by the
    parameters ``wrt`` (None: the value only) and print it; None when folding
    does not at least halve the statements or leaves more than ``limit``.

    ``report``, if given, gets ``flat``: the statements of the folded primal
    outside loops with long bodies (``LONG_BODY`` operations or more), which
    only loops inside loops could shorten.
    """
    clock = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[stage] = now - clock
        clock = now

    tape = hoist_constants(tape)
    segments = find_segments(tape, params)
    lap("detect")
    if not segments:
        return None
    program = fold_program(tape, segments, params, fname)
    if report is not None:
        report["flat"] = sum(
            len(it.nodes) if type(it) is Block else it.body.n_ops
            for it in program.items
            if type(it) is Block or it.body.n_ops < LONG_BODY
        )
    if program.statements > min(limit, tape.n_ops // 2):
        return None
    lap("build")
    made = _differentiate_and_print(program, wrt, fname, doc, limit, timings)
    if made is None:
        return None
    gp, code = made
    loops = [it for it in program.items if type(it) is Loop]
    in_loops = sum(lp.body.n_ops * lp.trips for lp in loops)
    explanation = (
        f"Folded {len(loops)} repeated segment{'s' if len(loops) != 1 else ''} of the tape "
        f"into for loops ({_shapes(loops)}): {in_loops} of its {tape.n_ops} "
        "operations run in "
        f"loops whose body is written once"
        + (", and differentiated as loops, each adjoint loop written once" if gp else "")
        + f": the source has {code.statements} statements instead of {tape.n_ops} "
        "(the operations of the tape, before differentiating)." + _guard_note(program)
    )
    facts = CodeFacts("folded", tape.n_ops, code.statements, len(loops), len(tape))
    return _source(program, gp, code, explanation, timings, facts, fname, doc)


def _guard_note(program: Program) -> str:
    """`` 499 guards are checked in 1 loop.`` where guards outside loops fold into
    loops of their own (``loops.ir.GuardLoop``), or ""."""
    gls = program.guard_loops
    if not gls:
        return ""
    k = sum(gl.trips for gl in gls)
    return f" {k} guards are checked in {len(gls)} loop{'s' if len(gls) != 1 else ''}."


#: The batch lengths a loss is traced at for batch-generic code (three, so that
#: a number is checked to be affine in n rather than assumed), and the lengths
#: tried next when detection folds those differently.
BATCH_SIZES = ((8, 9, 11), (12, 14, 17))


def batch_source(
    trace_at: Callable[[int], tuple[Tape, list[Param]]],
    wrt: Sequence[int] | None,
    fname: str,
    doc: str = "",
    limit: int = 1000,
) -> tuple[LoopSource, tuple[int, ...]] | None:
    """Batch-generic code from the loop IR: ``trace_at(k)`` traces the primal at
    batch length k; the folded programs at three lengths are made one program
    in ``n`` (``loops.generic.generalise``), differentiated as loops and printed as
    ``fname(n, *params, v, c, out)``. Returns it and the lengths traced, or
    None when they are not one program.
    """
    clock = time.perf_counter()
    timings: dict[str, float] = {}
    for ks in BATCH_SIZES:
        programs = []
        for k in ks:
            tape, params = trace_at(k)
            tape = hoist_constants(tape)
            ops = tape.n_ops
            segments = find_segments(tape, params, min_saved=2)
            if not segments:
                return None
            try:
                programs.append(fuse(build(tape, segments, params, fname)))
            except ValueError:
                return None
        generic = generalise(programs, ks)
        if generic is not None:
            break
    else:
        return None
    timings["trace and detect"] = time.perf_counter() - clock
    _fold_bodies(generic)
    try:
        made = _differentiate_and_print(generic, wrt, fname, doc, limit, timings, ks)
    except NotAffine:
        return None
    if made is None:
        return None
    gp, code = made
    loops = [it for it in generic.items if type(it) is Loop]
    explanation = (
        f"Generic in the batch length n: traced at n = {', '.join(map(str, ks))}, folded into "
        f"{len(loops)} loop{'s' if len(loops) != 1 else ''} ({_shapes(loops)}) "
        "and checked to be one program whose loop counts and offsets are written in n"
        + (", then differentiated as loops" if gp else "")
        + f": the source has {code.statements} statements instead of {ops} (the operations "
        f"of the tape at n = {ks[-1]}, before differentiating)."
    )
    facts = CodeFacts("folded", ops, code.statements, len(loops), generic=True)
    made = _source(generic, gp, code, explanation, timings, facts, fname, doc, tuple(ks))
    return made, tuple(ks)


def _differentiate_and_print(
    program: Program,
    wrt: Sequence[int] | None,
    fname: str,
    doc: str,
    limit: int,
    timings: dict[str, float],
    lengths: Sequence[int] | None = None,
) -> tuple[GradProgram | None, Generated] | None:
    """``program`` differentiated by ``wrt`` (None: the value only) and printed;
    None when that would print more than ``limit`` statements. The seconds each
    took go to ``timings`` (``reverse``, ``generate``)."""
    clock = time.perf_counter()
    gp = grad(program, wrt) if wrt is not None else None
    timings["reverse"] = time.perf_counter() - clock
    if (gp.statements if gp is not None else program.statements) > limit:
        return None
    clock = time.perf_counter()
    code = generate(gp if gp is not None else program, program.params, fname, doc, lengths)
    timings["generate"] = time.perf_counter() - clock
    return gp, code


def _shapes(loops: list[Loop]) -> str:
    """``3 slots x 100 repetitions; ...`` for the first few loops (and their bodies
    folded in turn)."""
    shapes = "; ".join(f"{_slots(lp.size)} x {lp.trips} repetitions" for lp in loops[:4])
    more = f"; and {len(loops) - 4} more" if len(loops) > 4 else ""
    return shapes + more + _nested(loops)


def _source(
    program: Program,
    gp: GradProgram | None,
    code: Generated,
    explanation: str,
    timings: dict[str, float],
    facts: CodeFacts,
    fname: str,
    doc: str,
    lengths: tuple[int, ...] = (),
) -> LoopSource:
    """The module (``explanation`` as its header comment) and how many outputs it writes."""
    header = "".join(f"# {ln}\n" for ln in textwrap.wrap(explanation, 76))
    prm = program.params
    n_out = (
        1 + sum(1 if prm[p].size is None else prm[p].size for p in gp.wrt)
        if gp
        else len(program.outputs)
    )
    source = module_source([header + code.text])
    return LoopSource(
        program, gp, code, source, explanation, n_out, timings, facts, fname, doc, lengths
    )
