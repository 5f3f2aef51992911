"""Check mode (``ADCOMPILE_CHECK=1`` or ``check=True``): each call of a transform also
runs ``f`` eagerly and raises ``ad.CheckError`` where the compiled answer differs."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import adcompile as ad
from adcompile.api.transform import Transformed
from adcompile.backend import entries
from adcompile.trace import checking


def reading(path):
    """A function of x that reads its scale from a file: tracing compiles the value it
    read in, and nothing tells the transform that the file changed."""

    def _scaled(x):
        return ad.sin(x) * float(path.read_text())

    return _scaled


def rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def loss(w, b, X, *, scale=1.0, kind="mse"):
    r = X @ w + b
    return scale * ((r * r).sum() if kind == "mse" else abs(r).sum())


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(checking.ENV, raising=False)


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert type(a) is type(b)
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- correct functions


def test_correct_functions_answer_as_without_check_mode():
    rng = np.random.default_rng(0)
    w, X = rng.normal(size=3), rng.normal(size=(5, 3))
    cases = [
        (rosen, 0, (rng.normal(size=6),), {}),
        (rosen, 0, (list(rng.normal(size=4)),), {}),  # a list is an array
        (loss, (0, 1), (w, 0.5, X), {}),
        (loss, 0, (w, 0.5, X), {"scale": 2.0, "kind": "l1"}),  # keywords: input, key
        (lambda A: (A * A).sum(), 0, (rng.normal(size=(2, 3)),), {}),
        (lambda x, y: x * ad.exp(y), -1, (1.5, 0.25), {}),
    ]
    for f, argnums, args, kwargs in cases:
        for make in (ad.grad, ad.value_and_grad):
            plain = make(f, argnums)
            checked = make(f, argnums, check=True)
            assert isinstance(checked, checking.Checked)
            for _ in range(3):
                _same(checked(*args, **kwargs), plain(*args, **kwargs))


def test_hot_calls_are_checked_and_answer_the_same():
    vg, plain = ad.value_and_grad(rosen, check=True), ad.value_and_grad(rosen)
    x = np.linspace(-1.0, 1.0, 5)
    for _ in range(entries.HOT_CALLS + 5):
        _same(vg(x), plain(x))
    assert "a direct entry" in ad.explain(vg)


def test_a_checked_transform_is_used_as_the_transform():
    vg = ad.value_and_grad(rosen, check=True)
    x = np.array([0.5, 1.0, 1.5])
    vg(x)
    assert isinstance(vg, Transformed) and vg.unchecked.fun is rosen
    assert vg.fun is rosen and vg.__name__ == "rosen" and vg.traces == 1
    assert "def rosen_value_and_grad" in vg.source
    assert vg.explanation and vg.events[0].reason == "first call"
    assert "1 trace and compile" in ad.explain(vg)
    assert "def rosen_value_and_grad" in ad.show_code(vg, x)
    out = np.empty(4)
    assert vg.numba(x)(x, out) and out[0] == pytest.approx(rosen(x))
    again = copy.copy(vg)
    assert isinstance(again, checking.Checked) and again(x)[0] == vg(x)[0]


def test_second_derivatives_and_values_pass_through():
    d2 = ad.grad(ad.grad(lambda x: x**3, check=True), check=True)
    assert d2(2.0) == pytest.approx(12.0)
    inner = ad.grad(lambda x: x * x, check=True)
    v = ad.Value(3.0)
    out = inner(v)  # on Values: recorded, not checked here
    out.backward()
    assert out.data == 6.0 and v.grad == 2.0


def test_jit_is_checked_against_f_on_floats():
    f = ad.jit(lambda x, y: (x * y, np.sin(x) + y), check=True)
    value = f(np.array([1.0, 2.0]), 3.0)
    np.testing.assert_allclose(value[0], [3.0, 6.0])
    np.testing.assert_allclose(value[1], np.sin([1.0, 2.0]) + 3.0)
    g = ad.jit(lambda x: x.tanh(), check=True)  # no float method: checked on Values
    assert g(0.5) == pytest.approx(np.tanh(0.5))


def test_environment_variable_turns_it_on(monkeypatch):
    assert not isinstance(ad.grad(rosen), checking.Checked)
    monkeypatch.setenv(checking.ENV, "1")
    for t in (ad.grad(rosen), ad.value_and_grad(rosen), ad.jit(rosen)):
        assert isinstance(t, checking.Checked)
    assert not isinstance(ad.grad(rosen, check=False), checking.Checked)
    monkeypatch.setenv(checking.ENV, "0")
    assert not isinstance(ad.jit(rosen), checking.Checked)


# ---------------------------------------------------------------- wrong answers caught


@pytest.mark.parametrize("via", ["keyword", "environment"])
def test_a_stale_constant_is_caught(monkeypatch, tmp_path, via):
    path = tmp_path / "scale.txt"
    path.write_text("2.0")
    if via == "environment":
        monkeypatch.setenv(checking.ENV, "1")
        vg = ad.value_and_grad(reading(path))
    else:
        vg = ad.value_and_grad(reading(path), check=True)
    assert vg(0.5)[0] == pytest.approx(2.0 * math.sin(0.5))
    path.write_text("3.0")
    with pytest.raises(ad.CheckError) as caught:
        vg(0.5)
    message = str(caught.value)
    assert "value_and_grad of _scaled()" in message
    assert f"value: compiled {2.0 * math.sin(0.5)!r}, eager {3.0 * math.sin(0.5)!r}" in message
    assert "call: x: a number" in message and "first call" in message
    assert caught.value.where == "value" and caught.value.function == "_scaled"
    assert isinstance(caught.value, AssertionError)


def test_a_stale_constant_is_caught_by_jit(tmp_path):
    path = tmp_path / "scale.txt"
    path.write_text("2.0")
    f = ad.jit(reading(path), check=True)
    f(0.5)
    path.write_text("3.0")
    with pytest.raises(ad.CheckError, match=r"jit of _scaled\(\) disagrees .* on floats"):
        f(0.5)


def _perturbing(make_entry):
    """An entry maker whose entries answer as the general path, the gradient's
    element [1] off by 1e-6: a bug in an entry, as check mode should see it."""

    def maker(spec, key, slow, *rest):
        make_entry(spec, key, slow, *rest)  # (the real one is still made)

        def entry(*args, **kwargs):
            value, g = slow(args, kwargs)
            g = g.copy()
            g[1] += 1e-6
            return value, g

        return entry

    return maker


def test_a_wrong_entry_is_caught(monkeypatch):
    monkeypatch.setattr(entries, "entry", _perturbing(entries.entry))
    vg = ad.value_and_grad(rosen, check=True)
    x = np.array([0.5, 1.0, 1.5])
    vg(x)  # the general path: right
    with pytest.raises(ad.CheckError) as caught:
        vg(x)  # the (wrong) entry installed by the first call
    message = str(caught.value)
    assert "gradient of argument 0 (x), element [1]: compiled -49.999999" in message
    assert ", eager -50.0 (difference 1e-06" in message
    assert "call: x: shape (3,)" in message
    assert caught.value.where == "gradient of argument 0 (x), element [1]"
    assert caught.value.eager == -50.0


def test_a_wrong_direct_entry_is_caught(monkeypatch):
    monkeypatch.setattr(entries, "direct_entry", _perturbing(entries.direct_entry))
    vg = ad.value_and_grad(rosen, check=True)
    x = np.array([0.5, 1.0, 1.5])
    for _ in range(entries.HOT_CALLS + 1):
        vg(x)
    vg.wait_for_entries()  # (compiled in the background)
    with pytest.raises(ad.CheckError, match="with a direct entry"):
        for _ in range(5):
            vg(x)


def test_argnums_tuples_and_keywords_name_the_argument(tmp_path):
    path = tmp_path / "scale.txt"
    path.write_text("2.0")

    def f(a, b, *, c=1.0):
        return a * c + ad.sin(b).sum() * float(path.read_text())

    g = ad.grad(f, argnums=(0, 1), check=True)
    b = np.array([0.1, 0.2])
    g(1.0, b, c=2.0)
    path.write_text("3.0")
    with pytest.raises(ad.CheckError) as caught:
        g(1.0, b, c=2.0)
    assert caught.value.where == "gradient of argument 1 (b), element [0]"
    assert "call: a: a number, b: shape (2,), c= a number" in str(caught.value)


# ---------------------------------------------------------------- eager failures


def test_an_eager_failure_is_reported():
    calls = []

    def once(x):
        calls.append(x)
        if len(calls) > 1:
            raise RuntimeError("called twice")
        return x * x

    g = ad.grad(once, check=True)
    with pytest.raises(ad.CheckError, match="run eagerly on Values.*raised RuntimeError: "):
        g(2.0)


def test_a_compiled_error_is_raised_unchecked():
    def bad(x):
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        ad.grad(bad, check=True)(1.0)
    with pytest.raises(TypeError, match="unsupported type"):
        ad.grad(rosen, check=True)("text")


def test_nan_equals_nan_and_infinities_are_compared():
    g = ad.value_and_grad(lambda x: ad.log(x), check=True)
    value, slope = g(-1.0)
    assert np.isnan(value) and slope == -1.0
    value, slope = g(0.0)
    assert value == -np.inf and slope == np.inf
