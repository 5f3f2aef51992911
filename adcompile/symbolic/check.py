"""``check_grad``: every way adcompile computes a gradient, side by side.

Five columns, from the most to the least derived:

- ``compiled``: ``value_and_grad(f)``, the Numba-compiled adjoint;
- ``adjoint tape``: the same adjoint tape (``reverse.grad_tape``) run by the
  interpreter, so a difference from ``compiled`` is a code-generation bug;
- ``interpreter``: the reverse sweep on floats over the traced tape, so a
  difference from ``adjoint tape`` is a bug in recording the adjoint;
- ``sympy``: ``sympy.diff`` of the tape's SymPy expression, evaluated at the
  point: independent of the derivative rules (skipped, with a note, when the
  tape uses a primitive without a SymPy form or is too large for SymPy);
- ``finite diff``: central differences of the tape's value at steps from
  ``1e-9 s`` up to ``s/256`` (``s = max(1, |x|)``), combined by Richardson
  extrapolation (Ridders' tableau), each shown with its estimated error
  (``1.90496524708695±1.1e-10``). The steps go up from the smallest and stop
  once the estimate is good and stops improving; they are taken twice, the
  second sequence offset by ``2**-0.5``, and the two must agree, so that steps
  near the period of an oscillation (Schaffer's functions) cannot alias into
  a consistent wrong answer.

The exact methods must agree to ``rtol``/``atol``. A finite difference is held
to the larger of ``fd_atol + fd_rtol * scale`` (``scale`` the larger of the
exact gradient and the value of ``f``) and ``FD_SAFETY`` (4) times its
estimated error; where that error is too large to tell a wrong derivative
from a right one, it is not compared and a note says so. Finite differences
are not compared either where every step crosses a kink of a non-smooth op
(``abs``, ``relu``, ``maximum`` ...), takes another branch than ``f`` took,
or leaves the domain; the report notes why.

Time: SymPy is skipped on tapes of more than ``SYMPY_MAX_OPS`` operations,
and the reference methods (everything after the compiled gradient) are
bounded by ``max_seconds`` (60 by default): what is left when it is reached
is noted and not compared. Finite differences of large tapes run on the
compiled tape interpreter. The report's ``time`` line gives each method's
seconds.

A point is singular where some exact method gives inf or nan for the value
or a derivative (``x / y`` at ``y = 0``, ``sqrt`` at 0), or SymPy divides by
zero. There only the three adjoint methods, which do the same float
arithmetic, are held to agree (inf with the same sign, or nan, as NumPy
gives); SymPy and finite differences are shown but not compared. The report
then names each singular method and entry and ends ``SINGULAR`` instead of
``OK``, its ``ok`` is False, and ``check_grad`` warns (``RuntimeWarning``)
instead of raising: the methods do not disagree, but nothing was checked
there.

Where the pieces live: ``check_setup`` (the point, the tolerances, the clock),
``finite`` (finite differences), ``check_sympy`` (SymPy's derivatives),
``check_report`` (the reports and their verdicts) and ``jacobian_check``
(``check_jacobian``); this module runs ``check_grad`` and is where they are imported
from (``ad.check_grad``, ``ad.check_jacobian``, ``ad.GradientMismatch``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..api.transform import trace, value_and_grad
from ..diff import interpret
from ..diff.reverse import grad_tape
from ..ir.ops import Op
from ..ir.tape import Tape
from .check_report import GradientMismatch, GradReport, JacobianReport
from .check_setup import (
    MAX_SECONDS,
    Clock,
    check_seconds,
    check_tolerances,
    point_on_kink,
    setup,
)
from .check_sympy import (
    SYMPY_MAX_OPS,  # noqa: F401  (importable from here, as before)
    sympy_column,
)
from .finite import Evaluator, finite_differences
from .jacobian_check import check_jacobian

__all__ = ["check_grad", "check_jacobian", "GradReport", "JacobianReport", "GradientMismatch"]


def _own_jvps(tape: Tape) -> list[str]:
    """The ops on the tape that have a forward rule of their own (``Op.jvp``)."""
    return sorted({n.op.name for n in tape.nodes if isinstance(n.op, Op) and n.op.jvp})


def _forward_column(
    tape: Tape,
    point: np.ndarray,
    positions: list[int],
    values: dict[str, float | None],
    notes: list[str],
    clock: Clock,
) -> np.ndarray | None:
    """The gradient by forward-mode sweeps (the ops' tangent rules), interpreted; None
    (no column) when no op on the tape has a ``jvp`` of its own, or (with a note) when
    the sweeps reach ``clock``'s bound."""
    if not _own_jvps(tape):
        return None
    from ..diff.forward import jvp_tape

    n = len(positions)
    code = jvp_tape(tape, positions)
    ev = Evaluator(code, len(code.nodes) * n)
    col = np.empty(n)
    first, tangent = code.outputs[0], code.outputs[len(tape.outputs)]
    for j in range(n):
        if clock.over():
            notes.append(
                f"forward mode skipped: its {n} sweeps reached the bound max_seconds="
                f"{clock.max_seconds:g} on the reference methods after {j}"
            )
            return None
        vals = ev(np.concatenate([point, np.eye(n)[j]]))
        values["forward mode"], col[j] = float(vals[first]), float(vals[tangent])
    return col


def check_grad(
    f: Callable,
    *args: Any,
    argnums: int | Sequence[int] = 0,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    fd_rtol: float = 1e-5,
    fd_atol: float = 1e-6,
    max_seconds: float | None = MAX_SECONDS,
) -> GradReport:
    """Compare every gradient method at ``args``; raise GradientMismatch if they disagree.

    Returns the report. At a singular point (some exact method gives inf or nan, see the
    module's docstring) only the adjoint methods are compared: if they agree, the report's
    ``ok`` is False, its last line says ``SINGULAR`` and a ``RuntimeWarning`` names the
    singular methods and entries; nothing is raised. Tolerances must be numbers >= 0
    (ValueError otherwise).

    Finite differences are Richardson-extrapolated central differences, each shown with
    its estimated error and held to the larger of the tolerance and FD_SAFETY times that
    error. ``max_seconds`` bounds the time the reference methods take after the compiled
    gradient (SymPy, forward mode and finite differences stop there, and the report's
    notes say what was left out); None: no bound. SymPy is skipped on tapes of more than
    SYMPY_MAX_OPS operations. The report's ``time`` line gives each method's seconds.
    """
    tolerances = check_tolerances(
        "check_grad", rtol=rtol, atol=atol, fd_rtol=fd_rtol, fd_atol=fd_atol
    )
    clock = Clock(check_seconds("check_grad", max_seconds))
    fun, name, many, nums, shapes, positions, labels, point = setup(f, args, argnums)

    with clock.timing("trace"):
        tape = trace(fun, *args)
    notes: list[str] = []
    grads: dict[str, np.ndarray | None] = {}
    values: dict[str, float | None] = {}

    with clock.timing("compiled"):
        value, g = value_and_grad(fun, argnums=tuple(nums) if many else nums[0])(*args)
    g = g if many else (g,)
    values["compiled"] = float(value)
    grads["compiled"] = np.concatenate([np.ravel(np.asarray(x, dtype=float)) for x in g])

    clock.start_references()
    with clock.timing("adjoint tape"):
        adjoint = interpret.evaluate(grad_tape(tape, wrt=positions), point)
    values["adjoint tape"], grads["adjoint tape"] = adjoint[0], np.array(adjoint[1:])

    with clock.timing("interpreter"):
        value, all_grads = interpret.value_and_grad(tape, point)
    values["interpreter"] = value
    grads["interpreter"] = np.array([all_grads[p] for p in positions])

    with clock.timing("forward mode"):
        grads["forward mode"] = _forward_column(tape, point, positions, values, notes, clock)
    if grads["forward mode"] is None:
        del clock.seconds["forward mode"]
    with clock.timing("sympy"):
        sym = sympy_column(tape, point, positions, notes, clock)
    grads["sympy"], values["sympy"], poles = sym
    with clock.timing("finite diff"):
        fd = finite_differences(tape, point, positions, labels, notes, tolerances, clock)
    grads["finite diff"] = fd.value[0]

    # On a kink the derivative is a convention (relu'(0) is 0 here, Heaviside(0) is 1/2
    # in SymPy), so SymPy is shown there but not held to agree.
    uncompared = ["sympy"] if point_on_kink(tape, point, notes, grads["sympy"] is not None) else []
    report = GradReport(
        name, labels, grads, values, notes, tolerances, uncompared, poles, fd, clock
    )
    if report.failures:
        raise report.error()
    if report.singular:
        warnings.warn(report.singular_warning(), RuntimeWarning, stacklevel=2)
    return report
