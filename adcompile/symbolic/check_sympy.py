"""SymPy's side of a check: the tape's values and derivatives at a point, by ``sympy.diff``
of its SymPy expression, so independent of adcompile's derivative rules.

``sympy_derivatives`` gives every output's value, the Jacobian by the inputs checked
and (for ``check_jacobian``) the Hessian of output 0, evaluated to 30 digits; an
expression undefined as written at the point (``x**y * log(x)`` at ``x = 0``) is taken
as its limit there, and where SymPy divides by zero the entry is nan and listed.
``sympy_column`` is ``check_grad``'s column of it. Either returns None, with a note
saying why, on tapes of more than SYMPY_MAX_OPS operations, where an op has no SymPy
form, or once the clock's bound on the reference methods is reached. SymPy is imported
only when it runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir.tape import Tape
from .check_setup import Clock

#: ``sympy.diff`` is skipped on tapes with more primitive operations than this.
SYMPY_MAX_OPS = 300


def sympy_column(
    tape: Tape,
    point: np.ndarray,
    positions: list[int],
    notes: list[str],
    clock: Clock | None = None,
) -> tuple[np.ndarray | None, float | None, set[int]]:
    """``sympy.diff`` of the tape's expression at the point, per position, and the value (None
    if skipped); and the entries (-1 the value, else the index) where SymPy divides by zero,
    which are nan in the column."""
    found = sympy_derivatives(tape, point, positions, notes, clock=clock)
    if found is None:
        return None, None, set()
    values, jac, _, poles = found
    return jac[0], float(values[0]), {j for (r, j) in poles if r == 0}


def sympy_derivatives(
    tape: Tape,
    point: np.ndarray,
    positions: list[int],
    notes: list[str],
    hessian: bool = False,
    clock: Clock | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, set[tuple]] | None:
    """SymPy's values of every output of the tape at the point, its Jacobian (outputs by
    ``positions``), with ``hessian`` the Hessian of output 0 by ``positions``, and the
    entries where SymPy divides by zero (``(row, -1)`` a value, ``(row, j)`` a Jacobian
    entry, ``("h", i, j)`` a Hessian entry), which are nan; None (with a note) if skipped:
    on a tape of more than SYMPY_MAX_OPS operations, or where ``clock``'s bound is reached
    between two derivatives."""
    found = _expressions(tape, notes, clock)
    if found is None:
        return None
    import sympy

    from .bridge import limit_at

    symbols, exprs = found
    subs = {s: sympy.Float(float(v), 30) for s, v in zip(symbols, point)}
    poles: set[tuple] = set()
    at = dict(zip(symbols, point))

    def at_point(e: Any, where: tuple) -> float:
        if clock is not None and clock.over():
            raise _OverTime
        try:
            z, pole = complex(e.evalf(30, subs=subs)), False
        except ZeroDivisionError:  # mpmath's, at a pole such as 1/y at y = 0
            z, pole = complex(math.nan), True
        real = abs(z.imag) <= 1e-12 * max(1.0, abs(z.real))
        if real and math.isfinite(z.real):
            return z.real
        # undefined as written (x**y * log(x) at x = 0): its limit, where it has one
        value, how = limit_at(e, {s: at[s] for s in e.free_symbols if s in at})
        if how:
            note = f"sympy: undefined here as written, taken as its {how}"
            if note not in notes:
                notes.append(note)
            return value
        if pole:
            poles.add(where)
            return math.nan
        return z.real if real else math.nan

    wrt = [symbols[p] for p in positions]
    try:
        values = np.array([at_point(e, (r, -1)) for r, e in enumerate(exprs)])
        firsts = [[sympy.diff(e, s) for s in wrt] for e in exprs]
        jac = np.array(
            [[at_point(d, (r, j)) for j, d in enumerate(row)] for r, row in enumerate(firsts)]
        ).reshape(len(exprs), len(wrt))
        hess = None
        if hessian:
            n = len(wrt)
            hess = np.empty((n, n))
            for i in range(n):
                for j in range(i, n):
                    d2 = sympy.diff(firsts[0][i], wrt[j])
                    hess[i, j] = hess[j, i] = at_point(d2, ("h", i, j))
    except (TypeError, ValueError, RecursionError) as e:
        notes.append(f"sympy skipped: its derivative could not be evaluated here ({e})")
        return None
    except _OverTime:
        notes.append(_sympy_over(clock))
        return None
    return values, jac, hess, poles


def _expressions(
    tape: Tape, notes: list[str], clock: Clock | None
) -> tuple[list[Any], list[Any]] | None:
    """The tape's input symbols and its outputs' SymPy expressions; None (with a note)
    where SymPy is skipped: a tape of more than SYMPY_MAX_OPS operations, ``clock``'s
    bound reached, or an op with no SymPy form."""
    if tape.n_ops > SYMPY_MAX_OPS:
        notes.append(
            f"sympy skipped: the tape has {tape.n_ops} operations (more than "
            f"SYMPY_MAX_OPS={SYMPY_MAX_OPS}); sympy.diff would be slow"
        )
        return None
    if clock is not None and clock.over():
        notes.append(_sympy_over(clock))
        return None
    import sympy

    from .bridge import tape_to_sympy

    symbols = [sympy.Symbol(n, real=True) for n in tape.names]
    exprs = tape_to_sympy(tape, symbols)
    undefined = sorted(
        {str(u.func) for e in exprs for u in e.atoms(sympy.core.function.AppliedUndef)}
    )
    if undefined:
        notes.append(
            f"sympy skipped: {', '.join(undefined)} has no SymPy form (give the primitive "
            "sympy=...)"
        )
        return None
    return symbols, exprs


class _OverTime(Exception):
    """The bound on the reference methods' time was reached."""


def _sympy_over(clock: Clock | None) -> str:
    bound = clock.max_seconds if clock is not None else None
    return (
        f"sympy skipped: it reached the bound max_seconds={bound:g} on the reference methods "
        "(pass a larger max_seconds, or None, to wait for it)"
    )
