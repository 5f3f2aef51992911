"""Adversarial tests of the entries and direct entries (adcompile/entries.py).

Each test makes a transform hot (``HOT_CALLS + 1`` calls with the same argument
types and shapes; ``a direct entry`` in ``ad.explain`` where one is expected)
and compares what it then returns against an independent reference:
hand-derived formulas, central finite differences, or a fresh transform of the
same function called once (the general path). Whatever the direct entry does
not take must give exactly the general path's answers, result structure and
errors.

The tests after "found by these tests" are differences these tests found,
each fixed: bools taken by Numba's dispatcher, its NumbaTypeError on masked
arrays, generated names shadowed by arguments, copies of a transform, and a
byte-swapped array typed as a native one.
"""

from __future__ import annotations

import copy
import gc
import math
import threading
import warnings
from fractions import Fraction

import numpy as np
import pytest

import adcompile as ad
from adcompile.api.derived import jvp_transform
from adcompile.backend.entries import HOT_CALLS

# ---------------------------------------------------------------- helpers


def heat(fn, *args, direct=True):
    """Call ``fn`` until hot; check that it has (or has not) a direct entry."""
    for _ in range(HOT_CALLS + 1):
        fn(*args)
    assert ("a direct entry" in ad.explain(fn)) is direct, ad.explain(fn)
    return fn


class Ok:
    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Ok({self.value!r})"


class Err:
    def __init__(self, e):
        self.type, self.message = type(e), str(e)

    def __repr__(self):
        return f"Err({self.type.__name__}: {self.message})"


def outcome(fn, *args, **kwargs):
    """``Ok(result)`` or ``Err(exception)``."""
    try:
        return Ok(fn(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - compared, not handled
        return Err(e)


def assert_same(got, want, rtol=1e-13, atol=0.0):
    """Same outcome: the same exception type and message, or results of the same
    structure (types, lengths, shapes, dtypes) and numbers."""
    if isinstance(want, (Ok, Err)):
        assert type(got) is type(want), (got, want)
        if isinstance(want, Err):
            assert (got.type, got.message) == (want.type, want.message), (got, want)
            return
        got, want = got.value, want.value
    assert type(got) is type(want), (type(got), type(want), got, want)
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_same(a, b, rtol, atol)
    elif isinstance(want, np.ndarray):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(want, rel=rtol, abs=atol), (got, want)


def general(make, *args, **kwargs):
    """The general path's outcome: a fresh transform called once."""
    return outcome(make(), *args, **kwargs)


def fd_grad(f, x, h=1e-6):
    """Central finite differences of scalar ``f`` at float or array ``x``."""
    if isinstance(x, float):
        return (f(x + h) - f(x - h)) / (2 * h)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def rosen(x):
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2 for i in range(len(x) - 1))


def rosen_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def chain(x, c):  # folded into a loop for long x
    s = 0.0
    for i in range(len(x) - 1):
        s = s + ad.sin(x[i + 1] * x[i]) * c
    return s


def chain_ref(x, c):
    p = x[1:] * x[:-1]
    d = np.cos(p) * c
    g = np.zeros_like(x)
    g[:-1] += d * x[1:]
    g[1:] += d * x[:-1]
    return float(np.sum(np.sin(p)) * c), g, float(np.sum(np.sin(p)))


X3 = np.array([0.3, -1.2, 2.0])

# ---------------------------------------------------------------- hand-derived answers


def test_grad_of_a_float_against_the_hand_formula():
    g = heat(ad.grad(lambda x: x**3 * ad.sin(x)), 0.7)
    for x in (0.7, -2.5, 3.0, 1e-3):
        assert g(x) == pytest.approx(3 * x**2 * math.sin(x) + x**3 * math.cos(x), rel=1e-13)
        assert type(g(x)) is float


def test_value_and_grad_of_an_array_against_the_hand_formula_and_fresh_arrays():
    vg = heat(ad.value_and_grad(rosen), np.full(6, 0.5))
    rng = np.random.default_rng(0)
    kept = []
    for _ in range(5):
        x = rng.normal(size=6)
        v, g = vg(x)
        assert type(v) is float and v == pytest.approx(rosen(x), rel=1e-13)
        np.testing.assert_allclose(g, rosen_grad(x), rtol=1e-12)
        kept.append((x, g))
    for k, (x, g) in enumerate(kept):  # each call's gradient is its own array
        np.testing.assert_allclose(g, rosen_grad(x), rtol=1e-12)
        for _, other in kept[k + 1 :]:
            assert g is not other and not np.shares_memory(g, other)
    x = rng.normal(size=6)
    _, g1 = vg(x)
    g1[:] = 1e300  # the caller owns it: writing to it changes no later answer
    np.testing.assert_allclose(vg(x)[1], rosen_grad(x), rtol=1e-12)
    assert g1.flags.writeable and g1.flags.c_contiguous


def test_negative_argnums_against_the_hand_formula():
    def f(x, y, z):
        return x * y * z * z

    g = heat(ad.grad(f, argnums=(-1, 0)), 1.0, 2.0, 3.0)
    assert g(2.0, 3.0, 4.0) == (2 * 2.0 * 3.0 * 4.0, 3.0 * 16.0)
    vg = heat(ad.value_and_grad(lambda a, x: np.sum(a * x * x), argnums=-1), X3, X3 + 1)
    v, gx = vg(X3 * 2, X3 - 1)
    assert v == pytest.approx(np.sum(X3 * 2 * (X3 - 1) ** 2), rel=1e-13)
    np.testing.assert_allclose(gx, 2 * X3 * 2 * (X3 - 1), rtol=1e-13)
    j = heat(ad.jacobian(lambda a, x: a * x * x, argnums=-1), 2.0, X3)
    np.testing.assert_allclose(j(3.0, X3 + 1), np.diag(2 * 3.0 * (X3 + 1)), rtol=1e-13)


def test_hessian_hvp_and_jvp_against_hand_formulas():
    h = heat(ad.hessian(lambda x: np.sum(x**4) + x[0] * x[1]), X3)
    want = np.diag(12 * (X3 + 1) ** 2)
    want[0, 1] = want[1, 0] = 1.0
    np.testing.assert_allclose(h(X3 + 1), want, rtol=1e-13)

    def f(x, a, b):  # hvp with extra arguments (SciPy's hessp(x, p, *args))
        return np.sum(a * x**3) + b * x[0] ** 2

    hv = heat(ad.hvp(f), X3, X3 * 0 + 1, X3 * 2, 3.0)
    x, v, a, b = X3 + 1, np.array([1.0, -2.0, 0.5]), np.array([2.0, 1.0, -1.0]), 1.5
    want = 6 * a * x * v
    want[0] += 2 * b * v[0]
    np.testing.assert_allclose(hv(x, v, a, b), want, rtol=1e-13)

    def k(x, y):
        return x * y + ad.sin(x)

    for _ in range(HOT_CALLS + 1):
        ad.jvp(k, (2.0, 3.0), (1.0, 0.5))
    assert "a direct entry" in ad.explain(jvp_transform(k))
    val, tan = ad.jvp(k, (1.5, -2.0), (0.25, 4.0))
    assert val == pytest.approx(1.5 * -2.0 + math.sin(1.5), rel=1e-14)
    assert tan == pytest.approx((-2.0 + math.cos(1.5)) * 0.25 + 1.5 * 4.0, rel=1e-14)


def test_gradients_against_central_differences():
    def f(x, y):
        return np.sum(ad.tanh(x) * y) + ad.log1p(y * y) * x[0]

    g = heat(ad.grad(f, argnums=(0, 1)), X3, 0.5)
    x, y = np.array([0.1, -0.4, 0.9]), -1.3
    gx, gy = g(x, y)
    np.testing.assert_allclose(gx, fd_grad(lambda t: f(t, y), x), rtol=1e-7, atol=1e-9)
    assert gy == pytest.approx(fd_grad(lambda t: f(x, t), y), rel=1e-7)


# ---------------------------------------------------------------- against the general path

# (name, make, heating args, later calls): each later call's outcome on the hot
# transform must be the general path's, in structure, types and numbers
_CASES = [
    ("jit scalar", lambda: ad.jit(lambda x, y: x * y + 1.0), (1.0, 2.0), [(3.0, -4.0)]),
    ("jit array", lambda: ad.jit(lambda x: x * 2), (X3,), [(X3 + 1,)]),
    ("jit 1-tuple", lambda: ad.jit(lambda x: (x * 2,)), (1.0,), [(2.0,)]),
    ("jit empty tuple", lambda: ad.jit(lambda x: ()), (1.0,), [(2.0,)]),
    ("jit empty list", lambda: ad.jit(lambda x: []), (1.0,), [(2.0,)]),
    ("jit constant", lambda: ad.jit(lambda x: 0), (1.0,), [(2.0,)]),
    (
        "jit nested tuples and lists",
        lambda: ad.jit(lambda x, y: ((x, (y,)), [[y * 2], (np.sum(x * y),)])),
        (X3, 2.0),
        [(X3 + 1, 4.0), (X3[:2], 1.0)],
    ),
    (
        "jit 2-D and empty outputs",
        lambda: ad.jit(lambda x: (np.outer(x, x), x[:0], np.zeros((0, 3)) * x[0], x[:1])),
        (X3,),
        [(X3 - 2,)],
    ),
    ("jit identity", lambda: ad.jit(lambda x: x), (X3,), [(X3 + 1,)]),
    ("jit zero arguments", lambda: ad.jit(lambda: (1.5, [2.0])), (), [(), (1.0,)]),
    (
        "value_and_grad tuple argnums mixed",
        lambda: ad.value_and_grad(lambda a, x, b: a * np.sum(x * x) * b, argnums=(0, 1, 2)),
        (2.0, X3, 3.0),
        [(1.5, X3 + 1, 2.5), (np.float64(1.5), X3, 2), (1.5, X3.astype(np.float32), 2.5)],
    ),
    (
        "grad argnums list with duplicates",
        lambda: ad.grad(lambda x, y: np.sum(x * x) * y, argnums=[1, 0, 1]),
        (X3, 2.0),
        [(X3 + 1, 3.0)],
    ),
    (
        "jacobian 2-D output",
        lambda: ad.jacobian(lambda x: x.reshape(3, 1) * x.reshape(1, 3)),
        (X3,),
        [(X3 + 1,)],
    ),
    (
        "jacobian tuple argnums, list output",
        lambda: ad.jacobian(lambda x, y: [x * y, np.sum(x) * y], argnums=(0, 1)),
        (X3, 2.0),
        [(X3 + 1, 3.0)],
    ),
    (
        "jacobian of a float argument",
        lambda: ad.jacobian(lambda t: np.array([t, t * t, t**3])),
        (2.0,),
        [(3.0,)],
    ),
    ("hessian of a float", lambda: ad.hessian(lambda x: x**4), (2.0,), [(3.0,)]),
    (
        "hessian tuple argnums",
        lambda: ad.hessian(lambda x, y: np.sum(x**2) * y**2, argnums=(0, 1)),
        (X3, 2.0),
        [(X3 + 1, 3.0)],
    ),
    ("hvp of a float", lambda: ad.hvp(lambda x: x**4), (2.0, 1.0), [(3.0, 2.0)]),
    (
        "generated names as parameters",
        lambda: ad.value_and_grad(
            lambda out, s, out_0, g0, r, a0: np.sum(out * s * out_0 * g0 * r * a0),
            argnums=(0, 1, 2, 3, 4, 5),
        ),
        (X3,) * 6,
        [(X3, X3 + 1, X3, X3 - 1, X3, X3)],
    ),
    (
        "slot names as parameters",
        lambda: ad.value_and_grad(lambda v1, v0, b0, t1: v1 * 2.0 + v0 * v0 * b0 * t1, (0, 1)),
        (1.0, 5.0, 2.0, 3.0),
        [(2.0, 7.0, 1.0, -1.0)],
    ),
    (
        "folded value_and_grad, argnums reversed",
        lambda: ad.value_and_grad(chain, argnums=(1, 0)),
        (np.linspace(0.1, 1.0, 60), 2.0),
        [(np.linspace(0.2, 1.3, 60), 3.0), (np.linspace(0.2, 1.3, 61), 3.0)],
    ),
    (
        "folded jit with a tuple output",
        lambda: ad.jit(lambda x, c: (chain(x, c), x * c)),
        (np.linspace(0.1, 1.0, 60), 2.0),
        [(np.linspace(0.2, 1.3, 60), 3.0)],
    ),
    (
        "folded hvp",
        lambda: ad.hvp(chain),
        (np.linspace(0.1, 1.0, 60), np.ones(60), 2.0),
        [(np.linspace(0.2, 1.3, 60), np.linspace(-1, 1, 60), 3.0)],
    ),
]


@pytest.mark.parametrize(
    "make, heating, calls", [c[1:] for c in _CASES], ids=[c[0] for c in _CASES]
)
def test_hot_transforms_answer_as_the_general_path(make, heating, calls):
    hot = heat(make(), *heating)
    for args in [heating, *calls]:
        assert_same(outcome(hot, *args), general(make, *args))


def test_arguments_the_direct_entry_does_not_take():
    make = lambda: ad.value_and_grad(lambda x, y: np.sum(x**3) * y, argnums=(0, 1))  # noqa: E731
    hot = heat(make(), X3, 2.0)
    buf = np.zeros(3 * 8 + 1, dtype=np.uint8)
    unaligned = buf[1:].view(np.float64)
    unaligned[:] = [1.0, 2.0, 4.0]
    frozen = X3.copy()
    frozen.flags.writeable = False
    wide = np.zeros(6)
    wide[::2] = X3
    arrays = [
        X3[::-1],
        wide[::2],
        np.asfortranarray(X3),
        frozen,
        np.broadcast_to(2.0, (3,)),
        unaligned,  # (see test_big_endian_array_after_an_unaligned_one)
        X3.astype(np.float32),
        X3.astype(np.int64),
        X3.astype(np.longdouble),
        X3.astype(bool),
        X3.astype(complex),
        list(X3),
        tuple(X3),
        np.ma.masked_array(X3, mask=[0, 1, 0]),
        X3.view(np.ndarray),
        X3[:2],
        X3.reshape(1, 3),
        np.array([]),
        np.array([1.0]),
        np.array(2.0),
        2.0,
        "x",
        None,
    ]
    scalars = [
        3,
        -7,
        2**53 + 1,
        2**64,
        -(2**70),
        np.float64(1.5),
        np.float32(1.5),
        np.float16(1.5),
        np.longdouble(1.5),
        np.int8(3),
        np.uint64(2**64 - 1),
        Fraction(1, 3),
        np.array(2.0),
        np.array([2.0]),
        1j,
        "2",
        None,
        float("nan"),
        -0.0,
        float("inf"),
    ]
    for a in arrays:
        assert_same(outcome(hot, a, 2.0), general(make, a, 2.0))
    for s in scalars:
        assert_same(outcome(hot, X3, s), general(make, X3, s))
    # the hot path still works, and gives the same as before
    assert_same(outcome(hot, X3, 2.0), general(make, X3, 2.0))


def test_calls_with_the_wrong_arguments_fail_as_on_the_general_path():
    def f(x, y):
        return np.sum(x * x) * y

    for make in (
        lambda: ad.grad(f),
        lambda: ad.value_and_grad(f, argnums=(0, 1)),
        lambda: ad.jit(f),
        lambda: ad.hessian(f),
        lambda: ad.jacobian(f, argnums=1),
        lambda: ad.hvp(f),
    ):
        args = (X3, X3, 2.0) if make().mode == "hvp" else (X3, 2.0)
        hot = heat(make(), *args)
        for call_args, kw in [
            ((), {}),
            (args[:1], {}),
            (args + (1.0,), {}),
            (args[:-1], {"y": 2.0}),
            (args, {"y": 3.0}),
            (args, {"z": 3.0}),
            (args[:-1], {"y": "a"}),
            (args[:-1], {"y": [1.0]}),
            ((X3, "s") + args[2:], {}),
            ((X3.reshape(3, 1),) + args[1:], {}),
            ((None,) + args[1:], {}),
        ]:
            assert_same(outcome(hot, *call_args, **kw), general(make, *call_args, **kw))


# ---------------------------------------------------------------- branches, shapes, layouts


def test_branches_flip_after_hot():
    def f(x):
        return x * x if x > 0 else -x * x * x

    make = lambda: ad.grad(f)  # noqa: E731
    g = heat(make(), 1.0)
    for x in (2.0, -2.0, 3.0, float("nan"), 0.0, -0.0, float("inf"), -1.0, 1.0):
        got, want = g(x), make()(x)
        assert_same(got, want)
        assert np.signbit(got) == np.signbit(want)
    assert g(2.0) == 4.0 and g(-2.0) == -12.0

    def h(x):
        return np.sum(x * x) if x[0] > x[1] else np.sum(x**3)

    gh = heat(ad.grad(h), np.array([2.0, 1.0]))
    for x in ([3.0, 1.0], [1.0, 3.0], [np.nan, 3.0], [5.0, -1.0], [-1.0, 5.0]):
        x = np.array(x)
        assert_same(gh(x), ad.grad(h)(x))


def test_branches_of_folded_code_flip_after_hot():
    def f(x):
        s = 0.0
        for i in range(len(x) - 1):
            s = s + (x[i + 1] - x[i]) ** 2
        return s if x[0] > 0 else -2 * s

    vg = heat(ad.value_and_grad(f), np.linspace(0.5, 2.0, 200))
    assert vg.last.compiled.facts.kind == "folded"
    for k in range(6):
        x = np.linspace(0.5, 2.0, 200) * (k + 1) * (1 if k % 2 else -1)
        d = np.diff(x)
        sign = 1.0 if x[0] > 0 else -2.0
        want = np.zeros_like(x)
        want[:-1] -= 2 * d
        want[1:] += 2 * d
        v, g = vg(x)
        assert v == pytest.approx(sign * np.sum(d * d), rel=1e-12)
        np.testing.assert_allclose(g, sign * want, rtol=1e-12)


def test_shape_changes_after_hot():
    vg = heat(ad.value_and_grad(rosen), np.full(4, 0.5))
    rng = np.random.default_rng(1)
    for n in (4, 5, 4, 2, 4, 5, 3, 4):
        x = rng.normal(size=n)
        v, g = vg(x)
        assert v == pytest.approx(rosen(x), rel=1e-13)
        np.testing.assert_allclose(g, rosen_grad(x), rtol=1e-12)
    assert vg.traces == 4
    f = heat(ad.grad(lambda x: np.sum(x * x * x)), np.array([2.0]))
    assert_same(f(np.array([3.0])), np.array([27.0]))
    assert_same(f(3.0), 27.0)  # a float where a length-1 array was taken
    assert_same(f(np.array([3.0])), np.array([27.0]))
    assert_same(f(np.array(3.0)), ad.grad(lambda x: np.sum(x * x * x))(np.array(3.0)))


def test_two_d_arguments_and_layouts():
    make = lambda: ad.value_and_grad(lambda A, b: np.sum(A * A) * b, argnums=(0, 1))  # noqa: E731
    A = np.arange(6.0).reshape(2, 3)
    hot = heat(make(), A, 2.0, direct=False)  # 2-D arguments: the entry, not a direct one
    wide = np.zeros((2, 6))
    wide[:, ::2] = A + 1
    for B in (A + 1, np.asfortranarray(A + 1), wide[:, ::2], (A + 1).T.copy().T, A.T, A[:1]):
        v, (gA, gb) = hot(B, 3.0)
        assert v == pytest.approx(np.sum(B * B) * 3.0, rel=1e-13)
        np.testing.assert_allclose(gA, 2 * B * 3.0, rtol=1e-13)
        assert gA.shape == B.shape and gb == pytest.approx(np.sum(B * B), rel=1e-13)
        assert_same(outcome(hot, B, 3.0), general(make, B, 3.0))


def test_arrays_of_length_zero_and_one():
    vg = heat(
        ad.value_and_grad(lambda x, y: np.sum(x) * y + y * y), np.empty(0), 2.0, direct=False
    )
    assert_same(vg(np.empty(0), 3.0), (9.0, np.empty(0)))
    assert_same(vg(np.ones(1), 3.0), (12.0, np.array([3.0])))
    g = heat(ad.grad(lambda x: x[0] ** 3), np.array([2.0]))
    assert_same(g(np.array([3.0])), np.array([27.0]))
    assert_same(g(np.array([3.0, 1.0])[:1]), np.array([27.0]))
    assert_same(g(np.array([3.0, 1.0])[::2]), np.array([27.0]))


# ---------------------------------------------------------------- nesting, vmap, threads


def test_nested_transforms_and_values_while_tracing():
    g = heat(ad.grad(lambda x: x**3), 2.0)
    assert ad.grad(g)(2.0) == pytest.approx(12.0)  # grad of a hot grad
    assert ad.grad(lambda x: g(x) * x)(2.0) == pytest.approx(36.0)  # d(3x^3)/dx
    vg = heat(ad.value_and_grad(lambda x: np.sum(x**3)), X3)
    outer = ad.grad(lambda x: vg(x)[0] + np.sum(vg(x)[1]))
    np.testing.assert_allclose(outer(X3 + 1), 3 * (X3 + 1) ** 2 + 6 * (X3 + 1), rtol=1e-13)
    j = heat(ad.jit(lambda x: np.sum(x) * 2), X3)
    np.testing.assert_allclose(ad.hessian(lambda x: j(x) ** 2)(X3), np.full((3, 3), 8.0))
    folded = heat(ad.value_and_grad(chain), np.linspace(0.1, 1.0, 60), 2.0)
    x = np.linspace(0.2, 0.9, 60)
    got = ad.grad(lambda x: folded(x, 2.0)[0] * 3.0)(x)
    np.testing.assert_allclose(got, 3.0 * chain_ref(x, 2.0)[1], rtol=1e-12)
    with ad.no_grad():
        assert_same(vg(X3 + 2), (float(np.sum((X3 + 2) ** 3)), 3 * (X3 + 2) ** 2))
    assert g(ad.Value(2.0)).data == pytest.approx(12.0)


def test_vmap_over_a_hot_transform():
    vg = heat(ad.value_and_grad(lambda x: np.sum(x**3)), X3)
    xs = np.stack([X3, X3 + 1, X3 - 2])
    v, g = ad.vmap(vg)(xs)
    np.testing.assert_allclose(v, np.sum(xs**3, axis=1), rtol=1e-13)
    np.testing.assert_allclose(g, 3 * xs**2, rtol=1e-13)
    h = heat(ad.grad(lambda x: x**3 if x > 0 else -x), 2.0)
    ts = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(ad.vmap(h)(ts), [3.0, -1.0, 27.0])
    np.testing.assert_allclose(ad.vmap(lambda x: h(x) * 2)(ts), [6.0, -2.0, 54.0])


@pytest.mark.parametrize("n", [5, 200])  # straight-line code, folded code
def test_threads_call_a_hot_transform_with_different_inputs(n):
    vg = heat(ad.value_and_grad(chain), np.linspace(0.5, 1.5, n), 2.0)
    errors = []

    def run(k):
        rng = np.random.default_rng(k)
        try:
            for i in range(150):
                z = rng.normal(size=n if i % 7 else n + 1)  # sometimes another length
                c = float(k + 1)
                v, g = vg(z, c)
                rv, rg, _ = chain_ref(z, c)
                if not (v == pytest.approx(rv, rel=1e-12) and np.allclose(g, rg, rtol=1e-11)):
                    errors.append((k, i))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---------------------------------------------------------------- data read from outside

W = np.ones(3)
S = 2.0


def _reads_global(x):
    return np.sum(W * x * x) * S


def test_data_read_from_outside_the_arguments_is_read_at_every_call():
    global W, S
    vg = ad.value_and_grad(_reads_global)
    for _ in range(HOT_CALLS + 1):
        vg(X3)
    W[:] = [2.0, 3.0, 4.0]  # changed in place
    assert_same(vg(X3), (float(np.sum(W * X3 * X3) * S), 2 * W * X3 * S))
    old_W, old_S = W, S
    try:
        W, S = np.array([5.0, 6.0, 7.0]), 0.5  # rebound
        assert_same(vg(X3), (float(np.sum(W * X3 * X3) * S), 2 * W * X3 * S))
    finally:
        W, S = old_W, old_S
        W[:] = 1.0

    c = np.ones(3)
    box = [1.0]

    class Holder:
        w = np.ones(3)

    def f(x):
        return np.sum(c * Holder.w * x * x) * box[0]

    vg = ad.value_and_grad(f)
    for _ in range(HOT_CALLS + 1):
        vg(X3)
    c[:] = [2.0, 3.0, 4.0]
    box[0] = 5.0
    Holder.w = np.array([1.0, 0.5, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        assert_same(vg(X3), (float(f(X3)), 2 * c * Holder.w * X3 * box[0]))


# ---------------------------------------------------------------- debug_nans


def test_debug_nans_after_hot():
    make = lambda: ad.value_and_grad(lambda x: ad.log(x) * x)  # noqa: E731
    f = heat(make(), 1.0)
    with ad.debug_nans():
        with pytest.raises(ad.NonFiniteError, match="log") as hot_err:
            f(-1.0)
        assert f(2.0) == pytest.approx((2 * math.log(2.0), math.log(2.0) + 1.0))
    with ad.debug_nans(), pytest.raises(ad.NonFiniteError) as fresh_err:
        make()(-1.0)
    assert str(hot_err.value).split(" at ")[0] == str(fresh_err.value).split(" at ")[0]
    v, g = f(-1.0)  # outside the block: nan, not raised
    assert math.isnan(v) and math.isnan(g)

    fd = ad.grad(lambda x: ad.log(x) * x, debug_nans=True)
    for _ in range(HOT_CALLS + 1):
        fd(1.0)
    assert "a direct entry" not in ad.explain(fd)
    with pytest.raises(ad.NonFiniteError, match="log"):
        fd(-1.0)
    assert fd(2.0) == pytest.approx(math.log(2.0) + 1.0)


# ---------------------------------------------------------------- found by these tests


@pytest.mark.parametrize(
    "make, heating, call",
    [
        (lambda: ad.grad(lambda x: x * x * 3), (1.0,), (True,)),
        (lambda: ad.grad(lambda x: x * x * 3), (1.0,), (np.True_,)),
        (lambda: ad.jit(lambda x, y: x * y), (1.0, 2.0), (2.0, False)),
        (lambda: ad.hvp(lambda x: x**4), (2.0, 1.0), (2.0, True)),
        (
            lambda: ad.jacobian(lambda x, y: x * np.array([1.0, 2.0]) * y),
            (2.0, 1.0),
            (2.0, True),
        ),
    ],
    ids=["grad True", "grad np.True_", "jit False", "hvp True", "jacobian True"],
)
def test_bool_arguments_are_refused_after_hot(make, heating, call):
    want = general(make, *call)
    assert isinstance(want, Err) and want.type is TypeError
    assert_same(outcome(heat(make(), *heating), *call), want)


def test_jvp_bool_tangent_after_hot():
    def k(x, y):
        return x * y + ad.sin(x)

    def m(x, y):
        return x * y + ad.sin(x)

    for _ in range(HOT_CALLS + 1):
        ad.jvp(k, (2.0, 3.0), (1.0, 0.5))
    message = r"argument 2 of {}\(\) has unsupported type 'bool'"
    with pytest.raises(TypeError, match=message.format("m")):  # m: the general path
        ad.jvp(m, (2.0, 3.0), (True, 0.0))
    with pytest.raises(TypeError, match=message.format("k")):
        ad.jvp(k, (2.0, 3.0), (True, 0.0))


@pytest.mark.parametrize(
    "make, heating, call",
    [
        (lambda: ad.grad(lambda x: x**3), (2.0,), (np.ma.masked_array(2.0),)),
        (lambda: ad.grad(lambda x: x**3), (2.0,), (np.ma.masked,)),
        (lambda: ad.grad(lambda x: np.sum(x**3)), (X3,), (np.ma.masked_array(np.ones((3, 1))),)),
    ],
    ids=["0-d masked for a float", "np.ma.masked", "2-D masked for a 1-D array"],
)
def test_masked_arrays_go_to_the_general_path(make, heating, call):
    assert_same(outcome(heat(make(), *heating), *call), general(make, *call))


_FOLDED = """
def F({p}, c):
    acc = 0.0
    for i in range(len({p}) - 1):
        acc = acc + (({p}[i] - math.sqrt(i)) * {p}[i + 1]) ** 2 * c
    return acc
"""


def _folded_named(p):
    ns = {"math": math}
    exec(_FOLDED.format(p=p), ns)
    return ns["F"]


def _folded_ref(x, c):
    a = x[:-1] - np.sqrt(np.arange(len(x) - 1.0))
    r = a * x[1:]
    g = np.zeros_like(x)
    g[:-1] += 2 * r * x[1:] * c
    g[1:] += 2 * r * a * c
    return float(np.sum(r * r) * c), g


@pytest.mark.parametrize(
    "name",
    [
        "x",
        "k",
        "out",
        "work",
        "local",
        "columns",
        "main",
        "s",
        "v",
    ],
)
def test_folded_code_whose_argument_has_a_generated_name(name):
    vg = heat(ad.value_and_grad(_folded_named(name)), np.linspace(0.0, 1.0, 50), 2.0)
    assert vg.last.compiled.facts.kind == "folded"
    x = np.linspace(0.5, 1.7, 50)
    v, g = vg(x, 3.0)
    rv, rg = _folded_ref(x, 3.0)
    assert v == pytest.approx(rv, rel=1e-12)
    np.testing.assert_allclose(g, rg, rtol=1e-11)


@pytest.mark.parametrize("name", ["main", "s"])
def test_folded_code_named_main_or_s_heats_without_warning(name, monkeypatch):
    monkeypatch.delenv("ADCOMPILE_STRICT", raising=False)
    vg = ad.value_and_grad(_folded_named(name))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        heat(vg, np.linspace(0.0, 1.0, 50), 2.0)


def test_a_copy_of_a_transform_outlives_the_original():
    t = ad.grad(lambda x: x**3)
    t(2.0)
    t2 = copy.copy(t)
    del t
    gc.collect()
    assert t2(3.0) == 27.0  # taken by the entry
    assert t2(3) == 27.0  # an int: left to the general path


def test_big_endian_array_after_an_unaligned_one():
    make = lambda: ad.grad(lambda x: np.sum(x**3))  # noqa: E731
    g = heat(make(), X3)
    buf = np.zeros(3 * 8 + 1, dtype=np.uint8)
    unaligned = buf[1:].view(np.float64)
    unaligned[:] = X3
    np.testing.assert_allclose(g(unaligned), 3 * X3**2, rtol=1e-13)
    big = X3.astype(">f8")
    assert_same(outcome(g, big), general(make, big))
    np.testing.assert_allclose(g(big), 3 * X3**2, rtol=1e-13)


def test_arguments_named_like_builtins_the_generated_code_uses():
    # folded code loops with range(); the arguments are renamed there (range_, len_)
    ns: dict = {}
    exec(
        "def f(range, len):\n"
        "    s = 0.0\n"
        "    for i in [0, 1, 2, 3, 4, 5, 6, 7, 8] * 30:\n"
        "        s = s + (range[i + 1] - range[i]) ** 2 * len\n"
        "    return s\n",
        ns,
    )
    vg = ad.value_and_grad(ns["f"], argnums=(0, 1))
    x = np.linspace(0.0, 1.0, 10) ** 2
    d = np.diff(x)
    g = np.zeros_like(x)
    g[:-1] -= 2 * d
    g[1:] += 2 * d
    heat(vg, x, 2.0)
    value, (gx, gc) = vg(x, 2.0)
    assert value == pytest.approx(60 * np.sum(d**2), rel=1e-12)
    np.testing.assert_allclose(gx, 60 * g, rtol=1e-12)
    assert gc == pytest.approx(30 * np.sum(d**2), rel=1e-12)


def test_folded_code_is_hot_ready_by_its_statements_not_its_lines(monkeypatch):
    # issue 29: the size limit for a direct entry of folded code is the number of
    # statements the generator printed (CodeFacts), not a count of source lines
    import ast

    from adcompile.backend import entries

    def f(x):
        s = 0.0
        for i in range(30):
            s = s + ad.tanh(x[i % 3] * x[(i + 1) % 3] + 0.1 * i)
        return s

    vg = ad.value_and_grad(f)
    x = np.array([0.1, 0.2, 0.3])
    vg(x)
    spec, key = vg.spec_for((x,))
    n = sum(
        isinstance(s, ast.Assign) and isinstance(s.value, (ast.BinOp, ast.Call, ast.UnaryOp))
        for s in ast.walk(ast.parse(spec.compiled.source))
    )
    assert spec.compiled.facts.kind == "folded" and vg.facts.statements == n
    monkeypatch.setattr(entries, "HOT_FOLDED_STATEMENTS", n)
    assert entries.hot_ready(spec, key)
    monkeypatch.setattr(spec.compiled, "source", spec.compiled.source + "#\n" * 1000)
    assert entries.hot_ready(spec, key)  # (comments and blank lines do not count)
    monkeypatch.setattr(entries, "HOT_FOLDED_STATEMENTS", n - 1)
    assert not entries.hot_ready(spec, key)
    assert not entries.hot_ready(spec, ((3, 1),))  # 2-D arrays: no direct entry
