"""The compiler: trace, reverse mode, generated code, grad / value_and_grad / jit."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adcompile as ad
from adcompile.diff import interpret
from adcompile.diff.reverse import grad_tape

jit = importlib.import_module("adcompile.backend.jit")  # ad.jit is the transform
records = importlib.import_module("adcompile.backend.records")


def central_diff(f, args, argnum, h=1e-6):
    """Central finite differences of scalar f with respect to args[argnum]."""
    x = np.array(args[argnum], dtype=float)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        ap, am = list(args), list(args)
        ap[argnum] = xp if x.shape else float(xp)
        am[argnum] = xm if x.shape else float(xm)
        g[idx] = (f(*ap) - f(*am)) / (2 * h)
    return g if x.shape else float(g)


def rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def rosen_grad(x):
    """Hand-derived gradient of the Rosenbrock function."""
    g = np.zeros_like(x)
    d = x[1:] - x[:-1] ** 2
    g[:-1] += -400 * x[:-1] * d - 2 * (1 - x[:-1])
    g[1:] += 200 * d
    return g


# ---------------------------------------------------------------- values and gradients


def test_scalar_function_against_hand_derivative():
    def f(x, y):
        return ad.sin(x * y) + x**2 / y

    vg = ad.value_and_grad(f, argnums=(0, 1))
    (val, (gx, gy)) = vg(1.3, 0.7)
    assert val == pytest.approx(math.sin(0.91) + 1.69 / 0.7, rel=1e-14)
    assert gx == pytest.approx(math.cos(0.91) * 0.7 + 2 * 1.3 / 0.7, rel=1e-14)
    assert gy == pytest.approx(math.cos(0.91) * 1.3 - 1.69 / 0.49, rel=1e-14)
    assert isinstance(gx, float) and isinstance(val, float)


def test_grad_default_argnum_and_int_arguments():
    g = ad.grad(lambda x, y: x * x * y)
    assert g(3, 2) == pytest.approx(12.0)  # ints become floats
    assert isinstance(g(3, 2), float)
    assert ad.grad(lambda x, y: x * x * y, argnums=1)(3.0, 2.0) == pytest.approx(9.0)
    assert ad.grad(lambda x, y: x * x * y, argnums=-1)(3.0, 2.0) == pytest.approx(9.0)


@pytest.mark.parametrize("n", [2, 10, 50])
def test_rosenbrock_vector(n):
    x = 0.9 * np.cos(np.arange(n, dtype=float))
    val, g = ad.value_and_grad(rosen)(x)
    ref = np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    assert val == pytest.approx(ref, rel=1e-12)
    assert g.shape == x.shape
    np.testing.assert_allclose(g, rosen_grad(x), rtol=1e-12, atol=1e-12)


def test_numpy_style_function_on_object_arrays():
    def f(x):
        return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    x = 0.9 * np.cos(np.arange(12, dtype=float))
    np.testing.assert_allclose(ad.grad(f)(x), rosen_grad(x), rtol=1e-12)


def test_two_dimensional_argument_and_ufuncs():
    def f(w, v):
        return np.sum(np.tanh(w @ v)) + np.dot(v, v)

    rng = np.random.default_rng(0)
    w, v = rng.normal(size=(3, 4)), rng.normal(size=4)
    gw, gv = ad.grad(f, argnums=(0, 1))(w, v)
    assert gw.shape == (3, 4) and gv.shape == (4,)
    # hand-derived: d/dW sum tanh(Wv) = (1 - tanh^2(Wv)) v^T
    s = 1 - np.tanh(w @ v) ** 2
    np.testing.assert_allclose(gw, np.outer(s, v), rtol=1e-12)
    np.testing.assert_allclose(gv, w.T @ s + 2 * v, rtol=1e-12)


@pytest.mark.parametrize(
    "f, args",
    [
        (lambda x: ad.exp(ad.sin(x)) * ad.log1p(x * x), (0.7,)),
        (lambda x, y: ad.arctan(x / y) + ad.sqrt(x * y) - ad.cosh(y) / ad.sigmoid(x), (0.6, 1.4)),
        (lambda x: 2**x + x**x - ad.softplus(-x) * ad.expm1(x), (1.1,)),
        (lambda x: np.sum(np.sin(x) * np.cos(x[::-1])) / np.sum(x**2), (np.linspace(0.1, 2, 7),)),
    ],
)
def test_gradients_against_finite_differences(f, args):
    for k in range(len(args)):
        g = ad.grad(f, argnums=k)(*args)
        ref = central_diff(lambda *a: ad.jit(f)(*a), args, k)
        np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-8)


def test_jit_returns_the_value():
    f = ad.jit(lambda x, y: x * ad.exp(y))
    assert f(2.0, 1.0) == pytest.approx(2 * math.e, rel=1e-15)


def test_grad_of_grad_against_hand_second_derivatives():
    f = lambda x: x**3 * ad.sin(x)
    d2 = ad.grad(ad.grad(f))
    for x in (0.3, 1.7, -2.2):
        ref = 6 * x * math.sin(x) + 6 * x**2 * math.cos(x) - x**3 * math.sin(x)
        assert d2(x) == pytest.approx(ref, rel=1e-12)
    # mixed partial of x*y*y: d/dy (d/dx) = 2y
    dxy = ad.grad(lambda x, y: ad.grad(lambda a, b: a * b * b)(x, y), argnums=1)
    assert dxy(1.5, 0.4) == pytest.approx(0.8, rel=1e-14)


def test_transform_on_values_records_for_backward():
    x = ad.Value(0.8)
    g = ad.grad(lambda t: ad.sin(t) * t)(x)  # a Value, so it can be differentiated again
    g.backward()
    assert g.data == pytest.approx(math.cos(0.8) * 0.8 + math.sin(0.8))
    assert x.grad == pytest.approx(-math.sin(0.8) * 0.8 + 2 * math.cos(0.8))


# ---------------------------------------------------------------- caching and guards


def test_cache_hit_does_not_call_f_again():
    calls = []

    def f(x):
        calls.append(1)
        return x * x

    g = ad.grad(f)
    assert g(2.0) == 4.0
    assert g(5.0) == 10.0
    assert len(calls) == 1
    g(np.ones(3).sum())  # a NumPy float is a number too
    assert len(calls) == 1
    g(np.arange(3.0)[0:1].reshape(()))  # a 0-d array is another structure: traced again
    assert len(calls) == 2


def test_new_shape_traces_again():
    calls = []

    def f(x):
        calls.append(len(x))
        return np.sum(x * x)

    g = ad.grad(f)
    np.testing.assert_allclose(g(np.arange(3.0)), 2 * np.arange(3.0))
    np.testing.assert_allclose(g(np.arange(5.0)), 2 * np.arange(5.0))
    np.testing.assert_allclose(g(np.ones(3)), 2 * np.ones(3))
    assert calls == [3, 5]


def test_branch_change_retraces():
    def f(x):
        if x > 0:
            return x * x
        return -3 * x

    g = ad.grad(f)
    assert g(1.0) == 2.0
    assert g(-1.0) == -3.0  # never the other branch's answer
    assert g(4.0) == 8.0
    assert g(-7.0) == -3.0
    assert g.traces == 2  # both paths stay compiled


def test_while_loop_with_input_dependent_count():
    def newton_sqrt(a):
        x = a
        while abs(x * x - a) > 1e-12:
            x = 0.5 * (x + a / x)
        return x

    vg = ad.value_and_grad(newton_sqrt)
    for a in (4.0, 9.0, 2.0, 100.0, 4.0):
        v, g = vg(a)
        assert v == pytest.approx(math.sqrt(a), rel=1e-12)
        assert g == pytest.approx(0.5 / math.sqrt(a), rel=1e-9)


def test_max_and_sorted_are_guarded():
    f = ad.grad(lambda x, y: max(x, y) * 2 + sorted([x, y])[0])
    assert f(3.0, 1.0) == 2.0
    assert f(1.0, 3.0) == 1.0


def test_retrace_warning_when_keeps_retracing(monkeypatch):
    monkeypatch.setattr(ad.api.specialisation, "MAX_SPECIALISATIONS", 2)
    g = ad.grad(lambda x: np.sum(x * x))
    with pytest.warns(ad.RetraceWarning):
        for n in range(1, 5):
            g(np.ones(n))


# ---------------------------------------------------------------- generated code


def test_generated_source_is_readable_and_runs():
    def f(x, y):
        return ad.sin(x * y) + x / y

    src = ad.show_code(f, 1.0, 2.0)
    assert "def f_value_and_grad(x, y, out):" in src
    assert "v2 = v0 * v1" in src  # primal slots named after the tape
    assert "math.sin(v2)" in src
    assert "# v3 = sin(v2)" in src  # a comment names the primal statement of each block
    assert "b" in src and "import numpy" not in src
    ns: dict = {}
    exec(compile(src, "<generated>", "exec"), ns)
    out = np.zeros(3)
    assert ns["f_value_and_grad"](1.0, 2.0, out) is True
    assert out[0] == pytest.approx(math.sin(2.0) + 0.5)
    assert out[1] == pytest.approx(2 * math.cos(2.0) + 0.5)
    # the source lives in a real file
    g = ad.value_and_grad(f)
    g(1.0, 2.0)
    assert g.source == ad.show_code(g, 1.0, 2.0)
    assert any(p.read_text() == g.source for p in jit.cache_dir().glob("f_value_and_grad_*.py"))


def test_float_literals_round_trip():
    c = 0.1 + 0.2  # (a float the function closes over is an input, not a literal)
    src = ad.show_code(lambda x: x * 0.30000000000000004, 1.0)
    assert repr(c) in src


def test_dead_code_is_removed():
    def f(x):
        unused = ad.exp(x) * 3  # noqa: F841
        return x * 2

    assert "exp" not in ad.show_code(f, 1.0)


def test_trace_prints_and_runs_and_knows_its_length():
    t = ad.trace(lambda x, y: ad.sin(x) * y, 0.5, 2.0)
    text = str(t)
    assert "v2 = sin(v0)" in text and "out v3" in text
    assert len(t) == 4
    assert t.evaluate(0.5, 2.0)[0] == pytest.approx(math.sin(0.5) * 2)


def test_interpreter_path_matches_straight_line(monkeypatch):
    x = 0.9 * np.cos(np.arange(30, dtype=float))

    def f(x):
        s = rosen(x)
        return s / 2 if s > 1 else s

    a = ad.value_and_grad(f)(x)
    monkeypatch.setattr(records, "STRAIGHT_LINE_LIMIT", 10)
    vg = ad.value_and_grad(f)
    b = vg(x)
    assert vg._last.compiled.facts.kind == "interpreter"
    assert "interpreter" in vg.source
    assert a[0] == pytest.approx(b[0], rel=1e-13)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-13)
    small = np.full(30, 1.0)  # rosen = 0 there: the other branch, so a retrace
    assert vg(small)[0] == 0.0 and vg.traces == 2


# ---------------------------------------------------------------- random expressions


_UNARY = ["sin", "cos", "tanh", "exp", "sigmoid", "arctan", "softplus", "sqrt", "log"]


@st.composite
def expressions(draw, depth=4):
    """A random program over x, y as a list of (op, operand indices), then its function."""
    n_nodes = draw(st.integers(1, 12))
    prog = []
    for k in range(n_nodes):
        avail = 2 + k
        if draw(st.booleans()):
            prog.append(
                (
                    draw(st.sampled_from(["add", "sub", "mul"])),
                    draw(st.integers(0, avail - 1)),
                    draw(st.integers(0, avail - 1)),
                )
            )
        else:
            prog.append((draw(st.sampled_from(_UNARY)), draw(st.integers(0, avail - 1)), None))
    return prog


def _run(prog, x, y):
    vals = [x, y]
    for op, a, b in prog:
        if op in ("sqrt", "log"):
            vals.append(getattr(ad, op)(1.5 + ad.tanh(vals[a])))  # keep inside the domain
        elif b is None:
            vals.append(getattr(ad, op)(vals[a]))
        else:
            vals.append(getattr(ad, op)(vals[a], vals[b]))
    return vals[-1] + 0.0 * vals[0]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(), st.floats(-2, 2), st.floats(-2, 2))
def test_compiled_matches_interpreter_on_random_programs(prog, x, y):
    f = lambda x, y: _run(prog, x, y)
    tape = ad.trace(f, x, y)
    val, grads = interpret.value_and_grad(tape, [x, y])
    cval, cgrads = ad.value_and_grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(cval, val, rtol=1e-12, atol=1e-300)  # nan == nan here
    np.testing.assert_allclose(cgrads, grads, rtol=1e-12, atol=1e-300)
    # and the adjoint tape runs in the interpreter too
    out = interpret.evaluate(grad_tape(tape), [x, y])
    np.testing.assert_allclose(out, [val, *grads], rtol=1e-12, atol=1e-300)


# ---------------------------------------------------------------- with SciPy


def test_scipy_bfgs_on_rosenbrock_converges():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    x0 = 0.9 * np.cos(np.arange(10, dtype=float))
    res = scipy_optimize.minimize(
        ad.value_and_grad(rosen), x0, jac=True, method="BFGS", options={"gtol": 1e-9}
    )
    assert res.success
    np.testing.assert_allclose(res.x, np.ones(10), atol=1e-5)


# ---------------------------------------------------------------- errors


def test_non_scalar_return_is_a_clear_error():
    with pytest.raises(TypeError, match=r"must return a scalar.*shape \(3,\).*\.sum\(\)"):
        ad.grad(lambda x: x * 2)(np.ones(3))
    with pytest.raises(TypeError, match=r"must return a scalar.*'str'"):
        ad.grad(lambda x: "no")(1.0)


def test_string_argument_is_a_clear_error():
    with pytest.raises(TypeError, match=r"argument 0 of .*unsupported type 'str'"):
        ad.grad(lambda x: x)("1.0")
    with pytest.raises(TypeError, match="array of"):
        ad.grad(lambda x: x[0])(np.array(["a"]))


@pytest.mark.parametrize(
    "freeze, what",
    [(float, "float"), (int, "int"), (math.sin, "math"), (round, "round")],
)
def test_freezing_a_traced_value_is_a_clear_error(freeze, what):
    with pytest.raises(TypeError, match=f"{what}.*traced Value.*ad.sin"):
        ad.grad(lambda x: x * freeze(x))(1.5)
    assert freeze(ad.Value(1.5)) == freeze(1.5)  # eager Values still convert


def test_bad_argnums_is_a_clear_error():
    with pytest.raises(ValueError, match="argnums=3"):
        ad.grad(lambda x: x, argnums=3)(1.0)
