"""``vg.numba(*example_args)``: the compiled gradient called from the user's @njit code.

Each is checked against the Python-side transform (the same compiled code,
so the numbers agree exactly) over many steps, and against hand-derived
gradients.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import numba
import numpy as np
import pytest

import adcompile as ad


def rosen(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


@numba.njit
def _descend(fn, x, steps, lr):
    out = np.empty(x.size + 1)
    for _ in range(steps):
        if not fn(x, out):
            return np.nan
        x -= lr * out[1:]
    return out[0]


@pytest.mark.parametrize("n", [10, 300])  # straight-line code, folded code
def test_gradient_descent_in_njit_matches_the_transform(n):
    vg = ad.value_and_grad(rosen)
    x0 = np.full(n, -0.5)
    fn = vg.numba(x0)
    assert vg.numba(x0) is fn  # one Numba function per specialisation
    x = x0.copy()
    value = _descend(fn, x, 10_000, 1e-4)
    xr = x0.copy()
    for _ in range(10_000):
        v, g = vg(xr)
        xr -= 1e-4 * g
    np.testing.assert_array_equal(x, xr)
    assert value == v
    assert vg.traces == 1


@numba.njit
def _loss_and_grad(fn, w, X, y):
    out = np.empty(w.size + 1)
    ok = fn(w, X.ravel(), y, out)
    return ok, out


def test_batch_generic_code_from_njit():
    def logistic(w, X, y):
        return np.mean(np.log1p(np.exp(-y * (X @ w))))

    rng = np.random.default_rng(3)
    X = rng.normal(size=(64, 3))
    y = np.sign(rng.normal(size=64))
    w = np.array([0.2, -0.1, 0.4])
    vg = ad.value_and_grad(logistic)
    fn = vg.numba(w, X, y)
    ok, out = _loss_and_grad(fn, w, X, y)
    assert ok
    m = -y * (X @ w)
    s = 1 / (1 + np.exp(-m))
    assert out[0] == pytest.approx(np.mean(np.log1p(np.exp(m))), rel=1e-12)
    np.testing.assert_allclose(out[1:], (X * (-y * s)[:, None]).mean(axis=0), rtol=1e-11)


def test_tape_interpreter_code_from_njit():
    """A long tape with no repeats runs on the tape interpreter; .numba wraps it too."""
    names = ["sin", "cos", "tanh", "exp", "sigmoid", "arctan"]
    rng = np.random.default_rng(0)
    order = [names[k] for k in rng.integers(0, len(names), 700)]

    def f(x):
        s = 0.0
        for k, name in enumerate(order):
            s = s + getattr(ad, name)(x[k % 3] * 0.1)
        return s

    vg = ad.value_and_grad(f)
    x = np.array([0.3, -0.2, 0.5])
    assert vg.code_for(x).startswith("# f_value_and_grad: ")  # the interpreter's note
    fn = vg.numba(x)
    out = np.empty(4)

    @numba.njit
    def call(x, out):
        return fn(x, out)

    assert call(x, out)
    value, grad = vg(x)
    assert out[0] == value
    np.testing.assert_array_equal(out[1:], grad)


def test_a_failed_guard_returns_false():
    def f(x, y):
        return x * y if x > 0 else x - y

    fn = ad.value_and_grad(f, argnums=(0, 1)).numba(2.0, 3.0)

    @numba.njit
    def call(x, y):
        out = np.empty(3)
        ok = fn(x, y, out)
        return ok, out

    ok, out = call(2.0, 5.0)
    assert ok and list(out) == [10.0, 5.0, 2.0]
    assert not call(-1.0, 5.0)[0]


def test_data_read_from_outside_is_refused_with_the_way_out():
    data = np.ones(3)
    vg = ad.value_and_grad(lambda x: np.sum(data * x * x))
    with pytest.raises(TypeError, match=r"reads data .* pass that data as an argument"):
        vg.numba(np.zeros(3))


def test_the_example_runs():
    path = Path(__file__).parent.parent / "examples" / "numba_descent.py"
    main = runpy.run_path(str(path))["main"]
    value, x = main(n=10, steps=20_000, lr=1e-3)
    # descent from -0.5 lowers Rosenbrock's value a long way (f(-0.5, ...) = 425)
    assert value < rosen(np.full(10, -0.5)) / 50 and np.isfinite(x).all()
