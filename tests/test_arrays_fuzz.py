"""Differential fuzzing of array-level code: random NumPy programs (hypothesis).

Each program is a random chain of NumPy calls on a 2-D argument (element-wise
ops, broadcasting against rows, columns and numbers, comparisons feeding
``np.where``, reductions with axes, products, einsum, stacked products, slices,
integer-array indexes, cumsum and prod along an axis, reshapes). The compiled
value and gradient, traced at array level, are held at a fresh point (not the
traced one) against plain NumPy's value, the same function traced element by
element (``array_level = False``, the Values' engine) and central differences.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import central_diff
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adcompile as ad
from adcompile.api import captured

EXAMPLES = int(os.environ.get("ADCOMPILE_FUZZ_EXAMPLES", "25"))

UNARY = {
    "tanh": np.tanh,
    "sin": np.sin,
    "exp(-x^2)": lambda x: np.exp(-(x**2)),
    "log1p(x^2)": lambda x: np.log1p(x * x),
    "sqrt(1+x^2)": lambda x: np.sqrt(1.0 + x**2),
    "sigmoid": lambda x: ad.sigmoid(x),
    "arctan": np.arctan,
}
ROW = np.linspace(-0.5, 0.7, 4)
COL = np.linspace(0.3, -0.4, 3)[:, None]
MAT = np.linspace(-1.0, 1.0, 8).reshape(4, 2)
SQUARE = np.linspace(-0.6, 0.9, 16).reshape(4, 4)


def _step(kind: str, arg: str):  # noqa: ANN202
    """One NumPy call of the program: (3, 4) in, (3, 4) out."""
    if kind == "unary":
        return UNARY[arg]
    if kind == "binary":
        other = {"row": ROW, "col": COL, "number": 0.75, "self": None}[arg]
        return lambda x: x * (x if other is None else other) + 0.5 * x
    if kind == "where":
        return lambda x: np.where(x > {"zero": 0.0, "row": ROW}[arg], x, 0.1 * x**2)
    if kind == "reduce":
        axis = {"rows": 0, "cols": 1}[arg]
        return lambda x: (
            x - np.mean(x, axis=axis, keepdims=True) + 0.3 * np.max(x, axis=axis, keepdims=True)
        )
    if kind == "product":
        return lambda x: x + 0.2 * np.tanh((x @ MAT) @ MAT.T)
    if kind == "slice":
        return lambda x: np.concatenate([x[:, 1:], x[:, :1] ** 2], axis=1)
    if kind == "einsum":
        return lambda x: x + 0.2 * np.einsum("ij,jk->ik", x, SQUARE)
    if kind == "stacked":
        return lambda x: x + 0.1 * np.sum(np.stack([x, 0.5 * x * x]) @ SQUARE, axis=0)
    if kind == "cumsum":
        return lambda x: 0.5 * np.cumsum(x, axis={"rows": 0, "cols": 1}[arg]) - 0.2 * x
    if kind == "prod":
        return lambda x: (
            x + 0.1 * np.prod(np.tanh(x), axis={"rows": 0, "cols": 1}[arg], keepdims=True)
        )
    if kind == "gather":
        return lambda x: x[[2, 0, 1]] * 0.5 + x[:, [3, 3, 0, 1]]
    return lambda x: (x.T.reshape(3, 4) + x) * 0.5  # reshape of a transpose


STEP_LIST = (
    [("unary", k) for k in UNARY]
    + [("binary", k) for k in ("row", "col", "number", "self")]
    + [("where", "zero"), ("where", "row"), ("reduce", "rows"), ("reduce", "cols")]
    + [("product", ""), ("slice", ""), ("reshape", "")]
    + [("einsum", ""), ("stacked", ""), ("gather", "")]
    + [("cumsum", "rows"), ("cumsum", "cols"), ("prod", "rows"), ("prod", "cols")]
)
STEPS = st.sampled_from(STEP_LIST)
TWICE = STEPS  # (second derivatives: every step has them, np.prod's too)
ENDS = st.sampled_from(["sum", "mean of squares", "norm", "var", "logsumexp"])


def _program(steps: list, end: str):  # noqa: ANN001, ANN202
    fns = [_step(*s) for s in steps]

    def f(x):  # noqa: ANN001, ANN202
        for fn in fns:
            x = fn(x)
        if end == "sum":
            return np.sum(x)
        if end == "mean of squares":
            return np.mean(x**2)
        if end == "norm":
            return np.linalg.norm(x + 1.0)
        if end == "var":
            return np.var(x, axis=0).sum()
        m = np.max(x)
        return m + np.log(np.sum(np.exp(x - m)))

    return f


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(STEPS, min_size=1, max_size=5),
    end=ENDS,
    seed=st.integers(0, 2**16),
)
def test_random_numpy_programs_agree_with_numpy_values_and_differences(
    steps, end, seed, monkeypatch
):
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)
    f = _program(steps, end)
    rng = np.random.default_rng(seed)
    traced_at, fresh = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    vg = ad.value_and_grad(f)
    vg(traced_at)
    assert vg.array_refused is None, vg.array_refused
    v, g = vg(fresh)
    assert vg.traces == 1
    with np.errstate(all="ignore"):
        want = float(f(fresh))
    assert v == pytest.approx(want, rel=1e-11, abs=1e-12)
    d = rng.normal(size=fresh.shape)
    fd = central_diff(f, fresh, d, h=1e-6)
    assert float(np.sum(g * d)) == pytest.approx(fd, rel=2e-5, abs=2e-6)
    other = ad.value_and_grad(f)
    other.array_level = False
    ov, og = other(fresh)
    assert ov == pytest.approx(v, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(g, og, rtol=1e-8, atol=1e-10)


# half as many examples (each compiles more); shared by test_array_loops, test_array_scans
HALF = settings(
    max_examples=max(EXAMPLES // 2, 5),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@HALF
@given(
    steps=st.lists(TWICE, min_size=1, max_size=4),
    end=ENDS,
    seed=st.integers(0, 2**16),
)
def test_random_numpy_programs_hvp_and_jvp_agree_with_differences(steps, end, seed, monkeypatch):
    """The same programs' Hessian-vector and Jacobian-vector products (reverse over
    reverse, and a forward sweep, at array level), at a fresh point: against
    central differences of the array-level gradient (checked above) and of plain
    NumPy."""
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)
    f = _program(steps, end)
    rng = np.random.default_rng(seed)
    traced_at, fresh, v = (rng.normal(size=(3, 4)) for _ in range(3))
    hvp = ad.hvp(f)
    hvp(traced_at, v)
    assert hvp.array_refused is None, hvp.array_refused
    got = hvp(fresh, v)
    assert hvp.traces == 1
    g = ad.grad(f)
    with np.errstate(all="ignore"):
        fd = (g(fresh + 1e-6 * v) - g(fresh - 1e-6 * v)) / 2e-6
    np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-5 * (1 + np.max(np.abs(fd))))
    value, tangent = ad.jvp(f, (fresh,), (v,))
    with np.errstate(all="ignore"):
        assert value == pytest.approx(float(f(fresh)), rel=1e-11, abs=1e-12)
        assert tangent == pytest.approx(central_diff(f, fresh, v, h=1e-6), rel=2e-5, abs=2e-6)
