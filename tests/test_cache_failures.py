"""The disk cache when it cannot be used (issue 28, items 5 and 8): a cache
directory that is a file or cannot be created, a read-only directory, a full
disk; and a compile error told apart from a damaged cache.

Each case compiles real functions and checks their gradients against
hand-derived ones, counts the warnings (one, naming the directory and the
fix) and looks at what was (not) written to disk.
"""

from __future__ import annotations

import errno
import importlib
import inspect
import math
import os
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest
from conftest import fresh_loader
from numba.core import caching
from numba.extending import overload

import adcompile as ad
from adcompile.trace import loader

jit_mod = importlib.import_module("adcompile.backend.jit")


def _forget_compiled_code() -> None:
    """Forget the code compiled in this process, so that the next compile goes to disk."""
    loader.forget()
    jit_mod.forget_shared_code()  # code shared between traces of one tape


@pytest.fixture
def fresh(monkeypatch):
    """No module compiled yet, no cache problem seen yet, in this process."""
    fresh_loader(monkeypatch)
    _forget_compiled_code()
    yield
    _forget_compiled_code()  # (nothing compiled in memory here is kept for later tests)


def _cache_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, ad.CacheWarning)]


def _two_new_gradients(seed: float) -> None:
    """Compile two functions never compiled before and check their gradients."""
    a = seed

    def f(x):
        return ad.sin(a * x) * x

    def g(x, y):
        return ad.exp(a * x) * y + x * y * y

    assert ad.grad(f)(0.7) == pytest.approx(a * math.cos(a * 0.7) * 0.7 + math.sin(a * 0.7))
    gx, gy = ad.grad(g, argnums=(0, 1))(0.3, 2.0)
    assert gx == pytest.approx(a * math.exp(a * 0.3) * 2.0 + 4.0)
    assert gy == pytest.approx(math.exp(a * 0.3) + 2 * 0.3 * 2.0)


# ------------------------------------------------ item 5: a bad ADCOMPILE_CACHE_DIR


@pytest.mark.parametrize("kind", ["a file", "inside a file"])
def test_a_cache_dir_that_cannot_be_a_directory_warns_once_and_compiles_in_memory(
    fresh, tmp_path, monkeypatch, kind
):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("mine")
    bad = blocker if kind == "a file" else blocker / "cache"
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(bad))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _two_new_gradients(1.31)
    said = _cache_warnings(caught)
    assert len(said) == 1, said
    assert f"ADCOMPILE_CACHE_DIR={bad}" in said[0]
    assert "set ADCOMPILE_CACHE_DIR to a directory you can write to" in said[0]
    assert "without a disk cache" in said[0]
    assert blocker.read_text() == "mine"  # left alone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-dir"]
    with pytest.raises(jit_mod.CacheDirError, match="ADCOMPILE_CACHE_DIR=") as err:
        ad.cache_dir()
    assert isinstance(err.value, OSError)  # what code catching OSError expects
    with pytest.raises(jit_mod.CacheDirError, match="set ADCOMPILE_CACHE_DIR"):
        ad.clear_cache()


def test_code_compiled_in_memory_can_still_be_read(fresh, tmp_path, monkeypatch):
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path / "f"))
    vg = ad.value_and_grad(lambda x: x * ad.tanh(x))
    with pytest.warns(ad.CacheWarning):
        value, grad = vg(0.4)
    t = math.tanh(0.4)
    assert (value, grad) == pytest.approx((0.4 * t, t + 0.4 * (1 - t * t)))
    assert "def " in ad.show_code(vg, 0.4) and "tanh" in ad.show_code(vg, 0.4)


def test_cache_dir_file_in_a_fresh_process_is_one_warning_not_a_traceback(tmp_path):
    (tmp_path / "file").write_text("")
    script = (
        "import adcompile as ad\n"
        "print(ad.grad(lambda x: x ** 3)(2.0))\n"
        "print(ad.grad(lambda x: x ** 4)(2.0))\n"
    )
    env = dict(os.environ, ADCOMPILE_CACHE_DIR=str(tmp_path / "file"))
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["12.0", "32.0"]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("CacheWarning") == 1


def test_a_bad_cache_dir_is_said_when_compiling_not_at_import(tmp_path):
    """Value's generated methods are loaded at import and need no disk cache: a bad
    directory is said once, by the first compile, not by import or eager backward."""
    (tmp_path / "file").write_text("")
    script = (
        "import warnings, adcompile as ad\n"
        "warnings.simplefilter('always')\n"
        "v = ad.Value(0.5)\n"
        "(v.tanh() * v).backward()\n"
        "print(repr(v.grad), flush=True)\n"
        "import sys; print('compiling', file=sys.stderr, flush=True)\n"
        "print(ad.grad(lambda x: x ** 3)(2.0))\n"
    )
    env = dict(os.environ, ADCOMPILE_CACHE_DIR=str(tmp_path / "file"))
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    t = math.tanh(0.5)
    assert [float(x) for x in proc.stdout.split()] == pytest.approx([t + 0.5 * (1 - t * t), 12.0])
    before, after = proc.stderr.split("compiling\n")
    assert "CacheWarning" not in before
    assert after.count("CacheWarning") == 1 and "is a file" in after


# ------------------------------------------------ item 8: read-only, full disk


def _raise(number: int):
    def write(*args, **kw):
        raise OSError(number, os.strerror(number))

    return write


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_generated_source_that_cannot_be_written_goes_to_a_temporary_directory(
    fresh, tmp_path, monkeypatch, number
):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    write = loader.write_atomic

    def refused_in_the_cache(path, text):
        if Path(path).is_relative_to(tmp_path):
            raise OSError(number, os.strerror(number))
        write(path, text)

    monkeypatch.setattr(loader, "write_atomic", refused_in_the_cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _two_new_gradients(0.83)
        g = ad.grad(lambda x: x * ad.exp(x))
        assert g(0.5) == pytest.approx(1.5 * math.exp(0.5))
    said = _cache_warnings(caught)
    assert len(said) == 1, said
    assert str(tmp_path) in said[0] and os.strerror(number) in said[0]
    fix = "free some space" if number == errno.ENOSPC else "make it writable"
    assert fix in said[0] and "ADCOMPILE_CACHE_DIR" in said[0]
    assert not list(tmp_path.rglob("*.py")) and not list(tmp_path.rglob("*.nbi"))
    # the source went to this process's temporary directory, where tracebacks read it
    path = Path(g.last.compiled.fn.py_func.__code__.co_filename)
    assert path.read_text() == g.source and not path.is_relative_to(tmp_path)
    assert not list(path.parent.rglob("*.nbi"))  # (no Numba cache there)


def test_with_no_directory_at_all_the_source_is_still_shown(fresh, tmp_path, monkeypatch):
    """No cache directory and no temporary directory either: the source is run from
    memory, and tracebacks and inspect read it from linecache."""
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path / "f"))
    monkeypatch.setattr(loader, "_temp", (os.getpid(), None))
    g = ad.grad(lambda x: x * ad.sin(x))
    with pytest.warns(ad.CacheWarning, match="is a file"):
        assert g(0.3) == pytest.approx(math.sin(0.3) + 0.3 * math.cos(0.3))
    fn = g.last.compiled.fn.py_func
    assert fn.__code__.co_filename.startswith("<adcompile generated ")
    shown = inspect.getsource(fn)
    assert shown.startswith("def lambda_value_and_grad(") and shown in g.source
    with pytest.raises(TypeError) as err:
        fn(None, np.empty(2))
    assert "math.sin(v0)" in "".join(traceback.format_exception(err.value))


def test_numba_cache_on_a_full_disk_warns_once_and_goes_on_in_memory(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(caching.IndexDataCacheFile, "_open_for_write", _raise(errno.ENOSPC))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _two_new_gradients(1.07)
    said = _cache_warnings(caught)
    assert len(said) == 1, said
    assert "Numba's cache" in said[0] and "No space left on device" in said[0]
    assert "free some space" in said[0]
    assert not list(tmp_path.rglob("*.nbi"))  # nothing half-written
    # the first function's source was written before Numba's save failed; after
    # that, everything is compiled in memory
    assert len(list(tmp_path.glob("*.py"))) == 1


def test_a_read_only_cache_directory(fresh, tmp_path, monkeypatch):
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o555)
    if os.geteuid() == 0:  # root may write anyway: the OS says no for this directory only
        access = os.access
        monkeypatch.setattr(
            loader.os,
            "access",
            lambda p, mode, **kw: False if Path(p) == cache else access(p, mode, **kw),
        )
    try:
        monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(cache))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _two_new_gradients(0.91)
        said = _cache_warnings(caught)
        assert len(said) == 1, said
        assert f"ADCOMPILE_CACHE_DIR={cache} is not writable" in said[0]
        assert not list(cache.iterdir())
        with pytest.raises(jit_mod.CacheDirError, match="is not writable"):
            ad.cache_dir()
    finally:
        cache.chmod(0o755)


# ------------------------------------------------ item 8: compile errors are not cache damage


def _boom(x):
    return x


@overload(_boom)
def _boom_typer(x):
    raise ValueError("the typer of _boom failed")


def test_an_error_inside_numba_is_a_compile_error_compiled_once(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    mod = loader.load("def uses_boom(x):\n    return _boom(x) + 1.0\n", "probe_boom")
    mod._boom = _boom
    made = []
    njit = jit_mod.njit
    monkeypatch.setattr(jit_mod, "njit", lambda fn, **kw: made.append(fn) or njit(fn, **kw))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ad.CompileError) as err:
            jit_mod.compile_now(mod.uses_boom, "float64(float64)")
    assert _cache_warnings(caught) == []  # no false "cache was damaged"
    assert len(made) == 1  # and not compiled a second time
    message = str(err.value)
    assert "uses_boom" in message and "ValueError: the typer of _boom failed" in message
    assert "please report it" in message and str(tmp_path) in message
    assert isinstance(err.value.__cause__, ValueError)


def test_a_numba_typing_error_is_one_clear_compile_error(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    mod = loader.load("def bad(x):\n    return x.no_such_attribute\n", "probe_typing")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ad.CompileError) as err:
            jit_mod.compile_now(mod.bad, "float64(float64)")
    assert _cache_warnings(caught) == []
    first = str(err.value).splitlines()
    assert len(first) == 1  # one line, not Numba's page
    assert "TypingError: Unknown attribute 'no_such_attribute' of type float64" in first[0]
    assert isinstance(err.value.__cause__, numba.core.errors.TypingError)


def test_damaged_numba_cache_is_rebuilt_with_one_compile_not_two(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))

    def f(x):
        return x * ad.cos(x) + 0.123

    expected = math.cos(1.1) - 1.1 * math.sin(1.1)
    made: list = []
    njit = jit_mod.njit
    monkeypatch.setattr(jit_mod, "njit", lambda fn, **kw: made.append(fn) or njit(fn, **kw))
    assert ad.grad(f)(1.1) == pytest.approx(expected)
    first = len(made)
    index = sorted(Path(tmp_path).rglob("*.nbi"))
    assert index and first >= 1
    _forget_compiled_code()
    for p in index:
        p.write_bytes(b"\x80\x04not a pickle")
    made.clear()
    with pytest.warns(ad.CacheWarning, match="damaged .*rebuilt"):
        assert ad.grad(f)(1.1) == pytest.approx(expected)
    assert len(made) == first  # each function compiled once, as the first time
    _forget_compiled_code()
    made.clear()
    with warnings.catch_warnings(record=True) as caught:  # rebuilt: now a clean hit
        warnings.simplefilter("always")
        assert ad.grad(f)(1.1) == pytest.approx(expected)
    assert _cache_warnings(caught) == []
