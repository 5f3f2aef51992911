"""A transform called inside another one's trace, on a function that closes over a
Value of that trace: the result records on the Value, so the outer derivative sees
it (JAX's nested transforms). Each is held against the hand-derived derivative and
central differences, at several points."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

import adcompile as ad
from adcompile import Value

#: Check mode runs f eagerly on Values, where no trace is active: an inner transform
#: there takes the Value it closes over as the number it holds (as for a model's
#: parameters read by a transform called on numbers), so eager and compiled differ.
#: And eagerly, NumPy's float array from np.zeros takes no Value.
EAGER_DIFFERS = pytest.mark.skipif(
    os.environ.get("ADCOMPILE_CHECK", "") not in ("", "0"),
    reason="check mode: its eager run of f has no outer trace, or writes Values into "
    "a float array (see EAGER_DIFFERS)",
)


def central(f, x: float, h: float = 1e-6) -> float:  # noqa: ANN001
    return (f(x + h) - f(x - h)) / (2 * h)


def plain_outer(y: float) -> float:  # d/dx of x**2 * y at 3, times y: 6 y**2
    return 6.0 * y * y


CASES = [
    # (outer function, plain Python of the same value, its derivative by hand)
    (lambda y: ad.grad(lambda x: x**2 * y)(3.0) * y, plain_outer, lambda y: 12.0 * y),
    (
        lambda w: ad.grad(lambda x: ad.sin(w * x))(1.0),
        lambda w: w * math.cos(w),
        lambda w: math.cos(w) - w * math.sin(w),
    ),
    (lambda y: ad.jit(lambda x: x * y)(3.0), lambda y: 3.0 * y, lambda y: 3.0),
    (
        lambda y: ad.jvp(lambda x: x * y * x, (1.5,), (1.0,))[1],
        lambda y: 3.0 * y,
        lambda y: 3.0,
    ),
    (
        lambda y: ad.value_and_grad(lambda x: x**3 * y)(2.0)[0],
        lambda y: 8.0 * y,
        lambda y: 8.0,
    ),
    (
        lambda y: ad.jacobian(lambda x: x * y)(np.ones(2)).sum(),
        lambda y: 2.0 * y,
        lambda y: 2.0,
    ),
    (
        lambda y: ad.hvp(lambda x: np.sum(x**3) * y)(np.ones(2), np.ones(2)).sum(),
        lambda y: 12.0 * y,
        lambda y: 12.0,
    ),
    (
        lambda y: np.sum(ad.vmap(lambda x: x * y * y)(np.arange(3.0))),
        lambda y: 3.0 * y * y,
        lambda y: 6.0 * y,
    ),
]


@EAGER_DIFFERS
@pytest.mark.parametrize("k", range(len(CASES)))
def test_inner_transforms_closing_over_traced_values(k: int) -> None:
    outer, plain, by_hand = CASES[k]
    g = ad.grad(outer)
    vg = ad.value_and_grad(outer)
    for y in (2.0, 0.7, -1.3):
        assert g(y) == pytest.approx(by_hand(y), rel=1e-9, abs=1e-12)
        assert g(y) == pytest.approx(central(plain, y), rel=1e-6, abs=1e-8)
        v, d = vg(y)
        assert v == pytest.approx(plain(y), rel=1e-12)
        assert d == pytest.approx(by_hand(y), rel=1e-9, abs=1e-12)


@EAGER_DIFFERS
def test_inner_transform_on_a_traced_data() -> None:
    """A traced Value's .data handed to an inner transform stands for the Value."""
    g = ad.grad(lambda y: ad.grad(lambda x: x * x * 2.0)(y.data) * y)
    for y in (1.0, 2.5):
        assert g(y) == pytest.approx(8.0 * y)  # d/dy of 4 y * y


def test_a_value_assigned_as_an_outside_values_data_is_refused_by_name() -> None:
    w = Value(1.0)

    def f(t, x):  # noqa: ANN001, ANN202
        w.data = t
        return w * x

    with pytest.raises(TypeError, match=r"assigned the \.data of a Value made outside"):
        ad.grad(f)(2.0, 3.0)
    assert w.data == 1.0


def test_no_random_draw_is_blamed_on_compiling_inside_a_trace(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Compiling inside a trace (an inner transform's first call) names temporary
    files and Numba's locks with Python's random module: no draw of the function's."""
    import tempfile

    from adcompile.trace import randomness

    monkeypatch.setattr(tempfile, "_name_sequence", None)  # (a new one asks for entropy)
    watch = randomness.Watch()
    tempfile.mkstemp(dir=tmp_path)
    watch.check("f")  # (no RandomDrawError)
    import random

    watch = randomness.Watch()
    random.Random()
    with pytest.raises(randomness.RandomDrawError, match="seeded from the operating system"):
        watch.check("f")


# ---------------------------------------------------------------- compile_loss's Values


def _eager(w: float, b: float, x: float) -> tuple[float, float, float]:
    """micrograd's answer: the loss, dL/dw, dL/db of (w x + b)**2."""
    wv, bv = Value(w), Value(b)
    loss = (wv * x + bv) ** 2
    loss.backward()
    return loss.data, wv.grad, bv.grad


def test_compile_loss_gives_a_gradient_to_other_leaves_the_loss_reads() -> None:
    """A Value the loss reads from a global, not listed as a parameter, gets its
    gradient from backward(), as micrograd's backward gives it one."""
    w, b = Value(2.0), Value(0.5)
    step = ad.compile_loss(lambda x: (w * x[0] + b) ** 2, [w])
    for x, bb in ((1.0, 0.5), (2.0, 1.5), (-0.5, -2.0)):
        b.data = bb
        w.grad = b.grad = 0.0
        loss = step(np.array([x]))
        loss.backward()
        want = _eager(w.data, bb, x)
        assert (loss.data, w.grad, b.grad) == pytest.approx(want, rel=1e-12)


def test_compile_loss_with_a_parameter_listed_twice_adds_its_gradient_once() -> None:
    w, b = Value(2.0), Value(0.5)
    step = ad.compile_loss(lambda x: (w * x[0] + b) ** 2, [w, w, b])
    for x in (1.0, 3.0):
        w.grad = b.grad = 0.0
        step(np.array([x])).backward()
        loss, gw, gb = _eager(w.data, b.data, x)
        assert (w.grad, b.grad) == pytest.approx((gw, gb), rel=1e-12)
        value, grads = step.value_and_grad(np.array([x]))
        assert value == pytest.approx(loss, rel=1e-12)
        np.testing.assert_allclose(grads, [gw, gw, gb], rtol=1e-12)


# ---------------------------------------------------------------- arrays made in f


def recurrence(x):  # noqa: ANN001, ANN201
    z = np.zeros(len(x))
    for i in range(1, len(x)):
        z[i] = z[i - 1] * 0.5 + x[i]
    w = np.full(2, 3.0)
    w[1] = z[-1]
    return np.sum(z**2) + w[0] * w[1]


@EAGER_DIFFERS
@pytest.mark.parametrize("n", [3, 10, 20, 300])
def test_a_recurrence_written_into_np_zeros(n: int) -> None:
    """Traced element by element (small n, or a loop over elements), an array made
    with np.zeros holds Values: the recurrence is NumPy's, value and gradient."""
    rng = np.random.default_rng(n)
    vg = ad.value_and_grad(recurrence)
    for _ in range(2):
        x = rng.normal(size=n)
        v, g = vg(x)
        assert v == pytest.approx(recurrence(x), rel=1e-12)
        d = rng.normal(size=n)
        fd = (recurrence(x + 1e-6 * d) - recurrence(x - 1e-6 * d)) / 2e-6
        assert float(g @ d) == pytest.approx(fd, rel=1e-6, abs=1e-8)


# ---------------------------------------------------------------- the fourth probe


@EAGER_DIFFERS
def test_nested_transforms_of_transforms_closing_over_a_traced_value() -> None:
    """grad of grad inside grad, closing over x: the inner traces put back the outer
    trace's traced .data of x as it was (they put back its float, which the outer
    trace took for an assignment)."""
    g = ad.grad(lambda x: ad.grad(ad.grad(lambda y: ad.sin(y) * x))(x))
    for x in (0.3, -1.2):
        assert g(x) == pytest.approx(-math.sin(x) - x * math.cos(x), rel=1e-12)
    ga = ad.grad(lambda x: np.sum(ad.grad(lambda w: np.sum(w * w * x))(x)))
    x = np.linspace(-1.0, 1.0, 5)
    np.testing.assert_allclose(ga(x), 4 * x, rtol=1e-12)  # d/dx of sum(2 x**2)


def test_an_inner_transform_compiled_first_inside_a_trace(monkeypatch, tmp_path) -> None:  # noqa: ANN001
    """Numba's cache names its files with uuid4 (the OS's randomness): compiling the
    inner transform for the first time inside the outer trace is no draw of f's."""
    from conftest import fresh_loader

    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path / "cache"))
    fresh_loader(monkeypatch)
    inner = ad.jit(lambda y: ad.exp(y) * y * 1.25)
    g = ad.grad(lambda x: x * inner(0.5))
    assert g(0.3) == pytest.approx(0.5 * math.exp(0.5) * 1.25, rel=1e-14)


@EAGER_DIFFERS
def test_np_zeros_with_a_static_or_keyword_argument() -> None:
    """Written into when traced element by element, under a variant of the transform
    (static_argnums, keywords): the user's module is found through adcompile's wrappers."""

    def f(x, n):  # noqa: ANN001, ANN202
        z = np.zeros(n)
        z[0] = x[0]
        z[1:] += x[1:n] * 2.0
        for i in range(1, n):
            z[i] = z[i] + 0.5 * z[i - 1]
        return np.sum(z**2)

    rng = np.random.default_rng(4)
    for grad in (ad.grad(f, static_argnums=1), lambda x, n: ad.grad(f)(x, n=n)):
        for n in (3, 5):
            x = rng.normal(size=n)
            d = rng.normal(size=n)
            fd = (f(x + 1e-6 * d, n) - f(x - 1e-6 * d, n)) / 2e-6
            assert float(grad(x, n) @ d) == pytest.approx(fd, rel=1e-6, abs=1e-8)
