"""Function transforms: ``trace``, ``grad``, ``value_and_grad``, ``jit``, ``show_code``.

A transformed function traces ``f`` on its first call with a given argument
structure, compiles the tape, and later runs the compiled code without
calling ``f``. Comparisons ``f`` made on traced values are guards: a call
whose inputs would take another branch traces ``f`` again, so the compiled
code never answers for a branch it did not see.

:class:`Transformed` is the transform's state and its call path (arguments,
pytrees and keywords, the lookup of a specialisation, entries); the rest of it
lives beside it, each concern in a module of its own, as mixins sharing that
state: ``captured`` (what ``f`` reads from outside its arguments),
``compiling`` (a miss: why, trace, compile, keep), ``batching`` (code generic in
the batch length), ``introspect`` (source, facts, Numba function). Plain
functions and data are in ``tracing`` (a call's tape), ``specialisation`` (one
compiled path) and ``events`` (compile events, announcements, warnings).
"""

from __future__ import annotations

import functools
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

from ..backend import entries
from ..ir.tape import Tape
from ..trace import arguments, captures
from ..trace.arguments import argnum_positions, keyword_is_input, param_names
from ..trace.mode import MODE, debug_nans_enabled, gc_paused
from ..trace.value import Value
from .batching import BatchMixin
from .captured import CapturesMixin
from .compiling import CompileMixin
from .events import CompileEvent, RetraceWarning, key_text, user_stacklevel
from .introspect import IntrospectMixin
from .replay import ReplayMixin, owner
from .specialisation import Specialisation
from .tracing import (
    TracedArgs,
    flatten_args,
    function_name,
    trace_or_expand,
)

#: Integer arrays of this many contents trace without a word; the next says so
#: (``RetraceWarning``). The variants of the latest ``INT_DATA_KEEP`` are kept.
INT_DATA_WARN = 4
INT_DATA_KEEP = 16


class Transformed(IntrospectMixin, CompileMixin, BatchMixin, CapturesMixin, ReplayMixin):
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
        self._static = static_positions(static_argnums)
        self.fun = fun
        self.mode = mode  # "grad", "value_and_grad" or "jit"
        self.argnums = argnums
        self._many = isinstance(argnums, (tuple, list))
        self._specs: OrderedDict[tuple, list[Specialisation]] = OrderedDict()
        self._traced = 0  # (traces counts its variants' too)
        self._warned = False
        self._last: Specialisation | None = None
        self._name = function_name(fun)
        self.debug_nans = debug_nans
        # trace array arguments at array level (one node per NumPy call) where fun
        # allows; False: always element by element, as Values
        self.array_level = not debug_nans
        self.expand = False  # (failing on Values: its array program in elements; export)
        self.array_refused: str | None = None  # why fun is not traced at array level
        self.leaves = leaves  # with leaves, calls take their values first: f(leaf_data, *args)
        # with leaves: given the Values made outside fun that a trace read, those it
        # makes leaves too (the call is then made again) and the others (inputs)
        self.adopt: Callable[[Sequence[Value]], tuple[list, list]] | None = None
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
        self._int_data_seen = 0  # calls with integer arrays of new contents
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

    def _wrt_args(self, nargs: int) -> list[int]:
        """The differentiated arguments (the leaves' values are argument 0), of ``nargs``."""
        return [0] if self.leaves is not None else self._wrt(nargs)

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
        front = self.plan_call(args)
        if front is not None:
            variant, plan, wrt = front
            if variant is None:  # float32 arguments: the gradient in their dtype
                return plan.cast(self.call_plain(args, kwargs), self.mode, wrt, self._many)
            out = variant(*plan.leaves, **kwargs)
            return plan.regroup(out, self.mode, wrt, self._many)
        return self.call_plain(args, kwargs)

    def call_plain(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call whose arguments are numbers and float64 arrays (no pytrees, static
        arguments or float32 arrays: see :meth:`plan_call`)."""
        if kwargs:
            return self._keywords(args, kwargs)
        return self._adopting(lambda: self._general_once(args))

    # ---- pytrees, static arguments, float32 (adcompile.arguments)

    @property
    def traces(self) -> int:
        """How many times ``fun`` was traced, by this transform and the variants it made
        for static arguments, keywords, pytrees and float32 arrays."""
        return self._traced + sum(v.traces for v in self._variants.values())

    @property
    def many(self) -> bool:
        """Whether ``argnums`` is a tuple (the gradients then come as a tuple)."""
        return self._many

    def plan_call(
        self, args: tuple
    ) -> tuple[Transformed | None, arguments.Plan, list[int]] | None:
        """How a call with static arguments, pytrees or float32 arrays is made: the
        transform of ``fun`` over the call's leaves (None: this one, the arguments
        only need their dtype back), the call's plan and the differentiated
        positions; None for a call of numbers and float64 arrays."""
        if not (self._static or arguments.needs_plan(args, ())):
            return None
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
        data = [p for p, a in enumerate(args) if arguments.int_data(a) and p not in wrt]
        if data:  # (integer arrays not differentiated: static, by their contents)
            static = sorted({*static, *data})
            args = tuple(arguments.IntData(a) if p in data else a for p, a in enumerate(args))
        names = param_names(self._namefun, nargs)
        plan = arguments.plan(self._name, args, names, static)
        if not static and all(t == arguments.LEAF for t in plan.trees):
            return None, plan, wrt
        with self._lock:  # (threads calling at once make one variant)
            variant = self._variants.get(plan.signature)
            if variant is None:
                if data:
                    self._new_int_data(data, names)
                variant = self._variants[plan.signature] = self._leaf_variant(plan, wrt)
        return variant, plan, wrt

    def _new_int_data(self, data: list[int], names: list[str]) -> None:
        """A call with integer arrays of new contents (traced and compiled again): past
        ``INT_DATA_WARN`` of them, say so once; keep the latest ``INT_DATA_KEEP``."""
        self._int_data_seen += 1
        kept = [  # (a plan's signature: (arguments, trees, statics))
            k
            for k in self._variants
            if len(k) == 3 and any(isinstance(v, arguments.IntData) for _, v in k[2])
        ]
        for k in kept[: max(0, len(kept) - INT_DATA_KEEP + 1)]:
            del self._variants[k]
        if self._int_data_seen == INT_DATA_WARN + 1:
            which = ", ".join(names[p] if p < len(names) else f"argument {p}" for p in data)
            warnings.warn(
                f"{self._name}() was called with integer arrays ({which}) of "
                f"{self._int_data_seen} different contents: the compiled code is specialised "
                "on an integer array that is not differentiated (it is data, read as it is, "
                "such as labels that index), so each new one traces and compiles again. "
                "Pass such data as floats (one-hot labels, a float mask) to compile once",
                RetraceWarning,
                stacklevel=user_stacklevel(),
            )

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
        inside = MODE.get().trace is not None
        if inside:  # (inside another trace: the .data of its Values stand for them)
            args = tuple(owner(a) for a in args)
        try:
            flat, key = flatten_args(self._name, args, self._caps.hidden, self._skip)
        except TracedArgs:
            return self._call_traced(args)
        if inside and self._caps.outer:  # (fun reads Values: the result records on them)
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
        (with ``ADCOMPILE_STRICT=1``, raise what failed there), the loop nests of
        array code (``backend.arrays.LoopVersion``), and the Numba code of programs
        restored from disk, whose first call ran as Python (``backend.python_first``)."""
        from ..backend.arrays import wait_for_loops
        from ..backend.python_first import wait_for_numba

        wait_for_loops(timeout)
        wait_for_numba(timeout)
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
                stacklevel=user_stacklevel(),
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
                f"{spec.direct:.2f} s: called {entries.HOT_CALLS} times with {key_text(key)}",
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

        with_keywords.user_function = f  # (whose module makes its arrays: ``trace.creation``)
        variant = self._like(with_keywords)
        variant._name, variant._namefun, variant._kwnames = self._name, f, tuple(dynamic)
        return variant

    def _like(self, fun: Callable) -> Transformed:
        """The same transform of another function."""
        like = Transformed(fun, self.argnums, self.mode, self.debug_nans, self.leaves)
        like._static = self._static
        like.background_entries, like.array_level = self.background_entries, self.array_level
        like.adopt = self.adopt
        return like


def static_positions(static_argnums: Any) -> tuple[int, ...]:
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


def trace(f: Callable, *args: Any) -> Tape:
    """The tape of ``f`` at ``args``: prints as SSA text, runs, compiles, goes to SymPy.
    Its ``where`` names the user's line of each slot."""
    if isinstance(f, Transformed):
        f = f.fun
    with gc_paused():
        return trace_or_expand(f, args)


def _made(
    fun: Callable, argnums: Any, mode: str, static: Any, nans: bool, check: Any, aux: bool
) -> Any:
    """The transform ``mode`` of ``fun``, checked if asked; with ``aux``, of a ``fun``
    returning ``(output, aux)`` (``api.aux``)."""
    from ..trace.checking import checked
    from .aux import WithAux

    def make(m: str, f: Callable) -> Transformed:
        wrt = None if m == "jit" else argnums
        return checked(Transformed(f, wrt, m, nans, None, static), check)

    return WithAux(fun, mode, make) if aux else make(mode, fun)


def grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    *,
    has_aux: bool = False,
    static_argnums: int | Sequence[int] = (),
    debug_nans: bool = False,
    check: bool | None = None,
) -> Transformed:
    """The gradient of scalar ``fun`` with respect to argument(s) ``argnums`` (as JAX).

    ``debug_nans=True`` raises NonFiniteError naming the first primitive that made
    nan or inf from finite inputs. ``static_argnums``: arguments that are constants
    of the code (sizes, flags; hashable): each new value traces again, as in JAX.
    Arguments may be pytrees of numbers and arrays: the gradient has their
    structure and dtype. ``check=True`` (or ``ADCOMPILE_CHECK=1``) also runs ``fun``
    eagerly at every call and raises ``ad.CheckError`` where the two disagree.
    ``has_aux=True``: ``fun`` returns ``(output, aux)``, the call ``(gradient,
    aux)``, as in JAX."""
    return _made(fun, argnums, "grad", static_argnums, debug_nans, check, has_aux)


def value_and_grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    *,
    has_aux: bool = False,
    static_argnums: int | Sequence[int] = (),
    debug_nans: bool = False,
    check: bool | None = None,
) -> Transformed:
    """``(fun(*args), grad(fun)(*args))`` in one compiled call (as JAX); ``check``
    as for :func:`grad`; with ``has_aux``, ``((value, aux), gradient)``."""
    return _made(fun, argnums, "value_and_grad", static_argnums, debug_nans, check, has_aux)


def jit(
    fun: Callable,
    *,
    static_argnums: int | Sequence[int] = (),
    debug_nans: bool = False,
    check: bool | None = None,
) -> Transformed:
    """``fun`` compiled: same value, no Python in the loop after the first call;
    ``check`` as for :func:`grad` (compared with ``fun`` called on floats)."""
    return _made(fun, None, "jit", static_argnums, debug_nans, check, False)


def show_code(f: Callable, *args: Any) -> str:
    """The source adcompile generates for ``f`` at these arguments.

    For a plain function, the value-and-gradient code (all arguments).
    """
    if not isinstance(f, Transformed):
        f = value_and_grad(f, argnums=tuple(range(len(args))))
    return f.code_for(*args)
