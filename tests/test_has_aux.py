"""has_aux=True, as in JAX: the function returns (output, aux)."""

import numpy as np
import pytest

import adcompile as ad


def _loss(w, X, y):
    s = X @ w
    acc = np.mean((s > 0) == (y > 0))
    return np.mean((s - y) ** 2), {"acc": acc, "scores": s, "pair": (acc, [s[0]])}


def _expected(w, X, y):
    s = X @ w
    value = np.mean((s - y) ** 2)
    grad = 2 * X.T @ (s - y) / len(y)
    return value, grad, np.mean((s > 0) == (y > 0)), s


@pytest.mark.parametrize("rows", [3, 300])  # element by element, and at array level
def test_value_and_grad_with_aux_matches_numpy_at_fresh_points(rows):
    rng = np.random.default_rng(rows)
    X, y = rng.normal(size=(rows, 2)), np.sign(rng.normal(size=rows))
    vg = ad.value_and_grad(_loss, has_aux=True)
    for _ in range(4):
        w = rng.normal(size=2)
        (value, aux), grad = vg(w, X, y)
        v, g, acc, s = _expected(w, X, y)
        assert value == pytest.approx(v, rel=1e-12)
        np.testing.assert_allclose(grad, g, rtol=1e-10)
        assert sorted(aux) == ["acc", "pair", "scores"]
        assert aux["acc"] == pytest.approx(acc)
        np.testing.assert_allclose(aux["scores"], s, rtol=1e-12)
        assert isinstance(aux["pair"], tuple) and isinstance(aux["pair"][1], list)
        assert aux["pair"][1][0] == pytest.approx(s[0])


def test_grad_with_aux_of_scalars_and_under_vmap():
    g = ad.grad(lambda x: (x * x * x, x + 1.0), has_aux=True)
    assert g(2.0) == (12.0, 3.0) and g(-1.0) == (3.0, 0.0)
    h = ad.grad(lambda x: (np.sum(x**2), np.sum(x)), has_aux=True)
    grads, aux = ad.vmap(h)(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(grads, 2 * np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(aux, [3.0, 12.0])


def test_aux_follows_branches_like_plain_python():
    def f(x):
        y = x * x
        return y, (1.0 if y > 4 else -1.0)

    vg = ad.value_and_grad(f, has_aux=True)
    for x in (3.0, 1.0, -2.5, 0.5):
        (v, aux), g = vg(x)
        assert (v, aux, g) == (x * x, 1.0 if x * x > 4 else -1.0, 2 * x)


def test_has_aux_needs_a_pair():
    with pytest.raises(TypeError, match=r"has_aux=True.*pair"):
        ad.grad(lambda x: x * x, has_aux=True)(1.0)
    with pytest.raises(TypeError, match="length 3"):
        ad.value_and_grad(lambda x: (x, x, x), has_aux=True)(1.0)


def test_vmap_of_grad_with_a_dict_aux_rebuilds_the_dict():
    def l2(x):
        return np.sum(x**2), {"m": x[0], "t": (x[1], [x[0] * 2])}

    X = np.arange(6.0).reshape(3, 2)
    grads, aux = ad.vmap(ad.grad(l2, has_aux=True))(X)
    np.testing.assert_array_equal(grads, 2 * X)
    np.testing.assert_array_equal(aux["m"], X[:, 0])
    np.testing.assert_array_equal(aux["t"][0], X[:, 1])
    np.testing.assert_array_equal(aux["t"][1][0], 2 * X[:, 0])
    (values, aux), grads = ad.vmap(ad.value_and_grad(l2, has_aux=True))(X)
    np.testing.assert_array_equal(values, np.sum(X**2, axis=1))
