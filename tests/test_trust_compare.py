"""Comparisons on traced values follow the float and are guarded (issue 27, item 4).

Each program is called through the compiled transforms at several points, the
traced one and fresh ones on both sides of every branch, and compared with plain
Python (the function run on floats) and central finite differences.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import adcompile as ad
from adcompile import Value


def fd(f, x: float, h: float = 1e-6) -> float:
    return (f(x + h) - f(x - h)) / (2 * h)


PROGRAMS = {
    "==": (lambda x: x * x if x == 0.5 else 3.0 * x, [0.5, 0.7, 0.5, -1.0]),
    "== reflected": (lambda x: x * x if 0.5 == x else 3.0 * x, [0.7, 0.5, 0.7]),
    "!=": (lambda x: x * x if x != 0 else 3.0 * x, [0.7, 0.0, 2.0, 0.0]),
    "in": (lambda x: x * x if x in (0.0, 1.0) else 3.0 * x, [0.7, 1.0, 0.0, 2.5]),
    "not in": (lambda x: 2.0 * x if x not in [1.0] else x**3, [1.0, 0.3, 1.0]),
    "truthiness": (lambda x: x * x if x else 3.0 * x, [0.7, 0.0, -2.0, 0.0]),
    "not": (lambda x: 3.0 * x if not x else x * x, [0.0, 0.7, 0.0]),
    "and/or": (lambda x: (x or 2.0) * x, [0.7, 0.0, 1.5]),
    ".data >": (lambda x: x * x if getattr(x, "data", x) > 0 else -3.0 * x, [0.7, -1.0, 2.0]),
    ".data ==": (lambda x: x * x if getattr(x, "data", x) == 1.0 else 5.0 * x, [1.0, 0.5, 1.0]),
    ".data truthiness": (lambda x: x * x if getattr(x, "data", x) else 5.0 * x, [0.7, 0.0, 0.2]),
    "intermediate .data": (
        lambda x: x * x if getattr(x * x, "data", x * x) > 1.0 else 2.0 * x,
        [0.5, 1.5, -2.0, 0.1],
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("transform", ["value_and_grad", "jit"])
def test_comparison_branches_follow_plain_python(name, transform):
    f, points = PROGRAMS[name]
    t = getattr(ad, transform)(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        for x in points:
            expected = f(x)
            if transform == "jit":
                assert t(x) == pytest.approx(expected, rel=1e-12, abs=1e-12), (name, x)
                continue
            v, g = t(x)
            assert v == pytest.approx(expected, rel=1e-12, abs=1e-12), (name, x)
            eager = Value(x)
            out = f(eager)
            out.backward()
            assert g == pytest.approx(eager.grad, rel=1e-12, abs=1e-12), (name, x)
            if x not in (0.0, 0.5, 1.0):  # (an equality's branch holds at one point)
                assert g == pytest.approx(fd(f, x), rel=1e-5, abs=1e-6), (name, x)


def test_values_stay_hashable_by_identity():
    a, b = Value(1.0), Value(1.0)
    assert a == b and a is not b
    assert len({a, b}) == 2
    d = {a: "a", b: "b"}
    assert d[a] == "a" and d[b] == "b"
    assert a in [a] and a in {a}
    assert Value(2.0) != 1.0 and not (Value(2.0) == 1.0)
    assert (Value(1.0) == "text") is False and Value(1.0) != "text"


def test_equality_guard_is_named_in_the_explanation():
    f = lambda x: x * x if x == 0.5 else 3.0 * x  # noqa: E731
    t = ad.value_and_grad(f)
    t(0.7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        t(0.5)
    assert t.traces == 2
    assert "==" in ad.explain(t)


def test_numpy_object_arrays_compare_elementwise():
    a = np.array([Value(0.0), Value(2.0)], dtype=object)
    assert list(a == 0.0) == [True, False]
    assert list(np.nonzero(a)[0]) == [1]


def test_data_used_as_a_number_is_refused_while_tracing():
    with pytest.raises(TypeError, match=r"\.data of a traced Value"):
        ad.grad(lambda x: x * x.data)(1.5)
    with pytest.raises(TypeError, match=r"detach\(\)"):
        ad.grad(lambda x: x * x.detach())(1.5)
    # outside a trace both stay what they are in micrograd and PyTorch
    x = Value(1.5)
    (x * x.data).backward()
    assert x.grad == 1.5
    assert x.detach().data == 1.5 and not x.detach().requires_grad
