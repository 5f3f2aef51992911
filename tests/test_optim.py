"""adcompile.optim: SGD and Adam against hand-derived steps and torch.optim."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adcompile import optim
from adcompile.trace.tensor import tensor
from adcompile.trace.value import Value


def _params(*xs):
    return [Value(x) for x in xs]


def _set_grads(ps, gs):
    for p, g in zip(ps, gs):
        p.grad = g


def test_sgd_step_by_hand():
    ps = _params(1.0, -2.0)
    opt = optim.SGD(ps, lr=0.5)
    _set_grads(ps, [0.5, 0.25])
    opt.step()
    assert [p.data for p in ps] == [0.75, -2.125]
    opt.zero_grad()
    assert [p.grad for p in ps] == [0.0, 0.0]


def test_sgd_momentum_three_steps_by_hand():
    mu, lr, g = 0.5, 0.25, 2.0
    (p,) = ps = _params(1.0)
    opt = optim.SGD(ps, lr=lr, momentum=mu)
    bufs = [g, mu * g + g, mu * (mu * g + g) + g]  # buf_1 = g, buf_t = mu buf + g
    for _ in range(3):
        p.grad = g
        opt.step()
    assert p.data == pytest.approx(1.0 - lr * sum(bufs), rel=1e-15)


def test_sgd_nesterov_and_weight_decay_by_hand():
    mu, lr, wd = 0.9, 0.1, 0.01
    (p,) = ps = _params(2.0)
    opt = optim.SGD(ps, lr=lr, momentum=mu, weight_decay=wd, nesterov=True)
    # two steps of f(x) = x**2 (grad 2x), written out
    x = 2.0
    g1 = 2 * x + wd * x
    buf = g1
    x = x - lr * (g1 + mu * buf)
    g2 = 2 * x + wd * x
    buf = mu * buf + g2
    x = x - lr * (g2 + mu * buf)
    for _ in range(2):
        opt.zero_grad()
        (p * p).backward()
        opt.step()
    assert p.data == pytest.approx(x, rel=1e-14)


def test_adam_first_step_is_lr_times_sign():
    ps = _params(1.0, 1.0, 1.0)
    opt = optim.Adam(ps, lr=0.1)
    _set_grads(ps, [3.0, -0.5, 1e-3])
    opt.step()
    # m_hat = g, v_hat = g**2 after one step, so the step is lr g / (|g| + eps)
    expected = [1 - 0.1 * g / (abs(g) + 1e-8) for g in (3.0, -0.5, 1e-3)]
    np.testing.assert_allclose([p.data for p in ps], expected, rtol=1e-14)


def test_adam_two_steps_by_hand():
    b1, b2, lr, eps, wd = 0.8, 0.9, 0.05, 1e-8, 0.1
    (p,) = ps = _params(1.5)
    opt = optim.Adam(ps, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    x, m, v = 1.5, 0.0, 0.0
    for t in (1, 2):
        g = 3 * x**2 + wd * x  # f = x**3, L2 weight decay added to the gradient
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        x -= lr * (m / (1 - b1**t)) / (math.sqrt(v / (1 - b2**t)) + eps)
        opt.zero_grad()
        (p**3).backward()
        opt.step()
    assert p.data == pytest.approx(x, rel=1e-13)


CONFIGS = [
    ("SGD", dict(lr=0.01)),
    ("SGD", dict(lr=0.01, momentum=0.9)),
    ("SGD", dict(lr=0.01, momentum=0.9, weight_decay=0.1, nesterov=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.02, betas=(0.5, 0.99), eps=1e-6, weight_decay=0.1)),
]


@pytest.mark.parametrize("name, kw", CONFIGS, ids=[f"{n}-{kw}" for n, kw in CONFIGS])
def test_matches_torch_over_several_steps(name, kw):
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(1).normal(size=4)
    ps = [Value(float(v)) for v in x0]
    opt = getattr(optim, name)(ps, **kw)
    xt = torch.tensor(x0, requires_grad=True)
    topt = getattr(torch.optim, name)([xt], **kw)
    for _ in range(6):
        opt.zero_grad()
        (sum(p**4 for p in ps) + ps[0] * ps[1]).backward()
        opt.step()
        topt.zero_grad()
        ((xt**4).sum() + xt[0] * xt[1]).backward()
        topt.step()
    np.testing.assert_allclose([p.data for p in ps], xt.detach().numpy(), rtol=1e-12)


def test_update_on_float_arrays_equals_step_on_values():
    ps = _params(0.5, -1.0, 2.0)
    a = optim.Adam(ps, lr=0.1)
    theta = np.array([0.5, -1.0, 2.0])
    b = optim.Adam(theta, lr=0.1)  # made from a float array: update() only
    for _ in range(3):
        a.zero_grad()
        sum(p * p * p for p in ps).backward()
        a.step()
        theta = b.update(theta, 3 * theta**2)
    np.testing.assert_allclose([p.data for p in ps], theta, rtol=1e-15)
    with pytest.raises(TypeError, match="update"):
        b.step()


def test_parameters_may_be_arrays_and_are_taken_once():
    w = tensor([[1.0, 2.0], [3.0, 4.0]])
    c = Value(5.0, requires_grad=False)
    opt = optim.SGD([w, w[0, 0], [c]], lr=1.0)
    assert len(opt.params) == 4  # frozen c left out, w[0, 0] once
    w.grad = 1.0
    opt.step()
    np.testing.assert_array_equal(w.data, [[0.0, 1.0], [2.0, 3.0]])


def test_bad_arguments():
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="Values"):
        optim.SGD([1.0], lr=0.1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(_params(1.0), lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="learning rate"):
        optim.Adam(_params(1.0), lr=-1.0)
