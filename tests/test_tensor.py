"""ad.tensor / ValueArray: NumPy object arrays of Values, checked against float NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import adcompile as ad
from adcompile.ir import ops
from adcompile.trace.tensor import ValueArray, data, grad_of, tensor
from adcompile.trace.value import Value

RNG = np.random.default_rng(7)
A = RNG.normal(size=(2, 3))
B = RNG.normal(size=3)


def test_tensor_makes_leaves_of_the_same_shape():
    t = tensor(A)
    assert isinstance(t, ValueArray) and t.shape == (2, 3)
    assert t.dtype == np.float64 and t.view(np.ndarray).dtype == object  # (Values, for floats)
    assert all(isinstance(v, Value) and v._op == "" and v.requires_grad for v in t.flat)
    np.testing.assert_array_equal(t.data, A)
    np.testing.assert_array_equal(t.grad, np.zeros((2, 3)))
    assert not any(v.requires_grad for v in tensor([1.0, 2.0], requires_grad=False).flat)
    assert tensor([[1, 2]]).shape == (1, 2)


def test_tensor_keeps_values_it_is_given():
    v = Value(3.0)
    t = tensor([v, 2.0])
    assert t[0] is v and t[1].data == 2.0


def test_broadcasting_values_and_gradients():
    a, b = tensor(A), tensor(B)
    out = a * b + 1.0
    assert isinstance(out, ValueArray) and out.shape == (2, 3)
    np.testing.assert_allclose(out.data, A * B + 1.0, rtol=0, atol=0)
    total = out.sum()
    assert isinstance(total, Value)  # a full reduction gives the Value itself
    total.backward()
    # d sum(a_ij b_j) / d a_ij = b_j ; / d b_j = sum_i a_ij
    np.testing.assert_allclose(a.grad, np.broadcast_to(B, (2, 3)), rtol=1e-15)
    np.testing.assert_allclose(b.grad, A.sum(axis=0), rtol=1e-15)


def test_matmul_and_mean():
    a, b = tensor(A), tensor(B)
    y = a @ b
    assert isinstance(y, ValueArray) and y.shape == (2,)
    np.testing.assert_allclose(y.data, A @ B, rtol=1e-15)
    m = y.mean()
    assert isinstance(m, Value)
    assert m.data == pytest.approx(np.mean(A @ B), rel=1e-14)
    m.backward()
    # mean_i sum_j a_ij b_j: d/da_ij = b_j / 2, d/db_j = sum_i a_ij / 2
    np.testing.assert_allclose(a.grad, np.outer([0.5, 0.5], B), rtol=1e-15)
    np.testing.assert_allclose(b.grad, A.sum(axis=0) / 2, rtol=1e-15)


def test_axis_reductions_stay_arrays():
    a = tensor(A)
    s = a.sum(axis=0)
    assert isinstance(s, ValueArray) and s.shape == (3,)
    np.testing.assert_allclose(s.data, A.sum(axis=0), rtol=1e-15)
    np.testing.assert_allclose(a.mean(axis=1).data, A.mean(axis=1), rtol=1e-15)


@pytest.mark.parametrize(
    "name, ref, dref",
    [
        ("tanh", np.tanh, lambda x: 1 - np.tanh(x) ** 2),
        ("exp", np.exp, np.exp),
        ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2),
        ("relu", lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(float)),
        ("sin", np.sin, np.cos),
        ("softplus", lambda x: np.log1p(np.exp(x)), lambda x: 1 / (1 + np.exp(-x))),
    ],
)
def test_elementwise_methods_and_ufuncs(name, ref, dref):
    for how in ("method", "ufunc"):
        a = tensor(A)
        if how == "method":
            out = getattr(a, name)()
        elif hasattr(np, name):
            out = getattr(np, name)(a)
        else:
            continue
        assert isinstance(out, ValueArray) and out.shape == A.shape
        np.testing.assert_allclose(out.data, ref(A), rtol=1e-13)
        out.sum().backward()
        np.testing.assert_allclose(a.grad, dref(A), rtol=1e-12)


def test_binary_op_method_broadcasts():
    a = tensor(A)
    np.testing.assert_array_equal(a.maximum(0.0).data, np.maximum(A, 0.0))


def test_every_unary_op_is_a_method():
    a = tensor([0.5])
    for name, op in ops.OPS.items():
        if op.arity == 1:
            with np.errstate(invalid="ignore"):  # arccosh(0.5) is nan: NumPy's vectorize says so
                got, want = getattr(a, name)().data[0], op.eval(0.5)
            same = math.isclose(got, want, rel_tol=1e-15) or (math.isnan(got) and math.isnan(want))
            assert same, name


@pytest.fixture
def cube_op():
    name = "test_tensor_cube"
    op = ops.defop(name, 1, lambda x: x**3, "({0} ** 3)", (lambda g, out, a: g * 3.0 * a * a,))
    yield op
    del ops.OPS[name]


def test_user_defined_op_becomes_a_method(cube_op):
    a = tensor([1.0, 2.0, -3.0])
    assert "test_tensor_cube" in dir(a)
    out = a.test_tensor_cube()
    np.testing.assert_array_equal(out.data, [1.0, 8.0, -27.0])
    out.sum().backward()
    np.testing.assert_array_equal(a.grad, [3.0, 12.0, 27.0])


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_op"):
        tensor([1.0]).no_such_op()


def test_backward_needs_a_scalar():
    a = tensor(A)
    with pytest.raises(ValueError, match=r"backward\(\) needs a scalar.*sum\(\)"):
        (a * 2.0).backward()
    b = tensor([2.0])
    (b * b).backward()
    assert b.grad.tolist() == [4.0]


def test_data_and_grad_setters_for_micrograd_style_updates():
    a = tensor([[1.0, 2.0], [3.0, 4.0]])
    (a * a).sum().backward()
    np.testing.assert_array_equal(a.grad, 2 * np.array([[1.0, 2.0], [3.0, 4.0]]))
    a.data -= 0.25 * a.grad
    np.testing.assert_array_equal(a.data, [[0.5, 1.0], [1.5, 2.0]])
    a.grad = 0.0
    np.testing.assert_array_equal(a.grad, np.zeros((2, 2)))


def test_data_and_grad_of_helpers():
    x, y = Value(1.5), Value(-2.0)
    (x * y).backward()
    assert data(x) == 1.5 and grad_of(x) == -2.0
    np.testing.assert_array_equal(data([[x, y], [0.5, 1]]), [[1.5, -2.0], [0.5, 1.0]])
    np.testing.assert_array_equal(grad_of([[x, y], [0.5, 1]]), [[-2.0, 1.5], [0.0, 0.0]])
    assert data(np.array([x, y])).shape == (2,)


def test_zeros_numpy_makes_in_an_array_of_values_divide_as_floats():
    """np.diag of an array of Values fills with the int 0 (an object array's zero):
    1.0 / 0 would raise where NumPy's float array gives inf."""
    v = np.array([1.0, 2.0, 3.0])

    def f(v):
        return np.sum(np.arctan(1.0 / np.diag(v)))

    vg = ad.value_and_grad(f)
    vg.array_level = False  # (element by element, as small arrays and compile_loss go)
    with np.errstate(divide="ignore"):
        value, g = vg(v)
        assert value == pytest.approx(f(v), rel=1e-14)  # 6 off-diagonal arctan(inf)
    np.testing.assert_allclose(g, -1.0 / (v**2 + 1.0), rtol=1e-14)
