"""Array code generic in the batch length: one program for every number of rows.

A gradient traced at array level whose data arguments share a leading length
is traced, at its first call, at that length, the next two and a far one
(shapes only), and the four NumPy sources are made one program in n
(``emit.array_batch``).
Every other length runs it without a trace, once its first answer there agrees
with the function run on plain numbers. Each answer is held against a
hand-derived gradient, central differences, or plain NumPy, at every length.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import central_diff

import adcompile as ad
from adcompile.api import captured
from adcompile.emit.array_batch import generic_source, lengths

RNG = np.random.default_rng(11)
W1, B1, W2 = RNG.normal(size=(8, 5)), RNG.normal(size=5), RNG.normal(size=(5, 3))


@pytest.fixture(autouse=True)
def _array_level_at_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)


def softmax_mlp(W1, b1, W2, X, Y):  # noqa: ANN001, ANN201
    z = np.tanh(X @ W1 + b1) @ W2
    z = z - np.max(z, axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return -np.mean(np.sum(Y * (z - lse), axis=1)) + 0.01 * np.sum(W1**2)


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    return RNG.normal(size=(n, 8)), np.eye(3)[RNG.integers(0, 3, n)]


def test_one_program_serves_every_batch_length() -> None:
    vg = ad.value_and_grad(softmax_mlp, argnums=(0, 1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RetraceWarning, however many lengths
        for n in [300, 301, 300, *range(2, 40, 3), 1000]:
            X, Y = _data(n)
            v, (g1, gb, g2) = vg(W1, B1, W2, X, Y)
            assert v == pytest.approx(softmax_mlp(W1, B1, W2, X, Y), rel=1e-12)
            d = RNG.normal(size=W1.shape)
            loss = lambda w: softmax_mlp(w.reshape(8, 5), B1, W2, X, Y)  # noqa: E731
            fd = central_diff(loss, W1.ravel(), d.ravel())
            assert float(np.sum(g1 * d)) == pytest.approx(fd, rel=1e-6, abs=1e-8)
            h = np.tanh(X @ W1 + B1)  # the last layer's gradient, by hand
            z = h @ W2
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            np.testing.assert_allclose(g2, h.T @ (p - Y) / n, rtol=1e-10, atol=1e-13)
    assert vg.traces == 1  # at the first call: four lengths made one program
    assert "served by the code generic in the batch length" in ad.explain(vg)
    assert "def softmax_mlp_value_and_grad(n, " in vg.source


def test_a_branch_on_the_length_is_traced_as_it_is() -> None:
    def f(w, X):  # noqa: ANN001, ANN202
        scale = 2.0 if 350 < len(X) < 500 else 1.0  # what the lengths traced do not see
        return scale * np.sum(np.tanh(X @ w) ** 2) / len(X)

    vg = ad.value_and_grad(f)
    w = RNG.normal(size=4)
    for n in (300, 301, 340, 400, 200):
        X = RNG.normal(size=(n, 4))
        v, g = vg(w, X)
        assert v == pytest.approx(f(w, X), rel=1e-12)
        t = np.tanh(X @ w)
        scale = 2.0 if n > 350 else 1.0
        np.testing.assert_allclose(g, scale * X.T @ (2 * t * (1 - t**2)) / n, rtol=1e-10)
    assert "batch length 400" not in ad.explain(vg)  # (its first answer disagreed)


def test_a_count_that_stops_following_the_length() -> None:
    def f(w, X):  # noqa: ANN001, ANN202
        k = min(len(X), 302)  # n near 300, not at the far length traced
        return np.sum((X[:k] @ w) ** 2) / k

    vg = ad.value_and_grad(f)
    w = RNG.normal(size=4)
    for n in (300, 400, 301):
        X = RNG.normal(size=(n, 4))
        v, g = vg(w, X)
        k = min(n, 302)
        assert v == pytest.approx(f(w, X), rel=1e-12)
        np.testing.assert_allclose(g, 2 * X[:k].T @ (X[:k] @ w) / k, rtol=1e-10)
    assert "one program for every" not in ad.explain(vg)  # (traced at each length)


def test_data_of_the_batch_length_read_from_outside() -> None:
    labels = RNG.normal(size=300)  # captured: its length is the batch's

    def f(w, X):  # noqa: ANN001, ANN202
        return np.mean((X @ w - labels) ** 2)

    vg = ad.value_and_grad(f)
    w = RNG.normal(size=4)
    for _ in range(2):
        X = RNG.normal(size=(300, 4))
        v, g = vg(w, X)
        assert v == pytest.approx(f(w, X), rel=1e-12)
        np.testing.assert_allclose(g, 2 * X.T @ (X @ w - labels) / 300, rtol=1e-10)
    with pytest.raises(ValueError, match="broadcast"):
        vg(w, RNG.normal(size=(301, 4)))


def test_the_numbers_that_follow_the_length() -> None:
    n = 10
    src = [
        f"def f(x, out):\n    v = np.reshape(x, ({m}, 2))\n    w = v / {float(m)!r}\n"
        f"    u = v * {1.0 / m!r} + c\n    out[0] = {m + 3}\n"
        for m in lengths(n)
    ]
    names = [{"c": np.full((m, 2), 0.5 / m)} for m in lengths(n)]
    source, kept = generic_source(src, names, n)
    assert "def f(n, x, out)" in source and kept == {}
    assert "(n, 2)" in source and "v / float(n)" in source and "(1.0 / n)" in source
    assert "np.full((n, 2), (0.5 / n))" in source and "(n + 3)" in source
    other = [s.replace("v / ", "v - ") if k == 1 else s for k, s in enumerate(src)]
    assert generic_source(other, names, n) is None  # (not the same code but for numbers)
