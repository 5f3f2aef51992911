"""Loop nests of array code (issue 30, third step): ``emit.array_loops`` and
``backend.arrays.LoopVersion``.

Each function is run by its loop nests (made at its first call here, and kept
whatever they time: ``PREFER = "loops"``), at a fresh point, and held against
plain NumPy's value, central differences and the same program's NumPy code.
Which functions have loop nests is stated, so that a silent fallback to NumPy
code cannot pass for them.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import central_diff
from hypothesis import given
from hypothesis import strategies as st
from test_arrays import CASES
from test_arrays_fuzz import ENDS, HALF, STEPS, _program

import adcompile as ad
from adcompile.backend import arrays

RNG = np.random.default_rng(31)

# the cases whose programs keep NumPy code: an op with no loop form (none now)
NOT_LOWERED: set[str] = set()
# the cases the Values' engine cannot run (np.zeros written into holds floats only)
ARRAY_ONLY = {"the diagonal written", "rows written twice"}


pytestmark = pytest.mark.usefixtures("loops_at_once")


def _lowered(vg: ad.Transformed) -> bool:
    return "# Loop nests" in vg.source


@pytest.mark.parametrize("name", list(CASES))
def test_numpy_functions_as_loop_nests(name: str) -> None:
    f, x = CASES[name]
    vg = ad.value_and_grad(f)
    vg(x)
    assert vg.array_refused is None
    assert _lowered(vg) == (name not in NOT_LOWERED), vg.source[:400]
    fresh = x + 0.1 * RNG.normal(size=x.shape)
    v, g = vg(fresh)
    assert vg.traces == 1
    assert v == pytest.approx(float(f(fresh)), rel=1e-10, abs=1e-12)
    d = RNG.normal(size=x.shape)
    assert float(np.sum(g * d)) == pytest.approx(central_diff(f, fresh, d), rel=1e-5, abs=1e-6)
    if name in ARRAY_ONLY:
        return
    elements = ad.value_and_grad(f)
    elements.array_level = False  # (the Values' engine)
    ev, eg = elements(fresh)
    assert ev == pytest.approx(v, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(g, eg, rtol=1e-8, atol=1e-10)


SPECIAL = {
    "maximum": lambda x: np.sum(np.maximum(x, 0.0) + np.maximum(0.5, x)),
    "minimum": lambda x: np.sum(np.minimum(x, 0.0) * np.minimum(-0.5, x)),
    "max min": lambda x: np.max(x) - np.sum(np.min(x.reshape(2, 3), axis=1)),
    "clip": lambda x: np.sum(np.clip(x, -1.0, 1.0)),
    "relu sign": lambda x: np.sum(ad.relu(x) + np.sign(x) * x),
    "where": lambda x: np.sum(np.where(x > 0, x, 2 * x)),
    "abs": lambda x: np.sum(np.abs(x)),
    "log sqrt": lambda x: np.sum(np.log(x) + np.sqrt(x)),
    "division": lambda x: np.sum(1.0 / x),
    "floor round": lambda x: np.sum(np.floor(x) + np.round(x)),
    "remainder": lambda x: np.sum(x % 0.7 + x // 0.7),
}
POINTS = [
    np.array([1.0, np.nan, -2.0, 3.0, 0.5, -0.2]),
    np.array([1.0, -1.0, 0.0, -0.0, 4.0, np.inf]),
    np.array([2.5, -2.5, 0.5, 1.5, -0.5, -np.inf]),
]


@pytest.mark.parametrize("name", list(SPECIAL))
def test_nan_inf_and_zeros_as_numpy_gives_them(name: str) -> None:
    """nan, infinities and signed zeros: the loop nests' value is NumPy's, and their
    gradient the tape interpreter's (NumPy calls node by node)."""
    f = SPECIAL[name]
    for x in POINTS:
        vg = ad.value_and_grad(f)
        vg(x + 0.0)  # (the loop nests are made here, checked against the NumPy code)
        assert _lowered(vg)
        with np.errstate(all="ignore"):
            v, g = vg(x)
            want = f(x)
        np.testing.assert_equal(v, want)
        with np.errstate(all="ignore"):  # the tape interpreter (NumPy calls, node by node)
            ev, eg = vg.last.compiled.tape.evaluate(x)
        np.testing.assert_equal(v, ev)
        np.testing.assert_allclose(g, eg, rtol=1e-12)


def test_loop_nests_that_disagree_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong loop version (here: twice the answer) is caught by the first call's
    comparison, and the NumPy code goes on; the test suite's strict mode raises it."""
    printed = arrays.loop_version

    def doubled(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        text, consts = printed(*args, **kwargs)
        return text.replace("return True", "out[:] = 2.0 * out\n    return True"), consts

    monkeypatch.setattr(arrays, "loop_version", doubled)
    f = lambda x: np.sum(np.tanh(x) ** 2)  # noqa: E731
    x = RNG.normal(size=50)
    with pytest.raises(AssertionError, match="disagree with its NumPy code"):
        ad.value_and_grad(f)(x)
    monkeypatch.setenv("ADCOMPILE_STRICT", "0")
    vg = ad.value_and_grad(lambda x: np.sum(np.tanh(x) ** 3))
    v, g = vg(x)
    v, g = vg(x)
    assert not _lowered(vg)
    assert v == pytest.approx(np.sum(np.tanh(x) ** 3), rel=1e-12)
    np.testing.assert_allclose(g, 3 * np.tanh(x) ** 2 * (1 - np.tanh(x) ** 2), rtol=1e-12)


def test_made_in_the_background_after_hot_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the loop nests are made in a thread of their own at the
    ``HOT_CALLS``-th call, while calls go on by the NumPy code."""
    monkeypatch.setattr(arrays, "HOT_CALLS", 5)
    monkeypatch.setattr(arrays, "BACKGROUND", True)
    w = RNG.normal(size=3)
    vg = ad.value_and_grad(lambda w, X: np.mean(np.log1p(np.exp(-(X @ w)))))
    X = RNG.normal(size=(40, 3))
    for _ in range(4):
        vg(w, X)
        assert not _lowered(vg)
    results = [vg(w + 0.01 * k, X) for k in range(20)]  # (meanwhile, the thread)
    vg.wait_for_entries()
    assert _lowered(vg)
    for k, (v, g) in enumerate(results):
        z = X @ (w + 0.01 * k)
        assert v == pytest.approx(np.mean(np.log1p(np.exp(-z))), rel=1e-12)
        np.testing.assert_allclose(g, -(X.T @ (1 / (1 + np.exp(z)))) / 40, rtol=1e-10)
    assert vg(w, X)[0] == pytest.approx(results[0][0], rel=1e-13)


def test_one_program_for_every_batch_length() -> None:
    """Array code generic in the batch length has loop nests in ``n`` too: one
    Numba function for every length, checked at lengths it was not traced at."""

    def loss(W, b, X, y):  # noqa: ANN001, ANN202, N803
        h = np.maximum(X @ W + b, 0.0)
        return np.mean((h.sum(axis=1) - y) ** 2) + 1e-3 * np.sum(W * W)

    W, b = RNG.normal(size=(4, 5)), RNG.normal(size=5)
    vg = ad.value_and_grad(loss, argnums=(0, 1))
    for n in (300, 301, 517, 40):
        X, y = RNG.normal(size=(n, 4)), RNG.normal(size=n)
        (v, (gW, gb)) = vg(W, b, X, y)
        assert "for i0 in range(n):" in vg.source
        assert v == pytest.approx(loss(W, b, X, y), rel=1e-12)
        d = RNG.normal(size=W.shape)
        fd = central_diff(lambda W_: loss(W_, b, X, y), W, d)
        assert float(np.sum(gW * d)) == pytest.approx(fd, rel=1e-6)
    assert vg.traces == 1


@pytest.mark.parametrize("prefer", ["numpy", "loops"])
def test_parameters_named_like_the_codes_own_variables(
    prefer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parameter named ``v0``, ``n``, ``np``, ``i0`` ... is renamed in array code:
    before, ``v0 = a; v1 = v0`` read the overwritten ``v0`` (a wrong answer)."""
    monkeypatch.setattr(arrays, "PREFER", prefer)

    def f(a, v0, out, i0, np_, n, x3, t1, math, _c2):  # noqa: ANN001, ANN202
        return np.sum(a * v0 + out * i0 * np_ + n * x3 * t1 + math * _c2)

    xs = [RNG.normal(size=3) for _ in range(10)]
    vg = ad.value_and_grad(f, argnums=tuple(range(10)))
    vg(*xs)
    v, g = vg(*xs)
    assert _lowered(vg) == (prefer == "loops")
    assert v == pytest.approx(f(*xs), rel=1e-12)
    a, v0, out, i0, np_, n, x3, t1, math, c2 = xs
    wants = [v0, a, i0 * np_, out * np_, out * i0, x3 * t1, n * t1, n * x3, c2, math]
    for got, want in zip(g, wants):
        np.testing.assert_allclose(got, want, rtol=1e-12)


@HALF
@given(steps=st.lists(STEPS, min_size=1, max_size=5), end=ENDS, seed=st.integers(0, 2**16))
def test_random_numpy_programs_as_loop_nests(steps, end, seed) -> None:  # noqa: ANN001
    """test_arrays_fuzz's random NumPy programs, run by their loop nests at a fresh
    point: against plain NumPy's value, central differences, and the tape
    interpreter (NumPy calls node by node)."""
    f = _program(steps, end)
    rng = np.random.default_rng(seed)
    traced_at, fresh = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    vg = ad.value_and_grad(f)
    vg(traced_at)
    assert _lowered(vg), vg.source[:300]
    v, g = vg(fresh)
    with np.errstate(all="ignore"):
        want = float(f(fresh))
        iv, ig = vg.last.compiled.tape.evaluate(fresh)
    assert v == pytest.approx(want, rel=1e-11, abs=1e-12)
    np.testing.assert_allclose(g, ig, rtol=1e-10, atol=1e-12)
    d = rng.normal(size=fresh.shape)
    fd = central_diff(f, fresh, d, h=1e-6)
    assert float(np.sum(g * d)) == pytest.approx(fd, rel=2e-5, abs=2e-6)


@pytest.mark.parametrize("name", ["matmul shapes", "reshapes", "mean"])
def test_products_by_blas(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same cases with every matrix product by np.dot (BLAS), as large ones are."""
    from adcompile.emit import array_loops

    monkeypatch.setattr(array_loops, "SMALL_PRODUCT", 0)
    case, x = CASES[name]
    f = lambda x: case(x) + 0.5  # noqa: E731  (not the program of test_numpy_functions...)
    vg = ad.value_and_grad(f)
    vg(x)
    assert _lowered(vg) and "np.dot(" in vg.source
    fresh = x + 0.1 * RNG.normal(size=x.shape)
    v, g = vg(fresh)
    assert v == pytest.approx(float(f(fresh)), rel=1e-10, abs=1e-12)
    d = RNG.normal(size=x.shape)
    assert float(np.sum(g * d)) == pytest.approx(central_diff(f, fresh, d), rel=1e-5, abs=1e-6)


B3 = RNG.normal(size=(2, 3, 4))
M34 = RNG.normal(size=(3, 4))
EINSUMS = {
    "inner": lambda x: np.einsum("ij,ij->", x, x),
    "matrix vector": lambda x: np.sum(np.einsum("ij,j->i", x, M34[0]) ** 2),
    "transposed product": lambda x: np.sum(np.einsum("ij,kj->ik", x, M34) ** 2),
    "batched": lambda x: np.sum(np.tanh(np.einsum("bij,bjk->bik", B3, x.reshape(2, 4, 2)))),
    "outer": lambda x: np.sum(np.einsum("i,j->ij", x[0], x[1]) ** 2),
    "cumsum 3-D, each axis": lambda x: sum(
        np.sum(np.cumsum(x.reshape(2, 2, 4), axis=k) ** 2) for k in range(3)
    ),
    "cumsum 1-D": lambda x: np.sum(np.cumsum(x[0]) * x[1]),
    "batched matmul, both stacked": lambda x: np.sum(
        np.sin(x.reshape(2, 2, 4) @ B3.transpose(0, 2, 1)[:, :4, :]) ** 2
    ),
    "products of the others, by axis": lambda x: (
        np.sum(np.prod(x, axis=0) ** 2) + np.sum(np.prod(x, axis=1)) + np.prod(x[0])
    ),
}


@pytest.mark.parametrize("name", list(EINSUMS))
def test_einsum_and_cumsum_as_loop_nests(name: str) -> None:
    """Two-operand einsum (any letters: products, contractions, batches, outers),
    cumsum along any axis, a matmul of stacked matrices and np.prod's derivative
    (the product of the others): loops, held against NumPy's value, the Values'
    engine and central differences."""
    f = EINSUMS[name]
    square = ("batched", "cumsum 3-D, each axis", "batched matmul, both stacked")
    x = RNG.normal(size=(4, 4)) if name in square else None
    x = RNG.normal(size=(3, 4)) if x is None else x
    vg = ad.value_and_grad(f)
    vg(x)
    assert _lowered(vg), vg.source[:400]
    assert "_s_v" in vg.source  # (the statement's own loops, not a NumPy call)
    assert "np.einsum" not in vg.source and "np.cumsum" not in vg.source
    fresh = x + 0.1 * RNG.normal(size=x.shape)
    v, g = vg(fresh)
    assert v == pytest.approx(float(f(fresh)), rel=1e-11, abs=1e-12)
    elements = ad.value_and_grad(f)
    elements.array_level = False  # (the Values' engine, element by element)
    ev, eg = elements(fresh)
    assert ev == pytest.approx(v, rel=1e-11, abs=1e-12)
    np.testing.assert_allclose(g, eg, rtol=1e-10, atol=1e-12)
    d = RNG.normal(size=x.shape)
    assert float(np.sum(g * d)) == pytest.approx(central_diff(f, fresh, d), rel=1e-5, abs=1e-6)


ROWS = np.array([3, 0, 0, -1, 2])
GATHERS = {
    "rows, repeated and negative": lambda x: np.sum(np.sin(x[ROWS]) ** 2),
    "columns beside a slice": lambda x: np.sum(x[1:, [2, 0, 2]] * x[:-1, [1, 1, 3]]),
    "a mask over both axes": lambda x: np.sum(x[x.shape[1] * np.eye(6, 4) > 0] ** 3),
    "a mask on the rows": lambda x: np.sum(np.exp(x[np.array([1, 0, 1, 1, 0, 0], bool)])),
    "two arrays side by side": lambda x: np.sum(x[[0, 5, 2], [3, 3, 1]] ** 2),
    "one after another": lambda x: np.sum(x[[0, 1]][:, [2, 3]] ** 2) + x[[0, 5], 1:][1, 0],
    # where NumPy's rule moves the arrays' axis first (arrays apart), or mixes ints
    # with them: kept as NumPy code, and still right
    "arrays apart": lambda x: np.sum(x.reshape(2, 3, 4)[[0, 1], :, [1, 2]] ** 2),
    "an int beside an array": lambda x: np.sum(x[2, [1, 3]] ** 2),
}
NUMPY_CODE = {"arrays apart", "an int beside an array"}


@pytest.mark.parametrize("name", list(GATHERS))
def test_integer_array_and_mask_indexing_as_loop_nests(name: str) -> None:
    """An index of slices and one run of integer arrays (a mask: its nonzero), read
    in the loops as ``x[rows[i0], i1]``; its adjoint adds each row where it was
    read, so a row read twice gets both. Held against NumPy's value, the Values'
    engine and central differences."""
    f, x = GATHERS[name], RNG.normal(size=(6, 4))
    vg = ad.value_and_grad(f)
    vg(x)
    assert _lowered(vg) == (name not in NUMPY_CODE), vg.source[:400]
    fresh = x + 0.1 * RNG.normal(size=x.shape)
    v, g = vg(fresh)
    assert v == pytest.approx(float(f(fresh)), rel=1e-11, abs=1e-12)
    elements = ad.value_and_grad(f)
    elements.array_level = False
    ev, eg = elements(fresh)
    assert ev == pytest.approx(v, rel=1e-11, abs=1e-12)
    np.testing.assert_allclose(g, eg, rtol=1e-10, atol=1e-12)
    d = RNG.normal(size=x.shape)
    assert float(np.sum(g * d)) == pytest.approx(central_diff(f, fresh, d), rel=1e-5, abs=1e-6)
