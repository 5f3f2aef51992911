"""``check_jacobian``: every derivative adcompile computes of ``f``, by every method, at
one point.

For an ``f`` returning anything ``ad.jacobian`` accepts, one ``Table`` per quantity: the
values (``ad.jit``, the interpreter, ``ad.jvp``'s primal, SymPy); the Jacobian (compiled
reverse and forward mode, SymPy, finite differences); ``ad.jvp`` along a random
direction against ``J @ v``; and for a scalar ``f`` the Hessian (compiled, its
transpose, SymPy, finite differences of the gradient) and ``ad.hvp`` against ``H @ v``.
It raises ``GradientMismatch`` where they disagree, warns at a singular point, and
returns a ``JacobianReport``. Tolerances, finite differences and the time bound are
``check_grad``'s.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..diff import interpret
from ..diff.reverse import grad_tape
from ..ir.tape import Tape
from .check_report import JacobianReport, Table
from .check_setup import (
    MAX_SECONDS,
    Clock,
    check_seconds,
    check_tolerances,
    element_labels,
    point_on_kink,
    setup,
)
from .check_sympy import sympy_derivatives
from .finite import FiniteDifferences, finite_differences


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
    from ..api.tracing import trace_or_expand
    from ..ir.outputs import size

    tolerances = check_tolerances(
        "check_jacobian", rtol=rtol, atol=atol, fd_rtol=fd_rtol, fd_atol=fd_atol
    )
    clock = Clock(check_seconds("check_jacobian", max_seconds))
    fun, name, many, nums, shapes, positions, labels, point = setup(f, args, argnums)
    sizes = [size(shapes[k] or None) for k in nums]
    tape = trace_or_expand(fun, args, multi=True)
    outs = _out_labels(name, tape.tree)
    scalar = tape.tree is None
    hessian = scalar if hessian is None else hessian
    if hessian and not scalar:
        raise ValueError(f"check_jacobian(hessian=True): {name} must return a scalar")
    p = _Problem(
        fun,
        args,
        name,
        many,
        nums,
        shapes,
        sizes,
        positions,
        labels,
        point,
        tape,
        outs,
        tolerances,
        clock,
    )
    v, tangents = _direction(p, seed)
    tables, J, sym_hess, on_kink = _first_order(p, v, tangents, hessian)
    H = _second_order(p, tables, v, tangents, sym_hess, on_kink) if hessian else None
    for table in tables.values():
        p.notes.extend(table.notes)
    report = JacobianReport(name, tables, p.notes, tolerances, J, H, v)
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


@dataclass
class _Problem:
    """``f`` at the point, as every table of a ``check_jacobian`` sees it (``setup``'s
    answers, the sizes of the arguments checked, the tape and its output labels), and the
    notes gathered so far."""

    fun: Callable
    args: tuple
    name: str
    many: bool
    nums: list[int]
    shapes: list[tuple]
    sizes: list[int]
    positions: list[int]
    labels: list[str]
    point: np.ndarray
    tape: Tape
    outs: list[str]
    tolerances: dict[str, float]
    clock: Clock
    notes: list[str] = field(default_factory=list)

    @property
    def argn(self) -> int | tuple[int, ...]:
        """The argument numbers checked, as the transforms take them."""
        return tuple(self.nums) if self.many else self.nums[0]


def _direction(p: _Problem, seed: int) -> tuple[np.ndarray, list[Any]]:
    """A random direction ``v`` (``seed``) over the flat inputs checked, and the same as
    tangents shaped like ``f``'s arguments (zero for the arguments not checked)."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(len(p.positions))
    tangents: list[Any] = [np.zeros(s) if s else 0.0 for s in p.shapes]
    for k, (a, b) in zip(p.nums, zip(np.cumsum([0, *p.sizes]), np.cumsum(p.sizes))):
        tangents[k] = v[a:b].reshape(p.shapes[k]) if p.shapes[k] else float(v[a])
    return v, tangents


def _first_order(
    p: _Problem, v: np.ndarray, tangents: list[Any], hessian: bool
) -> tuple[dict[str, Table], np.ndarray, np.ndarray | None, bool]:
    """The tables of the values, the Jacobian and the jvp along ``v``; the Jacobian by
    compiled reverse mode; SymPy's Hessian (None unless ``hessian``, or where SymPy is
    skipped); and whether the point is on a kink."""
    from ..api.derived import jacobian, jvp
    from ..api.transform import jit

    clock, tree, tolerances = p.clock, p.tape.tree, p.tolerances
    with clock.timing("jvp"):
        primal_out, tangent_out = jvp(p.fun, p.args, tangents)
    clock.start_references()
    vals = interpret.evaluate(p.tape, p.point)
    with clock.timing("sympy"):
        sym = sympy_derivatives(
            p.tape, p.point, p.positions, p.notes, hessian=hessian, clock=clock
        )
    sym_vals, sym_jac, sym_hess, _ = sym if sym is not None else (None, None, None, None)
    tables = {
        "value": Table(
            f"value: {p.name} by every method",
            p.outs,
            {
                "jit": _flat(jit(p.fun)(*p.args), tree),
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
            m: _jacobian_matrix(jacobian(p.fun, p.argn, mode=m)(*p.args), tree, p.sizes, p.many)
            for m in ("reverse", "forward")
        }
    with clock.timing("finite diff"):
        fd = finite_differences(p.tape, p.point, p.positions, p.labels, p.notes, tolerances, clock)
    on_kink = point_on_kink(p.tape, p.point, p.notes, sym is not None)
    tables["jacobian"] = _derivative_table(
        "jacobian: every output by every input",
        [f"d {o} / d {i}" for o in p.outs for i in p.labels],
        {"reverse": jac["reverse"], "forward": jac["forward"]},
        sym_jac,
        fd,
        on_kink,
        tolerances,
        np.repeat(vals, len(p.positions)),
    )

    J = jac["reverse"]
    tables["jvp"] = Table(
        "jvp: the derivative along a random direction v",
        p.outs,
        {"jvp": _flat(tangent_out, tree), "J @ v": J @ v},
        ("jvp", "J @ v"),
        tolerances,
        slack=tolerances["rtol"] * (np.abs(J) @ np.abs(v)),
    )
    return tables, J, sym_hess, on_kink


def _second_order(
    p: _Problem,
    tables: dict[str, Table],
    v: np.ndarray,
    tangents: list[Any],
    sym_hess: np.ndarray | None,
    on_kink: bool,
) -> np.ndarray:
    """Add the tables of the Hessian and (``argnums=0``) the hvp along ``v`` to ``tables``;
    the compiled Hessian."""
    from ..api.derived import hessian as hessian_of
    from ..api.derived import hvp

    clock, tolerances, labels = p.clock, p.tolerances, p.labels
    with clock.timing("hessian"):
        H = _hessian_matrix(hessian_of(p.fun, p.argn)(*p.args), p.sizes, p.many)
    g = grad_tape(p.tape, wrt=p.positions)
    with clock.timing("finite diff"):
        fdh = finite_differences(g, p.point, p.positions, labels, p.notes, tolerances, clock)
    fdh = FiniteDifferences(fdh.value[1:], fdh.error[1:], fdh.step[1:])
    grad = np.array(interpret.evaluate(g, p.point)[1:])
    tables["hessian"] = _derivative_table(
        "hessian: every pair of inputs",
        [f"d2 {p.name} / d {a} d {b}" for a in labels for b in labels],
        {"hessian": H, "transpose": H.T},
        sym_hess,
        fdh,
        on_kink,
        tolerances,
        np.repeat(grad, len(p.positions)),
    )
    if p.nums == [0] and not p.many:
        hv = hvp(p.fun)(p.args[0], tangents[0], *p.args[1:])
        tables["hvp"] = Table(
            "hvp: the Hessian times v",
            labels,
            {"hvp": np.ravel(np.asarray(hv, float)), "H @ v": H @ v},
            ("hvp", "H @ v"),
            tolerances,
            slack=tolerances["rtol"] * (np.abs(H) @ np.abs(v)),
        )
    else:
        p.notes.append("hvp not compared: it differentiates argument 0 only (argnums=0)")
    return H


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
        out.extend(element_labels(head, shape) if shape else [head])
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
