"""compile_loss: the micrograd-style loop with compiled gradients."""

from __future__ import annotations

import random

import numpy as np
import pytest

import adcompile as ad


def _model(seed: int):
    rnd = random.Random(seed)
    w = [[ad.Value(rnd.uniform(-1, 1)) for _ in range(3)] for _ in range(4)]
    v = [ad.Value(rnd.uniform(-1, 1)) for _ in range(5)]
    params = [p for row in w for p in row] + v

    def model(x):
        h = [(row[0] * x[0] + row[1] * x[1] + row[2]).relu() for row in w]
        return sum(vi * hi for vi, hi in zip(v, h)) + v[4]

    def loss_fn(X, y):
        losses = [(1 + -yi * model(xi)).relu() for xi, yi in zip(X, y)]
        return sum(losses) * (1.0 / len(losses)) + 1e-4 * sum(p * p for p in params)

    return params, loss_fn


def _eager_grads(params, loss_fn, X, y):
    for p in params:
        p.grad = 0.0
    loss = loss_fn(X.tolist(), y.tolist())
    loss.backward()
    return loss.data, [p.grad for p in params]


def test_compiled_step_matches_eager_backward_over_training():
    params, loss_fn = _model(0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    step = ad.compile_loss(loss_fn, params)
    for _ in range(20):  # the parameters move, the compiled code follows
        ref_loss, ref_grads = _eager_grads(params, loss_fn, X, y)
        for p in params:
            p.grad = 0.0
        loss = step(X, y)
        loss.backward()
        assert loss.data == pytest.approx(ref_loss, rel=1e-12)
        np.testing.assert_allclose([p.grad for p in params], ref_grads, rtol=1e-10, atol=1e-14)
        for p in params:
            p.data -= 0.1 * p.grad
    # a relu kink never retraces: relu is an op, not a comparison
    assert step._vg.traces == 1


def test_compiled_step_backward_accumulates_like_micrograd():
    params, loss_fn = _model(1)
    X = np.array([[0.5, -1.0], [1.5, 0.2]])
    y = np.array([1.0, -1.0])
    _, ref = _eager_grads(params, loss_fn, X, y)
    for p in params:
        p.grad = 0.0
    loss = ad.compile_loss(loss_fn, params)(X, y)
    loss.backward()
    loss.backward()  # twice: adds the same gradients again
    np.testing.assert_allclose([p.grad for p in params], 2 * np.array(ref), rtol=1e-12)


def test_compile_loss_rejects_non_values():
    with pytest.raises(TypeError, match="model.parameters"):
        ad.compile_loss(lambda X: X, [1.0, 2.0])


@pytest.mark.parametrize("width", [4, 16])
def test_wide_network_compiled_matches_eager_and_finite_differences(width):
    # A loop over examples whose body (the neurons) is folded in turn: the label's
    # -y[i] is computed once per example, takes no gradient, and the reverse of a
    # later statement reads it; it must be the value of that example, not the
    # last one (a regression: it was a local left over from the forward loop).
    from adcompile.datasets import make_moons

    X, y = make_moons(5, noise=0.1, seed=1)
    random.seed(0)
    model = ad.MLP(2, [width, 1])

    def loss_fn(X, y):
        return sum((1 + -yi * model(xi)).relu() for xi, yi in zip(X, y)) / len(y)

    params = model.parameters()
    loss_fn(X, y).backward()
    eager = [p.grad for p in params]
    model.zero_grad()
    ad.compile_loss(loss_fn, params)(X, y).backward()
    np.testing.assert_allclose([p.grad for p in params], eager, rtol=1e-12, atol=1e-14)
    h, k = 1e-6, 7  # one weight by central differences, as an independent check
    base = params[k].data
    params[k].data = base + h
    up = loss_fn(X, y).data
    params[k].data = base - h
    down = loss_fn(X, y).data
    params[k].data = base
    assert eager[k] == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-8)
