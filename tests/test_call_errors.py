"""Calls of transformed functions: keyword arguments, and the messages of bad calls.

(Issue 21, item 2: each message is checked for its words, not merely raised.)
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import adcompile as ad


def test_keyword_arguments_are_inputs_not_differentiated():
    def f(x, k=2.0):
        return x * x * k

    g = ad.grad(f)
    assert g(1.5, k=3.0) == pytest.approx(2 * 1.5 * 3.0)
    assert g(1.5, k=5.0) == pytest.approx(2 * 1.5 * 5.0)  # a number: no new trace
    assert g(1.5) == pytest.approx(2 * 1.5 * 2.0)
    vg = ad.value_and_grad(f)
    assert vg(2.0, k=0.5) == pytest.approx((2.0, 2.0))
    assert [v.traces for v in vg._variants.values()] == [1]


def test_keyword_array_and_static_keyword():
    def f(w, X=None, mode="l2"):
        r = X @ w
        return np.sum(r * r) if mode == "l2" else np.sum(np.abs(r))

    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 3))
    w = rng.normal(size=3)
    g = ad.grad(f)
    np.testing.assert_allclose(g(w, X=X), 2 * X.T @ (X @ w), rtol=1e-12)
    np.testing.assert_allclose(g(w, X=X, mode="l1"), X.T @ np.sign(X @ w), rtol=1e-12)
    X2 = rng.normal(size=(6, 3))
    np.testing.assert_allclose(g(w, X=X2), 2 * X2.T @ (X2 @ w), rtol=1e-12)


def test_unhashable_keyword_is_refused_with_the_way_out():
    g = ad.grad(lambda x, opts=None: x * 2.0)
    with pytest.raises(TypeError, match=r"keyword argument opts= of .* is a dict; pass a number"):
        g(1.0, opts={"a": 1})


@pytest.mark.parametrize("argnums", ["x", 1.5, (0, "y"), True])
def test_argnums_of_the_wrong_type(argnums):
    with pytest.raises(TypeError, match="argnums must be an int or a tuple of ints"):
        ad.grad(lambda x, y: x * y, argnums=argnums)


def test_argnums_out_of_range_names_the_call():
    with pytest.raises(ValueError, match=r"argnums=3 does not fit f\(\) called with 2"):

        def f(x, y):
            return x * y

        ad.grad(f, argnums=3)(1.0, 2.0)


def test_compile_loss_step_names_the_users_argument():
    model = ad.nn.MLP(2, [1])
    step = ad.compile_loss(lambda X: model(list(X[0])) ** 2, model.parameters())
    with pytest.raises(TypeError, match=r"argument 0 of lambda\(\) has unsupported type 'str'"):
        step("abc")


def test_retrace_warning_points_at_the_users_call(monkeypatch):
    monkeypatch.setattr(ad.api.specialisation, "MAX_SPECIALISATIONS", 2)
    g = ad.grad(lambda x: np.sum(x * x))
    with pytest.warns(ad.RetraceWarning, match="has been traced 3 times") as record:
        for n in range(1, 5):
            g(np.ones(n))
    assert record[0].filename == __file__


def _slow_square(x):
    time.sleep(0.3)  # (runs while tracing: a compile that takes a while)
    return x * x


def test_a_long_compile_says_so_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(ad.api.events, "ANNOUNCE_AFTER", 0.05)
    monkeypatch.delenv("ADCOMPILE_QUIET", raising=False)
    g = ad.grad(_slow_square)
    assert g(3.0) == 6.0
    err = capsys.readouterr().err
    assert "adcompile: tracing and compiling slow_square_value_and_grad" in err
    assert "ADCOMPILE_QUIET=1 silences this" in err
    assert "adcompile: compiled slow_square_value_and_grad in" in err
    assert "(Straight-line code)" in err
    assert g(4.0) == 8.0  # compiled already: nothing more to say
    assert capsys.readouterr().err == ""


def test_adcompile_quiet_silences_the_compile_message(monkeypatch, capsys):
    monkeypatch.setattr(ad.api.events, "ANNOUNCE_AFTER", 0.05)
    monkeypatch.setenv("ADCOMPILE_QUIET", "1")
    assert ad.grad(_slow_square)(3.0) == 6.0
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- the fast call path


def _rosen(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def _rosen_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def test_fast_path_leaves_other_branches_and_nans_to_the_general_path():
    def f(x, y):
        return x * y if x > 0 else ad.log(y) - x

    g = ad.grad(f, argnums=(0, 1))
    assert g(2.0, 3.0) == pytest.approx((3.0, 2.0))
    assert g(2.5, 4.0) == pytest.approx((4.0, 2.5))  # the fast path
    assert g(-1.0, 4.0) == pytest.approx((-1.0, 0.25))  # another branch
    assert g(-2.0, 2.0) == pytest.approx((-1.0, 0.5))
    assert g(3.0, 5.0) == pytest.approx((5.0, 3.0))
    with ad.debug_nans(), pytest.raises(ad.NonFiniteError, match="log"):
        g(-1.0, -4.0)
    assert g(-1.0, -4.0) == pytest.approx((-1.0, -0.25))  # outside: log(-4) is nan, unraised


def test_fast_path_for_jit_grad_and_matrices():
    A = np.arange(6.0).reshape(2, 3)
    f = ad.jit(lambda a: np.sum(a * a))
    assert f(A) == pytest.approx(55.0) and f(A + 1) == pytest.approx(np.sum((A + 1) ** 2))
    g = ad.grad(lambda a: np.sum(a * a))
    np.testing.assert_allclose(g(A), 2 * A)
    np.testing.assert_allclose(g(A - 1), 2 * (A - 1))
    assert g(A - 1).shape == (2, 3)


def test_fast_path_in_another_thread():
    import threading

    vg = ad.value_and_grad(_rosen)
    x = np.linspace(-1, 1, 300)
    vg(x)
    got = {}
    t = threading.Thread(target=lambda: got.update(r=vg(x + 0.5)))
    t.start()
    t.join()
    np.testing.assert_allclose(got["r"][1], _rosen_grad(x + 0.5), rtol=1e-11)


def _heat(fn, *args):
    """Call ``fn`` until its specialisation has its direct entry (entries.HOT_CALLS)."""
    from adcompile.backend.entries import HOT_CALLS

    for _ in range(HOT_CALLS + 1):
        fn(*args)
    assert "a direct entry" in ad.explain(fn)


@pytest.mark.parametrize("n", [10, 300])  # straight-line code, folded code
@pytest.mark.parametrize("hot", [False, True])  # the entry, the direct entry
def test_entries_answer_as_the_general_path(n, hot):
    vg = ad.value_and_grad(_rosen)
    rng = np.random.default_rng(n)
    if hot:
        _heat(vg, rng.normal(size=n))
    else:
        vg(rng.normal(size=n))
        assert "__call__" in type(vg).__dict__  # the entry is installed
    results = []
    for _ in range(3):
        x = rng.normal(size=n)
        value, g = vg(x)
        assert value == pytest.approx(_rosen(x), rel=1e-12)
        np.testing.assert_allclose(g, _rosen_grad(x), rtol=1e-11)
        results.append((x, g))
    for x, g in results:  # each call's gradient is its own array
        np.testing.assert_allclose(g, _rosen_grad(x), rtol=1e-11)
    # what the entry does not take goes the general way, with the same answers
    x = rng.normal(size=n)
    np.testing.assert_allclose(vg(list(x))[1], _rosen_grad(x), rtol=1e-11)
    y = np.zeros(2 * n)
    y[::2] = x  # not contiguous
    np.testing.assert_allclose(vg(y[::2])[1], _rosen_grad(x), rtol=1e-11)
    x32 = x.astype(np.float32)  # computed in float64, the gradient given back in float32
    g32 = vg(x32)[1]
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, _rosen_grad(x32.astype(float)), rtol=1e-6)
    ints = np.arange(n) % 3
    np.testing.assert_allclose(vg(ints)[1], _rosen_grad(ints.astype(float)), rtol=1e-12)
    frozen = x.copy()
    frozen.flags.writeable = False
    np.testing.assert_allclose(vg(frozen)[1], _rosen_grad(x), rtol=1e-11)
    short = x[: n - 2]  # a new shape
    np.testing.assert_allclose(vg(short)[1], _rosen_grad(short), rtol=1e-11)
    np.testing.assert_allclose(vg(x)[1], _rosen_grad(x), rtol=1e-11)
    assert vg.traces == 2  # the first shape and the short one
    with pytest.raises(TypeError, match="argument"):
        vg(x, x)
    with pytest.raises(ValueError, match="argnums=0 does not fit"):
        vg()


def test_direct_entry_of_floats_branches_and_nans():
    def f(x, y):
        return x * y if x > 0 else ad.log(y) - x

    g = ad.grad(f, argnums=(0, 1))
    _heat(g, 2.0, 3.0)
    assert g(2.5, 4.0) == (4.0, 2.5)
    assert g(-1.0, 4.0) == pytest.approx((-1.0, 0.25))  # another branch
    assert g(3.0, 5.0) == (5.0, 3.0)
    assert g(3, 5) == (5.0, 3.0)  # ints are numbers too
    with ad.debug_nans(), pytest.raises(ad.NonFiniteError, match="log"):
        g(-1.0, -4.0)
    with ad.debug_nans():  # the traced branch, with finite results, inside the block
        assert g(2.0, 7.0) == (7.0, 2.0)
    assert g(-1.0, -4.0) == pytest.approx((-1.0, -0.25))  # outside: log(-4) is nan

    h = ad.grad(lambda x, k: x * x * k)
    _heat(h, 1.5, 2.0)
    assert h(1.5, k=3.0) == 2 * 1.5 * 3.0  # keywords take the general path
    assert h(1.5, 2.0) == 2 * 1.5 * 2.0


@pytest.mark.parametrize(
    "make, args, expected",
    [
        # one float in, one float out: Numba returns the result itself
        (lambda: ad.grad(lambda x: x**3), (2.0,), 12.0),
        (lambda: ad.value_and_grad(lambda x: x**3), (2.0,), (8.0, 12.0)),
        # a list comes out of jit: built in Python around the Numba call
        (lambda: ad.jit(lambda x, y: [x * y, x + y]), (2.0, 3.0), [6.0, 5.0]),
        # a tuple argnums with an array and a float
        (
            lambda: ad.value_and_grad(lambda w, b: np.sum(w * w) * b, argnums=(0, 1)),
            (np.array([1.0, 2.0]), 3.0),
            (15.0, (np.array([6.0, 12.0]), 5.0)),
        ),
        # a Jacobian of shape (2, 3): a 2-D result reshaped from the filled array
        (
            lambda: ad.jacobian(lambda x: np.array([x[0] * x[1], x[1] * x[2]])),
            (np.array([1.0, 2.0, 3.0]),),
            np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 2.0]]),
        ),
    ],
)
def test_direct_entry_results_have_the_transforms_structure(make, args, expected):
    fn = make()
    _heat(fn, *args)
    got = fn(*args)

    def same(a, b):
        assert type(a) is type(b) or (isinstance(b, float) and type(a) is float)
        if isinstance(b, (tuple, list)):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                same(x, y)
        elif isinstance(b, np.ndarray):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-13)
        else:
            assert a == pytest.approx(b, rel=1e-13)

    same(got, expected)


def test_a_hot_transform_is_freed_without_the_cyclic_gc():
    import gc
    import weakref

    vg = ad.value_and_grad(_rosen)
    _heat(vg, np.linspace(0, 1, 10))
    ref = weakref.ref(vg)
    gc.disable()
    try:
        del vg
        assert ref() is None
    finally:
        gc.enable()


def test_direct_entry_of_folded_code_with_guards_and_threads():
    import threading

    def f(x):  # folded into a loop; the branch is a guard on the traced path
        s = 0.0
        for i in range(len(x) - 1):
            s = s + (x[i + 1] - x[i]) ** 2
        return s if x[0] > 0 else -s

    def grad(x, sign):
        d = np.diff(x)
        g = np.zeros_like(x)
        g[:-1] -= 2 * d
        g[1:] += 2 * d
        return sign * g

    vg = ad.value_and_grad(f)
    x = np.linspace(0.5, 2.0, 300)
    _heat(vg, x)
    assert vg.last.compiled.facts.kind == "folded"
    np.testing.assert_allclose(vg(x + 1)[1], grad(x + 1, 1.0), rtol=1e-12)
    np.testing.assert_allclose(vg(x - 1)[1], grad(x - 1, -1.0), rtol=1e-12)  # the guard fails
    got = {}

    def run(k):  # each thread has its own scratch space
        z = x * (k + 1)
        got[k] = (z, [vg(z) for _ in range(200)])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for z, results in got.values():
        for value, g in results:
            assert value == pytest.approx(np.sum(np.diff(z) ** 2), rel=1e-12)
            np.testing.assert_allclose(g, grad(z, 1.0), rtol=1e-12)


def test_direct_entry_of_batch_generic_code():
    def loss(w, a, y):  # a loop over the rows: one program for every batch length
        s = 0.0
        for i in range(len(y)):
            r = a[i] * w[0] + w[1] - y[i]
            s = s + r * r
        return s / len(y)

    def grad(w, a, y):
        r = a * w[0] + w[1] - y
        return np.array([np.mean(2 * r * a), np.mean(2 * r)])

    rng = np.random.default_rng(7)
    vg = ad.value_and_grad(loss)
    w = np.array([0.5, -0.2])
    for n in (30, 31, 33, 40):
        a, y = rng.normal(size=n), rng.normal(size=n)
        np.testing.assert_allclose(vg(w, a, y)[1], grad(w, a, y), rtol=1e-12)
    assert vg.last.tape is None  # served by batch-generic code
    _heat(vg, w, a, y)
    for _ in range(3):
        a, y, w = rng.normal(size=40), rng.normal(size=40), rng.normal(size=2)
        value, g = vg(w, a, y)
        assert value == pytest.approx(np.mean((a * w[0] + w[1] - y) ** 2), rel=1e-12)
        np.testing.assert_allclose(g, grad(w, a, y), rtol=1e-12)
    a, y = rng.normal(size=50), rng.normal(size=50)  # another length: the general path
    np.testing.assert_allclose(vg(w, a, y)[1], grad(w, a, y), rtol=1e-12)


def test_no_direct_entry_where_a_call_takes_long():
    from adcompile.backend.entries import HOT_CALLS, HOT_MAX_SECONDS

    vg = ad.value_and_grad(_rosen)
    x = np.linspace(-1, 1, 40_000)  # folded; a call takes far longer than HOT_MAX_SECONDS
    assert HOT_MAX_SECONDS < 1e-4
    for _ in range(HOT_CALLS + 1):
        value, g = vg(x)
    assert "a direct entry" not in ad.explain(vg)
    np.testing.assert_allclose(g, _rosen_grad(x), rtol=1e-11)
