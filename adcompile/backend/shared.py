"""Compiled code shared between traces of the same tape, in this process.

A trace that gives a tape seen before (by ``Tape.digest``, with what else the
code depends on) reuses the code made for it, whichever transform made it:
``grad`` then ``value_and_grad`` of one function compile once. This module
imports no Numba (array code, which needs none, is kept here too).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()

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


def forget_shared_code() -> None:
    """Forget the compiled code kept for later traces of the same tapes."""
    global _shared_slots
    with _lock:
        _shared.clear()
        _shared_slots = 0
