"""NaN debugging, on-disk cache damage, threads and memory."""

from __future__ import annotations

import gc
import importlib
import math
import os
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import fresh_loader

import adcompile as ad
from adcompile.ir.tape import Param
from adcompile.trace import loader

jit_mod = importlib.import_module("adcompile.backend.jit")


# ---------------------------------------------------------------- debug_nans


def test_debug_nans_eager_names_op_inputs_and_line():
    x = ad.Value(-1.0)
    with pytest.raises(ad.NonFiniteError, match=r"log\(-2\.0\) = nan at .*test_reliability") as e:
        with ad.debug_nans():
            ad.log(x * 2)
    assert isinstance(e.value, FloatingPointError)
    # outside the block NumPy semantics stay
    assert math.isnan(ad.log(x * 2).data)
    # a nan that comes from a nan input is not "made" here
    with ad.debug_nans():
        assert math.isnan((ad.Value(math.nan) + 1).data)


def test_debug_nans_compiled_primal_and_adjoint():
    def f(x, y):
        return ad.sqrt(x * y - 3.0) + ad.log(x)

    g = ad.grad(f, debug_nans=True)
    assert g(2.0, 2.0) == pytest.approx(0.5 * 2 / 1.0 + 0.5)  # finite: no error
    with pytest.raises(ad.NonFiniteError, match=r"sqrt\(-1\.0\) = nan .*test_reliability"):
        g(1.0, 2.0)
    # finite value, infinite derivative: named in the adjoint, with the primal statement
    with pytest.raises(ad.NonFiniteError, match=r"derivative of v1 = sqrt\(v0\)"):
        ad.grad(ad.sqrt, debug_nans=True)(0.0)
    # the same as a context, and no error without it
    assert math.isnan(ad.grad(f)(1.0, 2.0))
    with ad.debug_nans(), pytest.raises(ad.NonFiniteError):
        ad.grad(f)(1.0, 2.0)


# ---------------------------------------------------------------- on-disk cache


def _forget_compiled_code() -> None:
    """Forget the code compiled in this process, so that the next compile goes to disk."""
    loader.forget()
    jit_mod.forget_shared_code()  # code shared between traces of the same tape


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    fresh_loader(monkeypatch)
    _forget_compiled_code()
    yield tmp_path
    _forget_compiled_code()


def _files(root: Path, pattern: str) -> list[Path]:
    return sorted(root.rglob(pattern))


@pytest.mark.parametrize("damage", ["source", "index", "truncated-data"])
def test_damaged_cache_file_is_rebuilt_with_warning(fresh_cache, damage):
    def f(x):
        return x * ad.sin(x)

    expected = math.sin(1.0) + math.cos(1.0)
    assert ad.grad(f)(1.0) == pytest.approx(expected)
    _forget_compiled_code()
    if damage == "source":
        targets = _files(fresh_cache, "f_value_and_grad_*.py")
    elif damage == "index":
        targets = _files(fresh_cache, "*.nbi")
    else:
        targets = _files(fresh_cache, "*.nbc")
    assert targets
    for p in targets:
        p.write_bytes(os.urandom(7) if damage != "source" else b"garbage(")
    with pytest.warns(ad.CacheWarning, match="rebuilt"):
        assert ad.grad(f)(1.0) == pytest.approx(expected)


def test_clear_cache_and_configurable_directory(fresh_cache):
    ad.grad(lambda x: x * x)(1.0)
    assert ad.cache_dir() == fresh_cache
    assert ad.clear_cache() > 0
    assert not _files(fresh_cache, "*.py")
    assert ad.grad(lambda x: x * x * x)(2.0) == 12.0  # works again after clearing


def test_two_processes_compile_the_same_function_at_once(tmp_path):
    script = (
        "import adcompile as ad\n"
        "f = ad.value_and_grad(lambda x: ad.tanh(x) * x ** 3)\n"
        "v, g = f(0.7)\n"
        "print(repr(g))\n"
    )
    env = dict(os.environ, ADCOMPILE_CACHE_DIR=str(tmp_path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    t = math.tanh(0.7)
    expected = (1 - t * t) * 0.7**3 + t * 3 * 0.7**2
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert float(out) == pytest.approx(expected, rel=1e-14)


# ---------------------------------------------------------------- threads


def test_tracing_in_two_threads_keeps_tapes_apart():
    barrier = threading.Barrier(2, timeout=30)
    results = {}

    def f(x):
        y = x * x
        barrier.wait()  # both threads are now tracing at once
        if y > 1.0:
            y = y * 3.0
        barrier.wait()
        return y + x

    def g(x):
        y = ad.sin(x)
        barrier.wait()
        barrier.wait()
        return y

    def run(name, fun, x):
        results[name] = ad.trace(fun, x)

    threads = [
        threading.Thread(target=run, args=("f", f, 2.0)),
        threading.Thread(target=run, args=("g", g, 0.5)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results["f"].guards) == 1 and len(results["g"].guards) == 0
    assert results["f"].evaluate(2.0)[0] == pytest.approx(14.0)
    assert results["g"].evaluate(0.5)[0] == pytest.approx(math.sin(0.5))


def test_compiled_function_called_from_several_threads():
    vg = ad.value_and_grad(lambda x: np.sum(x * x * x))
    vg(np.ones(4))
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(300):
            x = rng.normal(size=4)
            v, g = vg(x)
            if not (np.isclose(v, np.sum(x**3)) and np.allclose(g, 3 * x * x)):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# ---------------------------------------------------------------- memory


def _peak_growth(step, n: int, settle=None) -> int:
    """Bytes still allocated after n more steps, compared with after a warm-up (and
    ``settle()``: a direct entry compiling in the background is waited for)."""
    for _ in range(200):
        step()
    if settle is not None:
        settle()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(n):
            step()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()


def test_memory_flat_over_eager_training_steps():
    w = [ad.Value(0.5), ad.Value(-0.3)]

    def step():
        loss = (ad.tanh(w[0] * 1.5 + w[1]) - 0.2) ** 2
        for p in w:
            p.grad = 0.0
        loss.backward()
        for p in w:
            p.data -= 0.01 * p.grad

    # (an earlier test's code compiling in the background would count: waited for)
    assert _peak_growth(step, 10_000, _background_done) < 200_000


def _background_done() -> None:
    """Wait for adcompile's threads (direct entries, loop nests, Numba loads)."""
    for t in threading.enumerate():
        if t.name.startswith("adcompile") and t is not threading.current_thread():
            t.join()


def test_memory_flat_over_compiled_calls():
    vg = ad.value_and_grad(lambda x: np.sum(ad.tanh(x) * x))
    x = np.linspace(-1, 1, 8)

    def step():
        vg(x)

    assert _peak_growth(step, 10_000, vg.wait_for_entries) < 200_000


def test_compiling_pauses_the_cyclic_collector_and_restores_its_state():
    from adcompile.trace.mode import gc_paused

    seen = []

    def f(x):
        seen.append(gc.isenabled())  # called while tracing
        return x * x

    was = gc.isenabled()
    try:
        gc.enable()
        assert ad.grad(f)(3.0) == 6.0
        assert seen == [False] and gc.isenabled()
        gc.disable()  # a user who turned it off keeps it off
        assert ad.grad(lambda x: f(x) + x)(3.0) == 7.0
        assert not gc.isenabled()
        gc.enable()
        with gc_paused():
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the inner exit does not re-enable
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_a_first_call_under_no_grad_still_compiles_the_true_gradient():
    f = lambda x: ad.sin(x) * x  # noqa: E731
    df = ad.grad(f)
    with ad.no_grad():
        g = df(1.3)
    assert g == pytest.approx(math.sin(1.3) + 1.3 * math.cos(1.3), rel=1e-14)
    assert df(0.4) == pytest.approx(math.sin(0.4) + 0.4 * math.cos(0.4), rel=1e-14)


def test_debug_nans_does_not_fire_on_the_point_the_adjoint_is_recorded_at():
    # the adjoint tape is recorded on placeholder values (0.5), where log(x - 1)
    # is nan; only the caller's point may decide
    with ad.debug_nans():
        assert ad.grad(lambda x: ad.log(x - 1.0))(2.0) == pytest.approx(1.0)
    with pytest.raises(ad.NonFiniteError, match="log"):
        ad.grad(lambda x: ad.log(x - 1.0), debug_nans=True)(0.5)


def test_forcing_an_unknown_code_kind_is_refused():
    from adcompile.backend.compiled import compile_tape

    tape = ad.trace(lambda x: x * x, 1.0)
    with pytest.raises(ValueError, match="straight-line"):
        compile_tape(tape, [Param("x", None)], "f", force="fast")
