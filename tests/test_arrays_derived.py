"""jacobian, hessian, jvp and hvp of NumPy programs traced at array level.

Their code is array code made by reverse sweeps alone (``diff.arrays``): a
Hessian-vector product is the gradient of ``grad . v``, a Jacobian-vector
product the gradient in ``u`` of ``(u^T J) . t``. Each result is held against
central differences of the plain function (or of a gradient checked so), and
against the same transform traced element by element.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import central_diff
from test_arrays import CASES

import adcompile as ad
from adcompile.api import captured
from adcompile.api.derived import jvp_transform

RNG = np.random.default_rng(7)
A = RNG.normal(size=(20, 15))


@pytest.fixture(autouse=True)
def _small_arrays_at_array_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)


def _array_code(t: ad.Transformed) -> bool:
    return t.array_refused is None and "NumPy calls on whole arrays" in ad.explain(t)


def _elementwise(t: ad.Transformed) -> ad.Transformed:
    other = t.__copy__()
    other.array_level = False
    return other


def _fd_jacobian(f, args: list, k: int, h: float = 1e-6) -> np.ndarray:  # noqa: ANN001
    """Central differences of ``f`` in argument ``k``: shape out + argument."""
    base = [np.asarray(a, dtype=float) for a in args]
    cols = []
    for e in np.eye(base[k].size):
        step = e.reshape(base[k].shape) * h
        up = [b + step if j == k else b for j, b in enumerate(base)]
        down = [b - step if j == k else b for j, b in enumerate(base)]
        cols.append((np.asarray(f(*up)) - np.asarray(f(*down))) / (2 * h))
    return np.moveaxis(np.array(cols), 0, -1).reshape(np.shape(f(*base)) + base[k].shape)


def loss(x, y, s):  # noqa: ANN001, ANN201
    """A smooth loss over a captured matrix, with a reduction, a norm and a std."""
    r = np.tanh(A @ x) - y
    return np.sum(r**2) * s + np.linalg.norm(x) + np.std(x * s)


def test_hvp_is_the_derivative_of_the_gradient() -> None:
    x, y, v = RNG.normal(size=15), RNG.normal(size=20), RNG.normal(size=15)
    hvp = ad.hvp(loss)
    got = hvp(x, v, y, 0.7)
    assert _array_code(hvp)
    g = ad.grad(loss)
    want = central_diff(lambda t: g(x + t[0] * v, y, 0.7), [0.0], [1.0])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got, _elementwise(hvp)(x, v, y, 0.7), rtol=1e-10, atol=1e-12)
    x2, v2 = RNG.normal(size=15), RNG.normal(size=15)  # a fresh point: no new trace
    want2 = central_diff(lambda t: g(x2 + t[0] * v2, y, 0.7), [0.0], [1.0])
    np.testing.assert_allclose(hvp(x2, v2, y, 0.7), want2, rtol=1e-6, atol=1e-8)
    assert hvp.traces == 1
    with pytest.raises(ValueError, match="v must have x's shape"):
        hvp(x, v[:3], y, 0.7)


@pytest.mark.parametrize("argnums", [0, 1, 2, (0, 1), (0, 2)])
def test_hessian_blocks(argnums) -> None:  # noqa: ANN001
    x, y = RNG.normal(size=15), RNG.normal(size=20)
    hess = ad.hessian(loss, argnums=argnums)
    got = hess(x, y, 0.7)
    assert _array_code(hess)
    many = isinstance(argnums, tuple)
    nums = argnums if many else (argnums,)
    for a, ka in enumerate(nums):
        for b, kb in enumerate(nums):
            block = got[a][b] if many else got
            g = ad.grad(loss, argnums=ka)
            want = _fd_jacobian(g, [x, y, 0.7], kb)
            np.testing.assert_allclose(block, want, rtol=1e-5, atol=1e-7)
    other = _elementwise(hess)(x, y, 0.7)
    flat = lambda h: np.concatenate([np.ravel(b) for r in h for b in r]) if many else h  # noqa: E731
    np.testing.assert_allclose(flat(got), flat(other), rtol=1e-10, atol=1e-12)


def two_outputs(x, y):  # noqa: ANN001, ANN201
    return np.tanh(A @ x) * y, np.sum(x**2) * np.mean(y)


@pytest.mark.parametrize("mode", ["auto", "forward", "reverse"])
def test_jacobian_of_several_outputs(mode: str) -> None:
    x, y = RNG.normal(size=15), RNG.normal(size=20)
    jac = ad.jacobian(two_outputs, argnums=(0, 1), mode=mode)
    got = jac(x, y)
    assert _array_code(jac)
    for o in range(2):
        for k in range(2):
            want = _fd_jacobian(lambda *a, o=o: two_outputs(*a)[o], [x, y], k)
            assert got[o][k].shape == want.shape
            np.testing.assert_allclose(got[o][k], want, rtol=1e-6, atol=1e-8)


def test_jacobian_of_a_matrix_valued_function() -> None:
    X = RNG.normal(size=(6, 5))
    f = lambda X: np.sin(X) @ A[:5, :4] + X[:, :1] ** 2  # noqa: E731
    jac = ad.jacobian(f)
    got = jac(X)
    assert _array_code(jac) and got.shape == (6, 4, 6, 5)
    np.testing.assert_allclose(got, _fd_jacobian(f, [X], 0), rtol=1e-6, atol=1e-8)


def test_jvp_gives_the_value_and_the_directional_derivative() -> None:
    x, y = RNG.normal(size=15), RNG.normal(size=20)
    tx, ty = RNG.normal(size=15), RNG.normal(size=20)
    jvp = ad.jvp(two_outputs, (x, y), (tx, ty))
    value, tangent = jvp
    for o in range(2):
        np.testing.assert_allclose(value[o], two_outputs(x, y)[o], rtol=1e-13)
        along = lambda t, o=o: two_outputs(x + t[0] * tx, y + t[0] * ty)[o]  # noqa: E731
        want = central_diff(along, [0.0], [1.0])
        np.testing.assert_allclose(tangent[o], want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("zero", [False, True])
def test_second_derivatives_of_prod_at_array_level(zero: bool) -> None:
    # prod's derivative (the product of the others) has its own: its derivative along
    # a vector, whose matrix is symmetric, so it is its adjoint too (exact at a zero)
    def f(x):  # noqa: ANN001, ANN202
        return np.prod(x[:5]) + np.sum(np.prod(np.tanh(x.reshape(3, 4)), axis=1) ** 2)

    x, v = RNG.normal(size=12), RNG.normal(size=12)
    if zero:
        x[2] = 0.0
    hvp, hess = ad.hvp(f), ad.hessian(f)
    got, h = hvp(x, v), hess(x)
    assert _array_code(hvp) and _array_code(hess)
    want = central_diff(lambda t: ad.grad(f)(x + t[0] * v), [0.0], [1.0])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(h @ v, got, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(h, _elementwise(hess)(x), rtol=1e-10, atol=1e-12)


def only_on_arrays(x):  # noqa: ANN001, ANN201
    """Runs on traced arrays, not on arrays of Values: np.zeros written into (a float
    array cannot hold a Value) and np.logaddexp.reduce (no loop for objects)."""
    z = np.zeros(len(x))
    z[0] = x[0]
    z[1:] = x[1:] * x[:-1]
    return np.logaddexp.reduce(z)


def test_check_grad_and_sympy_expand_array_nodes_into_elements(monkeypatch) -> None:  # noqa: ANN001
    import sympy

    from adcompile.api import tracing

    x = RNG.normal(size=5)
    report = ad.check_grad(only_on_arrays, x)  # raises where the methods disagree
    assert report.ok and "sympy" in str(report)
    expr = ad.to_sympy(only_on_arrays, x)
    syms = sympy.symbols("x_0:5")
    assert float(expr.subs(dict(zip(syms, x)))) == pytest.approx(only_on_arrays(x), rel=1e-12)
    tape = ad.trace(only_on_arrays, x)
    assert tape.evaluate(*x)[0] == pytest.approx(only_on_arrays(x), rel=1e-12)
    two = lambda x: np.stack([only_on_arrays(x), np.logaddexp.reduce(x**2)])  # noqa: E731
    ad.check_jacobian(two, x)
    monkeypatch.setattr(tracing, "EXPAND_MAX", 20)
    with pytest.raises(ValueError, match="EXPAND_MAX=20"):
        ad.check_grad(only_on_arrays, x)


def test_vmap_of_array_code_runs_it_on_each_point() -> None:
    # (array code runs batched: every point in one program, test_batching)
    X, V, w = RNG.normal(size=(7, 20)), RNG.normal(size=(7, 20)), RNG.normal(size=20)

    def f(x, w):  # noqa: ANN001, ANN202
        return np.sum(np.tanh(x * w) ** 2) + np.std(x)

    values = ad.vmap(f, in_axes=(0, None))(X, w)
    np.testing.assert_allclose(values, [f(x, w) for x in X], rtol=1e-13)
    grads = ad.vmap(ad.grad(f, argnums=1), in_axes=(0, None))(X, w)
    t = np.tanh(X * w)
    np.testing.assert_allclose(grads, 2 * t * (1 - t**2) * X, rtol=1e-11, atol=1e-14)
    hv = ad.vmap(ad.hvp(f), in_axes=(0, 0, None))(X, V, w)
    g = ad.grad(f)
    for x, v, got in zip(X, V, hv):
        want = central_diff(lambda s, x=x, v=v: g(x + s[0] * v, w), [0.0], [1.0])
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    z = ad.vmap(only_on_arrays)(X)  # runs at array level only
    np.testing.assert_allclose(z, [only_on_arrays(x) for x in X], rtol=1e-13)


@pytest.mark.parametrize("name", list(CASES))
def test_jvp_of_each_numpy_function_is_a_forward_sweep(name: str) -> None:
    """Every array op's forward rule (``ArrayOp.jvp``; element-wise ops through their
    reverse rules): ad.jvp is one forward sweep, held against the gradient dotted
    with the tangent and central differences. np.prod's too: its forward rule needs
    the product of the others, not their derivative (which np.prod has none of)."""
    f, x = CASES[name]
    t = RNG.normal(size=x.shape)
    value, tangent = ad.jvp(f, (x,), (t,))
    assert value == pytest.approx(float(f(x)), rel=1e-12, abs=1e-13)
    g = ad.grad(f)(x)
    assert tangent == pytest.approx(float(np.sum(g * t)), rel=1e-9, abs=1e-10)
    want = central_diff(lambda s: f(x + s[0] * t), [0.0], [1.0])
    assert tangent == pytest.approx(want, rel=1e-5, abs=1e-6)
    text = ad.explain(jvp_transform(f))
    assert "a forward sweep" in text, text
