"""jacobian, hessian, jvp and hvp (issue 18): hand-derived derivatives, central
finite differences and SymPy, in JAX's shapes."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import adcompile as ad
from adcompile.api import derived as transforms


def rosen(x):
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def rosen_hessian(x):
    """Rosenbrock's Hessian, by hand (tridiagonal)."""
    n = len(x)
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        h[i + 1, i + 1] += 200
        h[i, i + 1] -= 400 * x[i]
        h[i + 1, i] -= 400 * x[i]
    return h


def fd_jacobian(f, x, h=1e-6):
    """Central differences of a function of one float array (any output shape)."""
    x = np.asarray(x, float)
    y0 = np.asarray(f(x), float)
    jac = np.zeros(y0.shape + x.shape)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        jac[(...,) + idx] = (np.asarray(f(xp)) - np.asarray(f(xm))) / (2 * h)
    return jac


def vec3(x):
    return np.array([x[0] * x[1], ad.sin(x[0]), ad.exp(x[1]) * x[0]])


def vec3_jacobian(x):
    return np.array([[x[1], x[0]], [math.cos(x[0]), 0.0], [math.exp(x[1]), math.exp(x[1]) * x[0]]])


X2 = np.array([0.3, -0.7])


# ------------------------------------------------------------------ jacobian


@pytest.mark.parametrize("mode", ["auto", "reverse", "forward"])
def test_jacobian_hand_derived(mode):
    jac = ad.jacobian(vec3, mode=mode)(X2)
    assert isinstance(jac, np.ndarray) and jac.shape == (3, 2)
    np.testing.assert_allclose(jac, vec3_jacobian(X2), rtol=1e-14)


def test_jacobian_says_which_sweeps():
    wide = ad.jacobian(lambda x: x[0] * x[1] + ad.sin(x[2]))  # 1 output, 3 inputs
    wide(np.array([0.1, 0.2, 0.3]))
    assert "reverse-mode" in wide.explanation
    tall = ad.jacobian(lambda t: np.array([ad.sin(t), ad.cos(t), t * t]))  # 3 outputs, 1 input
    np.testing.assert_allclose(tall(0.4), [math.cos(0.4), -math.sin(0.4), 0.8], rtol=1e-14)
    assert "forward-mode" in tall.explanation
    assert "forward-mode" in ad.show_code(tall, 0.4)


def test_jacobian_shapes_follow_jax():
    # scalar of a scalar: a float
    d = ad.jacobian(lambda t: ad.sin(t) * t)(0.5)
    assert isinstance(d, float)
    assert d == pytest.approx(math.cos(0.5) * 0.5 + math.sin(0.5), rel=1e-14)
    # array output of a 2-D argument: output shape + argument shape
    w = np.array([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]])

    def f(m):
        return np.array([ad.tanh(m[0] @ m[1]), (m * m).sum(), ad.exp(m[1, 2]), m[0, 0] * 3.0])

    jac = ad.jacobian(f)(w)
    assert jac.shape == (4, 2, 3)
    np.testing.assert_allclose(jac, fd_jacobian(f, w), rtol=1e-7, atol=1e-9)


def test_jacobian_of_tuple_and_list_outputs_and_tuple_argnums():
    def f(x, s):
        return (x[0] * s, np.array([ad.sin(x[1]), x[0] * x[1] * s]))

    x, s = np.array([0.2, 0.9]), 1.7
    j1, j2 = ad.jacobian(f)(x, s)
    np.testing.assert_allclose(j1, [s, 0.0], rtol=1e-14)
    np.testing.assert_allclose(j2, [[0.0, math.cos(0.9)], [0.9 * s, 0.2 * s]], rtol=1e-14)
    (a, b), (c, d) = ad.jacobian(f, argnums=(0, 1))(x, s)
    assert a.shape == (2,) and isinstance(b, float) and c.shape == (2, 2) and d.shape == (2,)
    assert b == pytest.approx(0.2, rel=1e-14)
    np.testing.assert_allclose(d, [0.0, 0.18], rtol=1e-14)
    as_list = ad.jacobian(lambda x: [x[0] * x[1], x[1]])(x)
    assert isinstance(as_list, list) and len(as_list) == 2
    np.testing.assert_allclose(as_list[0], [0.9, 0.2], rtol=1e-14)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_large_jacobian_loops_over_basis_vectors(mode):
    n = 3 * transforms.DIRECT_MAX

    def f(x):
        return np.array([ad.sin(x[i]) * x[(i + 1) % n] + 0.1 * x[i] ** 2 for i in range(n)])

    x = np.cos(np.arange(n) * 0.7)
    jac = ad.jacobian(f, mode=mode)
    got = jac(x)
    expected = np.zeros((n, n))
    for i in range(n):
        expected[i, i] += math.cos(x[i]) * x[(i + 1) % n] + 0.2 * x[i]
        expected[i, (i + 1) % n] += math.sin(x[i])
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15)
    assert "basis vector" in jac.explanation


def test_grad_still_needs_a_scalar():
    with pytest.raises(TypeError, match="must return a scalar"):
        ad.grad(vec3)(X2)


def test_jit_returns_what_f_returns():
    f = ad.jit(lambda x, s: (x * s, (x * x).sum(), [s * 2.0]))
    x = np.array([1.0, 2.0, 3.0])
    a, b, c = f(x, 0.5)
    np.testing.assert_allclose(a, x * 0.5)
    assert b == 14.0 and c == [1.0]
    np.testing.assert_allclose(ad.jit(lambda x: ad.exp(x))(x), np.exp(x), rtol=1e-15)


def test_jacobian_takes_the_other_branch_when_inputs_do():
    def f(x):
        if x[0] > 0:
            return np.array([x[0] * x[1], x[1]])
        return np.array([ad.sin(x[1]), x[0] ** 2])

    jac = ad.jacobian(f)
    np.testing.assert_allclose(jac(np.array([0.5, 2.0])), [[2.0, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(
        jac(np.array([-0.5, 2.0])), [[0.0, math.cos(2.0)], [-1.0, 0.0]], rtol=1e-14
    )
    assert jac.traces == 2


def test_jacobian_agrees_with_sympy():
    sp = pytest.importorskip("sympy")
    x0, x1 = sp.symbols("x0 x1")
    exprs = [sp.sin(x0) * x1**2, sp.exp(x0 * x1) / (1 + x1**2)]
    jac = sp.Matrix(exprs).jacobian([x0, x1])
    point = {x0: 0.4, x1: -1.1}
    expected = np.array(jac.evalf(subs=point), dtype=float)

    def f(x):
        return np.array([ad.sin(x[0]) * x[1] ** 2, ad.exp(x[0] * x[1]) / (1 + x[1] ** 2)])

    np.testing.assert_allclose(ad.jacobian(f)(np.array([0.4, -1.1])), expected, rtol=1e-13)


# ------------------------------------------------------------------ hessian


def test_hessian_of_rosenbrock_by_hand():
    x = 0.9 * np.cos(np.arange(6))
    h = ad.hessian(rosen)(x)
    assert h.shape == (6, 6)
    np.testing.assert_allclose(h, rosen_hessian(x), rtol=1e-13, atol=1e-12)


def test_large_hessian_loops_over_hessian_vector_products():
    n = 40
    x = 0.9 * np.cos(np.arange(n))
    hess = ad.hessian(rosen)
    np.testing.assert_allclose(hess(x), rosen_hessian(x), rtol=1e-13, atol=1e-12)
    assert "basis vector" in hess.explanation
    assert "_one(" in ad.show_code(hess, x)


def test_hessian_tuple_argnums_blocks():
    def g(x, a):
        return a * x[0] ** 2 * x[1] + ad.sin(x[1]) * a**2

    x, a = np.array([0.6, -0.4]), 1.3
    (hxx, hxa), (hax, haa) = ad.hessian(g, argnums=(0, 1))(x, a)
    np.testing.assert_allclose(
        hxx, [[2 * a * x[1], 2 * a * x[0]], [2 * a * x[0], -math.sin(x[1]) * a**2]], rtol=1e-14
    )
    np.testing.assert_allclose(hxa, [2 * x[0] * x[1], x[0] ** 2 + 2 * a * math.cos(x[1])])
    np.testing.assert_allclose(hax, hxa)
    assert isinstance(haa, float) and haa == pytest.approx(2 * math.sin(x[1]), rel=1e-14)


def test_hessian_against_finite_differences_of_grad():
    def f(x):
        return ad.log(1 + (x * x).sum()) * ad.tanh(x[0] - x[2]) + x[1] * x[2] ** 3

    x = np.array([0.3, -0.8, 0.5])
    expected = fd_jacobian(ad.grad(f), x)
    np.testing.assert_allclose(ad.hessian(f)(x), expected, rtol=1e-7, atol=1e-9)


def test_hessian_against_sympy():
    sp = pytest.importorskip("sympy")

    def f(x, y):
        return ad.exp(x * y) * ad.cos(x) + y**3 / (1 + x * x)

    expr = ad.to_sympy(f, 0.3, 0.8)
    syms = sorted(expr.free_symbols, key=lambda s: s.name)
    expected = np.array(sp.hessian(expr, syms).evalf(subs={syms[0]: 0.3, syms[1]: 0.8}), float)
    h = ad.hessian(f, argnums=(0, 1))(0.3, 0.8)
    np.testing.assert_allclose(np.array(h, float), expected, rtol=1e-12)


def test_jacobian_of_grad_is_the_hessian():
    x = 0.9 * np.cos(np.arange(5))
    np.testing.assert_allclose(ad.jacobian(ad.grad(rosen))(x), rosen_hessian(x), rtol=1e-13)


# ------------------------------------------------------------------ hvp


def test_hvp_of_rosenbrock_by_hand():
    rng = np.random.default_rng(3)
    x, v = rng.uniform(-1, 1, 50), rng.normal(size=50)
    got = ad.hvp(rosen)(x, v)
    np.testing.assert_allclose(got, rosen_hessian(x) @ v, rtol=1e-12, atol=1e-10)
    # (the tangent keeps its name; the loop printer renames a parameter named like
    # its work array, v)
    assert "def rosen_hvp(x, arg_v, " in ad.show_code(ad.hvp(rosen), x, v)


def test_hvp_passes_the_other_arguments_on():
    def f(x, a, b):
        return a * (x**4).sum() + b * x[0] * x[1]

    x, v = np.array([0.5, -1.5]), np.array([1.0, 2.0])
    h = np.array([[12 * 2.0 * 0.25, 3.0], [3.0, 12 * 2.0 * 2.25]])
    np.testing.assert_allclose(ad.hvp(f)(x, v, 2.0, 3.0), h @ v, rtol=1e-14)


def test_hvp_in_scipy_trust_ncg():
    optimize = pytest.importorskip("scipy.optimize")
    vg = ad.value_and_grad(rosen)
    x0 = 0.9 * np.cos(np.arange(20))
    res = optimize.minimize(vg, x0, jac=True, method="trust-ncg", hessp=ad.hvp(rosen))
    assert res.success
    np.testing.assert_allclose(res.x, np.ones(20), atol=1e-6)


def test_grad_of_hvp_against_finite_differences():
    v = np.array([1.0, -0.5, 0.25])

    def f(x):
        return ad.sin(x[0] * x[1]) + x[2] ** 3 * x[0]

    def outer(x):
        return (ad.hvp(f)(x, v) * np.array([1.0, 2.0, 3.0])).sum()

    x = np.array([0.2, 0.7, -0.4])
    expected = fd_jacobian(ad.jit(outer), x)
    np.testing.assert_allclose(ad.grad(outer)(x), expected, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------ jvp


def test_jvp_hand_derived():
    x, t = np.array([0.3, -0.7]), np.array([1.5, 2.0])
    y, dy = ad.jvp(vec3, (x,), (t,))
    np.testing.assert_allclose(y, [x[0] * x[1], math.sin(x[0]), math.exp(x[1]) * x[0]])
    np.testing.assert_allclose(dy, vec3_jacobian(x) @ t, rtol=1e-14)


def test_jvp_of_several_arguments_and_scalars():
    def f(x, s):
        return ad.sin(x[0]) * s + x[1] * s**2

    x, s = np.array([0.4, 1.2]), 0.8
    y, dy = ad.jvp(f, (x, s), (np.array([1.0, 0.0]), 1.0))
    assert y == pytest.approx(math.sin(0.4) * s + 1.2 * s**2, rel=1e-15)
    expected = math.cos(0.4) * s + (math.sin(0.4) + 2 * 1.2 * s)
    assert isinstance(dy, float) and dy == pytest.approx(expected, rel=1e-14)
    # a zero tangent may be given as 0
    _, d0 = ad.jvp(f, (x, s), (np.array([0.0, 1.0]), 0))
    assert d0 == pytest.approx(s**2, rel=1e-15)


def test_jvp_errors_say_what_to_pass():
    with pytest.raises(TypeError, match="tuple or list"):
        ad.jvp(vec3, X2, X2)
    with pytest.raises(ValueError, match="shape"):
        ad.jvp(vec3, (X2,), (np.ones(3),))
    with pytest.raises(ValueError, match="tangents"):
        ad.jvp(vec3, (X2,), ())


def test_jvp_compiles_once_per_shape():
    def f(x):
        return (x**3).sum()

    for k in range(3):
        x = np.arange(4.0) + k
        _, d = ad.jvp(f, (x,), (np.ones(4),))
        assert d == pytest.approx((3 * x**2).sum(), rel=1e-14)
    assert transforms.jvp_transform(f).traces == 1


# ------------------------------------------------------------------ data and Numba


def test_closed_over_data_is_read_at_every_call():
    data = np.array([1.0, 2.0, 3.0])

    def f(x):
        return (data * x**2).sum() * x[0]

    hess = ad.hessian(f)
    x = np.array([0.5, 1.0, -1.0])

    def expected():
        h = np.diag(2 * data * x[0])
        h[0, :] += 2 * data * x
        h[:, 0] += 2 * data * x
        return h

    np.testing.assert_allclose(hess(x), expected(), rtol=1e-14)
    data[:] = [3.0, -1.0, 0.5]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read as an input: no retrace, no warning
        np.testing.assert_allclose(hess(x), expected(), rtol=1e-14)


def test_hessian_numba_function_in_njit_code():
    numba = pytest.importorskip("numba")
    hess = ad.hessian(rosen)
    x = 0.9 * np.cos(np.arange(12))
    fn = hess.numba(x)

    @numba.njit
    def diag_sum(x):
        out = np.empty(144)
        ok = fn(x, out)
        return ok, np.trace(out.reshape(12, 12))

    ok, tr = diag_sum(x)
    assert ok
    assert tr == pytest.approx(np.trace(rosen_hessian(x)), rel=1e-13)


def test_user_primitives_in_second_derivatives():
    @ad.primitive(vjp=lambda g, out, x: g * 3.0 * x * x)
    def cube_t(x):
        return x**3

    def f(x):
        return cube_t(x[0]) * x[1]

    x = np.array([2.0, 3.0])
    np.testing.assert_allclose(ad.hessian(f)(x), [[6 * 2.0 * 3.0, 12.0], [12.0, 0.0]])
    assert ad.jvp(f, (x,), (np.array([1.0, 0.0]),)) == (24.0, 36.0)
