"""Batch-generic code: one compiled function for every batch length.

Every answer is checked against NumPy formulas derived by hand (or an eager
backward pass), at several batch lengths, with the number of traces counted.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import adcompile as ad
from adcompile.backend import batch


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def logistic(w, X, y):
    """Mean logistic loss of a linear model, as a Python loop over examples."""
    total = 0.0
    for i in range(len(y)):
        z = w[0] * X[i, 0] + w[1] * X[i, 1] + w[2]
        total = total + ad.log(1 + ad.exp(-y[i] * z))
    return total / len(y) + 0.01 * (w[0] * w[0] + w[1] * w[1])


def logistic_numpy(w, X, y):
    z = X @ w[:2] + w[2]
    m = -y * z
    loss = np.mean(np.log1p(np.exp(m))) + 0.01 * (w[0] ** 2 + w[1] ** 2)
    s = -y / (1 + np.exp(-m)) / len(y)
    g = np.array([s @ X[:, 0] + 0.02 * w[0], s @ X[:, 1] + 0.02 * w[1], s.sum()])
    return loss, g


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)


W = np.array([0.3, -0.8, 0.1])


def test_new_batch_lengths_reuse_one_compiled_function():
    vg = ad.value_and_grad(logistic)
    X, y = data(200)
    for n in (64, 17, 200, 33, 64, 100):  # the last short batch included
        loss, g = vg(W, X[:n], y[:n])
        ref_loss, ref_g = logistic_numpy(W, X[:n], y[:n])
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        np.testing.assert_allclose(g, ref_g, rtol=1e-11, atol=1e-15)
    assert vg.traces == 1  # traced once, at three small lengths
    assert "Generic in the batch length n" in vg.source
    assert "range(n)" in vg.source


def test_numpy_style_loss_over_object_arrays_is_generic_too():
    def loss(w, X, y):
        z = X @ w[:2] + w[2]
        return np.sum(ad.log(1 + ad.exp(-y * z))) / len(y) + 0.01 * (w[0] * w[0] + w[1] * w[1])

    vg = ad.value_and_grad(loss)
    X, y = data(90, seed=1)
    for n in (90, 41):
        got = vg(W, X[:n], y[:n])
        ref = logistic_numpy(W, X[:n], y[:n])
        assert got[0] == pytest.approx(ref[0], rel=1e-12)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-11, atol=1e-15)
    assert vg.traces == 1


def test_a_function_that_treats_long_batches_differently_is_traced_as_it_is():
    def first20(w, X, y):  # looks generic at lengths 5, 6 and 8, but is not
        total = 0.0
        for i in range(min(len(y), 20)):
            total = total + ad.log(1 + ad.exp(-y[i] * (w[0] * X[i, 0] + w[1] * X[i, 1] + w[2])))
        return total

    vg = ad.value_and_grad(first20)
    X, y = data(50, seed=2)
    loss, g = vg(W, X, y)
    ref_loss, ref_g = logistic_numpy(W, X[:20], y[:20])
    reg = 0.01 * (W[0] ** 2 + W[1] ** 2)
    assert loss == pytest.approx((ref_loss - reg) * 20, rel=1e-12)
    np.testing.assert_allclose(g, (ref_g - [0.02 * W[0], 0.02 * W[1], 0]) * 20, rtol=1e-11)


def test_branches_on_data_that_the_small_traces_did_not_see():
    def hinge(w, X, y):
        total = 0.0
        for i in range(len(y)):
            m = 1 - y[i] * (w[0] * X[i, 0] + w[1] * X[i, 1] + w[2])
            if m > 0:  # a comparison of traced values: a guard
                total = total + m
        return total / len(y)

    def hinge_numpy(w, X, y):
        m = 1 - y * (X @ w[:2] + w[2])
        a = m > 0
        s = np.where(a, -y, 0.0) / len(y)
        return np.sum(m[a]) / len(y), np.array([s @ X[:, 0], s @ X[:, 1], s.sum()])

    vg = ad.value_and_grad(hinge)
    X, y = data(60, seed=3)
    y[:8] = 1.0  # the first rows all take one branch ...
    X[:8] = [2.0, 0.0]
    for n in (60, 30):  # ... the others both
        loss, g = vg(W, X[:n], y[:n])
        ref_loss, ref_g = hinge_numpy(W, X[:n], y[:n])
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        np.testing.assert_allclose(g, ref_g, rtol=1e-11, atol=1e-15)


def test_gradient_with_respect_to_the_data_is_not_batched():
    g = ad.grad(logistic, argnums=1)
    X, y = data(20, seed=4)
    gx = g(W, X, y)
    z = X @ W[:2] + W[2]
    s = -y / (1 + np.exp(y * z)) / len(y)
    np.testing.assert_allclose(gx, np.outer(s, W[:2]), rtol=1e-11)
    assert "batch length" not in g.source


def test_short_batches_trace_as_they_are():
    vg = ad.value_and_grad(logistic)
    X, y = data(10, seed=5)
    for n in (10, 9):
        loss, g = vg(W, X[:n], y[:n])
        np.testing.assert_allclose(g, logistic_numpy(W, X[:n], y[:n])[1], rtol=1e-11)
    assert vg.traces == 2  # below batch.MIN_LENGTH: a new length traces again


def test_short_last_batch_runs_the_generic_code():
    """Once generic code exists, every length down to the smallest traced one uses it
    (a short last batch), and shorter ones trace as they are."""
    vg = ad.value_and_grad(logistic)
    X, y = data(100, seed=3)
    vg(W, X[:64], y[:64])
    (gen,) = vg._batches.values()
    smallest = gen.lengths[0]
    assert smallest < batch.MIN_LENGTH
    for n in (smallest, 15, smallest + 1, 37):
        loss, g = vg(W, X[:n], y[:n])
        ref_loss, ref_g = logistic_numpy(W, X[:n], y[:n])
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        np.testing.assert_allclose(g, ref_g, rtol=1e-11, atol=1e-15)
    assert vg.traces == 1
    n = smallest - 1  # below every traced length: its own trace
    loss, g = vg(W, X[:n], y[:n])
    np.testing.assert_allclose(g, logistic_numpy(W, X[:n], y[:n])[1], rtol=1e-11)
    assert vg.traces == 2


def test_compile_loss_serves_every_batch_length():
    rnd = random.Random(7)
    w = [[ad.Value(rnd.uniform(-1, 1)) for _ in range(3)] for _ in range(4)]
    v = [ad.Value(rnd.uniform(-1, 1)) for _ in range(5)]
    params = [p for row in w for p in row] + v

    def model(x):
        h = [(row[0] * x[0] + row[1] * x[1] + row[2]).tanh() for row in w]
        return sum(vi * hi for vi, hi in zip(v, h)) + v[4]

    def loss_fn(X, y):
        losses = [(model(xi) - yi) ** 2 for xi, yi in zip(X, y)]
        return sum(losses) * (1.0 / len(losses))

    step = ad.compile_loss(loss_fn, params)
    X, y = data(80, seed=6)
    for n in (80, 32, 19):
        for p in params:
            p.grad = 0.0
        ref = loss_fn(X[:n].tolist(), y[:n].tolist())
        ref.backward()
        expected = [p.grad for p in params]
        for p in params:
            p.grad = 0.0
        loss = step(X[:n], y[:n])
        loss.backward()
        assert loss.data == pytest.approx(ref.data, rel=1e-12)
        np.testing.assert_allclose([p.grad for p in params], expected, rtol=1e-10, atol=1e-14)
    assert step._vg.traces == 1


def test_debug_nans_on_generic_code_names_the_op():
    def bad(w, X, y):
        total = 0.0
        for i in range(len(y)):
            total = total + ad.log(w[0] * X[i, 0] + w[1])
        return total

    X, _ = data(30, seed=8)
    X[:, 0] = np.abs(X[:, 0]) + 1.0
    vg = ad.value_and_grad(bad, debug_nans=True)
    y = np.ones(30)
    vg(np.array([1.0, 0.5]), X, y)  # fine
    X[25, 0] = -5.0  # log of a negative number in example 25
    with pytest.raises(ad.NonFiniteError, match="log"):
        vg(np.array([1.0, 0.5]), X, y)


def test_jit_traces_each_new_shape_as_the_contract_says():
    def mean_log(w, X, y):
        return logistic(w, X, y)

    f = ad.jit(mean_log)
    X, y = data(40, seed=9)
    for n in (40, 30):
        ref_loss, _ = logistic_numpy(W, X[:n], y[:n])
        assert f(W, X[:n], y[:n]) == pytest.approx(ref_loss, rel=1e-12)
    assert f.traces == 2
