"""Finite differences of a tape: Richardson-extrapolated central differences, each
with its estimated error.

``finite_differences(tape, point, positions, ...)`` differences every output of the tape
(rows) by each position (columns) with central differences at steps from about
``1e-9 s`` up to ``s/256`` (``s = max(1, |x|)``), combined by Ridders' tableau, the
steps going up from the smallest and stopping once the estimate is good and stops
improving. The steps are taken twice, the second sequence offset by FD_SHIFT, and the
two must agree, so that steps near the period of an oscillation cannot alias into a
consistent wrong answer. A step is not used where it takes another branch than the
trace, crosses a kink of a non-smooth op or leaves the domain; an entry that no step
serves is nan, and a note says why. ``Evaluator`` runs the tape: the Python
interpreter, or the compiled tape interpreter for large work. Whether a difference is
close enough to an exact derivative is ``check_report``'s verdict, not this module's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..diff import interpret
from ..ir.tape import Tape
from .check_setup import Clock, kink_nodes

#: Finite differences are central differences with the steps ``s * FD_STEPS`` (``s = max(1,
#: |x|)``), from about 1e-9 s up to s/256, combined by Richardson extrapolation (Ridders'
#: tableau: up to FD_DEPTH eliminations of the h**2, h**4 ... terms of the error); the entry
#: with the least estimated error is the finite difference, shown with that estimate.
FD_STEPS = 2.0 ** -np.arange(8.0, 31.0)
FD_DEPTH = 4
#: The steps are taken twice, the second time each times FD_SHIFT: the two estimates must
#: agree (their difference is part of the error estimate), which an alias of an oscillation
#: at steps near its period does not.
FD_SHIFT = 2.0**-0.5
#: The steps (going up) stop once two in a row give an error estimate under this fraction of
#: the fixed tolerance for every output, and the next one does not improve it or it is under
#: FD_TIGHT of it (larger steps could not change the verdict, and may alias an oscillation).
FD_ENOUGH = 1e-4
FD_TIGHT = 1e-7
#: Finite differences evaluate the tape with the compiled tape interpreter (``jit.interpreter``)
#: instead of the Python one when they would evaluate more slots than this in all (about
#: 2 s in Python, against 0.6 ms a run of 50,000 slots compiled).
COMPILED_EVALUATION_SLOTS = 4_000_000


@dataclass
class FiniteDifferences:
    """Finite differences of every output of a tape (rows) by each input (columns): the
    Richardson-extrapolated ``value``, its estimated absolute ``error``, and the largest
    central difference ``step`` h it used; nan where not computed (the notes say why)."""

    value: np.ndarray
    error: np.ndarray
    step: np.ndarray


class Evaluator:
    """Every slot of a tape at a point, as a float array; with the guards and the kinks of
    non-smooth ops vectorised. The Python tape interpreter, or for ``slots`` (the slots all
    evaluations will run) over COMPILED_EVALUATION_SLOTS the compiled one where every op
    of the tape is in the op table (else the Python one)."""

    def __init__(self, tape: Tape, slots: float = 0.0) -> None:
        from ..ir.tape import COMPARE

        self.tape = tape
        self.compiled = _compiled_interpreter(tape) if slots > COMPILED_EVALUATION_SLOTS else None
        kinks = kink_nodes(tape)
        self.kink_names = np.array([n.op.name for n in kinks], dtype=object)
        self.kink_a = np.array([n.args[0] for n in kinks], dtype=np.int64)
        self.kink_b = np.array([n.args[-1] for n in kinks], dtype=np.int64)
        self.kink_unary = np.array([len(n.args) == 1 for n in kinks], dtype=bool)
        groups: dict[tuple[str, bool], list[Any]] = {}
        for g in tape.guards:
            groups.setdefault((g.cmp, bool(g.expected)), []).append(g)
        self.guards = [
            (COMPARE[cmp], expected, np.array([g.a for g in gs]), np.array([g.b for g in gs]))
            for (cmp, expected), gs in groups.items()
        ]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.compiled is None:
            return np.array(interpret.values(self.tape, x))
        run, p = self.compiled
        vals = p.init.copy()
        vals[p.inputs] = x
        run(p.opcodes, p.arg0, p.arg1, vals)
        return vals

    def guards_hold(self, vals: np.ndarray) -> bool:
        """Whether every comparison made while tracing comes out as it did."""
        return all(
            bool(np.all(cmp(vals[a], vals[b]) == expected)) for cmp, expected, a, b in self.guards
        )

    def switches(self, vals: np.ndarray) -> np.ndarray:
        """Where each non-smooth op is relative to its kink: its operand, or ``a - b``."""
        a = vals[self.kink_a]
        return np.where(self.kink_unary, a, a - vals[self.kink_b])


def _compiled_interpreter(tape: Tape) -> tuple[Callable, Any] | None:
    """``(run, program)`` of the compiled tape interpreter for ``tape``; None where an op
    of the tape is not in the op table (the interpreter knows only those) or it fails."""
    from ..backend.jit import interpreter
    from ..emit.codegen import to_program
    from ..ir.ops import OPS
    from ..ir.tape import CONST, INPUT

    for node in tape.nodes:
        op = node.op
        if op not in (INPUT, CONST) and (OPS.get(op.name) is not op or op.opcode < 0):
            return None
    try:
        return interpreter()[0], to_program(tape)
    except Exception:  # noqa: BLE001 - any failure: the Python interpreter does the work
        return None


def finite_differences(
    tape: Tape,
    point: np.ndarray,
    positions: list[int],
    labels: list[str],
    notes: list[str],
    tolerances: dict[str, float],
    clock: Clock | None = None,
) -> FiniteDifferences:
    """Richardson-extrapolated central differences of every output of the tape (rows) by
    each position (columns), with their estimated errors (see FD_STEPS and FD_SHIFT). A
    step is not used where ``±h`` takes another branch, crosses a kink of a non-smooth op
    or leaves the domain; an entry no step serves is nan, and noted, as are the positions
    left when ``clock``'s bound is reached."""
    outs = np.array(tape.outputs, dtype=np.int64)
    m, n = len(outs), len(positions)
    ev = Evaluator(tape, len(tape.nodes) * n * 4 * len(FD_STEPS))
    base = ev(point)
    f0 = base[outs]
    with np.errstate(all="ignore"):
        side = ev.switches(base)
    fd = FiniteDifferences(*(np.full((m, n), math.nan) for _ in range(3)))
    for j, p in enumerate(positions):
        if clock is not None and clock.over():
            notes.append(
                f"finite diff not compared for {_span(labels[j:])}: the bound max_seconds="
                f"{clock.max_seconds:g} on the reference methods was reached (pass a larger "
                "max_seconds, or None, to compare them)"
            )
            break
        with np.errstate(all="ignore"):  # inf - inf at a singular point is nan, as it should
            value, error, step, why = _richardson(ev, point, p, f0, side, tolerances)
            again, error2, step2, _ = _richardson(ev, point, p, f0, side, tolerances, FD_SHIFT)
            second = np.isnan(value) | (error2 < error)
            error = np.fmax(np.fmax(error, error2), abs(value - again))
        value, step = np.where(second, again, value), np.where(second, step2, step)
        fd.value[:, j], fd.error[:, j], fd.step[:, j] = value, error, step
        if why and np.isnan(value).any():
            notes.append(f"finite diff for {labels[j]} not compared: {why}")
    return fd


def _span(labels: list[str]) -> str:
    """``x[3]`` or ``x[3] ... x[99] (97 inputs)``."""
    if len(labels) == 1:
        return labels[0]
    return f"{labels[0]} ... {labels[-1]} ({len(labels)} inputs)"


def _richardson(
    ev: Evaluator,
    point: np.ndarray,
    p: int,
    f0: np.ndarray,
    side: np.ndarray,
    t: dict[str, float],
    shift: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Ridders' extrapolation of central differences by input ``p``, per output: the
    estimate, its estimated error, the largest step it used, and why a step did not serve
    (or ""). The steps are ``s * shift * FD_STEPS``. (Call it under ``np.errstate``: inf
    and nan in the values are expected.)

    The steps go up from the smallest, and stop after two in a row whose entries are good
    to FD_ENOUGH of the tolerance, at the first step that does not improve the estimate
    (or once it is good to FD_TIGHT): the smallest steps that serve are the safest, since
    at steps near an oscillation's period the differences at ``x + h`` and ``x - h`` can
    alias into a consistent but wrong sequence (Schaffer's functions).
    """
    m = len(f0)
    outs = np.array(ev.tape.outputs, dtype=np.int64)
    best, error, step = np.full(m, math.nan), np.full(m, math.inf), np.full(m, math.nan)
    scale = max(1.0, abs(float(point[p])))
    prev: list[np.ndarray] = []  # the tableau's last row: plain differences, then eliminations
    roundings: list[np.ndarray] = []  # each step's rounding error of its difference
    eps = np.finfo(float).eps
    why, enough = "", 0
    for h in scale * shift * FD_STEPS[::-1]:
        xp, xm = point.copy(), point.copy()
        xp[p] += h
        xm[p] -= h
        vp, vm = ev(xp), ev(xm)
        width = xp[p] - xm[p]  # 2h as the floats have it
        d = (vp[outs] - vm[outs]) / width
        roundings.insert(0, 2.0 * eps * np.maximum(abs(vp[outs]), abs(vm[outs])) / width)
        problem = ""
        if not (ev.guards_hold(vp) and ev.guards_hold(vm)):
            d[:] = math.nan
            problem = "takes another branch"
        else:
            crossed = np.sign(ev.switches(vp)) != np.sign(side)
            crossed |= np.sign(ev.switches(vm)) != np.sign(side)
            if crossed.any():
                d[:] = math.nan
                problem = f"crosses a kink of {', '.join(sorted(set(ev.kink_names[crossed])))}"
            elif (~np.isfinite(d) & np.isfinite(f0)).any():
                problem = "leaves the domain"
            d[~np.isfinite(d)] = math.nan
        if problem and not why:
            why = f"the step ±h {problem} from h={h:.2g}"
        row = [d]
        amplify = 1.0
        before = error.copy()
        here = np.full(m, math.inf)  # the least error estimate of this step's entries
        for k, older in enumerate(prev[:FD_DEPTH], 1):
            fac = 4.0**k  # eliminates the h**(2k) term: the older entry's step is h / 2
            amplify *= (fac + 1.0) / (fac - 1.0)
            row.append((fac * older - row[-1]) / (fac - 1.0))
            err = np.maximum(abs(row[-1] - row[-2]), abs(row[-1] - older))
            err = np.maximum(err, roundings[k] * amplify)
            better = err < error
            here = np.fmin(here, err)
            best[better], error[better], step[better] = row[-1][better], err[better], h
        prev = row
        fixed = t["fd_atol"] + t["fd_rtol"] * np.maximum(abs(best), abs(f0))
        finite = np.isfinite(f0)
        enough = enough + 1 if np.all((here <= FD_ENOUGH * fixed) | ~finite) else 0
        improved = np.any((here < before) & (error > FD_TIGHT * fixed) & finite)
        if enough >= 2 and not improved:
            break
    error[np.isnan(best)] = math.nan
    return best, error, step, why
