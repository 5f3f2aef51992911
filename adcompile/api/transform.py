"""Function transforms: ``trace``, ``grad``, ``value_and_grad``, ``jit``, ``show_code``.

A transformed function traces ``f`` on its first call with a given argument
structure, compiles the tape, and later runs the compiled code without
calling ``f``. Comparisons ``f`` made on traced values are guards: a call
whose inputs would take another branch traces ``f`` again, so the compiled
code never answers for a branch it did not see.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import numbers
import os
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import pipeline
from ..backend import batch, entries
from ..backend.program import CompiledProgram
from ..diff.interpret import first_nonfinite
from ..diff.reverse import grad_tape
from ..emit.codegen import CodeFacts
from ..emit.fold import batch_source
from ..ir.ops import OPS
from ..ir.outputs import OutLayout, assemble, flatten_output
from ..ir.tape import COMPARE, CONST, Param, Tape, forward_sweep
from ..loops.ir import Lin
from ..trace import arguments, captures, randomness
from ..trace.arguments import argnum_positions, keyword_is_input, param_names, shape_text
from ..trace.value import (
    Value,
    build_tape,
    constant,
    debug_nans_enabled,
    gc_paused,
    graph_roots,
    next_serial,
    nonfinite_error,
    outer_values,
    shared_constants,
    topological_order,
    traced_float,
    tracing,
)

#: How many specialisations (branch paths) one function keeps per argument shape.
MAX_SPECIALISATIONS = 16
#: The ops adcompile defines (by identity): code of tapes of these only is kept on
#: disk for other processes (an op a user defines may differ there).
_BUILTIN_OPS = frozenset(id(op) for op in OPS.values())

#: A trace and compile still running after this many seconds says so on stderr
#: (``ADCOMPILE_QUIET=1`` silences it).
ANNOUNCE_AFTER = 1.0


def summary(facts: CodeFacts) -> str:
    """What compiled code is, in a few words, from its facts (``CompiledProgram.facts``):
    "folded into loops: 24 statements for 197 operations" ..."""
    if facts.kind == "folded":
        what = (
            f"folded into loops: {facts.statements} statements for {facts.operations} operations"
        )
        return "one program for every batch length, " + what if facts.generic else what
    if facts.how:
        return facts.how
    if facts.kind == "straight-line":
        return "Straight-line code"
    return f"{facts.slots} slots, run on the compiled tape interpreter"


@dataclasses.dataclass
class CompileEvent:
    """One trace and compile of a transform (or a new batch length that code
    generic in the batch length served without one): why, what, how long."""

    reason: str
    produced: str = ""
    seconds: float = 0.0
    stages: dict[str, float] = dataclasses.field(default_factory=dict)
    key: tuple = ()
    from_disk: bool = False  # Numba's machine code loaded from the disk cache
    traced: bool = True
    facts: CodeFacts | None = None  # what was made, in numbers (``produced`` words them)

    def line(self, name: str) -> str:
        """The event in one line (what ``ADCOMPILE_LOG=compiles`` prints)."""
        what = "served" if not self.traced else "traced and compiled"
        disk = ", Numba's code loaded from the disk cache" if self.from_disk else ""
        return (
            f"adcompile: {what} {name} in {self.seconds:.2f} s: {self.reason}; "
            f"{self.produced}{disk}"
        )


def _key_text(key: tuple) -> str:
    return ", ".join(shape_text(s) for s in key) or "no arguments"


class _Announce:
    """Says on stderr that a trace and compile is running, once it has taken
    ``ANNOUNCE_AFTER`` seconds, and then what it made and how long it took."""

    def __init__(self, fname: str) -> None:
        self.fname = fname
        self.fired = threading.Event()
        self.what = ""
        self.timer: threading.Timer | None = None

    def __enter__(self) -> _Announce:
        if os.environ.get("ADCOMPILE_QUIET", "") not in ("", "0"):
            return self
        self.start = time.perf_counter()
        self.timer = threading.Timer(ANNOUNCE_AFTER, self._fire)
        self.timer.daemon = True
        self.timer.start()
        return self

    def _fire(self) -> None:
        self.fired.set()
        print(
            f"adcompile: tracing and compiling {self.fname} (first call with these shapes; "
            "ADCOMPILE_QUIET=1 silences this) ...",
            file=sys.stderr,
            flush=True,
        )

    def done(self, compiled: CompiledProgram) -> None:
        """What was compiled (see :func:`summary`)."""
        self.what = summary(compiled.facts)

    def __exit__(self, *exc: Any) -> None:
        if self.timer is None:
            return
        self.timer.cancel()
        if self.fired.is_set() and exc[0] is None:
            seconds = time.perf_counter() - self.start
            print(
                f"adcompile: compiled {self.fname} in {seconds:.1f} s ({self.what})",
                file=sys.stderr,
                flush=True,
            )


class RetraceWarning(UserWarning):
    """A transformed function keeps being traced again (new shapes or branches)."""


# ------------------------------------------------------------------ arguments


def function_name(f: Callable) -> str:
    """``f``'s name as an identifier (what generated code and messages call it)."""
    return (
        "".join(
            ch if ch.isalnum() or ch == "_" else "_" for ch in getattr(f, "__name__", "f")
        ).strip("_")
        or "f"
    )


_F64 = np.dtype(np.float64)


class _TracedArgs(Exception):
    """Raised by flatten_args when an argument is a Value (an outer trace, or eager use)."""


def flatten_args(
    fname: str, args: Sequence[Any], hidden: Sequence[captures.Hidden] = (), skip: int = 0
) -> tuple[list[Any], tuple]:
    """Each argument as a float or a flat float64 array, and the call's structure key.

    The last ``len(hidden)`` arguments are values ``f`` reads from outside its
    arguments (``adcompile.captures``); errors name them as such.
    """
    flat: list[Any] = []
    key: list[Any] = []
    for k, a in enumerate(args):
        t = type(a)
        if t is float:
            flat.append(a)
            key.append(None)
        elif t is np.ndarray and (a.dtype is _F64 or a.dtype == _F64):
            flat.append(a if a.ndim == 1 else a.ravel())
            key.append(a.shape)
        elif isinstance(a, Value) or isinstance(a, np.ndarray) and a.dtype == object:
            raise _TracedArgs
        elif isinstance(a, numbers.Real) and not isinstance(a, bool):
            flat.append(float(a))
            key.append(None)
        elif isinstance(a, (np.ndarray, list, tuple)):
            arr = np.asarray(a)
            if arr.dtype.kind not in "fiu":
                raise TypeError(
                    f"{_which(fname, args, hidden, k, skip)} is an array of {arr.dtype}; pass "
                    "numbers (a float or a NumPy float array)"
                )
            arr = np.ascontiguousarray(arr, dtype=np.float64)
            flat.append(arr.ravel())
            key.append(arr.shape)
        else:
            raise TypeError(
                f"{_which(fname, args, hidden, k, skip)} has unsupported type {t.__name__!r}; "
                "pass a Python number or a NumPy array of floats"
            )
    return flat, tuple(key)


def _which(
    fname: str, args: Sequence[Any], hidden: Sequence[captures.Hidden], k: int, skip: int
) -> str:
    """How an error names argument ``k``: by position (not counting ``skip`` values
    passed before the user's arguments), or as what ``f`` reads."""
    j = k - (len(args) - len(hidden))
    if j >= 0:
        return f"{hidden[j].what}, which {fname}() reads from outside its arguments,"
    return f"argument {k - skip} of {fname}()"


def _traced_inputs(
    args: Sequence[Any], names: Sequence[str]
) -> tuple[list[Any], list[Value], list[str]]:
    """Tracing Values standing for the arguments (object arrays for arrays; a batch
    argument of a trace for batch-generic code as a ``lengths.BatchArray``)."""
    from ..trace.lengths import batch_marks, batch_view

    marks = batch_marks()
    traced, inputs, input_names = [], [], []
    for a, name in zip(args, names):
        if isinstance(a, np.ndarray) and a.ndim > 0 or isinstance(a, (list, tuple)):
            arr = np.asarray(a, dtype=np.float64)
            vals = [Value(float(x)) for x in arr.ravel()]
            obj = np.empty(arr.shape, dtype=object)
            obj.ravel()[:] = vals if vals else []
            for j in range(len(vals)):
                vals[j].label = f"{name}_{j}"
            traced.append(batch_view(obj) if marks and id(a) in marks else _as_tensor(obj))
            inputs.extend(vals)
            input_names.extend(f"{name}_{j}" for j in range(len(vals)))
        else:
            v = Value(float(np.asarray(a, dtype=np.float64)), label=name)
            traced.append(v)
            inputs.append(v)
            input_names.append(name)
    return traced, inputs, input_names


def _as_tensor(obj: np.ndarray) -> np.ndarray:
    try:
        from ..trace.tensor import ValueArray
    except ImportError:  # pragma: no cover - tensor.py is optional sugar
        return obj
    return obj.view(ValueArray)


def _scalar_output(fname: str, out: Any) -> Value:
    if isinstance(out, np.ndarray):
        if out.size != 1:
            raise TypeError(
                f"{fname}() must return a scalar, but it returned an array of shape "
                f"{out.shape}; reduce it first (for example with .sum() or a loss), or "
                f"use ad.jacobian({fname}) for the derivatives of every element"
            )
        out = out.reshape(-1)[0]
    if isinstance(out, Value):
        return out
    if isinstance(out, numbers.Real) and not isinstance(out, bool):
        return constant(float(out))
    if isinstance(out, (list, tuple, dict)):
        raise TypeError(
            f"{fname}() must return a scalar (a Value or a number), but it returned a "
            f"{type(out).__name__}; for the derivatives of several outputs use "
            f"ad.jacobian({fname}), or reduce them to one number (a sum or a loss)"
        )
    raise TypeError(
        f"{fname}() must return a scalar (a Value or a number), but it returned "
        f"{type(out).__name__!r}"
    )


def trace_call(
    f: Callable,
    args: Sequence[Any],
    leaves: Sequence[Value] = (),
    names: Sequence[str] | None = None,
    sites: bool = False,
    hoist: bool = False,
    multi: bool = False,
    outer: Sequence[Value] | None = None,
    generators: Sequence[tuple[str, Any]] = (),
) -> Tape:
    """Call ``f`` once on tracing Values standing for ``args``; its tape.

    ``leaves`` are existing Values (a model's parameters) that ``f`` reads; they
    become the tape's first inputs. ``names`` name the arguments (default: the
    parameters of ``f``). With ``sites`` the tape's ``where`` names the user's
    line of each slot (tracing takes longer); without, ``where`` is None. With
    ``hoist``, constants come first, one slot per value (what folding wants).
    With ``multi``, ``f`` may return an array or a tuple or list of numbers and
    arrays: the tape has one output per element, and ``tape.tree`` (see
    ``adcompile.outputs``) records the structure (None for one scalar).

    Values made before the trace (a model's parameters, or results made from
    them) that ``f`` reads are taken as they are, never looked behind. Without
    ``outer`` they are constants of their ``.data``. With ``outer`` (a list,
    maybe empty), the last argument is an array of the ``.data`` of the Values
    in ``outer``, which stand for its elements as inputs; reading any other such
    Value raises ``captures.NewOuterValues`` naming them.

    A draw from NumPy's or Python's global random generator, or from one of
    ``generators`` ((what, generator) pairs ``f`` reaches), raises
    ``randomness.RandomDrawError``: the compiled code would repeat it.
    """
    fname = function_name(f)
    flatten_args(fname, args)  # the same argument checks as a compiled call
    names = param_names(f, len(args)) if names is None else list(names)
    start = next_serial()
    constants = shared_constants() if outer is not None else set()
    traced, inputs, input_names = _traced_inputs(args, names)
    if outer:  # the last argument's elements are these Values themselves
        inputs[len(inputs) - len(outer) :] = outer
    draws = randomness.Watch(generators)
    try:
        with tracing(sites) as state:
            for v in inputs:
                traced_float(v)  # (a branch on x.data is guarded, as one on x is)
            out = f(*traced)
    finally:
        for v in outer or ():
            v.data = float(v.data)
    draws.check(fname, captures.code_names(f))
    if multi:
        ys, tree = flatten_output(fname, out, _output_leaf)
    else:
        ys, tree = [_scalar_output(fname, out)], None
    leaf_names = [v.label or f"params_{k}" for k, v in enumerate(leaves)]
    all_inputs = [*leaves, *inputs]
    order = topological_order(graph_roots(ys, all_inputs, state.guards), start)
    if outer is not None:
        new = outer_values(order, start, all_inputs, constants)
        if new:
            raise captures.NewOuterValues(new)
    tape = build_tape(
        ys,
        all_inputs,
        state.guards,
        [*leaf_names, *input_names],
        order=order,
        where=state.where if sites else None,
        hoist=hoist,
        before=start,
    )
    tape.tree = tree
    return tape


def _output_leaf(x: Any) -> Value:
    return x if isinstance(x, Value) else constant(float(x))


def trace(f: Callable, *args: Any) -> Tape:
    """The tape of ``f`` at ``args``: prints as SSA text, runs, compiles, goes to SymPy.
    Its ``where`` names the user's line of each slot."""
    if isinstance(f, Transformed):
        f = f.fun
    with gc_paused():
        return trace_call(f, args, sites=True)


# ------------------------------------------------------------------ transforms


class Specialisation:
    """One compiled path of a function: its tape, code and output layout.

    ``tape`` is None for batch-generic code (traced at other lengths).
    """

    def __init__(
        self,
        tape: Tape | None,
        compiled: CompiledProgram,
        layout: list,
        mode: str,
        many: bool,
        out: OutLayout | None = None,
    ) -> None:
        self.tape = tape
        self.compiled = compiled
        self.call = compiled.call
        self.layout = layout  # per differentiated argument: (start, shape or None)
        # the result's place in the output array (the fast entry and vmap read it)
        self.out = _out_layout(layout, mode, many) if out is None else out
        self.unpack = _unpacker(layout, mode, many) if out is None else out.unpack
        self.entry: Callable | None = None  # the fast path of calls like the last one
        self.direct: float | None = None  # seconds its direct entry took (once hot)


def _out_layout(layout: list, mode: str, many: bool) -> OutLayout:
    """The grad / value_and_grad / jit result's place in the output array."""
    if mode == "jit":
        return OutLayout([(0, None)], 0)
    parts = [(start, shape) for start, shape in layout]
    grads = ("tuple", list(range(len(parts)))) if many else 0
    if mode == "grad":
        return OutLayout(parts, grads)
    shift = ("tuple", list(range(1, len(parts) + 1))) if many else 1
    return OutLayout([(0, None), *parts], ("tuple", [0, shift]))


def _unpacker(layout: list, mode: str, many: bool) -> Callable[[np.ndarray], Any]:
    """out array -> what the transform returns (floats, arrays of the arguments' shapes)."""
    if mode == "jit":
        return lambda out: out.item(0)
    if not many:  # the common cases, kept short: they run on every call
        start, shape = layout[0]
        if shape is None:
            grad1 = lambda out: out.item(start)
        elif len(shape) == 1:
            grad1 = lambda out: out[start:]
        else:
            grad1 = lambda out: out[start:].reshape(shape)
        if mode == "grad":
            return grad1
        return lambda out: (out.item(0), grad1(out))
    parts = []
    for start, shape in layout:
        stop = start + (1 if shape is None else int(np.prod(shape)))
        parts.append((start, stop, shape))

    def grads(out: np.ndarray) -> tuple:
        return tuple(
            out.item(a) if shape is None else out[a:b].reshape(shape) for a, b, shape in parts
        )

    if mode == "grad":
        return grads
    return lambda out: (out.item(0), grads(out))


class Transformed:
    """``f`` under ``grad`` / ``value_and_grad`` / ``jit``: compiled per shape and path.

    Each transform is the one instance of a class of its own (a subclass made
    here), so that the entry of its last specialisation can be that class's
    ``__call__`` (``_install``): a call like the last one then runs the entry
    without a Python method frame in between.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Transformed:
        if "_own" not in cls.__dict__:
            cls = type(
                cls.__name__,
                (cls,),
                {"_own": True, "__module__": cls.__module__, "__qualname__": cls.__qualname__},
            )
        return super().__new__(cls)

    def __init__(
        self,
        fun: Callable,
        argnums: int | Sequence[int] | None,
        mode: str,
        debug_nans: bool = False,
        leaves: Callable[[], Sequence[Value]] | None = None,
        static_argnums: int | Sequence[int] = (),
    ) -> None:
        if not callable(fun):
            raise TypeError(f"{mode}() needs a function, got {type(fun).__name__!r}")
        _check_argnums(argnums, mode)
        self._static = _static_positions(static_argnums)
        self.fun = fun
        self.mode = mode  # "grad", "value_and_grad" or "jit"
        self.argnums = argnums
        self._many = isinstance(argnums, (tuple, list))
        self._specs: OrderedDict[tuple, list[Specialisation]] = OrderedDict()
        self.traces = 0
        self._warned = False
        self._last: Specialisation | None = None
        self._name = function_name(fun)
        self.debug_nans = debug_nans
        self.leaves = leaves  # with leaves, calls take their values first: f(leaf_data, *args)
        self._lock = threading.Lock()
        self._heating: threading.Thread | None = None  # a direct entry being compiled
        self._heat_error: Exception | None = None  # what failed there (strict mode)
        # False: a direct entry compiles in the call that made it hot (check mode,
        # whose eager runs beside each call would disturb its timing, entries.worth_it)
        self.background_entries = True
        # code generic in the batch length, per argument structure (None: not possible)
        self._batches: dict[tuple, Any] = {}
        # what fun reads from outside its arguments (found on the first call)
        self._caps: captures.Captures | None = None
        # calls with keyword arguments: one transform per keyword signature (_keywords)
        self._variants: dict[tuple, Transformed] = {}
        self._namefun = fun  # whose parameters name the positional arguments
        self._argnames: list[str] | None = None  # or these names (of pytree leaves)
        self._kwnames: tuple[str, ...] = ()  # keyword arguments passed after them
        self._skip = 1 if leaves is not None else 0  # arguments before the user's
        # the general path, for entries (_install): through a weak reference, so
        # that this transform is freed without the cyclic GC
        ref = weakref.ref(self)
        self._slow = lambda args, kwargs: ref()._general(args, kwargs)
        # every trace and compile so far, with its reason (ad.explain)
        self.events: list[CompileEvent] = []
        self._stages: dict[str, float] = {}
        self._reason = ""
        functools.update_wrapper(self, fun, updated=())

    def _wrt(self, nargs: int) -> list[int]:
        """The differentiated arguments, of ``nargs`` (the hidden inputs included)."""
        if self.mode == "jit":
            return []
        nargs -= len(self._caps.hidden) if self._caps is not None else 0
        nargs -= len(self._kwnames)
        return argnum_positions(self.argnums, nargs, self._name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # (while an entry is installed, it is this class's __call__ instead)
        return self._general(args, kwargs)

    def __copy__(self) -> Transformed:
        """A new transform of the same function (it traces again on its first call)."""
        new = self._like(self.fun)
        new._name, new._namefun, new._kwnames = self._name, self._namefun, self._kwnames
        return new

    def __deepcopy__(self, memo: dict) -> Transformed:
        return self.__copy__()

    def _install(self, entry: Callable | None) -> None:
        """Make ``entry`` this transform's call (None: the general path)."""
        own = type(self)
        if entry is not None:
            own.__call__ = staticmethod(entry)
        elif "__call__" in own.__dict__:
            del own.__call__

    def _general(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call, by the general path: the argument check, the specialisation's
        lookup (tracing and compiling a new one), hidden inputs, keywords."""
        if self._static or arguments.needs_plan(args, ()):
            front = self._front(args)
            if front is not None:
                variant, plan, wrt = front
                if variant is None:  # float32 arguments: the gradient in their dtype
                    return plan.cast(self._plain(args, kwargs), self.mode, wrt, self._many)
                out = variant(*plan.leaves, **kwargs)
                return plan.regroup(out, self.mode, wrt, self._many)
        return self._plain(args, kwargs)

    def _plain(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call whose arguments are numbers and float64 arrays."""
        if kwargs:
            return self._keywords(args, kwargs)
        return self._adopting(lambda: self._general_once(args))

    # ---- pytrees, static arguments, float32 (adcompile.arguments)

    def _front(self, args: tuple) -> tuple[Transformed | None, arguments.Plan, list[int]] | None:
        """How a call with static arguments, pytrees or float32 arrays is made: the
        transform of ``fun`` over the call's leaves (None: this one, the arguments
        only need their dtype back), the call's plan and the differentiated
        positions; None for a call of numbers and float64 arrays."""
        if self.leaves is not None or self.mode not in ("grad", "value_and_grad", "jit"):
            return None
        nargs = len(args)
        static = [k % nargs for k in self._static if -nargs <= k < nargs]
        if len(static) != len(self._static):
            raise ValueError(
                f"static_argnums={self._static!r} does not fit {self._name}() called with "
                f"{nargs} positional arguments"
            )
        wrt = [] if self.mode == "jit" else argnum_positions(self.argnums, nargs, self._name)
        both = sorted(set(wrt) & set(static))
        if both:
            raise ValueError(
                f"argument {both[0]} of {self._name}() is both differentiated (argnums) "
                "and static (static_argnums); a static argument is a constant of the code"
            )
        names = param_names(self._namefun, nargs)
        plan = arguments.plan(self._name, args, names, static)
        if not static and all(t == arguments.LEAF for t in plan.trees):
            return None, plan, wrt
        with self._lock:  # (threads calling at once make one variant)
            variant = self._variants.get(plan.signature)
            if variant is None:
                variant = self._variants[plan.signature] = self._leaf_variant(plan, wrt)
        return variant, plan, wrt

    def _leaf_variant(self, plan: arguments.Plan, wrt: list[int]) -> Transformed:
        """The transform of ``fun`` over the leaves of calls planned as ``plan``."""
        leaf_wrt = plan.leaf_argnums(wrt)
        if self.mode != "jit" and not leaf_wrt:
            raise ValueError(
                f"the differentiated arguments of {self._name}() hold no numbers "
                "(empty tuples, lists or dicts)"
            )
        variant = Transformed(
            arguments.call_on_leaves(self.fun, plan),
            leaf_wrt if self.mode != "jit" else None,
            self.mode,
            self.debug_nans,
        )
        variant._name, variant._namefun = self._name, self._namefun
        variant._argnames = list(plan.names)
        variant.background_entries = self.background_entries
        return variant

    def _adopting(self, call: Callable[[], Any]) -> Any:
        """``call()``, again after each trace that found Values made outside ``fun``
        (a model's parameters): they become inputs first (``_adopt_outer``)."""
        for _ in range(8):
            try:
                return call()
            except captures.NewOuterValues as e:
                self._adopt_outer(e.values)
        raise RuntimeError(
            f"adcompile: {self._name}() reads other Values made outside it at every trace; "
            "pass them as arguments"
        )

    def _adopt_outer(self, values: Sequence[Value]) -> None:
        """Make ``values`` (Values made outside ``fun`` that its trace read) inputs,
        read at every call, and forget what was compiled without them."""
        with self._lock:
            self._caps.add_outer(values)
            self._specs.clear()
            self._batches.clear()
            self._last = None
            self._install(None)

    def _general_once(self, args: tuple) -> Any:
        caps = self._caps
        if caps is None:
            caps = self._scan()
        if caps.watched:
            self._check_watched(caps)
        if caps.hidden:
            try:
                return self._call(*args, *caps.values())
            except captures.NewOuterValues:
                raise
            except captures.SwapFailed:  # f cannot run on traced values there
                self._scan(swap=False)
                try:
                    return self._call(*args, *self._caps.values())
                except captures.NewOuterValues:
                    raise
                except Exception:  # f fails on its own: look again next call
                    self._caps = None
                    raise
        return self._call(*args)

    def _call(self, *args: Any) -> Any:
        """The call, with the hidden inputs' values after the arguments."""
        try:
            flat, key = flatten_args(self._name, args, self._caps.hidden, self._skip)
        except _TracedArgs:
            return self._call_traced(args)
        for spec in self._specs.get(key, ()):
            ok, out = spec.call(*flat)
            if ok:
                break
        else:
            spec, out = self._miss(key, args, flat)
        self._last = spec
        if self.debug_nans or debug_nans_enabled():
            if not np.isfinite(out).all():
                if spec.tape is None:  # batch-generic code: trace this length to find the op
                    spec = self._specialise(key, args)
                    spec.call(*flat)
                self._raise_nonfinite(spec, flat, args)
        else:
            if spec.entry is None:
                hot = None
                if entries.hot_ready(spec, key):
                    ref, held = weakref.ref(self), weakref.ref(spec)  # (no cycles)
                    hot = lambda: ref()._heat(held(), key)  # noqa: E731
                spec.entry = entries.entry(
                    spec, key, self._slow, hot, self._watch_check(), self._hidden_reader()
                )
            self._install(spec.entry)
        return spec.unpack(out)

    def _hidden_reader(self) -> list[Callable[[], Any]]:
        """What reads each hidden input's value, for entries."""
        return [h.read for h in self._caps.hidden]

    def _watch_check(self) -> Callable[[], int] | None:
        """The check of the values ``fun`` reads from outside, for entries (or None)."""
        caps = self._caps
        return caps.checker.changed if caps.watched and caps.checker is not None else None

    def _heat(self, spec: Specialisation, key: tuple) -> None:
        """``spec`` has been called ``HOT_CALLS`` times: give it a direct entry,
        compiled in a thread of its own (``entries.BACKGROUND``): the calls go on
        by the entry they have until it is ready."""
        if not (entries.BACKGROUND and self.background_entries):
            self._heat_now(spec, key)
            return
        thread = threading.Thread(
            target=self._heat_now, args=(spec, key, True), name=f"adcompile: {self._name} entry"
        )
        self._heating = thread
        thread.start()

    def wait_for_entries(self, timeout: float | None = None) -> None:
        """Wait until the direct entries being compiled in the background are ready
        (with ``ADCOMPILE_STRICT=1``, raise what failed there)."""
        for t in (self, *self._variants.values()):
            thread = t._heating
            if thread is not None:
                thread.join(timeout)
            error, t._heat_error = t._heat_error, None
            if error is not None:
                raise error

    def _heat_now(self, spec: Specialisation, key: tuple, background: bool = False) -> None:
        try:
            self._heat_once(spec, key)
        except Exception as e:  # (strict mode: raised by wait_for_entries)
            if not background:
                raise
            self._heat_error = e

    def _heat_once(self, spec: Specialisation, key: tuple) -> None:
        clock = time.perf_counter()
        try:
            if not entries.worth_it(spec, key):  # its calls take long enough as they are
                return
            entry = entries.direct_entry(
                spec,
                key,
                self._slow,
                self._fname_doc()[0],
                self._watch_check(),
                self._hidden_reader(),
            )
        except Exception as e:  # a bug in adcompile: the entry it has keeps working
            if os.environ.get("ADCOMPILE_STRICT", "") not in ("", "0"):
                raise
            warnings.warn(
                f"adcompile: the direct entry of {self._name}() failed to compile "
                f"({type(e).__name__}: {e}); its calls keep the general entry",
                stacklevel=_user_stacklevel(),
            )
            return
        with self._lock:  # (a retrace meanwhile may have dropped spec)
            spec.entry = entry
            spec.direct = time.perf_counter() - clock
            if self._last is spec and spec in self._specs.get(key, ()):
                self._install(entry)
        if "compiles" in os.environ.get("ADCOMPILE_LOG", "").split(","):
            print(
                f"adcompile: compiled a direct entry of {self._fname_doc()[0]} in "
                f"{spec.direct:.2f} s: called {entries.HOT_CALLS} times with {_key_text(key)}",
                file=sys.stderr,
                flush=True,
            )

    # ---- keyword arguments

    def _keywords(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call with keyword arguments, as JAX: they are not differentiated. Numbers
        and arrays are inputs of the compiled code; other values (strings, bools,
        None ...) are part of the specialisation key, so each new one traces again."""
        dynamic, static = [], []
        for k in sorted(kwargs):
            v = kwargs[k]
            if keyword_is_input(v):
                dynamic.append(k)
            else:
                try:
                    hash(v)
                except TypeError:
                    raise TypeError(
                        f"keyword argument {k}= of {self._name}() is a "
                        f"{type(v).__name__}; pass a number or a NumPy array (an input, "
                        "not differentiated), or a hashable value such as a string or a "
                        "tuple (each new value traces again)"
                    ) from None
                static.append((k, v))
        signature = (tuple(dynamic), tuple(static))
        with self._lock:  # (threads calling at once make one variant)
            variant = self._variants.get(signature)
            if variant is None:
                variant = self._variants[signature] = self._variant(dynamic, dict(static))
        return variant(*args, *[kwargs[k] for k in dynamic])

    def _variant(self, dynamic: list[str], static: dict[str, Any]) -> Transformed:
        """This transform of ``fun`` with ``dynamic`` keywords passed after the arguments."""
        f, n = self.fun, len(dynamic)

        def with_keywords(*args: Any) -> Any:
            if n:
                return f(*args[:-n], **dict(zip(dynamic, args[-n:])), **static)
            return f(*args, **static)

        variant = self._like(with_keywords)
        variant._name, variant._namefun, variant._kwnames = self._name, f, tuple(dynamic)
        return variant

    def _like(self, fun: Callable) -> Transformed:
        """The same transform of another function."""
        like = Transformed(
            fun, self.argnums, self.mode, self.debug_nans, self.leaves, self._static
        )
        like.background_entries = self.background_entries
        return like

    # ---- what fun reads from outside its arguments (adcompile.captures)

    def _scan(self, swap: bool = True) -> captures.Captures:
        exclude = list(self.leaves()) if self.leaves is not None else []
        old = self._caps
        self._caps = captures.scan(self.fun, exclude, swap)
        if old is not None and old.outer:  # (they stay inputs)
            self._caps.add_outer(old.outer)
        return self._caps

    def _check_watched(self, caps: captures.Captures) -> None:
        """Trace again when a value traced as a constant has changed since."""
        w = caps.changed()
        if w is None:
            return
        data = (w.how == "array" and w.copy[1].kind == "f") or (
            w.how == "value" and w.copy[0] is float
        )
        with self._lock:
            self._specs.clear()
            self._batches.clear()
            self._last = None
            self._install(None)
            caps.snapshot()
        warnings.warn(
            f"{self._name}() reads {w.what}, which has changed since it was traced "
            "with its value compiled in; tracing again. "
            + (
                "Pass it as an argument (or keep it in a module global or a variable of "
                "the enclosing function) to have it read at every call instead"
                if data
                else "Such values can steer the Python code (loop counts, branches), so "
                "each change is traced, as a new shape is"
            ),
            RetraceWarning,
            stacklevel=_user_stacklevel(),
        )

    def _fun_for_trace(self) -> Callable:
        """``fun`` taking its arguments and then the hidden inputs (swapped in)."""
        caps = self._caps
        if not caps.hidden:
            return self.fun
        h = len(caps.hidden)

        def with_hidden(*args: Any) -> Any:
            bound = caps.bind(args[-h:])
            try:
                return bound(*args[:-h])
            except captures.SwapFailed:
                raise
            except Exception as e:
                raise captures.SwapFailed() from e

        with_hidden.__name__ = self._name
        return with_hidden

    def _visible(self, args: Sequence[Any]) -> Sequence[Any]:
        """``args`` without the hidden inputs' values."""
        h = len(self._caps.hidden)
        return args[: len(args) - h] if h else args

    def _trace(self, args: Sequence[Any], sites: bool = False) -> Tape:
        """The tape of ``fun`` at ``args`` (the hidden inputs' values after them);
        with ``sites``, the user's line of each slot too."""
        names = self._names(len(args))
        fun = self._fun_for_trace()
        # constants first: the compiled path folds loops (the tape is not shown)
        multi = self.mode == "jit"  # jit returns what fun returns; gradients need a scalar
        if self.leaves is not None:  # argument 0 holds the leaves' values
            leaves = list(self.leaves())
            return self._trace_captured(fun, args[1:], leaves, names[1:], sites, True, multi)
        return self._trace_captured(fun, args, (), names, sites, True, multi)

    def _trace_captured(self, fun: Callable, args: Sequence[Any], *rest: Any) -> Tape:
        """``trace_call(fun, args, *rest)`` with what ``fun`` reads from outside (its
        outer Values, its generators), then settled (``Captures.settle``)."""
        caps = self._caps
        outer = caps.outer if caps is not None else None
        gens = caps.generators if caps is not None else ()
        tape = trace_call(fun, args, *rest, outer=outer, generators=gens)
        if caps is not None and caps.watched:
            caps.settle()  # (what f itself changed while it ran is no change)
        return tape

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
        with _Announce(self._fname_doc()[0]) as announce:
            reason = self._reason = self._why(key, flat)
            clock = time.perf_counter()
            self._stages = {}
            batches = dict(self._batches)
            found = self._batch_call(key, args, flat)
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
            spec = self._specialise(key, args)
            announce.done(spec.compiled)
            self._record(reason, spec, clock, key)
        ok, out = spec.call(*flat)
        if not ok:  # the trace itself took these branches, so this cannot happen
            raise RuntimeError("adcompile: a fresh specialisation failed its own guards")
        return spec, out

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
                        f"a guard failed: {_slot_text(tape, g.a)} {g.cmp} "
                        f"{_slot_text(tape, g.b)} was {g.expected} when traced, now "
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

    # ---- batch-generic code (adcompile.batch)

    def _wrt_args(self, nargs: int) -> list[int]:
        """The differentiated arguments (the leaves' values are argument 0), of ``nargs``."""
        return [0] if self.leaves is not None else self._wrt(nargs)

    def _batch_call(self, key: tuple, args: Sequence[Any], flat: list) -> tuple | None:
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
        if gen is None:
            if gkey in self._batches or n < batch.MIN_LENGTH:  # tried: not one program
                return None
        elif not gen.serves(n):
            return None  # shorter than any length traced, or its branches on n differ here
        params = self._params(self._names(len(args)), key)
        program = None if gen is None else gen.at(n, params)
        if program is None:  # no code yet (none tried, or a batch.Deferred)
            gen = self._batches[gkey] = self._compile_batch(key, args, which, n)
            program = None if gen is None else gen.at(n, params)
            if program is None:
                return None
        ok, out = program(*flat)
        if not ok or not self._same_value(args, out[0], flat, program):
            return None  # other branches, or f treats this length differently
        spec = Specialisation(None, program, self._layout(key)[0], self.mode, self._many)
        specs = self._specs.setdefault(key, [])
        specs.insert(0, spec)
        del specs[MAX_SPECIALISATIONS:]
        return spec, out, n

    def _compile_batch(self, key: tuple, args: Sequence[Any], which: list[int], n: int) -> Any:
        """Trace at a few small lengths and compile one program for every length that
        takes the branches on the length they took, ``n`` among them (None when they
        are not one program, or take different branches: then each length is traced
        as it is; a ``batch.Deferred`` when ``n`` takes other branches)."""
        arrays = [np.asarray(a, dtype=np.float64) if k in which else a for k, a in enumerate(args)]
        fname, what = self._fname_doc()
        self.traces += 1
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
        from ..backend.jit import STRAIGHT_LINE_LIMIT
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
        try:
            found = batch_source(trace_primal, wrt, fname, doc, STRAIGHT_LINE_LIMIT)
        except _ShortBatch:  # not this way
            return None
        except lengths.LengthDependent as e:  # branches on the length
            return e.kept
        except captures.SwapFailed:
            raise
        except Exception as e:
            _loop_ir_failed(self._name, e)
            return None
        if found is None:
            return None
        loops, ks = found
        self._stages.update(loops.timings)
        work = loops.code.work_size
        work = (work.b, work.a) if isinstance(work, Lin) else (0, work)

        def unrolled() -> Tape:  # the adjoint tape at the largest length traced
            tape, _ = trace_primal(ks[-1], check=False)
            return tape if wrt is None else grad_tape(tape, wrt=self._layout(skey(ks[-1]))[1])

        params = self._params(names, skey(ks[-1]))
        code = (fname, loops.source, [], params, work, loops.code.columns, loops.n_out)
        made = (loops.explanation, unrolled, ks, guards, loops.facts, loops.timings)
        gen = batch.BatchCompiled(*code, *made)
        self._stages["compile"] = gen.timings["compile"]
        return gen

    def _same_value(
        self, args: Sequence[Any], value: float, flat: list, program: CompiledProgram
    ) -> bool:
        """Whether ``f`` run on plain numbers agrees with the generic code at one
        length, ``program``.

        Compared at a point near the call's, moved in the differentiated
        arguments, where a term that vanishes at the call's point (``0.5 *
        theta ** 2`` at 0) does not; at the call's point (``value``) where the
        code takes other branches there or ``f`` gives no number. False when
        ``f`` cannot run on numbers: the length is then traced as it is."""
        leaves = list(self.leaves()) if self.leaves is not None else None
        moved, moved_flat = batch.nearby(args, flat, self._wrt_args(len(args)))
        ok, out = program(*moved_flat)
        if ok:
            got = batch.run_plain(self.fun, self._visible(moved), leaves)
            if got is not None and got == got:
                return batch.agree(got, out[0])
        got = batch.run_plain(self.fun, self._visible(args), leaves)
        return got is not None and batch.agree(got, value)

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

    def _specialise(self, key: tuple, args: Sequence[Any]) -> Specialisation:
        clock = time.perf_counter()
        with gc_paused():  # tracing builds a large acyclic graph
            tape = self._trace(args)
        self._stages = {"trace": time.perf_counter() - clock}
        self._count_trace()
        if tape.tree is not None:  # jit of a function returning several numbers
            params = self._params(self._names(len(args)), key)

            def build_tree() -> CompiledProgram:
                from ..backend.compiled import compile_tape  # Numba is imported on first compile

                return compile_tape(tape, params, *self._fname_doc())

            compiled = self._shared(tape, ("tree", params), build_tree)
            spec = Specialisation(tape, compiled, [], "jit", False, OutLayout.of_tree(tape.tree))
            return self._keep(key, spec)
        layout, positions = self._layout(key)
        params = self._params(self._names(len(args)), key)
        wrt = None if self.mode == "jit" else self._wrt_args(len(key))
        context = ("jit" if wrt is None else "vjp", params, positions, wrt)
        fname = self._fname_doc()[0]

        def restore(record: dict) -> CompiledProgram:
            from ..backend.compiled import LoopCompiled

            if record.get("kind") != "loops":
                raise ValueError(record.get("kind"))
            unrolled = pipeline.unrolled(tape, wrt, positions)
            compiled = LoopCompiled.restored(record, params, fname, unrolled)
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
        code, counted too). With ``restore``, code folded into loops is also kept
        on disk (``jit.write_record``): a later process that traces the same tape
        skips every pass after tracing (``restore(record)``)."""
        from ..backend.jit import (
            FOLD_MIN_SLOTS,
            STRAIGHT_LINE_LIMIT,
            code_version,
            read_record,
            shared_code,
            write_record,
        )

        clock = time.perf_counter()
        settings = (STRAIGHT_LINE_LIMIT, FOLD_MIN_SLOTS, pipeline.LOOP_IR, code_version())
        digest, ops = tape.digest(repr((context, settings)))
        on_disk = restore is not None and all(id(op) in _BUILTIN_OPS for op in ops)

        def made() -> Any:
            if on_disk:
                record = read_record(digest)
                if record is not None:
                    try:
                        compiled = restore(record)
                    except Exception:  # (a record of another kind or damaged: made again)
                        pass
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
            lambda e: _loop_ir_failed(self._name, e),
        )

    def _keep(self, key: tuple, spec: Specialisation) -> Specialisation:
        """Keep ``spec`` first among the specialisations of ``key``."""
        specs = self._specs.setdefault(key, [])
        specs.insert(0, spec)
        del specs[MAX_SPECIALISATIONS:]
        self._last = spec
        return spec

    def _count_trace(self) -> None:
        """Count a trace; warn once when there have been many."""
        self.traces += 1
        if self.traces > MAX_SPECIALISATIONS and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self._name}() has been traced {self.traces} times, this time because of "
                f"{self._reason or 'new shapes or branches'}; each trace compiles again. Keep "
                "shapes fixed, or branch with ad.maximum / ad.relu instead of if "
                "(ad.explain(fn) lists every reason)",
                RetraceWarning,
                stacklevel=_user_stacklevel(),
            )

    def _call_traced(self, args: Sequence[Any]) -> Any:
        """Called on Values (under an outer transform, or eagerly): replay the tape
        of value and gradient on those Values, so the result records as well."""
        point = data_point(args)
        _, key = flatten_args(self._name, point)
        wrt = self._wrt(len(args))
        tape = trace_call(
            self._fun_for_trace(),
            point,
            names=self._names(len(point)),
            multi=self.mode == "jit",
        )
        sizes = [1 if s is None else int(np.prod(s)) for s in key]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        positions = [p for k in wrt for p in range(offsets[k], offsets[k + 1])]
        gtape = tape if self.mode == "jit" else grad_tape(tape, wrt=positions)
        outs = replay(gtape, args)
        if self.mode == "jit":
            return outs[0] if tape.tree is None else values_like(tape.tree, outs)
        grads, k = [], 1
        for idx in wrt:
            shape = key[idx]
            if shape is None:
                grads.append(outs[k])
                k += 1
            else:
                size = int(np.prod(shape))
                arr = np.empty(size, dtype=object)
                arr[:] = outs[k : k + size]
                grads.append(_as_tensor(arr.reshape(shape)))
                k += size
        g = tuple(grads) if self._many else grads[0]
        return g if self.mode == "grad" else (outs[0], g)

    @property
    def source(self) -> str:
        """The generated source of the most recently used specialisation."""
        if self._last is None:
            raise AttributeError(
                f"{self._name}() has not been compiled yet: call it once, or use "
                "ad.show_code(f, *args)"
            )
        return self._last.compiled.source

    def spec_for(self, args: Sequence[Any]) -> tuple[Specialisation, tuple]:
        """The specialisation that serves these arguments (compiling if needed), and
        the call's structure key."""
        return self._adopting(lambda: self._spec_for(args))

    def _spec_for(self, args: Sequence[Any]) -> tuple[Specialisation, tuple]:
        caps = self._caps if self._caps is not None else self._scan()
        args = (*args, *caps.values())
        flat, key = flatten_args(self._name, args, caps.hidden, self._skip)
        for spec in self._specs.get(key, ()):
            if spec.call(*flat)[0]:
                return spec, key
        return self._miss(key, args, flat)[0], key

    # ---- for modules that drive a transform (adcompile.distributed)

    @property
    def captures(self) -> captures.Captures:
        """What ``fun`` reads from outside its arguments (found on first use)."""
        return self._caps if self._caps is not None else self._scan()

    def check_captures(self) -> None:
        """Trace again (with a RetraceWarning) if a value compiled in has changed."""
        caps = self.captures
        if caps.watched:
            self._check_watched(caps)

    @property
    def last(self) -> Specialisation | None:
        """The specialisation the last call ran (None before the first)."""
        return self._last

    @property
    def specialisations(self) -> dict[tuple, list[Specialisation]]:
        """The specialisations kept, per argument structure (its shapes)."""
        return dict(self._specs)

    @property
    def variants(self) -> list[Transformed]:
        """This transform for each keyword signature it was called with."""
        return list(self._variants.values())

    def arg_names(self, nargs: int) -> list[str]:
        """The names of ``nargs`` arguments in generated code and messages."""
        return self._names(nargs)

    @property
    def fun_name(self) -> str:
        """``fun``'s name as an identifier."""
        return self._name

    @property
    def compiled_name(self) -> str:
        """The name of the generated function (``f_value_and_grad`` ...)."""
        return self._fname_doc()[0]

    @property
    def compiled_doc(self) -> str:
        """The generated function's docstring."""
        return self._fname_doc()[1]

    def params_for(self, key: tuple) -> list[Param]:
        """The generated code's parameters for arguments of structure ``key``."""
        return self._params(self._names(len(key)), key)

    @property
    def explanation(self) -> str:
        """Why the most recently used specialisation's code has the form it has."""
        if self._last is None:
            raise AttributeError(f"{self._name}() has not been compiled yet: call it once")
        return self._last.compiled.explanation

    def answered(self, kwargs: dict[str, Any]) -> str:
        """The compiled code that answered the last call (with keywords ``kwargs``), with
        what ``ad.explain`` knows of it: for check mode's errors."""
        t = self
        if kwargs:  # the transform of the keyword signature (_keywords)
            dynamic = tuple(sorted(k for k, v in kwargs.items() if keyword_is_input(v)))
            static = tuple(
                (k, kwargs[k]) for k in sorted(kwargs) if not keyword_is_input(kwargs[k])
            )
            t = self._variants.get((dynamic, static), self)
        spec = t.last
        if spec is None:
            return "no specialisation recorded"
        text = summary(spec.compiled.facts)
        if spec.direct is not None:
            text += ", with a direct entry (hot)"
        traced = sum(e.traced for e in t.events)
        text += f"; {traced} trace{'s' * (traced != 1)} so far"
        if t.events:
            text += f", the last because of: {t.events[-1].reason}"
        return text

    @property
    def facts(self) -> CodeFacts:
        """What the most recently used specialisation's code is, in numbers
        (``codegen.CodeFacts``: its kind, operations, statements, loops)."""
        if self._last is None:
            raise AttributeError(f"{self._name}() has not been compiled yet: call it once")
        return self._last.compiled.facts

    def code_for(self, *args: Any) -> str:
        """The generated source for these arguments (compiling if needed)."""
        return self.spec_for(args)[0].compiled.source

    def numba(self, *example_args: Any) -> Callable:
        """The Numba function of the specialisation ``example_args`` take, to call from
        your own ``@numba.njit`` code: ``fn(*args, out) -> bool``.

        ``args`` are the positional arguments in order, each a float or a
        C-contiguous float64 array (an array of several dimensions flattened with
        ``.ravel()``), of the shapes of ``example_args``. ``out`` is a float64
        array the function fills: for ``value_and_grad`` and ``grad``,
        ``out[0]`` is the value and the gradients follow, flattened, in
        ``argnums`` order (``1 + `` their total size); for ``jit``, ``out[0]``.
        It returns False when a guard fails (these inputs would take another
        branch than the traced one; ``out`` then means nothing): call the
        transform itself there, which traces again. Helpers, objects and
        containers ``f`` reads are taken as they were when traced (the Numba
        function does not watch them); data it reads from outside is refused.
        """
        caps = self._caps if self._caps is not None else self._scan()
        data = [w for w in caps.watched if w.how in ("value", "array")]  # (not structure)
        if caps.hidden or data:
            what = caps.hidden[0].what if caps.hidden else data[0].what
            raise TypeError(
                f"{self._name}() reads {what} from outside its arguments; the Numba "
                "function takes only the arguments, so pass that data as an argument "
                "to use .numba()"
            )
        spec, key = self.spec_for(example_args)
        return self.numba_of(spec, key)

    def traced_spec(self, *args: Any) -> Specialisation:
        """A specialisation traced at exactly these arguments' shapes (not code generic
        in the batch length), kept beside the others."""

        def traced() -> Specialisation:
            full = (*args, *self.captures.values())
            _, key = flatten_args(self._name, full, self.captures.hidden, self._skip)
            with self._lock:
                return self._specialise(key, full)

        return self._adopting(traced)

    def numba_of(self, spec: Specialisation, key: tuple) -> Callable:
        """The Numba function of ``spec`` (see ``numba``), made once. Its arguments
        are those of ``key``: the hidden inputs' values, if any, last."""
        return spec.compiled.numba


# names generated code uses besides the arguments: an argument of the same name is
# renamed there (``x_``); Python's builtins included (``range``, ``len`` ...)
_RESERVED = frozenset({"out", "math", "params", *dir(builtins)})


class _ShortBatch(Exception):
    """``f`` failed when traced on the first rows of its data only."""


def _loop_ir_failed(name: str, error: Exception) -> None:
    """The loop IR failed on a program (a bug in adcompile): compile the unrolled tape
    instead, and say so; with ``ADCOMPILE_STRICT=1`` (the test suite), raise."""
    if os.environ.get("ADCOMPILE_STRICT", "") not in ("", "0"):
        raise error
    warnings.warn(
        f"adcompile: folding {name}() into loops failed ({type(error).__name__}: {error}); "
        "it is compiled as an unrolled tape instead, which takes longer. Please report "
        "this with the function",
        RuntimeWarning,
        stacklevel=_user_stacklevel(),
    )


def _static_positions(static_argnums: Any) -> tuple[int, ...]:
    """``static_argnums`` as a tuple of ints (TypeError naming what else it was)."""
    nums = static_argnums if isinstance(static_argnums, (tuple, list)) else (static_argnums,)
    if not all(isinstance(k, int) and not isinstance(k, bool) for k in nums):
        raise TypeError(
            f"static_argnums must be an int or a tuple of ints (positions of arguments "
            f"that are constants of the code, such as sizes), got {static_argnums!r}"
        )
    return tuple(nums)


def _check_argnums(argnums: Any, mode: str) -> None:
    if mode == "jit":
        return
    ok = (isinstance(argnums, int) and not isinstance(argnums, bool)) or (
        isinstance(argnums, (tuple, list))
        and all(isinstance(k, int) and not isinstance(k, bool) for k in argnums)
    )
    if not ok:
        raise TypeError(
            f"argnums must be an int or a tuple of ints (positions of the arguments to "
            f"differentiate), got {argnums!r}"
        )


def data_point(args: Sequence[Any]) -> list[Any]:
    """The numbers that arguments holding Values stand for (floats, float arrays)."""
    return [
        np.vectorize(lambda v: v.data if isinstance(v, Value) else v, otypes=[float])(a)
        if isinstance(a, np.ndarray)
        else (a.data if isinstance(a, Value) else a)
        for a in args
    ]


def replay(code: Tape, args: Sequence[Any]) -> list[Any]:
    """``code``'s outputs computed on ``args`` (Values, arrays of them, numbers) by
    recording them: how a transform called inside another one records."""
    flat_in: list[Any] = []
    for a in args:
        flat_in.extend(np.asarray(a, dtype=object).ravel() if isinstance(a, np.ndarray) else [a])
    vals = forward_sweep(code, flat_in, const=constant)
    for g in code.guards:  # comparing Values records the guards in an outer trace
        COMPARE[g.cmp](vals[g.a], vals[g.b])
    return [vals[o] for o in code.outputs]


def _slot_text(tape: Tape, i: int) -> str:
    """Slot ``i`` as a guard message names it: an input by name, a constant by value."""
    node = tape.nodes[i]
    if node.op == CONST:
        return repr(node.value)
    if i in tape.inputs:
        return tape.names[tape.inputs.index(i)]
    return f"v{i}"


def values_like(layout: OutLayout | Any, values: Sequence[Any]) -> Any:
    """Values laid out as ``layout`` (an OutLayout, or an output tree laid out from
    0; see ``adcompile.outputs``): arrays as ValueArrays."""
    flat = np.empty(len(values), dtype=object)
    flat[:] = list(values)
    if not isinstance(layout, OutLayout):
        layout = OutLayout.of_tree(layout)
    parts = [
        flat[s] if sh is None else _as_tensor(flat[s : s + int(np.prod(sh))].reshape(sh))
        for s, sh in layout.parts
    ]
    return assemble(layout.tree, parts)


def _unique_params(f: Callable, n: int) -> list[str]:
    names = param_names(f, n)
    return [nm if nm not in _RESERVED else f"{nm}_" for nm in names]


def _user_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the first frame outside adcompile."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_globals.get("__name__", "").startswith("adcompile"):
        f, level = f.f_back, level + 1
    return level


def grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    *,
    static_argnums: int | Sequence[int] = (),
    debug_nans: bool = False,
    check: bool | None = None,
) -> Transformed:
    """The gradient of scalar ``fun`` with respect to argument(s) ``argnums`` (as JAX).

    ``debug_nans=True`` raises NonFiniteError naming the first primitive that made
    nan or inf from finite inputs (as inside ``with ad.debug_nans():``).
    ``static_argnums``: positions of arguments that are constants of the code (sizes,
    trip counts, flags; hashable): each new value traces again, as in JAX.
    Arguments may be tuples, lists and dicts of numbers and arrays (pytrees): the
    gradient has their structure, and float32 arrays get float32 gradients.
    ``check=True`` (default: ``ADCOMPILE_CHECK=1`` in the environment) also runs
    ``fun`` eagerly at every call and raises ``ad.CheckError`` where the two
    disagree (``adcompile.checking``).
    """
    from ..trace.checking import checked

    return checked(Transformed(fun, argnums, "grad", debug_nans, None, static_argnums), check)


def value_and_grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    *,
    static_argnums: int | Sequence[int] = (),
    debug_nans: bool = False,
    check: bool | None = None,
) -> Transformed:
    """``(fun(*args), grad(fun)(*args))`` in one compiled call (as JAX); ``check``
    as for :func:`grad`."""
    from ..trace.checking import checked

    return checked(
        Transformed(fun, argnums, "value_and_grad", debug_nans, None, static_argnums), check
    )


def jit(
    fun: Callable,
    *,
    static_argnums: int | Sequence[int] = (),
    debug_nans: bool = False,
    check: bool | None = None,
) -> Transformed:
    """``fun`` compiled: same value, no Python in the loop after the first call;
    ``check`` as for :func:`grad` (compared with ``fun`` called on floats)."""
    from ..trace.checking import checked

    return checked(Transformed(fun, None, "jit", debug_nans, None, static_argnums), check)


def show_code(f: Callable, *args: Any) -> str:
    """The source adcompile generates for ``f`` at these arguments.

    For a plain function, the value-and-gradient code (all arguments).
    """
    if not isinstance(f, Transformed):
        f = value_and_grad(f, argnums=tuple(range(len(args))))
    return f.code_for(*args)
