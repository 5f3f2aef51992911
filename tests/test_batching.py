"""``vmap`` of array code, batched (``diff.batching``): every point in one program.

Each NumPy function of ``test_arrays`` (and random NumPy programs) mapped over
points is held, value and gradient, against the same function run at each
point: plain NumPy for values, the function traced element by element (the
Values' engine) for gradients, and central differences at one point. The
tests also check that the batched program ran, not the point-by-point loop.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import central_diff
from hypothesis import given
from hypothesis import strategies as st
from test_arrays import CASES
from test_arrays_fuzz import ENDS, HALF, STEPS, _program

import adcompile as ad
from adcompile.api import captured
from adcompile.backend import arrays
from adcompile.diff.batching import batch_tape
from adcompile.ir.arrays import NotBatched

RNG = np.random.default_rng(31)


@pytest.fixture(autouse=True)
def _small_arrays_at_array_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)


def _batched(vm: ad.vmap) -> bool:
    """Whether the last call of ``vm`` ran one batched program."""
    return list(vm._batched.values())[-1][1] is not None


def _by_elements(f):  # noqa: ANN001, ANN202
    g = ad.value_and_grad(f)
    g.array_level = False
    return g


def _held(f, pts: np.ndarray, v: np.ndarray, g: np.ndarray) -> None:  # noqa: ANN001
    """``v`` and ``g`` at each point against plain NumPy and the element-wise engine,
    and the gradient at the first point against central differences."""
    with np.errstate(all="ignore"):
        want = np.array([float(f(p)) for p in pts])
    np.testing.assert_allclose(v, want, rtol=1e-11, atol=1e-12)
    try:
        want_g = np.stack([_by_elements(f)(p)[1] for p in pts])
    except TypeError:  # (np.zeros written into: array level only, one point at a time)
        want_g = np.stack([ad.value_and_grad(f)(p)[1] for p in pts])
    np.testing.assert_allclose(g, want_g, rtol=1e-9, atol=1e-11)
    d = RNG.normal(size=pts[0].shape)
    fd = central_diff(f, pts[0], d, h=1e-6)
    assert float(np.sum(g[0] * d)) == pytest.approx(fd, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_each_numpy_function_mapped_over_points_is_one_program(name: str) -> None:
    f, x = CASES[name]
    pts = x + 0.1 * RNG.normal(size=(5, *np.shape(x)))
    vm = ad.vmap(ad.value_and_grad(f))
    v, g = vm(pts)
    assert _batched(vm)
    _held(f, pts, v, g)
    fresh = x + 0.1 * RNG.normal(size=(3, *np.shape(x)))  # another number of points
    v, g = vm(fresh)
    assert _batched(vm)
    _held(f, fresh, v, g)


def test_shared_arguments_other_axes_and_tuple_outputs() -> None:
    W1, W2 = RNG.normal(size=(30, 16)), RNG.normal(size=16)  # noqa: N806

    def loss(x, W1, W2):  # noqa: ANN001, ANN202, N803
        return np.sum((np.tanh(x @ W1) @ W2 - 1.0) ** 2)

    X = RNG.normal(size=(30, 40))  # noqa: N806  (the points along axis 1)
    vm = ad.vmap(ad.grad(loss, argnums=(0, 1)), in_axes=(1, None, None))
    gx, gw = vm(X, W1, W2)
    assert _batched(vm)
    assert gx.shape == (40, 30) and gw.shape == (40, 30, 16)
    h = np.tanh(X.T @ W1)  # by hand: d/dW1 = x (2 r w2 (1 - h^2))^T
    r = h @ W2 - 1.0
    dz = 2 * r[:, None] * W2 * (1 - h**2)
    np.testing.assert_allclose(gw, X.T[:, :, None] * dz[:, None, :], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gx, dz @ W1.T, rtol=1e-12, atol=1e-13)
    # jit of a function returning an array and a number, at each point
    both = ad.vmap(ad.jit(lambda x, W1: (np.tanh(x @ W1), np.sum(x**2))), in_axes=(0, None))
    a, b = both(X.T, W1)
    assert _batched(both)
    np.testing.assert_allclose(a, np.tanh(X.T @ W1), rtol=1e-13)
    np.testing.assert_allclose(b, np.sum(X.T**2, axis=1), rtol=1e-13)


@pytest.mark.parametrize(
    "f",
    [
        lambda a, b: np.sum(np.tanh(a @ b)),  # (i, j) @ (j, k), either mapped
        lambda a, b: np.sum(np.exp(np.einsum("ij,jk->ik", a, b) * 0.1)),
        lambda a, b: np.sum(a[0] @ b) + np.sum(a @ b[:, 0]) + a[1] @ b[:, 1],
    ],
)
@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0)])
def test_products_with_either_operand_mapped(f, in_axes) -> None:  # noqa: ANN001
    a, b = RNG.normal(size=(4, 3, 5)), RNG.normal(size=(4, 5, 2))
    args = [a if in_axes[0] == 0 else a[0], b if in_axes[1] == 0 else b[0]]
    vm = ad.vmap(ad.value_and_grad(f, argnums=(0, 1)), in_axes=in_axes)
    v, (ga, gb) = vm(*args)
    assert _batched(vm)
    plain = ad.value_and_grad(f, argnums=(0, 1))
    plain.array_level = False
    for p in range(4):
        pa = a[p] if in_axes[0] == 0 else a[0]
        pb = b[p] if in_axes[1] == 0 else b[0]
        pv, (pga, pgb) = plain(pa, pb)
        assert v[p] == pytest.approx(f(pa, pb), rel=1e-12)
        np.testing.assert_allclose(ga[p], pga, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gb[p], pgb, rtol=1e-10, atol=1e-12)


def test_an_index_whose_arrays_stand_apart_runs_point_by_point() -> None:
    """NumPy moves the axes of an index's arrays first where they stand apart
    (``x[[0, 2], :, [1, 1]]``): that has no batching rule, and is run point by point,
    with the same answers."""

    def f(x):  # noqa: ANN001, ANN202
        return np.sum(x[[0, 2], :, [1, 1]] ** 2) + np.sum(x)

    pts = RNG.normal(size=(4, 3, 2, 3))
    vm = ad.vmap(ad.value_and_grad(f))
    spec_tape = None
    v, g = vm(pts)
    assert not _batched(vm)
    _held(f, pts, v, g)
    vg = ad.value_and_grad(f)
    vg(pts[0])
    spec_tape = vg.spec_for([pts[0]])[0].compiled.tape
    with pytest.raises(NotBatched, match="stand apart"):
        batch_tape(spec_tape, [True], 4)


def _hessian_loss(x, y):  # noqa: ANN001, ANN202
    return np.sum(np.tanh(np.outer(x, y)) ** 2) + np.max(np.cos(x[:3])) * np.sum(np.cumsum(y))


def _matrix_valued(x):  # noqa: ANN001, ANN202
    return np.tanh(np.outer(x, x[::-1])) + np.cumsum(x)[:, None] ** 2


@pytest.mark.parametrize("block", [2**16, 5])
def test_jacobian_and_hessian_run_blocks_of_unit_vectors(block: int, monkeypatch) -> None:  # noqa: ANN001
    """A Jacobian (or Hessian) of array code runs its unit vectors in blocks of one
    batched program each (here one block, or blocks of 5 and a remainder): against
    the same made one unit vector at a time, and central differences."""
    monkeypatch.setattr(arrays, "BASIS_BLOCK", block * 13)  # (13: the widest array)
    x, y = RNG.normal(size=13), RNG.normal(size=6)
    hess, jac = ad.hessian(_hessian_loss, argnums=(0, 1)), ad.jacobian(_matrix_valued)
    got_h, got_j = hess(x, y), jac(x)
    for t, args in ((hess, [x, y]), (jac, [x])):
        compiled = t.spec_for(args)[0].compiled
        assert isinstance(compiled, arrays.ArrayBasisCompiled)
        assert compiled._blocks and None not in compiled._blocks.values()
    monkeypatch.setattr(arrays.ArrayBasisCompiled, "_batched", lambda self, c: None)
    want_h = ad.hessian(_hessian_loss, argnums=(0, 1))(x, y)
    want_j = ad.jacobian(_matrix_valued)(x)
    np.testing.assert_allclose(got_j, want_j, rtol=1e-12, atol=1e-14)
    for a in range(2):
        for b in range(2):
            np.testing.assert_allclose(got_h[a][b], want_h[a][b], rtol=1e-11, atol=1e-13)
    d = RNG.normal(size=13)
    fd = (_matrix_valued(x + 1e-6 * d) - _matrix_valued(x - 1e-6 * d)) / 2e-6
    np.testing.assert_allclose(got_j @ d, fd, rtol=1e-6, atol=1e-8)
    g = ad.grad(_hessian_loss, argnums=0)
    fd = (g(x + 1e-6 * d, y) - g(x - 1e-6 * d, y)) / 2e-6
    np.testing.assert_allclose(got_h[0][0] @ d, fd, rtol=1e-5, atol=1e-7)


@HALF
@given(
    steps=st.lists(STEPS, min_size=1, max_size=5),
    end=ENDS,
    n=st.sampled_from([1, 2, 7]),
    seed=st.integers(0, 2**16),
)
def test_random_numpy_programs_mapped_over_points(steps, end, n, seed, monkeypatch) -> None:
    """Random NumPy programs (``test_arrays_fuzz``) mapped over ``n`` fresh points
    (not the point traced first): one batched program, each point's value and
    gradient those of NumPy and of the element-wise engine."""
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)
    f = _program(steps, end)
    rng = np.random.default_rng(seed)
    vm = ad.vmap(ad.value_and_grad(f))
    vm(rng.normal(size=(2, 3, 4)))
    pts = rng.normal(size=(n, 3, 4))
    v, g = vm(pts)
    assert _batched(vm)
    _held(f, pts, v, g)


@pytest.mark.parametrize(
    "f",
    [
        lambda s, w: np.prod(s) * np.sum(w),  # (a point that is a number: its prod is s)
        lambda s, w: np.prod(s * s) * np.sum(w) + np.sum(w * (np.sum(s > 0) - np.sum(s < 0))),
        lambda s, w: np.sum(np.prod(w[:3] * s, axis=()) * w[:3]) + np.max(s) * np.min(w),
    ],
)
def test_points_that_are_numbers_reduce_over_no_axes(f) -> None:  # noqa: ANN001
    """A reduction over all of a point that is a number reduces over no axes of the
    batch (``axis=()``, not the operand itself: a sum of booleans counts, the
    product of no others is 1), so values, gradients and Hessian-vector products
    are each point's."""
    s, w = RNG.normal(size=5), RNG.normal(size=300)
    vm = ad.vmap(ad.value_and_grad(f, argnums=(0, 1)), in_axes=(0, None))
    v, (gs, gw) = vm(s, w)
    assert _batched(vm)
    hv = ad.vmap(ad.hvp(f), in_axes=(0, None, None))(s, 1.0, w)
    one = ad.value_and_grad(f, argnums=(0, 1))
    for p in range(5):
        pv, (pgs, pgw) = one(s[p], w)
        assert v[p] == pytest.approx(f(s[p], w), rel=1e-12)
        assert gs[p] == pytest.approx(central_diff(lambda t: f(t[0], w), [s[p]], [1.0]), rel=1e-6)
        assert gs[p] == pytest.approx(pgs, rel=1e-12) and hv[p] == pytest.approx(
            central_diff(lambda t: one(s[p] + t[0], w)[1][0], [0.0], [1.0]), rel=1e-5, abs=1e-7
        )
        np.testing.assert_allclose(gw[p], pgw, rtol=1e-12, atol=1e-14)


def test_static_arguments_and_integer_data_shared_by_every_point() -> None:
    """A static argument (static_argnums) or an integer array (data: labels) given to
    every point (in_axes None) is a constant of the code, as in a plain call."""
    X = RNG.normal(size=(4, 6))  # noqa: N806
    vm = ad.vmap(ad.jit(lambda x, k: np.sum(x[:k] ** 2), static_argnums=(1,)), in_axes=(0, None))
    for k in (2, 3):
        np.testing.assert_allclose(vm(X, k), np.sum(X[:, :k] ** 2, axis=1), rtol=1e-13)
    with pytest.raises(ValueError, match="static.*in_axes None"):
        ad.vmap(ad.jit(lambda x, k: np.sum(x[:k]), static_argnums=(1,)), in_axes=(0, 0))(
            X, np.arange(4)
        )
    W, y = RNG.normal(size=(6, 3)), RNG.integers(0, 3, 5)  # noqa: N806

    def loss(W, X, y):  # noqa: ANN001, ANN202, N803
        return -np.mean((X @ W)[np.arange(len(y)), y])

    Xs = RNG.normal(size=(4, 5, 6))  # noqa: N806
    got = ad.vmap(ad.grad(loss), in_axes=(None, 0, None))(W, Xs, y)
    values, grads = ad.vmap(ad.value_and_grad(loss), in_axes=(None, 0, None))(W, Xs, y)
    for g, g2, v, x in zip(got, grads, values, Xs):  # by hand: -x^T onehot(y) / n
        np.testing.assert_allclose(g, -x.T @ np.eye(3)[y] / 5, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(g2, g, rtol=1e-13, atol=1e-15)
        assert v == pytest.approx(loss(W, x, y), rel=1e-12)


class _Config:
    rows = 2


def test_a_change_traced_again_is_batched_again() -> None:
    """What the function reads from outside and compiles in (an attribute steering a
    slice) changes: it is traced again, and the points run that new code."""
    cfg = _Config()
    vm = ad.vmap(ad.jit(lambda x: np.sum(x[: cfg.rows] ** 2)))
    X = RNG.normal(size=(4, 6))  # noqa: N806
    for rows in (2, 3, 2):
        cfg.rows = rows
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ad.RetraceWarning)
            got = vm(X)
        assert _batched(vm)
        np.testing.assert_allclose(got, np.sum(X[:, :rows] ** 2, axis=1), rtol=1e-13)
