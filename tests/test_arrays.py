"""Array-level tracing (issue 30, first step): one tape node per NumPy call.

Every compiled value is checked against the same function run by plain NumPy,
and every gradient against central finite differences along a random direction;
each case also checks that it was traced at array level (not element by
element), so that a silent fallback cannot pass for the feature.
"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import pytest
from conftest import central_diff

import adcompile as ad
from adcompile.api import captured
from adcompile.trace import numpy_api  # noqa: F401  (the rules ArrayTrace's arrays use)
from adcompile.trace.arrays import ArrayTrace, NotArrayLevel

RNG = np.random.default_rng(30)


@pytest.fixture(autouse=True)
def _small_arrays_at_array_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays of every size are tried at array level here (by default only those of
    ``ARRAY_LEVEL_MIN`` numbers; test_small_and_large_arrays checks that)."""
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)


def test_small_and_large_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 256)
    f = lambda x: np.sum(np.tanh(x) ** 2)  # noqa: E731
    for n, level in ((255, False), (256, True)):
        x = RNG.normal(size=n)
        vg = ad.value_and_grad(f)
        v, g = vg(x)
        assert v == pytest.approx(f(x), rel=1e-12)
        np.testing.assert_allclose(g, 2 * np.tanh(x) * (1 - np.tanh(x) ** 2), rtol=1e-12)
        assert _array_level(vg) == level
    # np.logaddexp.reduce has no loop for Values: small arrays are traced at array
    # level then; its gradient is the softmax
    vg = ad.value_and_grad(lambda x: np.logaddexp.reduce(x))
    x = RNG.normal(size=5)
    v, g = vg(x)
    assert v == pytest.approx(np.log(np.sum(np.exp(x))), rel=1e-12)
    np.testing.assert_allclose(g, np.exp(x) / np.sum(np.exp(x)), rtol=1e-12)
    assert _array_level(vg)
    # np.var works on Values too (each is its own conjugate)
    vg = ad.value_and_grad(lambda x: np.var(x))
    v, g = vg(x)
    assert v == pytest.approx(np.var(x), rel=1e-12)
    np.testing.assert_allclose(g, 2 * (x - x.mean()) / 5, rtol=1e-12)
    assert not _array_level(vg)


def _array_level(vg: ad.Transformed) -> bool:
    return vg.array_refused is None and "NumPy calls on whole arrays" in ad.explain(vg)


def _check(f, *args, argnums=0, rtol=1e-6, exact=True):  # noqa: ANN001, ANN202
    """Compiled value == plain NumPy's; gradient . d == central difference."""
    vg = ad.value_and_grad(f, argnums=argnums)
    v, g = vg(*args)
    want = f(*args)
    if exact:
        assert v == pytest.approx(float(want), rel=1e-12, abs=1e-12)
    else:
        assert v == pytest.approx(float(want), rel=1e-9, abs=1e-12)
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    grads = g if isinstance(argnums, tuple) else (g,)
    for k, gk in zip(nums, grads):
        x = np.asarray(args[k], dtype=float)
        assert np.shape(gk) == x.shape
        d = RNG.normal(size=x.shape)

        def along(y, k=k):  # noqa: ANN001, ANN202
            a = list(args)
            a[k] = y
            return float(f(*a))

        fd = central_diff(along, x, d)
        assert float(np.sum(np.asarray(gk) * d)) == pytest.approx(fd, rel=rtol, abs=1e-7)
    assert _array_level(vg), vg.array_refused
    return vg


X = RNG.normal(size=(6, 4))
W = RNG.normal(size=(4, 3))
V = RNG.normal(size=5)
V_LONG = RNG.normal(size=300)  # (arrays of ARRAY_LEVEL_MIN numbers are tried at array level)


def test_mlp_softmax_cross_entropy_step():
    Xb = RNG.normal(size=(16, 20))
    Y = np.eye(3)[RNG.integers(0, 3, 16)]
    W1 = RNG.normal(size=(20, 8)) * 0.3
    W2 = RNG.normal(size=(8, 3)) * 0.3

    def loss(W1, W2, X, Y):  # noqa: ANN001, ANN202, N803
        h = np.maximum(X @ W1, 0.0)
        z = h @ W2
        m = np.max(z, axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.sum(np.exp(z - m), axis=1))
        return np.mean(lse - np.sum(z * Y, axis=1))

    vg = _check(loss, W1, W2, Xb, Y, argnums=(0, 1))
    assert "@" in vg.source and "np.sum" in vg.source


def test_trace_size_does_not_grow_with_the_data():
    def loss(w, X, y):  # noqa: ANN001, ANN202, N803
        return np.mean(np.log1p(np.exp(-y * (X @ w))))

    sizes = []
    for n in (10, 1000):
        rec = ArrayTrace()
        ins = [rec.input(s) for s in ((5,), (n, 5), (n,))]
        sizes.append(len(rec.tape([loss(*ins)], ["w", "X", "y"]).nodes))
    assert sizes[0] == sizes[1]
    Xb, y = RNG.normal(size=(1000, 5)), np.sign(RNG.normal(size=1000))
    _check(loss, RNG.normal(size=5), Xb, y)


CASES = {
    "sum axis keepdims": (lambda x: np.sum(np.sum(x**2, axis=0, keepdims=True) * x), X),
    "sum negative axis": (lambda x: np.sum(np.sin(x).sum(axis=-1) ** 2), X),
    "mean": (lambda x: np.mean(x, axis=1) @ np.arange(6.0), X),
    "prod with a zero": (lambda x: np.prod(x, axis=1).sum(), X * np.array([1, 0, 1, 1.0])),
    "max with axis": (lambda x: np.max(x, axis=1).sum() + x.min(), X),
    "var std": (lambda x: np.var(x, axis=0).sum() + np.std(x) + x.var(ddof=1), X),
    "norm": (lambda x: np.linalg.norm(x) + np.linalg.norm(x, axis=1).sum(), X),
    "logaddexp": (lambda x: np.sum(np.logaddexp(x, 2 * x)), X),
    "log-sum-exp": (lambda x: np.log(np.sum(np.exp(x - x.max()))) + x.max(), V),
    "matmul shapes": (lambda x: (x @ W).sum() + (V[:4] @ x.T).sum() + x[0] @ x[1], X),
    "batched matmul": (lambda x: np.sum(np.stack([x, 2 * x]) @ W), X),
    "dot outer tensordot": (
        lambda x: np.dot(x, W).sum() + np.outer(x[0], V).sum() + np.tensordot(x, x, 2),
        X,
    ),
    "einsum": (lambda x: np.einsum("ij,jk->ik", x, W).sum() + np.einsum("ij,ij->", x, x), X),
    "slices": (lambda x: np.sum((x[1:, ::2] - x[:-1, 1::2]) ** 2) + x[2].sum(), X),
    "integer-array index": (lambda x: np.sum(x[[0, 2, 2, 5]] ** 2) + np.sum(x[:, [3, 0]]), X),
    "an index of two equal arrays": (lambda x: np.sum(x[[0, 1, 2], [0, 1, 2]] ** 2), X),
    "the diagonal written": (lambda x: _diagonal_written(x), X),
    "rows written twice": (lambda x: _written_twice(x), X),
    "constant mask": (lambda x: np.sum(x[np.arange(24).reshape(6, 4) % 3 == 0] ** 3), X),
    "reshapes": (
        lambda x: (
            np.sum(x.reshape(4, 6) @ np.ones(6))
            + x.ravel() @ np.arange(24.0)
            + np.sum(np.expand_dims(x, 0).squeeze(0).T ** 2)
        ),
        X,
    ),
    "broadcast_to": (lambda x: np.sum(np.broadcast_to(x[0], (3, 4)) * W.T), X),
    "concatenate": (lambda x: np.sum(np.concatenate([x, x**2], axis=1) ** 2), X),
    "hstack vstack": (lambda x: np.sum(np.hstack([x[0], x[1]]) ** 2) + np.vstack([x, x]).sum(), X),
    "cumsum diff": (lambda x: np.sum(np.cumsum(x, axis=0) ** 2) + np.sum(np.diff(x) ** 2), X),
    "diag diagonal trace": (
        lambda x: (
            np.sum(np.diag(x) ** 2)
            + np.sum(np.diag(x, 2) * np.diag(x, -1)[:2])
            + np.trace(x[:, :4] ** 2, -1) * np.trace(x)
            + np.sum(x.diagonal(1) ** 3)
            + np.sum(np.diagonal(x, 1, 1, 0) * np.arange(1.0, 5.0))  # (axes swapped)
            + np.trace(x**2, -1, -1, -2)
        ),
        X,
    ),
    "diag of a vector": (
        lambda x: (
            np.sum((np.diag(x[0]) @ x.T) ** 2) + np.sum(np.diag(x[1], 1) * np.diag(x[2], -1))
        ),
        X,
    ),
    "inner of matrices": (
        lambda x: np.sum(np.inner(x, x[:2] ** 2)) + np.sum(np.inner(x[0], x)),
        X,
    ),
    "where as data": (lambda x: np.sum(np.where(x > 0, x**2, -x)), X),
    "clip": (lambda x: np.sum(np.clip(x, -0.5, 0.7) ** 2), X),
    "abs sign floor round": (
        lambda x: np.sum(np.abs(x) * np.sign(x) + np.floor(x) + np.round(x, 1)),
        X,
    ),
    "zeros_like then slices written": (lambda x: _shifted(x), V),
    "list operand and plain floats": (lambda x: np.sum((x[0] - [1.0, 2, 3, 4]) ** 2) * 0.5, X),
    "a few elements": (lambda x: x[0, 0] * np.sum(x[1] ** 2) + x[2, 3] ** 2, X),
    "ad functions": (lambda x: np.sum(ad.tanh(x) + ad.sigmoid(x) + ad.relu(x) ** 2), X),
    "operators": (lambda x: np.sum((2.0 - x) / (1.5 + x**2) + abs(-x) - (x // 1.0) + x % 0.5), X),
}


def _written_twice(x):  # noqa: ANN001, ANN202
    z = np.zeros((5, 4))
    z[[0, 0, 3]] = x[:3] ** 2  # row 0 written twice: NumPy keeps the last
    z[[1, 4, 1]] += x[3:6]  # (z[i] = z[i] + v: the last again)
    return np.sum(np.tanh(z) ** 2)


def _diagonal_written(x):  # noqa: ANN001, ANN202
    a = np.zeros((4, 4))
    a[[0, 1, 2, 3], [0, 1, 2, 3]] = x[1] ** 2
    return np.sum(a @ x[2])


def _shifted(x):  # noqa: ANN001, ANN202
    z = np.zeros_like(x)
    z[1:] = x[:-1] ** 2
    z[0] = 3.0
    return np.sum(z * x)


@pytest.mark.parametrize("name", list(CASES))
def test_numpy_function_value_and_gradient(name):
    f, x = CASES[name]
    exact = name not in ("logaddexp", "dot outer tensordot")
    _check(f, x, exact=exact)


def test_rounding_ops_have_zero_derivative_as_in_jax():
    g = ad.grad(lambda x: np.sum(np.floor(x) + np.round(x)))(X)
    assert np.array_equal(g, np.zeros_like(X))


def test_huber_loss_under_lbfgsb_compiles_once():
    from scipy.optimize import minimize

    t = np.linspace(0, 1, 200)
    y = 3 * t + 1 + RNG.standard_t(2, size=200) * 0.3

    def huber(p, t, y, delta=0.5):  # noqa: ANN001, ANN202
        r = p[0] * t + p[1] - y
        return np.mean(np.where(np.abs(r) <= delta, 0.5 * r**2, delta * (np.abs(r) - 0.5 * delta)))

    def hand(p):  # noqa: ANN001, ANN202
        r = p[0] * t + p[1] - y
        dr = np.where(np.abs(r) <= 0.5, r, 0.5 * np.sign(r)) / len(r)
        return huber(p, t, y), np.array([dr @ t, dr.sum()])

    vg = ad.value_and_grad(huber)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ad.RetraceWarning)
        res = minimize(vg, np.zeros(2), args=(t, y), jac=True, method="L-BFGS-B")
    ref = minimize(hand, np.zeros(2), jac=True, method="L-BFGS-B")
    assert vg.traces == 1 and res.nfev > 5
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-6)
    for p in (np.array([0.3, -2.0]), res.x):
        v, g = vg(p, t, y)
        hv, hg = hand(p)
        assert v == pytest.approx(hv, rel=1e-12)
        np.testing.assert_allclose(g, hg, rtol=1e-10, atol=1e-14)
    # the mean's derivative 1 / n, selected by np.where, is a number, not n copies
    # of it (in the code for every batch length, a number in n)
    assert "# Array code" in vg.source  # (the NumPy code: loop nests come at call 100)
    assert "(1.0 / n), 0.0)" in vg.source and "np.full" not in vg.source
    for m in (37, 200, 611):  # other lengths, through the same code
        tm = np.linspace(0, 1, m)
        ym = 2 * tm - 1 + np.cos(7 * tm)
        p = np.array([0.4, -0.3])
        v, g = vg(p, tm, ym)
        r = p[0] * tm + p[1] - ym
        dr = np.where(np.abs(r) <= 0.5, r, 0.5 * np.sign(r)) / m
        assert v == pytest.approx(huber(p, tm, ym), rel=1e-12)
        np.testing.assert_allclose(g, [dr @ tm, dr.sum()], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize(
    ("f", "why"),
    [
        (lambda x: sum(x[i] ** 2 for i in range(len(x))), "single elements"),
        (lambda x: np.sum(x) if np.sum(x) > 0 else -np.sum(x**2), "bool()"),
        (lambda x: sum(v**2 for v in x.tolist()), "tolist()"),
        (lambda x: np.sum(np.sort(x) * np.arange(300.0)), "np.sort"),
    ],
)
def test_what_arrays_do_not_take_is_traced_element_by_element(f, why):
    for x in (V_LONG, -V_LONG):
        vg = ad.value_and_grad(f)
        v, g = vg(x)
        assert v == pytest.approx(f(x), rel=1e-12)
        fd = central_diff(f, x, np.ones(len(x)))
        assert g.sum() == pytest.approx(fd, rel=1e-6)
        assert why in vg.array_refused


def test_writes_are_seen_through_views_as_numpy_sees_them():
    def f(x):  # noqa: ANN001, ANN202
        z = x * 1.0
        w = z[1:]  # a view of z: NumPy's w sees the write below
        z[1] = 5.0
        return np.sum(w * x[:-1])

    def g(x):  # noqa: ANN001, ANN202
        x[0] = 1.0  # writes into the caller's array
        return np.sum(x**2)

    vg = ad.value_and_grad(f)
    v, grad = vg(V)
    assert v == pytest.approx(f(V.copy()), rel=1e-12)
    assert vg.array_refused is None  # (at array level: the view made again of z)
    d = RNG.normal(size=5)
    assert grad @ d == pytest.approx(central_diff(f, V, d), rel=1e-6)
    vg2 = ad.grad(g)
    vg2(V.copy())
    assert "argument" in vg2.array_refused


def test_global_data_read_afresh_or_traced_again():
    global DATA
    DATA = RNG.normal(size=(6, 4))

    def f(w):  # noqa: ANN001, ANN202
        return np.sum((DATA @ w) ** 2)

    w = RNG.normal(size=4)
    vg = ad.value_and_grad(f)
    for _ in range(2):
        v, g = vg(w)
        assert v == pytest.approx(f(w), rel=1e-12)
        np.testing.assert_allclose(g, 2 * DATA.T @ (DATA @ w), rtol=1e-12)
        DATA = DATA * 2.0
    assert vg.array_refused is None


def test_random_draws_inside_are_refused_by_name():
    def f(x):  # noqa: ANN001, ANN202
        return np.sum(x * np.random.normal(size=x.shape))

    with pytest.raises(Exception, match="random"):
        ad.grad(f)(V)


def test_jit_and_grad_at_array_level():
    f = lambda x: np.sum(np.tanh(x @ W) ** 2)  # noqa: E731
    assert ad.jit(f)(X) == pytest.approx(f(X), rel=1e-12)
    g = ad.grad(f)(X)
    t = np.tanh(X @ W)
    np.testing.assert_allclose(g, (2 * t * (1 - t**2)) @ W.T, rtol=1e-12)


def test_astype_float32_is_refused_not_computed_in_float64():
    # float32 rounds the values: array code in float64 would answer otherwise
    f = lambda x: np.sum(x.astype(np.float32).astype(float) * x)  # noqa: E731
    vg = ad.value_and_grad(f)
    with pytest.raises(TypeError, match="float"):
        vg(X + 1e-9)
    assert "astype(float32)" in vg.array_refused


def test_the_recorder_refuses_concrete_uses():
    rec = ArrayTrace()
    x = rec.input((3,))
    for use in (bool, float, int, lambda v: v.tolist(), lambda v: v.item(), np.asarray):
        with pytest.raises(NotArrayLevel):
            use(x)


def test_numba_and_export_trace_element_by_element_for_themselves():
    f = lambda x: np.sum(np.tanh(x @ x.T) ** 2)  # noqa: E731
    vg = ad.value_and_grad(f)
    v, g = vg(X)
    assert _array_level(vg)
    fn = vg.numba(X)  # array code has no Numba function: made from the Values' tape
    out = np.empty(1 + X.size)
    assert fn(X.ravel(), out)
    assert out[0] == pytest.approx(v, rel=1e-12)
    np.testing.assert_allclose(out[1:], g.ravel(), rtol=1e-12)
    namespace: dict = {}
    exec(ad.export(f, X), namespace)  # noqa: S102
    ev, eg = namespace["lambda_"](X)
    assert ev == pytest.approx(v, rel=1e-12)
    np.testing.assert_allclose(eg, g, rtol=1e-12)


def test_unary_plus_and_positive_make_new_arrays():
    def f(x):  # noqa: ANN001, ANN202
        z = x * 1.0
        y, w = +z, np.positive(z)
        y[0] = 5.0  # NumPy: y and w are new arrays; z stays as it was
        w[1] = 7.0
        return np.sum(z * x) + np.sum(y) + np.sum(w)

    _check(f, V)


def _filled_vector(x):  # noqa: ANN001, ANN202
    z = np.zeros(len(x))
    z[0] = x[0] * 2.0
    z[1:] = x[1:] ** 2 - x[:-1]
    return np.sum(np.tanh(z) ** 2)


def _filled_columns(x):  # noqa: ANN001, ANN202
    out = np.empty((len(x), 3))
    out[:, 0] = x
    out[:, 1] = np.sin(x)
    out[:, 2] = 1.0
    acc = np.full(3, 0.5)
    acc += out.T @ out[:, 1]
    for i in range(4):  # a few single elements
        acc[i % 3] = acc[i % 3] * x[i]
    return np.sum(acc**2) + np.sum(np.ones(len(x)) * x)


def _repeated_writes(x):  # noqa: ANN001, ANN202
    # an index that repeats an element: NumPy keeps the last write (the others take
    # no gradient), for =, for += (z[i] = z[i] + v) and on a copy of an argument
    z = np.zeros(4)
    z[[0, 0, 2]] = x[:3] ** 2
    z[[1, 3, 1]] += x[3:6]
    y = x * 1.0
    y[np.array([2, 0, 2])] = np.tanh(x[:3])
    return np.sum(np.tanh(z) ** 2) + np.sum(y**2)


@pytest.mark.parametrize("f", [_filled_vector, _filled_columns, _repeated_writes])
@pytest.mark.parametrize("n", [300, 12])
def test_new_arrays_filled_with_traced_values(f, n: int) -> None:  # noqa: ANN001
    # np.zeros / np.empty / np.full / np.ones, then item and slice writes: at array level
    # (12 numbers: element by element fails, where a float array cannot hold a Value)
    x = RNG.normal(size=n)
    vg = ad.value_and_grad(f)
    v, g = vg(x)
    assert _array_level(vg)
    assert v == pytest.approx(f(x), rel=1e-12)
    d = RNG.normal(size=n)
    assert float(g @ d) == pytest.approx(central_diff(f, x, d), rel=1e-6, abs=1e-8)
    fresh = RNG.normal(size=n)  # the same code at a fresh point
    v2, g2 = vg(fresh)
    assert v2 == pytest.approx(f(fresh), rel=1e-12) and vg.traces == 1
    assert float(g2 @ d) == pytest.approx(central_diff(f, fresh, d), rel=1e-6, abs=1e-8)
    h = ad.hvp(f)(x, d)
    want = central_diff(lambda t: ad.grad(f)(x + t[0] * d), [0.0], [1.0])
    np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-7)


def test_new_arrays_are_numpys_outside_the_trace() -> None:
    made: dict[str, object] = {}
    zeros = np.zeros

    def other_thread() -> None:
        made["other"] = np.zeros(3)

    def f(x):  # noqa: ANN001, ANN202
        made["int"] = np.zeros(3, dtype=np.int64)  # (not float: NumPy's)
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        z = np.zeros(x.shape)
        z[2:] = x[2:]
        return np.sum(z**2)

    x = RNG.normal(size=300)
    g = ad.grad(f)(x)
    np.testing.assert_allclose(g, np.where(np.arange(300) >= 2, 2 * x, 0.0), rtol=1e-12)
    assert type(made["other"]) is np.ndarray and type(made["int"]) is np.ndarray
    assert np.zeros is zeros and type(np.zeros(2)) is np.ndarray


def test_jit_of_arrays_and_tuples_at_array_level():
    def f(X):  # noqa: ANN001, ANN202
        h = np.tanh(X @ W)
        return h, (np.sum(h, axis=0), 2.0)

    jf = ad.jit(f)
    for X_ in (X, X + 0.5):
        got, want = jf(X_), f(X_)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
        np.testing.assert_allclose(got[1][0], want[1][0], rtol=1e-13)
        assert got[1][1] == 2.0 and isinstance(got[1], tuple)
    assert _array_level(jf) and jf.traces == 1


@pytest.mark.parametrize(
    "split",
    [
        lambda x: np.split(x[:10], 5),
        lambda x: np.array_split(x, 3),
        lambda x: np.split(x, [2, 7, 20]),
        lambda x: np.split(x.reshape(1, 11), [4], axis=1),
    ],
)
def test_split_into_parts(split) -> None:  # noqa: ANN001
    def f(x):  # noqa: ANN001, ANN202
        return sum(np.sum(np.sin(p) * p) * (k + 1) for k, p in enumerate(split(x)))

    x = RNG.normal(size=11)
    vg = ad.value_and_grad(f)
    v, g = vg(x)
    assert _array_level(vg) and v == pytest.approx(f(x), rel=1e-13)
    d = RNG.normal(size=11)
    assert float(g @ d) == pytest.approx(central_diff(f, x, d), rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("n", [5, 20])
def test_a_numpy_function_without_a_rule_is_named(n: int) -> None:
    # no array-level rule, and NumPy's own refuses arrays of Values: the error names it
    A = RNG.normal(size=(n, n)) + 10 * np.eye(n)
    with pytest.raises(TypeError, match=r"np\.linalg\.inv.*docs/api\.md") as info:
        ad.grad(lambda X: np.sum(np.linalg.inv(X)))(A)
    assert "UFuncTypeError" in str(info.value)  # (NumPy's own message, kept)
    with pytest.raises(TypeError, match=r"np\.fft\.fft"):
        ad.value_and_grad(lambda x: np.sum(np.abs(np.fft.fft(x))))(A[0])


@pytest.mark.parametrize("n", [5, 300])
@pytest.mark.parametrize(
    ("f", "named"),
    [
        (lambda x: np.sum(x, where=x > 0), r"np\.sum\(\.\.\., where=\.\.\.\)"),
        (lambda x: np.linalg.norm(np.outer(x, x), 2), r"np\.linalg\.norm\(\.\.\., ord=2\)"),
    ],
)
def test_what_neither_level_takes_is_named_not_numpys_error(f, named, n: int) -> None:  # noqa: ANN001
    # the array level refuses it, and NumPy's code fails on arrays of Values (an object
    # loop it lacks, a recursion): the error names the call and points to the docs
    with pytest.raises(TypeError, match=named + r".*docs/api\.md"):
        ad.grad(f)(RNG.normal(size=n))


@pytest.mark.skipif(
    os.environ.get("ADCOMPILE_CHECK", "") not in ("", "0"),
    reason="check mode: its eager run of f writes Values into NumPy's float array",
)
@pytest.mark.parametrize("n", [5, 300])
def test_np_add_at_into_an_array_made_in_f(n: int) -> None:
    """The array level refuses np.add.at; element by element, np.zeros made in f
    holds Values, and NumPy's object loop adds them in (each repeated index twice)."""

    def f(x):  # noqa: ANN001, ANN202
        z = np.zeros(3)
        np.add.at(z, [0, 0, 1], x[:3])
        return np.sum(z**2) + np.sum(x)

    x = RNG.normal(size=n)
    v, g = ad.value_and_grad(f)(x)
    assert v == pytest.approx(f(x), rel=1e-12)
    want = np.ones(n)
    want[:3] += [2 * (x[0] + x[1]), 2 * (x[0] + x[1]), 2 * x[2]]  # (by hand)
    np.testing.assert_allclose(g, want, rtol=1e-12)


@pytest.mark.parametrize("n", [5, 300])
def test_isnan_of_a_traced_array_is_guarded_element_by_element(n: int) -> None:
    def f(x):  # noqa: ANN001, ANN202
        return 1.0 if np.isnan(x).any() else np.sum(x**2)

    vg = ad.value_and_grad(f)
    x = RNG.normal(size=n)
    for point in (x, np.where(np.arange(n) == 1, np.nan, x), x + 1.0):
        v, g = vg(point)
        assert v == pytest.approx(f(point), rel=1e-12)  # nan: 1.0, gradient 0; else 2 x
        want = np.zeros(n) if np.isnan(point).any() else 2 * point
        np.testing.assert_allclose(g, want, rtol=1e-12)


@pytest.mark.parametrize("n", [5, 300])
def test_scipy_expit_is_the_sigmoid(n: int) -> None:
    expit = pytest.importorskip("scipy.special").expit  # (a ufunc named expit)
    x = RNG.normal(size=n)
    vg = ad.value_and_grad(lambda x: np.sum(expit(x) ** 2))
    v, g = vg(x)
    s = 1.0 / (1.0 + np.exp(-x))  # by hand: d/dx s^2 = 2 s^2 (1 - s)
    assert v == pytest.approx(np.sum(s**2), rel=1e-12)
    np.testing.assert_allclose(g, 2 * s * s * (1 - s), rtol=1e-12)
    assert vg.array_refused is None
