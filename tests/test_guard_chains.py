"""Long chains of guards (issue 28, item 8): ``sum(max(x[i], 0.0) * x[i + 1] ...)``.

Python's ``max`` on a traced Value compares, so each element records a guard;
at 500 elements the generated code had 499 ``if ...: return False`` in a row
and Numba's SSA pass recursed once per block (RecursionError). The loop IR now
checks a run of guards that differ only by an advancing index as one loop
(``loopir.GuardLoop``); other printers fold many guards into one flag tested
once. Every number here is checked against plain Python on floats, an
independent NumPy formula for the gradient and central differences, at the
traced point and at fresh points where signs differ (a guard fails there, so
the function is traced again: never a stale answer).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

import adcompile as ad
from adcompile.emit import codegen
from adcompile.emit.codegen import module_source, straight_line
from adcompile.emit.fold import loop_source
from adcompile.ir.passes import hoist_constants
from adcompile.ir.tape import Param
from adcompile.loops import build as loopbuild
from adcompile.loops import ir as loopir
from adcompile.loops.segments import find_segments


def chain_max(x):
    return sum(max(x[i], 0.0) * x[i + 1] for i in range(len(x) - 1))


def chain_min(x):
    return sum(min(x[i], 0.0) * x[i + 1] for i in range(len(x) - 1))


def chain_abs(x):
    return sum((x[i] if x[i] > 0 else -x[i]) * x[i + 1] for i in range(len(x) - 1))


def chain_relu(x):
    return sum(ad.relu(x[i]) * x[i + 1] for i in range(len(x) - 1))


def _grad_max(x: np.ndarray) -> np.ndarray:
    """d/dx of sum(r(x[i]) x[i+1]) for r = max(., 0), in NumPy (r'(0) is not met)."""
    return _chain_grad(x, np.maximum(x, 0.0), (x > 0).astype(float))


def _grad_min(x: np.ndarray) -> np.ndarray:
    return _chain_grad(x, np.minimum(x, 0.0), (x < 0).astype(float))


def _grad_abs(x: np.ndarray) -> np.ndarray:
    return _chain_grad(x, np.abs(x), np.sign(x))


def _chain_grad(x: np.ndarray, r: np.ndarray, dr: np.ndarray) -> np.ndarray:
    g = np.zeros_like(x)
    g[:-1] += dr[:-1] * x[1:]
    g[1:] += r[:-1]
    return g


CASES: dict[str, tuple[Callable, Callable]] = {
    "max": (chain_max, _grad_max),
    "min": (chain_min, _grad_min),
    "abs": (chain_abs, _grad_abs),
    "relu": (chain_relu, _grad_max),
}


def _plain(f: Callable, x: np.ndarray) -> float:
    """``f`` on plain Python floats: the reference value."""
    return float(f([float(v) for v in x]))


def _check(f: Callable, grad_ref: Callable, x: np.ndarray, value: float, grad, what: str) -> None:
    """A value and gradient at ``x`` against plain Python, the NumPy formula and
    central differences (along random directions and the first coordinates)."""
    want = _plain(f, x)
    scale = 1.0 + np.abs(x).sum()
    assert value == pytest.approx(want, rel=1e-12, abs=1e-12 * scale), f"{what}: value"
    if grad is None:
        return
    grad = np.asarray(grad, float)
    np.testing.assert_allclose(grad, grad_ref(x), rtol=1e-12, atol=1e-13, err_msg=what)
    # every |x[i]| >= 0.05 here: a step of 1e-6 crosses no kink
    assert np.min(np.abs(x)) >= 0.05
    rng = np.random.default_rng(len(x))
    dirs = [rng.normal(size=len(x)) for _ in range(2)] + [np.eye(len(x))[k] for k in (0, 1)]
    h = 1e-6
    for d in dirs:
        fd = (_plain(f, x + h * d) - _plain(f, x - h * d)) / (2 * h)
        assert grad @ d == pytest.approx(fd, rel=1e-6, abs=1e-6), f"{what}: differences"


def _positive(n: int, seed: int) -> np.ndarray:
    """A point where every element is positive (so that the chain folds into loops)."""
    return np.random.default_rng(seed).uniform(0.1, 1.0, n)


def _mixed(n: int, seed: int) -> np.ndarray:
    """A point with random signs, every element at least 0.05 from zero."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.05, 1.0, n) * rng.choice([-1.0, 1.0], n)


def _flipped(x: np.ndarray, k: int) -> np.ndarray:
    y = x.copy()
    y[k] = -y[k]
    return y


def _ifs(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.lstrip().startswith("if "))


@pytest.mark.parametrize("n", [50, 500, 2000])
@pytest.mark.parametrize("name", list(CASES))
def test_a_chain_of_guards_compiles_and_is_rechecked_at_every_call(name: str, n: int) -> None:
    """Value and gradient at the traced point, at a fresh point of the same signs
    (no new trace) and where an element changes sign (traced again), for chains of
    max, min, an abs-like branch and ad.relu (no guards) of 50, 500 and 2,000
    elements; the folded code checks the guards in a loop, not one ``if`` each."""
    f, grad_ref = CASES[name]
    vg = ad.value_and_grad(f)
    x0 = _positive(n, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        value, g = vg(x0)
        _check(f, grad_ref, x0, value, g, f"{name}, n={n}, traced point")
        # one loop of guards (folded code), or one flag (straight-line code, n = 50)
        assert _ifs(vg.source) <= 1
        if n >= 500:
            assert "Folded" in vg.source
        traces = vg.traces
        x1 = _positive(n, 2)
        value, g = vg(x1)
        _check(f, grad_ref, x1, value, g, f"{name}, n={n}, same signs")
        assert vg.traces == traces  # the guards held: the same code served it
        for k in (0, n // 2, n - 2) if (name, n) == ("max", 500) else (n // 2,):
            x2 = _flipped(x1, k)
            value, g = vg(x2)
            _check(f, grad_ref, x2, value, g, f"{name}, n={n}, x[{k}] negative")
            if name != "relu":  # (relu records no guard: nothing to trace again)
                assert vg.traces > traces
        x3 = _mixed(n, 3)
        value, g = vg(x3)
        _check(f, grad_ref, x3, value, g, f"{name}, n={n}, random signs")
        value, g = vg(x0)  # and back at the first point
        _check(f, grad_ref, x0, value, g, f"{name}, n={n}, traced point again")


@pytest.mark.parametrize("transform", ["grad", "jit"])
def test_grad_and_jit_of_the_issue_example_at_500(transform: str) -> None:
    """``ad.grad`` and ``ad.jit`` of the issue's example at 500 elements (a
    RecursionError in Numba before), at the traced point and where signs change."""
    f = chain_max
    fn = getattr(ad, transform)(f)
    x0 = _positive(500, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        for x in (x0, _flipped(x0, 250), _flipped(x0, 498), _mixed(500, 5), x0):
            out = fn(x)
            if transform == "jit":
                _check(f, _grad_max, x, float(out), None, "ad.jit")
            else:
                _check(f, _grad_max, x, _plain(f, x), out, "ad.grad")


def test_a_chain_of_guards_on_values_computed_in_a_loop() -> None:
    """``max(h, y)`` of each value ``h`` of a loop against ``y`` computed after it:
    the guards read the loop's stored values in a loop of their own (the loop IR
    failed here before, with a KeyError: those values were not stored)."""

    def f(x):
        s, hs = 0.0, []
        for i in range(len(x)):
            s = 0.5 * s + x[i]
            hs.append(s)
        y = x[0] * x[1] + 3.0
        t = 0.0
        for h in hs:
            t = t + max(h, y) * 0.5
        return t + s

    def eager(x: np.ndarray) -> tuple[float, np.ndarray]:
        X = ad.tensor(x.copy())
        out = f(X)
        out.backward()
        return float(out.data), ad.grad_of(X)

    vg = ad.value_and_grad(f)
    x0 = np.random.default_rng(6).uniform(0.1, 1.0, 120)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        value, g = vg(x0)
        assert "for i in range(119):" in vg.source and _ifs(vg.source) <= 4
        x1 = x0.copy()
        x1[60] = 5.0  # now max(h, y) is h from the 61st value on, for a while
        for x in (x0, x1):
            value, g = vg(x)
            ev, eg = eager(x)
            assert value == pytest.approx(_plain(f, x), rel=1e-13)
            assert ev == pytest.approx(value, rel=1e-13)
            np.testing.assert_allclose(g, eg, rtol=1e-11, atol=1e-13)
            d = np.random.default_rng(7).normal(size=len(x))
            fd = (_plain(f, x + 1e-6 * d) - _plain(f, x - 1e-6 * d)) / 2e-6
            assert g @ d == pytest.approx(fd, rel=1e-6, abs=1e-6)


# ---------------------------------------------------------------- the printers, as Python


def _run_loop_code(source: str, name: str, code, x: np.ndarray, n_out: int):
    ns: dict = {}
    exec(compile(source, "<guard chain>", "exec"), ns)
    out = np.empty(n_out)
    ok = ns[name](x, np.empty(max(code.work_size, 1)), code.columns, out)
    return ok, out


def test_the_loop_ir_folds_a_guard_chain_into_one_guard_loop() -> None:
    """The loop IR of the issue's example: one GuardLoop of 199 guards; its
    interpreter, its gradient's and the generated code (run as Python) all fail
    where one element changes sign, and agree with plain Python where none does."""
    n = 200
    x0 = _positive(n, 8)
    tape = hoist_constants(ad.trace(chain_max, x0))
    params = [Param("x", n)]
    program = loopbuild.build(tape, find_segments(tape, params), params)
    assert program.guards == []
    (gl,) = program.guard_loops
    assert (gl.cmp, gl.trips, gl.expected) == ("<", n - 1, False)
    assert gl.a == loopir.Arg(0, loopir.Affine(0, 1)) and gl.b == loopir.Lit(0.0)
    assert "guard i in range(199): x[i] < 0.0 is False" in str(program)
    ls = loop_source(tape, params, [0], "g")
    assert ls is not None and _ifs(ls.source) == 1
    for k in (None, 0, 100, 198):
        x = x0 if k is None else _flipped(x0, k)
        ok, values = program.run([x])
        assert ok == (k is None)
        gok, _ = ls.grad.run([x])
        assert gok == (k is None)
        cok, out = _run_loop_code(ls.source, "g", ls.code, x, n + 1)
        assert cok == (k is None)
        if k is None:
            assert values[0] == pytest.approx(_plain(chain_max, x), rel=1e-13)
            np.testing.assert_allclose(out[1:], _grad_max(x), rtol=1e-13)


def test_fold_guards_takes_interleaved_kinds_as_separate_loops() -> None:
    """Guards of two kinds made in turn (``max(x[i], 0)`` and ``min(x[i + 1], 1)``
    per i) fold into a loop each; a run too short, or uneven, stays single."""
    A, L = loopir.Affine, loopir.Lit
    checks: dict = {}
    for i in range(10):
        checks[("<", loopir.Arg(0, A(i)), L(0.0), False)] = "f.py:1"
        checks[(">", loopir.Arg(0, A(i + 1)), L(1.0), False)] = "f.py:2"
    checks[("<", loopir.Arg(1, A(3)), L(0.0), True)] = "f.py:3"
    for i in (0, 1, 5):  # uneven: a run of 2, then one
        checks[("<=", loopir.Arg(0, A(i)), loopir.Arg(0, A(2 * i + 1)), True)] = "f.py:4"
    singles, where, loops = loopbuild.fold_guards(checks)
    assert [(gl.cmp, gl.a, gl.b, gl.trips, gl.where) for gl in loops] == [
        ("<", loopir.Arg(0, A(0, 1)), L(0.0), 10, "f.py:1"),
        (">", loopir.Arg(0, A(1, 1)), L(1.0), 10, "f.py:2"),
    ]
    assert len(singles) == 4 and where == ["f.py:3", "f.py:4", "f.py:4", "f.py:4"]
    # the same checks, as the loop IR's interpreter reads them
    program = loopir.Program([Param("x", 12), Param("y", 4)], [], [], singles, "f", where, loops)
    x = np.full(12, 0.5)
    y = np.array([0.0, 0.0, 0.0, -1.0])
    x[[1, 3, 5, 11]] = [0.6, 0.7, 0.8, 0.9]  # x[0] <= x[1], x[1] <= x[3], x[5] <= x[11]
    assert program.run([x, y])[0]
    for k, v in ((4, -0.1), (7, 1.5)):
        bad = x.copy()
        bad[k] = v
        assert not program.run([bad, y])[0]


def test_straight_line_code_checks_many_guards_with_one_flag() -> None:
    """Straight-line code of a chain of 60 guards: one ``if`` at the end, not 60;
    run as Python it fails where one element changes sign, at the first, a middle
    and the last guard, and gives plain Python's value where none does. Few
    guards keep one ``if`` each."""
    n = 61
    x0 = _mixed(n, 9)
    tape = ad.trace(chain_max, x0)
    assert len(tape.guards) == n - 1 > codegen.GUARD_IFS
    src = straight_line(tape, "g", [Param("x", n)])
    assert _ifs(src) == 1 and src.count("ok &= ") == n - 1
    ns: dict = {}
    exec(compile(module_source([src]), "<straight>", "exec"), ns)
    for k in (None, 0, 30, 59):  # (x[60] is compared with nothing)
        x = x0 if k is None else _flipped(x0, k)
        out = np.empty(1)
        assert ns["g"](x, out) == (k is None)
        if k is None:
            assert out[0] == pytest.approx(_plain(chain_max, x), rel=1e-13)
    # with a status (exported code): the number of the first guard that fails
    src = straight_line(tape, "g", [Param("x", n)], status=True)
    assert _ifs(src) == 1 and "return st" in src
    ns = {}
    exec(compile(module_source([src]), "<status>", "exec"), ns)
    assert ns["g"](x0, np.empty(1)) == 0
    for first, also in ((0, 30), (5, 58), (58, None)):
        x = _flipped(x0, first) if also is None else _flipped(_flipped(x0, first), also)
        assert ns["g"](x, np.empty(1)) == first + 1
    few = ad.trace(chain_max, x0[:10])
    src = straight_line(few, "g", [Param("x", 10)])
    assert _ifs(src) == 9 and "ok &=" not in src
    # a parameter named ok: the flag takes another name
    src = straight_line(tape, "g", [Param("ok", n)])
    assert "ok_ = True" in src and "if not ok_:" in src


def test_value_code_folded_checks_many_guards_in_a_loop_or_one_flag() -> None:
    """Value code folded through the loop IR (``loops.loop_source``, no reverse:
    the path of a derivative tape) with guards on computed values outside loops:
    the 100 guards are not one ``if`` each; run as Python, it fails where one
    guard does and gives the tape's numbers where none does."""

    def f(x):
        s, hs = 0.0, []
        for i in range(len(x)):
            s = 0.5 * s + x[i]
            hs.append(s)
        y = x[0] * x[1] + 3.0
        return sum(max(h, y) for h in hs) + s

    x0 = np.random.default_rng(10).uniform(0.1, 1.0, 100)
    tape = ad.trace(f, x0)
    params = [Param("x", 100)]
    folded = loop_source(tape, params, None, "g")
    assert folded is not None
    src = folded.source
    assert src.count("return False") < 5 and src.count("if ") < 10
    ns: dict = {}
    exec(compile(src, "<unrolled>", "exec"), ns)
    x1 = x0.copy()
    x1[50] = 5.0
    for x, holds in ((x0, True), (x1, False)):
        out = np.empty(len(tape.outputs))
        work = np.empty(max(folded.code.work_size, 1))
        assert ns["g"](x, work, folded.code.columns, out) == holds
        if holds:
            assert out[0] == pytest.approx(_plain(f, x), rel=1e-13)


def test_the_loop_printer_folds_many_single_guards_into_one_flag() -> None:
    """Outer guards that do not form runs (uneven indices) are printed as one flag
    when there are many, and the code still fails where one of them does."""
    n = 900
    idx = [k * (k + 1) // 2 for k in range(1, 41)]  # uneven steps: no run of three

    def f(x):
        t = 0.0
        for k in idx:
            if x[k] > 0.0:  # (no op differs: the tape repeats, the guards do not)
                t = t + 0.0
        return sum(x[i] * x[i + 1] for i in range(n - 1)) + t

    x0 = _positive(n, 11)
    tape = hoist_constants(ad.trace(f, x0))
    assert len(tape.guards) == len(idx) > codegen.GUARD_IFS
    params = [Param("x", n)]
    ls = loop_source(tape, params, [0], "g")
    assert ls is not None
    assert "ok &= " in ls.source and _ifs(ls.source) <= 3
    assert isinstance(ls.program.guards[0][1], loopir.Arg)
    for k in (None, idx[0], idx[len(idx) // 2], idx[-1]):
        x = x0 if k is None else _flipped(x0, k)
        ok, out = _run_loop_code(ls.source, "g", ls.code, x, n + 1)
        assert ok == (k is None)
        if k is None:
            assert out[0] == pytest.approx(_plain(f, x), rel=1e-13)
