"""Specialising and compiling: a call no specialisation serves is traced and compiled.

:class:`CompileMixin` is part of :class:`adcompile.api.transform.Transformed`. On a
miss it says why (``ad.explain``'s reasons), tries the batch-generic code, else
traces ``fun`` and compiles the tape through ``pipeline.compile``, sharing the
code with earlier traces of the same tape (in this process, and on disk for
folded code); it records each event, names the generated code's parameters,
and finds the primitive behind a non-finite result (``debug_nans``).
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import pipeline
from ..backend.program import CompiledProgram
from ..diff.interpret import first_nonfinite
from ..ir.arrays import ArrayTape
from ..ir.ops import OPS
from ..ir.outputs import OutLayout
from ..ir.tape import Param, Tape, forward_sweep
from ..trace.arguments import param_names, shape_text
from ..trace.arrays import NO_RULE
from ..trace.mode import gc_paused, nonfinite_error
from .events import (
    Announce,
    CompileEvent,
    RetraceWarning,
    loop_ir_failed,
    summary,
    user_stacklevel,
)
from .specialisation import Specialisation, keep_first, too_many
from .tracing import slot_text

log = logging.getLogger(__name__)

#: The ops adcompile defines (by identity): code of tapes of these only is kept on
#: disk for other processes (an op a user defines may differ there).
_BUILTIN_OPS = frozenset(id(op) for op in OPS.values())
#: From the DEFER_AFTER-th trace for a failed guard on, new code runs its first
#: DEFER_CALLS calls whose guards hold as Python, and Numba compiles it at the next
#: (``_deferring``).
DEFER_AFTER = 1
DEFER_CALLS = 2


def compile_settings() -> tuple:
    """What code made from a tape depends on besides the tape and what is asked of it:
    the size settings, the loop IR switch and adcompile's own source."""
    from ..backend.records import FOLD_MIN_SLOTS, STRAIGHT_LINE_LIMIT, code_version

    return (STRAIGHT_LINE_LIMIT, FOLD_MIN_SLOTS, pipeline.LOOP_IR, code_version())


def wheres(tape: Tape) -> list[str]:
    """The user's source lines of the tape's guards, which generated code names in its
    comments: code kept on disk is keyed by them too (a tape's digest leaves them out)."""
    return [getattr(g, "where", "") for g in tape.guards]


def disk_key(tapes: Sequence[Tape], context: Any) -> str | None:
    """The key code made from ``tapes`` (in ``context``) is kept under on disk
    (``records.write_record``); None where it is not kept: a tape holds an op a
    user defined, which may be another op in another process."""
    digests = []
    for tape in tapes:
        digest, ops = tape.digest(repr((context, compile_settings(), wheres(tape))))
        if not all(id(op) in _BUILTIN_OPS for op in ops):
            return None
        digests.append(digest)
    return hashlib.blake2b(" ".join(digests).encode(), digest_size=20).hexdigest()


# names generated code uses besides the arguments: an argument of the same name is
# renamed there (``x_``); Python's builtins included (``range``, ``len`` ...)
_RESERVED = frozenset({"out", "math", "params", *dir(builtins)})


def _unique_params(f: Callable, n: int) -> list[str]:
    names = param_names(f, n)
    return [nm if nm not in _RESERVED else f"{nm}_" for nm in names]


class CompileMixin:
    """Tracing and compiling specialisations (see the module)."""

    _branches = 0  # (traces for a failed guard: _deferring)

    def _miss(self, key: tuple, args: Sequence[Any], flat: list) -> tuple:
        """No specialisation fits these inputs: run the batch-generic code if there is
        one (or can be), else trace ``f`` again and compile."""
        with self._lock:
            for spec in self._specs.get(key, ()):  # another thread compiled it meanwhile
                ok, out = spec.call(*flat)
                if ok:
                    return spec, out
            return self._miss_locked(key, args, flat)

    def _miss_locked(self, key: tuple, args: Sequence[Any], flat: list) -> tuple:
        with Announce(self._fname_doc()[0]) as announce, self._deferring(key, flat) as reason:
            clock = time.perf_counter()
            self._stages = {}
            batches = dict(self._batches)
            with gc_paused():
                found = self._array_batch_call(key, args, flat)  # (no trace)
                if found is None:  # batch-generic code made already (no trace)
                    found = self._batch_call(key, args, flat, create=False)
                # (small arrays too once inputs keep taking new branches: at array
                # level a mask or np.where is data, not a guard per element)
                small = self._branches >= DEFER_AFTER + 1
                arrays = None if found is not None else self._trace_arrays(args, small)
            if found is None:  # (arrays None: f is traced element by element)
                self._stages = {"trace": time.perf_counter() - clock} if arrays is not None else {}
            try:
                if found is None and arrays is None:
                    found = self._batch_call(key, args, flat)
                spec = None if found is not None else self._specialise_traced(key, args, arrays)
            except Exception as on_values:
                if arrays is not None:
                    raise
                # what fails on Values may work on arrays (np.var of an object array)
                arrays = self._trace_arrays(args, small=True)
                if arrays is None:
                    raise self._unsupported(on_values) from on_values
                self._stages = {"trace": time.perf_counter() - clock}
                found, spec = None, self._specialise_traced(key, args, arrays)
            if found is not None:
                spec, out, n = found
                announce.done(spec.compiled)
                gen = spec.compiled.generic
                new = not any(g is gen for g in batches.values())
                if new:
                    lengths = ", ".join(map(str, gen.lengths))
                    reason += f"; traced at batch lengths {lengths}, one program for every length"
                else:
                    reason += f"; batch length {n} served by the code generic in the batch length"
                self._record(reason, spec, clock, key, traced=new)
                return spec, out
            announce.done(spec.compiled)
            self._record(reason, spec, clock, key)
        ok, out = spec.call(*flat)
        if not ok:  # the trace itself took these branches, so this cannot happen
            raise RuntimeError("adcompile: a fresh specialisation failed its own guards")
        return spec, out

    @contextlib.contextmanager
    def _deferring(self, key: tuple, flat: list) -> Iterator[str]:
        """Why this call compiles (``_reason``), and, from the ``DEFER_AFTER``-th new
        branch on, code compiled in it runs its first ``DEFER_CALLS`` calls as Python
        before Numba compiles it (``python_first.DEFERRED``): inputs that keep taking
        new branches (a guard on every score) would spend seconds in Numba for code
        called once."""
        from ..backend.python_first import DEFERRED

        reason = self._reason = self._why(key, flat)
        branch = reason.startswith("a guard failed")
        self._branches += branch
        token = DEFERRED.set(DEFER_CALLS if branch and self._branches >= DEFER_AFTER else 0)
        try:
            yield reason
        finally:
            DEFERRED.reset(token)

    def _unsupported(self, e: Exception) -> Exception:
        """``e``, raised tracing element by element, or where the array level refused
        a NumPy function it has no rule for, and NumPy refused arrays of Values (a
        TypeError from NumPy's C code), an error that names that function."""
        why = self.array_refused or ""
        if not why.endswith(NO_RULE) or not isinstance(e, (TypeError, AttributeError)):
            return _numpys_refusal(self._name, why, e) if why else e
        name = why.removesuffix(NO_RULE)
        return TypeError(
            f"{self._name}() calls {name}, which adcompile cannot differentiate: it has no "
            f"array-level rule, and {name} does not run on arrays of traced Values "
            f"({type(e).__name__}: {e}). The NumPy functions adcompile traces are listed "
            "in docs/api.md (NumPy code on whole arrays); for another, write it with those "
            "(or give it a derivative rule of your own: ad.primitive)"
        )

    # ---- why a call compiles (ad.explain)

    def _primal(self, args: Sequence[Any]) -> list[Any]:
        """The arguments ``f`` itself takes, of the call's (or of its key)."""
        return list(args)

    def _why(self, key: tuple, flat: list) -> str:
        """Why this call, which no specialisation serves, traces or compiles."""
        if not self.events and not self._specs:
            return "first call"
        if key not in self._specs:
            names = self._names(len(key))
            previous = self.events[-1].key if self.events else next(reversed(self._specs))
            if len(previous) != len(key):
                return f"new argument structure: {len(key)} arguments, were {len(previous)}"
            changed = [
                f"argument {k} ({names[k]}) has {shape_text(new)}, was {shape_text(old)}"
                for k, (old, new) in enumerate(zip(previous, key))
                if old != new
            ]
            if changed:
                return "new shape: " + "; ".join(changed)
            return "new shapes"
        for spec in self._specs[key]:
            tape = spec.tape
            if tape is None or not tape.guards:
                continue
            primal = self._primal(flat)
            point = np.concatenate([np.atleast_1d(np.asarray(a, float)) for a in primal])
            if len(point) != len(tape.inputs):
                continue
            vals = forward_sweep(tape, [float(v) for v in point])
            for g in tape.guards:
                if not g.holds(vals):
                    a, b = vals[g.a], vals[g.b]
                    return (
                        f"a guard failed: {slot_text(tape, g.a)} {g.cmp} "
                        f"{slot_text(tape, g.b)} was {g.expected} when traced, now "
                        f"{not g.expected} ({a!r} {g.cmp} {b!r}), at {g.where or '?'}"
                    )
            break
        return "a guard failed (these inputs take other branches)"

    def _record(
        self, reason: str, spec: Specialisation, clock: float, key: tuple, traced: bool = True
    ) -> None:
        """Keep the event; with ``ADCOMPILE_LOG=compiles``, print it on stderr."""
        facts = spec.compiled.facts
        event = CompileEvent(
            reason,
            summary(facts),
            time.perf_counter() - clock,
            dict(self._stages) if traced else {},
            key,
            spec.compiled.from_disk if traced else False,
            traced,
            facts,
        )
        self.events.append(event)
        if "compiles" in os.environ.get("ADCOMPILE_LOG", "").split(","):
            print(event.line(self._fname_doc()[0]), file=sys.stderr, flush=True)

    def _names(self, nargs: int) -> list[str]:
        """The parameters' names in generated code (the hidden inputs' last)."""
        hidden = [h.name for h in self._caps.hidden] if self._caps is not None else []
        nargs -= len(hidden) + len(self._kwnames)
        if self._argnames is not None:
            names = [nm if nm not in _RESERVED else f"{nm}_" for nm in self._argnames]
        elif self.leaves is not None:
            names = ["params", *_unique_params(self._namefun, nargs - 1)]
        else:
            names = _unique_params(self._namefun, nargs)
        for name in (*self._kwnames, *hidden):
            while name in names or name in _RESERVED:
                name += "_"
            names.append(name)
        return names

    @staticmethod
    def _params(names: list[str], key: tuple) -> list[Param]:
        sizes = [1 if s is None else int(np.prod(s)) for s in key]
        return [Param(n, None if s is None else sz) for n, s, sz in zip(names, key, sizes)]

    def _layout(self, key: tuple) -> tuple[list, list[int]]:
        """Per differentiated argument (its start in the outputs, its shape), and the
        positions of its elements among the tape's inputs."""
        wrt = self._wrt_args(len(key))
        layout, positions, start = [], [], 0
        sizes = [1 if s is None else int(np.prod(s)) for s in key]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        for k in wrt:
            positions.extend(range(offsets[k], offsets[k + 1]))
            layout.append((1 + start, key[k]))
            start += sizes[k]
        return layout, positions

    def _fname_doc(self) -> tuple[str, str]:
        if self.mode == "jit":
            return f"{self._name}_value", f"value of {self._name} (generated by adcompile)"
        return (
            f"{self._name}_value_and_grad",
            f"value and gradient of {self._name} (generated by adcompile)",
        )

    def _raise_nonfinite(self, spec: Specialisation, flat: list, args: Sequence[Any]) -> None:
        """Find the first primitive that made nan/inf from finite inputs, and name it
        (and the user's line that made it: ``f`` is traced again for that)."""
        point = np.concatenate([np.atleast_1d(a) for a in flat]) if flat else []
        lines: list[str] | None = None

        def line(i: int) -> str:
            nonlocal lines
            if lines is None:
                with gc_paused():
                    again = self._trace(args, sites=True)
                same = len(again.nodes) == len(spec.tape.nodes)
                lines = again.where if same and again.where else []
            return lines[i] if i < len(lines) else "?"

        hit = first_nonfinite(spec.tape, point)
        if hit is not None:
            i, vals = hit
            node = spec.tape.nodes[i]
            where = line(i)
            raise nonfinite_error(node.op, [vals[a] for a in node.args], vals[i], where)
        gtape = spec.compiled.tape
        hit = first_nonfinite(gtape, point)
        if hit is None:  # non-finite inputs: nothing was made non-finite here
            return
        j, vals = hit
        node = gtape.nodes[j]
        block = gtape.blocks[j] if gtape.blocks else -1
        primal = gtape.primal
        context, where = "", "?"
        if primal is not None and block >= 0:
            context = f" in the derivative of {primal.statement(block)}"
            where = primal.where[block] if primal.where else line(block)
        raise nonfinite_error(node.op, [vals[a] for a in node.args], vals[j], where, context)

    def _specialise_traced(
        self, key: tuple, args: Sequence[Any], traced: Tape | None
    ) -> Specialisation:
        """``_specialise``, with the array-level tape ``traced`` where there is one."""
        if traced is None:
            return self._specialise(key, args)
        return self._specialise(key, args, traced)

    def _specialise(
        self, key: tuple, args: Sequence[Any], traced: Tape | None = None
    ) -> Specialisation:
        """Trace ``fun`` at ``args`` (or take ``traced``, its array-level tape) and
        compile; the specialisation is kept first for ``key``."""
        clock = time.perf_counter()
        if traced is None:
            with gc_paused():  # tracing builds a large acyclic graph
                tape = self._trace(args)
            self._stages = {"trace": time.perf_counter() - clock}
        else:
            tape = traced
        self._count_trace()
        if tape.tree is not None:  # jit of a function returning several numbers
            params = self._params(self._names(len(args)), key)

            def build_tree() -> CompiledProgram:
                if isinstance(tape, ArrayTape):
                    return pipeline.compile_arrays(
                        tape, params, *self._fname_doc(), None, self._stages
                    )
                from ..backend.compiled import compile_tape  # Numba is imported on first compile

                return compile_tape(tape, params, *self._fname_doc())

            compiled = self._shared(tape, ("tree", params), build_tree)
            spec = Specialisation(tape, compiled, [], "jit", False, OutLayout.of_tree(tape.tree))
            return self._keep(key, spec)
        layout, positions = self._layout(key)
        if isinstance(tape, ArrayTape):  # one input per argument: no element positions
            positions = []
        params = self._params(self._names(len(args)), key)
        wrt = None if self.mode == "jit" else self._wrt_args(len(key))
        context = ("jit" if wrt is None else "vjp", params, positions, wrt)
        fname = self._fname_doc()[0]

        def restore(record: dict) -> CompiledProgram:
            from ..backend.compiled import LoopCompiled, StraightLineCompiled

            unrolled = pipeline.unrolled(tape, wrt, positions)
            compiled: CompiledProgram
            if record.get("kind") == "loops":
                remake = pipeline.refold(tape, params, fname, self._fname_doc()[1], wrt)
                compiled = LoopCompiled.restored(record, params, fname, unrolled, remake)
            elif record.get("kind") == "straight-line":
                compiled = StraightLineCompiled.restored(record, params, fname, unrolled)
            else:
                raise ValueError(record.get("kind"))
            self._stages.update(compiled.timings)
            return compiled

        compiled = self._shared(
            tape, context, lambda: self._build(tape, key, params, positions), restore
        )
        spec = Specialisation(tape, compiled, layout, self.mode, self._many)
        return self._keep(key, spec)

    def _shared(
        self,
        tape: Tape,
        context: tuple,
        build: Callable[[], Any],
        restore: Callable[[dict], Any] | None = None,
    ) -> Any:
        """The compiled code of ``tape`` (in ``context``: parameters, what is
        differentiated): made by ``build()``, or the code an earlier trace of the same
        tape made, in this transform or another of the same function (``grad`` then
        ``value_and_grad`` of one function compile once). The code depends only on
        the tape and the context (and the compile settings and adcompile's own
        code, counted too). With ``restore``, folded and straight-line code is also kept
        on disk (``records.write_record``): a later process that traces the same tape
        skips every pass after tracing (``restore(record)``)."""
        from ..backend.shared import shared_code

        clock = time.perf_counter()
        if isinstance(tape, ArrayTape):  # NumPy code: no Numba, no settings, not on disk
            settings: tuple = ("arrays",)
            restore = None
        else:
            settings = compile_settings()
        digest, ops = tape.digest(repr((context, settings, wheres(tape))))
        on_disk = restore is not None and all(id(op) in _BUILTIN_OPS for op in ops)

        def made() -> Any:
            if on_disk:
                from ..backend.records import read_record, write_record

                record = read_record(digest)
                if record is not None:
                    try:
                        compiled = restore(record)
                    except Exception:  # (a record of another kind or damaged: made again)
                        log.debug("the record %s was not restored", digest, exc_info=True)
                    else:
                        self._stages["restored from the disk cache"] = time.perf_counter() - clock
                        return compiled
            compiled = build()
            record = compiled.record() if on_disk else None
            if record is not None:
                write_record(digest, record)
            return compiled

        # shared between transforms of one function (each test's own functions)
        compiled, hit = shared_code(f"{digest}:{id(self._namefun)}", ops, len(tape), made)
        if hit:
            self._stages["code shared with an earlier trace"] = time.perf_counter() - clock
        return compiled

    def _build(self, tape: Tape, key: tuple, params: list[Param], positions: list[int]) -> Any:
        """Compiled code of ``tape``, through the pipeline (``adcompile.pipeline``)."""
        fname, doc = self._fname_doc()
        wrt = None if self.mode == "jit" else self._wrt_args(len(key))
        return pipeline.compile(
            tape,
            params,
            fname,
            doc,
            wrt,
            positions,
            self._stages,
            lambda e: loop_ir_failed(self._name, e),
        )

    def _keep(self, key: tuple, spec: Specialisation) -> Specialisation:
        """Keep ``spec`` first among the specialisations of ``key``."""
        keep_first(self._specs, key, spec)
        self._last = spec
        return spec

    def _count_trace(self) -> None:
        """Count a trace; warn once when there have been many."""
        self._traced += 1
        if too_many(self.traces) and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self._name}() has been traced {self.traces} times, this time because of "
                f"{self._reason or 'new shapes or branches'}; each trace compiles again. Keep "
                "shapes fixed, or branch with ad.maximum / ad.relu instead of if "
                "(ad.explain(fn) lists every reason)",
                RetraceWarning,
                stacklevel=user_stacklevel(),
            )


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _numpys_refusal(fname: str, why: str, e: Exception) -> Exception:
    """``e``, or, where it is NumPy's own failure on arrays of traced Values (an object
    dtype, a ufunc with no object loop, a recursion) after the array level refused
    ``why``, an error that says both."""
    text = str(e)
    if "it would change the caller's array" in why and isinstance(e, TypeError):
        what = why.split(" (")[0].replace("writing", "writes").replace("updating", "updates")
        return TypeError(
            f"{fname}() {what}: the compiled code would not change the "
            "caller's array, and tracing it element by element failed too "
            f"({type(e).__name__}: {text[:160]}). Write into a copy (x = x.copy()) instead"
        )
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    ours = tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE)
    if not (
        isinstance(e, (RecursionError, SystemError))
        or isinstance(e, TypeError)
        and not ours
        and ("dtype('O')" in text or "ufunc" in text)
    ):
        return e
    return TypeError(
        f"{fname}() uses {why.removesuffix(' at array level')}, which adcompile does not "
        f"trace on whole arrays, and NumPy's code for it fails on arrays of traced Values "
        f"({type(e).__name__}: {text[:200]}). The NumPy functions and arguments adcompile "
        "traces are listed in docs/api.md (NumPy code on whole arrays); write it with those"
    )
