"""adcompile.nn: micrograd's modules, PyTorch-style layers and losses.

Every number is checked against micrograd itself, a hand derivation, a float
NumPy computation or torch (skipped cleanly when torch is not installed).
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

import adcompile.nn as nn
from adcompile.datasets import make_moons
from adcompile.trace.tensor import ValueArray, tensor
from adcompile.trace.value import Value


def _sig(x):
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------- micrograd


def test_mlp_matches_micrograd_forward_backward_and_repr():
    mg = pytest.importorskip("micrograd.nn")
    random.seed(3)
    ours = nn.MLP(3, [4, 4, 1])
    random.seed(3)
    theirs = mg.MLP(3, [4, 4, 1])
    assert repr(ours) == repr(theirs)
    assert [p.data for p in ours.parameters()] == [p.data for p in theirs.parameters()]
    x = [0.5, -1.5, 2.0]
    a, b = ours(x), theirs(x)
    assert isinstance(a, Value)  # one output: a Value, not a list
    assert a.data == pytest.approx(b.data, rel=1e-14)
    a.backward()
    b.backward()
    np.testing.assert_allclose(
        [p.grad for p in ours.parameters()], [p.grad for p in theirs.parameters()], rtol=1e-13
    )


def test_layer_and_neuron_shapes():
    random.seed(0)
    assert isinstance(nn.Layer(2, 3)([1.0, 2.0]), list)
    assert isinstance(nn.Layer(2, 1)([1.0, 2.0]), Value)
    n = nn.Neuron(2, nonlin=False)
    assert repr(n) == "LinearNeuron(2)" and repr(nn.Neuron(2)) == "ReLUNeuron(2)"
    assert n.b.data == 0.0 and all(-1 <= w.data <= 1 for w in n.w)
    # hand computation: w . x + b
    assert n([3.0, -1.0]).data == pytest.approx(n.w[0].data * 3.0 - n.w[1].data, rel=1e-15)
    assert len(nn.MLP(2, [16, 16, 1]).parameters()) == 2 * 16 + 16 + 16 * 16 + 16 + 16 + 1


def test_micrograd_style_training_reduces_the_loss():
    random.seed(0)
    X, y = make_moons(20, noise=0.1, seed=2)
    model = nn.MLP(2, [8, 8, 1])
    losses = []
    for k in range(20):
        scores = [model(x) for x in X.tolist()]
        data_loss = sum((1 + -yi * s).relu() for yi, s in zip(y.tolist(), scores)) / len(y)
        loss = data_loss + 1e-4 * sum(p * p for p in model.parameters())
        model.zero_grad()
        assert all(p.grad == 0.0 for p in model.parameters())
        loss.backward()
        for p in model.parameters():
            p.data -= (1.0 - 0.9 * k / 20) * p.grad
        losses.append(loss.data)
    assert losses[-1] < 0.5 * losses[0]


# ---------------------------------------------------------------- Module discovery


class Net(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(2, 3)
        self.blocks = nn.ModuleList([nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1)])
        self.scale = Value(2.0)
        self.extra = [Value(0.1), Value(0.2)]
        self.shared = self.scale  # the same Value again: counted once
        self._cache = Value(5.0)  # private: not a parameter
        self.note = "text"

    def forward(self, x):
        h = self.l1(x).relu()
        for m in self.blocks:
            h = m(h)
        self.last = h[0] * self.scale  # a computed Value: not a parameter
        return self.last + self.extra[0] * self.extra[1]


def test_module_finds_parameters_through_attributes():
    random.seed(0)
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names[:7] == [
        "l1.weight[0,0]", "l1.weight[0,1]", "l1.weight[1,0]", "l1.weight[1,1]",
        "l1.weight[2,0]", "l1.weight[2,1]", "l1.bias[0]",
    ]  # fmt: skip
    assert "blocks.0.weight[2,2]" in names and "blocks.2.bias[0]" in names
    assert names[-3:] == ["scale", "extra[0]", "extra[1]"]
    assert len(names) == (6 + 3) + (9 + 3) + (3 + 1) + 1 + 2
    out = net([1.0, -1.0])
    assert len(net.parameters()) == len(names)  # the computed self.last is not one
    out.backward()
    assert net.scale.grad != 0.0 and net.extra[0].grad == pytest.approx(0.2, rel=1e-15)
    net.zero_grad()
    assert all(p.grad == 0.0 for p in net.parameters())


def test_module_without_forward_says_so():
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1.0)


# ---------------------------------------------------------------- layers


def test_linear_values_grads_and_init_vs_hand_computation():
    random.seed(5)
    lin = nn.Linear(4, 3)
    W, b = lin.weight.data, lin.bias.data
    assert W.shape == (3, 4) and b.shape == (3,)
    assert np.all(np.abs(W) <= 0.5) and np.all(np.abs(b) <= 0.5)  # 1/sqrt(4)
    x = np.array([0.5, -1.0, 2.0, 0.25])
    y = lin(x)
    assert isinstance(y, ValueArray) and y.shape == (3,)
    np.testing.assert_allclose(y.data, W @ x + b, rtol=1e-14)
    y.sum().backward()
    np.testing.assert_allclose(lin.weight.grad, np.tile(x, (3, 1)), rtol=1e-15)
    np.testing.assert_allclose(lin.bias.grad, np.ones(3), rtol=1e-15)
    # a batch of rows, and Values as input
    batch = lin(np.stack([x, 2 * x]))
    assert batch.shape == (2, 3)
    np.testing.assert_allclose(batch.data[1], W @ (2 * x) + b, rtol=1e-14)
    xs = tensor(x)
    lin(xs).sum().backward()
    np.testing.assert_allclose(xs.grad, W.sum(axis=0), rtol=1e-14)
    assert len(nn.Linear(4, 3, bias=False).parameters()) == 12
    assert repr(lin) == "Linear(in_features=4, out_features=3, bias=True)"
    with pytest.raises(ValueError, match="last dimension must be 4"):
        lin([1.0, 2.0])


def test_sequential_and_activations_vs_numpy():
    random.seed(2)
    model = nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Linear(5, 2), nn.Sigmoid())
    x = np.array([0.3, -0.7])
    out = model(x)
    assert isinstance(out, ValueArray) and out.shape == (2,)
    (W1, b1), (W2, b2) = [(m.weight.data, m.bias.data) for m in (model[0], model[2])]
    ref = 1 / (1 + np.exp(-(W2 @ np.tanh(W1 @ x + b1) + b2)))
    np.testing.assert_allclose(out.data, ref, rtol=1e-13)
    assert out.relu().shape == (2,)  # element-wise methods on a layer's output
    assert [n for n, _ in model.named_parameters()][0] == "0.weight[0,0]"
    assert len(model) == 4 and "(1): Tanh()" in repr(model)
    v = Value(-2.0)
    assert nn.ReLU()(v).data == 0.0 and nn.Tanh()(v).data == pytest.approx(math.tanh(-2.0))
    np.testing.assert_allclose(nn.Sigmoid()([v, 0.0]).data, [_sig(-2.0), 0.5], rtol=1e-15)


def test_linear_matches_torch():
    torch = pytest.importorskip("torch")
    random.seed(4)
    lin = nn.Linear(3, 2)
    t = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        t.weight.copy_(torch.tensor(lin.weight.data))
        t.bias.copy_(torch.tensor(lin.bias.data))
    X = np.array([[0.1, 0.2, -0.3], [1.0, -2.0, 0.5]])
    out = lin(X)
    tout = t(torch.tensor(X))
    np.testing.assert_allclose(out.data, tout.detach().numpy(), rtol=1e-14)
    out.tanh().sum().backward()
    tout.tanh().sum().backward()
    np.testing.assert_allclose(lin.weight.grad, t.weight.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(lin.bias.grad, t.bias.grad.numpy(), rtol=1e-13)


# ---------------------------------------------------------------- losses


def _values(xs):
    return [Value(float(x)) for x in xs]


def test_mse_loss_by_hand():
    p = _values([1.0, 2.0])
    loss = nn.MSELoss()(p, [0.0, 4.0])  # ((1-0)^2 + (2-4)^2) / 2
    assert loss.data == 2.5
    loss.backward()
    assert [v.grad for v in p] == [1.0, -2.0]  # 2 (p - t) / n
    assert nn.MSELoss(reduction="sum")(p, [0.0, 4.0]).data == 5.0
    none = nn.MSELoss(reduction="none")(p, [0.0, 4.0])
    assert isinstance(none, ValueArray) and none.data.tolist() == [1.0, 4.0]
    assert nn.MSELoss()(Value(3.0), 1.0).data == 4.0  # a single prediction, a number target


def test_bce_loss_by_hand():
    p = _values([0.8, 0.3])
    loss = nn.BCELoss()(p, [1, 0])
    assert loss.data == pytest.approx(-(math.log(0.8) + math.log(0.7)) / 2, rel=1e-15)
    loss.backward()
    # d/dp of -(t log p + (1-t) log(1-p)) / n = (-t/p + (1-t)/(1-p)) / n
    assert p[0].grad == pytest.approx(-1 / 0.8 / 2, rel=1e-14)
    assert p[1].grad == pytest.approx(1 / 0.7 / 2, rel=1e-14)
    soft = Value(0.4)
    nn.BCELoss()(soft, 0.25).backward()  # a soft target uses both terms
    assert soft.grad == pytest.approx(-0.25 / 0.4 + 0.75 / 0.6, rel=1e-14)
    # PyTorch clamps each log at -100
    assert nn.BCELoss()(Value(0.0), 1.0).data == 100.0


def test_bce_with_logits_by_hand_and_stable():
    x = _values([2.0, -1.0])
    loss = nn.BCEWithLogitsLoss()(x, [1, 0])
    assert loss.data == pytest.approx((math.log1p(math.exp(-2)) + math.log1p(math.exp(-1))) / 2)
    loss.backward()
    assert x[0].grad == pytest.approx((_sig(2.0) - 1) / 2, rel=1e-14)
    assert x[1].grad == pytest.approx(_sig(-1.0) / 2, rel=1e-14)
    big = _values([1000.0, -1000.0, 1000.0, -1000.0])
    each = nn.BCEWithLogitsLoss(reduction="none")(big, [0, 1, 1, 0])
    assert each.data.tolist() == [1000.0, 1000.0, 0.0, 0.0]
    each.sum().backward()
    assert [v.grad for v in big] == [1.0, -1.0, 0.0, 0.0]  # sigmoid(x) - t


def test_hinge_loss_by_hand():
    s = _values([0.5, -2.0, 3.0, 2.0])
    loss = nn.HingeLoss()(s, [1, 1, -1, 1])  # relu(1 - y s): 0.5, 3, 4, 0
    assert loss.data == 7.5 / 4
    loss.backward()
    assert [v.grad for v in s] == [-0.25, -0.25, 0.25, 0.0]


def test_cross_entropy_by_hand_and_stable():
    z = _values([1.0, 2.0, 3.0])
    loss = nn.CrossEntropyLoss()(z, 0)
    lse = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    assert loss.data == pytest.approx(lse - 1.0, rel=1e-15)
    loss.backward()
    soft = [math.exp(v - lse) for v in (1, 2, 3)]
    np.testing.assert_allclose([v.grad for v in z], [soft[0] - 1, soft[1], soft[2]], rtol=1e-14)
    big = _values([1000.0, 0.0, -1000.0])
    loss = nn.CrossEntropyLoss()(big, 1)
    assert loss.data == 1000.0
    loss.backward()
    assert [v.grad for v in big] == [1.0, -1.0, 0.0]
    rows = tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    each = nn.CrossEntropyLoss(reduction="none")(rows, [0, 2])
    np.testing.assert_allclose(each.data, [lse - 1.0, math.log(3.0)], rtol=1e-15)
    with pytest.raises(ValueError, match="class index"):
        nn.CrossEntropyLoss()(z, 3)


def test_loss_input_checks():
    with pytest.raises(ValueError, match="2 prediction"):
        nn.MSELoss()(_values([1, 2]), [1, 2, 3])
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")


LOSSES = [
    ("MSELoss", nn.MSELoss, [0.2, -1.3, 0.7], [0.0, 1.0, 0.5], None),
    ("BCELoss", nn.BCELoss, [0.2, 0.9, 0.6], [0.0, 1.0, 0.3], None),
    ("BCEWithLogitsLoss", nn.BCEWithLogitsLoss, [0.2, -3.0, 40.0], [0.0, 1.0, 0.3], None),
    ("CrossEntropyLoss", nn.CrossEntropyLoss, [[0.2, -1.3, 0.7], [5.0, 1.0, -2.0]], [2, 0], None),
]


@pytest.mark.parametrize("name, ours, x, t, _", LOSSES, ids=[c[0] for c in LOSSES])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_match_torch(name, ours, x, t, _, reduction):
    torch = pytest.importorskip("torch")
    xv = tensor(x)
    out = ours(reduction=reduction)(xv, t)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tt = torch.tensor(t, dtype=torch.long if name == "CrossEntropyLoss" else torch.float64)
    ref = getattr(torch.nn, name)(reduction=reduction)(xt, tt)
    np.testing.assert_allclose(np.asarray(out.data), ref.detach().numpy(), rtol=1e-13)
    (out.sum() if reduction == "none" else out).backward()
    ref.sum().backward()
    np.testing.assert_allclose(xv.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------- state_dict


def test_state_dict_round_trip():
    random.seed(0)
    a = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    random.seed(1)
    b = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    x = [0.4, -0.9]
    assert a(x).data[0] != b(x).data[0]
    state = json.loads(json.dumps(a.state_dict()))  # plain floats and lists
    assert list(state) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert state["0.weight"] == a[0].weight.data.tolist()
    b.load_state_dict(state)
    assert a(x).data[0] == b(x).data[0]
    assert [p.data for p in a.parameters()] == [p.data for p in b.parameters()]
    with pytest.raises(KeyError, match="missing"):
        b.load_state_dict({"0.weight": state["0.weight"]})
    with pytest.raises(ValueError, match="shape"):
        b.load_state_dict({**state, "0.bias": [1.0, 2.0]})


def test_state_dict_of_micrograd_mlp():
    random.seed(0)
    m = nn.MLP(2, [2, 1])
    state = m.state_dict()
    assert state["layers.1.neurons.0.b"] == 0.0
    assert state["layers.0.neurons.1.w"] == [p.data for p in m.layers[0].neurons[1].w]
    random.seed(9)
    m2 = nn.MLP(2, [2, 1])
    m2.load_state_dict(state)
    assert m2([1.0, 2.0]).data == m([1.0, 2.0]).data
