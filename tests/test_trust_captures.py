"""State read from outside the arguments is watched or read afresh, never frozen
(issue 27, items 2, 3 and 6).

Each program is compiled, called, then the state it reads is changed the way
the issue describes, and the next calls are compared with plain Python (the
function run on floats) and central finite differences, at the traced point
and at a fresh one.
"""

from __future__ import annotations

import operator
import random
import sys
import warnings

import numpy as np
import pytest

import adcompile as ad


def fd(f, x: float, h: float = 1e-6) -> float:
    return (f(x + h) - f(x - h)) / (2 * h)


def agree(t, f, x: float) -> None:
    """``t`` (value_and_grad of ``f``) gives plain Python's value and the FD slope."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        v, g = t(x)
    assert v == pytest.approx(float(f(x)), rel=1e-12, abs=1e-12)
    assert g == pytest.approx(fd(f, x), rel=1e-6, abs=1e-7)


class Box:
    pass


# ---- module state the programs read (restored after each test)

G_DICT = {"a": 2.0}
G_TUPLE = (2.0,)
G_LIST = [2.0]
SCALE = 2.0
CFG = Box()


def helper(x):
    return SCALE * x


def helper2(x):
    return 2.0 * x


HELPERS = {"h": helper}


def _h8(x):
    return SCALE * x


def _h7(x):
    return _h8(x)


def _h6(x):
    return _h7(x)


def _h5(x):
    return _h6(x)


def _h4(x):
    return _h5(x)


def _h3(x):
    return _h4(x)


def _h2(x):
    return _h3(x)


def _h1(x):
    return _h2(x)


class Static:
    @staticmethod
    def h(x):
        return SCALE * x


@pytest.fixture(autouse=True)
def restore():
    global G_DICT, G_TUPLE, G_LIST, SCALE, helper2
    saved = (G_DICT, G_TUPLE, G_LIST, SCALE, helper2)
    CFG.__dict__.clear()
    CFG.scale = 2.0
    yield
    G_DICT, G_TUPLE, G_LIST, SCALE, helper2 = saved


def _set_scale(v):
    global SCALE
    SCALE = v


def _set_dict(v):
    global G_DICT
    G_DICT = v


def _set_tuple(v):
    global G_TUPLE
    G_TUPLE = v


def _redefine_helper2():
    global helper2

    def helper2(x):
        return 3.0 * x


def _cases():
    """(name, function, change): ``change()`` alters what the function reads."""
    cases = []

    cases.append(
        (
            "attribute of a global object",
            lambda x: CFG.scale * x * x,
            lambda: setattr(CFG, "scale", 3.0),
        )
    )

    a = Box()
    a.b = Box()
    a.b.c = 2.0
    cases.append(("nested a.b.c", lambda x: a.b.c * x * x, lambda: setattr(a.b, "c", 3.0)))
    a2 = Box()
    a2.b = Box()
    a2.b.c = 2.0

    def replace_b():
        nb = Box()
        nb.c = 5.0
        a2.b = nb

    cases.append(("nested, middle object replaced", lambda x: a2.b.c * x * x, replace_b))

    class K:
        k = 2.0

    cases.append(("class attribute", lambda x: K.k * x * x, lambda: setattr(K, "k", 3.0)))

    class WithProp:
        def __init__(self):
            self._v = 2.0

        @property
        def v(self):
            return self._v

    p = WithProp()
    cases.append(("property", lambda x: p.v * x * x, lambda: setattr(p, "_v", 3.0)))

    g1 = Box()
    g1.w = 2.0
    cases.append(
        ("getattr", lambda x: getattr(g1, "w") * x * x, lambda: setattr(g1, "w", 3.0))  # noqa: B009
    )

    g2 = Box()
    g2.w0, g2.w1 = 2.0, 1.0
    cases.append(
        (
            "getattr with a name made at run time",
            lambda x: sum(getattr(g2, f"w{k}") * x**2 for k in range(2)),
            lambda: setattr(g2, "w1", 3.0),
        )
    )

    class M:
        def __init__(self):
            self.w = 2.0

        def f(self, x):
            return self.w * x * x

    m = M()
    cases.append(("self.w of a bound method", m.f, lambda: setattr(m, "w", 3.0)))

    class Inst:
        scale = 2.0

        def f(self, x):
            return self.scale * x * x

    inst = Inst()
    cases.append(("class attribute through self", inst.f, lambda: setattr(Inst, "scale", 4.0)))

    cases.append(
        ("global dict reassigned", lambda x: G_DICT["a"] * x * x, lambda: _set_dict({"a": 3.0}))
    )
    cases.append(
        ("global tuple reassigned", lambda x: G_TUPLE[0] * x * x, lambda: _set_tuple((3.0,)))
    )
    cases.append(
        (
            "element of a global list",
            lambda x: G_LIST[0] * x * x,
            lambda: G_LIST.__setitem__(0, 3.0),
        )
    )
    cases.append(
        ("global list grown", lambda x: sum(c * x for c in G_LIST) * x, lambda: G_LIST.append(1.5))
    )
    d = {"k": 2.0}
    cases.append(
        ("element of a captured dict", lambda x: d["k"] * x * x, lambda: d.__setitem__("k", 3.0))
    )
    cases.append(
        ("helper reads its module's global", lambda x: helper(x) * x, lambda: _set_scale(3.0))
    )
    cases.append(("helper through a dict", lambda x: HELPERS["h"](x) * x, lambda: _set_scale(3.0)))
    cases.append(("helper 8 deep reads a global", lambda x: _h1(x) * x, lambda: _set_scale(3.0)))
    cases.append(("helper redefined", lambda x: helper2(x) * x, _redefine_helper2))
    cases.append(("staticmethod helper", lambda x: Static.h(x) * x, lambda: _set_scale(3.0)))
    cases.append(
        ("globals()[name]", lambda x: globals()["SCALE"] * x * x, lambda: _set_scale(3.0))
    )
    cases.append(
        (
            "sys.modules[__name__].NAME",
            lambda x: sys.modules[__name__].SCALE * x * x,
            lambda: _set_scale(3.0),
        )
    )
    v1 = Box()
    v1.x = 2.0
    cases.append(
        ("vars(obj)[name]", lambda x: vars(v1)["x"] * x * x, lambda: setattr(v1, "x", 3.0))
    )
    v2 = Box()
    v2.x = 2.0
    cases.append(
        (
            "operator.attrgetter",
            lambda x: operator.attrgetter("x")(v2) * x * x,
            lambda: setattr(v2, "x", 3.0),
        )
    )
    v3 = Box()
    v3.x = 2.0
    cases.append(
        ("obj.__dict__[name]", lambda x: v3.__dict__["x"] * x * x, lambda: setattr(v3, "x", 3.0))
    )

    class Call:
        def __init__(self):
            self.w = 2.0

        def __call__(self, x):
            return self.w * x * x

    c = Call()
    cases.append(("callable object", c, lambda: setattr(c, "w", 3.0)))

    def closure_over_list():
        lst = [2.0]

        def f(x):
            return lst[0] * x * x

        def change():
            nonlocal lst
            lst = [3.0]

        return f, change

    f, change = closure_over_list()
    cases.append(("closure over a list reassigned", f, change))

    def closure_over_object():
        o = Box()
        o.w = 2.0

        def f(x):
            return o.w * x * x

        def change():
            nonlocal o
            o = Box()
            o.w = 3.0

        return f, change

    f, change = closure_over_object()
    cases.append(("closure over an object reassigned", f, change))

    deep = Box()
    node = deep
    for _ in range(7):
        node.next = Box()
        node = node.next
    node.w = 2.0

    def f_deep(x):
        n = deep
        while hasattr(n, "next"):
            n = n.next
        return n.w * x * x

    cases.append(("helper-free chain 8 deep", f_deep, lambda: setattr(node, "w", 3.0)))
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_changed_state_gives_plain_pythons_answer(case):
    name, f, change = case
    t = ad.value_and_grad(f)
    agree(t, f, 0.7)
    change()
    agree(t, f, 0.7)  # the traced point, after the change
    agree(t, f, -1.3)  # and a fresh one
    change()  # (changing again to the same state is no change)
    agree(t, f, 0.4)


def test_state_read_is_listed_by_explain():
    t = ad.value_and_grad(lambda x: CFG.scale * x * x)
    t(1.0)
    text = ad.explain(t)
    assert "CFG.scale" in text and "watched" in text


# ---- Values made outside f: a model's parameters are inputs, read at each call


def test_mlp_parameters_changed_in_place_are_read_at_each_call():
    random.seed(3)
    net = ad.MLP(2, [4, 1])
    loss = lambda x: net(list(x))  # noqa: E731
    g = ad.grad(loss)
    x = np.array([0.3, -0.7])
    for step in range(4):
        got = g(x)
        xs = [ad.Value(float(v)) for v in x]
        net(xs).backward()
        np.testing.assert_allclose(got, [v.grad for v in xs], rtol=1e-12, atol=1e-15)
        for p in net.parameters():
            p.data += 0.05 * (step + 1)
    assert g.traces == 1  # read as inputs: no trace again


def test_module_subclass_parameters_and_training_loop():
    class Lin(ad.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = ad.Value(2.0)
            self.b = ad.Value(0.5)

        def __call__(self, x):
            return (self.w * x + self.b) ** 2

    lin = Lin()
    vg = ad.value_and_grad(lambda x: lin(x))
    for _ in range(3):
        v, g = vg(1.5)
        w, b = lin.w.data, lin.b.data
        assert v == pytest.approx((w * 1.5 + b) ** 2, rel=1e-12)
        assert g == pytest.approx(2 * (w * 1.5 + b) * w, rel=1e-12)
        lin.w.data -= 0.1
    lin.w = ad.Value(-1.0)  # a new parameter object: watched by identity
    v, g = vg(1.5)
    assert v == pytest.approx((-1.5 + lin.b.data) ** 2, rel=1e-12)


def test_value_made_from_parameters_before_the_trace_keeps_its_data():
    w = ad.Value(2.0)
    h = w * 3.0  # made outside: plain Python keeps h.data = 6.0 when w changes
    vg = ad.value_and_grad(lambda x: h * x)
    assert vg(1.0) == (6.0, 6.0)
    w.data = 10.0
    assert vg(1.0) == (6.0, 6.0)  # as plain Python: h was computed before
    h.data = 7.0
    assert vg(2.0) == (14.0, 7.0)


# ---- random draws inside f are refused by name


@pytest.mark.parametrize(
    "draw",
    [
        lambda: np.random.rand(),
        lambda: np.random.normal(),
        lambda: random.random(),
        lambda: random.gauss(0.0, 1.0),
    ],
    ids=["np.random.rand", "np.random.normal", "random.random", "random.gauss"],
)
def test_global_random_draw_is_refused(draw):
    f = lambda x: x * draw()  # noqa: E731
    for t in (ad.jit(f), ad.grad(f), ad.value_and_grad(f)):
        with pytest.raises(ad.RandomDrawError, match="drew random numbers.*argument"):
            t(1.0)


RNG = np.random.default_rng(0)


def test_captured_generator_draw_is_refused():
    with pytest.raises(ad.RandomDrawError, match="RNG"):
        ad.jit(lambda x: x * RNG.normal())(1.0)


def test_seeded_generator_passed_in_is_fine():
    noise = np.random.default_rng(1).normal(size=3)
    vg = ad.value_and_grad(lambda x, n: np.sum(x * n))
    v, g = vg(np.ones(3), noise)
    assert v == pytest.approx(noise.sum()) and np.allclose(g, noise)


def test_long_containers_are_watched_item_by_identity():
    coeffs = [1.0] * 100  # longer than the scan looks into item by item
    lookup = {k: 1.0 for k in range(100)}

    def f(x):
        return coeffs[37] * x * x + lookup[5] * x

    t = ad.value_and_grad(f)
    agree(t, f, 0.7)
    coeffs[37] = 3.0
    agree(t, f, 0.7)
    lookup[5] = -2.0
    agree(t, f, 1.1)


def test_vmap_and_jacobian_of_a_model_read_its_parameters():
    random.seed(5)
    net = ad.MLP(2, [3, 1])

    def eager_grad(x):
        xs = [ad.Value(float(v)) for v in x]
        net(xs).backward()
        return np.array([v.grad for v in xs])

    X = np.random.default_rng(0).normal(size=(5, 2))
    per_row = ad.vmap(ad.grad(lambda x: net([x[0], x[1]])))
    jac = ad.jacobian(lambda x: [net([x[0], x[1]]), net([x[1], x[0]])])
    for _ in range(2):
        np.testing.assert_allclose(per_row(X), [eager_grad(r) for r in X], rtol=1e-12)
        j = jac(X[0])
        np.testing.assert_allclose(j[0], eager_grad(X[0]), rtol=1e-12)
        np.testing.assert_allclose(j[1], eager_grad(X[0][::-1])[::-1], rtol=1e-12)
        for p in net.parameters():
            p.data += 0.3


def test_another_threads_draw_while_tracing_is_not_the_functions():
    # a draw made by another thread (as a Dask scheduler's random.shuffle) moves the
    # global generator while f is traced; the trace is checked once more, and f's
    # own draws are still refused with other threads running
    import random
    import threading

    drawn = threading.Event()
    go = threading.Event()
    stop = threading.Event()

    def other():
        go.wait()
        random.random()  # once, while the first trace runs
        drawn.set()
        stop.wait()

    thread = threading.Thread(target=other)
    thread.start()
    try:

        def f(x):
            if not drawn.is_set():
                go.set()
                drawn.wait(5)
            return x * x + 1.0

        v, g = ad.value_and_grad(f)(3.0)
        assert (v, g) == (10.0, 6.0)
        with pytest.raises(ad.RandomDrawError, match=r"random\.random"):
            ad.grad(lambda x: x * random.random())(2.0)
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("n", [3, 300])  # (element by element, and at array level)
def test_a_generator_seeded_from_the_os_inside_is_refused_a_seeded_one_is_not(n: int):
    x = np.linspace(0.0, 1.0, n)
    for f in (
        lambda x: np.sum(x * np.random.default_rng().standard_normal(len(x))),
        lambda x: np.sum(x * np.random.Generator(np.random.PCG64()).normal(size=len(x))),
    ):
        with pytest.raises(ad.RandomDrawError, match="seeded from the operating system"):
            ad.jit(f)(x)
    seeded = lambda x: np.sum(x * np.random.default_rng(5).standard_normal(len(x)))  # noqa: E731
    jf = ad.jit(seeded)
    for point in (x, x[::-1] * 2.0):  # (the same draws at each call, as plain Python's)
        assert jf(point) == pytest.approx(seeded(point), rel=1e-12)


def test_a_branch_on_a_parameters_data_is_guarded():
    """compile_loss over a model's parameters: a branch on ``p.data`` is guarded as one
    on ``p`` is (it was compiled in, and a later value took the traced branch's
    answer), and a set lookup of ``p.data`` is refused by name."""
    p = ad.Value(0.5)

    def loss(d):
        return p * 2.0 if p.data > 0.7 else p * 3.0

    step = ad.compile_loss(loss, [p])
    for value in (0.5, 1.0, 0.2, 0.9):
        p.data = value
        got = step(np.zeros(1))
        p.grad = 0.0
        want = loss(0)
        assert got.data == want.data  # (2 p past 0.7, 3 p below)
    p.data = 0.5
    lookup = ad.compile_loss(lambda d: p * 2.0 if p.data in {1.0, 2.0} else p * 3.0, [p])
    with pytest.raises(TypeError, match=r"hash\(\) of a traced Value's \.data.*in \(1\.0, 2\.0\)"):
        lookup(np.zeros(1))


@pytest.mark.parametrize(
    "use",
    [lambda x: x * float(x.data), lambda x: x * np.exp(x.data), lambda p: p + float(p.data)],
)
def test_a_traced_data_used_as_a_number_is_refused(use):
    """float(x.data), np.exp(x.data): a number of the trace that plain Python reads
    afresh at each call; refused by name, for an argument and a parameter alike."""
    with pytest.raises(TypeError, match=r"\.data of a traced Value was used as a number"):
        ad.jit(use)(0.5)
    p = ad.Value(0.5)
    with pytest.raises(TypeError, match=r"\.data of a traced Value was used as a number"):
        ad.compile_loss(lambda d: use(p), [p])(np.zeros(1))
    assert np.isnan(ad.jit(lambda x: x * 2.0 if np.isnan(x.data) else x)(float("nan")))


def test_parameters_keep_their_identity_in_sets_and_dicts_inside_a_trace():
    """A model's parameters are Values in plain Python too: looked up by identity in a
    dict or set inside the loss (per-parameter decay, frozen layers), as eagerly."""
    from adcompile.nn import MLP

    m = MLP(2, [4, 1])
    decay = {p: 1e-2 * (k + 1) for k, p in enumerate(m.parameters())}
    frozen = set(m.layers[0].parameters())

    def loss(X, Y):  # noqa: N803
        out = [m(list(x)) for x in X]
        fit = sum((o - y) ** 2 for o, y in zip(out, Y))
        return fit + sum(decay[p] * p * p for p in m.parameters() if p not in frozen)

    X, Y = np.array([[0.5, -1.0], [1.0, 2.0]]), np.array([1.0, -1.0])  # noqa: N806
    step = ad.compile_loss(loss, m.parameters())
    for _ in range(3):
        got = step(X, Y)
        got.backward()  # (adds the compiled gradients into p.grad)
        grads = [p.grad for p in m.parameters()]
        for p in m.parameters():
            p.grad = 0.0
        want = loss(X, Y)
        want.backward()
        assert got.data == pytest.approx(want.data, rel=1e-12)
        np.testing.assert_allclose(grads, [p.grad for p in m.parameters()], rtol=1e-12)
        for p in m.parameters():
            p.data -= 0.1 * p.grad
            p.grad = 0.0


def test_a_values_data_read_from_outside_is_guarded_or_refused():
    """A Value made outside f and read through ``.data`` (a target network's weight): a
    branch on it is guarded, a number made of it refused by name (it was compiled in:
    a later wt.data took the traced value), and read as a Value it is an input."""
    wt = ad.Value(1.0)
    branch = ad.value_and_grad(lambda x: x * 2.0 if wt.data > 0.7 else x * 3.0)
    as_value = ad.value_and_grad(lambda x: (x - wt) ** 2)
    for w in (1.0, 0.5, 0.9):
        wt.data = w
        assert branch(2.0) == ((4.0, 2.0) if w > 0.7 else (6.0, 3.0))
        assert as_value(2.0) == pytest.approx(((2.0 - w) ** 2, 2 * (2.0 - w)), rel=1e-12)
    with pytest.raises(TypeError, match=r"\.data of a traced Value was used as a number"):
        ad.value_and_grad(lambda x: (x - wt.data) ** 2)(2.0)


def test_a_values_data_in_arithmetic_on_an_array_of_values_is_refused():
    """``x - wt.data`` with x an array of traced Values: NumPy's object loop would take
    the traced .data as the float it holds at the trace (a later wt.data was not
    seen); refused by name, as with a single Value."""
    wt = ad.Value(1.0)
    with pytest.raises(TypeError, match=r"\.data of a traced Value was used as a number"):
        ad.value_and_grad(lambda x: np.sum((x - wt.data) ** 2))(np.full(300, 2.0))
    g = ad.value_and_grad(lambda x: np.sum((x - wt) ** 2))  # (the Value: read each call)
    for w in (1.0, 0.5):
        wt.data = w
        assert g(np.full(300, 2.0))[0] == pytest.approx(300 * (2.0 - w) ** 2, rel=1e-12)
