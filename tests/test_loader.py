"""Every piece of generated code runs from a real file (issue 29, item 3).

For each kind (a transform's compiled code, straight-line and folded; the entry
a transform installs and its direct entry; the Numba entry; the vmap kernel;
the basis loop of a Jacobian; the direct call of folded code; the check of
watched values; Value's element-wise methods, its backward steps and its
backward sweep), an exception raised inside the generated code shows the
generated line in ``traceback.format_exc()``, ``inspect.getsource`` gives the
function's source, and that source is the text of a file on disk. The answers
around them are checked against hand-derived derivatives.
"""

from __future__ import annotations

import inspect
import math
import traceback
from pathlib import Path

import numpy as np
import pytest
from conftest import fresh_loader

import adcompile as ad
from adcompile.backend import entries, jit
from adcompile.backend.compiled import BasisCompiled
from adcompile.trace import loader, value
from adcompile.trace.value import Value


def _on_disk(fn) -> Path:
    """The file ``fn`` was compiled from, which holds its source."""
    path = Path(fn.__code__.co_filename)
    assert path.is_file(), path
    shown = inspect.getsource(fn)
    assert shown.startswith(("def ", "    def ")) and shown in path.read_text()
    return path


def _shows(call, line: str, fn) -> str:
    """Run ``call``, which fails inside ``fn``'s generated code: the traceback names
    ``fn``'s file and shows the line that failed, which holds ``line``."""
    path = _on_disk(fn)
    lines = [ln.strip() for ln in path.read_text().splitlines()]
    assert any(line in ln for ln in lines)
    try:
        call()
    except Exception:  # noqa: BLE001 - whatever it raised, its traceback is what we test
        text = traceback.format_exc()
    else:
        raise AssertionError("no exception")
    frames = text.split('  File "')
    mine = [f for f in frames if f.startswith(f'{path}", line ')]
    assert mine, text
    shown = [f.splitlines()[1].strip() for f in mine]
    assert any(line in ln and ln in lines for ln in shown), text
    return text


# ------------------------------------------------------------ transforms


def _f(x, y):
    return ad.sin(x * y) + x / y


def _df(x, y):
    return (y * math.cos(x * y) + 1 / y, x * math.cos(x * y) - x / y**2)


def test_compiled_straight_line_code():
    g = ad.grad(_f, argnums=(0, 1))
    assert g(1.0, 2.0) == pytest.approx(_df(1.0, 2.0), rel=1e-14)
    fn = g.last.compiled.native.fn.py_func
    assert _on_disk(fn).read_text() == g.source
    text = _shows(lambda: fn(1.0, None, np.empty(3)), "v2 = v0 * v1", fn)
    assert "NoneType" in text


def _rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def _rosen_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def test_compiled_folded_code():
    x = np.linspace(-1.0, 1.5, 300)
    g = ad.grad(_rosen)
    np.testing.assert_allclose(g(x), _rosen_grad(x), rtol=1e-12)
    native = g.last.compiled.native
    assert g.last.compiled.facts.kind == "folded"
    fn = native.fn.py_func
    assert _on_disk(fn).read_text() == g.source
    work, out = np.empty(native.work), np.empty(301)
    text = _shows(lambda: fn(None, work, native.columns, out), "x[i]", fn)
    assert "'NoneType' object is not subscriptable" in text


def test_the_entry_and_the_direct_entry(monkeypatch):
    monkeypatch.setattr(entries, "BACKGROUND", False)  # (made in the call that heats it)
    g = ad.grad(_f, argnums=(0, 1))
    assert g(1.0, 2.0) == pytest.approx(_df(1.0, 2.0), rel=1e-14)
    entry = g.last.entry
    assert Path(entry.__code__.co_filename).name.startswith("entry_of_straight_line_code_")
    text = _shows(lambda: g("one", 2.0), "return slow((a0, a1, ), {})", entry)
    assert "unsupported type 'str'" in text
    for _ in range(entries.HOT_CALLS + 1):
        assert g(0.5, 3.0) == pytest.approx(_df(0.5, 3.0), rel=1e-14)
    assert "a direct entry" in ad.explain(g)
    direct = g.last.entry
    assert Path(direct.__code__.co_filename).name.startswith("direct_entry_")
    _shows(lambda: g("one", 2.0), "return slow((a0, a1, ), {})", direct)
    assert g(0.25, 2.0) == pytest.approx(_df(0.25, 2.0), rel=1e-14)


def test_the_numba_entry_and_the_vmap_kernel():
    g = ad.grad(_f, argnums=(0, 1))
    xs, ys = np.linspace(0.1, 1.0, 5), np.linspace(1.0, 2.0, 5)
    got = ad.vmap(g)(xs, ys)
    want = np.array([_df(x, y) for x, y in zip(xs, ys)])
    np.testing.assert_allclose(np.column_stack(got), want, rtol=1e-13)
    entry = g.numba(1.0, 2.0)
    out = np.empty(3)
    assert entry(1.0, 2.0, out)
    assert out[1:] == pytest.approx(_df(1.0, 2.0), rel=1e-14)
    _shows(lambda: entry.py_func(1.0, None, out), "return inner(a0, a1, out)", entry.py_func)
    path = Path(entry.py_func.__code__.co_filename)
    assert not list(path.parent.glob(f"__pycache__/{path.stem}*.nbi"))  # not cached by Numba
    kernel = jit.vmap_kernel(entry, ("scalar", "scalar"))
    ok = np.empty(1, dtype=np.bool_)
    bad = np.array(["x"])
    line = "ok[p] = entry(a0[p], a1[p], out[p])"
    _shows(lambda: kernel.py_func(1, bad, bad, np.empty((1, 3)), ok), line, kernel.py_func)


def test_the_basis_loop_of_a_jacobian():
    n = 10  # more inputs and outputs than transforms.DIRECT_MAX: a loop over basis vectors

    def f(x):
        return np.array([x[i] * x[(i + 1) % n] for i in range(n)])

    x = np.linspace(0.5, 2.0, n)
    want = np.zeros((n, n))
    for i in range(n):
        want[i, i] += x[(i + 1) % n]
        want[i, (i + 1) % n] += x[i]
    jac = ad.jacobian(f)
    np.testing.assert_allclose(jac(x), want, rtol=1e-14)
    compiled = jac.last.compiled
    assert isinstance(compiled, BasisCompiled)
    fn = compiled.native.fn.py_func
    _shows(lambda: fn(None, np.empty(n * n)), "if not _one(x, _e, _res):", fn)


def test_the_direct_call_of_folded_code(monkeypatch):
    monkeypatch.setattr(entries, "BACKGROUND", False)
    x = np.linspace(-1.0, 1.5, 300)
    vg = ad.value_and_grad(_rosen)
    for _ in range(entries.HOT_CALLS + 1):
        np.testing.assert_allclose(vg(x)[1], _rosen_grad(x), rtol=1e-12)
    assert "a direct entry" in ad.explain(vg)
    fn = vg.last.entry.__globals__["fn"].py_func  # the Numba function the entry calls
    assert Path(fn.__code__.co_filename).name.startswith("direct_call_")
    _shows(lambda: fn(None, np.empty(300), np.empty(10**5)), "if a0.shape[0] != 300:", fn)


def test_the_check_of_watched_values():
    scale = {"k": 2.0}

    def f(x):
        return scale["k"] * x * x

    g = ad.grad(f)
    assert g(3.0) == 12.0
    changed = g.captures.checker.changed
    path = _on_disk(changed)
    assert path.name.startswith("watched_")
    scale["k"] = 5.0  # the check sees it: traced again
    with pytest.warns(ad.RetraceWarning, match="scale"):
        assert g(3.0) == 30.0


# ------------------------------------------------------------ Value


def test_value_methods_at_their_lines():
    v = Value(2.0)
    w = v * 3.0 + v.exp()
    w.backward()
    assert (w.data, v.grad) == pytest.approx((6.0 + math.exp(2.0), 3.0 + math.exp(2.0)))
    add = Value.__add__
    assert Path(add.__code__.co_filename).name.startswith("value_add_")
    _shows(lambda: v + "x", "other = _operand(other, op)", add)
    u = Value(1.0)
    u.data = "a"  # (users assign .data, as in micrograd)
    _shows(u.exp, "out.data = _ev_exp(a.data)", Value.exp)


def test_value_backward_steps_and_sweep():
    x = Value(1.5)
    y = x.log()
    step = value.backward_step(ad.OPS["log"])
    x.data = "a"
    _shows(y.backward, "x0._adj += _ev_div(g, x0.data)", step)
    a, b = Value(1.5), Value(2.0)
    c = a * b
    c.backward()
    assert (a.grad, b.grad) == (2.0, 1.5)
    sweep = value._sweep  # the sweep writes mul's step inline
    b.data = "b"
    _shows(c.backward, "g * x1.data", sweep)


# ------------------------------------------------------------ the loader


def test_one_file_per_text_written_once(tmp_path, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    source = "def twice(x):\n    return 2 * x\n"
    one = loader.load(source, "probe twice", {"__name__": "adcompile.probe"})
    two = loader.load(source, "probe twice", {"__name__": "adcompile.probe"})
    assert one is not two and one.twice(3.5) == two.twice(3.5) == 7.0
    (path,) = tmp_path.glob("probe_twice_*.py")
    assert path.read_text() == source and one.twice.__code__.co_filename == str(path)
    assert one.twice.__module__ == "adcompile.probe"
    stamp = path.stat().st_mtime_ns
    shared = loader.load(source, "probe twice")
    assert shared is loader.load(source, "probe twice")  # one module without names
    assert path.stat().st_mtime_ns == stamp  # not written again
    # Numba may cache the shared module's function, never one loaded with names (it
    # links in what they hold, which the text does not show)
    assert loader.cacheable(shared.twice) and not loader.cacheable(one.twice)


def test_bytecode_beside_the_file_and_edits_undone(tmp_path, monkeypatch):
    """Compiled code is read through Python's bytecode cache beside its file; a damaged
    bytecode file, or an edit to the generated file (even one of the same size), never
    changes what runs."""
    import importlib.util
    import sys

    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    fresh_loader(monkeypatch)
    source = "def plus_one(x):\n    return x + 1.0\n"
    assert loader.load(source, "probe_plus").plus_one(2.0) == 3.0
    (path,) = tmp_path.glob("probe_plus_*.py")
    pyc = Path(importlib.util.cache_from_source(str(path)))
    assert pyc.is_file()
    loader.forget()
    pyc.write_bytes(pyc.read_bytes()[:16] + b"not marshal data")  # a valid header
    assert loader.load(source, "probe_plus").plus_one(2.0) == 3.0
    assert not pyc.exists()  # (the damaged file is gone; the next load writes it again)
    loader.forget()
    path.write_text(source.replace("+ 1.0", "- 1.0"))  # the same size
    with pytest.warns(ad.CacheWarning, match="corrupt or not ours; rebuilt"):
        assert loader.load(source, "probe_plus").plus_one(2.0) == 3.0
    assert path.read_text() == source
