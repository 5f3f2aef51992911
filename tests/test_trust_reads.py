"""What a traced function reads, found by the second trust probe of stop 40: each
case held against plain Python, at the traced point and after a change, or refused
by name (a clear TypeError or RandomDrawError, never a stale number)."""

from __future__ import annotations

import itertools
import os
import secrets
import uuid
import warnings
import weakref
from collections import ChainMap, namedtuple

import numpy as np
import pytest

import adcompile as ad
from adcompile import Value

pytestmark = pytest.mark.filterwarnings("ignore::adcompile.RetraceWarning")


def _same(vg, f, x) -> None:  # noqa: ANN001
    """``vg`` (value_and_grad of ``f``) gives plain Python's value at ``x``, and the
    central difference of it."""
    v, g = vg(x)
    assert v == pytest.approx(f(x), rel=1e-12)
    assert g == pytest.approx((f(x + 1e-6) - f(x - 1e-6)) / 2e-6, rel=1e-6)


# ---------------------------------------------------------------- special methods


class Bag:
    def __init__(self) -> None:
        self.d, self.n, self.s, self.on = np.array([1.0, 2.0]), 2, 2.0, True

    def __getitem__(self, i: int) -> float:
        return self.d[i]

    def __len__(self) -> int:
        return self.n

    def __float__(self) -> float:
        return self.s

    def __bool__(self) -> bool:
        return self.on

    def __contains__(self, k: object) -> bool:
        return k in self.d


def test_what_special_methods_read_is_watched() -> None:
    """bag[1], len(bag), float(bag), bool(bag), k in bag: Python calls the class's
    special methods, whose reads of self are followed as a method's are."""
    bag = Bag()
    cases = [
        lambda x: x * bag[1],
        lambda x: sum(x * (k + 1) for k in range(len(bag))),
        lambda x: x * float(bag),
        lambda x: x * 2.0 if bag else x * 3.0,
        lambda x: x * 5.0 if 10.0 in bag else x,
    ]
    transforms = [ad.value_and_grad(f) for f in cases]
    for vg, f in zip(transforms, cases):
        _same(vg, f, 1.5)
    bag.d[:] = [10.0, 20.0]
    bag.n, bag.s, bag.on = 4, 5.0, False
    for vg, f in zip(transforms, cases):
        _same(vg, f, 1.5)
        _same(vg, f, -0.5)


class Lookup:
    def __init__(self) -> None:
        self._d = {"k": 2.0}

    def __getattr__(self, name: str) -> float:
        return self._d[name]  # (a KeyError for any other name)


def test_an_object_with_getattr_is_followed() -> None:
    a = Lookup()
    f = lambda x: x * a.k  # noqa: E731
    vg = ad.value_and_grad(f)
    _same(vg, f, 1.0)
    a._d["k"] = 5.0
    _same(vg, f, 1.0)


# ---------------------------------------------------------------- other places


def test_environment_weak_references_chain_maps_and_memoryviews_are_watched() -> None:
    class H:
        k = 2.0

    h = H()
    ref = weakref.ref(h)
    chain = ChainMap({"k": 2.0})
    buf = np.array([2.0])
    view = memoryview(buf)
    os.environ["ADCOMPILE_TEST_SCALE"] = "2"
    cases = [
        lambda x: x * float(os.environ["ADCOMPILE_TEST_SCALE"]),
        lambda x: x * ref().k,
        lambda x: x * chain["k"],
        lambda x: x * view[0],
    ]
    transforms = [ad.value_and_grad(f) for f in cases]
    for vg, f in zip(transforms, cases):
        _same(vg, f, 1.5)
    try:
        os.environ["ADCOMPILE_TEST_SCALE"] = "7"
        h.k, buf[0] = 7.0, 7.0
        chain["k"] = 7.0
        for vg, f in zip(transforms, cases):
            _same(vg, f, 1.5)
            assert vg(1.0)[0] == pytest.approx(7.0)
    finally:
        del os.environ["ADCOMPILE_TEST_SCALE"]


def test_draws_from_iterators_and_the_operating_system_are_refused() -> None:
    def counter():  # noqa: ANN202
        k = 0
        while True:
            k += 1
            yield k

    cycle, gen = itertools.cycle([1.0, 2.0, 3.0]), counter()
    for f, x in [
        (lambda x: x * next(cycle), 1.0),
        (lambda x: x[0] * next(gen), np.array([1.0, 2.0])),
        (lambda x: x[0] * next(gen), np.arange(300.0)),
    ]:
        with pytest.raises(ad.RandomDrawError, match="iterator made outside it"):
            ad.jit(f)(x)
    for f in [
        lambda x: x * os.urandom(1)[0],
        lambda x: x * secrets.randbelow(1000),
        lambda x: x * (uuid.uuid4().int % 7),
    ]:
        with pytest.raises(ad.RandomDrawError, match="operating system's randomness"):
            ad.jit(f)(1.0)


def test_tobytes_of_a_traced_array_is_refused() -> None:
    with pytest.raises(TypeError, match=r"tobytes\(\) of an array adcompile traces"):
        ad.jit(lambda x: np.sum(np.frombuffer(x.tobytes())))(np.array([1.0, 2.0]))
    A = np.array([1.0, 2.0, 3.0])  # (a global's bytes: read as NumPy's, and watched)
    f = lambda x: x * np.frombuffer(A.tobytes())[1]  # noqa: E731
    j = ad.jit(f)
    assert j(1.5) == f(1.5)
    A[1] = 9.0
    assert j(1.5) == f(1.5) == 13.5


def test_numbers_of_a_traced_data_read_by_numpy_or_float_methods_are_refused() -> None:
    for f in [
        lambda x: x * 2.0 if np.isclose(x.data, 2.0) else x * 3.0,
        lambda x: x * 2.0 if x.data.is_integer() else x * 3.0,
        lambda x: x * np.round(x.data),
    ]:
        with pytest.raises(TypeError, match=r"\.data of a traced Value was used as a number"):
            ad.jit(f)(2.0)


# ---------------------------------------------------------------- primitives


def test_a_primitive_reading_a_global_that_changed_is_refused() -> None:
    """Its code (traced from its function) and its derivative rule hold the value
    they read: after a change, a new trace refuses by name."""
    scale = {"s": 2.0}

    @ad.primitive(vjp=lambda g, out, x: g * scale["s"], name="probe40_scaled")
    def scaled(x):  # noqa: ANN001, ANN202
        return x * scale["s"]

    f = lambda x: scaled(x) * x  # noqa: E731
    vg = ad.value_and_grad(f)
    assert vg(1.5) == pytest.approx((4.5, 6.0))
    scale["s"] = 3.0
    assert scaled(1.0) == 3.0  # (called on numbers: plain Python)
    with pytest.raises(TypeError, match=r"probe40_scaled\(\) reads scale\['s'\]"):
        vg(1.5)


def test_a_function_primitive_reading_a_global_that_changed_is_refused() -> None:
    box = [2.0]

    class Probe40Scale(ad.Function):
        @staticmethod
        def forward(ctx, x):  # noqa: ANN001, ANN205
            return x * box[0]

        @staticmethod
        def backward(ctx, g):  # noqa: ANN001, ANN205
            return g * box[0]

    vg = ad.value_and_grad(lambda x: Probe40Scale.apply(x) * x)
    assert vg(1.5) == pytest.approx((4.5, 6.0))
    box[0] = 3.0
    with pytest.raises(TypeError, match=r"probe40scale\(\) reads box\[0\]"):
        vg(1.5)


# ---------------------------------------------------------------- nan


@pytest.mark.parametrize("n", [3, 300])
def test_nan_to_num_is_numpys(n: int) -> None:
    def f(x):  # noqa: ANN001, ANN202
        return np.sum(np.nan_to_num(np.log(x), nan=-2.0) * x) + np.sum(
            np.nan_to_num(x * 1e306 * 1e306, posinf=5.0, neginf=-4.0)
        )

    vg = ad.value_and_grad(f)
    rng = np.random.default_rng(n)
    for _ in range(3):
        x = rng.uniform(-1.0, 2.0, size=n)
        with np.errstate(all="ignore"):
            want = f(x)
        v, g = vg(x)
        assert v == pytest.approx(want, rel=1e-12)
        # by hand: log(x) x where x > 0 (derivative log x + 1), else -2 x (-2)
        hand = np.where(x > 0, np.log(np.abs(x)) + 1.0, -2.0)
        np.testing.assert_allclose(g, hand, rtol=1e-12)


def test_ordering_a_traced_array_holding_nan_is_refused() -> None:
    j = ad.jit(lambda x: np.sort(x)[0] + x[np.argmax(x)])
    x = np.array([2.0, 3.0, 1.0])
    assert j(x) == 4.0
    with pytest.raises(TypeError, match="holding nan"):
        j(np.array([2.0, np.nan, 1.0]))


# ---------------------------------------------------------------- arguments


def test_a_namedtuple_of_numbers_is_a_tree() -> None:
    Point = namedtuple("Point", "x y")
    vg = ad.value_and_grad(lambda p: p.x * p.y**2)
    for p in (Point(1.0, 2.0), Point(-0.5, 3.0)):
        v, g = vg(p)
        assert v == pytest.approx(p.x * p.y**2)
        assert type(g) is Point and g == pytest.approx((p.y**2, 2 * p.x * p.y))


def test_a_traced_data_times_a_traced_label_is_a_guarded_number() -> None:
    """``if out.data * yi < 1`` in a compiled loss, yi a row of the labels (traced):
    the product is ``(out * yi).data``, and the branch is guarded, as on Values."""
    w = [Value(0.5), Value(-0.3)]

    def loss(X, y):  # noqa: ANN001, ANN202, N803
        total = Value(0.0)
        for xi, yi in zip(X, y):
            out = w[0] * xi[0] + w[1] * xi[1]
            if out.data * yi < 1:
                total = total + (1 - out * yi)
        return total

    step = ad.compile_loss(loss, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for X, y in [
            (np.array([[1.0, 2.0], [0.5, -1.0]]), np.array([1.0, -1.0])),
            (np.array([[3.0, 2.0], [0.5, 1.0]]), np.array([1.0, 1.0])),
        ]:
            for p in w:
                p.grad = 0.0
            got = step(X, y)
            got.backward()
            grads = [p.grad for p in w]
            for p in w:
                p.grad = 0.0
            want = loss(X, y)
            want.backward()
            assert got.data == pytest.approx(want.data, rel=1e-12)
            assert grads == pytest.approx([p.grad for p in w], rel=1e-12)


# ---------------------------------------------------------------- Values' own fields


def test_reading_an_outside_values_grad_is_refused() -> None:
    """``x * u.grad``: the compiled code would keep the gradient read while tracing
    (an argument's stand-in's, 0.0); it is refused by name, and the .grad put back."""
    u = Value(1.0, label="u")
    u.grad = 2.0
    for transform in (ad.grad, ad.jit):
        with pytest.raises(TypeError, match=r"read u\.grad"):
            transform(lambda x: x * u.grad)(1.0)
    w = Value(1.0)
    w.grad = 0.5
    step = ad.compile_loss(lambda x: (w * x[0]) ** 2 + w.grad * x[0], [w])
    with pytest.raises(TypeError, match=r"\.grad"):
        step(np.array([2.0]))
    assert (u.grad, w.grad) == (2.0, 0.5)
    with pytest.raises(TypeError, match=r"assigned the \.grad"):
        ad.grad(lambda x: (setattr(u, "grad", 0.0), x * u)[1])(1.0)
    assert u.grad == 2.0


def test_labels_and_requires_grad_read_by_the_function_are_watched() -> None:
    ps = [Value(1.0, label="w1"), Value(2.0, label="b1"), Value(3.0, label="w2")]
    u, q = Value(2.0, label="u"), Value(2.0, requires_grad=False)
    cases = [
        lambda x: x * sum(p * p for p in ps if p.label.startswith("w")),
        lambda x: x * sum(p for p in ps if p.requires_grad),
        lambda x: x * 2.0 if u.label == "u" else x * 3.0,
        lambda x: x * q if not q.requires_grad else x * 3.0,
    ]

    def plain(k: int, x: float) -> float:  # (the same, on the numbers)
        if k == 0:
            return x * sum(p.data**2 for p in ps if p.label.startswith("w"))
        if k == 1:
            return x * sum(p.data for p in ps if p.requires_grad)
        if k == 2:
            return x * 2.0 if u.label == "u" else x * 3.0
        return x * q.data if not q.requires_grad else x * 3.0

    grads = [ad.grad(f) for f in cases]
    for k, g in enumerate(grads):
        assert g(1.5) == pytest.approx(plain(k, 1.0))
    ps[1].label, ps[0].requires_grad, u.label, q.requires_grad = "w_b", False, "v", True
    for k, g in enumerate(grads):
        assert g(1.5) == pytest.approx(plain(k, 1.0))
    q.requires_grad, q.data = False, 5.0
    assert grads[3](1.5) == 5.0


# ---------------------------------------------------------------- third probe


def _after(f, change) -> None:  # noqa: ANN001
    """grad of ``f`` is central differences', before and after ``change()``."""
    g = ad.grad(f)
    for step in (None, change):
        if step is not None:
            step()
        for x in (0.7, -1.1):
            want = (f(x + 1e-6) - f(x - 1e-6)) / 2e-6
            assert g(x) == pytest.approx(want, rel=1e-6, abs=1e-8)


class Holder:
    pass


def test_library_functions_held_in_variables_are_watched() -> None:
    """ACT = np.sin, then np.cos; max then min; ad.tanh then ad.sigmoid; a decorated
    helper (lru_cache), np.vectorize's function, a builtin method's dict."""
    h = Holder()
    h.act, h.op, h.fn, h.scale = np.sin, max, ad.tanh, {"s": 2.0}

    @__import__("functools").lru_cache
    def cached() -> float:
        return h.scale["s"]

    vec = np.vectorize(lambda v: h.scale["s"] * v)
    get = h.scale.get
    _after(lambda x: h.act(x), lambda: setattr(h, "act", np.cos))
    _after(lambda x: h.op(x, 0.5) * x, lambda: setattr(h, "op", min))
    _after(lambda x: h.fn(x), lambda: setattr(h, "fn", ad.sigmoid))

    def rescale() -> None:
        h.scale["s"] = 5.0
        cached.cache_clear()

    for f in (
        lambda x: cached() * x * x,
        lambda x: x * float(vec(3.0)),
        lambda x: get("s") * x * x,
    ):
        h.scale["s"] = 2.0
        cached.cache_clear()
        _after(f, rescale)


def test_methods_replaced_on_the_class_or_the_instance_are_watched() -> None:
    class C:
        def get(self) -> float:
            return 2.0

        def __getitem__(self, i: int) -> float:
            return 2.0

    class D:
        def get(self) -> float:
            return 5.0

    a, b, c, d = C(), C(), C(), C()
    _after(lambda x: a.get() * x * x, lambda: setattr(b, "get", lambda: 5.0))  # (another)
    _after(lambda x: b.get() * x * x, lambda: setattr(b, "get", lambda: 5.0))
    _after(lambda x: c.get() * x * x, lambda: setattr(c, "__class__", D))
    _after(lambda x: d[0] * x * x, lambda: setattr(C, "__getitem__", lambda s, i: 7.0))
    _after(lambda x: a.get() * x * x, lambda: setattr(C, "get", lambda s: 9.0))


def test_structured_arrays_ranges_and_slices_are_watched() -> None:
    h = Holder()
    h.p = np.zeros(1, dtype=[("a", "f8")])
    h.p["a"] = 2.0
    h.r, h.s, h.w = range(2), slice(0, 1), np.array([1.0, 2.0, 3.0])
    _after(lambda x: h.p["a"][0] * x * x, lambda: h.p.__setitem__("a", 5.0))
    _after(lambda x: len(h.r) * x * x, lambda: setattr(h, "r", range(5)))
    _after(lambda x: np.sum(h.w[h.s]) * x * x, lambda: setattr(h, "s", slice(0, 3)))


def test_a_layer_losing_its_bias_traces_again() -> None:
    lin = ad.nn.Linear(2, 1)
    vg = ad.value_and_grad(lambda x: np.sum(lin(np.array([x, 2 * x]))) ** 2)
    vg(0.7)
    lin.bias = None
    for _ in range(2):
        v, _g = vg(0.7)
        assert v == pytest.approx(float(np.sum(lin(np.array([0.7, 1.4])))) ** 2, rel=1e-12)
    assert vg.traces == 2


def test_text_of_a_traced_value_prints_but_is_refused_as_data(capsys) -> None:  # noqa: ANN001
    def shown(x):  # noqa: ANN001, ANN202
        print("x is", x, f"{x:.3f}", "x " + str(x))
        return x * 2.0

    assert ad.jit(shown)(1.5) == 3.0
    assert "1.500" in capsys.readouterr().out
    for f in (
        lambda x: len(str(x)) * x,
        lambda x: (2.0 if f"{x:.1f}" == "0.7" else 5.0) * x,
        lambda x: x * 2.0 if str(x.data).startswith("2") else x,
        lambda x: x * {"0.7": 2.0}.get(f"{x:.1f}", 1.0),
    ):
        with pytest.raises(TypeError, match="text made from a traced value"):
            ad.jit(f)(0.7)
