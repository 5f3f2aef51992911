"""The reports of ``check_grad`` and ``check_jacobian``, and the verdicts behind them.

- ``GradReport``: the value and gradient of ``f`` by every method, one row per input;
- ``Table``: one quantity (values, a Jacobian, a Hessian, a product) by several
  methods, one row per entry; ``JacobianReport``: ``check_jacobian``'s tables;
- ``GradientMismatch``: what a check raises where the methods disagree, naming the entry.

Exact methods must be equal to ``rtol``/``atol`` (inf and nan only to themselves). A
finite difference is held to the larger of ``fd_atol + fd_rtol * scale`` and FD_SAFETY
times its estimated error, and is not compared (a note says so) where that error is
too large to tell a wrong derivative from a right one. At a singular point (an exact
method gives inf or nan) only the methods doing the same float arithmetic are held to
agree, and the report ends SINGULAR. Reports print as tables (``str(report)``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np

from .check_setup import Clock
from .finite import FiniteDifferences

#: The methods that run the tape's own float arithmetic (its derivative rules).
ADJOINT = ("compiled", "adjoint tape", "interpreter")
#: ``forward mode`` (tangent rules) is a column only where an op on the tape has its own
#: ``jvp``; elsewhere the tangent rule is the vjp rule itself.
EXACT = (*ADJOINT, "forward mode", "sympy")
METHODS = (*EXACT, "finite diff")


class GradientMismatch(AssertionError):
    """The ways of computing a gradient disagree; the message names the input."""


#: A finite difference is held to the larger of ``fd_atol + fd_rtol * scale`` and FD_SAFETY
#: times its estimated error ...
FD_SAFETY = 4.0
#: ... and not compared (a note says so) where that is over FD_INCONCLUSIVE times the fixed
#: tolerance at its own size (``fd_atol + fd_rtol * max(|fd|, |f|)``): so uncertain a
#: difference could not tell a wrong derivative from a right one.
FD_INCONCLUSIVE = 100.0


class GradReport:
    """The value and gradient of ``f`` at a point, by every method, per input.

    ``labels[i]`` names input ``i`` (``x``, ``a[0, 1]``); ``compiled``,
    ``adjoint_tape``, ``interpreter``, ``sympy`` and ``finite_diff`` are flat
    float arrays in that order (``sympy`` is None when skipped, and a finite
    difference not computed is nan); ``fd_error`` is each finite difference's
    estimated error and ``fd_step`` its step; ``values`` maps each exact method to
    the value of ``f``; ``compared`` lists the exact methods held to agree;
    ``fd_compared`` the inputs whose finite difference was compared; ``notes``
    says what was skipped and why; ``seconds`` maps each method to the seconds it
    took (``compiled`` includes compiling). ``singular`` maps each method
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
        fd: FiniteDifferences | None = None,
        clock: Clock | None = None,
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
        nan = np.full(len(labels), math.nan)
        self.fd_error = nan if fd is None else fd.error[0]
        self.fd_step = nan if fd is None else fd.step[0]
        self.fd_compared: list[int] = []
        self.clock = clock
        self.seconds = {} if clock is None else clock.seconds
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
            fd, error = self.finite_diff[i], self.fd_error[i]
            verdict = _fd_verdict(fd, error, exact[-1], self.value, t)
            if verdict is None:
                continue
            if isinstance(verdict, str):
                self.notes.append(f"finite diff for {label} not compared: {verdict}")
                continue
            self.fd_compared.append(i)
            if not verdict:
                bad.append((label, i))
        return bad

    def __str__(self) -> str:
        cols = [m for m in METHODS if m == "finite diff" or self.grads[m] is not None]
        width = max([5, *(len(lb) for lb in self.labels)])
        head = f"{'':{width}}  " + "  ".join(_heading(m) for m in cols)
        rows = [f"check_grad({self.name}): value and gradient by every method", head]
        vals = [self.values.get(m) for m in cols]
        rows.append(f"{'value':{width}}  " + "  ".join(_cell(v, m) for v, m in zip(vals, cols)))
        failed = {i for _, i in self.failures}
        for i, label in enumerate(self.labels):
            cells = "  ".join(_cell(self.column(m, i), m, self.fd_error[i]) for m in cols)
            mark = "  <- MISMATCH" if i in failed else ""
            rows.append(f"{label:{width}}  {cells}{mark}")
        rows.extend(_footer(self.tolerances, self.notes))
        if self.clock is not None:
            rows.append(self.clock.line())
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
            if not math.isnan(self.fd_error[i]):
                shown += f" (estimated error {self.fd_error[i]:.2g})"
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
        f"differences (Richardson-extrapolated central differences) to rtol={t['fd_rtol']:g}, "
        f"atol={t['fd_atol']:g}, or {FD_SAFETY:g} x their estimated error if that is larger",
        *(f"note: {n}" for n in notes),
    ]


#: The heading of the column of finite differences, each with its estimated error.
FD_HEADING = "finite diff ± est. error"


def _heading(method: str) -> str:
    """A column's heading, as wide as its cells."""
    return f"{FD_HEADING:>32}" if method == "finite diff" else f"{method:>22}"


def _cell(v: float | None, method: str = "", error: float = math.nan) -> str:
    """A number in a report's table; a finite difference with its estimated error
    (``1.90496524708636±1.3e-09``, one word), 32 wide."""
    if method == "finite diff":
        text = (
            "-" if v is None else f"{v:.15g}" + (f"±{error:.1e}" if math.isfinite(error) else "")
        )
        return f"{text:>32}"
    if v is None:
        return f"{'-':>22}"
    return f"{v:>22.15g}"


def _fd_verdict(
    fd: float, error: float, ref: float, f: float, t: dict[str, float]
) -> bool | str | None:
    """Whether the finite difference ``fd`` (estimated error ``error``) agrees with the exact
    ``ref``: held to the larger of ``fd_atol + fd_rtol * max(|ref|, |f|)`` (``f`` the value
    differenced) and FD_SAFETY times its error. None where there is none; a reason (str)
    where it is too uncertain to tell, at its own size or the exact one's."""
    if math.isnan(fd):
        return None
    f = abs(f) if math.isfinite(f) else 0.0
    fixed = t["fd_atol"] + t["fd_rtol"] * max(abs(ref), f)
    own = t["fd_atol"] + t["fd_rtol"] * max(abs(fd), f)
    slack = FD_SAFETY * error if math.isfinite(error) else math.inf
    if slack > FD_INCONCLUSIVE * min(fixed, own):
        return (
            f"{fd:.6g} with an estimated error of {error:.2g}, which could not tell a wrong "
            "derivative from a right one (the function changes too fast at the steps tried)"
        )
    return abs(fd - ref) <= max(fixed, slack)


class Table:
    """One quantity (values, a Jacobian, a Hessian, a product) by several methods, one
    row per entry, compared as ``check_grad`` compares a gradient.

    ``columns`` maps each method to its flat array (None: not computed); the methods in
    ``exact`` must agree to ``rtol``/``atol`` (plus ``slack`` per row, for sums such as
    ``J @ v``); ``fd`` (a column name or None) to ``fd_rtol``/``fd_atol`` relative to the
    larger of the exact entry and ``scale`` (the value whose difference it took), or
    FD_SAFETY times its estimated error ``fd_error`` where larger (too uncertain a
    difference is not compared: ``notes`` says so). Where an exact method gives inf or
    nan only the methods in ``same_arithmetic`` are held to agree, and the entry is
    listed in ``singular``.
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
        fd_error: np.ndarray | None = None,
    ) -> None:
        self.title = title
        self.labels = labels
        self.columns = columns
        self.exact = [m for m in exact if columns.get(m) is not None]
        self.fd = fd if fd is not None and columns.get(fd) is not None else None
        self.fd_error = np.full(len(labels), math.nan) if fd_error is None else np.ravel(fd_error)
        self.notes: list[str] = []
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
            if self.fd is None or not ref:
                continue
            fd_i, error = float(columns[self.fd][i]), float(self.fd_error[i])
            f = 0.0 if scale is None else float(scale[i])
            verdict = _fd_verdict(fd_i, error, ref[-1], f, t)
            if isinstance(verdict, str):
                self.notes.append(f"finite diff for {labels[i]} not compared: {verdict}")
            elif verdict is False:
                self.failures.append(i)

    def shown(self) -> list[str]:
        """The methods with a column, in order."""
        return [m for m, c in self.columns.items() if c is not None]

    def lines(self) -> list[str]:
        """The table as text, mismatching rows marked."""
        cols = self.shown()
        width = max([5, *(len(lb) for lb in self.labels)])
        rows = [self.title, f"{'':{width}}  " + "  ".join(_heading(m) for m in cols)]
        for i, label in enumerate(self.labels):
            cells = "  ".join(
                _cell(float(self.columns[m][i]), m, float(self.fd_error[i])) for m in cols
            )
            rows.append(f"{label:{width}}  {cells}{'  <- MISMATCH' if i in self.failures else ''}")
        return rows

    def describe(self, i: int) -> str:
        """Row ``i`` by every method, as ``method=value, ...``."""
        text = ", ".join(f"{m}={float(self.columns[m][i])!r}" for m in self.shown())
        if self.fd and not math.isnan(self.fd_error[i]):
            text += f" (estimated error {float(self.fd_error[i]):.2g})"
        return text


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
        #: the seconds each method took, and the report's line saying so
        self.seconds: dict[str, float] = {}
        self.time_line = ""
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
        if self.time_line:
            rows.append(self.time_line)
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
