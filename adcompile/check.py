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

A point is singular where some exact method gives inf or nan for the value
or a derivative (``x / y`` at ``y = 0``, ``sqrt`` at 0), or SymPy divides by
zero. There only the three adjoint methods, which do the same float
arithmetic, are held to agree (inf with the same sign, or nan, as NumPy
gives); SymPy and finite differences are shown but not compared. The report
then names each singular method and entry and ends ``SINGULAR`` instead of
``OK``, its ``ok`` is False, and ``check_grad`` warns (``RuntimeWarning``)
instead of raising: the methods do not disagree, but nothing was checked
there.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from . import interpret
from .api import Transformed, param_names, trace, value_and_grad
from .ops import Op
from .reverse import grad_tape
from .tape import Tape

__all__ = ["check_grad", "GradReport", "GradientMismatch"]

#: ``sympy.diff`` is skipped on tapes with more primitive operations than this.
SYMPY_MAX_OPS = 300

#: The methods that run the tape's own float arithmetic (its derivative rules).
ADJOINT = ("compiled", "adjoint tape", "interpreter")
EXACT = (*ADJOINT, "sympy")
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
    ``notes`` says what was skipped and why. ``singular`` maps each method
    that gives inf or nan (or, for SymPy, divides by zero) to what it gives
    per entry (``{"compiled": {"value": "inf", "y": "-inf"}}``); it is empty
    at a regular point. ``sympy_undefined`` lists the entries (-1 for the
    value, else the input's index) where SymPy divided by zero.
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
        sympy_undefined: Collection[int] = (),
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
        self.sympy_undefined = set(sympy_undefined)
        self.singular: dict[str, dict[str, str]] = {}
        self.failures = self._compare()

    @property
    def ok(self) -> bool:
        """Whether every method agrees within its tolerance at a regular point (False at a
        singular one, where only the adjoint methods were compared)."""
        return not self.failures and not self.singular

    def entry(self, method: str, i: int) -> float | None:
        """Method ``method``'s value of ``f`` (``i == -1``) or derivative for input ``i``."""
        return self.values.get(method) if i < 0 else self.column(method, i)

    def column(self, method: str, i: int) -> float | None:
        """Method ``method``'s derivative for input ``i`` (None if not computed)."""
        g = self.grads[method]
        return None if g is None else float(g[i])

    def _compare(self) -> list[tuple[str, int]]:
        """(what, index) for the value (index -1) and each input that disagree; fills in
        ``singular``."""
        t = self.tolerances
        bad: list[tuple[str, int]] = []
        present = [m for m in EXACT if self.grads[m] is not None]
        for i, label in [(-1, "value"), *enumerate(self.labels)]:
            numbers = {m: self.entry(m, i) for m in present}
            broken = [m for m in present if not math.isfinite(numbers[m])]
            for m in broken:
                self.singular.setdefault(m, {})[label] = self._singular_entry(m, i, numbers[m])
            if broken:  # a singular point: the same float arithmetic must give the same
                if not _agree([numbers[m] for m in ADJOINT], t["rtol"], t["atol"]):
                    bad.append((label, i))
                continue
            exact = [numbers[m] for m in self.compared]
            if not _agree(exact, t["rtol"], t["atol"]):
                bad.append((label, i))
                continue
            if i < 0:
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
        rows.extend(f"singular for {line}" for line in self.singular_lines())
        rows.append(self.status() if self.ok or self.failures else f"{self.status()}: {SINGULAR}")
        return "\n".join(rows)

    def status(self) -> str:
        """``OK``, ``MISMATCH`` or ``SINGULAR`` (every method agrees, but at a singular point)."""
        return "MISMATCH" if self.failures else "SINGULAR" if self.singular else "OK"

    def singular_lines(self) -> list[str]:
        """``"METHODS: ENTRIES"`` for each group of methods that are singular alike."""
        groups: dict[str, list[str]] = {}
        for method in EXACT:
            entries = self.singular.get(method)
            if entries:
                kinds = set(entries.values())
                if len(kinds) == 1:
                    text = f"{', '.join(entries)} {kinds.pop()}"
                else:
                    text = ", ".join(f"{label} {kind}" for label, kind in entries.items())
                groups.setdefault(text, []).append(method)
        return [f"{', '.join(methods)}: {text}" for text, methods in groups.items()]

    def singular_warning(self) -> str:
        """One line saying which methods are singular at this point, and for what."""
        return (
            f"check_grad({self.name}): the point is singular for "
            f"{'; '.join(self.singular_lines())}; only the adjoint methods were compared there"
        )

    def _singular_entry(self, method: str, i: int, v: float) -> str:
        if method == "sympy" and i in self.sympy_undefined:
            return "undefined (division by zero)"
        return repr(v)

    def __repr__(self) -> str:
        status = self.status()
        return f"<GradReport {self.name}: {'ok' if status == 'OK' else status}>"

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


#: The end of a report's last line at a singular point.
SINGULAR = (
    "inf or nan here, so only the adjoint methods (compiled, adjoint tape, interpreter) "
    "are held to agree; check the gradient at a point where f is finite and smooth"
)


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
    names = param_names(f, len(args))
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
) -> tuple[np.ndarray | None, float | None, set[int]]:
    """``sympy.diff`` of the tape's expression at the point, per position, and the value (None
    if skipped); and the entries (-1 the value, else the index) where SymPy divides by zero,
    which are nan in the column."""
    poles: set[int] = set()
    if tape.n_ops > SYMPY_MAX_OPS:
        notes.append(
            f"sympy skipped: the tape has {tape.n_ops} operations (more than "
            f"SYMPY_MAX_OPS={SYMPY_MAX_OPS}); sympy.diff would be slow"
        )
        return None, None, poles
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
        return None, None, poles
    subs = {s: sympy.Float(float(v), 30) for s, v in zip(symbols, point)}

    def at_point(e: Any, i: int) -> float:
        try:
            z = complex(e.evalf(30, subs=subs))
        except ZeroDivisionError:  # mpmath's, at a pole such as 1/y at y = 0
            poles.add(i)
            return math.nan
        return z.real if abs(z.imag) <= 1e-12 * max(1.0, abs(z.real)) else math.nan

    try:
        value = at_point(expr, -1)
        col = np.array(
            [at_point(sympy.diff(expr, symbols[p]), j) for j, p in enumerate(positions)]
        )
    except (TypeError, ValueError, RecursionError) as e:
        notes.append(f"sympy skipped: its derivative could not be evaluated here ({e})")
        return None, None, set()
    return col, value, poles


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
    """Compare every gradient method at ``args``; raise GradientMismatch if they disagree.

    Returns the report. At a singular point (some exact method gives inf or nan, see the
    module's docstring) only the adjoint methods are compared: if they agree, the report's
    ``ok`` is False, its last line says ``SINGULAR`` and a ``RuntimeWarning`` names the
    singular methods and entries; nothing is raised. Tolerances must be numbers >= 0
    (ValueError otherwise).
    """
    for key, tol in (("rtol", rtol), ("atol", atol), ("fd_rtol", fd_rtol), ("fd_atol", fd_atol)):
        try:
            valid = 0.0 <= float(tol) < math.inf
        except (TypeError, ValueError):
            valid = False
        if not valid:
            raise ValueError(f"check_grad: {key} must be a number >= 0 (a tolerance), got {tol!r}")
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

    grads["sympy"], values["sympy"], poles = _sympy_column(tape, point, positions, notes)
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
    report = GradReport(name, labels, grads, values, notes, tolerances, uncompared, poles)
    if report.failures:
        raise report.error()
    if report.singular:
        warnings.warn(report.singular_warning(), RuntimeWarning, stacklevel=2)
    return report
