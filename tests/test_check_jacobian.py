"""``ad.check_jacobian``: every derivative transform checked like ``check_grad``; and
the forward (tangent) rules of user-defined primitives checked by both."""

from __future__ import annotations

import math

import numpy as np
import pytest

import adcompile as ad
from adcompile.api.extend import primitive
from adcompile.ir.ops import OPS


@pytest.fixture(scope="module")
def prims():
    """Primitives with right and wrong rules, removed from the op table afterwards."""
    n = len(OPS)
    cos = ad.cos

    def sine(name, vjp, jvp=None):
        return primitive(math.sin, vjp=vjp, jvp=jvp, code="math.sin({0})", sympy="sin", name=name)

    p = {
        "badvjp": sine("cj_badvjp", lambda g, out, x: g * 3.0 * cos(x)),  # wrong: 3 cos x
        "badjvp": sine(  # vjp right, its own forward rule wrong (2 cos x)
            "cj_badjvp", lambda g, out, x: g * cos(x), lambda t, out, x: t * 2.0 * cos(x)
        ),
        "goodjvp": sine("cj_goodjvp", lambda g, out, x: g * cos(x), lambda t, out, x: t * cos(x)),
    }
    yield p
    for name in list(OPS)[n:]:
        del OPS[name]


def two_outputs(x):
    return [x[0] * x[1], ad.sin(x[0])]


def test_passes_on_a_hand_derived_jacobian():
    x = np.array([0.3, 0.7])
    r = ad.check_jacobian(two_outputs, x)
    assert r.ok and r.status() == "OK"
    # J = [[x1, x0], [cos x0, 0]], derived by hand
    np.testing.assert_allclose(r.jacobian, [[0.7, 0.3], [math.cos(0.3), 0.0]], rtol=1e-14)
    assert r.hessian is None  # not a scalar function
    jvp = r.tables["jvp"].columns["jvp"]
    v = r.direction
    np.testing.assert_allclose(jvp, [0.7 * v[0] + 0.3 * v[1], math.cos(0.3) * v[0]], rtol=1e-12)
    text = str(r)
    assert "d two_outputs[1] / d x[0]" in text and text.endswith("OK")
    for method in ("reverse", "forward", "sympy", "finite diff", "J @ v"):
        assert method in text


def test_hessian_and_hvp_of_a_scalar_function():
    def f(x, y):
        return ad.sin(x[0]) * x[1] ** 2 * y

    x, y = np.array([0.3, 0.7]), 1.5
    r = ad.check_jacobian(f, x, y)
    s, c = math.sin(0.3), math.cos(0.3)
    hand = [[-s * 0.49 * y, 2 * c * 0.7 * y], [2 * c * 0.7 * y, 2 * s * y]]
    np.testing.assert_allclose(r.hessian, hand, rtol=1e-13)
    hv = r.tables["hvp"].columns["hvp"]
    np.testing.assert_allclose(hv, np.array(hand) @ r.direction, rtol=1e-12)
    assert "hvp: the Hessian times v" in str(r)


def test_tuple_argnums_and_tuple_outputs():
    def f(x, y):
        return (x * y, ad.exp(x) * y * y)

    r = ad.check_jacobian(f, 0.4, 1.3, argnums=(0, 1))
    e = math.exp(0.4)
    np.testing.assert_allclose(r.jacobian, [[1.3, 0.4], [e * 1.69, 2 * e * 1.3]], rtol=1e-14)
    assert "d f[1] / d y" in str(r)


def test_a_wrong_vjp_is_caught(prims):
    def f(x):
        return [prims["badvjp"](x[0]) * x[1], x[0] + x[1]]

    with pytest.raises(ad.GradientMismatch) as e:
        ad.check_jacobian(f, np.array([0.5, 2.0]))
    msg = str(e.value)
    assert msg.startswith("jacobian check failed for jacobian d f[0] / d x[0]")
    # every method's number: reverse and forward use the (wrong) rule, 3 cos(0.5) * 2
    assert f"reverse={3 * math.cos(0.5) * 2.0!r}" in msg
    assert "sympy=1.755165" in msg and "MISMATCH" in msg  # 2 cos(0.5) = 1.7551651...


def test_a_wrong_jvp_is_caught_by_check_jacobian(prims):
    def f(x):
        return prims["badjvp"](x) * x

    with pytest.raises(ad.GradientMismatch) as e:
        ad.check_jacobian(f, 0.5)
    msg = str(e.value)
    right = math.cos(0.5) * 0.5 + math.sin(0.5)
    assert "d f / d x" in msg
    assert f"reverse={right!r}" in msg
    assert f"forward={2 * math.cos(0.5) * 0.5 + math.sin(0.5)!r}" in msg


def test_a_wrong_jvp_is_caught_by_check_grad(prims):
    with pytest.raises(ad.GradientMismatch) as e:
        ad.check_grad(lambda x: prims["badjvp"](x) + x * x, 0.5)
    msg = str(e.value)
    assert "forward mode=" in msg
    assert f"compiled={math.cos(0.5) + 1.0!r}" in msg


def test_a_right_jvp_passes_both_checks(prims):
    def f(x):
        return prims["goodjvp"](x) * x

    report = ad.check_grad(f, 0.5)
    assert report.forward_mode is not None  # the column is there, and agrees
    np.testing.assert_allclose(report.forward_mode, [math.cos(0.5) * 0.5 + math.sin(0.5)])
    assert "forward mode" in str(report)
    assert ad.check_jacobian(f, 0.5).ok


def test_no_forward_column_without_an_own_jvp():
    assert ad.check_grad(lambda x: ad.sin(x) * x, 0.5).forward_mode is None


def test_a_jvp_of_the_wrong_arity_is_refused():
    with pytest.raises(TypeError, match="jvp must be a tuple of 2 functions"):
        primitive(
            math.atan2,
            vjp=(lambda g, out, a, b: g, lambda g, out, a, b: g),
            jvp=lambda t, out, a, b: t,
            code="math.atan2({0}, {1})",
            name="cj_arity",
        )


def test_singular_point_warns_and_compares_only_the_modes():
    with pytest.warns(RuntimeWarning, match="only the compiled modes"):
        r = ad.check_jacobian(lambda x: [ad.sqrt(x[0]), x[1]], np.array([0.0, 1.0]))
    assert not r.ok and r.status() == "SINGULAR"
    assert "singular:" in str(r)


def test_on_a_kink_sympy_is_shown_not_compared():
    r = ad.check_jacobian(lambda x: [ad.relu(x[0]), x[0] * x[1]], np.array([0.0, 2.0]))
    assert "on a kink of relu" in str(r)
    assert r.tables["jacobian"].columns["sympy"] is not None


def test_bad_tolerance_and_hessian_of_a_vector():
    with pytest.raises(ValueError, match="rtol must be a number >= 0"):
        ad.check_jacobian(two_outputs, np.ones(2), rtol=-1)
    with pytest.raises(ValueError, match="must return a scalar"):
        ad.check_jacobian(two_outputs, np.ones(2), hessian=True)


@pytest.mark.parametrize("where", ["ISSUE_POINT", "ALIASING_POINT"])
def test_oscillating_schaffer04_jacobian_and_hessian_have_no_false_mismatch(where):
    """Issue 28, item 3: the finite differences of f and of its gradient are Richardson
    extrapolations with an estimated error, judged against it."""
    import test_check_grad_steps as steps
    from test_check_grad_steps import schaffer04, schaffer04_grad

    x = getattr(steps, where)
    report = ad.check_jacobian(schaffer04, x)
    assert report.ok
    np.testing.assert_allclose(report.jacobian[0], schaffer04_grad(x), rtol=1e-10)
    for name in ("jacobian", "hessian"):
        table = report.tables[name]
        fd, err = table.columns["finite diff"], table.fd_error
        sym = table.columns["sympy"]
        assert np.all(np.isfinite(err)) and np.all(err < 1e-7 * np.abs(sym))
        assert np.all(np.abs(fd - sym) <= np.maximum(1e-6 + 1e-5 * np.abs(sym), 4 * err))
    text = str(report)
    assert "finite diff ± est. error" in text
    assert "hessian" in text.split("time: ")[1] and "(compiling included)" in text
