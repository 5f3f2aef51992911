"""The Dask side of ``adcompile.distributed``: the client, and small helpers shared by
``value_and_grad`` and ``vmap``.

``dask_distributed()`` imports Dask (an ImportError says how to install it);
``get_client(client)`` is ``client``, else the current Dask client, else one on a
``LocalCluster`` started once per process. ``is_dask``, ``worker_threads``,
``even_chunks``, ``row_ranges``, ``same`` (a task holding its argument) and
``new_tag`` (a key's unique end) are what both transforms use to split rows and name
tasks.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Sequence
from typing import Any

INSTALL = 'pip install "adcompile[distributed]"'

_started: list[Any] = []  # the (cluster, client) this module started, if any
_start_lock = threading.Lock()


def dask_distributed() -> Any:
    """The ``distributed`` module, or an ImportError saying how to install it."""
    try:
        import dask  # noqa: F401
        import dask.array  # noqa: F401
        import distributed
    except ImportError as e:
        raise ImportError(
            f"adcompile.distributed needs Dask and dask.distributed: {INSTALL}"
        ) from e
    return distributed


def is_dask(a: Any) -> bool:
    """Whether ``a`` is a ``dask.array`` (told without importing Dask)."""
    return type(a).__module__.startswith("dask.array") and hasattr(a, "chunks")


def get_client(client: Any = None) -> Any:
    """``client``, else the current Dask client, else one on a new ``LocalCluster``
    (started once per process; a line on stderr says so and gives its dashboard)."""
    distributed = dask_distributed()
    if client is not None:
        return client
    try:
        return distributed.get_client()
    except ValueError:
        pass
    with _start_lock:
        if not _started:
            workers = max(1, min(os.cpu_count() or 1, 4))
            cluster = distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True
            )
            new = distributed.Client(cluster)
            _started.append((cluster, new))
            print(
                f"adcompile: no Dask client given or running; started a LocalCluster of "
                f"{workers} worker processes (dashboard {new.dashboard_link})",
                file=sys.stderr,
            )
        return _started[0][1]


def worker_threads(client: Any) -> int:
    """The threads of ``client``'s workers, in all (at least 1)."""
    info = client.scheduler_info()
    return max(1, sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()))


def even_chunks(n: int, parts: int) -> list[int]:
    """The lengths of ``parts`` chunks (at most ``n``) of ``n`` rows, differing by one at most."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def row_ranges(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """``(lo, hi)`` of consecutive chunks of rows of these lengths."""
    out, lo = [], 0
    for n in lengths:
        out.append((lo, lo + n))
        lo += n
    return out


def same(a: Any) -> Any:
    """``a`` itself: a task that holds a value on a worker (the scheduler keeps a task's
    input, so a copy lost with its worker is made again)."""
    return a


def new_tag() -> str:
    """A random ending that makes a task's key unique."""
    return uuid.uuid4().hex[:8]
