"""The batch-generic path of a transform (``backend.batch``): one program for every
batch length.

:class:`BatchMixin` is part of :class:`adcompile.api.transform.Transformed` (it
shares the transform's state: its specialisations, batch programs, captures and
stage timings). A call whose data arguments differ from an earlier one's only
in their length is served by code traced at a few small lengths and made one
program in the length, when ``f`` takes the same branches at every length and
agrees with it, run on plain numbers, near the call's point.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import pipeline
from ..backend import batch, records
from ..backend.program import CompiledProgram
from ..diff.arrays import grad_tape as array_grad_tape
from ..diff.reverse import grad_tape
from ..emit.array_batch import generic_source, lengths
from ..emit.arrays import array_source
from ..emit.fold import BATCH_SIZES, batch_source
from ..ir.tape import Param, Tape
from ..trace import captures
from ..trace.arrays import NotArrayLevel
from ..trace.mode import gc_paused
from .compiling import disk_key
from .events import loop_ir_failed
from .specialisation import Specialisation, keep_first
from .tracing import trace_array_call


class _ShortBatch(Exception):
    """``f`` failed when traced on the first rows of its data only."""


class BatchMixin:
    """Code generic in the batch length, for gradients (see the module)."""

    def _batch_call(
        self, key: tuple, args: Sequence[Any], flat: list, create: bool = True
    ) -> tuple | None:
        """(spec, out, the batch length) from code generic in the batch length, or None.

        Only for gradients: their data arguments (those not differentiated) are
        the batch. ``jit`` has no such split; there a new shape traces again.
        """
        if self.mode == "jit" or self._caps is not None and self._caps.outer:
            return None  # (the outer Values' array is no batch)
        found = batch.batched(key, self._wrt_args(len(args)), min_length=1)
        if found is None:
            return None
        n, which = found
        gkey = tuple((-1, *s[1:]) if k in which else s for k, s in enumerate(key))
        gen = self._batches.get(gkey)
        if gen is None and not create:
            return None  # (only the code made already)
        if gen is None:
            if gkey in self._batches or n < batch.MIN_LENGTH:  # tried: not one program
                return None
        elif not gen.serves(n):
            return None  # shorter than any length traced, or its branches on n differ here
        params = self._params(self._names(len(args)), key)
        program = None if gen is None else gen.at(n, params)
        if program is None and not create:
            return None
        if program is None:  # no code yet (none tried, or a batch.Deferred)
            gen = self._batches[gkey] = self._compile_batch(key, args, which, n)
            program = None if gen is None else gen.at(n, params)
            if program is None:
                return None
        ok, out = program(*flat)
        if not ok or not self._same_value(args, out[0], flat, program, which):
            return None  # other branches, or f treats this length differently
        spec = Specialisation(None, program, self._layout(key)[0], self.mode, self._many)
        keep_first(self._specs, key, spec)
        return spec, out, n

    def _compile_batch(self, key: tuple, args: Sequence[Any], which: list[int], n: int) -> Any:
        """Trace at a few small lengths and compile one program for every length that
        takes the branches on the length they took, ``n`` among them (None when they
        are not one program, or take different branches: then each length is traced
        as it is; a ``batch.Deferred`` when ``n`` takes other branches)."""
        arrays = [np.asarray(a, dtype=np.float64) if k in which else a for k, a in enumerate(args)]
        fname, what = self._fname_doc()
        self._traced += 1
        if not pipeline.LOOP_IR:
            return None
        return self._batch_loops(arrays, key, which, self._names(len(args)), fname, what, n)

    def _batch_loops(
        self,
        arrays: list,
        key: tuple,
        which: list[int],
        names: list[str],
        fname: str,
        doc: str,
        n: int,
    ) -> Any:
        """Batch-generic code from the loop IR (``loops.batch_source``): the primal
        traced at a few lengths, made one program in n, differentiated as loops.

        The batch arguments are traced as ``lengths.BatchArray``: the comparisons
        the code makes on their length are guards, which must answer alike at
        every length traced, and at ``n`` (else a ``batch.Deferred``)."""
        from ..trace import lengths

        guards: list = []  # of every trace (those of the lengths finally used among them)
        seen: list[int] = []

        def skey(k: int) -> tuple:
            return tuple((k, *s[1:]) if i in which else s for i, s in enumerate(key))

        def trace_primal(k: int, check: bool = True) -> tuple[Tape, list[Param]]:
            sliced = [a[:k] if i in which else a for i, a in enumerate(arrays)]
            rec = lengths.Recorder([sliced[i] for i in which])
            try:
                with gc_paused(), lengths.recording(rec):
                    tape = self._trace(sliced)
            except captures.SwapFailed:
                raise
            except Exception as e:  # f fails on a short batch (it reads row 9 ...)
                raise _ShortBatch from e
            if check:
                if rec.refused:
                    raise lengths.LengthDependent(None)
                guards.extend(rec.guards)
                seen.append(k)
                if not all(lengths.holds(guards, j) for j in seen):
                    raise lengths.LengthDependent(None)  # branches differ between traces
                if not lengths.holds(guards, n):
                    raise lengths.LengthDependent(batch.Deferred(guards))
            return tape, self._params(names, skey(k))

        wrt = None if self.mode == "jit" else self._wrt_args(len(key))
        traced: dict[int, tuple[Tape, list[Param]]] = {}

        def trace_at(k: int) -> tuple[Tape, list[Param]]:
            if k not in traced:
                traced[k] = trace_primal(k)
            return traced[k]

        def unrolled(ks: Sequence[int]) -> Callable[[], Tape]:
            def make() -> Tape:  # the adjoint tape at the largest length traced
                tape, _ = trace_primal(ks[-1], check=False)
                return tape if wrt is None else grad_tape(tape, wrt=self._layout(skey(ks[-1]))[1])

            return make

        def params_at(k: int) -> list[Param]:
            return self._params(names, skey(k))

        return self._batch_program(trace_at, unrolled, params_at, guards, wrt, fname, doc, n)

    def _batch_program(
        self,
        trace_at: Callable[[int], tuple[Tape, list[Param]]],
        unrolled: Callable[[Sequence[int]], Callable[[], Tape]],
        params_at: Callable[[int], list[Param]],
        guards: list,
        wrt: list[int] | None,
        fname: str,
        doc: str,
        n: int,
    ) -> Any:
        """``_batch_loops``' program from the primal traced at lengths ``trace_at``
        takes: restored from disk where an earlier process made it from the same
        traces, else made (``batch_source``) and kept there."""
        from ..backend.records import STRAIGHT_LINE_LIMIT
        from ..trace import lengths

        def remake() -> Any:  # (the folded program again, for another target's source)
            return batch_source(trace_at, wrt, fname, doc, STRAIGHT_LINE_LIMIT)[0]

        clock, first = time.perf_counter(), BATCH_SIZES[0]
        try:
            disk = self._batch_disk_key(trace_at, first, wrt, fname, doc)
            record = None if disk is None else records.read_record(disk)
            if record is not None and record.get("kind") == "batch":
                self._stages["trace at three lengths"] = time.perf_counter() - clock
                clock = time.perf_counter()
                try:
                    gen = batch.BatchCompiled.restored(
                        record, fname, params_at(first[-1]), unrolled(first), guards, remake, n
                    )
                except Exception:  # (a damaged record: the code is made again)
                    gen = None
                if gen is not None:
                    self._stages["restored from the disk cache"] = time.perf_counter() - clock
                    return gen
            found = batch_source(trace_at, wrt, fname, doc, STRAIGHT_LINE_LIMIT)
        except _ShortBatch:  # not this way
            return None
        except lengths.LengthDependent as e:  # branches on the length
            return e.kept
        except captures.SwapFailed:
            raise
        except Exception as e:
            loop_ir_failed(self._name, e)
            return None
        if found is None:
            return None
        loops, ks = found
        self._stages.update(loops.timings)
        gen = batch.BatchCompiled(fname, loops, params_at(ks[-1]), unrolled(ks), ks, guards)
        self._stages["compile"] = gen.timings["compile"]
        if disk is not None and tuple(ks) == first:
            records.write_record(disk, gen.record())
        return gen

    def _batch_disk_key(
        self, trace_at: Callable, ks: Sequence[int], wrt: Any, fname: str, doc: str
    ) -> str | None:
        """The disk key of the batch-generic code of the primal traced at lengths
        ``ks`` (``compiling.disk_key``): the traces, what is differentiated, the
        parameters, the function's name and doc (which the source holds)."""
        tapes, params = zip(*(trace_at(k) for k in ks))
        return disk_key(tapes, ("batch", wrt, fname, doc, [repr(p) for p in params[-1]]))

    def _array_batch_call(self, key: tuple, args: Sequence[Any], flat: list) -> tuple | None:
        """(spec, out, the batch length) from array code generic in the batch length,
        or None. Made at the first call of a gradient traced at array level whose
        data arguments share a leading length (``_compile_array_batch``); each other
        length is then served without a trace, once the first answer there agrees
        with ``f`` run on plain numbers."""
        if self.mode not in ("grad", "value_and_grad") or not self._array_level_wanted(args, True):
            return None
        found = batch.batched(key, self._wrt_args(len(args)), min_length=2)
        if found is None:
            return None
        n, which = found
        gkey = ("arrays", *((-1, *s[1:]) if i in which else s for i, s in enumerate(key)))
        made = gkey not in self._batches
        if made and not self._array_level_wanted(args):
            return None  # (too small to begin with; once made, it serves small lengths too)
        if made:
            self._batches[gkey] = self._compile_array_batch(key, args, which, n)
        gen = self._batches[gkey]
        if gen is None or not gen.serves(n):
            return None
        program = gen.at(n, self._params(self._names(len(args)), key))
        try:
            ok, out = program(*flat)
            same = made or self._same_value(args, out[0], flat, program, which)
        except Exception:  # (NumPy refused a shape at this length)
            same = False
        if not same:
            gen.refused.add(n)  # (f treats this length otherwise: traced as it is)
            return None
        spec = Specialisation(None, program, self._layout(key)[0], self.mode, self._many)
        keep_first(self._specs, key, spec)
        return spec, out, n

    def _compile_array_batch(
        self, key: tuple, args: Sequence[Any], which: list[int], n: int
    ) -> Any:
        """Array code for every batch length (``emit.array_batch``), from ``f`` traced
        at lengths ``n``, ``n + 1``, ``n + 2`` and ``2 n + 5`` (shapes only: an
        array-level trace reads no data); None where those are not one program in
        the length (then ``f`` is traced at each length as it is)."""
        from ..backend.arrays import ArrayBatchCompiled, loop_version

        clock = time.perf_counter()
        names, (fname, doc) = self._names(len(args)), self._fname_doc()
        wrt = self._wrt_args(len(args))
        gens = self._caps.generators if self._caps is not None else ()
        fun, sources, consts, tapes = self._fun_for_trace(), [], [], []
        param_sets = []  # the parameters at each length (for the loop nests)
        for m in lengths(n):
            shaped = [
                np.zeros((m, *np.shape(a)[1:])) if k in which else a for k, a in enumerate(args)
            ]
            mkey = tuple((m, *s[1:]) if k in which else s for k, s in enumerate(key))
            try:
                tape = trace_array_call(fun, shaped, names, gens, False, self.fun)
            except (Exception, NotArrayLevel):
                return None  # (the trace of the call's own length says why, if it fails)
            code = array_grad_tape(tape, wrt)
            if tapes and len(code.nodes) != len(tapes[0].nodes):
                break  # (a loop over the rows: another program at each length)
            params = self._params(names, mkey)
            src, used = array_source(code, params, fname, doc)
            param_sets.append(params)
            sources.append(src)
            consts.append(used)
            tapes.append(code)
        if self._caps is not None and self._caps.watched:
            self._caps.settle()
        self._traced += 1
        self._stages = {"trace at four lengths": time.perf_counter() - clock}
        if len(sources) < len(lengths(n)):
            return None
        made = generic_source(sources, consts, n)
        if made is None:
            return None

        def generic_loops() -> tuple[str, dict] | None:  # (when hot: backend.arrays)
            loops = [
                loop_version(c, p, fname, doc, generic=True) for c, p in zip(tapes, param_sets)
            ]
            if not all(loops):
                return None
            return generic_source([s for s, _ in loops], [c for _, c in loops], n)

        gen = ArrayBatchCompiled(made[0], made[1], fname, tapes[0], lengths(n), generic_loops)
        self._stages.update(gen.timings)
        return gen

    def _same_value(
        self,
        args: Sequence[Any],
        value: float,
        flat: list,
        program: CompiledProgram,
        data: Sequence[int],
    ) -> bool:
        """Whether ``f`` run on plain numbers agrees with the generic code at one
        length, ``program``, at each of these points where the code takes the
        branches it was made for and ``f`` gives a number (False where ``f``
        cannot run on numbers: the length is then traced as it is):

        - a point near the call's, moved in the differentiated arguments and the
          float ``data`` (the batch), where a term that vanishes at the call's
          point (``0.5 * theta ** 2`` at 0, rows of zeros) does not;
        - the call's point with the batch's rows in reverse order, where rows that
          ``f`` weighs by their position (``1.0 if i < 12 else 0.5``: no guard on
          the length, and lengths 8, 9, 11 never reach row 12) change places
          with others, so that inactive rows cannot hide them;
        - the call's point itself (``value``), where neither could be compared."""
        leaves = list(self.leaves()) if self.leaves is not None else None
        shown = len(self._visible(args))  # (f reads the hidden inputs as they are)
        data = [k for k in data if k < shown]
        points = [
            batch.nearby(args, flat, self._wrt_args(len(args)), data),
            batch.rows_reversed(args, flat, data),
        ]
        compared = False
        for moved, moved_flat in points:
            ok, out = program(*moved_flat)
            if not ok:
                continue
            got = batch.run_plain(self.fun, self._visible(moved), leaves)
            if got is None or got != got:
                continue
            if not batch.agree(got, out[0]):
                return False
            compared = True
        if compared:
            return True
        got = batch.run_plain(self.fun, self._visible(args), leaves)
        return got is not None and batch.agree(got, value)
