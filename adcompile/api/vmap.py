"""``ad.vmap``: one compiled function over many points, on every core (or a GPU).

``vmap(f)`` compiles ``f`` (a plain function, as ``jit`` does, or any
transform: ``grad``, ``jacobian``, ``hvp`` ...) for the shapes of one point,
then runs its Numba function once per point inside a generated kernel: a
``prange`` loop over the points on the CPU cores, or one CUDA thread per
point with ``device="cuda"``. No Python runs per point.

Array code (NumPy calls on whole arrays) is batched instead
(``diff.batching``): its tape is made once more for all the points together,
each NumPy call on the points' rows at once (a point's ``x @ W`` is one
``(n, j) @ (j, k)`` product), and run as NumPy code; where an op has no
batching rule, that code runs point by point.

Guards: the code is specialised to the branches the first point took. A
point whose inputs take another branch is not answered by that code: its
guard fails inside the kernel, and that point is then evaluated by the
transform itself, which traces it on its own path. So every point gets its
own branch's answer.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir.outputs import assemble, part_leaves, size
from ..trace.mode import MODE
from ..trace.traced import TracedFloat
from .aux import WithAux
from .introspect import ShowsLast
from .transform import Transformed, jit

_DEVICES = ("cpu", "cuda")


class Vmapped(ShowsLast):
    """``f`` mapped over the leading axis of its array arguments (see ``vmap``)."""

    def __init__(self, fun: Callable, in_axes: Any = 0, device: str = "cpu") -> None:
        if not callable(fun):
            raise TypeError(f"vmap() needs a function, got {type(fun).__name__!r}")
        if device not in _DEVICES:
            raise ValueError(f"vmap(device={device!r}): choose 'cpu' or 'cuda'")
        if not (
            in_axes is None
            or _is_axis(in_axes)
            or isinstance(in_axes, (tuple, list))
            and all(a is None or _is_axis(a) for a in in_axes)
        ):
            raise TypeError(
                f"vmap(in_axes={in_axes!r}): in_axes is an int (the axis to map over), "
                "None (broadcast) or a tuple of those, one per argument"
            )
        self.fun = fun
        self.inner = fun if isinstance(fun, Transformed) else jit(fun)
        if device == "cuda":  # (a GPU runs element-wise code: Numba's, not NumPy's)
            self.inner = fun.__copy__() if isinstance(fun, Transformed) else self.inner
            self.inner.array_level = False
        self.in_axes = in_axes
        self.device = device
        # array code batched, by (id of the compiled program, points, kinds): (that
        # program, (batched program, tape) or None where it does not batch)
        self._batched: dict[tuple, Any] = {}
        self._static: dict[tuple[int, ...], Transformed] = {}  # (_inner)
        self._last = self.inner  # (the transform the last call ran)
        # of grad(f, has_aux=True): its two transforms mapped, their results joined
        self._halves = None
        if isinstance(fun, WithAux):
            self._halves = (
                Vmapped(fun.output, in_axes, device),
                Vmapped(fun.aux, in_axes, device),
            )
        functools.update_wrapper(self, fun, updated=())

    def _axes(self, args: Sequence[Any]) -> list[int | None]:
        if isinstance(self.in_axes, (tuple, list)):
            if len(self.in_axes) != len(args):
                raise ValueError(
                    f"vmap: in_axes has {len(self.in_axes)} entries but the call has "
                    f"{len(args)} arguments; give one per argument (None to broadcast)"
                )
            axes = list(self.in_axes)
        else:
            axes = [self.in_axes] * len(args)
        out: list[int | None] = []
        for k, (a, ax) in enumerate(zip(args, axes)):
            nd = np.ndim(a)
            if ax is None or (nd == 0 and not isinstance(self.in_axes, (tuple, list))):
                out.append(None)  # numbers broadcast under an int in_axes, as data
            elif nd == 0:
                raise ValueError(
                    f"vmap: in_axes[{k}] = {ax} maps argument {k}, but it is a number; "
                    "use None for arguments shared by every point"
                )
            elif not -nd <= ax < nd:
                raise ValueError(
                    f"vmap: in_axes[{k}] = {ax} is out of range for argument {k} of "
                    f"shape {np.shape(a)}"
                )
            else:
                out.append(ax % nd)
        return out

    def _reads_traced(self) -> bool:
        """Inside another trace: whether ``fun`` reads one of its Values from outside
        its arguments (then its points run as Python, recorded on that Value)."""
        if MODE.get().trace is None:
            return False
        caps = self.inner.captures
        values = [*caps.outer, *caps.read_values]
        return any(type(v) is TracedFloat for v in caps.values()) or any(
            type(v.data) is TracedFloat for v in values
        )

    def __call__(self, *args: Any) -> Any:
        if self._halves is not None:
            return self.fun.join(self._halves[0](*args), self._halves[1](*args))
        axes = self._axes(args)
        if all(ax is None for ax in axes):
            raise ValueError(
                "vmap: no argument is mapped (every in_axes is None, or every argument "
                "is a number); pass an array with the points along in_axes"
            )
        traced = any(_holds_values(a) for a in args) or self._reads_traced()
        moved: list[Any] = []
        lengths = set()
        for a, ax in zip(args, axes):
            if ax is None:
                moved.append(a)
            else:
                arr = np.moveaxis(np.asarray(a, dtype=object if traced else np.float64), ax, 0)
                lengths.add(arr.shape[0])
                moved.append(arr if traced else np.ascontiguousarray(arr))
        if len(lengths) > 1:
            raise ValueError(
                f"vmap: the mapped arguments have different lengths {sorted(lengths)} "
                "along their mapped axes; they must all have the same number of points"
            )
        n = lengths.pop()
        if n == 0:
            raise ValueError("vmap: the mapped arguments hold no points (length 0)")
        if traced:  # inside another transform, or on Values: point by point, recorded
            results = [
                self.fun(*[m[p] if ax is not None else m for m, ax in zip(moved, axes)])
                for p in range(n)
            ]
            return _stack(results)
        self._last = self._inner(moved, axes)
        inner, moved, axes, regroup = _over_leaves(self._last, moved, axes)
        example = [m[0] if ax is not None else m for m, ax in zip(moved, axes)]
        inner.check_captures()
        caps = inner.captures
        spec, key = inner.spec_for(example)
        hidden = list(caps.values())
        kinds, call_args = [], []
        for m, ax in zip([*moved, *hidden], [*axes, *[None] * len(hidden)]):
            if ax is None:
                kinds.append("same")
                call_args.append(
                    np.ascontiguousarray(m, dtype=np.float64).ravel() if np.ndim(m) else float(m)
                )
            elif m.ndim == 1:
                kinds.append("scalar")
                call_args.append(m)
            else:
                kinds.append("rows")
                call_args.append(m.reshape(n, -1))
        n_out = spec.compiled.n_out
        if self.device == "cuda":
            outs, ok = _run_cuda(spec, kinds, call_args, n, n_out)
        elif spec.compiled.facts.kind == "arrays":  # NumPy code: batched, or row by row
            batched = self._batched_program(spec, kinds, n, [*example, *hidden])
            if batched is None:
                outs, ok = _run_rows(spec, kinds, call_args, n, n_out)
            else:
                outs, ok = _run_batched(*batched, kinds, call_args, n)
        else:
            from ..backend.jit import vmap_kernel

            kernel = vmap_kernel(inner.numba_of(spec, key), kinds)
            outs, ok = np.empty((n, n_out)), np.empty(n, dtype=np.bool_)
            kernel(n, *call_args, outs, ok)
        layout = spec.out
        parts = [
            outs[:, s].copy() if sh is None else outs[:, s : s + size(sh)].reshape(n, *sh)
            for s, sh in layout.parts
        ]
        for p in np.flatnonzero(~ok):  # another branch: that point on its own path
            point = [m[p] if ax is not None else m for m, ax in zip(moved, axes)]
            for k, value in part_leaves(layout.tree, inner(*point)):
                parts[k][p] = value
        return regroup(assemble(layout.tree, parts))

    @property
    def traces(self) -> int:
        """How many times the function was traced (by the transform the last call ran)."""
        return self._last.traces

    def _inner(self, moved: list, axes: list) -> Transformed:
        """The transform a call runs: of a plain function, one whose integers shared by
        every point (``in_axes`` None: ``range(n)``, a size) are static, as in JAX,
        where vmap passes them on as they are."""
        ints = tuple(
            p
            for p, (m, ax) in enumerate(zip(moved, axes))
            if ax is None and isinstance(m, numbers.Integral) and not isinstance(m, bool)
        )
        if not ints or isinstance(self.fun, Transformed) or self.device == "cuda":
            return self.inner
        inner = self._static.get(ints)
        if inner is None:
            inner = self._static[ints] = jit(self.fun, static_argnums=ints)
        return inner

    def _batched_program(self, spec: Any, kinds: list[str], n: int, point: list[Any]) -> Any:
        """(program, point tape) of ``spec``'s array code at ``n`` points, made once per
        length (``diff.batching``); None where it does not batch. ``point``: the
        arguments at one point."""
        from ..backend.arrays import ArrayCompiled
        from ..diff.batching import batch_tape
        from ..ir.arrays import NotBatched

        compiled = spec.compiled  # (by its identity: a trace again makes another)
        memo = (id(compiled), n, tuple(kinds))
        if memo not in self._batched:
            tape = compiled.visit(_ArrayTape())  # (of batch-generic code: its first length)
            shapes = None if tape is None else [tape.shapes[slot] for slot in tape.inputs]
            if shapes != [np.shape(a) for a in point]:
                self._batched[memo] = (compiled, None)  # (a Jacobian's basis loop ...)
                return None
            try:
                code = batch_tape(tape, [k != "same" for k in kinds], n)
            except NotBatched:
                made = None
            else:
                doc = "the function at every point at once (vmap)"
                made = ArrayCompiled(code, compiled.params, "vmapped", doc), tape
            if len(self._batched) >= 16:
                self._batched.pop(next(iter(self._batched)))
            self._batched[memo] = (compiled, made)  # (held: its id is not reused)
        return self._batched[memo][1]


class _ArrayTape:
    """A program's array tape, where it is NumPy code on whole arrays (else None)."""

    def arrays(self, program: Any, tape: Any) -> Any:
        return tape

    def straight_line(self, program: Any) -> None:
        return None

    def folded(self, program: Any, loops: Any, lead: tuple[int, ...]) -> None:
        return None

    def interpreter(self, program: Any, opcodes: Any) -> None:
        return None

    def basis(self, program: Any, one: Any, m: int, dest: Any) -> None:
        return None


def _run_batched(
    program: Any, tape: Any, kinds: list[str], args: list[Any], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """``program`` (array code at ``n`` points) on the points' rows, each input in its
    point's shape (a row of ``tape``'s)."""
    from ..diff.batching import run_batched

    shaped = [
        a if k == "same" else a.reshape((n, *tape.shapes[slot]))
        for a, k, slot in zip(args, kinds, tape.inputs)
    ]
    return run_batched(program, tape, shaped, n), np.ones(n, dtype=np.bool_)


def _over_leaves(inner: Transformed, moved: list, axes: list) -> tuple:
    """The transform and arguments a call runs with where it has static arguments
    (``static_argnums``, integer arrays that are data): the transform over the
    others, made for the static ones' values, which every point shares; and what
    makes its results the transform's (its gradients come as a tuple)."""
    from ..trace import arguments

    def same(result: Any) -> Any:
        return result

    example = tuple(m[0] if ax is not None else m for m, ax in zip(moved, axes))
    if any(ax is not None and arguments.int_data(np.asarray(m)) for m, ax in zip(moved, axes)):
        return inner, moved, axes, same  # (integer data that differs per point: numbers)
    front = inner.plan_call(example)
    if front is None or front[0] is None or any(t != arguments.LEAF for t in front[1].trees):
        return inner, moved, axes, same
    variant, plan, _ = front

    def regroup(result: Any) -> Any:
        if inner.mode == "jit" or inner.many:
            return result
        return result[0] if inner.mode == "grad" else (result[0], result[1][0])

    for p, ax in enumerate(axes):
        if p not in plan.dynamic and ax is not None:
            raise ValueError(
                f"vmap: argument {p} is static (static_argnums, or an integer array) and "
                "so the same at every point; map it with in_axes None"
            )
    dynamic = plan.dynamic
    return variant, [moved[p] for p in dynamic], [axes[p] for p in dynamic], regroup


def _run_rows(spec: Any, kinds: list[str], args: list[Any], n: int, n_out: int) -> tuple:
    """Array code (``backend.arrays``, NumPy calls on whole arrays) run on each point."""
    outs, ok = np.empty((n, n_out)), np.empty(n, dtype=np.bool_)
    for p in range(n):
        ok[p], outs[p] = spec.call(*[a if k == "same" else a[p] for a, k in zip(args, kinds)])
    return outs, ok


def _holds_values(a: Any) -> bool:
    """Whether ``a`` is a Value or an array of them (vmap inside a trace)."""
    if isinstance(a, np.ndarray):
        return a.dtype == object
    return hasattr(a, "_apply") or (
        isinstance(a, (list, tuple)) and any(_holds_values(e) for e in a)
    )


def _stack(results: list[Any]) -> Any:
    """Per-point results (Values, arrays of them, tuples or lists of those) stacked
    along a new axis 0, as arrays of Values."""
    first = results[0]
    if isinstance(first, (tuple, list)):
        parts = [_stack([r[k] for r in results]) for k in range(len(first))]
        return tuple(parts) if isinstance(first, tuple) else parts
    shape = np.shape(first)
    out = np.empty((len(results), *shape), dtype=object)
    for p, r in enumerate(results):
        out[p] = r
    from ..trace.tensor import asarray

    return asarray(out)


def _is_axis(a: Any) -> bool:
    return isinstance(a, (int, np.integer)) and not isinstance(a, bool)


def _run_cuda(spec: Any, kinds: list[str], args: list[Any], n: int, n_out: int) -> tuple:
    """Run straight-line code once per point on a CUDA device (one thread each)."""
    from ..backend.jit import cuda_vmap_kernel

    compiled = spec.compiled
    native = compiled.native
    if native is None or native.device is None:
        raise NotImplementedError(
            f"vmap(device='cuda') runs straight-line code only; this function compiled "
            f"to {compiled.facts.kind} code ({compiled.explanation}). Use device='cpu'"
        )
    return cuda_vmap_kernel(native.device, kinds, args, n, n_out)


def vmap(fun: Callable, in_axes: Any = 0, *, device: str = "cpu") -> Vmapped:
    """``fun`` mapped over the leading axis of its array arguments (as ``jax.vmap``).

    ``fun`` is a plain function (compiled as ``jit`` compiles it) or any
    transform (``vmap(grad(f))`` gives per-point gradients). ``in_axes``: an
    int (the axis of every array argument to map over; numbers are shared),
    ``None`` (shared), or a tuple with one of those per argument. Results are
    stacked along axis 0 (tuples of them for tuple results). The loop over the
    points is compiled and runs on every CPU core (``NUMBA_NUM_THREADS`` sets
    how many); ``device="cuda"`` runs it on a GPU (``pip install
    "adcompile[cuda]"``; ``NUMBA_ENABLE_CUDASIM=1`` simulates one).
    """
    return Vmapped(fun, in_axes, device)
