"""``ad.trace(f, *args).compile()`` (CONTRACT section 2: a tape can be compiled):
its code gives the interpreter's outputs, and with ``wrt`` the value and gradient
that ``ad.value_and_grad`` gives and central differences confirm, at fresh points."""

from __future__ import annotations

import math

import numpy as np
import pytest

import adcompile as ad


def rosen(x):  # noqa: ANN001, ANN201
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def test_a_traced_tape_compiles_to_the_interpreters_answer() -> None:
    tape = ad.trace(lambda x, y: x * y + ad.sin(x), 1.0, 2.0)
    code = tape.compile()
    rng = np.random.default_rng(1)
    for x, y in rng.normal(size=(4, 2)):
        (v,) = code(x, y)
        assert v == tape.evaluate(x, y)[0] == pytest.approx(x * y + math.sin(x), rel=1e-15)
    value_and_grad = tape.compile(wrt=[0, 1])
    x, y = 0.3, -1.0
    assert value_and_grad(x, y) == pytest.approx(
        [x * y + math.sin(x), y + math.cos(x), x], rel=1e-14
    )
    assert "def tape_code(x, y, out)" in code.source


def test_a_long_tape_compiles_folded_and_differentiates() -> None:
    n = 60
    tape = ad.trace(rosen, np.linspace(-1.0, 1.0, n))
    code = tape.compile(wrt=list(range(n)))
    rng = np.random.default_rng(2)
    for _ in range(2):
        x = rng.uniform(-1.0, 1.0, size=n)
        value, *grad = code(x)
        want_v, want_g = ad.value_and_grad(rosen)(x)
        assert value == pytest.approx(want_v, rel=1e-13)
        np.testing.assert_allclose(grad, want_g, rtol=1e-12, atol=1e-12)
        d = rng.normal(size=n)
        fd = (rosen(x + 1e-6 * d) - rosen(x - 1e-6 * d)) / 2e-6
        assert float(np.dot(grad, d)) == pytest.approx(fd, rel=1e-6)


def test_a_compiled_tape_refuses_another_branch_and_bad_calls() -> None:
    tape = ad.trace(lambda x: x * 2.0 if x > 0 else -x, 1.0)
    code = tape.compile()
    assert code(3.0) == [6.0]
    with pytest.raises(ValueError, match="branches taken where it was traced"):
        code(-1.0)
    with pytest.raises(TypeError, match="takes 1 inputs, got 2"):
        code(1.0, 2.0)
    with pytest.raises(ValueError, match="inputs 0 to 0"):
        tape.compile(wrt=[3])
