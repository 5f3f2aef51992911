"""Generated source -> Numba functions. The only module that imports Numba.

Generated source is loaded through ``adcompile.trace.loader``, from a real file
in the cache directory named by a hash of its text: tracebacks point at it, a
user can open it, and Numba's disk cache (``cache=True``) beside it lets a
second process skip compilation. Large tapes run on one tape interpreter, generated from the
op table and compiled once (then loaded from Numba's cache).
"""

from __future__ import annotations

import contextlib
import errno
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numba
import numpy as np

from ..emit.codegen import interpreter_source
from ..trace import loader
from ..trace.loader import CacheDirError as CacheDirError
from ..trace.loader import CacheWarning as CacheWarning
from ..trace.loader import cache_dir as cache_dir
from .shared import forget_shared_code

_lock = threading.Lock()
#: Whether Numba has compiled or loaded code in this process (its registries are
#: loaded, which takes a first load about 0.35 s; later loads take milliseconds).
LOADED = False


class CompileError(RuntimeError):
    """Numba could not compile code that adcompile generated (a bug in adcompile)."""


def _on_disk(fn: Callable) -> Path | None:
    """The source file of ``fn`` if Numba may cache it beside it, else None."""
    return Path(fn.__code__.co_filename) if loader.cacheable(fn) else None


def njit(fn: Callable, inline: bool = False) -> Callable:
    """Numba-compile ``fn`` with NumPy's float semantics, cached on disk beside
    its source when it has a file there (else not cached).

    ``inline=True``: Numba inlines it into its callers (a loop's outlined body).
    A damaged cache entry is removed and rebuilt (with a :class:`CacheWarning`);
    a cache that cannot be written makes the rest of the process compile in
    memory (said once).
    """
    options: dict[str, Any] = {"error_model": "numpy", "nogil": True}
    if inline:
        options["inline"] = "always"
    path = _on_disk(fn)
    if path is None:
        return numba.njit(cache=False, **options)(fn)
    try:
        dispatcher = numba.njit(cache=True, **options)(fn)
    except RuntimeError as e:  # Numba found nowhere to keep its cache
        loader.disk_failed(path.parent, OSError(errno.EACCES, str(e)), "Numba's cache")
        return numba.njit(cache=False, **options)(fn)
    _watch_cache(dispatcher, path)
    return dispatcher


def _watch_cache(dispatcher: Any, path: Path) -> None:
    """Wrap the disk cache of ``dispatcher`` so that a load that fails is cache
    damage (removed, warned about, compiled afresh) and a save that fails is a
    directory that cannot be written (warned about once); neither is mistaken
    for an error in compiling, and nothing is compiled twice."""
    cache = getattr(dispatcher, "_cache", None)
    load = getattr(cache, "load_overload", None)
    save = getattr(cache, "save_overload", None)
    if load is None or save is None:  # (another Numba: its own behaviour stays)
        return

    def load_overload(sig: Any, target_context: Any) -> Any:
        try:
            return load(sig, target_context)
        except Exception as e:  # an unreadable index or data file
            warnings.warn(
                f"adcompile: Numba's cache for {path} was damaged ({type(e).__name__}); "
                "rebuilt it",
                CacheWarning,
                stacklevel=2,
            )
            with contextlib.suppress(OSError):
                loader.remove_numba_cache(path)
            return None  # a miss: Numba compiles and saves afresh

    def save_overload(sig: Any, data: Any) -> None:
        try:
            save(sig, data)
        except OSError as e:  # read-only, full, over quota: the compiled code still runs
            loader.disk_failed(path.parent, e, "Numba's cache")
        except Exception as e:  # (an index that cannot be read back): the same
            loader.disk_failed(path.parent, OSError(errno.EIO, _first_line(e)), "Numba's cache")

    cache.load_overload = load_overload
    cache.save_overload = save_overload


def _where(fn: Callable) -> str:
    """Where the generated source of ``fn`` can be read."""
    filename = fn.__code__.co_filename
    if filename.startswith("<"):
        return "its source is shown by ad.show_code"
    return f"with the source in {filename}"


def _first_line(error: BaseException) -> str:
    """What ``error`` says, in one line: Numba's messages run to many lines, the
    first of them often only the pipeline stage (``Failed in nopython mode ...``)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].startswith("Failed in "):
        lines = lines[1:]
    text = lines[0] if lines else ""
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _compile(dispatcher: Any, signature: Any, what: str, where: str) -> None:
    """``dispatcher.compile(signature)``, a failure of any kind a :class:`CompileError`
    that says what Numba said in one line and keeps its error as the cause."""
    global LOADED
    try:
        dispatcher.compile(signature)
        LOADED = True
    except Exception as e:  # Numba's typing errors, and internal errors alike
        raise CompileError(
            f"Numba could not compile the code adcompile generated for {what} "
            f"({_first_line(e)}); this is a bug in adcompile: please report it, {where}"
        ) from e


def compile_now(fn: Callable, signature: Any) -> Callable:
    """Compile ``fn`` for ``signature`` now (or load it from Numba's disk cache).

    A damaged cache entry is removed and rebuilt with a warning (see
    :func:`njit`); a compilation failure becomes a :class:`CompileError` that
    keeps Numba's error as its cause. Either way it is compiled once.
    """
    dispatcher = njit(fn)
    _compile(dispatcher, signature, fn.__name__, _where(fn))
    return dispatcher


def clear_cache() -> int:
    """Delete every file in the cache directory; how many were deleted.

    Raises :class:`CacheDirError` (an ``OSError``) naming the directory and the
    fix when it cannot be used, or a file in it cannot be deleted. The code
    compiled in this process is forgotten either way.
    """
    forget_shared_code()
    with _lock:
        _interpreters.clear()
    return loader.clear_files()


def compile_uncached(
    fn: Callable, sig: str, what: str, where: str, closed: bool = True
) -> Callable:
    """``fn`` compiled by Numba now for ``sig``, not cached on disk (it links in
    other compiled functions, which its text does not show); ``closed``: then
    closed to other types (a call with other types raises TypeError). A failure
    is a :class:`CompileError` naming ``what`` and ``where`` its code is read."""
    dispatcher = numba.njit(error_model="numpy", nogil=True)(fn)
    _compile(dispatcher, sig, what, where)
    if closed:
        dispatcher.disable_compile()
    return dispatcher


_interpreters: dict[str, tuple[Callable, Callable]] = {}


def interpreter() -> tuple[Callable, Callable]:
    """The compiled tape interpreter for the current op table: ``(run, check)``."""
    source = (
        "# generated by adcompile: the tape interpreter\nimport math\n\n\n" + interpreter_source()
    )
    key = loader.digest(source)
    with _lock:
        found = _interpreters.get(key)
    if found is not None:
        return found
    mod = loader.load(source, "interpreter")
    i64, f64 = numba.types.int64[::1], numba.types.float64[::1]
    found = (
        compile_now(mod.run, numba.types.none(i64, i64, i64, f64)),
        compile_now(mod.check, numba.types.boolean(numba.types.int64[:, ::1], f64)),
    )
    with _lock:
        _interpreters[key] = found
    return found


#: How an argument of a vmapped function is passed to its kernel: a float per
#: point (a 1-D array), a flat array per point (the rows of a 2-D array), or
#: the same value for every point.
VMAP_KINDS = ("scalar", "rows", "same")
_vmap_kernels: dict[tuple, Callable] = {}


def vmap_source(kinds: Sequence[str], device: str = "cpu") -> str:
    """The source of the kernel that runs ``entry`` once per point: ``vmapped(n,
    a0, a1 ..., out, ok)`` with ``out[p]`` point ``p``'s outputs and ``ok[p]``
    whether its guards held. On the CPU a ``prange`` loop (every core; each call
    of ``entry`` makes its own work arrays), on a GPU one thread per point."""
    names = [f"a{k}" for k in range(len(kinds))]
    point = [f"{a}[p]" if kind != "same" else a for a, kind in zip(names, kinds)]
    params = ", ".join(["n", *names, "out", "ok"])
    call = ", ".join([*point, "out[p]"])
    if device == "cuda":
        body = ["p = cuda.grid(1)", "if p < n:", f"    ok[p] = entry({call})"]
    else:
        body = ["for p in prange(n):", f"    ok[p] = entry({call})"]
    return f"def vmapped({params}):\n" + "".join(f"    {line}\n" for line in body)


def vmap_kernel(entry: Callable, kinds: Sequence[str]) -> Callable:
    """``entry(*point_args, out) -> ok`` (a program's ``numba``) run over ``n``
    points in parallel on the CPU cores: see :func:`vmap_source`."""
    key = (entry, tuple(kinds))
    found = _vmap_kernels.get(key)
    if found is None:
        names = {"entry": entry, "prange": numba.prange}
        vmapped = loader.load(vmap_source(kinds), "vmap_kernel", names).vmapped
        found = numba.njit(parallel=True, error_model="numpy", nogil=True)(vmapped)
        _vmap_kernels[key] = found
    return found


def cuda_vmap_kernel(
    point_fn: Callable, kinds: Sequence[str], args: Sequence[Any], n: int, n_out: int
) -> tuple[np.ndarray, np.ndarray]:
    """Run straight-line code's Python function ``point_fn(*point_args, out) -> ok``
    on a CUDA device, one thread per point: ``(outputs (n, n_out), ok (n,))``."""
    try:
        from numba import cuda
    except ImportError as e:  # pragma: no cover - numba without its CUDA part
        raise RuntimeError(_NO_CUDA) from e
    if not cuda.is_available():
        raise RuntimeError(_NO_CUDA)
    key = ("cuda", point_fn, tuple(kinds))
    kernel = _vmap_kernels.get(key)
    if kernel is None:
        names = {"entry": cuda.jit(device=True)(point_fn), "cuda": cuda}
        vmapped = loader.load(vmap_source(kinds, "cuda"), "cuda_vmap_kernel", names).vmapped
        kernel = _vmap_kernels[key] = cuda.jit(vmapped)
    on_device = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    out = cuda.device_array((n, n_out), dtype=np.float64)
    ok = cuda.device_array(n, dtype=np.bool_)
    threads = 128
    kernel[(n + threads - 1) // threads, threads](n, *on_device, out, ok)
    return out.copy_to_host(), ok.copy_to_host()


_NO_CUDA = (
    "vmap(device='cuda') found no CUDA GPU: install the extra (pip install "
    "'adcompile[cuda]', which brings numba-cuda) on a machine with an NVIDIA GPU and "
    "its driver, or set NUMBA_ENABLE_CUDASIM=1 to run Numba's CUDA simulator on the CPU "
    "(slow, for tests); or use device='cpu'"
)
