"""micrograd's own way of making an op (``Value(data, (a,), 'op')`` then
``out._backward = fn``) and of backpropagating by hand (``o._backward()`` node by
node), as in micrograd's lecture: checked against hand-derived derivatives, the
built-in ops' ``backward()`` and central differences. A trace refuses them by name."""

from __future__ import annotations

import math

import numpy as np
import pytest

import adcompile as ad
from adcompile import Value


def _tanh_by_hand(a: Value) -> Value:
    """The lecture's tanh: the value from math, the derivative in a closure."""
    x = a.data
    t = (math.exp(2 * x) - 1) / (math.exp(2 * x) + 1)
    out = Value(t, (a,), "tanh")

    def _backward() -> None:
        a.grad += (1 - t**2) * out.grad

    out._backward = _backward
    return out


def test_an_op_made_by_hand_passes_its_gradient_on():
    a = Value(0.5)
    y = _tanh_by_hand(a) * 3.0 + a
    y.backward()
    want = 3.0 * (1 - math.tanh(0.5) ** 2) + 1.0  # by hand
    assert a.grad == pytest.approx(want, rel=1e-14)
    y.backward()  # the same again, as for the built-in ops
    assert a.grad == pytest.approx(2 * want, rel=1e-14)
    assert y._prev[0]._prev[0]._op == "tanh"


def test_an_op_made_by_hand_inside_a_graph_matches_the_built_in_op():
    for x0 in (-1.3, 0.2, 2.0):
        a, b = Value(x0), Value(x0)
        mine = _tanh_by_hand(a * a + 1.0) * a
        theirs = (b * b + 1.0).tanh() * b
        mine.backward()
        theirs.backward()
        assert mine.data == pytest.approx(theirs.data, rel=1e-14)
        assert a.grad == pytest.approx(b.grad, rel=1e-13)


class MyValue(Value):
    """A user's subclass adding an op the micrograd way (its exp, with both operands
    of a product the same Value)."""

    def myexp(self) -> MyValue:
        out = MyValue(math.exp(self.data), (self,), "exp")

        def _backward() -> None:
            self.grad += out.data * out.grad

        out._backward = _backward
        return out

    def square(self) -> MyValue:
        out = MyValue(self.data * self.data, (self, self), "*")

        def _backward() -> None:  # micrograd's __mul__ with other = self
            self.grad += self.data * out.grad
            self.grad += self.data * out.grad

        out._backward = _backward
        return out


def test_a_subclass_op_made_by_hand_agrees_with_central_differences():
    def f(x: float) -> float:
        v = MyValue(x)
        return v.square().myexp() * v

    for x0 in (-0.7, 0.3, 1.1):
        v = MyValue(x0)
        out = v.square().myexp() * v
        out.backward()
        h = 1e-6
        fd = (f(x0 + h).data - f(x0 - h).data) / (2 * h)
        assert v.grad == pytest.approx(fd, rel=1e-7)
        assert v.grad == pytest.approx(math.exp(x0**2) * (2 * x0**2 + 1), rel=1e-13)


def test_an_op_made_by_hand_without_backward_passes_nothing_on():
    """micrograd's default ``_backward`` does nothing: its operands get no gradient."""
    a = Value(2.0)
    out = Value(a.data * 3, (a,), "thrice")
    (out * out).backward()
    assert a.grad == 0.0 and out.grad == 12.0


def test_backpropagation_by_hand_as_in_the_lecture():
    """The lecture's neuron, its gradients found by calling ``_backward()`` node by
    node (the values it derives by hand: x1 -1.5, w1 1.0, x2 0.5, w2 0.0)."""
    x1, x2 = Value(2.0, label="x1"), Value(0.0, label="x2")
    w1, w2 = Value(-3.0, label="w1"), Value(1.0, label="w2")
    b = Value(6.8813735870195432, label="b")
    x1w1 = x1 * w1
    x2w2 = x2 * w2
    s = x1w1 + x2w2
    n = s + b
    o = n.tanh()
    o.grad = 1.0
    for v in (o, n, s, x2w2, x1w1):
        v._backward()
    assert n.grad == pytest.approx(1 - o.data**2, rel=1e-14) and n.grad == pytest.approx(0.5)
    assert [x1.grad, w1.grad, x2.grad, w2.grad] == pytest.approx([-1.5, 1.0, 0.5, 0.0])
    grads = [p.grad for p in (x1, w1, x2, w2, b)]
    for p in (x1, w1, x2, w2, b):
        p.grad = 0.0
    ((x1 * w1 + x2 * w2) + b).tanh().backward()
    assert [p.grad for p in (x1, w1, x2, w2, b)] == pytest.approx(grads, rel=1e-14)


def test_a_leafs_backward_by_hand_does_nothing():
    a = Value(1.0)
    a.grad = 2.0
    a._backward()
    assert a.grad == 2.0


@pytest.mark.parametrize(
    "body",
    [
        lambda x: Value(math.tanh(1.0), (x,), "tanh") * x,  # the data is a number of the trace
        lambda x: _tanh_by_hand(x),
        lambda x: (x * 2)._backward() or x,
    ],
    ids=["made-by-hand", "backward-assigned", "backward-by-hand"],
)
def test_a_trace_refuses_an_op_made_by_hand(body):
    with pytest.raises(TypeError, match="micrograd-style op"):
        ad.grad(body)(0.5)


def test_numpy_booleans_are_numbers_on_either_side():
    """``Value - np.True_`` as ``Value - True`` (np.bool_ is no numbers.Real)."""
    v = Value(2.5)
    for got, want in (
        (v - np.True_, 1.5),
        (np.True_ - v, -1.5),
        (v * np.False_, 0.0),
        (v**np.True_, 2.5),
        (ad.maximum(v, np.True_), 2.5),
    ):
        assert got.data == want
    y = np.array([0.3, -1.2]) > 0  # boolean labels, as a micrograd loss reads them
    f = lambda w: sum((ad.sigmoid(w * xi) - yi) ** 2 for xi, yi in zip([0.5, 2.0], y))  # noqa: E731
    w = 0.7
    g = ad.grad(f)(w)
    s = [1 / (1 + math.exp(-w * xi)) for xi in (0.5, 2.0)]
    want = sum(2 * (si - yi) * si * (1 - si) * xi for si, yi, xi in zip(s, (1, 0), (0.5, 2.0)))
    assert g == pytest.approx(want, rel=1e-12)


def test_clear_errors_for_what_cannot_be_backpropagated_by_hand():
    a = Value(1.0)
    with pytest.raises(TypeError, match="children are the Values"):
        Value(2.0, (a, 2.0), "*")
    model = ad.MLP(2, [3, 1])
    step = ad.compile_loss(lambda X: sum(model(x) ** 2 for x in X), model.parameters())
    loss = step(np.array([[0.5, -1.0], [1.5, 0.25]]))
    with pytest.raises(TypeError, match="call backward"):
        loss._backward()  # (its gradient is the compiled code's: backward() adds it)
    loss.backward()
    assert any(p.grad != 0.0 for p in model.parameters())
