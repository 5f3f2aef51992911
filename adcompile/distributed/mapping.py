"""``adcompile.distributed.vmap``: ``ad.vmap(f)`` over the rows of many points, split
across Dask workers.

``f`` (a function, any transform of one, or ``ad.vmap`` of one) is described in a
picklable form (``_portable``: transforms hold locks and compiled code), sent once per
client, and rebuilt and vmapped once per worker process (``_vmap_task``, kept in
``worker.worker_cache``); each chunk of rows runs it there, and the results are
concatenated along axis 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..api import transform as api
from .cluster import (
    dask_distributed,
    even_chunks,
    get_client,
    is_dask,
    new_tag,
    row_ranges,
    same,
    worker_threads,
)
from .worker import worker_cache, worker_lock


def _portable(f: Callable) -> tuple:
    """A picklable description of ``f`` (transforms hold locks and compiled code)."""
    from ..api.derived import Derived
    from ..api.vmap import Vmapped

    if isinstance(f, Vmapped):
        return ("vmap", _portable(f.fun), f.in_axes, f.device)
    if isinstance(f, Derived):
        return ("derived", _portable(f.fun), f.argnums, f.mode, f.sweeps)
    if isinstance(f, api.Transformed):
        if f.leaves is not None:
            raise TypeError(
                "distributed.vmap: a compile_loss step holds its model's parameters; "
                "pass a function of arrays instead"
            )
        return ("transform", _portable(f.fun), f.argnums, f.mode, f.debug_nans)
    return ("plain", f)


def _rebuild(desc: tuple) -> Callable:
    kind = desc[0]
    if kind == "plain":
        return desc[1]
    if kind == "vmap":
        from ..api.vmap import Vmapped

        return Vmapped(_rebuild(desc[1]), desc[2], desc[3])
    if kind == "derived":
        from ..api.derived import Derived

        return Derived(_rebuild(desc[1]), desc[2], desc[3], desc[4])
    return api.Transformed(_rebuild(desc[1]), desc[2], desc[3], desc[4])


class _Mapped:
    """``f`` as shipped to the workers for ``vmap``."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.digest = hashlib.sha256(payload).hexdigest()


def _vmap_task(mapped: _Mapped, rows: np.ndarray) -> Any:
    fn = worker_cache.get(mapped.digest)
    if fn is None:
        import cloudpickle

        from ..api.vmap import Vmapped, vmap

        with worker_lock:
            fn = worker_cache.get(mapped.digest)
            if fn is None:
                f = _rebuild(cloudpickle.loads(mapped.payload))
                fn = worker_cache[mapped.digest] = f if isinstance(f, Vmapped) else vmap(f)
    return fn(np.ascontiguousarray(rows, dtype=np.float64))


_mapped: dict[tuple, Any] = {}  # (client id, digest) -> the shipped function's future


def vmap(f: Callable, points: Any, client: Any = None, *, chunks: int | None = None) -> Any:
    """``ad.vmap(f)(points)`` with the rows of ``points`` split across Dask workers.

    ``f`` is a function of one point (a row of ``points``), or any transform
    (``ad.grad(g)``, ``ad.value_and_grad(g)``, ``ad.hessian(g)`` ...), or
    ``ad.vmap`` of one. ``points`` is a NumPy array, split into ``chunks``
    chunks of rows (default: two per worker thread), or a ``dask.array``
    (its row chunks). Each chunk runs ``ad.vmap(f)`` on a worker, compiled
    once per worker; the results are concatenated along axis 0 (each part of
    a tuple result separately).
    """
    import cloudpickle

    dask_distributed()
    if chunks is not None and (not isinstance(chunks, int) or chunks < 1):
        raise ValueError(f"chunks={chunks!r}: give a number of chunks >= 1, or None")
    client = get_client(client)
    mapped = _Mapped(cloudpickle.dumps(_portable(f)))
    key = (id(client), mapped.digest)
    fut = _mapped.get(key)
    if fut is None or fut.status not in ("pending", "finished"):
        fut = _mapped[key] = client.submit(
            same, mapped, key=f"adcompile-vmap-program-{mapped.digest[:16]}-{new_tag()}"
        )
    if is_dask(points):
        if points.ndim > 1 and any(len(c) > 1 for c in points.chunks[1:]):
            points = points.rechunk({i: -1 for i in range(1, points.ndim)})
        blocks = (
            list(points.to_delayed().reshape(-1))
            if points.ndim == 1
            else [row[0] for row in points.to_delayed().reshape(len(points.chunks[0]), -1)]
        )
        rows = client.compute(blocks)
    else:
        points = np.asarray(points, dtype=np.float64)
        if points.ndim == 0 or len(points) == 0:
            raise ValueError("distributed.vmap: points must be an array with rows (got none)")
        sizes = even_chunks(len(points), chunks or 2 * worker_threads(client))
        rows = [points[lo:hi] for lo, hi in row_ranges(sizes)]
    parts = client.gather([client.submit(_vmap_task, fut, r) for r in rows])
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate([p[j] for p in parts]) for j in range(len(parts[0])))
    return np.concatenate(parts)
