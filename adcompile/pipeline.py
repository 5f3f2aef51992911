"""From a traced tape to a compiled program: the stages, in order.

``compile(tape, ...)`` is the one way from a tape to compiled code; the public
transforms (``adcompile.api``) trace, then call it. It reads as the pipeline:

1. **loops** (``loops/``): a long tape's repeated structure is found and built
   into a loop program; adjacent loops are fused;
2. **diff**: the loop program is differentiated as loops (``loops.grad``), or,
   where the tape does not fold, the unrolled tape is (``diff.reverse``);
3. **emit** (``emit/``): the program is printed as Python source;
4. **backend** (``backend/``): the source is loaded from a real file and
   compiled by Numba.

An array tape (``ir.arrays``: one node per NumPy call) is differentiated first,
by ``diff.arrays``, and printed as NumPy code on whole arrays (``emit.arrays``,
run by ``backend.arrays``); its loop nests, made once the code runs often, come
from the same loop IR: ``loops.array_scan.scan`` lowers the tape (its repeated
runs are loops whose bodies are array tapes, a scan), and ``emit.array_loops``
prints that program.

Steps 1 to 3 of the loop path are ``emit.fold.loop_source``; the unrolled path's
printing and compiling are ``backend.compiled.compile_tape``. Either way the
result is a ``backend.program.CompiledProgram``. Numba is imported on the
first compile, not with adcompile.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .backend.program import CompiledProgram
from .diff.arrays import grad_tape as array_grad_tape
from .diff.reverse import grad_tape
from .emit.fold import loop_source
from .ir.arrays import ArrayTape
from .ir.tape import Param, Tape

#: Fold a large tape into loops before differentiating it, and differentiate the
#: loops as loops (``emit.loopgen``); off, or where that does not fold, the
#: unrolled tape is differentiated and folded afterwards, as value code
#: (``backend.compiled.compile_tape``).
LOOP_IR = os.environ.get("ADCOMPILE_LOOP_IR", "1") != "0"


def compile(  # noqa: A001  (the pipeline's one verb)
    tape: Tape,
    params: list[Param],
    fname: str,
    doc: str,
    wrt: list[int] | None = None,
    positions: list[int] | None = None,
    stages: dict[str, float] | None = None,
    on_loop_failure: Callable[[Exception], None] | None = None,
) -> CompiledProgram:
    """The compiled program of ``tape``: value code (``wrt`` None) or value and
    gradient with respect to the arguments ``wrt``, whose input slots in ``tape``
    are ``positions``. ``stages`` receives each stage's seconds.

    Folded into loops and differentiated as loops where the tape folds, else
    differentiated unrolled and compiled as straight-line or folded value code (or
    the tape interpreter, for what neither fits). A failure of the loop IR (a bug
    in adcompile) goes to ``on_loop_failure`` (default: raised), then the unrolled
    path is taken."""
    stages = {} if stages is None else stages
    if isinstance(tape, ArrayTape):
        return compile_arrays(tape, params, fname, doc, wrt, stages)
    report: dict = {}
    compiled = fold_into_loops(tape, params, fname, doc, wrt, positions, report, on_loop_failure)
    if compiled is not None:
        stages.update(compiled.timings)
        return compiled
    from .backend.compiled import compile_tape  # (Numba: on first compile)
    from .backend.records import STRAIGHT_LINE_LIMIT

    clock = time.perf_counter()
    code_tape = tape if wrt is None else grad_tape(tape, wrt=positions)
    if wrt is not None:
        stages["reverse"] = time.perf_counter() - clock
    # many short loops that are not one loop (a NumPy matmul's rows): folding the
    # adjoint would not fit either, and searching it costs more than the
    # interpreter's first call
    flat = report.get("flat", 0)
    force, why = None, None
    if flat > 2 * STRAIGHT_LINE_LIMIT:
        force = "interpreter"
        why = (
            f"its loops folded leave {flat} statements outside long loop bodies "
            f"(loops that are not one loop: a NumPy matmul's rows), over "
            f"{2 * STRAIGHT_LINE_LIMIT}"
        )
    clock = time.perf_counter()
    compiled = compile_tape(code_tape, params, fname, doc, force=force, why=why)
    stages["generate and compile"] = time.perf_counter() - clock
    return compiled


def compile_arrays(
    tape: ArrayTape,
    params: list[Param],
    fname: str,
    doc: str,
    wrt: list[int] | None,
    stages: dict[str, float],
) -> CompiledProgram:
    """The program of an array tape (one input per argument): its value, or value and
    gradient with respect to the arguments ``wrt``, as NumPy code on whole arrays."""
    from .backend.arrays import ArrayCompiled

    clock = time.perf_counter()
    code = tape if wrt is None else array_grad_tape(tape, wrt)
    if wrt is not None:
        stages["reverse"] = time.perf_counter() - clock
    compiled = ArrayCompiled(code, params, fname, doc)
    stages.update(compiled.timings)
    return compiled


def fold_into_loops(
    tape: Tape,
    params: list[Param],
    fname: str,
    doc: str,
    wrt: list[int] | None,
    positions: list[int] | None,
    report: dict | None = None,
    on_failure: Callable[[Exception], None] | None = None,
) -> CompiledProgram | None:
    """A large tape folded into loops before it is differentiated, the loops
    differentiated as loops; None when it does not fold (``report`` then says how
    far it got, see ``emit.fold.loop_source``)."""
    from .backend.compiled import LoopCompiled
    from .backend.records import FOLD_MIN_SLOTS, STRAIGHT_LINE_LIMIT

    if len(tape) < FOLD_MIN_SLOTS or not LOOP_IR:
        return None
    try:
        loops = loop_source(tape, params, wrt, fname, doc, STRAIGHT_LINE_LIMIT, report)
    except Exception as e:
        if on_failure is None:
            raise
        on_failure(e)
        return None
    if loops is None:
        return None
    return LoopCompiled(loops, params, fname, unrolled(tape, wrt, positions))


def refold(
    tape: Tape, params: list[Param], fname: str, doc: str, wrt: list[int] | None
) -> Callable[[], Any]:
    """What folds ``tape`` into loops again (``emit.fold.LoopSource``), for code restored
    from the disk cache, which keeps only its Numba source, when another target's source
    is asked for (``ad.export``)."""
    from .backend.records import STRAIGHT_LINE_LIMIT

    return lambda: loop_source(tape, params, wrt, fname, doc, STRAIGHT_LINE_LIMIT)


def unrolled(tape: Tape, wrt: list[int] | None, positions: list[int] | None) -> Callable[[], Tape]:
    """What makes the unrolled tape of the code's outputs, when asked for."""
    if wrt is None:
        return lambda: tape
    return lambda: grad_tape(tape, wrt=positions)
