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
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..api.transform import Transformed, param_names, trace, value_and_grad
from ..diff import interpret
from ..diff.reverse import grad_tape
from ..ir.ops import Op
from ..ir.tape import Tape

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
    tape: Tape,
    point: np.ndarray,
    positions: list[int],
    notes: list[str],
    clock: Clock | None = None,
) -> tuple[np.ndarray | None, float | None, set[int]]:
    """``sympy.diff`` of the tape's expression at the point, per position, and the value (None
    if skipped); and the entries (-1 the value, else the index) where SymPy divides by zero,
    which are nan in the column."""
    found = _sympy_derivatives(tape, point, positions, notes, clock=clock)
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
    clock: Clock | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, set[tuple]] | None:
    """SymPy's values of every output of the tape at the point, its Jacobian (outputs by
    ``positions``), with ``hessian`` the Hessian of output 0 by ``positions``, and the
    entries where SymPy divides by zero (``(row, -1)`` a value, ``(row, j)`` a Jacobian
    entry, ``("h", i, j)`` a Hessian entry), which are nan; None (with a note) if skipped:
    on a tape of more than SYMPY_MAX_OPS operations, or where ``clock``'s bound is reached
    between two derivatives."""
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

    from .bridge import limit_at, tape_to_sympy

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


class _OverTime(Exception):
    """The bound on the reference methods' time was reached."""


def _sympy_over(clock: Clock | None) -> str:
    bound = clock.max_seconds if clock is not None else None
    return (
        f"sympy skipped: it reached the bound max_seconds={bound:g} on the reference methods "
        "(pass a larger max_seconds, or None, to wait for it)"
    )


def _kinks(tape: Tape) -> list[Any]:
    """The nodes of non-smooth ops (``abs``, ``relu``, ``maximum`` ...)."""
    return [node for node in tape.nodes if isinstance(node.op, Op) and not node.op.smooth]


def _switch(vals: list[float], node: Any) -> float:
    """Where a non-smooth op is relative to its kink: its operand, or ``a - b``."""
    return node.op.switch(*[vals[a] for a in node.args])


class Clock:
    """check_grad's time: the seconds each method took, and the bound on the reference
    methods (``max_seconds`` from when they start; None: no bound)."""

    #: The methods that compile a transform the first time.
    COMPILED = ("compiled", "jvp", "jacobian", "hessian")

    def __init__(self, max_seconds: float | None) -> None:
        self.max_seconds = max_seconds
        self.deadline = math.inf
        self.seconds: dict[str, float] = {}

    def start_references(self) -> None:
        """The reference methods start now: the bound counts from here."""
        if self.max_seconds is not None:
            self.deadline = time.perf_counter() + self.max_seconds

    def over(self) -> bool:
        """Whether the bound is reached."""
        return time.perf_counter() > self.deadline

    @contextmanager
    def timing(self, method: str) -> Iterator[None]:
        """Add the time of the ``with`` block to ``method``'s seconds (a compiled method's
        time does not count against the bound)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - t
            self.seconds[method] = self.seconds.get(method, 0.0) + spent
            if method in self.COMPILED:
                self.deadline += spent

    def line(self) -> str:
        """``time: compiled 1.2 s (compiling included), ...`` for a report."""
        parts = [
            f"{m} {_duration(s)}" + (" (compiling included)" if m in self.COMPILED else "")
            for m, s in self.seconds.items()
        ]
        bound = (
            ""
            if self.max_seconds is None
            else f"; the reference methods are bounded by max_seconds={self.max_seconds:g}"
        )
        return f"time: {', '.join(parts)}{bound}"


def _duration(seconds: float) -> str:
    """``31.2 s``, ``760 ms``, ``0.41 ms``."""
    ms = seconds * 1000
    return f"{seconds:.1f} s" if seconds >= 1.0 else f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


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
#: A finite difference is held to the larger of ``fd_atol + fd_rtol * scale`` and FD_SAFETY
#: times its estimated error ...
FD_SAFETY = 4.0
#: ... and not compared (a note says so) where that is over FD_INCONCLUSIVE times the fixed
#: tolerance at its own size (``fd_atol + fd_rtol * max(|fd|, |f|)``): so uncertain a
#: difference could not tell a wrong derivative from a right one.
FD_INCONCLUSIVE = 100.0
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
        kinks = _kinks(tape)
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


def _finite_differences(
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


#: check_grad's and check_jacobian's default bound, in seconds, on the time of the reference
#: methods (everything but compiling and running the transforms checked).
MAX_SECONDS = 60.0


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
    tolerances = _check_tolerances(
        "check_grad", rtol=rtol, atol=atol, fd_rtol=fd_rtol, fd_atol=fd_atol
    )
    clock = Clock(_check_seconds("check_grad", max_seconds))
    fun, name, many, nums, shapes, positions, labels, point = _setup(f, args, argnums)

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
        sym = _sympy_column(tape, point, positions, notes, clock)
    grads["sympy"], values["sympy"], poles = sym
    with clock.timing("finite diff"):
        fd = _finite_differences(tape, point, positions, labels, notes, tolerances, clock)
    grads["finite diff"] = fd.value[0]

    # On a kink the derivative is a convention (relu'(0) is 0 here, Heaviside(0) is 1/2
    # in SymPy), so SymPy is shown there but not held to agree.
    uncompared = ["sympy"] if _on_kink(tape, point, notes, grads["sympy"] is not None) else []
    report = GradReport(
        name, labels, grads, values, notes, tolerances, uncompared, poles, fd, clock
    )
    if report.failures:
        raise report.error()
    if report.singular:
        warnings.warn(report.singular_warning(), RuntimeWarning, stacklevel=2)
    return report


def _check_seconds(name: str, max_seconds: float | None) -> float | None:
    """``max_seconds`` after checking it is None or a number > 0 (ValueError otherwise)."""
    if max_seconds is None:
        return None
    try:
        valid = float(max_seconds) > 0 and not isinstance(max_seconds, bool)
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(
            f"{name}: max_seconds must be a number of seconds > 0, or None for no bound; "
            f"got {max_seconds!r}"
        )
    return float(max_seconds)


# ------------------------------------------------------------------ check_jacobian


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


def _out_labels(name: str, tree: Any) -> list[str]:
    """A label per flat output: ``f`` for a scalar, ``f[1]``, ``f[0][2, 1]`` ..."""
    from ..ir.outputs import leaves, map_leaves

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
    from ..ir.outputs import map_leaves, part_leaves

    return [r for _, r in part_leaves(map_leaves(tree, lambda k, s: k), result)]


def _flat(result: Any, tree: Any) -> np.ndarray:
    """A result with output tree ``tree`` as one flat float array."""
    return np.concatenate(
        [np.ravel(np.asarray(r, dtype=float)) for r in _flat_leaves(tree, result)]
    )


def _jacobian_matrix(result: Any, tree: Any, sizes: list[int], many: bool) -> np.ndarray:
    """``jacobian``'s result as one matrix: rows the flat outputs, columns the flat inputs."""
    from ..ir.outputs import leaves, size

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
    max_seconds: float | None = MAX_SECONDS,
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
    Finite differences and ``max_seconds`` are as in :func:`check_grad`.
    """
    from ..api.derived import hessian as hessian_of
    from ..api.derived import hvp, jacobian, jvp
    from ..api.transform import jit, trace_call
    from ..ir.outputs import size

    tolerances = _check_tolerances(
        "check_jacobian", rtol=rtol, atol=atol, fd_rtol=fd_rtol, fd_atol=fd_atol
    )
    clock = Clock(_check_seconds("check_jacobian", max_seconds))
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
    with clock.timing("jvp"):
        primal_out, tangent_out = jvp(fun, args, tangents)
    clock.start_references()
    vals = interpret.evaluate(tape, point)
    with clock.timing("sympy"):
        sym = _sympy_derivatives(tape, point, positions, notes, hessian=hessian, clock=clock)
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

    with clock.timing("jacobian"):
        jac = {
            m: _jacobian_matrix(jacobian(fun, argn, mode=m)(*args), tree, sizes, many)
            for m in ("reverse", "forward")
        }
    with clock.timing("finite diff"):
        fd = _finite_differences(tape, point, positions, labels, notes, tolerances, clock)
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
        with clock.timing("hessian"):
            H = _hessian_matrix(hessian_of(fun, argn)(*args), sizes, many)
        g = grad_tape(tape, wrt=positions)
        with clock.timing("finite diff"):
            fdh = _finite_differences(g, point, positions, labels, notes, tolerances, clock)
        fdh = FiniteDifferences(fdh.value[1:], fdh.error[1:], fdh.step[1:])
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
    for table in tables.values():
        notes.extend(table.notes)
    report = JacobianReport(name, tables, notes, tolerances, J, H, v)
    report.seconds = clock.seconds
    report.time_line = clock.line()
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
    fd: FiniteDifferences,
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
            "finite diff": fd.value.ravel(),
        },
        names if on_kink else [*names, "sympy"],
        tolerances,
        fd="finite diff",
        scale=scale,
        same_arithmetic=names,
        fd_error=fd.error.ravel(),
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
