"""``check_grad``'s finite differences (issue 28, item 3): Richardson-extrapolated central
differences with an estimated error shown beside each and judged against it; and its
time bound on the reference methods.

Numbers are checked against hand-derived gradients (NumPy formulas below), SymPy and the
compiled adjoint.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import adcompile as ad
from adcompile.api.extend import primitive
from adcompile.ir.ops import OPS
from adcompile.symbolic import check_report as R
from adcompile.symbolic import finite as F


def schaffer04(x):
    """SciPy's go_benchmark Schaffer04, as written there (NumPy ufuncs on the elements)."""
    num = np.cos(np.sin(np.abs(x[0] ** 2 - x[1] ** 2))) ** 2 - 0.5
    den = (1 + 0.001 * (x[0] ** 2 + x[1] ** 2)) ** 2
    return 0.5 + num / den


def schaffer04_grad(x: np.ndarray) -> np.ndarray:
    """By hand: f = 0.5 + (c^2 - 0.5) / D, c = cos(sin(|u|)), u = x0^2 - x1^2,
    D = (1 + 0.001 r)^2, r = x0^2 + x1^2."""
    x0, x1 = x
    u, r = x0**2 - x1**2, x0**2 + x1**2
    c = math.cos(math.sin(abs(u)))
    dc_du = -math.sin(math.sin(abs(u))) * math.cos(abs(u)) * math.copysign(1.0, u)
    D = (1 + 0.001 * r) ** 2
    dD_dr = 2 * (1 + 0.001 * r) * 0.001
    num = c**2 - 0.5
    du, dr = np.array([2 * x0, -2 * x1]), np.array([2 * x0, 2 * x1])
    return (2 * c * dc_du * du) / D - num * dD_dr * dr / D**2


def old_central_difference(f, x: np.ndarray, i: int) -> float:
    """check_grad's finite difference before issue 28: one central step cbrt(eps) max(1, |x|)."""
    h = np.cbrt(np.finfo(float).eps) * max(1.0, abs(x[i]))
    xp, xm = x.copy(), x.copy()
    xp[i] += h
    xm[i] -= h
    return (f(xp) - f(xm)) / (xp[i] - xm[i])


def plain_schaffer04(x: np.ndarray) -> float:
    return float(schaffer04(np.asarray(x, dtype=float)))


# where the old single step was off by 1.1e-4 (the issue saw 3.8e-5 at a step of 1.3e-4)
ISSUE_POINT = np.array([27.39233746429086, -46.04265724722594])
# where a single power-of-two sequence of steps aliased the oscillation: x1 ± h had the
# same phase of sin(x0^2 - x1^2) for four halvings, and the differences converged to 9.2e-5
ALIASING_POINT = np.array([43.18356938509885, 80.22161868456732])


def test_schaffer04_where_the_old_step_failed_is_ok():
    g = schaffer04_grad(ISSUE_POINT)
    f = plain_schaffer04(ISSUE_POINT)
    old = old_central_difference(plain_schaffer04, ISSUE_POINT, 0)
    assert abs(old - g[0]) > 1e-6 + 1e-5 * max(abs(g[0]), f)  # the false mismatch
    report = ad.check_grad(schaffer04, ISSUE_POINT)
    assert report.ok and report.fd_compared == [0, 1]
    np.testing.assert_allclose(report.compiled, g, rtol=1e-10)
    np.testing.assert_allclose(report.sympy, g, rtol=1e-10)
    # the finite difference agrees within its own estimated error, which is small
    assert np.all(np.abs(report.finite_diff - g) <= R.FD_SAFETY * report.fd_error + 1e-12)
    assert np.all(report.fd_error < 1e-7 * np.abs(g))


def test_schaffer04_at_random_points_has_no_false_mismatch():
    rng = np.random.default_rng(28)
    for _ in range(25):
        x = rng.uniform(-100.0, 100.0, 2)
        report = ad.check_grad(schaffer04, x)
        g = schaffer04_grad(x)
        assert report.ok, report
        fixed = 1e-6 + 1e-5 * np.maximum(np.abs(g), abs(report.value))
        assert np.all(np.abs(report.finite_diff - g) <= np.maximum(fixed, 4 * report.fd_error))


def test_steps_that_alias_an_oscillation_do_not_fool_the_check():
    x = ALIASING_POINT
    g = schaffer04_grad(x)
    report = ad.check_grad(schaffer04, x)
    assert report.ok
    assert report.finite_diff[1] == pytest.approx(g[1], rel=1e-7)  # not the alias, 9.2e-5
    # the steps h = |x| 2^-k alias there: each difference at 0.157 ... 0.0196 is about 9e-5
    h = max(1.0, abs(x[1])) * 2.0**-9
    xp, xm = x.copy(), x.copy()
    xp[1] += h
    xm[1] -= h
    assert abs((plain_schaffer04(xp) - plain_schaffer04(xm)) / (2 * h)) < 1e-3 < abs(g[1])


def test_the_report_shows_each_finite_difference_with_its_estimated_error():
    report = ad.check_grad(lambda x, y: ad.sin(x) * y + ad.exp(x / y), 1.0, 2.0, argnums=(0, 1))
    text = str(report)
    assert "finite diff ± est. error" in text
    # by hand: d/dx = y cos x + exp(x/y)/y, d/dy = sin x - x exp(x/y)/y^2
    hand = [2 * math.cos(1.0) + math.exp(0.5) / 2, math.sin(1.0) - math.exp(0.5) / 4]
    for label, want, fd, err in zip("xy", hand, report.finite_diff, report.fd_error):
        row = next(line for line in text.splitlines() if line.startswith(label + " "))
        value, _, shown = row.split()[-1].partition("±")
        assert float(value) == pytest.approx(fd, rel=1e-14)
        assert float(shown) == pytest.approx(err, rel=0.05)
        assert 0 < err < 1e-8 and abs(fd - want) <= R.FD_SAFETY * err
    assert "or 4 x their estimated error" in text and text.splitlines()[-1] == "OK"
    assert any(line.startswith("time: ") and "finite diff" in line for line in text.splitlines())


@pytest.fixture
def wrong_oscillator():
    """sin(40 x) with a derivative rule 0.1% too large (40.04 cos(40 x)), no SymPy form."""
    n = len(OPS)
    op = primitive(
        lambda x: math.sin(40.0 * x),
        vjp=lambda g, out, x: g * 40.04 * ad.cos(40.0 * x),
        code="math.sin(40.0 * {0})",
        name="cgs_osc",
    )
    yield op
    for name in list(OPS)[n:]:
        del OPS[name]


def test_a_rule_wrong_by_a_tenth_of_a_percent_on_an_oscillation_is_caught(wrong_oscillator):
    with pytest.raises(ad.GradientMismatch) as info:
        ad.check_grad(lambda x: wrong_oscillator(x) * x, 0.7)
    first = str(info.value).splitlines()[0]
    assert "finite diff=" in first and "(estimated error" in first
    fd = float(first.split("finite diff=")[1].split()[0])
    # by hand: d/dx [sin(40 x) x] = 40 cos(40 x) x + sin(40 x)
    want = 40 * math.cos(28.0) * 0.7 + math.sin(28.0)
    assert fd == pytest.approx(want, rel=1e-8)
    assert "sympy skipped: cgs_osc has no SymPy form" in str(info.value)


def test_too_uncertain_a_difference_is_not_compared_and_noted():
    # sin(x^3) at x = 1234.5 turns 1e-6 of a period per 1e-15 of x: no step resolves it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = ad.check_grad(lambda x: ad.sin(x**3), 1234.5)
    assert report.ok and report.fd_compared == []
    assert any("could not tell a wrong derivative from a right one" in n for n in report.notes)
    # by hand: 3 x^2 cos(x^3); SymPy (30 digits) agrees with the compiled adjoint
    assert report.sympy[0] == pytest.approx(3 * 1234.5**2 * math.cos(1234.5**3), rel=1e-6)


def test_fd_verdict_holds_to_the_larger_of_the_tolerance_and_the_error():
    t = {"fd_rtol": 1e-5, "fd_atol": 1e-6}
    assert R._fd_verdict(1.0 + 5e-6, 1e-12, 1.0, 0.5, t) is True  # within the tolerance
    assert R._fd_verdict(1.0 + 5e-5, 1e-12, 1.0, 0.5, t) is False  # outside, error tiny
    assert R._fd_verdict(1.0 + 5e-5, 2e-5, 1.0, 0.5, t) is True  # within 4 x the error
    assert R._fd_verdict(1.0 + 5e-5, 1.0, 1.0, 0.5, t).startswith("1.00005 with an estimated")
    # a tiny difference (an alias at large steps) with a small absolute error: too uncertain
    # at its own size, though small next to the exact 3100
    assert isinstance(R._fd_verdict(-0.0064, 1e-3, 3100.0, 0.5, t), str)
    assert R._fd_verdict(math.nan, math.nan, 1.0, 0.5, t) is None


def perm01(x):
    """SciPy's PermFunction01 (beta = 0.5), written out:
    f = sum_k (sum_j (j^k + 0.5) ((x_j / j)^k - 1))^2."""
    n = len(x)
    j = np.arange(1, n + 1, dtype=float)[None, :]
    k = np.arange(1, n + 1, dtype=float)[:, None]
    s = (j**k + 0.5) * ((x / j) ** k - 1.0)
    return np.sum(np.sum(s, axis=1) ** 2)


def perm01_grad(x: np.ndarray) -> np.ndarray:
    """By hand: df/dx_m = sum_k 2 S_k (m^k + 0.5) k x_m^(k-1) / m^k."""
    n = len(x)
    j = np.arange(1, n + 1, dtype=float)[None, :]
    k = np.arange(1, n + 1, dtype=float)[:, None]
    S = np.sum((j**k + 0.5) * ((x / j) ** k - 1.0), axis=1)
    return np.sum(2 * S[:, None] * (j**k + 0.5) * k * x ** (k - 1) / j**k, axis=0)


def test_perm_function_01_skips_sympy_above_its_size_and_says_so():
    x = np.random.default_rng(3).uniform(-10.0, 10.0, 10)
    report = ad.check_grad(perm01, x)
    assert report.ok and report.sympy is None
    assert any(
        n.startswith("sympy skipped: the tape has") and "SYMPY_MAX_OPS=300" in n
        for n in report.notes
    )
    np.testing.assert_allclose(report.compiled, perm01_grad(x), rtol=1e-9)
    assert report.fd_compared == list(range(10))
    assert set(report.seconds) >= {"compiled", "adjoint tape", "interpreter", "finite diff"}
    assert "time: " in str(report) and "max_seconds=60" in str(report)


def test_the_time_bound_leaves_out_what_is_left_and_says_so():
    x = np.linspace(0.1, 1.0, 8)
    report = ad.check_grad(lambda x: np.sum(np.sin(x) * x), x, max_seconds=1e-9)
    assert report.ok and report.sympy is None and np.isnan(report.finite_diff).all()
    assert (
        "sympy skipped: it reached the bound max_seconds=1e-09 on the reference methods "
        "(pass a larger max_seconds, or None, to wait for it)"
    ) in report.notes
    assert any(
        n.startswith("finite diff not compared for x[0] ... x[7] (8 inputs): the bound")
        for n in report.notes
    )
    # the adjoint methods are still compared: by hand, d/dx_i = cos(x_i) x_i + sin(x_i)
    np.testing.assert_allclose(report.interpreter, np.cos(x) * x + np.sin(x), rtol=1e-14)
    # no bound: everything is compared
    report = ad.check_grad(lambda x: np.sum(np.sin(x) * x), x, max_seconds=None)
    assert report.sympy is not None and report.fd_compared == list(range(8))
    assert "bounded by" not in str(report)


@pytest.mark.parametrize("bad", [0, -1.0, "soon", True, math.nan])
def test_max_seconds_must_be_positive_or_none(bad):
    with pytest.raises(ValueError, match="max_seconds must be a number of seconds > 0, or None"):
        ad.check_grad(lambda x: x * x, 1.0, max_seconds=bad)


def test_compiled_tape_interpreter_gives_the_same_differences(monkeypatch):
    x = np.random.default_rng(4).uniform(-5.0, 5.0, 6)
    tape = ad.trace(perm01, x)
    t = {"rtol": 1e-7, "atol": 1e-9, "fd_rtol": 1e-5, "fd_atol": 1e-6}
    labels = [f"x[{i}]" for i in range(6)]
    python = F.finite_differences(tape, x, list(range(6)), labels, [], t)
    monkeypatch.setattr(F, "COMPILED_EVALUATION_SLOTS", 0)
    assert F.Evaluator(tape, 1).compiled is not None
    compiled = F.finite_differences(tape, x, list(range(6)), labels, [], t)
    np.testing.assert_allclose(compiled.value, python.value, rtol=1e-12)
    g = perm01_grad(x)
    assert np.all(np.abs(compiled.value[0] - g) <= R.FD_SAFETY * compiled.error[0] + 1e-5 * abs(g))


def test_a_step_across_a_kink_is_not_used_but_smaller_ones_are():
    # |x - 1| at x = 1.001: steps of 2^-8 cross the kink, 2^-12 and smaller do not
    report = ad.check_grad(lambda x: ad.abs(x - 1.0) * 3.0, 1.001)
    assert report.ok and report.finite_diff[0] == pytest.approx(3.0, rel=1e-9)
    assert report.fd_step[0] < 1e-3
    # on the kink no step serves, and the report says why
    report = ad.check_grad(lambda x: ad.abs(x - 1.0) * 3.0, 1.0)
    assert np.isnan(report.finite_diff[0])
    assert any("crosses a kink of abs" in n for n in report.notes), report.notes
