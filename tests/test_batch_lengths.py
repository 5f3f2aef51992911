"""Batch-generic code and the batch length: branches on ``len()``, shapes, slices.

Batch-generic code is traced at a few small lengths (8, 9, 11): a loss that
branches on its length, or slices its data, looks there like one that does
not. Every answer here is checked against the loss run on float NumPy arrays
(on Values that record nothing, for losses written with Value methods) and
against central differences, at the first point, at fresh points of the same
length, and at lengths on both sides of each threshold.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import central_diff

import adcompile as ad


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setenv("ADCOMPILE_QUIET", "1")


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)


ZERO = np.zeros(3)
THETA = np.array([0.3, -0.8, 0.5])
OTHER = np.array([-0.6, 0.2, 0.9])


def smooth(theta, X, y):
    return np.mean(np.log1p(np.exp(-y * (X @ theta))))


def check(vg, f, theta, X, y):
    """``vg(theta, X, y)`` against ``f`` on floats and central differences of it."""
    value, g = vg(theta, X, y)
    assert value == pytest.approx(f(theta, X, y), rel=1e-10, abs=1e-13)
    fd = [central_diff(lambda t: f(t, X, y), theta, e) for e in np.eye(len(theta))]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


def run(vg, f, calls):
    for n, theta in calls:
        X, y = data(n, seed=n)
        check(vg, f, theta, X, y)


def around(threshold):
    """The first call at 64 and theta = 0, a fresh point there, then lengths on
    both sides of ``threshold`` (the first length that takes the branch)."""
    return [(64, ZERO), (64, THETA), (40, OTHER), (threshold, THETA), (threshold - 1, OTHER)]


def ge16(theta, X, y):
    r = smooth(theta, X, y)
    if len(y) >= 16:
        r = r + 0.5 * np.sum(theta**2)
    return r


def gt12(theta, X, y):
    r = smooth(theta, X, y)
    if len(y) > 12:
        r = r + 0.5 * np.sum(theta**2)
    return r


def eq64(theta, X, y):
    r = smooth(theta, X, y)
    if len(y) == 64:
        r = r + 0.5 * np.sum(theta**2)
    return r


def shape16(theta, X, y):
    r = smooth(theta, X, y)
    if X.shape[0] >= 16:
        r = r + 0.5 * np.sum(theta**2)
    return r


def named12(theta, X, y):
    n = len(y)
    r = smooth(theta, X, y)
    if n > 12:
        r = r + 0.5 * np.sum(theta**2)
    return r


def half12(theta, X, y):
    r = smooth(theta, X, y)
    if len(y) // 2 > 6:  # arithmetic on the length first
        r = r + 0.5 * np.sum(theta**2)
    return r


def float20(theta, X, y):
    r = smooth(theta, X, y)
    if 1.0 / len(y) < 0.05:  # n > 20, by float arithmetic the guards do not see
        r = r + 0.5 * np.sum(theta**2)
    return r


def row12(theta, X, y):
    r = smooth(theta, X, y)
    for i in range(len(y)):
        if i >= 12:  # a row index against a constant: also not seen by the guards
            r = r + 0.01 * (theta[0] * X[i, 0]) ** 2
    return r


@pytest.mark.parametrize(
    "f, calls",
    [
        (ge16, around(16)),
        (gt12, around(13)),
        (eq64, [(64, ZERO), (64, THETA), (40, OTHER), (100, THETA), (65, OTHER)]),
        (shape16, around(16)),
        (named12, around(13)),
        (half12, around(14)),
        (float20, [(64, ZERO), (64, THETA), (30, OTHER), (20, THETA), (17, OTHER)]),
        (row12, [(64, ZERO), (64, THETA), (30, OTHER), (12, THETA)]),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_a_branch_on_the_batch_length_is_answered_as_python_does(f, calls):
    run(ad.value_and_grad(f), f, calls)


def head12(theta, X, y):
    X, y = X[:12], y[:12]
    return smooth(theta, X, y)


def test_slicing_the_data_inside_the_loss():
    run(ad.value_and_grad(head12), head12, around(13))


# ---------------------------------------------------------------- Value methods


def with_values(f):
    """``f`` run on Values that record nothing: its value as a float."""

    def plain(theta, X, y):
        args = (ad.tensor(a, requires_grad=False) for a in (theta, X, y))
        with ad.no_grad():
            return f(*args).data

    return plain


def micro_len(w, X, y):
    total = sum(
        ((w[0] * xi[0] + w[1] * xi[1] + w[2] * xi[2]).tanh() - yi) ** 2 for xi, yi in zip(X, y)
    )
    total = total / len(y)
    if len(y) > 12:
        total = total + 0.5 * (w[0] * w[0] + w[1] * w[1] + w[2] * w[2])
    return total


def micro_float(w, X, y):
    total = sum(
        ((w[0] * xi[0] + w[1] * xi[1] + w[2] * xi[2]).tanh() - yi) ** 2 for xi, yi in zip(X, y)
    )
    total = total / len(y)
    if 1.0 / len(y) < 0.05:  # not seen by the guards: the check on Values finds it
        total = total + 0.5 * (w[0] * w[0] + w[1] * w[1] + w[2] * w[2])
    return total


@pytest.mark.parametrize("f", [micro_len, micro_float], ids=lambda f: f.__name__)
def test_a_loss_written_with_value_methods(f):
    calls = [(64, ZERO), (64, THETA), (40, OTHER), (30, THETA), (12, OTHER), (10, THETA)]
    run(ad.value_and_grad(f), with_values(f), calls)


def test_compile_loss_with_parameters_starting_at_zero():
    params = [ad.Value(0.0) for _ in range(3)]

    def loss_fn(X, y):
        losses = [
            ((params[0] * xi[0] + params[1] * xi[1] + params[2] * xi[2]).tanh() - yi) ** 2
            for xi, yi in zip(X, y)
        ]
        total = sum(losses) * (1.0 / len(y))
        if len(y) >= 16:
            total = total + 0.5 * sum(p * p for p in params)
        return total

    def plain(theta, X, y):
        saved = [p.data for p in params]
        for p, t in zip(params, theta):
            p.data = float(t)
        try:
            with ad.no_grad():
                return loss_fn(X, y).data
        finally:
            for p, t in zip(params, saved):
                p.data = t

    step = ad.compile_loss(loss_fn, params)
    for n, theta in [(64, ZERO), (64, THETA), (64, OTHER), (40, THETA), (100, OTHER), (10, THETA)]:
        for p, t in zip(params, theta):
            p.data = float(t)
        X, y = data(n, seed=n)
        value, g = step.value_and_grad(X, y)
        assert value == pytest.approx(plain(theta, X, y), rel=1e-10, abs=1e-13)
        fd = [central_diff(lambda t: plain(t, X, y), theta, e) for e in np.eye(3)]
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)
        assert [p.data for p in params] == list(theta)  # (the checks put them back)


# ---------------------------------------------------------------- still generic


def mean_numpy(theta, X, y):
    assert len(X) == len(y) and X.shape[1] == 3  # comparisons true at every length
    return smooth(theta, X, y) + 0.01 * np.sum(theta**2)


def mean_values(w, X, y):
    return sum(
        ((w[0] * xi[0] + w[1] * xi[1] + w[2] * xi[2]).tanh() - yi) ** 2 for xi, yi in zip(X, y)
    ) / len(X)


def loop_rows(w, X, y):
    total = 0.0
    for i in range(len(y)):
        total = total + ad.log(1 + ad.exp(-y[i] * (w[0] * X[i, 0] + w[1] * X[i, 1] + w[2])))
    return total / len(y) + 0.5 * (w[0] * w[0])


def tail5(theta, X, y):  # the last five rows: the same program at every length above 5
    return smooth(theta, X, y) + np.sum((X[-5:] @ theta) ** 2)


def big_threshold(theta, X, y):  # a branch that every length here takes alike
    r = smooth(theta, X, y)
    if len(y) > 1000:
        r = r + np.sum(theta**2)
    return r


@pytest.mark.parametrize(
    "f, plain",
    [
        (mean_numpy, mean_numpy),
        (mean_values, with_values(mean_values)),
        (loop_rows, with_values(loop_rows)),
        (tail5, tail5),
        (big_threshold, big_threshold),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_losses_that_do_not_branch_on_the_length_stay_generic(f, plain):
    vg = ad.value_and_grad(f)
    run(vg, plain, [(64, ZERO), (64, THETA), (100, OTHER), (40, THETA), (17, OTHER)])
    assert vg.traces == 1
    assert _generic(vg.source)
    assert "batch length 100 served by the code generic in the batch length" in ad.explain(vg)


def _generic(source: str) -> bool:
    """Whether ``source`` is one program in the batch length: folded loops, or (for
    arrays of 256 numbers and more) array code."""
    return "Generic in the batch length n" in source or "_value_and_grad(n, theta" in source


def test_code_for_the_lengths_the_branch_does_not_take():
    """``len(y) == 64``, first called at 64: 64 is traced as it is, and the lengths
    that take the other branch share one generic program."""
    vg = ad.value_and_grad(eq64)
    run(vg, eq64, [(64, ZERO), (64, THETA)])
    assert vg.traces == 2  # the small traces saw the branch, then 64 on its own
    run(vg, eq64, [(40, THETA), (100, OTHER), (17, THETA), (64, OTHER)])
    assert vg.traces == 3  # one generic program for 40, 100 and 17
    assert _generic(vg.code_for(THETA, *data(40)))


def test_slices_of_the_batch_are_guarded_like_python_clips_them():
    """``lengths``: the length of ``range(m)[s]`` as a function of the batch length
    is right at every length whose guards answer as at m (and only there is it used)."""
    from adcompile.trace import lengths

    bounds = [None, -13, -12, -11, -5, -1, 0, 1, 3, 11, 12, 13, 20]
    for step in (None, 1, -1):
        for a in bounds:
            for b in bounds:
                s = slice(a, b, step)
                for m in (8, 9, 11, 12):
                    rec = lengths.Recorder([])
                    with lengths.recording(rec):
                        expr = lengths._sliced(lengths.LenInt(m), s)
                    for n in range(30):
                        if lengths.holds(rec.guards, n):
                            assert expr(n) == len(range(n)[s]), (s, m, n)
                    assert lengths.holds(rec.guards, m)


def _by_position(kind):
    """Losses that weigh the rows from the 13th on otherwise, written four ways."""

    def enumerated(w, X, y):
        s = 0.0
        for i, (xi, yi) in enumerate(zip(X, y)):
            c = 1.0 if i < 12 else 0.5
            s = s + c * yi * ad.tanh(xi[0] * w[0] + xi[1] * w[1])
        return s / len(X)

    def ranged(w, X, y):
        s = 0.0
        for i in range(len(X)):
            s = s + (1.0 if i < 12 else 0.5) * y[i] * ad.tanh(X[i, 0] * w[0] + X[i, 1] * w[1])
        return s / len(X)

    def sliced(w, X, y):
        terms = [yi * ad.tanh(xi[0] * w[0] + xi[1] * w[1]) for xi, yi in zip(X, y)]
        return (sum(terms[:12]) + 0.5 * sum(terms[12:])) / len(X)

    def masked(w, X, y):
        c = np.where(np.arange(len(X)) < 12, 1.0, 0.5)
        return np.sum(c * y * np.tanh(X[:, 0] * w[0] + X[:, 1] * w[1])) / len(X)

    return {"enumerated": enumerated, "ranged": ranged, "sliced": sliced, "masked": masked}[kind]


@pytest.mark.parametrize("kind", ["enumerated", "ranged", "sliced", "masked"])
def test_rows_weighed_by_position_where_the_first_batch_has_zeros_there(kind):
    """A test on a row's position (``i < 12``) is no guard on the length, and the
    lengths traced (8, 9, 11) never reach row 12: the first answer at length 40 is
    checked against ``f``, and with the rows from 12 on zero there (padding) it
    agreed. It is checked at data moved off the call's point too."""
    f = _by_position(kind)
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(40, 2)), rng.normal(size=40)
    padded = y.copy()
    padded[12:] = 0.0
    w = np.array([0.3, -0.2])
    vg = ad.value_and_grad(f)
    for targets in (padded, y, rng.normal(size=40)):
        value, g = vg(w, X, targets)
        assert value == pytest.approx(f(w, X, targets), rel=1e-12)
        fd = [central_diff(lambda v, t=targets: f(v, X, t), w, e) for e in np.eye(2)]
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


def test_compile_loss_rows_weighed_by_position_where_the_first_batch_has_zeros_there():
    rng = np.random.default_rng(0)
    model = ad.MLP(2, [4, 1])

    def loss_fn(X, y, weight):
        s = 0.0
        for i, (xi, yi) in enumerate(zip(X, y)):
            s = s + (1.0 if i < 12 else 0.5) * weight[i] * (model(xi) - yi) ** 2
        return s / len(X)

    X, y = rng.normal(size=(40, 2)), rng.normal(size=40)
    padded = np.ones(40)
    padded[12:] = 0.0
    step = ad.compile_loss(loss_fn, model.parameters())
    for weight in (padded, np.ones(40)):
        model.zero_grad()
        loss = step(X, y, weight)
        loss.backward()
        got = [p.grad for p in model.parameters()]
        model.zero_grad()
        ref = loss_fn(X, y, weight)  # eager, as micrograd
        ref.backward()
        assert loss.data == pytest.approx(ref.data, rel=1e-12)
        assert got == pytest.approx([p.grad for p in model.parameters()], rel=1e-9, abs=1e-14)


def _hinge_by_position(w, X, y):
    tot = 0.0
    for i in range(len(X)):
        c = 1.0 if i < 12 else 2.0  # rows past 11 count double
        tot = tot + c * ad.relu(1 - y[i] * (w[0] * X[i, 0] + w[1] * X[i, 1] + w[2]))
    return tot / len(X)


def _guarded_by_position(w, X, y):
    s = 1.0 if w[0] >= 0.5 else 1.5  # (a point moved off w[0] = 0.5 may take the other side)
    tot = 0.0
    for i in range(len(X)):
        c = 1.0 if i < 12 else 3.0
        tot = tot + c * y[i] * (w[0] * X[i, 0] + w[1] * X[i, 1]) ** 2
    return s * tot / len(X)


@pytest.mark.parametrize("f", [_hinge_by_position, _guarded_by_position])
def test_rows_weighed_by_position_hidden_where_they_are_at_the_first_call(f):
    """The first batch at length 20 hides the rows from 12 on: a hinge inactive
    there (moved a little, still inactive), or rows of zeros where the moved point
    takes another branch. The rows in reverse order show them."""
    rng = np.random.default_rng(1)
    w = np.array([0.5, 0.7, 0.0])
    X, y = rng.normal(size=(20, 2)), np.sign(rng.normal(size=20))
    if f is _hinge_by_position:
        X[12:], y[12:] = 5.0, 1.0  # margin 5: relu is 0 there
    else:
        X[12:] = 0.0
    vg = ad.value_and_grad(f)
    for point in (w, w + [0.1, 0.0, 0.0]):
        value, g = vg(point, X, y)
        assert value == pytest.approx(f(point, X, y), rel=1e-12)
        X, y = rng.normal(size=(20, 2)) * 0.3, np.sign(rng.normal(size=20))  # then others
    w = w + [0.1, 0.0, 0.0]  # (off the guard's edge: central differences hold)
    value, g = vg(w, X, y)
    assert value == pytest.approx(f(w, X, y), rel=1e-12)
    fd = [central_diff(lambda v: f(v, X, y), w, e) for e in np.eye(3)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
