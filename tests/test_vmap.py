"""ad.vmap (issue 18): compiled, parallel mapping over points, checked point by
point against the transform called on each point and hand-derived values."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import adcompile as ad


def loss(w, x, y):
    return (ad.tanh(x @ w) - y) ** 2


def loss_grad(w, x, y):
    """d loss / d w, by hand."""
    t = math.tanh(x @ w)
    return 2 * (t - y) * (1 - t * t) * x


RNG = np.random.default_rng(7)
W = RNG.normal(size=3)
XS = RNG.normal(size=(200, 3))
YS = RNG.normal(size=200)


def test_per_example_gradients():
    per = ad.vmap(ad.grad(loss), in_axes=(None, 0, 0))(W, XS, YS)
    assert per.shape == (200, 3)
    expected = np.array([loss_grad(W, x, y) for x, y in zip(XS, YS)])
    np.testing.assert_allclose(per, expected, rtol=1e-13, atol=1e-15)


def test_value_and_grad_stacks_tuples():
    values, grads = ad.vmap(ad.value_and_grad(loss, argnums=(0, 2)), in_axes=(None, 0, 0))(
        W, XS, YS
    )
    assert values.shape == (200,) and grads[0].shape == (200, 3) and grads[1].shape == (200,)
    t = np.tanh(XS @ W)
    np.testing.assert_allclose(values, (t - YS) ** 2, rtol=1e-13)
    np.testing.assert_allclose(grads[1], -2 * (t - YS), rtol=1e-13)


def test_plain_function_and_in_axes_one():
    pts = RNG.normal(size=(3, 50))  # points along axis 1
    got = ad.vmap(lambda p: (ad.sin(p[0]) * p[1], p * 2.0), in_axes=1)(pts)
    np.testing.assert_allclose(got[0], np.sin(pts[0]) * pts[1], rtol=1e-15)
    np.testing.assert_allclose(got[1], pts.T * 2.0)


def test_mapped_scalars_and_shared_numbers():
    ts = np.linspace(-2, 2, 41)
    got = ad.vmap(ad.grad(lambda t, a: ad.sin(a * t) * t))(ts, 1.5)  # 1.5 is shared
    np.testing.assert_allclose(got, 1.5 * ts * np.cos(1.5 * ts) + np.sin(1.5 * ts), rtol=1e-13)


def test_points_on_other_branches_get_their_own_answer():
    def f(x):
        if x[0] > 0:
            return x[0] * x[1]
        return ad.sin(x[1]) - x[0]

    pts = RNG.normal(size=(101, 2))
    g = ad.vmap(ad.grad(f))(pts)
    for p, row in zip(pts, g):
        expected = [p[1], p[0]] if p[0] > 0 else [-1.0, math.cos(p[1])]
        np.testing.assert_allclose(row, expected, rtol=1e-14)


def test_vmap_of_jacobian_and_hvp():
    def f(x):
        return np.array([x[0] ** 2 * x[1], ad.exp(x[1])])

    pts = RNG.normal(size=(30, 2))
    jac = ad.vmap(ad.jacobian(f))(pts)
    assert jac.shape == (30, 2, 2)
    for p, j in zip(pts, jac):
        np.testing.assert_allclose(j, [[2 * p[0] * p[1], p[0] ** 2], [0, math.exp(p[1])]])
    v = np.array([1.0, -2.0])
    hv = ad.vmap(ad.hvp(lambda x: x[0] ** 3 * x[1]), in_axes=(0, None))(pts, v)
    for p, row in zip(pts, hv):
        h = np.array([[6 * p[0] * p[1], 3 * p[0] ** 2], [3 * p[0] ** 2, 0.0]])
        # (h @ v cancels: its rounding is that of its terms)
        np.testing.assert_allclose(row, h @ v, rtol=1e-13, atol=1e-14 * np.abs(h).sum())


def test_closed_over_data():
    scale = np.array([1.0, 2.0, 3.0])

    def f(x):
        return (scale * x * x).sum()

    vg = ad.vmap(ad.grad(f))
    np.testing.assert_allclose(vg(XS), 2 * scale * XS, rtol=1e-15)
    scale[:] = [-1.0, 0.5, 0.0]
    np.testing.assert_allclose(vg(XS), 2 * scale * XS, rtol=1e-15)


def test_bad_in_axes_and_lengths_are_explained():
    with pytest.raises(ValueError, match="different lengths"):
        ad.vmap(loss)(W, XS, YS[:10])
    with pytest.raises(ValueError, match="one per argument"):
        ad.vmap(loss, in_axes=(None, 0))(W, XS, YS)
    with pytest.raises(ValueError, match="no argument is mapped"):
        ad.vmap(loss, in_axes=None)(W, XS[0], 1.0)
    with pytest.raises(ValueError, match="is a number"):
        ad.vmap(loss, in_axes=(None, 0, 0))(W, XS, 1.0)
    with pytest.raises(TypeError, match="in_axes"):
        ad.vmap(loss, in_axes="rows")


def test_cuda_without_a_gpu_says_what_to_install():
    from numba import cuda

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or cuda.is_available():
        pytest.skip("a GPU or the simulator is here: the error is not raised")
    with pytest.raises(RuntimeError, match="adcompile\\[cuda\\]"):
        ad.vmap(ad.grad(loss), in_axes=(None, 0, 0), device="cuda")(W, XS, YS)


def test_cuda_under_the_simulator_matches_the_cpu():
    script = textwrap.dedent(
        """
        import math
        import numpy as np
        import adcompile as ad

        def loss(w, x, y):
            return (ad.tanh(x @ w) - y) ** 2

        rng = np.random.default_rng(1)
        w, xs, ys = rng.normal(size=3), rng.normal(size=(40, 3)), rng.normal(size=40)
        g = ad.vmap(ad.grad(loss), in_axes=(None, 0, 0), device="cuda")(w, xs, ys)
        for x, y, row in zip(xs, ys, g):
            t = math.tanh(x @ w)
            np.testing.assert_allclose(row, 2 * (t - y) * (1 - t * t) * x, rtol=1e-13)
        print("ok", g.shape)
        """
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ok (40, 3)" in run.stdout


def test_vmap_inside_grad_as_jax_writes_a_batched_loss():
    def batch_loss(w, xs, ys):
        return ad.vmap(loss, in_axes=(None, 0, 0))(w, xs, ys).mean()

    expected = np.mean([loss_grad(W, x, y) for x, y in zip(XS[:40], YS[:40])], axis=0)
    np.testing.assert_allclose(ad.grad(batch_loss)(W, XS[:40], YS[:40]), expected, rtol=1e-13)


def test_vmap_of_vmap():
    m = RNG.normal(size=(4, 5, 2))
    got = ad.vmap(ad.vmap(lambda p: p[0] * ad.exp(p[1])))(m)
    np.testing.assert_allclose(got, m[..., 0] * np.exp(m[..., 1]), rtol=1e-15)


def test_vmap_of_grad_with_a_shared_batch_of_16_rows_or_more():
    """A shared argument of 16 rows or more makes the inner gradient's code generic in
    the batch length (an ``AtLength``); vmap sizes its outputs from it (it raised
    AttributeError: 'AtLength' object has no attribute 'n_out')."""

    def f(w, X):
        return np.mean((X @ w) ** 2)

    W = np.random.default_rng(0).normal(size=(5, 3))
    for rows in (16, 20, 33):
        X = np.random.default_rng(rows).normal(size=(rows, 3))
        g = ad.vmap(ad.grad(f), in_axes=(0, None))(W, X)
        want = np.array([2 * X.T @ (X @ w) / rows for w in W])  # d/dw mean((Xw)^2)
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)
