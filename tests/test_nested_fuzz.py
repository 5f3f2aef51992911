"""Random networks whose loop over examples has a body long enough to be folded in
turn (loops inside loops): the compiled gradient against eager backward() on the
same function. A bug of exactly this shape (a value of the body that takes no
gradient, read by a later statement's reverse) once gave wrong gradients."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import adcompile as ad

ACTS = {"relu": ad.relu, "tanh": ad.tanh, "sigmoid": ad.sigmoid}
LOSSES = {
    "hinge": lambda m: ad.relu(1.0 + m),
    "square": lambda m: (m + 0.5) ** 2,
    "logistic": lambda m: ad.softplus(m),
}


def network(width: int, act, loss_of):
    def loss(p, X, y):
        total = 0.0
        for i in range(len(y)):
            sign = -y[i]  # data only, made before the neurons, read by the reverse after
            h = [
                act(p[2 * j] * X[i, 0] + p[2 * j + 1] * X[i, 1] + p[2 * width + j])
                for j in range(width)
            ]
            s = p[4 * width]
            for j in range(width):
                s = s + p[3 * width + j] * h[j]
            total = total + loss_of(sign * s)
        return total / len(y)

    return loss


@settings(max_examples=4, deadline=None, derandomize=True)
@given(
    width=st.integers(14, 24),
    rows=st.integers(6, 9),
    act=st.sampled_from(sorted(ACTS)),
    kind=st.sampled_from(sorted(LOSSES)),
    seed=st.integers(0, 1000),
)
def test_nested_loops_match_eager_backward(width, rows, act, kind, seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(-1, 1, 4 * width + 1)
    X = rng.normal(size=(rows, 2))
    y = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
    loss = network(width, ACTS[act], LOSSES[kind])
    vg = ad.value_and_grad(loss)
    value, grad = vg(p, X, y)
    assert "in turn" in vg.explanation  # the body was folded in turn
    leaves = ad.tensor(p)
    eager = loss(leaves, X, y)
    eager.backward()
    np.testing.assert_allclose(value, eager.data, rtol=1e-12)
    np.testing.assert_allclose(grad, ad.grad_of(leaves), rtol=1e-10, atol=1e-13)
