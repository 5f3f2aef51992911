"""NumPy ufuncs on ValueArrays (and Values): those named after an op apply that op.

``np.maximum(z, 0)`` on an object array would compare with ``>=`` and give
back either the Value or the int 0; on a ValueArray it records the
``maximum`` primitive for every element, so rows of a NumPy-style network
have one structure and fold into loops. Values and gradients are checked
against hand-derived formulas and central finite differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import adcompile as ad
from adcompile.trace.tensor import ValueArray, tensor
from adcompile.trace.value import Value


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


X = np.array([-1.5, -0.25, 0.0, 0.75, 2.0])


@pytest.mark.parametrize("zero_first", [False, True])
def test_maximum_with_a_constant_is_the_maximum_op_with_relu_gradients(zero_first):
    z = tensor(X)
    out = np.maximum(0, z) if zero_first else np.maximum(z, 0)
    assert isinstance(out, ValueArray) and out.shape == X.shape
    # every element is a new Value made by the op, not the operand or the int 0
    assert all(type(v) is Value and v._op == "maximum" for v in out.flat)
    np.testing.assert_array_equal(out.data, np.maximum(X, 0.0))
    out.sum().backward()
    # 0 below, 1 above, and a tie at 0.0 split evenly (the op's rule)
    np.testing.assert_array_equal(z.grad, [0.0, 0.0, 0.5, 1.0, 1.0])


def test_maximum_and_minimum_of_two_arrays_give_both_gradients():
    a, b = tensor(X), tensor(np.array([0.5, -0.25, 1.0, 0.0, 3.0]))
    hi, lo = np.maximum(a, b), np.minimum(a, b)
    assert all(v._op == "maximum" for v in hi.flat) and all(v._op == "minimum" for v in lo.flat)
    np.testing.assert_array_equal(hi.data, np.maximum(X, b.data))
    np.testing.assert_array_equal(lo.data, np.minimum(X, b.data))
    (2.0 * hi.sum() + 3.0 * lo.sum()).backward()
    above = (X > b.data).astype(float)
    tie = (X == b.data).astype(float)
    # d/da = 2 [a > b] + 3 [a < b], a tie splits each weight in half
    np.testing.assert_array_equal(a.grad, 2.0 * above + 3.0 * (1 - above - tie) + 2.5 * tie)
    np.testing.assert_array_equal(b.grad, 2.0 * (1 - above - tie) + 3.0 * above + 2.5 * tie)


def test_maximum_broadcasts_against_a_float_array():
    z = tensor(X.reshape(5, 1))
    c = np.array([[-1.0, 0.5]])
    out = np.maximum(z, c)
    assert out.shape == (5, 2)
    np.testing.assert_array_equal(out.data, np.maximum(X.reshape(5, 1), c))
    out.sum().backward()
    above = [X > -1.0, X > 0.5]
    ties = [X == -1.0, X == 0.5]
    np.testing.assert_array_equal(z.grad[:, 0], np.sum(above, axis=0) + 0.5 * np.sum(ties, axis=0))


U = np.array([0.2, 0.45, 0.7])  # inside every domain below


@pytest.mark.parametrize(
    "ufunc, ref, dref",
    [
        (np.exp, np.exp, np.exp),
        (np.log, np.log, lambda x: 1 / x),
        (np.log1p, np.log1p, lambda x: 1 / (1 + x)),
        (np.expm1, np.expm1, np.exp),
        (np.sqrt, np.sqrt, lambda x: 0.5 / np.sqrt(x)),
        (np.sin, np.sin, np.cos),
        (np.cos, np.cos, lambda x: -np.sin(x)),
        (np.tan, np.tan, lambda x: 1 / np.cos(x) ** 2),
        (np.arcsin, np.arcsin, lambda x: 1 / np.sqrt(1 - x * x)),
        (np.arccos, np.arccos, lambda x: -1 / np.sqrt(1 - x * x)),
        (np.arctan, np.arctan, lambda x: 1 / (1 + x * x)),
        (np.sinh, np.sinh, np.cosh),
        (np.cosh, np.cosh, np.sinh),
        (np.tanh, np.tanh, lambda x: 1 - np.tanh(x) ** 2),
        (np.absolute, np.abs, np.sign),
    ],
)
def test_unary_ufuncs_record_their_op_with_floats_mixed_in(ufunc, ref, dref):
    for sign in (1.0, -1.0) if ufunc is np.absolute else (1.0,):
        x = sign * U
        a = tensor(x)
        out = ufunc(a)
        assert isinstance(out, ValueArray)
        np.testing.assert_allclose(out.data, ref(x), rtol=1e-14)
        out.sum().backward()
        np.testing.assert_allclose(a.grad, dref(x), rtol=1e-13)
    # a plain float among the Values (NumPy's object loop would look for a
    # ``.exp()`` method on the float and fail) is evaluated as a float
    mixed = tensor(U)
    mixed[1] = 0.45
    out = ufunc(mixed)
    assert type(out[1]) is float and out[1] == pytest.approx(ref(0.45), rel=1e-15)
    assert isinstance(out[0], Value)


def test_other_ufunc_uses_behave_as_on_object_arrays():
    a = tensor(np.array([[1.0, -2.0], [3.0, 0.5]]))
    # np.max / np.min are chains of the maximum / minimum op (no comparison: no guard,
    # and nan goes through as in NumPy); other reductions, accumulations and
    # comparisons are NumPy's own
    top = np.maximum.reduce(a, axis=None)
    assert isinstance(top, Value) and top.data == 3.0
    top.backward()
    np.testing.assert_array_equal(ad.grad_of(a), [[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(ad.data(np.min(a, axis=1, keepdims=True)), [[-2.0], [0.5]])
    assert np.isnan(np.max(tensor(np.array([1.0, np.nan, 3.0]))).data)
    assert isinstance(np.add.accumulate(a, axis=0), ValueArray)
    assert isinstance(a.sum(), Value) and isinstance(a.sum(axis=0), ValueArray)
    gt = a > 0
    assert isinstance(gt, ValueArray) and gt.dtype == bool
    np.testing.assert_array_equal(gt, [[True, False], [True, True]])
    # out= fills and returns the array it is given
    out = np.empty((2, 2), dtype=object)
    assert np.exp(a, out=out) is out and isinstance(out[0, 0], Value)
    np.testing.assert_allclose(ad.data(out), np.exp(a.data), rtol=1e-15)
    # @, + and * stay element-wise Value arithmetic
    m = a @ a + 1.0 * a
    assert isinstance(m, ValueArray)
    np.testing.assert_allclose(m.data, a.data @ a.data + a.data, rtol=1e-15)


# ------------------------------------------------------- the NumPy-style MLP

H = 4
SHAPES = [(H, 2), (H,), (H, H), (H,), (1, H), (1,)]
CUTS = np.cumsum([int(np.prod(s)) for s in SHAPES])[:-1]


def mlp_loss(relu):
    def loss(theta, X, y):
        W1, b1, W2, b2, W3, b3 = (p.reshape(s) for p, s in zip(np.split(theta, CUTS), SHAPES))
        h1 = relu(X @ W1.T + b1)
        h2 = relu(h1 @ W2.T + b2)
        s = (h2 @ W3.T + b3)[:, 0]
        return np.mean(relu(1 - y * s)) + 1e-3 * np.sum(theta * theta)

    return loss


def data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)


def central_differences(f, theta, X, y, eps=1e-6):
    g = np.empty_like(theta)
    for k in range(theta.size):
        e = np.zeros_like(theta)
        e[k] = eps
        g[k] = (f(theta + e, X, y) - f(theta - e, X, y)) / (2 * eps)
    return g


def test_numpy_style_mlp_with_maximum_folds_into_one_program_for_every_batch_length():
    numpy_style = mlp_loss(lambda z: np.maximum(z, 0))
    theta = np.random.default_rng(3).uniform(-1.0, 1.0, sum(int(np.prod(s)) for s in SHAPES))
    vg = ad.value_and_grad(numpy_style)
    with_relu = ad.value_and_grad(mlp_loss(ad.relu))
    for n, seed in ((40, 0), (23, 1)):
        X, y = data(n, seed)
        value, g = vg(theta, X, y)
        # the same function on floats (NumPy's own maximum) and by finite differences
        assert value == pytest.approx(numpy_style(theta, X, y), rel=1e-13)
        np.testing.assert_allclose(
            g, central_differences(numpy_style, theta, X, y), rtol=1e-6, atol=1e-8
        )
        v2, g2 = with_relu(theta, X, y)
        assert value == pytest.approx(v2, rel=1e-14)
        np.testing.assert_allclose(g, g2, rtol=1e-13, atol=1e-15)
        # the same gradient eagerly: Values, then backward()
        t = tensor(theta)
        numpy_style(t, X, y).backward()
        np.testing.assert_allclose(t.grad, g, rtol=1e-12, atol=1e-15)
    compiled = vg._last.compiled
    assert compiled.facts.kind == "folded"
    assert "Generic in the batch length n" in compiled.explanation
    assert "for i in range(n):" in compiled.source
    assert ">= 0.0 else 0.0)" in compiled.source  # (np.maximum: nan stays nan)
    assert "interpreter" not in compiled.explanation
    assert vg.traces == 1


# ------------------------------------------------------- rounding, %, //, isnan (issue 28)

INF, NAN = math.inf, math.nan
ROUNDING = [np.floor, np.ceil, np.trunc, np.rint]
R = np.array([-2.5, -1.7, -0.5, -0.25, 0.0, 0.5, 1.5, 2.5, 3.2])


@pytest.mark.parametrize("ufunc", ROUNDING + [np.round])
def test_rounding_ufuncs_on_a_value_plain_object_arrays_and_value_arrays(ufunc):
    # one Value (NumPy calls Value.__array_ufunc__), a plain object array (NumPy's
    # object loop calls math.floor ... or .rint() on each Value) and a ValueArray (the
    # op, by name): every form gives Values equal to NumPy's floats, derivative 0
    v = Value(2.5)
    out = ufunc(v)
    assert isinstance(out, Value) and out.data == ufunc(2.5)
    plain = np.array([Value(x) for x in R], dtype=object)
    for a in (plain, tensor(R)):
        out = ufunc(a)
        assert all(isinstance(e, Value) for e in out.flat)
        np.testing.assert_array_equal([e.data for e in out.flat], ufunc(R))
    t = tensor(R)
    (ufunc(t) * t).sum().backward()  # d/dx [x r(x)] = r(x)
    np.testing.assert_array_equal(t.grad, ufunc(R))


@pytest.mark.parametrize("ufunc", [np.floor_divide, np.remainder, np.mod])
def test_floor_divide_and_remainder_record_their_op_on_value_arrays(ufunc):
    a, b = tensor(R), tensor(np.array([2.0, -1.5, 0.75, 2.0, 1.0, -2.0, 0.4, 3.0, -1.0]))
    out = ufunc(a, b)
    symbol = "//" if ufunc is np.floor_divide else "%"
    assert all(e._op == symbol for e in out.flat)
    np.testing.assert_array_equal(out.data, ufunc(a.data, b.data))
    out.sum().backward()
    if ufunc is np.floor_divide:  # piecewise constant
        np.testing.assert_array_equal(a.grad, 0.0)
        np.testing.assert_array_equal(b.grad, 0.0)
    else:  # x - y floor(x / y): 1 and -(x // y)
        np.testing.assert_array_equal(a.grad, 1.0)
        np.testing.assert_array_equal(b.grad, -np.floor_divide(a.data, b.data))


def test_predicates_on_values_answer_bools_and_are_guards_in_a_trace():
    for x in (0.5, INF, -INF, NAN):
        v = Value(x)
        assert (np.isnan(v), np.isinf(v), np.isfinite(v)) == (
            bool(np.isnan(x)),
            bool(np.isinf(x)),
            bool(np.isfinite(x)),
        )
    tape = ad.trace(lambda x: x * 2.0 if np.isfinite(x) and not np.isnan(x) else x, 0.5)
    # isfinite: abs(x) <= the largest float was True; isnan: x != x (both sides the
    # input) was False
    assert [g.cmp for g in tape.guards] == ["<=", "!="]
    assert tape.guards[0].expected is True
    assert tape.nodes[tape.guards[0].b].value == np.finfo(float).max
    assert tape.nodes[tape.guards[0].a].op.name == "abs"
    assert tape.guards[1].a == tape.guards[1].b == tape.inputs[0]
    assert tape.guards[1].expected is False


def test_ufuncs_on_a_value_apply_the_op_or_numpys_object_loop():
    v = Value(-1.5)
    m = np.maximum(v, 0.0)  # the op, not a comparison choosing v or 0.0
    assert isinstance(m, Value) and m._op == "maximum" and m.data == 0.0
    p = np.float64(2.0) * v  # (NumPy's scalar asks Value.__array_ufunc__)
    assert isinstance(p, Value) and p._op == "*" and p.data == -3.0
    s = np.square(v)  # no op of that name: NumPy's object loop, v * v
    assert isinstance(s, Value) and s.data == 2.25
    row = np.array([Value(1.0), Value(2.0)], dtype=object) + v
    assert row.dtype == object and [e.data for e in row] == [-0.5, 0.5]
    with pytest.raises(TypeError):  # a ufunc without an object loop stays NumPy's error
        np.signbit(v)


def test_max_and_min_of_traced_values_are_one_program_and_keep_nan():
    """np.max / np.min / x.max(axis) of traced Values (arrays too small for the array
    level) record the maximum / minimum op: one trace for every ordering of the
    inputs (no guard on a comparison), and a nan comes out as NumPy's does."""

    def f(x):
        return np.max(x) + 2.0 * np.min(x.reshape(2, 2), axis=0).sum() + x.max(keepdims=True)[0]

    vg = ad.value_and_grad(f)
    rng = np.random.default_rng(5)
    orders = [rng.permutation(4) * 1.0 for _ in range(3)]
    for x in (*orders, np.array([1.0, np.nan, 3.0, 0.0])):
        v, g = vg(x)
        want = f(x)
        assert (np.isnan(v) and np.isnan(want)) or v == pytest.approx(want, rel=1e-15)
        if not np.isnan(want):  # by hand: 2 at the largest, 2 at each column's least
            m = x.reshape(2, 2)
            hand = np.zeros((2, 2))
            hand[np.argmin(m, axis=0), [0, 1]] = 2.0
            hand = hand.ravel()
            hand[np.argmax(x)] += 2.0
            np.testing.assert_array_equal(g, hand)
    assert vg.traces == 1
