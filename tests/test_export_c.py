"""Exported C keeps loops as loops, and its guards are numbered by the printer.

Each test compiles the exported C with the system's C compiler (``-O1
-std=c99 -shared -fPIC ... -lm``, warnings as errors; skipped without one),
loads it with ctypes and compares it with plain Python on floats and with
adcompile's own compiled code: on the Rosenbrock function (folded, tens of
lines of C), on random programs with loops (``test_loop_fuzz``'s), on a guard
that fails (the status names it, as the Python export's ValueError does) and on
more than 32 guards (each has a number of its own).
"""

from __future__ import annotations

import ctypes
import importlib
import math
import re
import warnings

import numpy as np
import pytest
from conftest import build_c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_loop_fuzz import programs

import adcompile as ad
from adcompile.diff import interpret

P = ctypes.POINTER(ctypes.c_double)


def ptr(a: np.ndarray):
    return a.ctypes.data_as(P)


def build(tmp_path, src: str, name: str, fname: str, args: list):
    """The exported function ``fname`` of C source ``src``, compiled at -O1."""
    fn = getattr(build_c(tmp_path, src, name, opt="-O1"), fname)
    fn.argtypes, fn.restype = [*args, P], ctypes.c_int
    return fn


def guard_lines(src: str) -> dict[int, str]:
    """The header's list of guards: number -> what it says."""
    return {int(k): text for k, text in re.findall(r"^ \*   (\d+): (.*)$", src, re.M)}


def load(src: str, name: str):
    ns: dict = {}
    exec(compile(src, f"<exported {name}>", "exec"), ns)
    return ns[name]


def rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


@pytest.mark.parametrize("transform", ["value_and_grad", "value", "grad"])
def test_rosenbrock_at_1000_is_tens_of_lines_of_c_and_agrees(tmp_path, transform):
    x = np.random.default_rng(0).random(1000)
    src = ad.export(rosen, x, transform=transform, target="c")
    assert len(src.splitlines()) < 100  # (23,010 lines when C was printed unrolled)
    assert "for (long i = 0; i < 999; i++) {" in src
    fname = re.search(r"^int (\w+)\(const double\* x, double\* out\);$", src, re.M)[1]
    fn = build(tmp_path, src, "rosen_c", fname, [P])
    out = np.empty(int(re.search(r"out: (\d+) doubles", src)[1]))
    assert fn(ptr(x), ptr(out)) == 0
    value = rosen(list(x))  # plain Python on floats
    v, g = ad.value_and_grad(rosen)(x)
    if transform != "grad":
        assert out[0] == pytest.approx(value, rel=1e-13)
        assert out[0] == pytest.approx(v, rel=1e-13)
    if transform != "value":
        grad = out[-1000:]
        np.testing.assert_allclose(grad, g, rtol=1e-12, atol=1e-12)
        # by hand at the ends: d/dx0 = -400 x0 (x1 - x0^2) - 2 (1 - x0)
        assert grad[0] == pytest.approx(-400 * x[0] * (x[1] - x[0] ** 2) - 2 * (1 - x[0]))
        assert grad[-1] == pytest.approx(200 * (x[-1] - x[-2] ** 2))


def test_folded_code_restored_from_the_disk_cache_exports_its_loops(tmp_path, monkeypatch):
    """Code restored from a record on disk keeps only its Numba source; exporting it folds
    the tape again, for C as for Python."""
    jit = importlib.import_module("adcompile.backend.jit")
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path / "cache"))
    x = np.linspace(-1.2, 1.1, 300)
    ad.value_and_grad(rosen)(x)  # folds, and keeps a record of the folded code
    jit.forget_shared_code()
    vg = ad.value_and_grad(rosen)
    value, grad = vg(x)
    assert "restored from the disk cache" in vg.events[-1].stages
    src = ad.export(rosen, x, target="c")
    assert "for (long i = 0; i < 299; i++) {" in src
    fn = build(tmp_path, src, "restored", "rosen_value_and_grad", [P])
    out = np.empty(301)
    assert fn(ptr(x), ptr(out)) == 0
    np.testing.assert_allclose(out, [value, *grad], rtol=1e-13)
    got = load(ad.export(rosen, x), "rosen")(x)
    assert got[0] == pytest.approx(rosen(list(x)), rel=1e-13)  # plain Python
    np.testing.assert_allclose(got[1], grad, rtol=1e-13)


def relu_sum(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + x[i] * x[i]
        else:
            s = s - x[i]
    return s


def test_a_guard_that_fails_returns_the_number_of_its_element(tmp_path):
    x = np.linspace(0.1, 1.0, 120)
    src = ad.export(relu_sum, x, target="c")
    assert "for (long i = 0; i < 120; i++) {" in src  # the guards are checked in a loop
    fn = build(tmp_path, src, "relu_c", "relu_sum_value_and_grad", [P])
    out = np.empty(121)
    assert fn(ptr(x), ptr(out)) == 0
    np.testing.assert_allclose(out, [np.sum(x * x), *(2 * x)], rtol=1e-14)
    y = x.copy()
    y[7] = -1.0
    status = fn(ptr(y), ptr(out))
    says = guard_lines(src)
    assert len(says) == 120 and status in says
    assert says[status].startswith("x[7] > 0.0 was True when traced, at test_export_c.py:")
    # the Python export numbers it the same, from the same printer
    with pytest.raises(ValueError, match=rf"guard {status} failed: x\[7\] > 0.0 was True"):
        load(ad.export(relu_sum, x), "relu_sum")(y)


def thresholds(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + max(x[i], 0.01 * i) * x[i + 1]
    return s


@pytest.mark.parametrize(
    "n, transform, kind",
    [
        (41, "value", "Straight-line"),  # 40 guards
        (41, "value_and_grad", "Folded"),  # the unrolled adjoint tape, folded
        (151, "value_and_grad", "Folded"),  # 150 guards; the primal folded, as loops
    ],
)
def test_more_than_32_guards_each_have_a_number(tmp_path, n, transform, kind):
    x = np.linspace(2.0, 3.0, n)
    t = ad.jit(thresholds) if transform == "value" else ad.value_and_grad(thresholds)
    want = t(x)
    assert t.explanation.startswith(kind)
    src = ad.export(thresholds, x, transform=transform, target="c")
    says = guard_lines(src)
    assert sorted(says) == list(range(1, n))  # every guard numbered, none -1
    fname = f"thresholds_{transform}"
    fn = build(tmp_path, src, f"thr{n}{transform}", fname, [P])
    out = np.empty(1 if transform == "value" else n + 1)
    assert fn(ptr(x), ptr(out)) == 0
    np.testing.assert_allclose(
        out, np.hstack([want[0], want[1]] if len(out) > 1 else [want]), rtol=1e-13
    )
    assert out[0] == pytest.approx(thresholds(list(x)), rel=1e-13)  # plain Python
    exported = load(ad.export(thresholds, x, transform=transform), "thresholds")
    for k in (0, 17, n - 2):  # one element below its threshold 0.01 k: that guard fails
        y = x.copy()
        y[k] = 0.01 * k - 1.0
        status = fn(ptr(y), ptr(out))
        assert says[status].startswith(f"x[{k}] < ") and "was False" in says[status]
        with pytest.raises(ValueError, match=rf"guard {status} failed: x\[{k}\] < "):
            exported(y)


PATIENT = dict(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _compile(src: str):
    ns = {"ad": ad, "np": np}
    exec(compile(src, "<loop program>", "exec"), ns)
    return ns["f"]


@settings(max_examples=3, **PATIENT)
@given(prog=programs().filter(lambda p: " if " in p[0]), seed=st.integers(0, 2**32 - 1))
def test_random_loop_programs_exported_to_c_agree(prog, seed, tmp_path_factory):
    """Value and gradient of a random program with loops and branches (guards), as C, at
    the traced point and at others: plain Python's value and adcompile's gradient where
    the guards hold, and a guard's number (of those the header lists) exactly where one
    of the traced tape's guards fails there. (Loops without branches: the Rosenbrock and
    threshold tests above.)"""
    src, size = prog
    f = _compile(src)
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(-1, 1, size), float(rng.uniform(-1, 1))
    tmp = tmp_path_factory.mktemp("loops")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.RetraceWarning)
        vg = ad.value_and_grad(f, argnums=(0, 1))
        c_src = ad.export(f, x, y, argnums=(0, 1), target="c")
        value_src = ad.export(f, x, y, transform="value", target="c")
        tape = ad.trace(f, x, y)
        fn = build(tmp, c_src, "vg", "f_value_and_grad", [P, ctypes.c_double])
        fv = build(tmp, value_src, "v", "f_value", [P, ctypes.c_double])
        says = guard_lines(c_src)
        out, val = np.empty(size + 2), np.empty(1)
        points = [(x, y), (-x, -y), (3 * x, 2 * y), (rng.uniform(-1, 1, size), -0.5 * y)]
        for x, y in points:  # the traced point, and others that may take other branches
            status = fn(ptr(x), y, ptr(out))
            vals = interpret.values(tape, [*x, y])
            holds = all(g.holds(vals) for g in tape.guards)
            assert (status == 0) == holds, (status, holds)
            assert (fv(ptr(x), y, ptr(val)) == 0) == holds
            if not holds:
                assert status in says
                continue
            want = float(f(x.copy(), y))  # plain Python on floats
            assert math.isfinite(want)
            assert out[0] == pytest.approx(want, rel=1e-9, abs=1e-11)
            assert val[0] == pytest.approx(want, rel=1e-9, abs=1e-11)
            value, (gx, gy) = vg(x, y)
            np.testing.assert_allclose(out, [value, *gx, gy], rtol=1e-9, atol=1e-11)
