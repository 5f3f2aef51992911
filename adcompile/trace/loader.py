"""Generated source -> a module, through a real file: the one loader of every
piece of code adcompile generates.

:func:`load` writes the source to a file named by its stem and a hash of its
text, then runs it with that file name, so tracebacks, ``inspect.getsource``,
debuggers and coverage show the generated line. The file goes to the cache
directory (``ADCOMPILE_CACHE_DIR``, else ``~/.cache/adcompile``), where
Numba's disk cache can sit beside it; when that directory cannot be used, to
a temporary directory of this process (removed at exit, never cached); only
when even that cannot be written, nowhere: the text is then registered with
``linecache`` under a ``<adcompile generated ...>`` name, which tracebacks
and ``inspect`` read too. Each file is written (or checked) once per process.

Imports nothing of adcompile, and not Numba: it sits in the trace stage, whose
``Value`` loads its generated methods through it when adcompile is imported,
so that every stage from there on (the backend's compiled code and entries
included) can load through it.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import importlib.util
import linecache
import os
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

#: The OSError numbers that mean "this directory cannot be written" (read-only,
#: no permission, disk full, quota), not a damaged file.
_UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}

_lock = threading.RLock()
#: Modules loaded without names of their own, by key (stem and digest).
_modules: dict[str, ModuleType] = {}
#: The files written or checked this process: (directory, key) -> file name.
_placed: dict[tuple[str, str], str] = {}
#: Directories whose writes failed this process (path -> why): files go to the
#: temporary directory from then on, without Numba's cache.
_disk_off: dict[str, str] = {}
#: The cache directories found usable this process, by ``ADCOMPILE_CACHE_DIR``.
_usable: dict[str, Path] = {}
#: The cache problems already warned about (each is said once per process).
_warned: set[str] = set()
#: Those found by loads that do not say them (see :func:`load`), to say next.
_pending: list[str] = []
#: This process's temporary directory, when one was needed: (pid, path or None
#: when it could not be made).
_temp: tuple[int, Path | None] | None = None


class CacheWarning(UserWarning):
    """A problem with adcompile's on-disk cache: a damaged file was rebuilt, or the
    cache directory cannot be used and code is compiled without a disk cache."""


class CacheDirError(OSError):
    """``ADCOMPILE_CACHE_DIR`` (or the default ``~/.cache/adcompile``) names no
    directory that adcompile can write its cache into."""


def digest(text: str) -> str:
    """A short stable hash of generated source, used to name its file."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def load(source: str, stem: str, names: Mapping[str, Any] | None = None) -> ModuleType:
    """Run ``source`` as a module whose file holds it: ``<stem>_<digest>.py``.

    Without ``names``, one module per source text for the process (loaded once,
    importable as ``adcompile_generated.<stem>_<digest>``): compiled code, which
    Numba caches beside its file. With ``names``, a new module each call whose
    globals start as ``names`` (what the generated code reads besides builtins:
    functions, arrays, a ``__name__`` that marks its frames as adcompile's); the
    file is still written once. Such code needs no disk cache: a cache directory
    that cannot be used is said (once) by the next load of compiled code, not
    by these (``Value``'s methods are loaded when adcompile is imported).
    """
    key = f"{_safe(stem)}_{digest(source)}"
    with _lock:
        if names is None and key in _modules:
            return _modules[key]
        filename, code = _place(source, key, quiet=names is not None)
        mod = ModuleType(f"adcompile_generated.{key}")
        mod.__file__ = filename
        if names is not None:
            mod.__dict__.update(names)
        exec(code, mod.__dict__)  # noqa: S102 - adcompile's own generated code
        if names is None:
            sys.modules[mod.__name__] = mod
            _modules[key] = mod
        return mod


def cacheable(fn: Callable) -> bool:
    """Whether Numba may keep the machine code of ``fn`` on disk, beside its file: a
    function of a module :func:`load` loaded without ``names`` from the cache
    directory, which has not failed since. (Code loaded with names links in what
    they hold, which its text does not show: its machine code must not be reused.)"""
    name = fn.__globals__.get("__name__") or ""
    mod = _modules.get(name.removeprefix("adcompile_generated."))
    filename = fn.__code__.co_filename
    if mod is None or mod.__dict__ is not fn.__globals__ or filename.startswith("<"):
        return False
    parent = str(Path(filename).parent)
    return parent not in _disk_off and (_temp is None or parent != str(_temp[1]))


def _safe(stem: str) -> str:
    """``stem`` as a file name: letters, digits and ``_``, at most 60 of them."""
    if stem.isidentifier() and len(stem) <= 60:
        return stem
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in stem)[:60] or "code"


def _place(source: str, key: str, quiet: bool) -> tuple[str, CodeType]:
    """The file name ``source`` runs under (written if need be) and its code: in
    the cache directory (through Python's bytecode cache there), else this
    process's temporary directory, else none."""
    root = disk_dir(quiet)
    path = None if root is None else _write(root, source, key, cache=True, quiet=quiet)
    if path is not None:
        bytecode = not sys.dont_write_bytecode
        return path, _bytecode(path, key, source) if bytecode else compile(source, path, "exec")
    temp = _temp_dir()
    path = None if temp is None else _write(temp, source, key, cache=False, quiet=True)
    if path is None:  # no disk at all: tracebacks read the text from linecache
        path = f"<adcompile generated {key}>"
        linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    return path, compile(source, path, "exec")


def _write(folder: Path, source: str, key: str, cache: bool, quiet: bool) -> str | None:
    """The file ``folder/<key>.py``, made to hold ``source`` (checked or written once
    per process); None when it cannot be written (said once when ``folder`` is the
    cache directory)."""
    where = str(folder)
    path = _placed.get((where, key))
    if path is None:
        path = os.path.join(where, key + ".py")
        try:
            _ensure_source(path, source)
        except OSError as e:
            if cache:
                disk_failed(folder, e, "generated source", quiet)
            return None
        _placed[(where, key)] = path
    return path


def _bytecode(path: str, key: str, source: str) -> CodeType:
    """The code of ``path`` (which holds ``source``), through Python's bytecode cache
    beside it (``__pycache__``, as for an imported module): a later process reads
    it instead of compiling the source again."""
    try:
        name = f"adcompile_generated.{key}"
        return SourceFileLoader(name, path).get_code(name)
    except Exception:  # noqa: BLE001 - a damaged bytecode file: compiled from the text
        with contextlib.suppress(OSError):
            os.unlink(importlib.util.cache_from_source(path))
        return compile(source, path, "exec")


def _temp_dir() -> Path | None:
    """This process's temporary directory for generated files (made on first use,
    removed at exit), or None when none can be made."""
    global _temp
    if _temp is None or _temp[0] != os.getpid():  # (a forked child makes its own)
        try:
            path: Path | None = Path(tempfile.mkdtemp(prefix="adcompile-"))
        except OSError:
            path = None
        _temp = (os.getpid(), path)
        if path is not None:
            atexit.register(_remove_temp, os.getpid(), path)
    return _temp[1]


def _remove_temp(pid: int, path: Path) -> None:
    if os.getpid() == pid:
        shutil.rmtree(path, ignore_errors=True)


def _ensure_source(path: str, source: str) -> None:
    """Make ``path`` hold ``source`` (a damaged file is rebuilt, with a warning)."""
    try:
        with open(path, encoding="utf-8") as f:
            same: bool | None = f.read() == source
    except (OSError, UnicodeDecodeError):
        same = None if not os.path.exists(path) else False
    if same:
        return
    if same is False:
        warnings.warn(
            f"adcompile: cache file {path} was corrupt or not ours; rebuilt it",
            CacheWarning,
            stacklevel=5,
        )
        remove_numba_cache(Path(path))
    write_atomic(Path(path), source)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it: a reader sees
    the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_numba_cache(source_path: Path) -> None:
    """Delete Numba's cache files of the functions of ``source_path``."""
    for f in (source_path.parent / "__pycache__").glob(source_path.stem + ".*"):
        f.unlink(missing_ok=True)


# ------------------------------------------------------------ the cache directory


def configured_dir() -> tuple[Path, bool]:
    """The cache directory asked for, and whether ``ADCOMPILE_CACHE_DIR`` asked for it."""
    root = os.environ.get("ADCOMPILE_CACHE_DIR")
    if root:
        return Path(root).expanduser(), True
    return Path.home() / ".cache" / "adcompile", False


def dir_problem(path: Path) -> str | None:
    """What keeps ``path`` from holding the cache (it is created if missing), or None."""
    if path.exists() and not path.is_dir():
        return "is a file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a parent is a file, or a dangling link
        return "cannot be created (something in its path is not a directory)"
    except NotADirectoryError:
        return "cannot be created (something in its path is a file, not a directory)"
    except OSError as e:
        return f"cannot be created ({e.strerror or e})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "is not writable"
    return None


def problem_text(path: Path, from_env: bool, problem: str) -> str:
    """One sentence: which directory, what is wrong with it, how to fix it."""
    if from_env:
        return (
            f"the cache directory ADCOMPILE_CACHE_DIR={path} {problem}; set ADCOMPILE_CACHE_DIR "
            "to a directory you can write to, or unset it to use ~/.cache/adcompile"
        )
    return (
        f"the cache directory {path} {problem}; set ADCOMPILE_CACHE_DIR to a directory you "
        "can write to"
    )


def cache_dir() -> Path:
    """Where generated source (and Numba's cache beside it) is kept.

    ``ADCOMPILE_CACHE_DIR`` overrides the default ``~/.cache/adcompile``. The
    directory is created if missing; :class:`CacheDirError` (an ``OSError``)
    says what is wrong when it cannot be used. (Compiling does not need it:
    without a usable directory, code is compiled without a disk cache, with
    one :class:`CacheWarning`.)
    """
    path, from_env = configured_dir()
    problem = dir_problem(path)
    if problem is not None:
        raise CacheDirError(problem_text(path, from_env, problem))
    return path


_NO_DISK_CACHE = (
    "without a disk cache (generated source goes to a temporary directory of this process)"
)


def disk_dir(quiet: bool = False) -> Path | None:
    """The cache directory to write into, or None when it cannot be used (said
    once: now, or with ``quiet`` at the next call without it) or its writes failed."""
    if _pending and not quiet:
        _say_pending()
    path = _usable.get(os.environ.get("ADCOMPILE_CACHE_DIR", ""))
    if path is not None and str(path) not in _disk_off:
        return path  # (checked once per process: a write that fails later is said then)
    path, from_env = configured_dir()
    if str(path) in _disk_off:
        return None
    problem = dir_problem(path)
    if problem is None:
        _usable[os.environ.get("ADCOMPILE_CACHE_DIR", "")] = path
        return path
    warn_once(
        f"dir:{path}:{problem}",
        f"{problem_text(path, from_env, problem)}. Compiling {_NO_DISK_CACHE}.",
        quiet,
    )
    return None


def disk_failed(directory: Path, error: OSError, what: str, quiet: bool = False) -> None:
    """Writing ``what`` into ``directory`` failed: no disk cache from now on (said
    once: now, or with ``quiet`` at the next :func:`disk_dir` without it)."""
    why = error.strerror or str(error)
    _disk_off[str(directory)] = why
    fix = (
        "free some space"
        if error.errno in (errno.ENOSPC, errno.EDQUOT)
        else "make it writable"
        if error.errno in _UNWRITABLE
        else "check it"
    )
    warn_once(
        f"write:{directory}",
        f"cannot write {what} into the cache directory {directory} ({why}); compiling "
        f"{_NO_DISK_CACHE} for the rest of this process ({fix}, or set ADCOMPILE_CACHE_DIR "
        "to another directory)",
        quiet,
    )


def warn_once(key: str, message: str, quiet: bool = False) -> None:
    """A :class:`CacheWarning`, the first time ``key`` comes up in this process
    (``quiet``: kept until the next :func:`disk_dir` that is not quiet)."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
        if quiet:
            _pending.append(message)
            return
    warnings.warn(f"adcompile: {message}", CacheWarning, stacklevel=4)


def _say_pending() -> None:
    with _lock:
        said = list(_pending)
        _pending.clear()
    for message in said:
        warnings.warn(f"adcompile: {message}", CacheWarning, stacklevel=4)


def forget() -> None:
    """Forget what was loaded and which directories failed (``clear_cache``): the
    next :func:`load` of each source writes its file again."""
    with _lock:
        _modules.clear()
        _placed.clear()
        _usable.clear()
        _disk_off.clear()


def clear_files() -> int:
    """Delete every file in the cache directory; how many were deleted (see
    ``adcompile.clear_cache``)."""
    with _lock:
        forget()
        path, from_env = configured_dir()
        problem = dir_problem(path)
        if problem is not None:
            raise CacheDirError(problem_text(path, from_env, problem))
        n = 0
        for f in sorted(path.rglob("*"), reverse=True):
            try:
                if f.is_dir() and not f.is_symlink():
                    f.rmdir()
                else:
                    f.unlink(missing_ok=True)
                    n += 1
            except OSError as e:
                raise CacheDirError(
                    f"cannot delete {f} from the cache directory {path} "
                    f"({e.strerror or e}); delete it yourself, or make the directory writable"
                ) from None
    return n
