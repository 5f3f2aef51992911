"""Every op in the table: value, derivative, interpreter, NumPy float semantics.

The tests are parametrised over ``OPS``, so an op added to the table is
tested here without writing anything new. Values are checked against NumPy
(or SciPy), derivatives against central finite differences along a random
direction, and against PyTorch when it is installed.
"""

from __future__ import annotations

import math
import operator
import warnings
import zlib

import numpy as np
import pytest
from conftest import NUMPY_REF, central_diff, numpy_ref, one_sided_agree

import adcompile as ad
from adcompile import interpret
from adcompile.ops import OPS
from adcompile.value import build_tape

NAMES = sorted(OPS)
INF, NAN = math.inf, math.nan

# The Python operator that stands for an op on Values, where there is one.
OPERATOR = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "pow": operator.pow,
    "neg": operator.neg,
    "abs": abs,
}


def rng_for(name: str, salt: str = "") -> np.random.Generator:
    """A generator seeded by the op's name, so each op's points never change."""
    return np.random.default_rng(zlib.crc32((name + salt).encode()))


def value_forms(name: str) -> list[tuple[str, object]]:
    """Every public way to apply op ``name`` to Values (function, operator, method)."""
    forms = [(f"ad.{name}", getattr(ad, name)), ("Op.__call__", OPS[name])]
    if name in OPERATOR:
        forms.append(("operator", OPERATOR[name]))
    if hasattr(ad.Value, name):
        forms.append(("method", lambda a, *rest, _n=name: getattr(a, _n)(*rest)))
    return forms


def same_float(a: float, b: float, rtol: float = 1e-13) -> bool:
    """Equal as NumPy would print them: nan == nan, infinities exact, else to rtol."""
    if math.isnan(b):
        return math.isnan(a)
    if math.isinf(b) or b == 0.0:
        return a == b
    return abs(a - b) <= rtol * abs(b)


def sample(name: str, rng: np.random.Generator) -> list[float]:
    """A point from the op's test domain; for a kinked op, one away from any kink."""
    op = OPS[name]
    lo, hi = op.domain
    for _ in range(1000):
        xs = [float(x) for x in rng.uniform(lo, hi, size=op.arity)]
        if op.smooth:
            return xs
        d = rng.standard_normal(op.arity)
        f = lambda z: op.eval(*map(float, z))
        if all(one_sided_agree(f, xs, e) for e in np.eye(op.arity)) and one_sided_agree(f, xs, d):
            return xs
    raise AssertionError(f"no point away from {name}'s kinks in {op.domain}")


def reference(name: str):
    """The float function finite differences use: NumPy's where it exists."""
    if name in NUMPY_REF:
        return lambda z: numpy_ref(name, *z)
    return lambda z: OPS[name].eval(*map(float, z))


# ---------------------------------------------------------------- values


@pytest.mark.parametrize("name", NAMES)
def test_every_form_matches_eval_and_numpy(name):
    op = OPS[name]
    rng = rng_for(name)
    for _ in range(5):
        xs = sample(name, rng)
        expected = op.eval(*xs)
        assert type(expected) is float
        if name in NUMPY_REF:
            assert same_float(expected, numpy_ref(name, *xs)), (name, xs)
        got = getattr(ad, name)(*xs)
        assert type(got) is float and got == expected
        for label, form in value_forms(name):
            vs = [ad.Value(x) for x in xs]
            out = form(*vs)
            assert isinstance(out, ad.Value), label
            assert out.data == expected, label
            if op.arity == 2:  # a plain number on either side
                assert form(vs[0], xs[1]).data == expected, label
                if label != "method":
                    assert form(xs[0], vs[1]).data == expected, label


SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, 1000.0, -1000.0, INF, -INF, NAN]


@pytest.mark.parametrize("name", NAMES)
def test_special_values_follow_numpy(name):
    if name not in NUMPY_REF:
        pytest.skip(f"no NumPy reference for {name}")
    op = OPS[name]
    points = (
        [(x,) for x in SPECIAL] if op.arity == 1 else [(a, b) for a in SPECIAL for b in SPECIAL]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning, no exception: NumPy's values
        for xs in points:
            expected = numpy_ref(name, *xs)
            assert same_float(op.eval(*xs), expected), (name, xs, op.eval(*xs), expected)
            assert same_float(getattr(ad, name)(*xs), expected), (name, xs)
            for label, form in value_forms(name):
                got = form(*[ad.Value(x) for x in xs]).data
                assert same_float(got, expected), (name, label, xs, got, expected)


@pytest.mark.parametrize("name", NAMES)
def test_functions_apply_elementwise_to_arrays(name):
    op = OPS[name]
    rng = rng_for(name, "array")
    pts = np.array([sample(name, rng) for _ in range(6)]).T.reshape(op.arity, 2, 3)
    out = getattr(ad, name)(*pts)
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)
    for idx in np.ndindex(2, 3):
        assert out[idx] == op.eval(*(float(p[idx]) for p in pts))
    objs = [np.vectorize(ad.Value, otypes=[object])(p) for p in pts]
    vout = getattr(ad, name)(*objs)
    assert vout.shape == (2, 3) and vout.dtype == object
    for idx in np.ndindex(2, 3):
        assert isinstance(vout[idx], ad.Value) and vout[idx].data == out[idx]


# ---------------------------------------------------------------- derivatives


@pytest.mark.parametrize("name", NAMES)
def test_derivative_matches_finite_differences(name):
    op = OPS[name]
    rng = rng_for(name, "grad")
    f = reference(name)
    for _ in range(4):
        xs = sample(name, rng)
        d = rng.standard_normal(op.arity)
        d /= np.linalg.norm(d)
        fd_dir = central_diff(f, xs, d)
        fd_axes = [central_diff(f, xs, e) for e in np.eye(op.arity)]
        for label, form in value_forms(name):
            vs = [ad.Value(x) for x in xs]
            form(*vs).backward()
            grad = np.array([v.grad for v in vs])
            assert abs(grad @ d - fd_dir) <= 1e-6 * (1 + abs(fd_dir)), (name, label, xs)
            for k in range(op.arity):
                assert abs(grad[k] - fd_axes[k]) <= 1e-6 * (1 + abs(fd_axes[k])), (name, k, xs)


@pytest.mark.parametrize("name", NAMES)
def test_interpreter_on_one_op_tape(name):
    op = OPS[name]
    rng = rng_for(name, "tape")
    for _ in range(3):
        xs = sample(name, rng)
        vs = [ad.Value(x) for x in xs]
        out = getattr(ad, name)(*vs)
        out.backward()
        tape = build_tape([out], vs)
        assert len(tape) == op.arity + 1 and tape.n_ops == 1
        assert f"{name}(" in str(tape)
        assert interpret.evaluate(tape, xs) == [op.eval(*xs)]
        val, grads = interpret.value_and_grad(tape, xs)
        assert val == out.data
        np.testing.assert_allclose(grads, [v.grad for v in vs], rtol=1e-12, atol=0)
        fd = [central_diff(reference(name), xs, e) for e in np.eye(op.arity)]
        np.testing.assert_allclose(grads, fd, rtol=1e-6, atol=1e-6)
        if op.arity == 2:  # a constant operand: a CONST slot, no gradient slot for it
            v = ad.Value(xs[0])
            out = getattr(ad, name)(v, xs[1])
            out.backward()
            tape = build_tape([out], [v])
            assert len(tape) == 3 and tape.n_ops == 1
            val, grads = interpret.value_and_grad(tape, xs[:1])
            assert val == op.eval(*xs)
            np.testing.assert_allclose(grads, [v.grad], rtol=1e-12, atol=0)


TORCH_NAMES = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "div",
    "neg": "neg",
    "pow": "pow",
    "abs": "abs",
    "exp": "exp",
    "log": "log",
    "log1p": "log1p",
    "expm1": "expm1",
    "sqrt": "sqrt",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "softplus": "nn.functional.softplus",
    "relu": "relu",
    "maximum": "maximum",
    "minimum": "minimum",
    "sign": "sign",
}


def torch_value_and_grad(name: str, xs):
    torch = pytest.importorskip("torch")
    fn = torch
    for part in TORCH_NAMES[name].split("."):
        fn = getattr(fn, part)
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    out = fn(*ts)
    out.backward()
    return out.item(), [0.0 if t.grad is None else t.grad.item() for t in ts]


@pytest.mark.parametrize("name", NAMES)
def test_value_and_gradient_match_torch(name):
    pytest.importorskip("torch")
    if name not in TORCH_NAMES:
        pytest.skip(f"no differentiable torch counterpart for {name}")
    rng = rng_for(name, "torch")
    for _ in range(4):
        xs = sample(name, rng)
        vs = [ad.Value(x) for x in xs]
        out = getattr(ad, name)(*vs)
        out.backward()
        t_val, t_grad = torch_value_and_grad(name, xs)
        assert out.data == pytest.approx(t_val, rel=1e-12, abs=1e-300)
        np.testing.assert_allclose([v.grad for v in vs], t_grad, rtol=1e-10, atol=1e-15)


# ---------------------------------------------------------------- NumPy float semantics

# (op, arguments, the value NumPy gives): written out by hand.
FLOAT_SEMANTICS = [
    ("div", (1.0, 0.0), INF),
    ("div", (-1.0, 0.0), -INF),
    ("div", (0.0, 0.0), NAN),
    ("div", (1.0, -0.0), -INF),
    ("log", (-1.0,), NAN),
    ("log", (0.0,), -INF),
    ("exp", (1000.0,), INF),
    ("exp", (-1000.0,), 0.0),
    ("sqrt", (-1.0,), NAN),
    ("pow", (-8.0, 1.0 / 3.0), NAN),
    ("pow", (0.0, -1.0), INF),
    ("pow", (10.0, 400.0), INF),
    ("pow", (-2.0, 3.0), -8.0),
    ("pow", (-1.0, 0.5), NAN),
    ("pow", (-INF, 0.5), NAN),
    ("log1p", (-1.0,), -INF),
    ("log1p", (-2.0,), NAN),
    ("expm1", (1000.0,), INF),
    ("arcsin", (2.0,), NAN),
    ("arccos", (-2.0,), NAN),
    ("sinh", (-1000.0,), -INF),
    ("cosh", (1000.0,), INF),
    ("sin", (INF,), NAN),
    ("tan", (-INF,), NAN),
    ("mul", (0.0, INF), NAN),
    ("sub", (INF, INF), NAN),
]


@pytest.mark.parametrize(("name", "args", "expected"), FLOAT_SEMANTICS)
def test_numpy_float_semantics_without_exceptions(name, args, expected):
    assert same_float(numpy_ref(name, *args), expected, rtol=0)  # the table is right
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = {"float": getattr(ad, name)(*args)}
        if all(float(a).is_integer() and abs(a) < 1e6 and math.copysign(1, a) > 0 for a in args):
            results["int"] = getattr(ad, name)(*(int(a) for a in args))
        for label, form in value_forms(name):
            results[label] = form(*[ad.Value(a) for a in args]).data
            if len(args) == 2:
                results[label + " (Value, number)"] = form(ad.Value(args[0]), args[1]).data
                if label != "method":
                    results[label + " (number, Value)"] = form(args[0], ad.Value(args[1])).data
    for label, got in results.items():
        assert type(got) is float, label
        assert same_float(got, expected, rtol=0), (label, got)


def test_python_operators_follow_numpy():
    v = ad.Value
    assert (v(1.0) / 0).data == INF
    assert (1 / v(0.0)).data == INF
    assert math.isnan((v(0.0) / v(0.0)).data)
    assert math.isnan((v(-8.0) ** (1 / 3)).data)
    assert math.isnan(((-8) ** v(1 / 3)).data)
    assert (v(0.0) ** -1).data == INF
    assert (0 ** v(-1.0)).data == INF
    assert (v(2.0) ** 2000).data == INF
    assert ad.log(0) == -INF and ad.exp(1000) == INF and math.isnan(ad.sqrt(-1))


def test_nonfinite_backward_raises_nothing():
    # Hand-derived derivatives, evaluated with IEEE rules.
    x = ad.Value(0.0)
    ad.sqrt(x).backward()  # 1 / (2 sqrt(0))
    assert x.grad == INF
    x = ad.Value(0.0)
    ad.log(x).backward()  # 1 / 0
    assert x.grad == INF
    a, b = ad.Value(1.0), ad.Value(0.0)
    (a / b).backward()  # d/da = 1/b, d/db = -a/b**2
    assert a.grad == INF and b.grad == -INF
    x = ad.Value(1000.0)
    ad.exp(x).backward()
    assert x.grad == INF
    x = ad.Value(0.0)
    (x**-1.0).backward()  # -1 * 0**-2
    assert x.grad == -INF


# ---------------------------------------------------------------- kinks, as PyTorch


def grads_of(fn, *xs):
    vs = [ad.Value(x) for x in xs]
    fn(*vs).backward()
    return [v.grad for v in vs]


def test_kinks_follow_pytorch():
    assert grads_of(ad.relu, 0.0) == [0.0]
    assert grads_of(lambda x: x.relu(), 0.0) == [0.0]
    assert grads_of(ad.relu, 2.0) == [1.0] and grads_of(ad.relu, -2.0) == [0.0]
    assert grads_of(abs, 0.0) == [0.0]
    assert grads_of(ad.abs, 0.0) == [0.0]
    assert grads_of(abs, -2.0) == [-1.0] and grads_of(abs, 2.0) == [1.0]
    assert grads_of(ad.maximum, 1.5, 1.5) == [0.5, 0.5]
    assert grads_of(ad.minimum, 1.5, 1.5) == [0.5, 0.5]
    assert grads_of(ad.maximum, 2.0, 1.0) == [1.0, 0.0]
    assert grads_of(ad.minimum, 2.0, 1.0) == [0.0, 1.0]
    assert grads_of(lambda x: ad.maximum(x, x), 1.5) == [1.0]
    assert grads_of(ad.sign, 0.0) == [0.0] and grads_of(ad.step, 0.0) == [0.0]
    assert ad.relu(0.0) == 0.0 and ad.step(0.0) == 0.0 and ad.sign(0.0) == 0.0


@pytest.mark.parametrize(
    ("name", "xs"),
    [
        ("relu", (0.0,)),
        ("abs", (0.0,)),
        ("maximum", (1.5, 1.5)),
        ("minimum", (-0.5, -0.5)),
        ("sign", (0.0,)),
    ],
)
def test_kinks_match_torch(name, xs):
    t_val, t_grad = torch_value_and_grad(name, xs)
    vs = [ad.Value(x) for x in xs]
    out = getattr(ad, name)(*vs)
    out.backward()
    assert out.data == t_val
    assert [v.grad for v in vs] == t_grad


# ---------------------------------------------------------------- stable evaluation


@pytest.mark.parametrize(
    ("name", "x", "value", "grad"),
    [
        ("sigmoid", 1000.0, 1.0, 0.0),
        ("sigmoid", -1000.0, 0.0, 0.0),
        ("softplus", 1000.0, 1000.0, 1.0),
        ("softplus", -1000.0, 0.0, 0.0),
        ("tanh", 1000.0, 1.0, 0.0),
        ("tanh", -1000.0, -1.0, 0.0),
        # exp(-40) = 4.248354255291589e-18 is below half an ulp of 1 or 40; sigmoid'(40)
        # computed from the rounded output is 0, as in PyTorch (tolerance 1e-17 below)
        ("sigmoid", 40.0, 1.0, 4.248354255291589e-18),
        ("softplus", 40.0, 40.0, 1.0),
        ("sigmoid", -40.0, 4.248354255291589e-18, 4.248354255291589e-18),
        ("softplus", -40.0, 4.248354255291589e-18, 4.248354255291589e-18),
    ],
)
def test_stable_at_large_arguments(name, x, value, grad):
    assert math.exp(-40.0) == pytest.approx(4.248354255291589e-18, rel=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(ad, name)(x) == pytest.approx(value, rel=1e-14, abs=0)
        v = ad.Value(x)
        out = getattr(v, name)()
        out.backward()
    assert out.data == pytest.approx(value, rel=1e-14, abs=0)
    assert v.grad == pytest.approx(grad, rel=1e-12, abs=1e-17)
    assert out.data == pytest.approx(numpy_ref(name, x), rel=1e-14, abs=0)
