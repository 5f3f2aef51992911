"""Trust: compiled answers that silently differed from plain Python, found by probes.

Each test compares the compiled answer at fresh points with plain Python (the same
function on floats or on eager Values) and with hand-derived values.
"""

import array
import collections
import math
import warnings

import numpy as np
import pytest

import adcompile as ad
from adcompile import Value
from adcompile.datasets import make_moons

# -- arithmetic on a traced .data ---------------------------------------------


def _branchy(x):
    d = x.data * 2 - 1  # a number made of x.data, then compared
    return x * 3 if d > 0 else x * 5


def test_a_branch_on_arithmetic_of_data_is_guarded():
    g = ad.grad(_branchy)
    for x, want in [(1.0, 3.0), (0.2, 5.0), (0.9, 3.0), (-4.0, 5.0)]:
        assert g(x) == want


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x * (x.data * 2),
        lambda x: x * (x.data + 1),
        lambda x: x * (1 - x.data),
        lambda x: x * (-x.data),
        lambda x: x * abs(x.data),
        lambda x: x * x.data**2,
        lambda x: x * (2**x.data),
        lambda x: x * (x.data / 3),
        lambda x: x * (x.data // 1),
        lambda x: x * (x.data % 1),
        lambda x: x * divmod(x.data, 1.0)[1],
        lambda x: x * round(x.data, 1),
        lambda x: x * int(x.data),
        lambda x: x * round(x.data),
        lambda x: x * math.floor(x.data),
        lambda x: ad.Value(x.data + 1) * x,
    ],
)
def test_a_number_made_of_data_is_refused_not_frozen(fn):
    # plain Python: x * (x.data + 1) at 3.0 is 12; compiled at 2.0 first, it was 9
    with pytest.raises(TypeError, match=r"\.data"):
        ad.value_and_grad(fn)(1.5)


@pytest.mark.parametrize("transform", [ad.jit, ad.grad])
def test_returning_data_is_refused(transform):
    with pytest.raises(TypeError, match=r"returned the \.data"):
        transform(lambda x: (x * 2).data)(3.0)


def test_numbers_of_data_read_in_the_function_are_right_and_guarded():
    seen = []

    def f(x):
        u = x.data**2
        seen.append((round(x.data, 2), -x.data, abs(x.data - 3), u, 2.0 / x.data))
        return x * (1.0 if u > 4 else 2.0)

    g = ad.grad(f)
    assert (g(3.0), g(1.0), g(2.5), g(-0.5)) == (1.0, 2.0, 1.0, 2.0)
    assert seen[0] == (3.0, -3.0, 0.0, 9.0, 2.0 / 3.0)  # (the trace sees Python's numbers)


def test_arithmetic_on_data_keeps_pythons_exceptions():
    def f(x):
        try:
            x.data / 0.0
        except ZeroDivisionError:
            return x * 7
        return x

    assert ad.grad(f)(1.0) == 7.0


def test_the_values_own_arithmetic_is_unchanged_while_tracing():
    # the Values' operators do their arithmetic on .data: it must stay plain floats
    def f(x):
        y = x * x + x - 1.0
        return y * y / (x + 2.0) - (-y)

    def plain(x):
        y = x * x + x - 1.0
        return y * y / (x + 2.0) + y

    vg = ad.value_and_grad(f)
    for x in (0.3, 1.7, -0.9):
        v, g = vg(x)
        assert v == pytest.approx(plain(x), rel=1e-14)
        h = 1e-6
        assert g == pytest.approx((plain(x + h) - plain(x - h)) / (2 * h), rel=1e-6)


# -- a negative literal as the base of ** ---------------------------------------


def test_a_negative_literal_base_keeps_its_sign():
    f = lambda x: (-2.0) ** x  # noqa: E731
    v, g = ad.value_and_grad(f)(2.0)
    assert v == 4.0 and math.isnan(g)  # log of a negative base: nan, as NumPy
    assert ad.jit(f)(4.0) == 16.0 and ad.jit(f)(3.0) == -8.0
    assert "(-2.0) ** " in ad.export(f, 2.0)


def test_a_negative_literal_base_in_array_code_and_in_loops():
    f = lambda x: np.sum((-2.0) ** x)  # noqa: E731
    assert ad.jit(f)(np.array([2.0, 3.0])) == -4.0
    assert ad.jit(f)(np.full(400, 2.0)) == 1600.0

    def loop(x):
        s = 0.0
        for i in range(300):
            s = s + (-1.5) ** 2.0 * x[i]
        return s

    x = np.random.default_rng(0).normal(size=300)
    assert ad.jit(loop)(x) == pytest.approx(2.25 * x.sum(), rel=1e-12)
    assert ad.jit(lambda x: (-math.inf) ** x)(2.0) == math.inf


# -- containers the function reads from outside ------------------------------------


def test_a_global_set_changed_in_place_traces_again():
    skip = {1}

    def f(x):
        s = 0.0
        for i in range(3):
            if i not in skip:
                s = s + x * (i + 1)
        return s

    vg = ad.value_and_grad(f)
    assert vg(1.0) == (4.0, 4.0)
    skip.add(2)
    with pytest.warns(ad.RetraceWarning):
        assert vg(1.0) == (1.0, 1.0)


@pytest.mark.parametrize(
    "make, change, expect",
    [
        (lambda: {1.0, 2.0}, lambda s: s.add(6.0), 9.0),
        (lambda: collections.deque([1.0, 2.0]), lambda d: d.append(6.0), 9.0),
        (lambda: array.array("d", [1.0, 2.0]), lambda a: a.__setitem__(0, 7.0), 9.0),
        (lambda: bytearray(b"\x01\x02"), lambda b: b.__setitem__(0, 7), 9.0),
    ],
)
def test_containers_changed_in_place_trace_again(make, change, expect):
    data = make()
    f = ad.jit(lambda x: x * sum(data))
    assert f(1.0) == 3.0
    change(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        assert f(1.0) == expect == 1.0 * sum(data)


def test_a_dict_in_another_order_traces_again():
    d = {"a": 1.0, "b": 2.0}

    def f(x):
        s = 0.0
        for i, v in enumerate(d.values()):
            s = s + x * v * (i + 1)
        return s

    g = ad.jit(f)
    assert g(1.0) == 5.0
    d.pop("a")
    d["a"] = 1.0  # the same items, in another order
    with pytest.warns(ad.RetraceWarning):
        assert g(1.0) == f(1.0) == 4.0


# -- compile_loss and a model whose parameters are made again -----------------------


class _Lin:
    def __init__(self):
        self.w = [Value(1.0), Value(2.0)]

    def parameters(self):
        return self.w

    def __call__(self, x):
        return self.w[0] * x[0] + self.w[1] * x[1]


@pytest.mark.parametrize("how", ["list", "item"])
def test_compile_loss_refuses_parameters_made_again(how):
    m = _Lin()

    def loss(X):
        return sum(m(x) ** 2 for x in X)

    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    step = ad.compile_loss(loss, m.parameters())
    assert step(X).data == loss(X).data == 146.0
    if how == "list":
        m.w = [Value(0.5), Value(0.5)]
    else:
        m.w[0] = Value(10.0)
    # its value would be the old weights' (146), its gradients go to the old Values
    with pytest.raises(TypeError, match="compile_loss"):
        step(X)


def test_compile_loss_follows_new_data_of_its_parameters():
    m = _Lin()
    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    step = ad.compile_loss(lambda X: sum(m(x) ** 2 for x in X), m.parameters())
    step(X)
    m.w[0].data = 0.5
    assert step(X).data == pytest.approx((0.5 + 4) ** 2 + (1.5 + 8) ** 2)


# -- micrograd tutorials' idioms --------------------------------------------------


def test_the_micrograd_demo_loss_wraps_its_rows_in_value_and_compiles():
    import random

    random.seed(1)
    model = ad.MLP(2, [8, 1])
    X, y = make_moons(n_samples=20, noise=0.1, random_state=0)

    def loss(Xb, yb):
        inputs = [list(map(Value, xrow)) for xrow in Xb]  # as the demo writes it
        scores = list(map(model, inputs))
        losses = [(1 + -yi * scorei).relu() for yi, scorei in zip(yb, scores)]
        return sum(losses) * (1.0 / len(losses)) + 1e-4 * sum(p * p for p in model.parameters())

    step = ad.compile_loss(loss, model.parameters())
    for Xb, yb in [(X, y), (X[:7] * 1.3, y[:7])]:
        got = step(Xb, yb)
        model.zero_grad()
        got.backward()
        compiled = [p.grad for p in model.parameters()]
        model.zero_grad()
        eager = loss(Xb, yb)
        eager.backward()
        assert got.data == pytest.approx(eager.data, rel=1e-12)
        assert compiled == pytest.approx([p.grad for p in model.parameters()], rel=1e-9, abs=1e-15)


def test_value_of_a_traced_value_stays_connected():
    g = ad.grad(lambda x: Value(x) * Value(x, label="again"))
    assert g(3.0) == 6.0 and g(-1.5) == -3.0
    with pytest.raises(TypeError, match="already a Value"):  # eager: as before
        Value(Value(2.0))


def test_backward_by_hand_as_in_the_micrograd_lecture():
    a, b, c, f = Value(2.0), Value(-3.0), Value(10.0), Value(-2.0)
    e = a * b
    d = e + c
    L = d * f
    L.grad = 1.0
    for node in (L, d, e):
        node._backward()
    assert (a.grad, b.grad, c.grad, f.grad, d.grad, e.grad) == (6.0, -4.0, -2.0, 4.0, -2.0, -2.0)
    x = Value(0.8814)
    o = x.tanh()
    o.grad = 1.0
    o._backward()
    assert x.grad == pytest.approx(1 - math.tanh(0.8814) ** 2)


def test_format_of_a_value_formats_its_data():
    v = Value(2.5)
    assert f"{v:.3f}" == "2.500" and format(v, ">6.1f") == "   2.5"
    assert f"{v}" == str(v)


def test_make_moons_takes_scikit_learns_names():
    X, y = make_moons(n_samples=30, noise=0.2, random_state=4)
    X2, y2 = make_moons(30, 0.2, 4)
    assert X.shape == (30, 2) and np.array_equal(X, X2) and np.array_equal(y, y2)
    assert set(y) == {-1.0, 1.0}


def test_compile_loss_refuses_a_model_made_again_in_its_global():
    import random

    random.seed(0)
    global _MODEL
    _MODEL = ad.MLP(2, [3, 1])
    X = np.array([[1.0, 2.0], [3.0, -4.0]])

    def loss(X):
        return sum(_MODEL(list(x)) ** 2 for x in X)

    step = ad.compile_loss(loss, _MODEL.parameters())
    assert step(X).data == pytest.approx(loss(X).data, rel=1e-12)
    _MODEL = ad.MLP(2, [3, 1])  # a notebook's cell run again: new parameter Values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        with pytest.raises(TypeError, match="compile_loss"):
            step(X)  # (its gradients would go to the old model's Values)


# -- random generators made inside the function --------------------------------------


@pytest.mark.parametrize(
    "draw",
    [
        lambda: __import__("random").Random().random(),
        lambda: __import__("random").SystemRandom().random(),
        lambda: np.random.default_rng().normal(),
    ],
)
def test_a_generator_made_with_no_seed_is_refused(draw):
    with pytest.raises(ad.RandomDrawError, match="seeded from the operating system"):
        ad.grad(lambda x: x * draw())(1.0)


def test_a_generator_made_with_a_seed_is_traced():
    import random

    g = ad.grad(lambda x: x * x * random.Random(3).random())
    assert g(1.0) == pytest.approx(2 * random.Random(3).random(), rel=1e-15)
    assert g(2.5) == pytest.approx(5 * random.Random(3).random(), rel=1e-15)


# -- compile_loss and Values made from the parameters before the trace ---------------


def test_compile_loss_gradient_flows_through_values_made_from_parameters():
    import random

    from adcompile.nn import Neuron

    random.seed(0)
    n = Neuron(2)
    s = n.w[0] * 2  # made outside the loss: eager backward goes on through it
    t = n.w[1].tanh() * n.b
    z = Value(0.7)  # another Value that takes a gradient, read by the loss
    X = np.array([[1.0, 2.0], [0.5, -1.0], [2.0, 0.3]])
    y = np.array([1.0, -1.0, 0.5])

    def loss(X, y):
        return sum((n(list(x)) * s + t * z - yi) ** 2 for x, yi in zip(X, y))

    step = ad.compile_loss(loss, n.parameters())
    for _ in range(3):
        got = step(X, y)
        n.zero_grad()
        z.grad = 0.0
        got.backward()
        compiled = [p.grad for p in n.parameters()] + [z.grad]
        value, grads = step.value_and_grad(X, y)
        assert [p.grad for p in n.parameters()] == compiled[:-1]  # (left as they were)
        n.zero_grad()
        z.grad = 0.0
        eager = loss(X, y)
        eager.backward()
        assert got.data == value == pytest.approx(eager.data, rel=1e-14)
        expected = [p.grad for p in n.parameters()]
        assert compiled == pytest.approx(expected + [z.grad], rel=1e-12)
        assert list(grads) == pytest.approx(expected, rel=1e-12)
        for p in n.parameters():
            p.data -= 0.01 * p.grad  # (s and t keep their .data, as in plain Python)
        X = X * 1.1


# -- iterators made outside the function -----------------------------------------


def _generator():
    yield 1.0
    yield 2.0


@pytest.mark.parametrize(
    "make", [lambda: iter([1.0, 2.0, 3.0]), lambda: __import__("itertools").count(1), _generator]
)
def test_taking_items_from_an_iterator_made_outside_is_refused(make):
    it = make()  # plain Python takes the next item at every call; compiled, the first
    with pytest.raises(ad.RandomDrawError, match="iterator made outside"):
        ad.grad(lambda x: x * next(it))(1.0)


def test_an_iterator_read_but_not_advanced_is_no_refusal():
    it = iter([1.0, 2.0])
    f = ad.grad(lambda x: x * 3.0 if it is not None else x)
    assert f(1.0) == f(2.0) == 3.0


# -- the dtype of a traced array ---------------------------------------------------


@pytest.mark.parametrize("n", [5, 400])  # element by element, and at array level
def test_a_branch_on_the_dtype_takes_plain_pythons_branch(n):
    def f(x):
        if x.dtype == np.float64 and np.issubdtype(x.dtype, np.floating):
            return np.sum(x**2)
        return np.sum(x)

    x = np.linspace(0.1, 1.0, n)
    np.testing.assert_allclose(ad.grad(f)(x), 2 * x, rtol=1e-14)
    assert ad.tensor([1.0, 2.0]).dtype == np.float64  # (eager too: what it stands for)


# -- state read through a method, ndarray subclasses -----------------------------------


class _Model:
    def __init__(self, n):
        self.w = np.ones(n)
        self.scale = 1.0

    def weights(self):
        return self.w * self._factor()

    def _factor(self):
        return self.scale


@pytest.mark.parametrize("n", [5, 400])
def test_attributes_read_by_a_method_are_watched(n):
    m = _Model(n)
    g = ad.grad(lambda x: np.sum(m.weights() * x))
    x = np.ones(n)
    np.testing.assert_array_equal(g(x), np.ones(n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        m.scale = 2.0  # read by a method the method calls
        np.testing.assert_array_equal(g(x), 2 * np.ones(n))
        m.w[0] = 5.0  # changed in place
        assert g(x)[0] == 10.0 and g(x)[1] == 2.0


@pytest.mark.parametrize("n", [5, 400])
def test_ndarray_subclasses_read_from_outside_are_watched(n):
    M = np.matrix(np.ones((1, n)))
    A = np.ma.masked_array(np.ones(n))
    g = ad.grad(lambda x: np.sum(np.asarray(M).ravel() * x))
    h = ad.grad(lambda x: np.sum(A.data * x))
    assert g(np.ones(n))[0] == h(np.ones(n))[0] == 1.0
    M[0, 0] = 4.0
    A[0] = 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        assert g(np.ones(n))[0] == 4.0 and h(np.ones(n))[0] == 3.0


# -- what a traced array says it is, and nan through element-by-element code -----------


@pytest.mark.parametrize("n", [5, 400])
def test_type_checks_on_a_traced_array_take_plain_pythons_branch(n):
    x = np.linspace(0.1, 1.0, n)

    def f(x):
        a = np.sum(x) if isinstance(x, np.ndarray) else -np.sum(x)
        b = 3.0 if np.result_type(x) == np.float64 else 1.0
        c = 1.0 if x.dtype.kind == "f" and str(x.dtype) == "float64" else 0.0
        return a * b * c

    assert ad.jit(f)(x) == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(ad.grad(f)(x), 3.0 * np.ones(n))


@pytest.mark.parametrize("n", [5, 400])
def test_nan_goes_through_clip_maximum_and_where_as_in_numpy(n):
    rng = np.random.default_rng(n)
    for _ in range(3):
        x = rng.normal(size=n) * 2
        for f in (
            lambda x: np.clip(np.sqrt(x), 0.0, 1.0),
            lambda x: np.maximum(np.where(x > 1.0, np.nan, x), 0.3),
            lambda x: np.clip(np.where(x > 1.0, np.nan, x), -1.0, 0.5),
        ):
            with np.errstate(invalid="ignore"):
                np.testing.assert_array_equal(ad.jit(f)(x), f(x))


def test_clip_gradient_element_by_element_matches_finite_differences():
    x = np.array([0.3, -1.2, 0.8, 2.0, -0.4])
    f = lambda x: np.sum(np.clip(x, -1.0, 1.0) ** 2)  # noqa: E731
    h = 1e-6
    fd = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(5)]
    np.testing.assert_allclose(ad.grad(f)(x), fd, rtol=1e-6, atol=1e-9)


# -- code for inputs that keep taking new branches runs as Python first ----------------


def test_new_branches_run_as_python_first_and_stay_right(tmp_path, monkeypatch):
    from adcompile.backend.python_first import NumbaLater

    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))  # (code on disk: loaded)

    def f(x):
        s = 0.0
        for i in range(6):
            s = s + (x[i] * x[i] if x[i] > 0 else -x[i])
        return s

    def plain_grad(x):
        return np.where(x > 0, 2 * x, -1.0)

    vg = ad.value_and_grad(f)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        for _ in range(12):  # a new pattern of signs almost every call
            x = rng.normal(size=6)
            v, g = vg(x)
            assert v == pytest.approx(f(x), rel=1e-14)
            np.testing.assert_allclose(g, plain_grad(x), rtol=1e-14)
    specs = getattr(vg, "unchecked", vg)._specs  # (ADCOMPILE_CHECK=1: the transform inside)
    later = [s.compiled.fn for each in specs.values() for s in each]
    assert any(isinstance(fn, NumbaLater) for fn in later)  # (not compiled by Numba yet)


# -- p-norms, dtype= arguments, SciPy's names ---------------------------------------


@pytest.mark.parametrize("n", [5, 400])
@pytest.mark.parametrize("ord_", [1, 3, 0.5, 1.5, np.inf, -np.inf])
def test_vector_p_norms_match_numpy_and_their_formula(n, ord_):
    x = np.random.default_rng(n).normal(size=n)
    # (ord written as a literal: a float read from a closure would be an input)
    f = eval(f"lambda x: np.linalg.norm(x, ord={ord_!r})".replace("inf", "np.inf"))
    assert ad.jit(f)(x) == pytest.approx(f(x), rel=1e-12)
    a = np.abs(x)
    if np.isinf(ord_):
        k = np.argmax(a) if ord_ > 0 else np.argmin(a)
        expected = np.zeros(n)
        expected[k] = np.sign(x[k])
    else:  # d/dx (sum |x|^p)^(1/p) = |x|^(p-1) sign(x) / norm^(p-1)
        expected = a ** (ord_ - 1) * np.sign(x) / f(x) ** (ord_ - 1)
    np.testing.assert_allclose(ad.grad(f)(x), expected, rtol=1e-9)


def test_p_norms_along_an_axis():
    X = np.random.default_rng(3).normal(size=(20, 30))
    f = lambda X: np.sum(np.linalg.norm(X, ord=3, axis=1))  # noqa: E731
    assert ad.jit(f)(X) == pytest.approx(f(X), rel=1e-12)
    expected = np.abs(X) ** 2 * np.sign(X) / np.linalg.norm(X, ord=3, axis=1)[:, None] ** 2
    np.testing.assert_allclose(ad.grad(f)(X), expected, rtol=1e-9)


@pytest.mark.parametrize("n", [5, 400])
def test_a_float64_dtype_argument_is_no_change(n):
    x = np.random.default_rng(n).normal(size=n)
    f = lambda x: np.sum(x, axis=0, dtype=np.float64) + np.mean(x**2, dtype=float)  # noqa: E731
    assert ad.jit(f)(x) == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(ad.grad(f)(x), 1 + 2 * x / n, rtol=1e-12)


def test_a_scipy_function_without_a_rule_is_named_as_scipys():
    special = pytest.importorskip("scipy.special")
    with pytest.raises(TypeError, match=r"calls scipy\.special\.gammaln"):
        ad.grad(lambda x: np.sum(special.gammaln(x)))(np.linspace(1.0, 2.0, 400))


# -- compile_loss: its result in expressions, writes to parameters, integer labels ------


def _mlp_problem():
    import random

    random.seed(0)
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = np.sign(X[:, 0])
    model = ad.MLP(2, [4, 1])

    def loss(X, y):
        return sum((1 + -yi * model(xi)).relu() for xi, yi in zip(X, y)) / len(y)

    return model, loss, X, y


def test_a_compiled_loss_passes_its_gradient_through_expressions_made_of_it():
    model, loss, X, y = _mlp_problem()
    P = model.parameters()
    step = ad.compile_loss(loss, P)
    cases = [
        (lambda f: f(X, y) * 0.5),  # loss scaling
        (lambda f: f(X[:10], y[:10]) + f(X[10:], y[10:]) + 0.1 * sum(p * p for p in P)),
    ]
    for make in cases:
        model.zero_grad()
        make(step).backward()
        compiled = [p.grad for p in P]
        model.zero_grad()
        make(loss).backward()
        assert compiled == pytest.approx([p.grad for p in P], rel=1e-12, abs=1e-15)
        assert max(abs(g) for g in compiled) > 0
    L, E = step(X, y), loss(X, y)
    model.zero_grad()
    L.backward()
    L.backward()  # (twice adds twice, as micrograd's)
    twice = [p.grad for p in P]
    model.zero_grad()
    E.backward()
    E.backward()
    assert twice == pytest.approx([p.grad for p in P], rel=1e-12) and L.grad == E.grad == 2.0


def test_assigning_a_parameters_data_inside_the_loss_is_refused():
    model, loss, X, y = _mlp_problem()
    P = model.parameters()
    before = P[0].data

    def bad(X, y):
        P[0].data *= 2  # plain Python doubles it at every call; compiled code would not
        return loss(X, y)

    with pytest.raises(TypeError, match=r"assigned the \.data"):
        ad.compile_loss(bad, P)(X, y)
    assert P[0].data == before  # (put back)
    w = Value(2.0, label="w")

    def f(x):
        w.data = 3.0
        return w * x

    with pytest.raises(TypeError, match=r"w\.data = "):
        ad.grad(f)(1.0)


def test_cross_entropy_with_integer_labels_compiles():
    import random

    from adcompile import nn

    random.seed(0)
    m = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 3))
    crit = nn.CrossEntropyLoss()
    X = np.random.default_rng(0).normal(size=(12, 2))
    step = ad.compile_loss(lambda X, T: crit(m(X), T), m.parameters())
    for labels in (np.arange(12) % 3, (np.arange(12) + 1) % 3):  # new labels: new trace
        L = step(X, labels)
        m.zero_grad()
        L.backward()
        compiled = [p.grad for p in m.parameters()]
        m.zero_grad()
        E = crit(m(X), labels)
        E.backward()
        assert L.data == pytest.approx(E.data, rel=1e-12)
        assert compiled == pytest.approx([p.grad for p in m.parameters()], rel=1e-10, abs=1e-14)


def test_a_tuple_returned_to_a_gradient_names_has_aux():
    with pytest.raises(TypeError, match="has_aux=True"):
        ad.grad(lambda x: (x * x, 1.0))(2.0)


# -- a tape evaluated at inputs of another branch ---------------------------------------


def test_a_tape_refuses_inputs_that_take_another_branch():
    def f(x, y):
        return x * y if x > y else x - y

    tape = ad.trace(f, 2.0, 1.0)
    assert tape.evaluate(3.0, 1.0) == [3.0]
    with pytest.raises(ValueError, match="guard"):
        tape.evaluate(0.0, 1.0)  # plain Python: -1.0; the tape holds x * y
    squares = ad.trace(lambda x: sum(x[i] ** 2 for i in range(3)), np.ones(3))
    assert squares.evaluate(np.array([1.0, 2.0, 3.0])) == [14.0]  # (an array: its elements)


# -- vmap and export: clear errors, integers shared by every point --------------------

_G = 2.0


def test_vmap_and_export_say_what_failed_not_swapfailed():
    with pytest.raises(TypeError, match=r"float\(\)"):
        ad.vmap(lambda x: _G * float(x[0]))(np.ones((3, 2)))
    W = np.ones(300)
    source = ad.export(lambda x: np.sum(x * W), np.full(300, 0.1))
    assert "def " in source


def test_vmap_passes_integers_shared_by_every_point_as_they_are():
    def f(x, n, scale=1.0):
        return scale * sum(x[i] for i in range(n))

    X = np.arange(20.0).reshape(4, 5)
    for n in (3, 2, 5):
        np.testing.assert_array_equal(ad.vmap(f, in_axes=(0, None))(X, n), [f(x, n) for x in X])


# -- arrays the function makes, in export and in the checks ------------------------------


def _made(x):
    z = np.zeros(len(x))
    z[0] = x[0] ** 2
    z[1:] = x[1:] * x[0]  # (an array times an element)
    return np.sum(z * z)


def _made_grad(x):
    g = np.zeros_like(x)
    g[0] = 4 * x[0] ** 3 + 2 * x[0] * np.sum(x[1:] ** 2)
    g[1:] = 2 * x[1:] * x[0] ** 2
    return g


@pytest.mark.parametrize("n", [10, 300])
def test_made_arrays_are_checked_and_exported(n, tmp_path):
    import importlib.util

    x = np.linspace(0.1, 1.0, n)
    assert str(ad.check_grad(_made, x)).splitlines()[-1] == "OK"
    path = tmp_path / "made_export.py"
    ad.export(_made, x, path=str(path))
    spec = importlib.util.spec_from_file_location("made_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    y = np.linspace(-0.7, 0.4, n)  # (a fresh point)
    value, grad = module.made(y)  # (the function, named as adcompile names it)
    assert value == pytest.approx(_made(y), rel=1e-12)
    np.testing.assert_allclose(grad, _made_grad(y), rtol=1e-12)


# -- static arguments of the derived transforms (SciPy's args=(n,)) ------------------------


def _rosen_n(x, n):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(n - 1))


def test_hvp_hessian_jacobian_take_static_arguments():
    x, v = np.array([0.3, -0.2, 0.5, 0.1]), np.array([1.0, -2.0, 0.5, 3.0])
    for n in (4, 3):
        h = 1e-5
        grad = ad.grad(_rosen_n, static_argnums=1)
        fd = np.array([(grad(x + h * e, n) - grad(x - h * e, n)) / (2 * h) for e in np.eye(4)])
        np.testing.assert_allclose(ad.hessian(_rosen_n, static_argnums=1)(x, n), fd, atol=1e-5)
        np.testing.assert_allclose(ad.hvp(_rosen_n, static_argnums=1)(x, v, n), fd @ v, atol=1e-4)
    J = ad.jacobian(lambda x, n, s: x[:n] * s, static_argnums=1)(np.arange(5.0), 3, 2.0)
    np.testing.assert_array_equal(J, 2.0 * np.eye(3, 5))
    with pytest.raises(ValueError, match="cannot be static"):
        ad.hvp(_rosen_n, static_argnums=0)


def test_scipy_trust_ncg_with_args_and_a_static_size():
    optimize = pytest.importorskip("scipy.optimize")
    r = optimize.minimize(
        _rosen_n,
        np.full(5, -0.5),
        args=(5,),
        jac=ad.grad(_rosen_n, static_argnums=1),
        hessp=ad.hvp(_rosen_n, static_argnums=1),
        method="trust-ncg",
    )
    assert r.success and np.allclose(r.x, 1.0, atol=1e-4)


# -- .numba(): arguments and out of the wrong size ----------------------------------------


def test_numba_function_refuses_arrays_of_the_wrong_size():
    numba = pytest.importorskip("numba")
    fn = ad.value_and_grad(lambda x: np.sum(x**2)).numba(np.ones(4))

    @numba.njit
    def use(x, out):
        return fn(x, out)

    buf = np.zeros(8)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert use(x, buf[:5]) and list(buf) == [30.0, 2.0, 4.0, 6.0, 8.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="out needs 5 values"):
        use(x, buf[:2])  # (it wrote past out's end)
    with pytest.raises(ValueError, match="needs 4 values"):
        use(np.ones(3), buf[:5])


def test_vmap_and_static_derived_transforms_show_their_code():
    v = ad.vmap(lambda x: np.sum(x**2))
    np.testing.assert_array_equal(v(np.ones((3, 2))), [2.0, 2.0, 2.0])
    assert v.traces == 1 and "generated by adcompile" in v.source and v.explanation
    h = ad.hvp(lambda x, n: np.sum(x[:n] ** 3), static_argnums=1)
    np.testing.assert_array_equal(h(np.ones(3), np.ones(3), 2), [6.0, 6.0, 0.0])
    h(np.ones(3), np.ones(3), 3)
    assert h.traces == 2 and "generated by adcompile" in h.source


def test_a_compiled_loss_with_labels_shows_the_code_it_ran():
    import random

    from adcompile import nn

    random.seed(0)
    m = nn.Sequential(nn.Linear(2, 3))
    crit = nn.CrossEntropyLoss()
    step = ad.compile_loss(lambda X, T: crit(m(X), T), m.parameters())
    step(np.ones((4, 2)), np.arange(4) % 3)
    assert "generated by adcompile" in step.source and step.explanation
