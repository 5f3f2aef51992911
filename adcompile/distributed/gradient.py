"""``adcompile.distributed.value_and_grad``: the client side of a data-parallel value
and gradient.

``DistributedValueAndGrad`` finds the data arguments (the arrays not differentiated
that share a leading length), splits their rows into chunks (a ``dask.array``'s own,
or even chunks of NumPy data), makes the program the workers run (``worker.Recipe``,
traced here on SAMPLE_ROWS rows, or ``worker.Shipped``), sends it and the rows once,
submits one ``worker.chunk_task`` per chunk with the parameters, and adds the results
by a tree reduction (SPLIT_EVERY per task), weighted by the chunks' lengths for a
mean. Chunks whose rows take another branch run the function itself instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..api import transform as api
from ..api.tracing import function_name
from ..trace.arguments import argnum_positions
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
from .worker import GuardFailed, Recipe, Shipped, chunk_task, combine

#: How many chunk results one reduction task combines (Dask's ``split_every``).
SPLIT_EVERY = 8
#: Rows of the data the client traces the loss at, to make the program it ships.
SAMPLE_ROWS = 32


def _tree(client: Any, futures: list[Any], split_every: int = SPLIT_EVERY) -> list[Any]:
    """Reduce ``futures`` with ``combine`` in a tree on the workers, as Dask's
    ``reduction`` does (``split_every`` results per task), down to at most
    ``split_every`` results: the client, which receives the answer anyway, adds
    those (a task more would cost a round trip through the scheduler)."""
    level = 0
    while len(futures) > split_every:
        level += 1
        futures = [
            client.submit(
                combine,
                *futures[i : i + split_every],
                key=f"adcompile-combine-{level}-{i}-{new_tag()}",
            )
            for i in range(0, len(futures), split_every)
        ]
    return futures


def _flat_arg(a: Any) -> Any:
    """An argument as the compiled code takes it: a float or a flat float64 array."""
    if isinstance(a, np.ndarray) or isinstance(a, (list, tuple)):
        return np.ascontiguousarray(a, dtype=np.float64).ravel()
    return float(a)


def _shape(a: Any) -> tuple | None:
    if is_dask(a):
        return tuple(a.shape)
    if isinstance(a, (np.ndarray, list, tuple)):
        return np.shape(a)
    return None


def _checksum(a: np.ndarray) -> int:
    """A cheap fingerprint of an array's contents (a wrap-around sum of its words)."""
    b = np.ascontiguousarray(a)
    if b.nbytes % 8 == 0 and b.nbytes:
        return int(b.reshape(-1).view(np.uint64).sum(dtype=np.uint64))
    return int(b.reshape(-1).view(np.uint8).sum(dtype=np.uint64))


class DistributedValueAndGrad:
    """``ad.value_and_grad`` of a loss over rows, chunk by chunk on Dask workers
    (see :func:`value_and_grad`)."""

    def __init__(
        self,
        loss: Callable,
        argnums: int | Sequence[int] = 0,
        reduction: str = "mean",
        client: Any = None,
        chunks: int | None = None,
    ) -> None:
        if reduction not in ("mean", "sum"):
            raise ValueError(
                f"reduction={reduction!r}: choose 'mean' (the loss is a mean over the rows) "
                "or 'sum' (a sum over them)"
            )
        if chunks is not None and (not isinstance(chunks, int) or chunks < 1):
            raise ValueError(f"chunks={chunks!r}: give a number of chunks >= 1, or None")
        self.local = api.value_and_grad(loss, argnums)  # traces on the client, to ship
        # batch-generic code is what ships as source; array code does not, yet
        self.local.array_level = False
        self.fun, self.argnums, self.reduction = loss, argnums, reduction
        self.client, self.chunks = client, chunks
        self._many = isinstance(argnums, (tuple, list))
        self._programs: dict[tuple, Recipe | Shipped] = {}
        self._shipped: dict[tuple, Any] = {}  # (client id, digest) -> future on every worker
        self._data: dict[str, Any] = {}  # the NumPy data sent last: fingerprint and futures
        self.last_program: str | None = None  # "source" or "function": what the last call ran
        self._name = function_name(loss)
        self._workers = 1

    # ---- the call

    def __call__(self, *args: Any) -> Any:
        """``(loss, gradient)`` over all rows, as ``ad.value_and_grad(loss)(*args)``."""
        wrt = argnum_positions(self.argnums, len(args), self._name)
        data, n = self._data_args(args, wrt)
        bounds = self._chunking(args, data)  # raises before any work is sent
        client = get_client(self.client)
        self._workers = worker_threads(client)
        if bounds is None:  # NumPy data: even chunks
            bounds = row_ranges(even_chunks(n, self.chunks or self._workers))
        program = self._program(args, data, wrt, n)
        if isinstance(program, Recipe) and min(hi - lo for lo, hi in bounds) < program.min_rows:
            program = self._function_program(data)
        try:
            total = self._run(client, program, args, data, bounds)
        except GuardFailed:  # some rows take another branch: run the function there
            program = self._programs[self._structure(args, data)] = self._function_program(data)
            total = self._run(client, program, args, data, bounds)
        vec, rows = total
        if self.reduction == "mean":
            vec = vec / rows
        return self._unpack(vec, [args[k] for k in wrt])

    def _data_args(self, args: Sequence[Any], wrt: list[int]) -> tuple[list[int], int]:
        """The data arguments (chunked by rows) and their number of rows."""
        from ..backend.batch import batched

        shapes = [_shape(a) for a in args]
        dask_args = [k for k, a in enumerate(args) if is_dask(a)]
        for k in dask_args:
            if k in wrt:
                raise TypeError(
                    f"argument {k} of {self._name}() is a dask array and is differentiated; "
                    "pass the parameters as NumPy arrays (only data may be dask arrays)"
                )
        found = batched(shapes, wrt, min_length=1)
        if found is None:
            raise ValueError(
                f"{self._name}(): no data argument to split by rows (an array that is not "
                "differentiated, with the examples along its first axis)"
            )
        n, which = found
        if dask_args:
            n = shapes[dask_args[0]][0]
            which = [k for k, s in enumerate(shapes) if k not in wrt and s and s[0] == n]
            for k in dask_args:
                if shapes[k][0] != n:
                    raise ValueError(
                        f"{self._name}(): dask array arguments {dask_args[0]} and {k} have "
                        f"{n} and {shapes[k][0]} rows; the data arguments must have the "
                        "same number of rows"
                    )
        return which, n

    def _chunking(self, args: Sequence[Any], data: list[int]) -> list[tuple[int, int]] | None:
        """The chunks' row ranges: the dask arrays' (which must agree); None for NumPy."""
        chunked = [(k, args[k].chunks[0]) for k in data if is_dask(args[k])]
        for k, c in chunked[1:]:
            if c != chunked[0][1]:
                k0, c0 = chunked[0]
                raise ValueError(
                    f"{self._name}(): the data arguments are chunked differently along "
                    f"their rows: argument {k0} in chunks of {_show(c0)} rows, argument {k} "
                    f"in {_show(c)}; rechunk them alike (for example "
                    f"y.rechunk({{0: X.chunks[0]}})) so that each chunk holds the same rows "
                    "of every argument"
                )
        return row_ranges(chunked[0][1]) if chunked else None

    def _structure(self, args: Sequence[Any], data: list[int]) -> tuple:
        return tuple(
            ("rows", _shape(a)[1:]) if k in data else _shape(a) for k, a in enumerate(args)
        )

    # ---- the program each chunk runs

    def _program(
        self, args: Sequence[Any], data: list[int], wrt: list[int], n: int
    ) -> Recipe | Shipped:
        key = self._structure(args, data)
        program = self._programs.get(key)
        caps = self.local.captures
        if isinstance(program, Recipe) and caps.watched:
            if caps.changed() is not None:  # a value compiled into the source changed
                self.local.check_captures()  # (warns, as ad.value_and_grad does)
                program = None
        if isinstance(program, Shipped):  # pickled again: what it reads may have changed
            program = self._programs[key] = self._function_program(data)
        if program is None:
            program = self._programs[key] = self._make_program(args, data, wrt, n)
        return program

    def _make_program(
        self, args: Sequence[Any], data: list[int], wrt: list[int], n: int
    ) -> Recipe | Shipped:
        """Trace the loss on a few rows here and take its batch-generic code (or, where
        there is none, the function itself)."""
        from ..backend.batch import MIN_LENGTH, batched

        m = min(n, SAMPLE_ROWS)
        others = {s[0] for k, a in enumerate(args) if k not in data for s in [_shape(a)] if s}
        while m in others and m < n:
            m += 1
        if m < MIN_LENGTH or m in others:
            return self._function_program(data)
        sample = [self._rows(a, 0, m) if k in data else a for k, a in enumerate(args)]
        self.local(*sample)
        spec, caps = self.local.last, self.local.captures
        found = batched([_shape(a) for a in sample], wrt, min_length=1)
        gen = None if spec is None else spec.compiled.generic
        if gen is None or caps is None or found is None or sorted(found[1]) != sorted(data):
            return self._function_program(data)
        kinds = [_shape(a) is not None for a in sample] + [
            isinstance(v, np.ndarray) for v in caps.values()
        ]
        work = tuple(int(w) for w in gen.work_size)
        return Recipe(
            self.local.compiled_name,
            gen.source,
            kinds,
            list(data),
            work,
            np.asarray(gen.columns),
            int(gen.n_out),
            int(gen.lengths[0]),
        )

    def _function_program(self, data: list[int]) -> Shipped:
        import cloudpickle

        return Shipped(cloudpickle.dumps(self.fun), self.argnums)

    @staticmethod
    def _rows(a: Any, lo: int, hi: int) -> np.ndarray:
        part = a[lo:hi]
        if is_dask(part):
            part = part.compute()
        return np.ascontiguousarray(part, dtype=np.float64)

    # ---- sending and running

    def _ship(self, client: Any, program: Recipe | Shipped) -> Any:
        """The program as a future on the workers (sent once per client; each worker
        fetches it once). It is a task holding the program, not scattered data: the
        scheduler keeps a task's input, so a copy lost with a worker is made again."""
        key = (id(client), program.digest)
        fut = self._shipped.get(key)
        if fut is None or fut.status not in ("pending", "finished"):
            fut = client.submit(
                same, program, key=f"adcompile-program-{program.digest[:16]}-{new_tag()}"
            )
            self._shipped = {k: v for k, v in self._shipped.items() if k[0] == id(client)}
            self._shipped[key] = fut
        return fut

    def _chunk_futures(
        self, client: Any, args: Sequence[Any], data: list[int], bounds: list[tuple[int, int]]
    ) -> list[list[Any]]:
        """Per chunk, its rows of each data argument, on the workers."""
        out: list[list[Any]] = [[] for _ in bounds]
        fingerprint = []
        for k in data:
            a = args[k]
            if is_dask(a):
                fingerprint.append(("dask", a.name))
            else:
                a = np.asarray(a)
                addr = a.__array_interface__["data"][0]
                fingerprint.append((id(args[k]), a.shape, addr, _checksum(a)))
        fingerprint = (id(client), tuple(bounds), tuple(fingerprint))
        if self._data.get("fingerprint") == fingerprint:
            return self._data["futures"]
        workers = list(client.scheduler_info().get("workers", {}))
        for k in data:
            a = args[k]
            if is_dask(a):
                if a.ndim > 1 and any(len(c) > 1 for c in a.chunks[1:]):
                    a = a.rechunk({i: -1 for i in range(1, a.ndim)})
                a = client.persist(a)
                keys = [kk[0] if isinstance(kk, list) else kk for kk in _row_keys(a)]
                from distributed import Future

                futures = [Future(key, client) for key in keys]
            else:
                a = np.ascontiguousarray(a, dtype=np.float64)
                # tasks, not scatter: the scheduler keeps a task's data, so rows lost
                # with a worker are made again (Dask warns of large graphs: meant)
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "Sending large graph", UserWarning)
                    futures = self._send_rows(client, a, k, bounds, workers)
            for i, f in enumerate(futures):
                out[i].append(f)
        self._data = {"fingerprint": fingerprint, "futures": out}
        return out

    @staticmethod
    def _send_rows(
        client: Any, a: np.ndarray, k: int, bounds: list[tuple[int, int]], workers: list[str]
    ) -> list[Any]:
        return [
            client.submit(
                same,
                a[lo:hi],
                key=f"adcompile-rows-{k}-{lo}-{hi}-{new_tag()}",
                workers=[workers[i % len(workers)]] if workers else None,
                allow_other_workers=bool(workers),  # (Dask refuses it with no workers named)
            )
            for i, (lo, hi) in enumerate(bounds)
        ]

    def _run(
        self,
        client: Any,
        program: Recipe | Shipped,
        args: Sequence[Any],
        data: list[int],
        bounds: list[tuple[int, int]],
    ) -> tuple[np.ndarray, int]:
        self.last_program = "source" if isinstance(program, Recipe) else "function"
        prog = self._ship(client, program)
        rows = self._chunk_futures(client, args, data, bounds)
        plain = tuple(None if k in data else a for k, a in enumerate(args))
        flat = tuple(None if k in data else _flat_arg(a) for k, a in enumerate(args))
        hidden = tuple(_flat_arg(v) for v in self.local.captures.values())
        if isinstance(program, Recipe):
            plain = tuple(None for _ in args)  # the source path needs the flat form only
        else:
            flat, hidden = (), ()
        params: Any = (plain, flat, hidden)
        tag = new_tag()
        workers = list(client.scheduler_info().get("workers", {}))
        if len(bounds) > len(workers) > 0:
            # several chunks per worker: the parameters go once to each worker, as a
            # task per worker rather than scattered data (the scheduler keeps a task's
            # input, so a copy lost with its worker is made again)
            per_worker = [
                client.submit(
                    same,
                    params,
                    key=f"adcompile-params-{i}-{tag}",
                    workers=[w],
                    allow_other_workers=True,
                )
                for i, w in enumerate(workers)
            ]
            who = self._where(client, rows, workers)
            params_of = [per_worker[who[i] % len(workers)] for i in range(len(bounds))]
        else:  # one chunk per worker: its task carries the parameters (no extra hop)
            params_of = [params] * len(bounds)
        mean = self.reduction == "mean"
        parts = [
            client.submit(
                chunk_task,
                prog,
                params_of[i],
                lo,
                hi,
                mean,
                *rows[i],
                key=f"adcompile-chunk-{lo}-{hi}-{tag}",
            )
            for i, (lo, hi) in enumerate(bounds)
        ]
        return combine(*client.gather(_tree(client, parts)))

    def _where(self, client: Any, rows: list[list[Any]], workers: list[str]) -> list[int]:
        """Per chunk, the index of a worker holding its rows (where its task will most
        likely run), or a round-robin guess."""
        place = self._data.get("where")
        if place is None:
            try:
                held = client.who_has([r[0] for r in rows])
                place = [workers.index(held[r[0].key][0]) for r in rows]
            except Exception:  # not computed yet, or moved: any worker is right
                place = [i % len(workers) for i in range(len(rows))]
            if all(r[0].status == "finished" for r in rows):
                self._data["where"] = place
        return place

    def _unpack(self, vec: np.ndarray, wrt_args: list[Any]) -> Any:
        grads, start = [], 1
        for a in wrt_args:
            shape = _shape(a)
            if shape is None:
                grads.append(float(vec[start]))
                start += 1
            else:
                size = int(np.prod(shape))
                grads.append(vec[start : start + size].reshape(shape).copy())
                start += size
        return float(vec[0]), (tuple(grads) if self._many else grads[0])


def _row_keys(a: Any) -> list[Any]:
    keys = a.__dask_keys__()
    while a.ndim > 1 and isinstance(keys[0], list) and isinstance(keys[0][0], list):
        keys = [k[0] for k in keys]
    return keys


def _show(chunks: Sequence[int]) -> str:
    c = list(chunks)
    return str(tuple(c)) if len(c) <= 6 else f"({', '.join(map(str, c[:5]))}, ...)"


def value_and_grad(
    loss: Callable,
    argnums: int | Sequence[int] = 0,
    reduction: str = "mean",
    client: Any = None,
    *,
    chunks: int | None = None,
) -> DistributedValueAndGrad:
    """``ad.value_and_grad(loss, argnums)`` computed chunk by chunk on Dask workers.

    ``loss(theta, X, y, ...)`` is a mean (``reduction="mean"``) or a sum
    (``"sum"``) over the rows of its data arguments: the arrays that are not
    differentiated and share a leading length. The data may be ``dask.array``s
    chunked along their rows (all chunked alike, or a ValueError says so before
    any work is sent) or NumPy arrays, split into ``chunks`` chunks (default:
    one per worker thread). Each chunk's value and gradient is computed on a
    worker by the compiled batch-generic code (compiled once per worker); the
    chunks are combined by a tree reduction, a mean weighted by the chunks'
    lengths, so the answer equals ``ad.value_and_grad(loss)`` on all rows to
    rounding. Terms that do not depend on the rows (a weight penalty) are right
    for a mean; for a sum each chunk adds them once. ``client=None`` uses the
    current Dask client, or starts a ``LocalCluster``. A chunk whose loss is not
    finite raises ``ad.NonFiniteError`` naming its rows.
    """
    dask_distributed()
    return DistributedValueAndGrad(loss, argnums, reduction, client, chunks)
