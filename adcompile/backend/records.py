"""What compiling reads besides the tape, with no Numba: the size settings that pick
the kind of code, and the records of compiled code kept on disk (``read_record``:
folded, straight-line and batch-generic code), keyed with a hash of adcompile's
own source (``code_version``). A warm process
reads these before it imports Numba, or without importing it at all.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..trace import loader

#: Tapes with more slots than this run on the tape interpreter instead of
#: straight-line code (Numba needs about 1 ms per generated statement).
STRAIGHT_LINE_LIMIT = 1000
#: Tapes with at least this many slots are searched for repeated segments to
#: fold into loops (``adcompile.loops``); smaller ones compile quickly as they are.
FOLD_MIN_SLOTS = 200

#: The version of the code that makes records (``read_record``): a hash of
#: adcompile's own source files, so that a record never outlives the printer
#: that wrote it.
_code_version: str | None = None


def code_files() -> list[Path]:
    """The source files of every module of adcompile, its stage folders' included."""
    root = Path(__file__).resolve().parent.parent
    return sorted(root.rglob("*.py"))


def code_version() -> str:
    """A hash of the source of every module of adcompile (read once per process)."""
    global _code_version
    if _code_version is None:
        h = hashlib.blake2b(digest_size=12)
        root = Path(__file__).resolve().parent.parent
        for path in code_files():
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
        _code_version = h.hexdigest()
    return _code_version


def _record_path(digest: str) -> Path | None:
    root = loader.disk_dir()
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
        loader.write_atomic(path, json.dumps({**record, "digest": digest}))
    except OSError as e:
        loader.disk_failed(path.parent.parent, e, "a record of compiled code")
