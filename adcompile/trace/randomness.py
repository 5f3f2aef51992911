"""Random draws inside a traced function are refused by name.

A trace records the numbers a draw returned as constants: every later call of
the compiled code would repeat them, where plain Python draws new ones. So a
trace compares the state of NumPy's and Python's global generators (and of any
generator object the function reaches from outside, found by
``adcompile.captures``) before and after, and raises :class:`RandomDrawError`
naming the draw when one moved. A global generator is shared by every thread:
where another thread ran, a move is checked by tracing once more
(:func:`once_more_if_shared`). A generator the function makes itself with no
seed (``np.random.default_rng()``) draws its seed from the operating system:
NumPy asks for that entropy through ``numpy.random.bit_generator.randbits``,
which is wrapped here to count the asks of each thread, as is
``random.Random.seed`` (``random.Random()`` with no seed), so such a generator
made while tracing is refused too.
"""

from __future__ import annotations

import functools
import os
import pickle
import random
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

#: Generator objects whose state a trace watches when a function reaches them.
GENERATOR_TYPES = (np.random.Generator, np.random.RandomState, random.Random)


_asks = threading.local()  # .count: the asks for the OS's entropy of this thread

#: Asks for entropy made for these modules' own use: a temporary file's random name
#: (the compile cache writes files; Numba names a lock so when it starts threads).
_NOT_DRAWS = ("tempfile", "multiprocessing", "numba", "adcompile")


#: Modules between an ask and the code that made it (``uuid.uuid4`` asks for Numba's
#: cache files, under a ``contextlib`` block).
_ON_THE_WAY = ("random", "functools", "uuid", "secrets", "contextlib")


def _ask() -> None:
    """Count an ask for the OS's entropy, unless it was made for a temporary name
    (``_NOT_DRAWS``), not by the code that asked for a generator."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module not in _ON_THE_WAY and not module.startswith("numpy."):
            break
        frame = frame.f_back
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    if module.split(".")[0] not in _NOT_DRAWS:
        _asks.count = getattr(_asks, "count", 0) + 1


def _counted(ask: Callable[[int], Any]) -> Callable[[int], Any]:
    """``ask`` (NumPy's entropy, ``os.urandom``), each call counted (``_ask``)."""

    @functools.wraps(ask)
    def asked(k: int) -> Any:
        _ask()
        return ask(k)

    return asked


def _counted_seed(seed: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(seed)
    def seeded(self: random.Random, a: Any = None, *args: Any, **kwargs: Any) -> None:
        if a is None:  # (random.Random(): seeded from the OS's entropy)
            _ask()
        return seed(self, a, *args, **kwargs)

    return seeded


# (os.urandom: the OS's random bytes, which secrets, uuid.uuid4 and SystemRandom read)
os.urandom = _counted(os.urandom)
random._urandom = os.urandom  # type: ignore[attr-defined]
random.Random.seed = _counted_seed(random.Random.seed)  # type: ignore[method-assign]
random.SystemRandom.seed = _counted_seed(random.SystemRandom.seed)  # type: ignore[method-assign]

try:  # (NumPy's SeedSequence() with no entropy given asks it of this function)
    from numpy.random import bit_generator as _bit_generator

    if callable(getattr(_bit_generator, "randbits", None)):
        _bit_generator.randbits = _counted(_bit_generator.randbits)
except ImportError:  # pragma: no cover  (another NumPy: unseeded generators go unseen)
    pass


class RandomDrawError(RuntimeError):
    """A traced function drew random numbers, which the compiled code would freeze.
    ``shared``: the generator that moved is a global one, which every thread draws
    from (:func:`once_more_if_shared`)."""

    shared = False


T = TypeVar("T")


def once_more_if_shared(trace: Callable[..., T]) -> Callable[..., T]:
    """``trace``, run once more where it found a global generator moved while other
    threads ran: another thread's draw (a Dask scheduler's ``random.shuffle``) moves
    the one state all threads share, and is not the function's. A draw of the
    function's own moves it at every trace, and is refused the second time too."""

    @functools.wraps(trace)
    def traced(*args: Any, **kwargs: Any) -> T:
        try:
            return trace(*args, **kwargs)
        except RandomDrawError as e:
            if not e.shared or threading.active_count() < 2:
                raise
        return trace(*args, **kwargs)

    return traced


def moves(v: Any) -> bool:
    """Whether ``v`` is a random generator or an iterator (of Python's own kinds, or a
    generator): what a trace may move, and its compiled code would not."""
    return isinstance(v, GENERATOR_TYPES) or (
        isinstance(v, Iterator)
        and (isinstance(v, types.GeneratorType) or type(v).__module__ in ("builtins", "itertools"))
    )


def _state(gen: Any) -> Any:
    if isinstance(gen, np.random.Generator):
        return gen.bit_generator.state
    if isinstance(gen, np.random.RandomState):
        return gen.get_state()
    if isinstance(gen, random.Random):
        return gen.getstate()
    return _position(gen)


def _position(it: Any) -> Any:
    """Where an iterator is (what ``next`` moves), as far as it says: a generator's
    frame, the items left of a list's iterator, a count's next number."""
    if isinstance(it, types.GeneratorType):  # (where it stopped, and its variables there)
        frame = it.gi_frame
        return None if frame is None else (frame.f_lasti, dict(frame.f_locals))
    try:  # (its pickle holds the iterators inside it too: a cycle's list iterator)
        return pickle.dumps(it)
    except Exception:
        pass
    try:
        hint = it.__length_hint__() if hasattr(it, "__length_hint__") else None
        reduced = it.__reduce__()
        return hint, reduced[1:] if type(reduced) is tuple else None
    except Exception:  # (it says nothing: not watched)
        return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b))
    return bool(a == b)


class Watch:
    """The generators' states before a trace; :meth:`check` raises if one moved."""

    def __init__(self, generators: Sequence[tuple[str, Any]] = ()) -> None:
        self.gens = [
            ("NumPy's global generator (np.random.*)", np.random.mtrand._rand),
            ("Python's global generator (random.*)", random._inst),
            *generators,
        ]
        self.before = [_state(g) for _, g in self.gens]
        self.asks = getattr(_asks, "count", 0)

    def check(self, fname: str, names: frozenset[str] = frozenset()) -> None:
        """Raise :class:`RandomDrawError` if a generator moved since; ``names``: the
        attribute names the function's code reads, to name the draw."""
        if getattr(_asks, "count", 0) != self.asks:
            raise RandomDrawError(
                f"{fname}() drew from the operating system's randomness (os.urandom, "
                "secrets, uuid.uuid4), or made a random generator seeded from the operating "
                "system (np.random.default_rng() or random.Random() with no seed, "
                "random.SystemRandom(), or a "
                "SeedSequence() of none; np.random.RandomState(seed) makes one too, "
                "then seeds it) while it was traced: the compiled code would repeat its "
                "draws at every call. Draw the random numbers outside the function and "
                "pass them in as an argument, or give the generator a seed "
                "(np.random.default_rng(seed), random.Random(seed))"
            )
        for (what, gen), state in zip(self.gens, self.before):
            if not isinstance(gen, GENERATOR_TYPES):
                if not _same(_state(gen), state):
                    raise RandomDrawError(
                        f"{fname}() took items from {what}, an iterator made outside it, "
                        "while it was traced: the compiled code would repeat them at every "
                        "call, where plain Python takes the next ones. Take them outside "
                        "the function and pass them in as arguments"
                    )
                continue
            if not _same(_state(gen), state):
                calls = _draws(names, gen)
                named = f" ({', '.join(calls)})" if calls else ""
                error = RandomDrawError(
                    f"{fname}() drew random numbers from {what}{named} while it was traced: "
                    "the compiled code would repeat the same numbers at every call. Draw "
                    "them outside the function and pass them in as an argument (JAX-style: "
                    "pass a key or seed, or the noise itself), or call the function without "
                    "compiling it"
                )
                error.shared = gen is np.random.mtrand._rand or gen is random._inst
                raise error


def _draws(names: frozenset[str], gen: Any) -> list[str]:
    """The draws among ``names`` (``np.random.normal`` ...), for the message."""
    if gen is np.random.mtrand._rand:
        prefix, space = "np.random.", dir(np.random)
    elif gen is random._inst:
        prefix, space = "random.", dir(random)
    else:
        prefix, space = "", dir(gen)
    return sorted(prefix + n for n in names if n in space and not n.startswith("_"))
