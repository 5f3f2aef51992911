"""Arguments as JAX takes them (issue 28, items 1, 4, 9, 10, 17): pytrees of
arrays and numbers, static arguments, float32 in and out, and the checks of
``hvp``'s vector and of a non-scalar result.

Every gradient is compared with central finite differences of the plain
Python function on floats, or with a hand-derived formula.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import adcompile as ad

RNG = np.random.default_rng(3)


def fd_leaf(f, args, path, h=1e-6):
    """d f / d (the leaf at ``path`` of ``args``): central differences, element-wise."""

    def get(tree, p):
        for k in p:
            tree = tree[k]
        return tree

    def put(tree, p, value):
        if not p:
            return value
        k, rest = p[0], p[1:]
        if isinstance(tree, dict):
            new = dict(tree)
            new[k] = put(tree[k], rest, value)
            return new
        items = list(tree)
        items[k] = put(items[k], rest, value)
        return type(tree)(*items) if hasattr(tree, "_fields") else type(tree)(items)

    leaf = get(args, path)
    base = np.array(leaf, dtype=np.float64)
    out = np.zeros(base.shape)
    for idx in np.ndindex(base.shape):
        hi, lo = base.copy(), base.copy()
        hi[idx] += h
        lo[idx] -= h
        as_leaf = (lambda a: a) if isinstance(leaf, np.ndarray) else float
        out[idx] = (f(*put(args, path, as_leaf(hi))) - f(*put(args, path, as_leaf(lo)))) / (2 * h)
    return out if isinstance(leaf, np.ndarray) else float(out)


def loss(params, X, y):
    z = X @ params["W"] + params["b"]
    return np.mean((z - y) ** 2) + 0.1 * np.sum(params["W"] ** 2)


def test_a_dict_of_arrays_and_numbers_gives_a_dict_gradient():
    X, y = RNG.normal(size=(6, 3)), RNG.normal(size=6)
    params = {"W": RNG.normal(size=3), "b": 0.3}
    vg = ad.value_and_grad(loss)
    value, g = vg(params, X, y)
    assert set(g) == {"W", "b"} and isinstance(g, dict)
    assert isinstance(g["W"], np.ndarray) and g["W"].shape == (3,)
    assert isinstance(g["b"], float)
    assert value == pytest.approx(loss(params, X, y), rel=1e-12)
    args = (params, X, y)
    np.testing.assert_allclose(g["W"], fd_leaf(loss, args, (0, "W")), rtol=1e-6)
    assert g["b"] == pytest.approx(fd_leaf(loss, args, (0, "b")), rel=1e-6)
    # hand-derived: d/db mean((z - y)^2) = mean(2 (z - y))
    z = X @ params["W"] + params["b"]
    assert g["b"] == pytest.approx(np.mean(2 * (z - y)), rel=1e-12)
    # a new point: no new trace, a fresh answer
    params2 = {"W": RNG.normal(size=3), "b": -1.2}
    value2, g2 = vg(params2, X, y)
    assert value2 == pytest.approx(loss(params2, X, y), rel=1e-12)
    np.testing.assert_allclose(g2["W"], fd_leaf(loss, (params2, X, y), (0, "W")), rtol=1e-6)
    assert sum(v.traces for v in vg.variants) == 1


def test_nested_tuples_lists_and_namedtuples():
    Layer = namedtuple("Layer", "w b")

    def f(layers, s):
        first, rest = layers
        total = np.sum(first.w * first.b) * s
        for w in rest:
            total = total + ad.tanh(np.sum(w)) * s
        return total

    layers = (Layer(RNG.normal(size=2), RNG.normal(size=2)), [RNG.normal(size=3), 0.4])
    g, gs = ad.grad(f, argnums=(0, 1))(layers, 1.5)
    assert isinstance(g, tuple) and isinstance(g[0], Layer) and isinstance(g[1], list)
    args = (layers, 1.5)
    np.testing.assert_allclose(g[0].w, fd_leaf(f, args, (0, 0, 0)), rtol=1e-6)
    np.testing.assert_allclose(g[0].b, fd_leaf(f, args, (0, 0, 1)), rtol=1e-6)
    np.testing.assert_allclose(g[1][0], fd_leaf(f, args, (0, 1, 0)), rtol=1e-6)
    assert g[1][1] == pytest.approx(fd_leaf(f, args, (0, 1, 1)), rel=1e-6)
    assert gs == pytest.approx(f(layers, 1.0), rel=1e-12)  # f is linear in s


def test_a_list_of_arrays_and_an_array_changed_in_place():
    f = lambda ws: sum(np.sum(w**2) for w in ws)  # noqa: E731
    ws = [RNG.normal(size=2), RNG.normal(size=(2, 2))]
    grad = ad.grad(f)
    g = grad(ws)
    assert [x.shape for x in g] == [(2,), (2, 2)]
    np.testing.assert_allclose(g[0], 2 * ws[0], rtol=1e-12)
    np.testing.assert_allclose(g[1], 2 * ws[1], rtol=1e-12)
    ws[1] += 1.0  # a leaf is an input, read at every call
    np.testing.assert_allclose(grad(ws)[1], 2 * ws[1], rtol=1e-12)


def test_a_list_of_numbers_is_an_array_as_before():
    g = ad.grad(lambda x: x[0] * x[1] ** 2)([1.5, 2.0])
    np.testing.assert_allclose(g, [4.0, 6.0], rtol=1e-12)


def test_a_pytree_leaf_that_is_not_a_number_is_named():
    with pytest.raises(
        TypeError, match=r"argument 0 of lambda\(\), at \['name'\], is a str.*static_argnums"
    ):
        ad.grad(lambda d: d["x"] * 2.0)({"x": 1.0, "name": "a"})


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float32_in_float32_out(dtype):
    x = np.array([0.1, 0.7, 1.3], dtype=dtype)
    f = lambda x: np.sum(np.sin(x) * x)  # noqa: E731
    g = ad.grad(f)(x)
    assert g.dtype == dtype
    x64 = x.astype(np.float64)
    want = np.cos(x64) * x64 + np.sin(x64)  # computed in float64, then rounded once
    rtol = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(g, want, rtol=rtol)  # float64's answer, rounded once
    value, g2 = ad.value_and_grad(f)(x)
    assert g2.dtype == dtype and value == pytest.approx(f(x64), rel=1e-12)
    scalar = ad.grad(lambda a: a**3)(dtype(2.0))
    assert type(scalar) is dtype and scalar == 12.0
    tree = ad.grad(lambda d: np.sum(d["x"] ** 2))({"x": x})
    assert tree["x"].dtype == dtype


def rows(x, n):
    return sum(x[i] ** 2 for i in range(n))


def test_static_argnums_sizes_a_range():
    x = np.array([1.0, 2.0, 3.0])
    grad = ad.grad(rows, static_argnums=1)
    np.testing.assert_allclose(grad(x, 2), [2.0, 4.0, 0.0])
    np.testing.assert_allclose(grad(x, 3), [2.0, 4.0, 6.0])  # a new value: traced again
    np.testing.assert_allclose(grad(x, 2), [2.0, 4.0, 0.0])
    assert grad.traces == 2  # (one for each value, counted by the transform called)
    assert ad.jit(rows, static_argnums=(1,))(x, 3) == 14.0
    value, g = ad.value_and_grad(rows, static_argnums=-1)(x, 1)
    assert value == 1.0 and list(g) == [2.0, 0.0, 0.0]


def test_an_int_keyword_is_static():
    x = np.array([1.0, 2.0, 3.0])
    grad = ad.grad(rows)
    np.testing.assert_allclose(grad(x, n=2), [2.0, 4.0, 0.0])
    np.testing.assert_allclose(grad(x, n=1), [2.0, 0.0, 0.0])
    np.testing.assert_allclose(grad(x, n=2), [2.0, 4.0, 0.0])
    assert grad.traces == 2


def test_static_argnums_errors():
    x = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="both differentiated .* and static"):
        ad.grad(rows, argnums=1, static_argnums=1)(x, 1)
    with pytest.raises(TypeError, match="not hashable"):
        ad.grad(lambda x, opts: x[0] * 2.0, static_argnums=1)(x, [1, 2])
    with pytest.raises(TypeError, match="static_argnums must be an int"):
        ad.grad(rows, static_argnums="n")
    with pytest.raises(ValueError, match="static_argnums=.* does not fit"):
        ad.grad(rows, static_argnums=5)(x, 1)


def test_hvp_checks_its_vector():
    f = lambda x: np.sum(x**3)  # noqa: E731
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(ad.hvp(f)(x, np.ones(3)), 6 * x)  # H = diag(6 x)
    for v in (np.ones(4), np.ones((3, 1)), np.ones((1, 3)), np.ones(2), 1.0):
        with pytest.raises(ValueError, match="v must have x's shape"):
            ad.hvp(f)(x, v)


def test_grad_of_a_function_returning_a_list_names_jacobian():
    with pytest.raises(TypeError, match=r"returned a list; .*ad\.jacobian"):
        ad.grad(lambda x: [x[0], x[1]])(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match=r"shape \(2,\).*ad\.jacobian"):
        ad.grad(lambda x: x * 2.0)(np.array([1.0, 2.0]))


def _cross_entropy(W, X, y):  # noqa: N803
    z = X @ W
    z = z - np.max(z, axis=1, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return -np.mean(logp[np.arange(len(y)), y])


@pytest.mark.parametrize("n", [4, 300])  # (element by element, and at array level)
def test_integer_labels_index_as_data(n: int) -> None:
    """An integer array that is not differentiated (labels) is data: ``f`` reads it as
    it is, so it indexes; new labels trace again, old ones are served again."""
    rng = np.random.default_rng(3)
    W, X = rng.normal(size=(5, 3)), rng.normal(size=(n, 5))  # noqa: N806
    vg = ad.value_and_grad(_cross_entropy)
    for y in (rng.integers(0, 3, n), rng.integers(0, 3, n)):
        v, g = vg(W, X, y)
        z = X @ W
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        assert v == pytest.approx(_cross_entropy(W, X, y), rel=1e-12)
        np.testing.assert_allclose(g, X.T @ (p - np.eye(3)[y]) / n, rtol=1e-10, atol=1e-13)
    y[0] = (y[0] + 1) % 3  # (changed in place: its contents, not the object, count)
    assert vg(W, X, y)[0] == pytest.approx(_cross_entropy(W, X, y), rel=1e-12)


def test_integer_arrays_compute_as_plain_numpy_and_new_contents_warn(monkeypatch) -> None:  # noqa: ANN001
    from adcompile.api import transform

    small = np.array([100, 100], dtype=np.int8)  # int8 wraps: plain Python's answer
    assert ad.jit(lambda x: np.sum(x * x))(small) == np.sum(small * small) == 32
    np.testing.assert_allclose(ad.grad(lambda x: np.sum(x**3))(np.arange(3)), [0.0, 3.0, 12.0])
    monkeypatch.setattr(transform, "INT_DATA_WARN", 2)
    monkeypatch.setattr(transform, "INT_DATA_KEEP", 2)
    f = ad.jit(lambda x, k: np.sum(x[k]))
    x = np.arange(5.0)
    with pytest.warns(ad.RetraceWarning, match=r"integer arrays \(k\).*one-hot"):
        for k in ([0], [1], [2, 3], [4], [0], [2, 3]):  # (the first ones made again)
            assert f(x, np.array(k)) == sum(k)
    assert len(f.variants) <= 2
