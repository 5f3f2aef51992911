"""A warm process answers its first call without Numba (first-day issue, item 16).

Code found on disk (``backend.records``) runs its first call as Python, the same
generated source, while Numba loads after it (``backend.python_first``). These
tests check that the first call needs no Numba, and that the Python run gives
Numba's answer: on random programs at fresh points, where CPython raises
(division by zero) and where it would give a complex number.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import fresh_loader
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from test_fuzz import PATIENT, _compile, programs

import adcompile as ad
from adcompile.backend import python_first
from adcompile.backend.shared import forget_shared_code
from adcompile.trace import loader

CHILD = """
import json
import numpy as np
import adcompile as ad

def rosen(x):
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))

def small(x):
    return ad.sin(x[0]) * x[1] ** 2 + ad.exp(x[0] / x[1])

x, s = np.linspace(-1.2, 1.1, 300), np.array([0.3, 1.7])
vgs = ad.value_and_grad(rosen), ad.value_and_grad(small)
first = [vg(a) for vg, a in zip(vgs, (x, s))]
python = [getattr(vg._last.compiled.fn, "python_calls", 0) for vg in vgs]
later = [vg(a) for vg, a in zip(vgs, (x, s))]
print(json.dumps({
    "python_calls": python,
    "stages": [list(vg.events[-1].stages) for vg in vgs],
    "first": [[v, g.tolist()] for v, g in first],
    "later": [[v, g.tolist()] for v, g in later],
}))
"""


def _run(args: list[str], cache: str, cwd: str | None = None) -> str:
    """What a fresh Python process prints, run on the cache folder ``cache``."""
    env = dict(os.environ, ADCOMPILE_CACHE_DIR=cache, ADCOMPILE_QUIET="1")
    env.pop("ADCOMPILE_CHECK", None)  # (check mode runs every call twice)
    out = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _child(cache: str, script: str = CHILD) -> dict:
    return json.loads(_run(["-c", script], cache).strip().splitlines()[-1])


def _small_grad(s: np.ndarray) -> list[float]:
    a, b = s
    e = math.exp(a / b)
    return [math.cos(a) * b * b + e / b, 2 * math.sin(a) * b - e * a / (b * b)]


def _rosen_grad(x: np.ndarray) -> np.ndarray:
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def test_a_warm_process_answers_its_first_calls_without_numba(tmp_path):
    """Folded code (Rosenbrock over 300 points) and straight-line code: the cold
    process compiles both; the warm one restores both and answers their first calls
    as Python, before Numba is loaded; its later calls (Numba's) agree."""
    x, s = np.linspace(-1.2, 1.1, 300), np.array([0.3, 1.7])
    cold = _child(str(tmp_path))
    warm = _child(str(tmp_path))
    assert cold["python_calls"] == [0, 0] and warm["python_calls"] == [1, 1]
    assert all("restored from the disk cache" in st for st in warm["stages"])
    for run in (cold, warm):
        for (value, grad), (v2, g2), ref in zip(
            run["first"], run["later"], (_rosen_grad(x), _small_grad(s))
        ):
            np.testing.assert_allclose(grad, ref, rtol=1e-12, atol=1e-9)
            assert v2 == pytest.approx(value, rel=1e-13)
            np.testing.assert_allclose(g2, grad, rtol=1e-13, atol=1e-12)


BATCH_CHILD = """
import json
import numpy as np
import adcompile as ad

def loss(w, X, y):
    return sum((w[0] * X[i, 0] + w[1] * X[i, 1] - y[i]) ** 2 for i in range(len(y))) / len(y)

rng = np.random.default_rng(5)
X, y, w = rng.normal(size=(64, 2)), rng.normal(size=64), np.array([0.3, -0.2])
vg = ad.value_and_grad(loss)
value, grad = vg(w, X, y)
fn = vg._last.compiled.generic.fn
again = vg(w, X, y)[1]
print(json.dumps({
    "stages": list(vg.events[-1].stages), "python_calls": getattr(fn, "python_calls", 0),
    "value": value, "grad": grad.tolist(), "again": again.tolist(),
}))
"""


def test_batch_generic_code_is_restored_and_its_first_call_runs_as_python(tmp_path):
    """Code generic in the batch length is kept on disk by the traces it was made
    from; a warm process traces those lengths, restores it, and runs both runs of
    its first call (the call's point, and the check's near it) as Python."""
    runs = [_child(str(tmp_path), BATCH_CHILD) for _ in range(2)]
    cold, warm = runs
    assert "restored from the disk cache" not in cold["stages"] and cold["python_calls"] == 0
    assert "restored from the disk cache" in warm["stages"] and warm["python_calls"] == 2
    rng = np.random.default_rng(5)
    X, y, w = rng.normal(size=(64, 2)), rng.normal(size=64), np.array([0.3, -0.2])
    r = X @ w - y
    for run in runs:
        assert run["value"] == pytest.approx(np.mean(r**2), rel=1e-12)
        np.testing.assert_allclose(run["grad"], 2 * X.T @ r / len(y), rtol=1e-12)
        np.testing.assert_allclose(run["again"], run["grad"], rtol=1e-13)


@pytest.fixture
def restored(monkeypatch, tmp_path, caplog):
    """``restored(f, *args)``: value_and_grad of ``f`` compiled once, then made again as
    a new process would, from its record on disk, its first call run as Python:
    ``(first call's result, the restored code, the cold transform's result)``. The
    disk cache is one of its own (what other tests did to the shared one, in this
    process or in another worker, is no concern of it)."""
    monkeypatch.setattr(python_first, "PYTHON_FIRST", "always")
    caplog.set_level(logging.DEBUG, logger="adcompile")  # (why a record was not restored)
    monkeypatch.delenv("ADCOMPILE_CHECK", raising=False)
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    fresh_loader(monkeypatch)

    def make(f, *args, argnums=0):
        cold = ad.value_and_grad(f, argnums=argnums, check=False)(*args)
        forget_shared_code()  # (as a new process: only the disk cache is left)
        vg = ad.value_and_grad(f, argnums=argnums, check=False)
        first = vg(*args)
        stages = vg.events[-1].stages
        why = (list(stages), loader.disk_dir(quiet=True), caplog.text)
        assert "restored from the disk cache" in stages, why
        return first, vg._last.compiled, cold

    return make


def test_where_cpython_raises_the_first_call_is_numbas(restored):
    """``y / x`` at x = 0 raises ZeroDivisionError in CPython; Numba's NumPy error
    model gives inf. The first call waits for Numba's answer."""
    (value, (gx, gy)), compiled, _ = restored(lambda x, y: y / x + x * y, 0.0, 2.0, argnums=(0, 1))
    assert compiled.fn.python_calls == 0
    assert value == math.inf and gx == -math.inf and gy == math.inf


def test_a_negative_number_to_a_fractional_power_is_nan_not_complex(restored):
    """CPython's ``(-4.0) ** 0.5`` is complex, and ``abs`` of it would be 2.0; Numba's
    is nan. The Python run cannot give the complex number's abs: the first call is
    Numba's nan."""
    (value, grad), compiled, _ = restored(lambda x: abs(x**0.5) + x, -4.0)
    assert compiled.fn.python_calls == 0
    assert math.isnan(value) and math.isnan(grad)


def test_folded_code_runs_its_first_call_as_python(restored):
    x = np.linspace(-1.2, 1.1, 300)

    def rosen(x):
        return sum(
            100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1)
        )

    (value, grad), compiled, (v0, g0) = restored(rosen, x)
    assert compiled.facts.kind == "folded" and compiled.fn.python_calls == 1
    python_first.wait_for_numba()  # (as vg.wait_for_entries() does)
    assert compiled.fn.ready
    np.testing.assert_allclose(grad, _rosen_grad(x), rtol=1e-12, atol=1e-9)
    assert value == pytest.approx(v0, rel=1e-13)


def _fuzz(examples: int) -> settings:
    """The hypothesis settings of the fuzz tests here (``restored`` is a maker:
    nothing in it is meant to be reset between examples)."""
    checks = [*PATIENT["suppress_health_check"], HealthCheck.function_scoped_fixture]
    return settings(
        max_examples=examples, derandomize=True, deadline=None, suppress_health_check=checks
    )


_point = st.floats(-3, 3, allow_subnormal=False)
_points = st.tuples(_point, _point, st.lists(_point, min_size=3, max_size=3))


@_fuzz(8)
@given(
    src=programs(),
    x=st.floats(-1.5, 1.5),
    y=st.floats(-1.5, 1.5),
    fresh=st.lists(_points, min_size=3, max_size=3),
)
def test_python_first_gives_numbas_answers_on_random_programs(restored, src, x, y, fresh):
    """Random programs (those of ``test_fuzz``: branches, loops, NumPy calls): the
    first call of the restored code (Python) agrees with the cold compile; then the
    same code as Python and as Numba, at fresh points, agrees (to rounding: CPython's
    ``pow`` is libm's, Numba's ``x ** 2.0`` is ``x * x``), including which guards
    hold, and nan and inf alike."""
    note(src)
    f = _compile(src)
    a = np.array([0.3, -0.7, 0.9])
    with np.errstate(all="ignore"):
        first, compiled, cold = restored(f, x, y, a, argnums=(0, 1, 2))
    np.testing.assert_allclose(first[0], cold[0], rtol=1e-12, atol=1e-300)
    for g1, g0 in zip(first[1], cold[1]):
        np.testing.assert_allclose(g1, g0, rtol=1e-11, atol=1e-13)
    fn = compiled.fn
    if not isinstance(fn, python_first.NumbaLater):  # (code that is not kept on disk)
        return
    for px, py, pa in fresh:
        flat = [px, py, np.array(pa)]
        ok_numba, want = compiled.call(*flat)  # (the first call is spent: Numba's)
        got = np.empty_like(want)
        try:
            with np.errstate(all="ignore"):
                ok_python = fn.python(*flat, *_extra(compiled), got)
        except (ArithmeticError, ValueError, TypeError):
            continue  # (a first call would wait for Numba here)
        assert bool(ok_python) == bool(ok_numba)
        if ok_numba:
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13, equal_nan=True)


def _extra(compiled) -> tuple:
    """The arguments generated code takes after the program's own: folded code's
    work array and constants; none for straight-line code."""
    native = compiled.native
    return () if native.work is None else (np.empty(native.work), native.columns)


GUARDED = """
import adcompile as ad

def f(x, a):
    return x * x if x > a else -3 * x

g = ad.grad(f)
g(2.0, 0.5)
print(g.source)
"""


def test_code_kept_on_disk_names_the_file_of_the_process_that_runs_it(tmp_path):
    """Generated code names the user's line of each guard; the same program in
    another file gets code that names that file, not the one kept on disk first."""
    sources = []
    for folder in ("one", "two", "two"):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "block.py").write_text(GUARDED)
        sources.append(_run(["block.py"], str(tmp_path / "cache"), str(tmp_path / folder)))
    for folder, source in zip(("one", "two", "two"), sources):
        assert f"{tmp_path / folder / 'block.py'}:5" in source
    assert sources[1] == sources[2]


# a loop body over x[i] and x[i + 1]: ops whose domains end (log, sqrt, a fractional
# power, a division), so that fresh points reach where CPython raises or Numba gives nan
TERMS = [
    "ad.sin({a}) * {b}",
    "ad.log({a} * {a} + 0.5) - {b}",
    "ad.sqrt({a} + 1.0) * {b}",
    "({a} + 2.0) ** 1.5",
    "{b} / ({a} - 0.25)",
    "ad.tanh({a} * {b}) + ad.exp(-{b} * {b})",
    "ad.maximum({a}, {b}) * {a}",
    "abs({a} - {b}) ** 0.5",
]


@_fuzz(6)
@given(
    terms=st.lists(st.sampled_from(TERMS), min_size=1, max_size=3),
    fresh=st.lists(st.lists(st.floats(-3, 3), min_size=40, max_size=40), min_size=4, max_size=4),
)
def test_folded_code_as_python_gives_numbas_answers(restored, terms, fresh):
    """Folded loops (a sum over 39 pairs of neighbours of random terms): the restored
    code's first call runs as Python and agrees with the cold compile; then the same
    loops as Python and as Numba agree at fresh points, nan and inf included, or the
    Python run raises (where a first call would wait for Numba)."""
    body = " + ".join(t.format(a="x[i]", b="x[i + 1]") for t in terms)
    src = f"def f(x):\n    return sum({body} for i in range(len(x) - 1))\n"
    note(src)
    f = _compile(src)
    x = np.linspace(0.3, 1.7, 40)
    with np.errstate(all="ignore"):
        first, compiled, cold = restored(f, x)
    assert compiled.facts.kind == "folded"
    assert first[0] == pytest.approx(cold[0], rel=1e-12)
    np.testing.assert_allclose(first[1], cold[1], rtol=1e-11, atol=1e-13)
    fn = compiled.fn
    for point in fresh:
        xs = np.array(point)
        ok_numba, want = compiled.call(xs)
        got = np.empty_like(want)
        try:
            with np.errstate(all="ignore"):
                ok_python = fn.python(xs, *_extra(compiled), got)
        except (ArithmeticError, ValueError, TypeError):
            continue
        assert bool(ok_python) == bool(ok_numba)
        if ok_numba:
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13, equal_nan=True)
