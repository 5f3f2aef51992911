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

__all__ = ["check_grad", "check_jacobian", "GradReport", "JacobianReport", "GradientMismatch"]

#: ``sympy.diff`` is skipped on tapes with more primitive operations than this.
SYMPY_MAX_OPS = 300

#: The methods that run the tape's own float arithmetic (its derivative rules).
ADJOINT = ("compiled", "adjoint tape", "interpreter")
#: ``forward mode`` (tangent rules) is a column only where an op on the tape has its own
#: ``jvp``; elsewhere the tangent rule is the vjp rule itself.
EXACT = (*ADJOINT, "forward mode", "sympy")
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
        self.forward_mode = grads.get("forward mode")
        grads.setdefault("forward mode", None)
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
        rows.extend(_footer(self.tolerances, self.notes))
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


def _footer(t: dict[str, float], notes: list[str]) -> list[str]:
    """A report's lines saying the tolerances and what was skipped."""
    return [
        f"exact methods agree to rtol={t['rtol']:g}, atol={t['atol']:g}; finite "
        f"differences to rtol={t['fd_rtol']:g}, atol={t['fd_atol']:g}",
        *(f"note: {n}" for n in notes),
    ]


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


def _setup(f: Callable, args: Sequence[Any], argnums: int | Sequence[int]) -> tuple:
    """What a check needs to know of ``f`` and its arguments: the function (unwrapped from
    a transform), its name, whether ``argnums`` is a tuple, the argument numbers, every
    argument's shape, the flat positions and labels of the inputs checked, and the point."""
    fun = f.fun if isinstance(f, Transformed) else f
    name = getattr(fun, "__name__", "f")
    many = isinstance(argnums, (tuple, list))
    nums = [k % len(args) for k in (argnums if many else [argnums])]
    names, shapes, offsets = _arg_layout(fun, args)
    positions = [p for k in nums for p in range(offsets[k], offsets[k + 1])]
    labels = [lb for k in nums for lb in _labels(names[k], shapes[k])]
    point = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in args] or [[]])
    return fun, name, many, nums, shapes, positions, labels, point


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
    found = _sympy_derivatives(tape, point, positions, notes)
    if found is None:
        return None, None, set()
    values, jac, _, poles = found
    return jac[0], float(values[0]), {j for (r, j) in poles if r == 0}


def _sympy_derivatives(
    tape: Tape,
    point: np.ndarray,
    positions: list[int],
    notes: list[str],
    hessian: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, set[tuple]] | None:
    """SymPy's values of every output of the tape at the point, its Jacobian (outputs by
    ``positions``), with ``hessian`` the Hessian of output 0 by ``positions``, and the
    entries where SymPy divides by zero (``(row, -1)`` a value, ``(row, j)`` a Jacobian
    entry, ``("h", i, j)`` a Hessian entry), which are nan; None (with a note) if skipped."""
    if tape.n_ops > SYMPY_MAX_OPS:
        notes.append(
            f"sympy skipped: the tape has {tape.n_ops} operations (more than "
            f"SYMPY_MAX_OPS={SYMPY_MAX_OPS}); sympy.diff would be slow"
        )
        return None
    import sympy

    from .symbolic import tape_to_sympy

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
    subs = {s: sympy.Float(float(v), 30) for s, v in zip(symbols, point)}
    poles: set[tuple] = set()

    def at_point(e: Any, where: tuple) -> float:
        try:
            z = complex(e.evalf(30, subs=subs))
        except ZeroDivisionError:  # mpmath's, at a pole such as 1/y at y = 0
            poles.add(where)
            return math.nan
        return z.real if abs(z.imag) <= 1e-12 * max(1.0, abs(z.real)) else math.nan

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
    return values, jac, hess, poles


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
    """Central differences of every output of the tape (rows) by each position (columns),
    with the step ``h = cbrt(eps) * max(1, |x|)``; nan where they cannot be trusted."""
    kinks = _kinks(tape)
    outs = tape.outputs
    base = interpret.values(tape, point)
    fd = np.full((len(outs), len(positions)), math.nan)
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
        left = False
        for r, o in enumerate(outs):
            d = (vp[o] - vm[o]) / (xp[p] - xm[p])
            if not math.isfinite(d) and math.isfinite(base[o]):
                left = True
                continue
            fd[r, j] = d
        if left:
            notes.append(f"{skip} the step ±h leaves the domain")
    return fd


def _own_jvps(tape: Tape) -> list[str]:
    """The ops on the tape that have a forward rule of their own (``Op.jvp``)."""
    return sorted({n.op.name for n in tape.nodes if isinstance(n.op, Op) and n.op.jvp})


def _forward_column(
    tape: Tape, point: np.ndarray, positions: list[int], values: dict[str, float | None]
) -> np.ndarray | None:
    """The gradient by forward-mode sweeps (the ops' tangent rules), interpreted; None
    (no column) when no op on the tape has a ``jvp`` of its own."""
    if not _own_jvps(tape):
        return None
    from .forward import jvp_tape

    n = len(positions)
    code = jvp_tape(tape, positions)
    col = np.empty(n)
    for j in range(n):
        out = interpret.evaluate(code, [*point, *np.eye(n)[j]])
        values["forward mode"], col[j] = out[0], out[len(tape.outputs)]
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
    tolerances = _check_tolerances(
        "check_grad", rtol=rtol, atol=atol, fd_rtol=fd_rtol, fd_atol=fd_atol
    )
    fun, name, many, nums, shapes, positions, labels, point = _setup(f, args, argnums)

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

    grads["forward mode"] = _forward_column(tape, point, positions, values)
    grads["sympy"], values["sympy"], poles = _sympy_column(tape, point, positions, notes)
    grads["finite diff"] = _finite_differences(tape, point, positions, labels, notes)[0]

    # On a kink the derivative is a convention (relu'(0) is 0 here, Heaviside(0) is 1/2
    # in SymPy), so SymPy is shown there but not held to agree.
    uncompared = ["sympy"] if _on_kink(tape, point, notes, grads["sympy"] is not None) else []
    report = GradReport(name, labels, grads, values, notes, tolerances, uncompared, poles)
    if report.failures:
        raise report.error()
    if report.singular:
        warnings.warn(report.singular_warning(), RuntimeWarning, stacklevel=2)
    return report


# ------------------------------------------------------------------ check_jacobian


class Table:
    """One quantity (values, a Jacobian, a Hessian, a product) by several methods, one
    row per entry, compared as ``check_grad`` compares a gradient.

    ``columns`` maps each method to its flat array (None: not computed); the methods in
    ``exact`` must agree to ``rtol``/``atol`` (plus ``slack`` per row, for sums such as
    ``J @ v``); ``fd`` (a column name or None) to ``fd_rtol``/``fd_atol`` relative to the
    larger of the exact entry and ``scale`` (the value whose difference it took). Where an
    exact method gives inf or nan only the methods in ``same_arithmetic`` are held to
    agree, and the entry is listed in ``singular``.
    """

    def __init__(
        self,
        title: str,
        labels: list[str],
        columns: dict[str, np.ndarray | None],
        exact: Sequence[str],
        tolerances: dict[str, float],
        fd: str | None = None,
        scale: np.ndarray | None = None,
        same_arithmetic: Sequence[str] = (),
        slack: np.ndarray | None = None,
    ) -> None:
        self.title = title
        self.labels = labels
        self.columns = columns
        self.exact = [m for m in exact if columns.get(m) is not None]
        self.fd = fd if fd is not None and columns.get(fd) is not None else None
        self.failures: list[int] = []
        self.singular: dict[str, list[str]] = {}
        t = tolerances
        for i in range(len(labels)):
            nums = {m: float(columns[m][i]) for m in self.exact}
            broken = [m for m, v in nums.items() if not math.isfinite(v)]
            extra = 0.0 if slack is None else float(slack[i])
            for m in broken:
                self.singular.setdefault(m, []).append(labels[i])
            if broken:
                same = [nums[m] for m in same_arithmetic if m in nums]
                if not _agree(same, t["rtol"], t["atol"] + extra):
                    self.failures.append(i)
                continue
            ref = [nums[m] for m in self.exact]
            if not _agree(ref, t["rtol"], t["atol"] + extra):
                self.failures.append(i)
                continue
            if self.fd is None or not ref or math.isnan(columns[self.fd][i]):
                continue
            size = max(abs(ref[-1]), abs(scale[i])) if scale is not None else abs(ref[-1])
            if not math.isfinite(size):
                size = abs(ref[-1])
            if not abs(columns[self.fd][i] - ref[-1]) <= t["fd_atol"] + t["fd_rtol"] * size:
                self.failures.append(i)

    def shown(self) -> list[str]:
        """The methods with a column, in order."""
        return [m for m, c in self.columns.items() if c is not None]

    def lines(self) -> list[str]:
        """The table as text, mismatching rows marked."""
        cols = self.shown()
        width = max([5, *(len(lb) for lb in self.labels)])
        rows = [self.title, f"{'':{width}}  " + "  ".join(f"{m:>22}" for m in cols)]
        for i, label in enumerate(self.labels):
            cells = "  ".join(_cell(float(self.columns[m][i])) for m in cols)
            rows.append(f"{label:{width}}  {cells}{'  <- MISMATCH' if i in self.failures else ''}")
        return rows

    def describe(self, i: int) -> str:
        """Row ``i`` by every method, as ``method=value, ...``."""
        return ", ".join(f"{m}={float(self.columns[m][i])!r}" for m in self.shown())


class JacobianReport:
    """What ``check_jacobian`` compared: one :class:`Table` per quantity (``tables``, by
    name: ``value``, ``jacobian``, ``jvp``, and for a scalar ``f`` ``hessian`` and
    ``hvp``), the random ``direction`` of the products, the ``notes`` (what was skipped
    and why) and the tolerances. ``jacobian``, ``hessian`` are the compiled matrices
    (rows: flat outputs or inputs; columns: flat inputs), ``hessian`` None when not checked.
    """

    def __init__(
        self,
        name: str,
        tables: dict[str, Table],
        notes: list[str],
        tolerances: dict[str, float],
        jacobian: np.ndarray,
        hessian: np.ndarray | None,
        direction: np.ndarray,
    ) -> None:
        self.name = name
        self.tables = tables
        self.notes = notes
        self.tolerances = tolerances
        self.jacobian = jacobian
        self.hessian = hessian
        self.direction = direction
        self.failures = [(t, i) for t in tables.values() for i in t.failures]
        self.singular = {
            f"{t.title.split(':')[0]}": s for t in tables.values() for s in [t.singular] if s
        }

    @property
    def ok(self) -> bool:
        """Whether every method agrees at a regular point."""
        return not self.failures and not self.singular

    def status(self) -> str:
        """``OK``, ``MISMATCH`` or ``SINGULAR``."""
        return "MISMATCH" if self.failures else "SINGULAR" if self.singular else "OK"

    def __str__(self) -> str:
        rows = [f"check_jacobian({self.name}): every derivative by every method"]
        for table in self.tables.values():
            rows.extend(table.lines())
        rows.extend(_footer(self.tolerances, self.notes))
        rows.extend(f"singular: {line}" for line in self.singular_lines())
        rows.append(self.status())
        return "\n".join(rows)

    def __repr__(self) -> str:
        return f"<JacobianReport {self.name}: {self.status()}>"

    def singular_lines(self) -> list[str]:
        """``"TABLE, METHOD: ENTRIES"`` per method that gives inf or nan somewhere."""
        return [
            f"{table}, {m}: {', '.join(entries)}"
            for table, methods in self.singular.items()
            for m, entries in methods.items()
        ]

    def error(self) -> GradientMismatch:
        """The exception naming the first entry where the methods disagree."""
        table, i = self.failures[0]
        what = table.title.split(":")[0]
        return GradientMismatch(
            f"jacobian check failed for {what} {table.labels[i]}: {table.describe(i)}\n{self}"
        )


def _out_labels(name: str, tree: Any) -> list[str]:
    """A label per flat output: ``f`` for a scalar, ``f[1]``, ``f[0][2, 1]`` ..."""
    from .outputs import leaves, map_leaves

    if tree is None:
        return [name]
    heads: list[str] = []

    def walk(t: Any, prefix: str) -> None:
        if type(t) is tuple and len(t) == 2 and t[0] in ("tuple", "list"):
            for k, sub in enumerate(t[1]):
                walk(sub, f"{prefix}[{k}]")
        else:
            heads.append(prefix)

    walk(tree, name)
    shapes = leaves(map_leaves(tree, lambda k, s: s))
    out: list[str] = []
    for head, shape in zip(heads, shapes):
        out.extend(_labels(head, shape) if shape else [head])
    return out


def _flat_leaves(tree: Any, result: Any) -> list[Any]:
    """The leaves of a result laid out as ``tree``, in order."""
    from .outputs import map_leaves, part_leaves

    return [r for _, r in part_leaves(map_leaves(tree, lambda k, s: k), result)]


def _flat(result: Any, tree: Any) -> np.ndarray:
    """A result with output tree ``tree`` as one flat float array."""
    return np.concatenate(
        [np.ravel(np.asarray(r, dtype=float)) for r in _flat_leaves(tree, result)]
    )


def _jacobian_matrix(result: Any, tree: Any, sizes: list[int], many: bool) -> np.ndarray:
    """``jacobian``'s result as one matrix: rows the flat outputs, columns the flat inputs."""
    from .outputs import leaves, size

    rows = []
    for shape, per in zip(leaves(tree), _flat_leaves(tree, result)):
        blocks = per if many else (per,)
        rows.append(
            np.hstack(
                [np.reshape(np.asarray(b, float), (size(shape), n)) for b, n in zip(blocks, sizes)]
            )
        )
    return np.vstack(rows)


def _hessian_matrix(result: Any, sizes: list[int], many: bool) -> np.ndarray:
    """``hessian``'s result (blocks per pair of arguments when ``many``) as one matrix."""
    if not many:
        return np.reshape(np.asarray(result, float), (sizes[0], sizes[0]))
    return np.block(
        [
            [np.reshape(np.asarray(b, float), (m, n)) for b, n in zip(row, sizes)]
            for row, m in zip(result, sizes)
        ]
    )


def _check_tolerances(name: str, **tols: float) -> dict[str, float]:
    """The tolerances, after checking each is a number >= 0 (ValueError otherwise)."""
    for key, tol in tols.items():
        try:
            valid = 0.0 <= float(tol) < math.inf
        except (TypeError, ValueError):
            valid = False
        if not valid:
            raise ValueError(f"{name}: {key} must be a number >= 0 (a tolerance), got {tol!r}")
    return {
        "rtol": tols["rtol"],
        "atol": tols["atol"],
        "fd_rtol": max(tols["rtol"], tols["fd_rtol"]),
        "fd_atol": max(tols["atol"], tols["fd_atol"]),
    }


def check_jacobian(
    f: Callable,
    *args: Any,
    argnums: int | Sequence[int] = 0,
    hessian: bool | None = None,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    fd_rtol: float = 1e-5,
    fd_atol: float = 1e-6,
    seed: int = 0,
) -> JacobianReport:
    """Compare every way adcompile computes ``f``'s derivatives at ``args``; raise
    GradientMismatch if they disagree, else return the report.

    ``f`` returns anything ``ad.jacobian`` accepts. Compared: the values of ``ad.jit(f)``,
    the interpreter and SymPy; the Jacobian by compiled reverse and forward mode, SymPy's
    derivative of the tape and central differences; ``ad.jvp`` along a random direction
    (``seed``) against ``J @ v``. For a scalar ``f`` (or ``hessian=True``) also
    ``ad.hessian`` against SymPy's Hessian and central differences of the gradient, its
    symmetry, and (``argnums=0``) ``ad.hvp`` against ``H @ v``. At a singular point
    (inf or nan) only the compiled modes are compared, and a ``RuntimeWarning`` says so.
    """
    from .api import jit, trace_call
    from .outputs import size
    from .transforms import hessian as hessian_of
    from .transforms import hvp, jacobian, jvp

    tolerances = _check_tolerances(
        "check_jacobian", rtol=rtol, atol=atol, fd_rtol=fd_rtol, fd_atol=fd_atol
    )
    fun, name, many, nums, shapes, positions, labels, point = _setup(f, args, argnums)
    sizes = [size(shapes[k] or None) for k in nums]
    tape = trace_call(fun, args, multi=True)
    tree = tape.tree
    outs = _out_labels(name, tree)
    scalar = tree is None
    hessian = scalar if hessian is None else hessian
    if hessian and not scalar:
        raise ValueError(f"check_jacobian(hessian=True): {name} must return a scalar")
    notes: list[str] = []
    argn = tuple(nums) if many else nums[0]

    rng = np.random.default_rng(seed)
    v = rng.standard_normal(len(positions))
    tangents: list[Any] = [np.zeros(s) if s else 0.0 for s in shapes]
    for k, (a, b) in zip(nums, zip(np.cumsum([0, *sizes]), np.cumsum(sizes))):
        tangents[k] = v[a:b].reshape(shapes[k]) if shapes[k] else float(v[a])
    primal_out, tangent_out = jvp(fun, args, tangents)
    vals = interpret.evaluate(tape, point)
    sym = _sympy_derivatives(tape, point, positions, notes, hessian=hessian)
    sym_vals, sym_jac, sym_hess, _ = sym if sym is not None else (None, None, None, None)
    tables = {
        "value": Table(
            f"value: {name} by every method",
            outs,
            {
                "jit": _flat(jit(fun)(*args), tree),
                "interpreter": np.array(vals),
                "jvp": _flat(primal_out, tree),
                "sympy": sym_vals,
            },
            ("jit", "interpreter", "jvp", "sympy"),
            tolerances,
            same_arithmetic=("jit", "interpreter"),
        )
    }

    jac = {
        m: _jacobian_matrix(jacobian(fun, argn, mode=m)(*args), tree, sizes, many)
        for m in ("reverse", "forward")
    }
    fd = _finite_differences(tape, point, positions, labels, notes)
    on_kink = _on_kink(tape, point, notes, sym is not None)
    tables["jacobian"] = _derivative_table(
        "jacobian: every output by every input",
        [f"d {o} / d {i}" for o in outs for i in labels],
        {"reverse": jac["reverse"], "forward": jac["forward"]},
        sym_jac,
        fd,
        on_kink,
        tolerances,
        np.repeat(vals, len(positions)),
    )

    J = jac["reverse"]
    tables["jvp"] = Table(
        "jvp: the derivative along a random direction v",
        outs,
        {"jvp": _flat(tangent_out, tree), "J @ v": J @ v},
        ("jvp", "J @ v"),
        tolerances,
        slack=rtol * (np.abs(J) @ np.abs(v)),
    )

    H = None
    if hessian:
        H = _hessian_matrix(hessian_of(fun, argn)(*args), sizes, many)
        g = grad_tape(tape, wrt=positions)
        fdh = _finite_differences(g, point, positions, labels, notes)[1:]
        grad = np.array(interpret.evaluate(g, point)[1:])
        tables["hessian"] = _derivative_table(
            "hessian: every pair of inputs",
            [f"d2 {name} / d {a} d {b}" for a in labels for b in labels],
            {"hessian": H, "transpose": H.T},
            sym_hess,
            fdh,
            on_kink,
            tolerances,
            np.repeat(grad, len(positions)),
        )
        if nums == [0] and not many:
            hv = hvp(fun)(args[0], tangents[0], *args[1:])
            tables["hvp"] = Table(
                "hvp: the Hessian times v",
                labels,
                {"hvp": np.ravel(np.asarray(hv, float)), "H @ v": H @ v},
                ("hvp", "H @ v"),
                tolerances,
                slack=rtol * (np.abs(H) @ np.abs(v)),
            )
        else:
            notes.append("hvp not compared: it differentiates argument 0 only (argnums=0)")
    report = JacobianReport(name, tables, notes, tolerances, J, H, v)
    if report.failures:
        raise report.error()
    if report.singular:
        warnings.warn(
            f"check_jacobian({name}): inf or nan at this point for "
            f"{'; '.join(report.singular_lines())}; only the compiled modes were compared there",
            RuntimeWarning,
            stacklevel=2,
        )
    return report


def _derivative_table(
    title: str,
    labels: list[str],
    compiled: dict[str, np.ndarray],
    sym: np.ndarray | None,
    fd: np.ndarray,
    on_kink: bool,
    tolerances: dict[str, float],
    scale: np.ndarray,
) -> Table:
    """A matrix of derivatives by two compiled methods (held to agree even where inf or
    nan), SymPy (not compared on a kink) and finite differences, entry by entry."""
    names = list(compiled)
    return Table(
        title,
        labels,
        {
            **{m: a.ravel() for m, a in compiled.items()},
            "sympy": None if sym is None else sym.ravel(),
            "finite diff": fd.ravel(),
        },
        names if on_kink else [*names, "sympy"],
        tolerances,
        fd="finite diff",
        scale=scale,
        same_arithmetic=names,
    )


def _on_kink(tape: Tape, point: np.ndarray, notes: list[str], sympy_present: bool) -> bool:
    """Whether the point is on a kink of a non-smooth op (where the derivative is a
    convention, so SymPy is shown but not compared); notes it."""
    vals = interpret.values(tape, point)
    on_kink = sorted({n.op.name for n in _kinks(tape) if _switch(vals, n) == 0.0})
    if on_kink and sympy_present:
        notes.append(
            f"sympy not compared: the point is on a kink of {', '.join(on_kink)}, where the "
            "derivative is a convention"
        )
    return bool(on_kink)
