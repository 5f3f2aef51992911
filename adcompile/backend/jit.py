"""Generated source -> Numba functions. The only module that imports Numba.

Generated source is written to a real file in the cache directory, named by
a hash of its text, and imported from there: tracebacks point at it, a user
can open it, and Numba's disk cache (``cache=True``) lets a second process
skip compilation. Large tapes run on one tape interpreter, generated from the
op table and compiled once (then loaded from Numba's cache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import importlib.util
import json
import linecache
import os
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numba
import numpy as np

from ..emit.codegen import (
    CodeFacts,
    Outputs,
    Param,
    Program,
    digest,
    interpreter_source,
    module_source,
    straight_line,
    to_program,
)
from ..ir.tape import Tape

#: Tapes with more slots than this run on the tape interpreter instead of
#: straight-line code (Numba needs about 1 ms per generated statement).
STRAIGHT_LINE_LIMIT = 1000
#: Tapes with at least this many slots are searched for repeated segments to
#: fold into loops (``adcompile.loops``); smaller ones compile quickly as they are.
FOLD_MIN_SLOTS = 200

_lock = threading.Lock()
_empty = np.empty
_modules: dict[str, ModuleType] = {}
#: Directories whose disk cache failed this process (path -> why): code is
#: compiled in memory from then on, without Numba's cache.
_disk_off: dict[str, str] = {}
#: The cache problems already warned about (each is said once per process).
_warned: set[str] = set()
#: The OSError numbers that mean "this directory cannot be written" (read-only,
#: no permission, disk full, quota), not a damaged file.
_UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}


class CacheWarning(UserWarning):
    """A problem with adcompile's on-disk cache: a damaged file was rebuilt, or the
    cache directory cannot be used and code is compiled in memory instead."""


class CacheDirError(OSError):
    """``ADCOMPILE_CACHE_DIR`` (or the default ``~/.cache/adcompile``) names no
    directory that adcompile can write its cache into."""


class CompileError(RuntimeError):
    """Numba could not compile code that adcompile generated (a bug in adcompile)."""


def _configured_dir() -> tuple[Path, bool]:
    """The cache directory asked for, and whether ``ADCOMPILE_CACHE_DIR`` asked for it."""
    root = os.environ.get("ADCOMPILE_CACHE_DIR")
    if root:
        return Path(root).expanduser(), True
    return Path.home() / ".cache" / "adcompile", False


def _dir_problem(path: Path) -> str | None:
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


def _problem_text(path: Path, from_env: bool, problem: str) -> str:
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
    without a usable directory, code is compiled in memory, with one
    :class:`CacheWarning`.)
    """
    path, from_env = _configured_dir()
    problem = _dir_problem(path)
    if problem is not None:
        raise CacheDirError(_problem_text(path, from_env, problem))
    return path


_warn_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    """A :class:`CacheWarning`, the first time ``key`` comes up in this process."""
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(f"adcompile: {message}", CacheWarning, stacklevel=3)


def _disk_dir() -> Path | None:
    """The cache directory to compile into, or None to compile in memory (a
    directory that cannot be used, or whose writes failed, is warned about once)."""
    path, from_env = _configured_dir()
    off = _disk_off.get(str(path))
    if off is not None:
        return None
    problem = _dir_problem(path)
    if problem is None:
        return path
    _warn_once(
        f"dir:{path}:{problem}",
        _problem_text(path, from_env, problem) + ". Compiling in memory, without a disk cache.",
    )
    return None


def _disk_failed(directory: Path, error: OSError, what: str) -> None:
    """Writing ``what`` into ``directory`` failed: compile in memory from now on (said once)."""
    why = error.strerror or str(error)
    _disk_off[str(directory)] = why
    fix = (
        "free some space"
        if error.errno in (errno.ENOSPC, errno.EDQUOT)
        else "make it writable"
        if error.errno in _UNWRITABLE
        else "check it"
    )
    _warn_once(
        f"write:{directory}",
        f"cannot write {what} into the cache directory {directory} ({why}); compiling in "
        f"memory, without a disk cache, for the rest of this process ({fix}, or set "
        "ADCOMPILE_CACHE_DIR to another directory)",
    )


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_source(source: str, stem: str) -> ModuleType:
    """Import ``source`` from a file in the cache directory named by its hash.

    Without a usable cache directory (see :func:`cache_dir`), or when writing
    there fails (read-only, disk full), the source is run in memory instead,
    under a ``<adcompile generated ...>`` file name that tracebacks and
    ``linecache`` know; Numba then does not cache it.
    """
    key = f"{stem}_{digest(source)}"
    with _lock:
        mod = _modules.get(key)
        if mod is not None:
            return mod
        root = _disk_dir()
        path = None if root is None else root / f"{key}.py"
        if path is not None:
            try:
                _ensure_source(path, source)
            except OSError as e:
                _disk_failed(path.parent, e, "generated source")
                path = None
        name = f"adcompile_generated.{key}"
        if path is not None:
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            mod = _module_in_memory(source, name, key)
        sys.modules[name] = mod
        _modules[key] = mod
        return mod


def _ensure_source(path: Path, source: str) -> None:
    """Make ``path`` hold ``source`` (a damaged file is rebuilt, with a warning)."""
    try:
        same: bool | None = path.read_text() == source
    except (OSError, UnicodeDecodeError):
        same = None if not path.exists() else False
    if same:
        return
    if same is False:
        warnings.warn(
            f"adcompile: cache file {path} was corrupt or not ours; rebuilt it",
            CacheWarning,
            stacklevel=4,
        )
        _remove_numba_cache(path)
    _write_atomic(path, source)


def _module_in_memory(source: str, name: str, key: str) -> ModuleType:
    """Run ``source`` as module ``name`` with no file behind it (no disk cache)."""
    filename = f"<adcompile generated {key}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    mod = ModuleType(name)
    exec(compile(source, filename, "exec"), mod.__dict__)
    return mod


def _on_disk(fn: Callable) -> Path | None:
    """The source file of ``fn`` if Numba may cache it beside it, else None."""
    filename = fn.__code__.co_filename
    if filename.startswith("<"):
        return None
    path = Path(filename)
    return None if str(path.parent) in _disk_off else path


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
        _disk_failed(path.parent, OSError(errno.EACCES, str(e)), "Numba's cache")
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
                _remove_numba_cache(path)
            return None  # a miss: Numba compiles and saves afresh

    def save_overload(sig: Any, data: Any) -> None:
        try:
            save(sig, data)
        except OSError as e:  # read-only, full, over quota: the compiled code still runs
            _disk_failed(path.parent, e, "Numba's cache")
        except Exception as e:  # (an index that cannot be read back): the same
            _disk_failed(path.parent, OSError(errno.EIO, _first_line(e)), "Numba's cache")

    cache.load_overload = load_overload
    cache.save_overload = save_overload


def _remove_numba_cache(source_path: Path) -> None:
    for f in (source_path.parent / "__pycache__").glob(source_path.stem + ".*"):
        f.unlink(missing_ok=True)


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
    try:
        dispatcher.compile(signature)
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


def compile_folded_source(
    source: str, fname: str, functions: Sequence[str], params: Sequence[Param], lead: str = ""
) -> Callable:
    """Compile ``fname`` of folded ``source``: ``fname(lead?, *params, v, c, out) -> bool``.

    ``functions`` are the outlined loop bodies it calls; Numba inlines them.
    ``lead`` is the type of an argument before the parameters (``"int64"``
    for the batch length of batch-generic code), or empty.
    """
    mod = load_source(source, fname)
    for name in functions:
        fn = getattr(mod, name)
        if not hasattr(fn, "py_func"):  # not yet a Numba function (a reloaded module)
            setattr(mod, name, njit(fn, inline=True))
    arr = "float64[::1]"
    types = ([lead] if lead else []) + ["float64" if p.size is None else arr for p in params]
    return compile_now(getattr(mod, fname), f"boolean({', '.join(types + [arr] * 3)})")


#: Compiled code by the digest of the tape it was made from (``Tape.digest``, with
#: what else the code depends on), for every transform of this process: a trace
#: that gives a tape seen before reuses its code. The most recent ``SHARED_CODES``
#: are kept, of tapes of ``SHARED_MAX_SLOTS`` slots in all.
_shared: OrderedDict[str, tuple[Any, list, int]] = OrderedDict()
_shared_slots = 0
SHARED_CODES = 256
SHARED_MAX_SLOTS = 2_000_000


def shared_code(digest: str, ops: list, size: int, build: Callable[[], Any]) -> tuple[Any, bool]:
    """The compiled code kept for ``digest`` (and True), or ``build()``'s, then kept
    (and False). ``ops`` are the tape's ops (kept alive with it: an op is told
    apart by identity too), ``size`` its slots."""
    global _shared_slots
    key = digest + repr(sorted((op.name, id(op)) for op in ops))
    with _lock:
        hit = _shared.get(key)
        if hit is not None:
            _shared.move_to_end(key)
            return hit[0], True
    compiled = build()
    with _lock:
        _shared[key] = (compiled, ops, size)
        _shared_slots += size
        while len(_shared) > SHARED_CODES or _shared_slots > SHARED_MAX_SLOTS:
            _shared_slots -= _shared.popitem(last=False)[1][2]
    return compiled, False


#: The version of the code that makes records (``read_record``): a hash of
#: adcompile's own source files, so that a record never outlives the printer
#: that wrote it.
_code_version: str | None = None


def code_version() -> str:
    """A hash of the source of every module of adcompile (read once per process)."""
    global _code_version
    if _code_version is None:
        h = hashlib.blake2b(digest_size=12)
        for path in sorted(Path(__file__).parent.glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
        _code_version = h.hexdigest()
    return _code_version


def _record_path(digest: str) -> Path | None:
    root = _disk_dir()
    return None if root is None else root / "tapes" / f"{digest}.json"


def read_record(digest: str) -> dict | None:
    """What was kept of the code compiled from the tape of ``digest`` (by
    :func:`write_record`, in this process or another), or None."""
    path = _record_path(digest)
    if path is None:
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or damaged: made again
        return None
    return record if isinstance(record, dict) and record.get("digest") == digest else None


def write_record(digest: str, record: dict) -> None:
    """Keep ``record`` (plain JSON data) for the tape of ``digest`` in the cache
    directory; a directory that cannot take it is warned about once, as for sources."""
    path = _record_path(digest)
    if path is None:
        return
    try:
        path.parent.mkdir(exist_ok=True)
        _write_atomic(path, json.dumps({**record, "digest": digest}))
    except OSError as e:
        _disk_failed(path.parent.parent, e, "a record of compiled code")


def forget_shared_code() -> None:
    """Forget the compiled code kept for later traces of the same tapes."""
    global _shared_slots
    with _lock:
        _shared.clear()
        _shared_slots = 0


def clear_cache() -> int:
    """Delete every file in the cache directory; how many were deleted.

    Raises :class:`CacheDirError` (an ``OSError``) naming the directory and the
    fix when it cannot be used, or a file in it cannot be deleted. The code
    compiled in this process is forgotten either way.
    """
    forget_shared_code()
    with _lock:
        _modules.clear()
        _interpreters.clear()
        _disk_off.clear()
        path, from_env = _configured_dir()
        problem = _dir_problem(path)
        if problem is not None:
            raise CacheDirError(_problem_text(path, from_env, problem))
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


class Compiled:
    """A tape compiled to a function of flat float arguments (``force`` a kind,
    ``why`` the reason given for it).

    Calling it with the arguments (floats, or flat float64 arrays, as in
    ``params``) returns ``(ok, outputs)``: ``ok`` is False when a guard
    recorded while tracing does not hold for these inputs. Straight-line code
    has its Numba function as ``fn(*args, out) -> ok``, folded code its
    :class:`LoopCompiled` as ``folded``.
    """

    def __init__(
        self,
        tape: Tape,
        params: Sequence[Param],
        fname: str,
        doc: str = "",
        force: str | None = None,
        why: str | None = None,
    ) -> None:
        self.tape = tape
        self.params = list(params)
        self.n_out = len(tape.outputs)
        self._source: str | None = None
        plan = None
        searched = len(tape) >= FOLD_MIN_SLOTS  # (smaller tapes are not searched for loops)
        if force == "folded" or (force is None and searched):
            from ..emit.fold import loop_source  # the value code of the tape, folded into loops

            plan = loop_source(tape, params, None, fname, doc, STRAIGHT_LINE_LIMIT)
        if force is None:
            kind = "straight-line" if len(tape) <= STRAIGHT_LINE_LIMIT else "interpreter"
            if plan is not None:
                kind = "folded"
        elif force in ("straight-line", "folded", "interpreter"):
            kind = force
        else:
            raise ValueError(
                f"force={force!r}: choose 'straight-line', 'folded' or 'interpreter' (or None)"
            )
        self.kind = kind
        if kind == "folded":
            if plan is None:
                raise ValueError(f"force='folded': the tape of {fname} does not fold into loops")
            folded = self.folded = LoopCompiled(plan, params, fname, lambda: tape)
            self.explanation = folded.explanation
            self.source = folded.source
            self.call = folded.call
        elif kind == "straight-line":
            why = (
                "as asked"
                if force
                else "no repeated segments worth folding into loops"
                if searched
                else f"tapes under {FOLD_MIN_SLOTS} slots are not searched for loops"
            )
            self.explanation = (
                f"Straight-line code: one statement per primitive ({tape.n_ops} operations; "
                f"{why})."
            )
            self.source = module_source(
                [_comment(self.explanation) + straight_line(tape, fname, params, doc)]
            )
            f64, arr = numba.types.float64, numba.types.float64[::1]
            sig = numba.types.boolean(*[f64 if p.size is None else arr for p in params], arr)
            self.fn = compile_now(getattr(load_source(self.source, fname), fname), sig)
            self.call = self._call_straight
        else:
            self.program: Program = to_program(tape)
            self.explanation = f"{len(tape)} slots, run on the compiled tape interpreter" + (
                f": {why}."
                if why
                else " (as asked)."
                if force
                else f": straight-line code above {STRAIGHT_LINE_LIMIT} slots would take long "
                "to compile"
                + (
                    ", and folding repeated segments would not shorten it enough."
                    if searched
                    else "."
                )
            )
            self._header = _comment(f"{fname}: {self.explanation}")  # (source: on use)
            self._run, self._check = interpreter()
            self.call = self._call_interpreter

    def __call__(self, *args: Any) -> tuple[bool, np.ndarray]:
        return self.call(*args)

    @property
    def source(self) -> str:
        """The generated source; for the interpreter, the tape it runs, printed
        when first asked for (a large tape takes seconds to print)."""
        if self._source is None:
            lines = str(self.tape).split("\n")
            self._source = self._header + "# The tape:\n" + "".join(f"# {ln}\n" for ln in lines)
        return self._source

    @source.setter
    def source(self, text: str) -> None:
        self._source = text

    def _call_straight(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = _empty(self.n_out)
        return self.fn(*args, out), out

    def _call_interpreter(self, *args: Any) -> tuple[bool, np.ndarray]:
        p = self.program
        vals = p.init.copy()
        vals[p.inputs] = (
            np.concatenate([np.atleast_1d(np.asarray(a, np.float64)).ravel() for a in args])
            if args
            else []
        )
        self._run(p.opcodes, p.arg0, p.arg1, vals)
        ok = self._check(p.guards, vals) if len(p.guards) else True
        return ok, vals[p.outputs]


def compile_direct(tape: Tape, params: Sequence[Param], fname: str, outputs: Outputs) -> Callable:
    """Straight-line code of ``tape`` with its outputs placed as ``outputs`` says,
    as a Numba function that the fast entry of a transform calls directly
    (through Numba's dispatcher, which checks the arguments' types in C).

    It is compiled for ``params`` and then closed to other types: a call with
    other types raises TypeError. An array argument of another length, or a
    failed guard, returns ``outputs.failure``.
    """
    source = module_source(
        [
            _comment(
                f"{fname}: the code of the transform's calls, its outputs placed where "
                "the caller reads them (arrays it passes, or returned)"
            )
            + straight_line(tape, fname, params, outputs=outputs)
        ]
    )
    f64, arr = numba.types.float64, numba.types.float64[::1]
    types = [f64 if p.size is None else arr for p in params] + [arr] * len(outputs.arrays)
    fn = compile_now(getattr(load_source(source, fname), fname), tuple(types))
    fn.disable_compile()
    return fn


def compile_direct_folded(
    folded: Any,
    sizes: Sequence[int | None],
    fname: str,
    arrays: Sequence[tuple[str, int, int]],
    success: str,
    n: int | None = None,
) -> tuple[Callable, int]:
    """A Numba function that calls folded code and places its outputs as the
    fast entry of a transform reads them: ``fn(*args, *arrays, s) -> result``.

    ``folded`` is a :class:`LoopCompiled` (or folded code shaped like one),
    or batch-generic code (``adcompile.batch``) run at batch length ``n``;
    ``sizes`` are its arguments' (None for a float). ``arrays`` are ``(name,
    start, size)``: each such parameter receives ``out[start:start + size]``;
    ``success`` is returned (an expression of ``out``); None when a guard
    fails or an array argument has another length than traced. ``s`` is
    scratch space of the returned size (the work array, then ``out``), kept
    by the caller between calls. As ``compile_direct``, it is closed to other
    types than compiled for (TypeError). Not cached on disk: it links the
    folded code in, which its text does not show.
    """
    names = [f"a{k}" for k in range(len(sizes))]
    lines = [f"def {fname}({', '.join([*names, *(a[0] for a in arrays), 's'])}):"]
    for name, size in zip(names, sizes):
        if size is not None:
            lines += [f"    if {name}.shape[0] != {size}:", "        return None"]
    if n is None:
        work, lead = max(folded.work_size, 1), []
    else:
        a, b = folded.work_size
        work, lead = max(a * n + b, 1), [str(n)]
    lines += [
        f"    out = s[{work}:]",
        f"    if not main({', '.join([*lead, *names, 's', 'columns', 'out'])}):",
        "        return None",
    ]
    for name, start, size in arrays:  # loops: Numba compiles slice copies slowly
        lines += [f"    for k in range({size}):", f"        {name}[k] = out[{start} + k]"]
    lines.append(f"    return {success}")
    ns: dict[str, Any] = {"main": folded.fn, "columns": folded.columns}
    exec(compile("\n".join(lines) + "\n", f"<adcompile direct call of {fname}>", "exec"), ns)
    f64, arr = numba.types.float64, numba.types.float64[::1]
    types = [f64 if size is None else arr for size in sizes] + [arr] * (len(arrays) + 1)
    fn = numba.njit(error_model="numpy", nogil=True)(ns[fname])
    _compile(fn, tuple(types), f"the direct call of {fname}", "with the code it calls")
    fn.disable_compile()
    return fn, work + folded.n_out


def _comment(text: str) -> str:
    lines = textwrap.wrap(text, 76, break_on_hyphens=False)
    return "".join(f"# {line}\n" for line in lines)


_interpreters: dict[str, tuple[Callable, Callable]] = {}


def interpreter() -> tuple[Callable, Callable]:
    """The compiled tape interpreter for the current op table: ``(run, check)``."""
    source = (
        "# generated by adcompile: the tape interpreter\nimport math\n\n\n" + interpreter_source()
    )
    key = digest(source)
    with _lock:
        found = _interpreters.get(key)
    if found is not None:
        return found
    mod = load_source(source, "interpreter")
    i64, f64 = numba.types.int64[::1], numba.types.float64[::1]
    found = (
        compile_now(mod.run, numba.types.none(i64, i64, i64, f64)),
        compile_now(mod.check, numba.types.boolean(numba.types.int64[:, ::1], f64)),
    )
    with _lock:
        _interpreters[key] = found
    return found


def numba_entry(compiled: Any, params: Sequence[Param], n: int | None = None) -> Callable:
    """One Numba function ``entry(*args, out) -> ok`` for compiled code of any kind,
    callable from the user's own ``@numba.njit`` code.

    ``args`` are as in ``params`` (a float, or a flat float64 array); ``out``
    receives the outputs; the result is False when a guard fails. ``compiled``
    is a :class:`Compiled`, or batch-generic code (``adcompile.batch``) for the
    batch length ``n``. What the code needs besides the arguments (its work
    array, its per-repetition constants, the interpreter's program) is made or
    held inside, so the signature is the same for every kind.
    """
    names = [f"a{k}" for k in range(len(params))]
    args = ", ".join(names)
    ns: dict[str, Any] = {"np": np}
    kind = getattr(compiled, "kind", "")
    if n is not None:  # batch-generic code at length n
        a, b = compiled.work_size
        ns.update(inner=compiled.fn, columns=compiled.columns)
        body = [
            f"work = np.empty({max(a * n + b, 1)})",
            f"return inner({n}, {args}{', ' if args else ''}work, columns, out)",
        ]
    elif kind == "straight-line":
        ns["inner"] = compiled.fn
        body = [f"return inner({args}{', ' if args else ''}out)"]
    elif kind == "folded":
        f = compiled.folded
        ns.update(inner=f.fn, columns=f.columns)
        body = [
            f"work = np.empty({max(f.work_size, 1)})",
            f"return inner({args}{', ' if args else ''}work, columns, out)",
        ]
    else:  # the tape interpreter, with the program's arrays as constants
        p = compiled.program
        run, check = interpreter()
        ns.update(
            run=run,
            check=check,
            opcodes=p.opcodes,
            arg0=p.arg0,
            arg1=p.arg1,
            init=p.init,
            inputs=p.inputs,
            outputs=p.outputs,
            guards=p.guards,
        )
        body, start = ["vals = init.copy()"], 0
        for name, prm in zip(names, params):
            if prm.size is None:
                body.append(f"vals[inputs[{start}]] = {name}")
                start += 1
            else:
                body.append(f"vals[inputs[{start}:{start + prm.size}]] = {name}")
                start += prm.size
        body += [
            "run(opcodes, arg0, arg1, vals)",
            "out[:] = vals[outputs]",
            "return check(guards, vals)" if len(p.guards) else "return True",
        ]
    source = f"def entry({args}{', ' if args else ''}out):\n" + "".join(
        f"    {line}\n" for line in body
    )
    exec(compile(source, "<adcompile numba entry>", "exec"), ns)
    return numba.njit(error_model="numpy", nogil=True)(ns["entry"])


class LoopCompiled:
    """A primal tape folded into loops, differentiated as loops
    (``adcompile.loops.loop_source``) and compiled.

    Called as :class:`Compiled` (``call(*args) -> (ok, outputs)``), and shaped
    like folded code for the fast entry and ``numba_entry``: ``fn(*args,
    work, columns, out) -> ok``. ``tape`` is the unrolled tape of the same
    outputs, made only when asked for (to name the primitive that made a
    nan).
    """

    kind = "folded"

    def __init__(
        self, loops: Any, params: Sequence[Param], fname: str, unrolled: Callable
    ) -> None:
        self.params = list(params)
        self.source, self.explanation = loops.source, loops.explanation
        self.facts = loops.facts
        self.program, self.grad = loops.program, loops.grad
        self.timings = dict(loops.timings)
        self.columns, self.work_size, self.n_out = (
            loops.code.columns,
            loops.code.work_size,
            loops.n_out,
        )
        clock = time.perf_counter()
        self.fn = compile_folded_source(self.source, fname, [], params)
        self.timings["compile"] = time.perf_counter() - clock
        self.local = threading.local()
        self.folded = self
        self._unrolled = unrolled
        self._tape: Tape | None = None

    def record(self) -> dict:
        """What :meth:`restored` needs to make this code again, as JSON data."""
        return {
            "kind": "loops",
            "source": self.source,
            "explanation": self.explanation,
            "facts": dataclasses.asdict(self.facts),
            "columns": np.asarray(self.columns).tolist(),
            "columns_dtype": str(np.asarray(self.columns).dtype),
            "work_size": int(self.work_size),
            "n_out": int(self.n_out),
        }

    @classmethod
    def restored(
        cls, record: dict, params: Sequence[Param], fname: str, unrolled: Callable
    ) -> LoopCompiled:
        """The code a :meth:`record` describes, compiled (or loaded from Numba's cache)
        without folding the tape again."""
        self = cls.__new__(cls)
        self.params = list(params)
        self.source, self.explanation = record["source"], record["explanation"]
        self.facts = CodeFacts(**record["facts"])
        self.program = self.grad = None  # (not kept: only the loop printer reads them)
        self.columns = np.asarray(record["columns"], dtype=record["columns_dtype"])
        self.work_size, self.n_out = record["work_size"], record["n_out"]
        clock = time.perf_counter()
        self.fn = compile_folded_source(self.source, fname, [], params)
        self.timings = {"compile": time.perf_counter() - clock}
        self.local = threading.local()
        self.folded = self
        self._unrolled = unrolled
        self._tape = None
        return self

    @property
    def tape(self) -> Tape:
        """The unrolled tape of the outputs (the reference the loops are checked against)."""
        if self._tape is None:
            self._tape = self._unrolled()
        return self._tape

    def __call__(self, *args: Any) -> tuple[bool, np.ndarray]:
        return self.call(*args)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        """Run on flat float arguments: ``(ok, outputs)``, ok False when a guard fails."""
        out = np.empty(self.n_out)
        # the work array is kept between calls (one per thread): a large one costs
        # more to allocate and page in than a small loop takes to run
        work = getattr(self.local, "work", None)
        if work is None:
            work = self.local.work = np.empty(max(self.work_size, 1))
        return self.fn(*args, work, self.columns, out), out


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
    """``entry(*point_args, out) -> ok`` (a ``numba_entry``) run over ``n`` points in
    parallel on the CPU cores: see :func:`vmap_source`."""
    key = (entry, tuple(kinds))
    found = _vmap_kernels.get(key)
    if found is None:
        ns: dict[str, Any] = {"entry": entry, "prange": numba.prange}
        exec(compile(vmap_source(kinds), "<adcompile vmap kernel>", "exec"), ns)
        found = numba.njit(parallel=True, error_model="numpy", nogil=True)(ns["vmapped"])
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
        ns: dict[str, Any] = {"entry": cuda.jit(device=True)(point_fn), "cuda": cuda}
        exec(compile(vmap_source(kinds, "cuda"), "<adcompile cuda vmap kernel>", "exec"), ns)
        kernel = _vmap_kernels[key] = cuda.jit(ns["vmapped"])
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


class BasisCompiled:
    """A Jacobian or Hessian made one basis vector at a time: a Numba loop calls
    ``one`` (compiled code whose last argument is the basis vector ``e``) with
    each unit vector and puts entry ``i`` of result ``j`` at ``out[dest[j, i]]``.

    Shaped like straight-line code (``fn(*args, out) -> ok``) for the fast
    entry, ``numba_entry`` and ``vmap``; ``source`` shows the loop, then the
    code it calls.
    """

    kind = "straight-line"

    def __init__(
        self,
        one: Compiled,
        params: Sequence[Param],
        m: int,
        dest: np.ndarray,
        n_out: int,
        fname: str,
    ) -> None:
        self.one, self.params, self.n_out = one, list(params), n_out
        self.tape = one.tape
        k = dest.shape[1]
        names = [p.name for p in params]
        args = "".join(f"{a}, " for a in names)
        loop = (
            f"def {fname}({args}out):\n"
            f"    _e = _np.zeros({m})\n"
            f"    _res = _np.empty({k})\n"
            "    _ok = True\n"
            f"    for _j in range({m}):  # one basis vector e_j at a time\n"
            "        _e[_j] = 1.0\n"
            f"        if not _one({args}_e, _res):\n"
            "            _ok = False\n"
            "        _e[_j] = 0.0\n"
            f"        for _i in range({k}):\n"
            "            out[_dest[_j, _i]] = _res[_i]\n"
            "    return _ok\n"
        )
        ns: dict[str, Any] = {
            "_np": np,
            "_one": numba_entry(one, [*params, Param("e", m)]),
            "_dest": np.ascontiguousarray(dest, dtype=np.int64),
        }
        exec(compile(loop, f"<adcompile {fname}>", "exec"), ns)
        f64, arr = numba.types.float64, numba.types.float64[::1]
        sig = numba.types.boolean(*[f64 if p.size is None else arr for p in params], arr)
        self.fn = numba.njit(error_model="numpy", nogil=True)(ns[fname])
        _compile(self.fn, sig, fname, "with the code it calls (its .source)")
        self.explanation = f"A loop over {m} basis vectors around: {one.explanation}"
        self.source = (
            _comment(self.explanation)
            + "# _dest[j, i]: where entry i of the result for e_j goes\n"
            + loop
            + "\n\n# _one(..., e, result): the code for one basis vector\n"
            + one.source
        )

    def __call__(self, *args: Any) -> tuple[bool, np.ndarray]:
        return self.call(*args)

    def call(self, *args: Any) -> tuple[bool, np.ndarray]:
        out = _empty(self.n_out)
        return self.fn(*args, out), out
