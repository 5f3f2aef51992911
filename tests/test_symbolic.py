"""The SymPy bridge: tape -> SymPy, SymPy -> tape, and check_grad on every op."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adcompile as ad
from adcompile.diff import interpret
from adcompile.ir import BUILTIN
from adcompile.ir.ops import OPS, Op
from adcompile.ir.tape import INPUT, Node, Tape
from adcompile.symbolic.bridge import from_sympy, tape_to_sympy
from adcompile.symbolic.check import GradientMismatch, check_grad
from adcompile.symbolic.transforms import sympy_value_and_grad, to_sympy

x, y, z = sp.symbols("x y z")


# ---------------------------------------------------------------- tape -> SymPy


def test_symbols_named_after_parameters():
    expr = to_sympy(lambda x, y: ad.sin(x) * y + ad.exp(x / y), 1.0, 2.0)
    assert expr == sp.sin(x) * y + sp.exp(x / y)
    assert {s.name for s in expr.free_symbols} == {"x", "y"}


def test_array_symbols_are_row_major():
    def f(a, b):
        return 10 * a[1, 0] + a[0, 2] + b[1]

    expr = to_sympy(f, np.zeros((2, 3)), np.zeros(2))
    a_2, a_3, b_1 = sp.symbols("a_2 a_3 b_1")
    assert expr == 10 * a_3 + a_2 + b_1


def test_tape_to_sympy_method_and_one_expression_per_output():
    tape = ad.trace(lambda x: x * x + 1.0, 3.0)
    assert tape.to_sympy() == [x**2 + 1]


def test_op_without_sympy_form_is_an_undefined_function():
    mystery = Op("mystery", 1, math.sin, "math.sin({0})", (None,))  # not registered
    tape = Tape([Node(INPUT), Node(mystery, (0,))], [0], [1], names=["x"])
    assert tape_to_sympy(tape)[0] == sp.Function("mystery")(x)


def test_shared_subexpressions_stay_shared():
    def f(x):
        for _ in range(60):  # 2**60 leaves as a tree
            x = x * x + x
        return x

    tape = ad.trace(f, 0.5)
    t0 = time.perf_counter()
    expr = tape_to_sympy(tape)[0]
    back = from_sympy(expr, [x])
    assert time.perf_counter() - t0 < 5.0
    # SymPy flattens the nested sums (so O(n^2) terms), but nothing is exponential
    assert back.n_ops < 60 * 60
    assert back.evaluate(1e-3) == pytest.approx(tape.evaluate(1e-3), rel=1e-12)


def deep(x):
    """2,000 ops in a chain, each result used twice."""
    for _ in range(1000):
        x = ad.sin(x) * x + 0.5
    return x


def test_deep_tape_converts_fast_and_round_trips():
    tape = ad.trace(deep, 0.3)
    t0 = time.perf_counter()
    expr = tape_to_sympy(tape)[0]
    back = from_sympy(expr, [x])
    assert time.perf_counter() - t0 < 10.0
    assert back.evaluate(0.3) == pytest.approx(tape.evaluate(0.3), rel=1e-12)
    v0, g0 = interpret.value_and_grad(tape, [0.7])
    v1, g1 = interpret.value_and_grad(back, [0.7])
    assert v1 == pytest.approx(v0, rel=1e-12) and g1 == pytest.approx(g0, rel=1e-9, abs=1e-300)


# ---------------------------------------------------------------- round trip


def corpus_a(x, y):
    return ad.sin(x) * y + ad.exp(x / y) - ad.log(y) ** 2 + ad.sqrt(x * x + 1.0)


def corpus_b(x, y):
    return ad.tanh(x - y) * ad.sigmoid(x) + ad.softplus(y) / (1.0 + ad.cosh(x)) + ad.sinh(y)


def corpus_c(x, y):
    return ad.arctan(x) * ad.arcsin(y / 3) - ad.arccos(y / 4) + x**y + 2.0**x + ad.log1p(y)


def corpus_d(x, y):
    kinks = ad.relu(x - 3) + abs(y) + ad.maximum(x, y) - ad.minimum(x, 2 * y)
    return ad.expm1(x) + ad.tan(y / 2) + kinks


def corpus_e(a):
    return (a * a).sum() + a[0, 1] * a[1, 0] - 1.0 / a[1, 1]


@pytest.mark.parametrize("f", [corpus_a, corpus_b, corpus_c, corpus_d])
def test_round_trip_tape_sympy_tape(f):
    rng = np.random.default_rng(1)
    tape = ad.trace(f, 0.7, 1.3)
    back = from_sympy(tape_to_sympy(tape)[0], [x, y])
    for _ in range(5):
        pt = list(rng.uniform(0.2, 2.0, 2))
        assert back.evaluate(*pt) == pytest.approx(tape.evaluate(*pt), rel=1e-12)
        v0, g0 = interpret.value_and_grad(tape, pt)
        v1, g1 = interpret.value_and_grad(back, pt)
        assert g1 == pytest.approx(g0, rel=1e-9, abs=1e-12)


def test_round_trip_arrays():
    a0 = np.array([[0.5, 1.5], [-0.7, 2.0]])
    tape = ad.trace(corpus_e, a0)
    syms = sp.symbols("a_0:4")
    back = from_sympy(tape.to_sympy()[0], syms)
    pt = a0.ravel().tolist()
    assert interpret.value_and_grad(back, pt)[1] == pytest.approx(
        interpret.value_and_grad(tape, pt)[1], rel=1e-12
    )


# ---------------------------------------------------------------- SymPy -> tape


@pytest.mark.parametrize(
    "expr",
    [
        x - 2 * y,
        -x / 3 + sp.Rational(5, 7) * y,
        1 / sp.sqrt(x) + y / x**2 - x ** sp.Rational(1, 3),
        sp.Max(x, y, z) - sp.Min(x, z),
        sp.Heaviside(x - 1) + sp.Heaviside(y - 1, 0) + sp.Heaviside(z, 1),
        sp.pi * sp.exp(x) + sp.E * y + sp.erf(1) * z + sp.sqrt(2),
        2**x + x**y + sp.Abs(z) + sp.sign(z),
        sp.atan(x) + sp.asin(y / 4) + sp.acos(z / 3) + sp.tan(x) + sp.log(y, 2),
        sp.cosh(x) - sp.sinh(y) * sp.tanh(z) + x**2.5,
    ],
)
def test_from_sympy_values(expr):
    tape = from_sympy(expr, [x, y, z])
    f = sp.lambdify([x, y, z], expr, "math")
    for pt in [(0.7, 1.3, -0.4), (1.6, 0.4, 0.0), (1.0, 1.0, 1.0)]:
        assert tape.evaluate(*pt)[0] == pytest.approx(f(*pt), rel=1e-12)


def test_from_sympy_subtraction_and_division_are_single_ops():
    tape = from_sympy(x - y / z, [x, y, z])
    assert [n.op.name for n in tape.nodes if isinstance(n.op, Op)] == ["div", "sub"]


def test_from_sympy_several_outputs_and_undefined_op_name():
    tape = from_sympy([sp.Function("tanh")(x), x * y], [x, y])  # undefined f named as an op
    assert tape.evaluate(0.5, 2.0) == pytest.approx([math.tanh(0.5), 1.0])


def test_unsupported_function_is_named():
    with pytest.raises(TypeError, match="unsupported SymPy function 'gamma'.*primitive"):
        from_sympy(sp.gamma(x) + 1, [x])
    with pytest.raises(TypeError, match="'Piecewise'"):
        from_sympy(sp.Piecewise((x, x > 0), (0, True)), [x])
    with pytest.raises(TypeError, match="not a real number"):
        from_sympy(sp.I * x, [x])
    with pytest.raises(ValueError, match="symbol y"):
        from_sympy(x + y, [x])
    with pytest.raises(TypeError, match="Symbols"):
        from_sympy(x, ["x"])


# Real symbols, so that SymPy differentiates Abs and Max as real functions.
rx, ry, rz = sp.symbols("x y z", real=True)


def _leaf():
    return st.sampled_from([rx, ry, rz, sp.Integer(2), sp.Rational(1, 3), sp.Float(0.75)])


def _apply_unary(f, a):
    return f(1 + a**2) if f in (sp.sqrt, sp.log) else f(a)


def _extend(children):
    unary = [sp.exp, sp.sin, sp.cos, sp.atan, sp.tanh, sp.sinh, sp.Abs, sp.sqrt, sp.log]
    return st.one_of(
        st.builds(lambda a, b: a + b, children, children),
        st.builds(lambda a, b: a - b, children, children),
        st.builds(lambda a, b: a * b, children, children),
        st.builds(lambda a, b: a / (1 + b**2), children, children),
        st.builds(lambda a, k: a**k, children, st.sampled_from([2, 3, -1, sp.Rational(1, 2)])),
        st.builds(_apply_unary, st.sampled_from(unary), children),
        st.builds(sp.Max, children, children),
    )


EXPRS = st.recursive(_leaf(), _extend, max_leaves=8)


@settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(EXPRS, st.lists(st.floats(0.3, 2.0), min_size=3, max_size=3))
def test_from_sympy_gradient_matches_sympy_diff(expr, point):
    syms = [rx, ry, rz]
    if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):  # e.g. (x - x)**-1
        return
    with np.errstate(all="ignore"):
        f = sp.lambdify(syms, [expr, *(sp.diff(expr, s) for s in syms)], "numpy")
        ref = f(*np.array(point))  # NumPy floats: 1/0 is inf, not an exception
    ref = np.array(ref, dtype=complex)
    if not np.all(np.isfinite(ref)) or np.any(ref.imag != 0) or np.max(np.abs(ref)) > 1e8:
        return
    ref = ref.real
    value, grad = interpret.value_and_grad(from_sympy(expr, syms), point)
    got = np.array([value, *grad])
    scale = max(1.0, float(np.max(np.abs(ref))))
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-9 * scale)


def test_sympy_value_and_grad_compiled():
    expr = sp.exp(x * y) * sp.sin(z) + sp.Max(x, z) ** 2 / (1 + y**2)
    vg = sympy_value_and_grad(expr, [x, y, z])
    pt = np.array([0.3, 1.1, 0.9])
    value, grad = vg(pt)
    f = sp.lambdify([x, y, z], [expr, *(sp.diff(expr, s) for s in (x, y, z))], "math")
    ref = f(*pt)
    assert value == pytest.approx(ref[0], rel=1e-13)
    assert grad == pytest.approx(ref[1:], rel=1e-12)
    assert vg(0.3, 1.1, 0.9)[0] == value
    assert "def sympy_expr_value_and_grad" in vg.source
    with pytest.raises(ValueError, match="expected 3 values"):
        vg(np.ones(2))


# ---------------------------------------------------------------- check_grad


def _builtin(op: Op) -> bool:
    """Ops of the op table (user primitives registered by other tests are left out)."""
    return op.name in BUILTIN


BUILTIN_OPS = [op for op in OPS.values() if _builtin(op)]


def _point(op: Op, rng: np.random.Generator) -> list[float]:
    """A point in the op's domain, away from the kink of a non-smooth op."""
    lo, hi = op.domain
    while True:
        pt = rng.uniform(lo, hi, op.arity)
        switch = pt[0] if op.arity == 1 else pt[0] - pt[1]
        if op.smooth or abs(switch) > 0.1:
            return [float(v) for v in pt]


@pytest.mark.parametrize("op", BUILTIN_OPS, ids=lambda op: op.name)
def test_check_grad_every_op(op):
    pt = _point(op, np.random.default_rng(op.opcode))
    if op.arity == 1:
        f = lambda x: op(x) * 1.5  # noqa: E731
    else:
        f = lambda x, y: op(x, y) * 1.5  # noqa: E731
    report = check_grad(f, *pt, argnums=tuple(range(op.arity)))
    assert report.ok
    assert report.sympy is not None, report.notes
    assert not np.isnan(report.finite_diff).any(), report.notes
    assert "finite diff" in str(report) and "sympy" in str(report)


def test_every_op_is_covered():
    names = {op.name for op in BUILTIN_OPS}
    assert {"add", "sin", "maximum", "step", "softplus", "arccos"} <= names


def test_check_grad_arrays_and_tuple_argnums():
    report = check_grad(corpus_e, np.array([[0.5, 1.5], [-0.7, 2.0]]))
    assert report.labels == ["a[0, 0]", "a[0, 1]", "a[1, 0]", "a[1, 1]"]
    assert report.compiled.shape == (4,)
    report = check_grad(lambda w, b: (w * w).sum() * b, np.arange(3.0), 2.0, argnums=(1, 0))
    assert report.labels == ["b", "w[0]", "w[1]", "w[2]"]
    assert report.interpreter == pytest.approx([5.0, 0.0, 4.0, 8.0])


def test_check_grad_on_kink_shows_sympy_without_comparing():
    report = check_grad(lambda x, y: ad.relu(x) + y, 0.0, 1.0, argnums=(0, 1))
    assert report.compiled[0] == 0.0 and report.sympy[0] == 0.5
    assert any("kink" in n for n in report.notes)


# Not registered: an Op works in traces, the interpreter and straight-line code as it is.
WRONG_SIN = Op(
    "wrong_sin", 1, math.sin, "math.sin({0})", (lambda g, out, a: g * 2.0 * ad.cos(a),), "sin"
)


def test_check_grad_catches_a_wrong_rule_and_names_the_input():
    def f(a, s):
        return WRONG_SIN(a[1]) * s + a[0]

    with pytest.raises(GradientMismatch, match=r"d f / d a\[1\] \(argument 'a', element \[1\]\)"):
        check_grad(f, np.array([0.1, 0.2]), 1.5, argnums=(0, 1))
    try:
        check_grad(f, np.array([0.1, 0.2]), 1.5, argnums=(0, 1))
    except GradientMismatch as e:
        first = str(e).splitlines()[0]
    for method in ("compiled=", "adjoint tape=", "interpreter=", "sympy=", "finite diff="):
        assert method in first
    assert repr(2 * math.cos(0.2) * 1.5) in first  # the wrong rule's answer is shown


def test_gradient_mismatch_is_an_assertion_error():
    assert issubclass(GradientMismatch, AssertionError)


def test_from_sympy_records_terms_in_the_symbols_order():
    # SymPy orders x0 + x1 + ... + x11 by name (x0, x1, x10, x11, x2 ...); the tape
    # reads the inputs in the order the symbols were given, so loops stay strided
    xs = sp.symbols("x0:12")
    tape = from_sympy(sum(sp.sin(x) for x in xs), xs)
    sines = [n.args[0] for n in tape.nodes if n.op == OPS["sin"]]
    assert sines == [tape.inputs[k] for k in range(12)]
    point = np.linspace(0.1, 1.2, 12)
    assert interpret.evaluate(tape, point)[0] == pytest.approx(np.sum(np.sin(point)), rel=1e-15)


def test_to_sympy_of_a_long_sum_is_one_flat_sum():
    # a sum over 300 rows is a chain of 300 adds on the tape: SymPy gets one flat Add
    # (a nested one exceeded Python's recursion limit in printing, diff and lambdify)
    rng = np.random.default_rng(3)
    X, w = rng.normal(size=(300, 3)), rng.normal(size=3)

    def f(w):
        return np.mean(np.logaddexp(0.0, -(X @ w))) - np.sum(np.tanh(X @ w))

    expr = ad.to_sympy(f, w)
    assert len(str(expr)) > 1000
    syms = sp.symbols("w_0 w_1 w_2")
    assert float(sp.lambdify(syms, expr)(*w)) == pytest.approx(f(w), rel=1e-12)
