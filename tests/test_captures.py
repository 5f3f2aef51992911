"""Data a function reads from outside its arguments is never baked in stale.

Arrays and floats in closure cells, module globals and defaults are inputs
of the compiled code, read at every call; what is reached another way (an
attribute, a container, an integer steering a loop) is checked at every
call and traced again when it changed. Every answer is checked against a
gradient derived by hand and evaluated with NumPy on the current data.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest

import adcompile as ad

rng = np.random.default_rng(7)

# module globals read by the functions below (the JAX style: data not passed in)
X = rng.normal(size=(40, 3))
Y = np.sign(rng.normal(size=40))
LAM = 0.1
STEPS = 3


def logistic(w):
    return np.mean(np.log1p(np.exp(-Y * (X @ w)))) + LAM * np.sum(w * w)


def logistic_grad(w, X, Y, lam):
    """d/dw of mean(log(1 + exp(-y x.w))) + lam |w|^2, by hand."""
    m = -Y * (X @ w)
    s = 1.0 / (1.0 + np.exp(-m))
    return (X * (-Y * s)[:, None]).mean(axis=0) + 2.0 * lam * w


def _scores(w):
    return X @ w


def logistic_via_helper(w):
    return np.mean(np.log1p(np.exp(-Y * _scores(w))))


def _restore():
    global X, Y, LAM, STEPS
    r = np.random.default_rng(7)
    X, Y, LAM, STEPS = r.normal(size=(40, 3)), np.sign(r.normal(size=40)), 0.1, 3


@pytest.fixture(autouse=True)
def fresh_globals():
    _restore()
    yield
    _restore()


W = np.array([0.3, -0.2, 0.5])


def test_global_arrays_changed_in_place_are_read_at_each_call():
    g = ad.grad(logistic)
    np.testing.assert_allclose(g(W), logistic_grad(W, X, Y, LAM), rtol=1e-12)
    X[:] = rng.normal(size=X.shape)  # in place: the stale answer
    Y[::2] *= -1.0
    np.testing.assert_allclose(g(W), logistic_grad(W, X, Y, LAM), rtol=1e-12)
    assert g.traces == 1  # read as inputs: no trace again


def test_global_rebound_to_other_array_and_shape():
    global X, Y, LAM
    vg = ad.value_and_grad(logistic)
    vg(W)
    X, Y, LAM = rng.normal(size=(40, 3)), -Y, 0.7
    value, grad = vg(W)
    assert value == pytest.approx(np.mean(np.log1p(np.exp(-Y * (X @ W)))) + LAM * W @ W, rel=1e-12)
    np.testing.assert_allclose(grad, logistic_grad(W, X, Y, LAM), rtol=1e-12)
    X, Y = rng.normal(size=(25, 3)), np.sign(rng.normal(size=25))  # a new shape
    np.testing.assert_allclose(vg(W)[1], logistic_grad(W, X, Y, LAM), rtol=1e-12)


def test_hidden_inputs_are_parameters_of_the_generated_code():
    src = ad.show_code(ad.grad(logistic), W)
    header = next(line for line in src.splitlines() if line.startswith("def "))
    assert all(name in header for name in ("w", "X", "LAM", "Y")), header


def test_helper_function_reading_a_global():
    g = ad.grad(logistic_via_helper)
    np.testing.assert_allclose(g(W), logistic_grad(W, X, Y, 0.0), rtol=1e-12)
    X[3:9] += 1.5
    np.testing.assert_allclose(g(W), logistic_grad(W, X, Y, 0.0), rtol=1e-12)
    assert g.traces == 1


def test_closure_cells_array_and_float():
    def make(A, c):
        def f(x):
            return np.sum((A @ x) ** 2) * c

        return f, A

    A0 = rng.normal(size=(4, 4))
    f, A = make(A0, 1.5)
    x = rng.normal(size=4)
    g = ad.grad(f)
    np.testing.assert_allclose(g(x), 1.5 * 2 * A.T @ (A @ x), rtol=1e-12)
    A[0, :] = 3.0
    np.testing.assert_allclose(g(x), 1.5 * 2 * A.T @ (A @ x), rtol=1e-12)
    assert g.traces == 1


def test_closure_float_rebound_in_enclosing_scope():
    scale = 2.0

    def f(x):
        return scale * x * x

    g = ad.grad(f)
    assert g(3.0) == pytest.approx(2 * 2.0 * 3.0)
    scale = 5.0
    assert g(3.0) == pytest.approx(2 * 5.0 * 3.0)
    assert g.traces == 1


def test_default_argument_array():
    B = rng.normal(size=(3, 2))

    def f(w, B=B):
        return np.sum((B @ w) ** 2)

    w = rng.normal(size=2)
    g = ad.grad(f)
    np.testing.assert_allclose(g(w), 2 * B.T @ (B @ w), rtol=1e-12)
    B[1, 1] = -4.0
    np.testing.assert_allclose(g(w), 2 * B.T @ (B @ w), rtol=1e-12)
    assert g.traces == 1


def test_attribute_array_is_checked_and_traced_again():
    class Data:
        pass

    d = Data()
    d.M = rng.normal(size=(5, 2))

    def f(w):
        return np.sum((d.M @ w) ** 2)

    w = rng.normal(size=2)
    g = ad.grad(f)
    np.testing.assert_allclose(g(w), 2 * d.M.T @ (d.M @ w), rtol=1e-12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g(w)  # unchanged: no warning, no trace
    assert not caught and g.traces == 1
    d.M[0, 0] = 10.0
    with pytest.warns(ad.RetraceWarning, match=r"d\.M \(through d") as record:
        got = g(w)
    np.testing.assert_allclose(got, 2 * d.M.T @ (d.M @ w), rtol=1e-12)
    assert g.traces == 2
    assert record[0].filename == __file__  # points at the user's call


def test_container_item_is_checked():
    data = {"M": rng.normal(size=(5, 2))}

    def f(w):
        return np.sum((data["M"] @ w) ** 2)

    w = rng.normal(size=2)
    g = ad.value_and_grad(f)
    g(w)
    data["M"][2] = [1.0, -1.0]
    with pytest.warns(ad.RetraceWarning, match=r"data\['M'\]"):
        value, grad = g(w)
    assert value == pytest.approx(np.sum((data["M"] @ w) ** 2), rel=1e-12)
    np.testing.assert_allclose(grad, 2 * data["M"].T @ (data["M"] @ w), rtol=1e-12)


def _sum_steps(x):
    s = 0.0
    for i in range(STEPS):
        s = s + x[i] ** 2
    return s


def test_integer_global_steering_a_loop_traces_again():
    global STEPS
    x = np.arange(1.0, 7.0)
    g = ad.grad(_sum_steps)
    np.testing.assert_array_equal(g(x), [2, 4, 6, 0, 0, 0])
    STEPS = 5
    with pytest.warns(ad.RetraceWarning, match=r"STEPS .*loop counts"):
        np.testing.assert_array_equal(g(x), [2, 4, 6, 8, 10, 0])


def test_float_that_cannot_be_traced_is_watched_instead():
    c = 2.0

    def f(x):
        return x * math.exp(c)  # math.exp needs a float: c is traced as a constant

    g = ad.grad(f)
    assert g(1.0) == pytest.approx(math.exp(2.0), rel=1e-15)
    c = 3.0
    with pytest.warns(ad.RetraceWarning, match="c "):
        assert g(1.0) == pytest.approx(math.exp(3.0), rel=1e-15)


def test_bound_method_reading_its_object_and_a_global():
    class Model:
        def __init__(self):
            self.W = rng.normal(size=(2, 2))

        def loss(self, x):
            return np.sum((self.W @ x) ** 2) + np.sum(X[0, :2] * x)

    m = Model()
    x = rng.normal(size=2)
    g = ad.grad(m.loss)

    def expected():
        return 2 * m.W.T @ (m.W @ x) + X[0, :2]

    np.testing.assert_allclose(g(x), expected(), rtol=1e-12)
    X[0, :2] = [4.0, -4.0]  # a global: an input, no trace
    np.testing.assert_allclose(g(x), expected(), rtol=1e-12)
    m.W[1, 0] = 9.0  # an attribute: watched, traced again
    with pytest.warns(ad.RetraceWarning, match=r"self\.W"):
        np.testing.assert_allclose(g(x), expected(), rtol=1e-12)


def test_partial_argument_is_watched():
    def f(w, A):
        return np.sum((A @ w) ** 2)

    A = rng.normal(size=(3, 2))
    w = rng.normal(size=2)
    g = ad.grad(functools.partial(f, A=A))
    np.testing.assert_allclose(g(w), 2 * A.T @ (A @ w), rtol=1e-12)
    A[0, 1] = 2.5
    with pytest.warns(ad.RetraceWarning):
        np.testing.assert_allclose(g(w), 2 * A.T @ (A @ w), rtol=1e-12)


def test_closed_over_value_reads_its_current_data():
    w = ad.Value(2.0)

    def f(x):
        return w * x * x

    g = ad.grad(f)
    assert g(3.0) == pytest.approx(12.0)
    w.data = -1.0
    assert g(3.0) == pytest.approx(-6.0)


def test_jit_and_batches_read_closed_over_data():
    Xb = rng.normal(size=(64, 2))

    def mean_sq(w):
        return np.mean((Xb @ w) ** 2)

    w = np.array([0.5, -1.0])
    f = ad.jit(mean_sq)
    assert f(w) == pytest.approx(np.mean((Xb @ w) ** 2), rel=1e-12)
    Xb *= 2.0
    assert f(w) == pytest.approx(np.mean((Xb @ w) ** 2), rel=1e-12)
    g = ad.grad(mean_sq)
    np.testing.assert_allclose(g(w), 2 * Xb.T @ (Xb @ w) / 64, rtol=1e-12)
    Xb[:10] = 0.0
    np.testing.assert_allclose(g(w), 2 * Xb.T @ (Xb @ w) / 64, rtol=1e-12)


def test_compile_loss_reads_closed_over_data():
    model = ad.nn.MLP(2, [4, 1])
    Xd = rng.normal(size=(24, 2))
    yd = np.sign(rng.normal(size=24))

    def loss():
        out = [model([Xd[i, 0], Xd[i, 1]]) for i in range(len(Xd))]
        return sum(((o - t) ** 2 for o, t in zip(out, yd)), ad.Value(0.0)) / len(Xd)

    step = ad.compile_loss(loss, model.parameters())

    def eager():
        for p in model.parameters():
            p.grad = 0.0
        value = loss()
        value.backward()
        return value.data, [p.grad for p in model.parameters()]

    for _ in range(2):
        value, grads = step.value_and_grad()
        ref_value, ref_grads = eager()
        assert value == pytest.approx(ref_value, rel=1e-12)
        np.testing.assert_allclose(grads, ref_grads, rtol=1e-10, atol=1e-14)
        Xd[:] = rng.normal(size=Xd.shape)  # the data the loss closes over changes
        yd *= -1.0


def _inner(x):
    return np.sum(X[0] * x**2)


_inner_grad = ad.grad(_inner)


def test_outer_transform_sees_inner_transforms_data():
    """An outer transform of a function calling ad.grad(g): g's data is checked."""
    h = ad.grad(lambda x: np.sum(_inner_grad(x) ** 2))
    x = np.array([0.5, -1.0, 2.0])
    # d/dx sum((2 X0 x)^2) = 8 X0^2 x
    np.testing.assert_allclose(h(x), 8 * X[0] ** 2 * x, rtol=1e-12)
    X[0] = [1.0, 2.0, 3.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        np.testing.assert_allclose(h(x), 8 * X[0] ** 2 * x, rtol=1e-12)
        np.testing.assert_allclose(_inner_grad(x), 2 * X[0] * x, rtol=1e-12)


def test_a_closed_over_array_of_wrong_type_names_it():
    global X
    g = ad.grad(logistic)
    g(W)
    X = rng.normal(size=(40, 3)).astype(complex)
    with pytest.raises(TypeError, match=r"X \(a global of module .*test_captures\), which "):
        g(W)
