"""Guards on the batch length: what batch-generic code may assume about ``n``.

Batch-generic code (``adcompile.batch``) is traced at a few small lengths and
then serves every length. That is only right when the Python code takes the
same path at every length, and ``if len(y) >= 16`` or ``X[:12]`` do not,
although lengths 8, 9 and 11 cannot tell.

So while a transform traces for batch-generic code, its batch arguments are
:class:`BatchArray` values, whose length, as the user's code reads it, is a
:class:`LenInt`: ``len(y)`` (``builtins.len`` is wrapped for the while),
``y.shape``, ``y.size``, read by the user's code (not NumPy's or
adcompile's); an array made from a batch argument element-wise or as the
rows of a matrix product is one too. A LenInt is an ``int`` that knows how it was made
from the batch length n; arithmetic on it gives LenInts (``len(y) // 2``),
and every comparison on it (``< <= > >= == !=``, truth, hashing) is kept as a
guard: a function of n and the answer it gave. Slicing a BatchArray along
its first axis runs Python's own index clipping on LenInts, so each bound is
a guard too. The generic program is valid exactly for the lengths at which
every guard gives the answer it gave at every traced length (:func:`holds`);
other lengths are traced on their own.

What is not seen (``float(len(y))``, ``0.5 * len(y)``, ``np.shape(y)``, a
row index compared with a constant) is left to the check that compares the
first answer at each new length with ``f`` run on plain numbers, at a point
moved off the call's in the parameters and the float data alike (rows of
zeros there would hide a row weighed otherwise), and with the batch's rows in
reverse order (``api.batching``).
"""

from __future__ import annotations

import builtins
import contextlib
import operator
import sys
import threading
from collections.abc import Callable, Iterator, Sequence, Set
from typing import Any

import numpy as np

from .tensor import ValueArray

#: A function of the batch length n.
Expr = Callable[[int], Any]
#: A guard: a function of n, and the answer it gave when traced.
Guard = tuple[Expr, Any]

_LIBRARY = ("adcompile.", "numpy.")
_ND = np.ndarray
_real_len = builtins.len
_local = threading.local()
_NO_MARKS: frozenset[int] = frozenset()


class Recorder:
    """What one trace for batch-generic code saw of the batch length."""

    def __init__(self, batch: Sequence[np.ndarray]) -> None:
        self.marks = {id(a) for a in batch}  # the arrays traced as BatchArrays
        self._keep = list(batch)  # (their ids stay theirs while this lives)
        self.guards: list[Guard] = []
        self.refused = ""  # why no generic code is possible, or ""


def current() -> Recorder | None:
    """The recorder of this thread's trace for batch-generic code, or None."""
    return getattr(_local, "recorder", None)


def batch_marks() -> Set[int]:
    """The ids of the arrays this thread's trace takes as batch arguments (often empty)."""
    rec = getattr(_local, "recorder", None)
    return rec.marks if rec is not None else _NO_MARKS


def _refuse(why: str) -> None:
    rec = current()
    if rec is not None and not rec.refused:
        rec.refused = why


def _guard(expr: Expr, answer: Any) -> None:
    rec = current()
    if rec is not None:
        rec.guards.append((expr, answer))


def holds(guards: Sequence[Guard], n: int) -> bool:
    """Whether every guard gives, at batch length ``n``, the answer it gave when traced."""
    for expr, answer in guards:
        try:
            if expr(n) != answer:
                return False
        except Exception:
            return False
    return True


# ------------------------------------------------------------------ numbers


def _identity(n: int) -> int:
    return n


def _expr(x: Any) -> Expr | None:
    """``x`` as a function of n: its own for a tracked number, a constant for a
    plain one, None for anything else."""
    if isinstance(x, (LenInt, LenFloat)):
        return x._expr
    if type(x) in (int, float, bool) or isinstance(x, (np.integer, np.floating)):
        c = x.item() if isinstance(x, np.generic) else x
        return lambda n: c
    return None


def _lift(value: Any, expr: Expr) -> Any:
    """``value`` tracked with ``expr`` where it is an int or a float."""
    if type(value) is int:
        return LenInt(value, expr)
    if type(value) is float:
        return LenFloat(value, expr)
    return value


def _arith(fn: Callable[[Any, Any], Any], reflected: bool = False) -> Callable:
    def method(self: Any, other: Any) -> Any:
        oe = _expr(other)
        if oe is None:
            return NotImplemented
        se = self._expr
        a, b = self._plain(), (other._plain() if isinstance(other, (LenInt, LenFloat)) else other)
        if reflected:
            return _lift(fn(b, a), lambda n: fn(oe(n), se(n)))
        return _lift(fn(a, b), lambda n: fn(se(n), oe(n)))

    return method


def _compare(fn: Callable[[Any, Any], bool]) -> Callable:
    def method(self: Any, other: Any) -> Any:
        oe = _expr(other)
        if oe is None:  # a Value, an array ...: the length meets data
            _refuse(f"the batch length was compared with a {type(other).__name__}")
            return NotImplemented
        se = self._expr
        b = other._plain() if isinstance(other, (LenInt, LenFloat)) else other
        answer = fn(self._plain(), b)
        _guard(lambda n: fn(se(n), oe(n)), answer)
        return answer

    return method


def _unary(fn: Callable[[Any], Any]) -> Callable:
    def method(self: Any) -> Any:
        se = self._expr
        return _lift(fn(self._plain()), lambda n: fn(se(n)))

    return method


class _Tracked:
    """The operators of LenInt and LenFloat."""

    _expr: Expr

    def _plain(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return repr(self._plain())

    def __reduce__(self) -> tuple:  # (pickles and copies as a plain int or float)
        plain = self._plain()
        return (type(plain), (plain,))

    __add__ = _arith(operator.add)
    __radd__ = _arith(operator.add, True)
    __sub__ = _arith(operator.sub)
    __rsub__ = _arith(operator.sub, True)
    __mul__ = _arith(operator.mul)
    __rmul__ = _arith(operator.mul, True)
    __truediv__ = _arith(operator.truediv)
    __rtruediv__ = _arith(operator.truediv, True)
    __floordiv__ = _arith(operator.floordiv)
    __rfloordiv__ = _arith(operator.floordiv, True)
    __mod__ = _arith(operator.mod)
    __rmod__ = _arith(operator.mod, True)
    __pow__ = _arith(operator.pow)
    __rpow__ = _arith(operator.pow, True)
    __neg__ = _unary(operator.neg)
    __pos__ = _unary(operator.pos)
    __abs__ = _unary(operator.abs)
    __lt__ = _compare(operator.lt)
    __le__ = _compare(operator.le)
    __gt__ = _compare(operator.gt)
    __ge__ = _compare(operator.ge)
    __eq__ = _compare(operator.eq)
    __ne__ = _compare(operator.ne)

    def __bool__(self) -> bool:
        se, answer = self._expr, bool(self._plain())
        _guard(lambda n: bool(se(n)), answer)
        return answer

    def __hash__(self) -> int:
        # a dict or set lookup by the length: only this very length is known to match
        se, value = self._expr, self._plain()
        _guard(lambda n: se(n) == value, True)
        return hash(value)


class LenInt(_Tracked, int):
    """An int made from the batch length: comparisons on it are guards (module doc)."""

    def __new__(cls, value: int, expr: Expr = _identity) -> LenInt:
        self = int.__new__(cls, value)
        self._expr = expr
        return self

    def _plain(self) -> int:
        return int.__int__(self)

    __and__ = _arith(operator.and_)
    __rand__ = _arith(operator.and_, True)
    __or__ = _arith(operator.or_)
    __ror__ = _arith(operator.or_, True)
    __xor__ = _arith(operator.xor)
    __rxor__ = _arith(operator.xor, True)
    __lshift__ = _arith(operator.lshift)
    __rshift__ = _arith(operator.rshift)


class LenFloat(_Tracked, float):
    """A float made from the batch length (``len(y) / 2``): as LenInt."""

    def __new__(cls, value: float, expr: Expr = _identity) -> LenFloat:
        self = float.__new__(cls, value)
        self._expr = expr
        return self

    def _plain(self) -> float:
        return float.__float__(self)

    __floor__ = _unary(lambda x: x.__floor__())
    __ceil__ = _unary(lambda x: x.__ceil__())
    __trunc__ = _unary(lambda x: x.__trunc__())

    def __round__(self, ndigits: int | None = None) -> Any:
        se = self._expr
        return _lift(round(self._plain(), ndigits), lambda n: round(se(n), ndigits))


# ------------------------------------------------------------------ arrays


def _from_user(depth: int = 2) -> bool:
    """Whether the frame ``depth`` up (the caller's caller) is the user's code."""
    return not sys._getframe(depth).f_globals.get("__name__", "").startswith(_LIBRARY)


def _basic(k: Any) -> bool:
    return k is None or k is Ellipsis or isinstance(k, (int, slice, np.integer))


class BatchArray(ValueArray):
    """A ValueArray whose first axis is the batch (its length a function of n):
    its length, as the user's code reads it, is a LenInt (module doc)."""

    _lenexpr: Expr | None = None  # its first axis' length in n (None: not tracked)

    def __array_finalize__(self, obj: Any) -> None:
        self._lenexpr = None  # a view or a new array: not known to be along the batch

    @property
    def shape(self) -> tuple:  # type: ignore[override]
        """The shape; its first length a LenInt when read by the user's code."""
        s = _ND.shape.__get__(self)
        if self._lenexpr is None or not s or not _from_user():
            return s
        return (LenInt(s[0], self._lenexpr), *s[1:])

    @shape.setter
    def shape(self, new: Any) -> None:
        _ND.shape.__set__(self, new)

    @property
    def size(self) -> int:  # type: ignore[override]
        """The number of elements; a LenInt when read by the user's code."""
        s = _ND.shape.__get__(self)
        size = _ND.size.__get__(self)
        if self._lenexpr is None or not s or not _from_user():
            return size
        rest, e = int(np.prod(s[1:], dtype=np.int64)), self._lenexpr
        return LenInt(size, lambda n: e(n) * rest)

    def __getitem__(self, key: Any) -> Any:
        r = _ND.__getitem__(self, key)
        e = self._lenexpr
        if e is None or type(r) is not BatchArray:
            return r
        first = key[0] if type(key) is tuple and key else key
        if type(first) is slice and (type(key) is not tuple or all(map(_basic, key))):
            r._lenexpr = _sliced(LenInt(_ND.shape.__get__(self)[0], e), first)
        return r

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        r = super().__array_ufunc__(ufunc, method, *inputs, **kwargs)
        if method == "__call__" and not kwargs and isinstance(r, np.ndarray) and r.ndim:
            e = _leading(ufunc, inputs, r)
            if e is not None:
                r = r.view(BatchArray)
                r._lenexpr = e
        return r


def _leading(ufunc: np.ufunc, inputs: Sequence[Any], r: np.ndarray) -> Expr | None:
    """The length in n of the first axis of ``ufunc(*inputs)``, where it is an
    input's first axis (element-wise, or the rows of a matrix product)."""
    if ufunc is np.matmul:
        a = inputs[0]
        if type(a) is BatchArray and a._lenexpr is not None and a.ndim == 2:
            return a._lenexpr
        return None
    for a in inputs:
        if (
            type(a) is BatchArray
            and a._lenexpr is not None
            and a.ndim == r.ndim
            and _ND.shape.__get__(a)[0] == r.shape[0]
        ):
            return a._lenexpr
    return None


def _sliced(m: LenInt, s: slice) -> Expr | None:
    """The length in n of ``range(m)[s]``, by Python's own clipping of the bounds
    (``PySlice_AdjustIndices``) run on LenInts, so that each choice it makes is
    a guard; None, with no generic code, for steps other than 1 and -1."""
    step = 1 if s.step is None else s.step
    if not (isinstance(step, (int, np.integer)) and abs(int(step)) == 1):
        _refuse("a batch argument was sliced with a step other than 1 and -1")
        return None
    bounds = []
    for b in (s.start, s.stop):
        if b is not None and not isinstance(b, (int, np.integer)):
            _refuse("a batch argument was sliced with bounds that are not integers")
            return None
        bounds.append(int(b) if isinstance(b, np.integer) else b)
    start, stop = bounds
    if step > 0:
        lo, hi = 0, m
        start = 0 if start is None else start
        stop = m if stop is None else stop
    else:
        lo, hi = -1, m - 1
        start = m - 1 if start is None else start
        stop = -1 if stop is None else stop

    def clip(b: Any) -> Any:
        if b < 0:
            b = b + m
            if b < 0:
                b = lo
        elif b >= m:
            b = hi
        return b

    start = clip(start) if s.start is not None else start
    stop = clip(stop) if s.stop is not None else stop
    if step < 0:
        start, stop = stop, start
    return _expr(stop - start if stop > start else 0)


# ------------------------------------------------------------------ tracing


def batch_view(obj: np.ndarray) -> BatchArray:
    """``obj`` (an object array of Values) as a batch argument of length n."""
    arr = obj.view(BatchArray)
    arr._lenexpr = _identity
    return arr


def _len(obj: Any, /) -> int:
    """``len``, which gives a LenInt for a batch argument read by the user's code."""
    n = _real_len(obj)
    if type(obj) is BatchArray and obj._lenexpr is not None and _from_user():
        return LenInt(n, obj._lenexpr)
    return n


_patch_lock = threading.Lock()
_patch_depth = 0


@contextlib.contextmanager
def recording(rec: Recorder) -> Iterator[Recorder]:
    """Within this block this thread's trace keeps what it sees of the batch
    length in ``rec`` (``builtins.len`` is wrapped meanwhile: for anything but a
    batch argument it is ``len``; nested and concurrent uses are counted)."""
    global _patch_depth
    with _patch_lock:
        if _patch_depth == 0:
            builtins.len = _len
        _patch_depth += 1
    outer = getattr(_local, "recorder", None)
    _local.recorder = rec
    try:
        yield rec
    finally:
        _local.recorder = outer
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                builtins.len = _real_len


class LengthDependent(Exception):
    """A trace for batch-generic code found that the code depends on the length in
    a way the generic code cannot serve this call: ``kept`` is what to keep for
    the argument structure (a ``batch.Deferred``, or None: never generic)."""

    def __init__(self, kept: Any = None) -> None:
        super().__init__("the traced code depends on the batch length")
        self.kept = kept
