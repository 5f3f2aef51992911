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
- ``finite diff``: central differences of the tape's value, with the step
  ``h = cbrt(eps) * max(1, |x|)`` per input.

The exact methods must agree to ``rtol``/``atol``. Finite differences carry
a truncation error ``h**2 |f'''| / 6`` and a rounding error ``eps |f| / h``,
about ``4e-11`` relative at best, so they are held to the looser ``fd_rtol``
and ``fd_atol`` (relative to the larger of the exact gradient and the value
of ``f``). They are not compared where the stencil crosses a kink of a
non-smooth op (``abs``, ``relu``, ``maximum`` ...), a branch ``f`` took on
its inputs, or leaves the domain; the report notes why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import interpret
from .api import Transformed, _param_names, trace, value_and_grad
from .ops import Op
from .reverse import grad_tape
from .tape import Tape

__all__ = ["check_grad", "GradReport", "GradientMismatch"]

#: ``sympy.diff`` is skipped on tapes with more primitive operations than this.
SYMPY_MAX_OPS = 300

EXACT = ("compiled", "adjoint tape", "interpreter", "sympy")
METHODS = (*EXACT, "finite diff")


class GradientMismatch(AssertionError):
    """The ways of computing a gradient disagree; the message names the input."""


class GradReport:
    """The value and gradient of ``f`` at a point, by every method, per input.

    ``labels[i]`` names input ``i`` (``x``, ``a[0, 1]``); ``compiled``,
    ``adjoint_tape``, ``interpreter``, ``sympy`` and ``finite_diff`` are flat
    float arrays in that order (``sympy`` is None when skipped, and a finite
    difference not compared is nan); ``values`` maps each exact method to the
    value of ``f``; ``compared`` lists the exact methods held to agree;
    ``notes`` says what was skipped and why.
    """

    def __init__(
        self,
        name: str,
        labels: list[str],
        grads: dict[str, np.ndarray | None],
        values: dict[str, float],
        notes: list[str],
        tolerances: dict[str, float],
        uncompared: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.labels = labels
        self.grads = grads
        self.values = values
        self.value = values["compiled"]
        self.notes = notes
        self.tolerances = tolerances
        self.compiled = grads["compiled"]
        self.adjoint_tape = grads["adjoint tape"]
        self.interpreter = grads["interpreter"]
        self.sympy = grads["sympy"]
        self.finite_diff = grads["finite diff"]
        self.compared = [m for m in EXACT if grads[m] is not None and m not in uncompared]
        self.failures = self._compare()

    @property
    def ok(self) -> bool:
        """Whether every method agrees within its tolerance."""
        return not self.failures

    def column(self, method: str, i: int) -> float | None:
        """Method ``method``'s derivative for input ``i`` (None if not computed)."""
        g = self.grads[method]
        return None if g is None else float(g[i])

    def _compare(self) -> list[tuple[str, int]]:
        """(what, index) for the value (index -1) and each input that disagree."""
        t = self.tolerances
        bad: list[tuple[str, int]] = []
        if not _agree([self.values[m] for m in self.compared], t["rtol"], t["atol"]):
            bad.append(("value", -1))
        for i, label in enumerate(self.labels):
            exact = [self.column(m, i) for m in self.compared]
            if not _agree(exact, t["rtol"], t["atol"]):
                bad.append((label, i))
                continue
            fd = self.finite_diff[i]
            if math.isnan(fd):
                continue
            ref = exact[-1]
            scale = max(abs(ref), abs(self.value)) if math.isfinite(self.value) else abs(ref)
            if not abs(fd - ref) <= t["fd_atol"] + t["fd_rtol"] * scale:
                bad.append((label, i))
        return bad

    def __str__(self) -> str:
        cols = [m for m in METHODS if m == "finite diff" or self.grads[m] is not None]
        width = max([5, *(len(lb) for lb in self.labels)])
        head = f"{'':{width}}  " + "  ".join(f"{m:>22}" for m in cols)
        rows = [f"check_grad({self.name}): value and gradient by every method", head]
        vals = [self.values.get(m) for m in cols]
        rows.append(f"{'value':{width}}  " + "  ".join(_cell(v) for v in vals))
        failed = {i for _, i in self.failures}
        for i, label in enumerate(self.labels):
            cells = "  ".join(_cell(self.column(m, i)) for m in cols)
            mark = "  <- MISMATCH" if i in failed else ""
            rows.append(f"{label:{width}}  {cells}{mark}")
        t = self.tolerances
        rows.append(
            f"exact methods agree to rtol={t['rtol']:g}, atol={t['atol']:g}; finite "
            f"differences to rtol={t['fd_rtol']:g}, atol={t['fd_atol']:g}"
        )
        rows.extend(f"note: {n}" for n in self.notes)
        rows.append("OK" if self.ok else "MISMATCH")
        return "\n".join(rows)

    def __repr__(self) -> str:
        return f"<GradReport {self.name}: {'ok' if self.ok else 'MISMATCH'}>"

    def error(self) -> GradientMismatch:
        """The exception naming the first input where the methods disagree."""
        label, i = self.failures[0]
        if i < 0:
            what = "the value of " + self.name
            shown = ", ".join(f"{m}={v!r}" for m, v in self.values.items() if v is not None)
        else:
            what = f"d {self.name} / d {label} ({self._describe(i)})"
            shown = ", ".join(
                f"{m}={self.column(m, i)!r}" for m in METHODS if self.grads[m] is not None
            )
        return GradientMismatch(f"gradient check failed for {what}: {shown}\n{self}")

    def _describe(self, i: int) -> str:
        label = self.labels[i]
        if "[" not in label:
            return f"argument {label!r}"
        name, index = label[:-1].split("[", 1)
        return f"argument {name!r}, element [{index}]"


def _agree(xs: Sequence[float], rtol: float, atol: float) -> bool:
    """Whether the numbers are equal within tolerance (all nan counts as equal)."""
    if not xs:
        return True
    nans = [math.isnan(x) for x in xs]
    if any(nans):
        return all(nans)
    if any(math.isinf(x) for x in xs):
        return len(set(xs)) == 1
    lo, hi = min(xs), max(xs)
    return hi - lo <= atol + rtol * max(abs(lo), abs(hi))


def _cell(v: float | None) -> str:
    if v is None:
        return f"{'-':>22}"
    return f"{v:>22.15g}"


def _arg_layout(f: Callable, args: Sequence[Any]) -> tuple[list[str], list[tuple], list[int]]:
    """Per argument: its name and shape (``()`` for a number); and offsets in the flat point."""
    names = _param_names(f, len(args))
    shapes = [np.shape(a) for a in args]
    offsets = [0]
    for s in shapes:
        offsets.append(offsets[-1] + int(np.prod(s, dtype=int)))
    return names, shapes, offsets


def _labels(name: str, shape: tuple) -> list[str]:
    if shape == ():
        return [name]
    return [f"{name}[{', '.join(map(str, idx))}]" for idx in np.ndindex(*shape)]


def _sympy_column(
    tape: Tape, point: np.ndarray, positions: list[int], notes: list[str]
) -> tuple[np.ndarray | None, float | None]:
    """``sympy.diff`` of the tape's expression at the point, per position; or None."""
    if tape.n_ops > SYMPY_MAX_OPS:
        notes.append(
            f"sympy skipped: the tape has {tape.n_ops} operations (more than "
            f"SYMPY_MAX_OPS={SYMPY_MAX_OPS}); sympy.diff would be slow"
        )
        return None, None
    import sympy

    from .symbolic import tape_to_sympy

    symbols = [sympy.Symbol(n, real=True) for n in tape.names]
    expr = tape_to_sympy(tape, symbols)[0]
    undefined = sorted(str(u.func) for u in expr.atoms(sympy.core.function.AppliedUndef))
    if undefined:
        notes.append(
            f"sympy skipped: {', '.join(undefined)} has no SymPy form (give the primitive "
            "sympy=...)"
        )
        return None, None
    subs = {s: sympy.Float(float(v), 30) for s, v in zip(symbols, point)}

    def at_point(e: Any) -> float:
        z = complex(e.evalf(30, subs=subs))
        return z.real if abs(z.imag) <= 1e-12 * max(1.0, abs(z.real)) else math.nan

    try:
        value = at_point(expr)
        col = np.array([at_point(sympy.diff(expr, symbols[p])) for p in positions])
    except (TypeError, ValueError, RecursionError) as e:
        notes.append(f"sympy skipped: its derivative could not be evaluated here ({e})")
        return None, None
    return col, value


def _kinks(tape: Tape) -> list[Any]:
    """The nodes of non-smooth ops (``abs``, ``relu``, ``maximum`` ...)."""
    return [node for node in tape.nodes if isinstance(node.op, Op) and not node.op.smooth]


def _switch(vals: list[float], node: Any) -> float:
    """Where a non-smooth op is relative to its kink: its operand, or ``a - b``."""
    a = node.args
    return vals[a[0]] if len(a) == 1 else vals[a[0]] - vals[a[1]]


def _finite_differences(
    tape: Tape, point: np.ndarray, positions: list[int], labels: list[str], notes: list[str]
) -> np.ndarray:
    """Central differences of the tape's value; nan where they cannot be trusted."""
    kinks = _kinks(tape)
    out = tape.outputs[0]
    base = interpret.values(tape, point)
    col = np.full(len(positions), math.nan)
    for j, p in enumerate(positions):
        skip = f"finite diff for {labels[j]} not compared:"
        h = np.cbrt(np.finfo(float).eps) * max(1.0, abs(point[p]))
        xp, xm = point.copy(), point.copy()
        xp[p] += h
        xm[p] -= h
        vp, vm = interpret.values(tape, xp), interpret.values(tape, xm)
        if not (interpret.guards_hold(tape, vp) and interpret.guards_hold(tape, vm)):
            notes.append(f"{skip} the step ±h takes another branch")
            continue
        crossed = [
            node.op.name
            for node in kinks
            if len({np.sign(_switch(v, node)) for v in (vm, base, vp)}) > 1
        ]
        if crossed:
            notes.append(f"{skip} the step ±h crosses a kink of {', '.join(sorted(set(crossed)))}")
            continue
        fd = (vp[out] - vm[out]) / (xp[p] - xm[p])
        if not math.isfinite(fd) and math.isfinite(base[out]):
            notes.append(f"{skip} the step ±h leaves the domain")
            continue
        col[j] = fd
    return col


def check_grad(
    f: Callable,
    *args: Any,
    argnums: int | Sequence[int] = 0,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    fd_rtol: float = 1e-5,
    fd_atol: float = 1e-6,
) -> GradReport:
    """Compare every gradient method at ``args``; raise GradientMismatch if they disagree."""
    fun = f.fun if isinstance(f, Transformed) else f
    name = getattr(fun, "__name__", "f")
    many = isinstance(argnums, (tuple, list))
    nums = [k % len(args) for k in (argnums if many else [argnums])]
    names, shapes, offsets = _arg_layout(fun, args)
    positions: list[int] = []
    labels: list[str] = []
    for k in nums:
        positions.extend(range(offsets[k], offsets[k + 1]))
        labels.extend(_labels(names[k], shapes[k]))
    point = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in args] or [[]])

    tape = trace(fun, *args)
    notes: list[str] = []
    grads: dict[str, np.ndarray | None] = {}
    values: dict[str, float | None] = {}

    value, g = value_and_grad(fun, argnums=tuple(nums) if many else nums[0])(*args)
    g = g if many else (g,)
    values["compiled"] = float(value)
    grads["compiled"] = np.concatenate([np.ravel(np.asarray(x, dtype=float)) for x in g])

    adjoint = interpret.evaluate(grad_tape(tape, wrt=positions), point)
    values["adjoint tape"], grads["adjoint tape"] = adjoint[0], np.array(adjoint[1:])

    value, all_grads = interpret.value_and_grad(tape, point)
    values["interpreter"] = value
    grads["interpreter"] = np.array([all_grads[p] for p in positions])

    grads["sympy"], values["sympy"] = _sympy_column(tape, point, positions, notes)
    grads["finite diff"] = _finite_differences(tape, point, positions, labels, notes)

    tolerances = {
        "rtol": rtol,
        "atol": atol,
        "fd_rtol": max(rtol, fd_rtol),
        "fd_atol": max(atol, fd_atol),
    }
    # On a kink the derivative is a convention (relu'(0) is 0 here, Heaviside(0) is 1/2
    # in SymPy), so SymPy is shown there but not held to agree.
    vals = interpret.values(tape, point)
    on_kink = sorted({n.op.name for n in _kinks(tape) if _switch(vals, n) == 0.0})
    uncompared = []
    if on_kink and grads["sympy"] is not None:
        uncompared.append("sympy")
        notes.append(
            f"sympy not compared: the point is on a kink of {', '.join(on_kink)}, where the "
            "derivative is a convention"
        )
    report = GradReport(name, labels, grads, values, notes, tolerances, uncompared)
    if not report.ok:
        raise report.error()
    return report
