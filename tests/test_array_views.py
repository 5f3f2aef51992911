"""Writes into arrays the function made, through views, as NumPy makes them.

A traced function may build an array (``np.zeros``) and write into it through
views (slices, ``.T``, ``reshape``, ``ravel``), in place (``+=``), and read
views taken before a write. NumPy's answer is the reference: each program is
run at array level (``array_refused`` is None) and held, at the point traced
and at a fresh one, against plain NumPy's value and central differences of
it. Random sequences of such steps (hypothesis) are held the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import central_diff
from hypothesis import given
from hypothesis import strategies as st
from test_arrays_fuzz import HALF

import adcompile as ad
from adcompile.api import captured


@pytest.fixture(autouse=True)
def _small_arrays_at_array_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)


def _held(f, n: int) -> None:  # noqa: ANN001
    """``f`` at array level, value and gradient, at two points: NumPy's and central
    differences'."""
    vg = ad.value_and_grad(f)
    rng = np.random.default_rng(n)
    for x in (rng.normal(size=n), rng.normal(size=n)):
        v, g = vg(x)
        assert vg.array_refused is None, vg.array_refused
        assert v == pytest.approx(f(x.copy()), rel=1e-12, abs=1e-12)
        d = rng.normal(size=n)
        assert g @ d == pytest.approx(central_diff(f, x, d), rel=1e-6, abs=1e-8)
    assert vg.traces == 1


def _add_to_an_element(x):  # noqa: ANN001, ANN202
    z = np.zeros(len(x))
    z[0] += x[1]  # (z[0] is a NumPy scalar: += makes a new one, written back)
    z[3] = x[0]
    z[3] *= 2.0
    return np.sum(z * x)


def _slices_of_itself(x):  # noqa: ANN001, ANN202
    z = np.zeros(len(x))
    z[:5] = x[:5]
    z[5:10] = z[:5] * 2.0
    z[1:] = z[:-1] + x[1:]
    z[2:] += z[:-2]
    return np.sum(z * x)


def _in_place_on_slices(x):  # noqa: ANN001, ANN202
    z = np.ones(len(x))
    z[1:] *= x[1:]
    z[-2:] += x[1]
    return np.sum(z**2)


def _through_views(x):  # noqa: ANN001, ANN202
    m = len(x) // 4
    z = np.zeros((4, m))
    kept = z[2]  # a view read after the writes below
    z[2][1] = x[5]  # (z[2] is a view: the write reaches z)
    z.T[0] = x[:4]
    z.reshape(-1)[m + 1] = x[2] ** 2
    r = z.ravel()  # a view (z is contiguous)
    r[-1] = x[3]
    t = z.T.ravel()  # a copy: writes into it leave z alone
    t[0] = 100.0
    v = z[::2]
    v *= 3.0
    return np.sum(np.tanh(z) ** 2) + np.sum(kept * x[:m]) + t[0] * x[0]


def _scalars_stay_numbers(x):  # noqa: ANN001, ANN202
    s = np.sum(x)
    t = s  # (NumPy's s is a number: s += 1 leaves t as it was)
    s += 1.0
    a = np.zeros(len(x))
    b = a  # (an array: a += x changes b too)
    a += x
    return t * 2.0 + s + np.sum(b**2)


def _zero_d_and_astype(x):  # noqa: ANN001, ANN202
    z = np.zeros(())  # (a 0-d array is written into, as any array)
    w = z
    z[()] = x[1]
    z[...] += x[0] ** 2
    y = np.zeros(len(x))
    same = y.astype(np.float64, copy=False)  # (NumPy: y itself)
    same[0] = x[2]
    other = y.astype(np.float64)  # (a copy)
    other[1] = 100.0
    return np.sum(w * x) + np.sum(y * x) + other[0]


@pytest.mark.parametrize("n", [12, 300])
@pytest.mark.parametrize(
    "f",
    [
        _add_to_an_element,
        _slices_of_itself,
        _in_place_on_slices,
        _through_views,
        _scalars_stay_numbers,
        _zero_d_and_astype,
    ],
)
def test_writes_through_views_and_in_place(f, n: int) -> None:  # noqa: ANN001
    _held(f, n)


def test_a_broadcast_view_is_read_only_and_arguments_are_not_written() -> None:
    def f(x):  # noqa: ANN001, ANN202
        z = np.broadcast_to(np.zeros(4), (3, 4))
        z[0, 0] = x[0]  # NumPy: read-only
        return np.sum(z)

    with pytest.raises(ValueError, match="read-only"):
        ad.grad(f)(np.ones(12))

    def g(x):  # noqa: ANN001, ANN202
        x[1:][0] = 1.0  # through a view of the argument: the caller's array
        return np.sum(x**2)

    vg = ad.grad(g)
    vg(np.ones(12))
    assert "argument" in vg.array_refused


# ---------------------------------------------------------------- random sequences

STEPS = [
    lambda z, x, env: z.__setitem__((1, slice(0, 3)), x[:3] ** 2),
    lambda z, x, env: env.__setitem__("v", z[2:]),
    lambda z, x, env: env["v"].__iadd__(0.5 * x[: env["v"].size].reshape(env["v"].shape)),
    lambda z, x, env: z.T.__setitem__(1, np.tanh(x[:4])),
    lambda z, x, env: z.reshape(-1).__setitem__(5, x[7]),
    lambda z, x, env: z.__iadd__(0.1 * x.reshape(z.shape)),
    lambda z, x, env: z.ravel().__setitem__(slice(0, 4), x[:4]),
    lambda z, x, env: z.T.ravel().__setitem__(0, 9.0),  # (a copy: z unchanged)
    lambda z, x, env: z[::2, 1::2].__imul__(2.0),
    lambda z, x, env: env.__setitem__("w", z[:, 1]),
    lambda z, x, env: env["v"].__setitem__((0, 0), x[5] * 3.0),
    lambda z, x, env: env["w"].__isub__(x[4]),
    lambda z, x, env: z.__setitem__(slice(1, None), z[:-1] * 0.5),
]


def _sequence(picks: list[int]):  # noqa: ANN202
    def f(x):  # noqa: ANN001, ANN202
        z = np.zeros((4, 4))
        env = {"v": z[1:3], "w": z[0]}
        for k in picks:
            STEPS[k](z, x, env)
        return np.sum(np.tanh(z) ** 2) + np.sum(env["v"] ** 2) + np.sum(env["w"] * x[:4])

    return f


@HALF
@given(picks=st.lists(st.integers(0, len(STEPS) - 1), min_size=1, max_size=8))
def test_random_writes_through_views_agree_with_numpy(picks, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)
    _held(_sequence(picks), 16)
