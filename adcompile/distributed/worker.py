"""What runs on a Dask worker for ``adcompile.distributed.value_and_grad``: the program
shipped and one chunk's value and gradient.

A program is a ``Recipe`` (the batch-generic code as text, compiled once per worker
process, or loaded from its Numba cache) or, where there is none, ``Shipped`` (the
user's function pickled by value, made into ``ad.value_and_grad`` once per worker).
``chunk_task`` runs it on a chunk of rows and returns the value and gradient as one
vector (times the chunk's length for a mean), raising ``GuardFailed`` where the rows
take another branch and ``ad.NonFiniteError`` (naming the rows) where the loss or its
gradient is not finite; ``combine`` adds chunk results. ``worker_cache`` holds what a
worker process made, by digest (``vmap``'s functions too).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..api import transform as api
from ..trace.mode import NonFiniteError


class GuardFailed(Exception):
    """A chunk's rows take another branch than the shipped program was traced on."""


class Recipe:
    """Batch-generic code as text: what a worker needs to compile and run it."""

    def __init__(
        self,
        fname: str,
        source: str,
        kinds: list[bool],
        which: list[int],
        work: tuple[int, int],
        columns: np.ndarray,
        n_out: int,
        min_rows: int,
    ) -> None:
        self.fname, self.source = fname, source
        self.kinds = kinds  # per flat argument (the hidden inputs' last): is it an array
        self.which = which  # the data arguments, chunked by rows
        self.work, self.columns, self.n_out, self.min_rows = work, columns, n_out, min_rows
        h = hashlib.sha256(source.encode())
        h.update(repr((fname, kinds, which, work, n_out)).encode())
        h.update(np.ascontiguousarray(columns).tobytes())
        self.digest = h.hexdigest()


class Shipped:
    """The user's function itself, pickled by value (cloudpickle), for the cases
    without batch-generic code."""

    def __init__(self, payload: bytes, argnums: Any) -> None:
        self.payload, self.argnums = payload, argnums
        self.digest = hashlib.sha256(payload + repr(argnums).encode()).hexdigest()


worker_cache: dict[str, Any] = {}  # on a worker: digest -> compiled program or transform
worker_lock = threading.Lock()
_worker_local = threading.local()


def _compiled(recipe: Recipe) -> Callable:
    """The recipe's Numba function, compiled once per worker process (or loaded
    from its Numba cache)."""
    fn = worker_cache.get(recipe.digest)
    if fn is None:
        with worker_lock:
            fn = worker_cache.get(recipe.digest)
            if fn is None:
                from ..backend.numba_functions import compile_folded_source
                from ..ir.tape import Param

                params = [
                    Param(f"a{k}", 1 if is_array else None)
                    for k, is_array in enumerate(recipe.kinds)
                ]
                fn = compile_folded_source(recipe.source, recipe.fname, [], params, "int64")
                worker_cache[recipe.digest] = fn
    return fn


def _transform(shipped: Shipped) -> api.Transformed:
    """``ad.value_and_grad`` of the shipped function, made once per worker process."""
    vg = worker_cache.get(shipped.digest)
    if vg is None:
        import cloudpickle

        with worker_lock:
            vg = worker_cache.get(shipped.digest)
            if vg is None:
                fun = cloudpickle.loads(shipped.payload)
                vg = worker_cache[shipped.digest] = api.value_and_grad(fun, shipped.argnums)
    return vg


def chunk_task(
    program: Recipe | Shipped, params: tuple, lo: int, hi: int, mean: bool, *rows: Any
) -> tuple[np.ndarray, int]:
    """One chunk's (value and gradient as one vector, times its length for a mean;
    its length), on a worker."""
    args, flat_params, hidden = params
    n = hi - lo
    if isinstance(program, Recipe):
        fn = _compiled(program)
        flat, r = [], iter(rows)
        for p in flat_params:
            flat.append(
                np.ascontiguousarray(next(r), dtype=np.float64).ravel() if p is None else p
            )
        flat.extend(hidden)
        a, b = program.work
        size = max(a * n + b, 1)
        work = getattr(_worker_local, "work", None)
        if work is None or len(work) < size:
            work = _worker_local.work = np.empty(size)
        out = np.empty(program.n_out)
        if not fn(n, *flat, work, program.columns, out):
            raise GuardFailed(f"rows {lo}:{hi}")
    else:
        vg = _transform(program)
        full, r = [], iter(rows)
        for a_ in args:
            full.append(next(r) if a_ is None else a_)
        value, grads = vg(*full)
        if not isinstance(program.argnums, (tuple, list)):
            grads = (grads,)
        out = np.concatenate([[value], *[np.ravel(g) for g in grads]])
    if not np.isfinite(out[0]):
        raise NonFiniteError(
            f"the loss of rows {lo}:{hi} (a chunk of {n} rows) is {out[0]!r}; run "
            "ad.value_and_grad on those rows under ad.debug_nans() to find the operation "
            "that made it"
        )
    if not np.isfinite(out[1:]).all():
        bad = int(np.flatnonzero(~np.isfinite(out[1:]))[0])
        raise NonFiniteError(
            f"the gradient of the loss of rows {lo}:{hi} (a chunk of {n} rows) has "
            f"{out[1 + bad]!r} at flat position {bad}, with a finite loss {out[0]!r}; run "
            "ad.value_and_grad on those rows under ad.debug_nans() to find the operation"
        )
    return (out * n if mean else out), n


def combine(*parts: tuple[np.ndarray, int]) -> tuple[np.ndarray, int]:
    """Sum of chunk results (a node of the reduction tree)."""
    total = parts[0][0].copy()
    rows = parts[0][1]
    for vec, n in parts[1:]:
        total += vec
        rows += n
    return total, rows
