"""Every op in the table: value, derivative, interpreter, NumPy float semantics.

The tests are parametrised over ``OPS``, so an op added to the table is
tested here without writing anything new. Values are checked against NumPy
(or SciPy), derivatives against central finite differences along a random
direction, and against PyTorch when it is installed. At the edge of each op's
domain (``sqrt`` and ``log`` at 0+, ``pow`` at 0, kinks and jumps), every way
of taking a derivative is held to a hand-derived value, checked against
finite differences and SymPy's limit where it is a limit.
"""

from __future__ import annotations

import math
import operator
import warnings
import zlib
from dataclasses import dataclass

import numpy as np
import pytest
import sympy
from conftest import NUMPY_REF, central_diff, one_sided_agree

import adcompile as ad
from adcompile.diff import interpret
from adcompile.diff.reverse import grad_tape
from adcompile.ir import BUILTIN
from adcompile.ir.ops import OPS
from adcompile.symbolic.bridge import tape_to_sympy
from adcompile.trace.tapes import build_tape

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
    "floor_divide": operator.floordiv,
    "remainder": operator.mod,
}

REF = NUMPY_REF  # conftest's NumPy references (the rounding and division ops too)


def numpy_ref(name: str, *args: float) -> float:
    """The NumPy reference value of op ``name`` (warnings silenced, as a float)."""
    with np.errstate(all="ignore"):
        return float(REF[name](*(np.float64(a) for a in args)))


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
    if name in REF:
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
        if name in REF:
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
    if name not in REF:
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
    "square": "square",
    "reciprocal": "reciprocal",
    "exp2": "exp2",
    "log10": "log10",
    "log2": "log2",
    "logaddexp": "logaddexp",
    "logaddexp2": "logaddexp2",
    "arctan2": "atan2",
    "hypot": "hypot",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
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
    # Python raises ZeroDivisionError for these two; NumPy answers
    ("floor_divide", (1.0, 0.0), INF),
    ("floor_divide", (-1.0, 0.0), -INF),
    ("floor_divide", (0.0, 0.0), NAN),
    ("remainder", (1.0, 0.0), NAN),
    # the divisor's sign, as Python's % (C's fmod would give -1.5 and 1.5)
    ("remainder", (-5.5, 2.0), 0.5),
    ("remainder", (5.5, -2.0), -0.5),
    ("floor_divide", (-5.5, 2.0), -3.0),
    ("remainder", (-5.0, INF), INF),
    ("floor_divide", (-5.0, INF), -1.0),
    ("remainder", (INF, 2.0), NAN),
    # Python's math.floor raises on these (and answers an int)
    ("floor", (INF,), INF),
    ("ceil", (-INF,), -INF),
    ("trunc", (NAN,), NAN),
    ("rint", (2.5,), 2.0),
    ("rint", (3.5,), 4.0),
    ("rint", (-2.5,), -2.0),
    ("floor", (1e300,), 1e300),
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


# ---------------------------------------------------------------- signed zeros


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "rint"])
def test_rounding_keeps_the_sign_of_zero_as_numpy(name):
    # np.ceil(-0.5) is -0.0 (1 / it is -inf); Python's math.ceil answers the int 0
    for x in (-0.0, 0.0, -0.5, 0.5, -0.25, 0.75, -1e-300, 1e-300):
        expected = numpy_ref(name, x)
        got = OPS[name].eval(x)
        assert got == expected and math.copysign(1.0, got) == math.copysign(1.0, expected), x


# ---------------------------------------------------------------- edges of domains

LIMIT, CONVENTION = "limit", "convention"


@dataclass(frozen=True)
class Edge:
    """A point at (or next to) the edge of an op's domain, a kink or a jump, and the
    derivative by each argument, derived by hand.

    ``kinds[k]``: ``LIMIT`` where that derivative is the limit of the derivative
    (central finite differences and SymPy's limit are held to it as well),
    ``CONVENTION`` where it is a documented choice on a kink or a jump (relu'(0) = 0
    as in PyTorch, floor' = 0 as in JAX) that only adcompile's methods are held to.
    SymPy's limit (and one-sided differences) approach argument ``along`` from
    ``side`` (``"+"``, ``"-"`` or ``"+-"``, both); ``h`` is the difference step
    (smaller than the distance to the edge; default ``1e-6 * |x|``, or ``1e-6``).
    """

    args: tuple[float, ...]
    grad: tuple[float, ...]
    kinds: tuple[str, ...] | str = LIMIT
    along: int = 0
    side: str = "+-"
    h: float | None = None

    def kind(self, k: int) -> str:
        return self.kinds if isinstance(self.kinds, str) else self.kinds[k]


E = math.exp
D = 2.0**-40  # a distance to an edge, exact in binary (x + D and x + D / 1024 are exact)
H = D / 1024  # a difference step well inside it
PI = math.pi
X3 = 1.0 - 3e-9  # a float near 1 with a full mantissa (1 - X3 is exact, X3 * X3 is not)
LN2, LN10 = math.log(2.0), math.log(10.0)
EDGES: dict[str, list[Edge]] = {
    "add": [Edge((1e300, 1e300), (1.0, 1.0))],
    "sub": [Edge((1e300, -1e300), (1.0, -1.0))],
    "mul": [Edge((1e-200, 1e200), (1e200, 1e-200)), Edge((0.0, -3.0), (-3.0, 0.0))],
    # d/db a / b = -a / b**2: near b = 0 the largest derivative that is still finite
    "div": [Edge((1.0, 1e-150), (1e150, -1e300), along=1)],
    "neg": [Edge((-0.0,), (-1.0,))],
    "square": [Edge((1e150,), (2e150,)), Edge((-3.0,), (-6.0,)), Edge((-0.0,), (-0.0,))],
    # -1 / x**2: -inf at either zero, -0.0 where it underflows
    "reciprocal": [
        Edge((1e-150,), (-1e300,)),
        Edge((1e200,), (-0.0,)),
        Edge((0.0,), (-INF,), side="+"),
        Edge((-0.0,), (-INF,), side="-"),
    ],
    "pow": [
        # 0**y = 0 for y > 0, so d/dy = 0 (JAX and PyTorch); d/dx = y * 0**(y-1)
        Edge((0.0, 2.0), (0.0, 0.0)),
        Edge((0.0, 3.0), (0.0, 0.0)),
        Edge((0.0, 1.0), (1.0, 0.0)),
        Edge((0.0, 0.5), (INF, 0.0), side="+"),  # sqrt's slope at 0+
        # x**0 = 1 for every x: d/dx = 0 (PyTorch; JAX says nan); 0**y jumps at y = 0
        Edge((0.0, 0.0), (0.0, 0.0), (LIMIT, CONVENTION)),
        # 0**y = inf for y < 0: d/dy is inf - inf, nan (as JAX; PyTorch says -inf)
        Edge((0.0, -1.0), (-INF, NAN), (LIMIT, CONVENTION)),
        Edge((1e-300, 2.0), (2e-300, -0.0)),  # x**2 log(x) = -6.9e-598 underflows
    ],
    "abs": [Edge((0.0,), (0.0,), CONVENTION), Edge((1e-300,), (1.0,))],
    "exp": [Edge((709.0,), (E(709.0),)), Edge((-700.0,), (E(-700.0),))],
    "log": [Edge((1e-300,), (1e300,)), Edge((0.0,), (INF,), side="+")],
    "log10": [Edge((1e-300,), (1.0 / (1e-300 * LN10),)), Edge((0.0,), (INF,), side="+")],
    "log2": [Edge((1e-300,), (1.0 / (1e-300 * LN2),)), Edge((0.0,), (INF,), side="+")],
    "log1p": [Edge((-1.0 + D,), (1.0 / D,), h=H), Edge((-1.0,), (INF,), side="+")],
    # d/da log(e**a + e**b) = 1 / (1 + e**(b - a)): 1 and 0 however far apart (an
    # infinite operand too: the limits, not checked by SymPy, which takes no inf), and
    # exact at large a (2**a likewise, with ln 2)
    "logaddexp": [
        Edge((0.0, 0.0), (0.5, 0.5)),
        Edge((1000.0, -1000.0), (1.0, 0.0)),
        Edge((40.0, 0.0), (1.0 / (1.0 + E(-40.0)), E(-40.0) / (1.0 + E(-40.0)))),
        Edge((1e6, 1e6 - 1.0), (1.0 / (1.0 + E(-1.0)), 1.0 / (1.0 + E(1.0))), h=1e-3),
        Edge((INF, 1.0), (1.0, 0.0), CONVENTION),
        Edge((-INF, 1.0), (0.0, 1.0), CONVENTION),
    ],
    "logaddexp2": [
        Edge((0.0, 0.0), (0.5, 0.5)),
        Edge((-1000.0, 1000.0), (0.0, 1.0)),
        Edge((1e6, 1e6 - 1.0), (2.0 / 3.0, 1.0 / 3.0), h=1e-3),
    ],
    "expm1": [Edge((709.0,), (E(709.0),)), Edge((-40.0,), (E(-40.0),))],
    "exp2": [Edge((1023.0,), (2.0**1023 * LN2,)), Edge((-1000.0,), (2.0**-1000 * LN2,))],
    "sqrt": [Edge((1e-300,), (0.5e150,)), Edge((0.0,), (INF,), side="+")],
    # d/dx x**(1/3) = 1 / (3 x**(2/3)): inf at 0 from both sides
    "cbrt": [
        Edge((-8.0,), (1.0 / 12.0,)),
        Edge((1e300,), (1.0 / 3e200,)),
        Edge((-1e-300,), (1.0 / 3e-200,)),
        Edge((0.0,), (INF,)),
    ],
    "sin": [Edge((PI,), (math.cos(PI),)), Edge((0.0,), (1.0,))],
    "cos": [Edge((PI / 2,), (-math.sin(PI / 2),)), Edge((0.0,), (-0.0,))],
    "tan": [Edge((PI / 2 - 1e-8,), (1.0 / math.cos(PI / 2 - 1e-8) ** 2,), h=1e-12)],
    # 1 / sqrt(1 - x**2) with 1 - x**2 = (1 - x)(1 + x) = D (2 - D), exact in binary;
    # at 1 - 3e-9, 1 - x*x in floats would be 7.5e-10 off (relative), (1 - x)(1 + x) is not
    "arcsin": [
        Edge((X3,), (1.0 / math.sqrt((1.0 - X3) * (1.0 + X3)),), h=1e-12),
        Edge((1.0 - D,), (1.0 / math.sqrt(D * (2.0 - D)),), h=H),
        Edge((-1.0 + D,), (1.0 / math.sqrt(D * (2.0 - D)),), h=H),
        Edge((1.0,), (INF,), side="-"),
        Edge((-1.0,), (INF,), side="+"),
    ],
    "arccos": [
        Edge((1.0 - D,), (-1.0 / math.sqrt(D * (2.0 - D)),), h=H),
        Edge((-1.0,), (-INF,), side="+"),
    ],
    "arctan": [Edge((1e10,), (1e-20,)), Edge((1e200,), (0.0,))],  # 1e-400 underflows to 0
    # d/dy atan2(y, x) = x / (x**2 + y**2), d/dx = -y / (x**2 + y**2): finite where the
    # squares overflow or underflow; on the branch cut (y = +-0, x < 0) the angle jumps
    # (pi above, -pi below) and the derivative is the limit from either side; at the
    # origin 0, as PyTorch (JAX: nan)
    "arctan2": [
        Edge((1e200, 1e200), (5e-201, -5e-201)),
        Edge((1e-200, 1e-200), (5e199, -5e199)),
        Edge((1.0, 0.0), (0.0, -1.0)),
        Edge((0.0, -1.0), (-1.0, -0.0), side="+"),
        Edge((-0.0, -1.0), (-1.0, 0.0), side="-"),
        Edge((0.0, 0.0), (0.0, -0.0), CONVENTION),
    ],
    # d/da hypot(a, b) = a / hypot(a, b): no overflow at 1e300; at the origin (the kink of
    # |a| on the axis b = 0) 0, as JAX (PyTorch: nan)
    "hypot": [
        Edge((1e300, 1e300), (math.sqrt(0.5), math.sqrt(0.5))),
        Edge((-3.0, 4.0), (-0.6, 0.8)),
        Edge((1e-300, 0.0), (1.0, 0.0)),
        Edge((0.0, 0.0), (0.0, 0.0), CONVENTION),
    ],
    "sinh": [Edge((700.0,), (math.cosh(700.0),))],
    "cosh": [Edge((700.0,), (math.sinh(700.0),)), Edge((0.0,), (0.0,))],
    "tanh": [Edge((1e-8,), (1.0 - math.tanh(1e-8) ** 2,)), Edge((0.0,), (1.0,))],
    # 2 / sqrt(pi) * exp(-x**2): 2 / sqrt(pi) at 0, exp(-36) small but normal at 6
    "erf": [
        Edge((0.0,), (2.0 / math.sqrt(PI),)),
        Edge((-6.0,), (2.0 / math.sqrt(PI) * E(-36.0),)),
    ],
    "erfc": [
        Edge((0.0,), (-2.0 / math.sqrt(PI),)),
        Edge((6.0,), (-2.0 / math.sqrt(PI) * E(-36.0),)),
    ],
    # 1 / sqrt(1 + x**2), 1 / sqrt(x**2 - 1), 1 / (1 - x**2): finite at 1e200, where the
    # square overflows; next to |x| = 1 through (x - 1)(x + 1), exact in binary
    "arcsinh": [Edge((1e200,), (1e-200,)), Edge((-1e200,), (1e-200,)), Edge((0.0,), (1.0,))],
    "arccosh": [
        Edge((1.0 + D,), (1.0 / math.sqrt(D * (2.0 + D)),), h=H),
        Edge((1.0,), (INF,), side="+"),
        Edge((1e200,), (1e-200,)),
    ],
    "arctanh": [
        Edge((1.0 - D,), (1.0 / (D * (2.0 - D)),), h=H),
        Edge((-1.0 + D,), (1.0 / (D * (2.0 - D)),), h=H),
        Edge((1.0,), (INF,), side="-"),
        Edge((-1.0,), (INF,), side="+"),
        Edge((0.0,), (1.0,)),
    ],
    "sigmoid": [Edge((-40.0,), (E(-40.0) / (1.0 + E(-40.0)) ** 2,)), Edge((0.0,), (0.25,))],
    "softplus": [Edge((-40.0,), (E(-40.0) / (1.0 + E(-40.0)),))],
    "relu": [
        Edge((0.0,), (0.0,), CONVENTION),  # as PyTorch and JAX
        Edge((1e-300,), (1.0,)),
        Edge((-1e-300,), (0.0,)),
    ],
    "maximum": [
        Edge((1.5, 1.5), (0.5, 0.5), CONVENTION),  # a tie split evenly, as PyTorch and JAX
        Edge((1.5, 1.5 - D), (1.0, 0.0), h=H),
    ],
    "minimum": [
        Edge((1.5, 1.5), (0.5, 0.5), CONVENTION),
        Edge((1.5, 1.5 - D), (0.0, 1.0), h=H),
    ],
    "sign": [Edge((0.0,), (0.0,), CONVENTION), Edge((1e-300,), (0.0,))],
    "step": [Edge((0.0,), (0.0,), CONVENTION), Edge((-1e-300,), (0.0,))],
    # piecewise constant: 0 between the jumps, and 0 on them (JAX's convention)
    "floor": [Edge((2.0,), (0.0,), CONVENTION), Edge((2.0 - D,), (0.0,), h=H)],
    "ceil": [Edge((-2.0,), (0.0,), CONVENTION), Edge((-2.0 + D,), (0.0,), h=H)],
    "trunc": [Edge((0.0,), (0.0,), CONVENTION), Edge((-1.0 + D,), (0.0,), h=H)],
    "rint": [Edge((2.5,), (0.0,), CONVENTION), Edge((2.5 + D,), (0.0,), h=H)],
    "floor_divide": [
        Edge((4.0, 2.0), (0.0, 0.0), CONVENTION),
        Edge((4.0 + D, 2.0), (0.0, 0.0), h=H),
    ],
    # x % y = x - y * (x // y): 1 and -(x // y), also on the jumps (as JAX)
    "remainder": [
        Edge((4.0, 2.0), (1.0, -2.0), CONVENTION),
        Edge((-4.0, 2.0), (1.0, 2.0), CONVENTION),
        Edge((4.0 + D, 2.0), (1.0, -2.0), h=H),
        Edge((-4.0 + D, 2.0), (1.0, 2.0), h=H),  # (-4 + D) // 2 is -2
        Edge((5.5, -2.0), (1.0, 3.0)),
    ],
}


def _builtin(name: str) -> bool:
    """An op of the op table (not one a test registers for a while)."""
    return name in BUILTIN


def test_every_op_has_its_edges_listed():
    assert set(EDGES) == {name for name in OPS if _builtin(name)}


_COMPILED: dict[str, object] = {}


def compiled_value_and_grad(name: str):
    """``ad.value_and_grad`` of the op by all its arguments, compiled once per op."""
    if name not in _COMPILED:
        op = OPS[name]
        if op.arity == 1:

            def f(x):
                return op(x)

        else:

            def f(x, y):
                return op(x, y)

        _COMPILED[name] = ad.value_and_grad(f, argnums=tuple(range(op.arity)))
    return _COMPILED[name]


def every_method(name: str, xs: tuple[float, ...]) -> tuple[float, dict[str, list[float]]]:
    """The op's value at ``xs`` and its gradient by each of adcompile's methods."""
    op = OPS[name]
    vs = [ad.Value(x) for x in xs]
    out = op(*vs)
    out.backward()
    tape = build_tape([out], vs)
    value, compiled = compiled_value_and_grad(name)(*xs)
    adjoint = interpret.evaluate(grad_tape(tape, wrt=list(range(op.arity))), list(xs))
    methods = {
        "eager backward": [v.grad for v in vs],
        "interpreter": interpret.value_and_grad(tape, list(xs))[1],
        "adjoint tape": adjoint[1:],
        "compiled": list(compiled),
    }
    assert same_float(value, out.data) and same_float(adjoint[0], out.data)
    return out.data, methods


def sympy_derivative(name: str, edge: Edge, k: int) -> float:
    """SymPy's derivative of the op's tape by argument ``k`` at the edge: its value
    there, or where that is undefined (0 * log 0, 1 / 0), its limit along
    ``edge.along`` from ``edge.side`` (the other arguments set exactly)."""
    op = OPS[name]
    vs = [ad.Value(x) for x in edge.args]
    symbols = sympy.symbols(f"x0:{op.arity}", real=True)
    expr = tape_to_sympy(build_tape([op(*vs)], vs), symbols)[0]
    d = sympy.diff(expr, symbols[k])
    exact = {s: sympy.Rational(x) for s, x in zip(symbols, edge.args)}
    at = d.subs(exact)
    if at.is_real and at.is_finite:
        return float(sympy.N(at, 30))
    s = symbols[edge.along]
    rest = d.subs({t: v for t, v in exact.items() if t != s})
    return float(sympy.N(sympy.limit(rest, s, exact[s], dir=edge.side), 30))


def finite_difference(name: str, edge: Edge, k: int) -> float:
    """A difference quotient of the op's float function by argument ``k``: central,
    or one-sided into the domain along ``edge.along`` when ``edge.side`` is one side."""
    f, x = OPS[name].eval, list(edge.args)
    h = edge.h or (1e-6 * abs(x[k]) if x[k] else 1e-6)
    up, down = list(x), list(x)
    up[k] += h
    down[k] -= h
    if k == edge.along and edge.side == "+":
        up, down = up, x
    elif k == edge.along and edge.side == "-":
        up, down = x, down
    return (f(*up) - f(*down)) / (up[k] - down[k])  # (the step as rounded)


@pytest.mark.parametrize("name", sorted(EDGES))
def test_derivative_at_the_edge_of_the_domain_by_every_method(name):
    for edge in EDGES[name]:
        _, methods = every_method(name, edge.args)
        for method, grad in methods.items():
            for k, want in enumerate(edge.grad):
                assert same_float(grad[k], want, rtol=1e-12), (name, edge, method, k, grad[k])
        for k, want in enumerate(edge.grad):
            if edge.kind(k) != LIMIT:
                continue
            sym = sympy_derivative(name, edge, k)
            assert same_float(sym, want, rtol=1e-12) or (sym == want == 0.0), (name, edge, k, sym)
            if math.isfinite(want):
                fd = finite_difference(name, edge, k)
                assert abs(fd - want) <= 1e-5 * abs(want) + 1e-12, (name, edge, k, fd)


def test_pow_at_zero_follows_jax_and_pytorch():
    # d/dy x**y at x = 0, y = 2 is lim x**2 log(x) = 0 (it was nan: 0 * log(0));
    # the limit is SymPy's as well, and finite differences agree
    edge = Edge((0.0, 2.0), (0.0, 0.0))
    value, methods = every_method("pow", edge.args)
    assert value == 0.0
    for method, grad in methods.items():
        assert grad == [0.0, 0.0], method
    x, y = sympy.symbols("x y", real=True)
    assert sympy.limit(sympy.diff(x**y, y).subs(y, 2), x, 0) == 0
    assert finite_difference("pow", edge, 1) == 0.0
    # elsewhere the rules are the plain ones: d/dx = y x**(y-1), d/dy = x**y log(x)
    _, methods = every_method("pow", (1.5, 2.5))
    for grad in methods.values():
        assert grad == pytest.approx([2.5 * 1.5**1.5, 1.5**2.5 * math.log(1.5)], rel=1e-14)


@pytest.mark.parametrize("name", [n for n in NAMES if not OPS[n].smooth])
def test_switch_is_zero_on_each_kink_and_changes_sign_only_across_one(name):
    # Op.switch tells finite differences (check_grad) where the pieces of a non-smooth op
    # meet: 0 on a kink or jump (the CONVENTION points above), opposite signs on either
    # side; where the stencil sees one sign, the op has no kink or jump inside it
    op = OPS[name]
    for edge in EDGES.get(name, []):
        if edge.kinds != CONVENTION:
            continue
        assert op.switch(*edge.args) == 0.0, edge
        d = np.eye(op.arity)[edge.along] * 1e-9
        left, right = op.switch(*(edge.args - d)), op.switch(*(edge.args + d))
        assert np.sign(left) == -np.sign(right) != 0.0, edge
    rng = rng_for(name, "switch")
    f = lambda z: op.eval(*map(float, z))
    lo, hi = op.domain
    jumps = 0
    for _ in range(400):
        x = rng.uniform(lo, hi, op.arity)
        d = rng.standard_normal(op.arity)
        h = 1e-3
        signs = {np.sign(op.switch(*(x + t * h * d))) for t in (-1.0, 0.0, 1.0)}
        if len(signs) == 1:
            assert one_sided_agree(f, x, d, h=h), (x, d)
        else:
            jumps += 1
    assert jumps < 400  # (most stencils see no kink)
