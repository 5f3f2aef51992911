"""x[mask] with a traced boolean mask: data, not a retrace (issue 30, item 4).

Each function is checked against NumPy and central differences at fresh points;
at array level one trace serves every pattern of the mask, and element by element
(small arrays) the transform moves to the array level once the mask's guards
keep failing.
"""

import warnings

import numpy as np
import pytest

import adcompile as ad


def _made_then_masked(x):
    z = np.zeros(len(x))
    z[x > 0] = x[x > 0]
    return np.sum(z**2)


def _updated_under_a_mask(x):
    z = np.zeros_like(x) + 1.0
    z[x > 0.5] += x[x > 0.5] * 2
    return np.sum(z * x)


FUNCTIONS = {
    "sum": lambda x: np.sum(x[x > 0] ** 2),
    "mean and method sum": lambda x: np.mean(x[x > 0]) + x[x < 0].sum(),
    "max and min": lambda x: np.max(x[x < 0.5] * 3.0) + np.min(np.exp(x[x > -0.5])),
    "a count": lambda x: np.sum(x[x > 0] > 1.0) * np.sum(x),
    "equal masks": lambda x: np.sum(x[x > 0] * np.abs(x)[x > 0]),
    "z[m] = x[m]": _made_then_masked,
    "z[m] += x[m]": _updated_under_a_mask,
}


def _fd(f, x, k, h=1e-6):
    e = np.zeros_like(x)
    e[k] = h
    return (f(x + e) - f(x - e)) / (2 * h)


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("n", [6, 400])
def test_masked_selections_match_numpy_and_finite_differences(name, n):
    f = FUNCTIONS[name]
    vg = ad.value_and_grad(f)
    rng = np.random.default_rng(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        for _ in range(8):
            x = rng.normal(size=n)
            value, grad = vg(x)
            assert value == pytest.approx(f(x), rel=1e-12, abs=1e-12)
            fd = [_fd(f, x, k) for k in range(6)]
            np.testing.assert_allclose(grad[:6], fd, rtol=1e-6, atol=1e-6)
    inner = getattr(vg, "unchecked", vg)
    assert inner.traces <= (1 if n == 400 else 3)  # (a mask is data, not a guard)


def test_what_needs_the_selections_length_is_traced_element_by_element():
    def f(x):
        s = x[x > 0]
        return np.sum(s) / len(s)  # (len: only the data knows it)

    g = ad.grad(f)
    x = np.random.default_rng(1).normal(size=300)
    expected = np.where(x > 0, 1.0, 0.0) / np.sum(x > 0)
    np.testing.assert_allclose(g(x), expected, rtol=1e-12)
    assert "len()" in getattr(g, "unchecked", g).array_refused
