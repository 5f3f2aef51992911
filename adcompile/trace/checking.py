"""Check mode: every call of a compiled transform also runs ``f`` eagerly and compares.

``ad.value_and_grad(f, check=True)`` (also ``ad.grad``, ``ad.jit``), or any
of them while the environment variable ``ADCOMPILE_CHECK=1`` is set, gives a
:class:`Checked` transform. Each call runs the compiled code as usual (its
entries and direct entries included) and then ``f`` itself:

- ``grad`` / ``value_and_grad``: ``f`` on ``ad.Value`` leaves made from the
  arguments (numbers become Values, arrays and lists object arrays of Values,
  as tracing makes them; numbers and arrays passed by keyword too), then
  ``.backward()`` and the leaves' ``.grad``; where NumPy refuses arrays of
  Values (``np.var``: code traced at array level), ``f`` on floats, and each
  gradient along a random direction against central differences;
- ``jit``: ``f`` on the arguments as floats (numbers as ``float``, arrays and
  lists as float64 arrays); where ``f`` cannot run on floats (it calls Value
  methods such as ``x.tanh()``), on Values as for a gradient.

Values are held to ``|compiled - eager| <= ATOL + RTOL * max(|compiled|,
|eager|)``; nan equals nan, an infinity itself. The first disagreement raises
:class:`CheckError` naming the function, the call's argument shapes, the
compiled code that answered and the entry that differs. A call whose compiled
code raises raises that error unchecked; a call that ``f`` cannot make
eagerly, where the compiled code answered, raises :class:`CheckError` too.
Calls on Values (inside another transform, or eager use) are not checked here:
the outer computation is.
"""

from __future__ import annotations

import copy
import math
import numbers
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .arguments import argnum_positions, keyword_is_input, param_names, shape_text
from .mode import floats_refused, recording
from .tensor import ValueArray, data
from .value import Value

#: A transform (``api.Transformed``; this module sits below ``api``, which wraps its
#: transforms in :class:`Checked`).
Transformed = Any

__all__ = ["CheckError", "Checked", "check_mode", "checked", "ENV", "RTOL", "ATOL"]

#: The environment variable that turns check mode on for every new transform.
ENV = "ADCOMPILE_CHECK"
#: Relative tolerance of the comparison (of the larger magnitude of the two).
RTOL = 1e-9
#: Absolute tolerance of the comparison.
ATOL = 1e-12


class CheckError(AssertionError):
    """Check mode: a compiled call disagreed with ``f`` run eagerly, or ``f`` could
    not run eagerly where the compiled code answered.

    ``function`` names ``f``; ``where`` names the entry (``"value"``,
    ``"gradient of argument 0 (x), element [2]"``) or ``"eager run"``;
    ``compiled`` and ``eager`` are the two numbers (None where not a number).
    """

    def __init__(
        self,
        message: str,
        function: str = "",
        where: str = "",
        compiled: Any = None,
        eager: Any = None,
    ) -> None:
        super().__init__(message)
        self.function, self.where = function, where
        self.compiled, self.eager = compiled, eager


def check_mode() -> bool:
    """Whether ``ADCOMPILE_CHECK`` turns check mode on (set, and not ``0``)."""
    return os.environ.get(ENV, "") not in ("", "0")


def checked(transform: Transformed, check: bool | None = None) -> Transformed:
    """``transform`` in check mode if ``check`` (None: if ``ADCOMPILE_CHECK`` is set),
    else ``transform`` itself."""
    if not (check_mode() if check is None else check):
        return transform
    return Checked(transform)  # type: ignore[return-value]  (it passes for one)


# ------------------------------------------------------------------ the wrapper

_OWN = frozenset({"_inner", "__wrapped__", "__name__", "__qualname__", "__doc__"})


class Checked:
    """A transform in check mode: each call runs the compiled code, then ``f``
    eagerly, and raises :class:`CheckError` when they disagree.

    Everything else is the transform's: ``.source``, ``.numba``, ``.events``,
    ``.explanation``, ``.fun``, ``ad.explain(t)``, ``ad.show_code(t, ...)``;
    ``isinstance(t, Transformed)`` holds. ``.unchecked`` is the transform itself.
    """

    def __init__(self, inner: Transformed) -> None:
        object.__setattr__(self, "_inner", inner)
        inner.background_entries = False  # (the eager runs would disturb its timing)
        for name in ("__name__", "__qualname__", "__doc__"):
            value = getattr(inner, name, None)
            if value is not None:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "__wrapped__", inner.fun)

    # what the transform has, it answers
    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_inner"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(t, Transformed) holds, as for the transform
        return type(self._inner)

    @property
    def unchecked(self) -> Transformed:
        """The transform itself (its calls are not checked)."""
        return self._inner

    def __repr__(self) -> str:
        return f"<check mode: {self._inner.mode} of {self._inner.fun_name}>"

    def __copy__(self) -> Checked:
        return Checked(copy.copy(self._inner))

    def __deepcopy__(self, memo: dict) -> Checked:
        return self.__copy__()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        inner = self._inner
        front = inner.plan_call(args)  # pytrees, static arguments, float32
        if front is not None:
            variant, plan, wrt = front
            if variant is None:  # float32: compared in float64, then given back
                out = inner.call_plain(args, kwargs)
                if not any(_holds_values(a) for a in (*args, *kwargs.values())):
                    _compare(inner, args, kwargs, out)
                return plan.cast(out, inner.mode, wrt, inner.many)
            out = Checked(variant)(*plan.leaves, **kwargs)  # checked over the leaves
            return plan.regroup(out, inner.mode, wrt, inner.many)
        result = inner(*args, **kwargs)  # its entry, direct entry or general path
        if any(_holds_values(a) for a in (*args, *kwargs.values())):
            return result  # recorded on Values: the outer computation is checked
        _compare(inner, args, kwargs, result)
        return result


def _holds_values(a: Any) -> bool:
    return isinstance(a, Value) or (isinstance(a, np.ndarray) and a.dtype == object)


# ------------------------------------------------------------------ eager runs


_dynamic = keyword_is_input


def _as_values(a: Any) -> Any:
    """``a`` as tracing sees it: a Value, or an object array of Values (ValueArray)."""
    if isinstance(a, np.ndarray) and a.ndim > 0 or isinstance(a, (list, tuple)):
        arr = np.asarray(a, dtype=np.float64)
        obj = np.empty(arr.shape, dtype=object)
        obj.ravel()[:] = [Value(float(x)) for x in arr.ravel()]
        return obj.view(ValueArray)
    return Value(float(np.asarray(a, dtype=np.float64)))


def _as_floats(a: Any) -> Any:
    """``a`` as the compiled code takes it: a float, or a float64 array of its shape."""
    if isinstance(a, (np.ndarray, list, tuple)):
        return np.array(a, dtype=np.float64)
    return float(a)


def _number(x: Any) -> float:
    if isinstance(x, Value):
        return x.data
    return float(x)


def _scalar(out: Any) -> Any:
    """What ``f`` returned as one number (a Value or a float), as a gradient needs."""
    if isinstance(out, np.ndarray):
        if out.size != 1:
            raise TypeError(f"f returned an array of shape {out.shape}, not a scalar")
        out = out.reshape(-1)[0]
    if isinstance(out, Value) or (isinstance(out, numbers.Real) and not isinstance(out, bool)):
        return out
    raise TypeError(f"f returned {type(out).__name__!r}, not a scalar")


def _quiet(call: Callable[[], Any]) -> Any:
    """``call()`` with the default recording mode, NumPy's float warnings silenced
    (``np.errstate`` is per thread, as ``warnings.catch_warnings`` is not)."""
    with recording(), np.errstate(all="ignore"):
        return call()


def _eager_grad(inner: Transformed, args: tuple, kwargs: dict) -> Any:
    """``f``'s value and gradient by ``Value.backward()``, laid out as the transform's."""
    leaves = [_as_values(a) for a in args]
    kw = {k: _as_values(v) if _dynamic(v) else v for k, v in kwargs.items()}
    with floats_refused():  # (float(v) would cut v off from the gradient)
        out = _scalar(_quiet(lambda: inner.fun(*leaves, **kw)))
    if isinstance(out, Value):
        _quiet(out.backward)
        value = out.data
    else:
        value = float(out)
    grads = []
    for k in argnum_positions(inner.argnums, len(args), inner.fun_name):
        leaf = leaves[k]
        grads.append(leaf.grad if isinstance(leaf, Value) else np.asarray(leaf.grad))
    g = tuple(grads) if isinstance(inner.argnums, (tuple, list)) else grads[0]
    return g if inner.mode == "grad" else (value, g)


def _eager_value(inner: Transformed, args: tuple, kwargs: dict) -> tuple[Any, str]:
    """``f`` called on floats (on Values where it cannot run on floats), and how."""
    try:
        floats = [_as_floats(a) for a in args]
        kw = {k: _as_floats(v) if _dynamic(v) else v for k, v in kwargs.items()}
        return _quiet(lambda: inner.fun(*floats, **kw)), "on floats"
    except Exception as on_floats:
        try:
            leaves = [_as_values(a) for a in args]
            kw = {k: _as_values(v) if _dynamic(v) else v for k, v in kwargs.items()}
            return _quiet(lambda: inner.fun(*leaves, **kw)), "on Values"
        except Exception:
            raise on_floats from None


# ------------------------------------------------------------------ comparing


def _close(c: float, e: float) -> bool:
    if c == e or (c != c and e != e):
        return True
    if not (math.isfinite(c) and math.isfinite(e)):
        return False
    return abs(c - e) <= ATOL + RTOL * max(abs(c), abs(e))


def _leaves(x: Any, path: str) -> list[tuple[str, Any]]:
    """(path, leaf) of a result: tuples and lists are walked, arrays and numbers are leaves."""
    if isinstance(x, (tuple, list)):
        return [(p, v) for k, e in enumerate(x) for p, v in _leaves(e, f"{path}[{k}]")]
    return [(path, x)]


def _floats_of(x: Any) -> np.ndarray:
    """A leaf (a number, a Value, an array of either) as a float array of its shape."""
    if isinstance(x, np.ndarray) and x.dtype == object:
        return np.asarray(data(x), dtype=np.float64)
    if isinstance(x, np.ndarray):
        return x.astype(np.float64, copy=False)
    return np.asarray(_number(x), dtype=np.float64)


def _index_text(shape: tuple, k: int) -> str:
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(k, shape)) + "]"


def _first_difference(compiled: Any, eager: Any) -> tuple[str, Any, Any, str] | None:
    """Where the two results first differ: (path, compiled, eager, note), or None."""
    c_leaves, e_leaves = _leaves(compiled, ""), _leaves(eager, "")
    if [p for p, _ in c_leaves] != [p for p, _ in e_leaves]:
        return "", compiled, eager, "the results have different structures"
    for (path, c), (_, e) in zip(c_leaves, e_leaves):
        try:
            cf, ef = _floats_of(c), _floats_of(e)
        except (TypeError, ValueError):
            return path, c, e, "not numbers"
        if cf.shape != ef.shape and not (cf.size == ef.size == 1):
            return path, c, e, f"shapes {cf.shape} and {ef.shape}"
        cflat, eflat = cf.ravel(), ef.ravel()
        bad = [k for k in range(cflat.size) if not _close(float(cflat[k]), float(eflat[k]))]
        if bad:
            k = bad[0]
            where = path + (_index_text(cf.shape, k) if cf.ndim else "")
            more = f"; {len(bad)} of {cflat.size} elements differ" if cflat.size > 1 else ""
            return where, float(cflat[k]), float(eflat[k]), more
    return None


def _describe(inner: Transformed, path: str, args: tuple) -> str:
    """Which entry of the result ``path`` is: the value, or a gradient element."""
    if inner.mode == "jit":
        return "value" + (f" (output {path})" if path else "")
    many = isinstance(inner.argnums, (tuple, list))
    names = param_names(inner.fun, len(args))
    wrt = argnum_positions(inner.argnums, len(args), inner.fun_name)
    rest = path
    if inner.mode == "value_and_grad":
        if rest.startswith("[0]"):
            return "value"
        rest = rest[3:]
    which = 0
    if many and rest.startswith("["):
        close = rest.index("]")
        which, rest = int(rest[1:close]), rest[close + 1 :]
    k = wrt[which] if which < len(wrt) else which
    name = names[k] if k < len(names) else f"arg{k}"
    return f"gradient of argument {k} ({name})" + (f", element {rest}" if rest else "")


def _shape(a: Any) -> str:
    return shape_text(np.shape(a) if np.ndim(a) else None)


def _call_text(inner: Transformed, args: tuple, kwargs: dict) -> str:
    names = param_names(inner.fun, len(args))
    parts = [f"{n}: {_shape(a)}" for n, a in zip(names, args)]
    parts += [f"{k}= {_shape(v)}" if _dynamic(v) else f"{k}={v!r}" for k, v in kwargs.items()]
    return ", ".join(parts) or "no arguments"


def _compare(inner: Transformed, args: tuple, kwargs: dict, result: Any) -> None:
    """Run ``f`` eagerly on the call's arguments; raise CheckError where it disagrees."""
    name, mode = getattr(inner.fun, "__name__", inner.fun_name), inner.mode
    how = "on Values, with .backward()" if mode != "jit" else "on floats"
    try:
        if mode == "jit":
            eager, how = _eager_value(inner, args, kwargs)
        else:
            try:
                eager = _eager_grad(inner, args, kwargs)
            except (TypeError, AttributeError) as on_values:  # (np.var of Values)
                if _by_differences(inner, args, kwargs, result):
                    return
                raise on_values from None
    except Exception as e:
        raise CheckError(
            f"check mode: {mode} of {name}() answered, but {name}() run eagerly {how} "
            f"raised {type(e).__name__}: {e}\n  call: {_call_text(inner, args, kwargs)}\n"
            f"  compiled: {inner.answered(kwargs)}\n  (the check cannot compare this "
            "call; the compiled result was " + _short(result) + ")",
            name,
            "eager run",
            result,
        ) from e
    found = _first_difference(result, eager)
    if found is None:
        return
    path, c, e, note = found
    where = _describe(inner, path, args) if note != "the results have different structures" else ""
    if isinstance(c, float) and isinstance(e, float):
        diff = abs(c - e) if math.isfinite(c - e) else float("nan")
        rel = diff / max(abs(c), abs(e)) if max(abs(c), abs(e)) > 0 else float("nan")
        what = (
            f"{where}: compiled {c!r}, eager {e!r} (difference {diff:.3g}, "
            f"relative {rel:.3g}){note}"
        )
    else:
        what = f"{where or 'result'}: {note}: compiled {_short(c)}, eager {_short(e)}"
    raise CheckError(
        f"check mode: {mode} of {name}() disagrees with {name}() run eagerly {how}\n"
        f"  {what}\n  call: {_call_text(inner, args, kwargs)}\n"
        f"  compiled: {inner.answered(kwargs)}\n"
        f"  (tolerance {ATOL:g} + {RTOL:g} x magnitude; ad.explain(fn) lists every trace)",
        name,
        where,
        c,
        e,
    )


#: Step and relative tolerance of the central differences :func:`_by_differences` takes.
DIFF_STEP, DIFF_RTOL = 1e-7, 1e-4


def _by_differences(inner: Transformed, args: tuple, kwargs: dict, result: Any) -> bool:
    """Where ``f`` runs on float arrays but not on arrays of Values (``np.var``,
    ``np.linalg.norm``: code traced at array level): ``f``'s value on floats, and
    each gradient along one random direction against central differences of ``f``
    (relative tolerance ``DIFF_RTOL``). False where ``f`` does not run on floats
    either; raises CheckError where they disagree."""
    floats = [_as_floats(a) for a in args]
    kw = {k: _as_floats(v) if _dynamic(v) else v for k, v in kwargs.items()}

    def f(k: int, x: Any) -> float:
        at = [x if j == k else a for j, a in enumerate(floats)]
        return _number(_scalar(_quiet(lambda: inner.fun(*at, **kw))))

    try:
        value = f(-1, None)
    except Exception:
        return False
    wrt = argnum_positions(inner.argnums, len(args), inner.fun_name)
    many = isinstance(inner.argnums, (tuple, list))
    grads = result if inner.mode == "grad" else result[1]
    name = getattr(inner.fun, "__name__", inner.fun_name)
    rng = np.random.default_rng(0)
    checks = [] if inner.mode == "grad" else [("value", result[0], value)]
    for k, g in zip(wrt, grads if many else (grads,)):
        x = np.asarray(floats[k], dtype=np.float64)
        d = rng.normal(size=x.shape)
        h = DIFF_STEP * max(1.0, float(np.max(np.abs(x), initial=0.0)))
        fd = (f(k, x + h * d) - f(k, x - h * d)) / (2 * h)
        checks.append((f"gradient {k} along a random direction", float(np.sum(g * d)), fd))
    for what, c, e in checks:
        tol = DIFF_RTOL if what != "value" else RTOL
        if not (_close(c, e) or abs(c - e) <= tol * max(abs(c), abs(e)) + ATOL):
            raise CheckError(
                f"check mode: {inner.mode} of {name}() disagrees with {name}() run on "
                f"floats (it does not run on Values): {what}: compiled {c!r}, eager {e!r} "
                f"(central differences, step {DIFF_STEP:g})\n  call: "
                f"{_call_text(inner, args, kwargs)}\n  compiled: {inner.answered(kwargs)}",
                name,
                what,
                c,
                e,
            )
    return True


def _short(x: Any) -> str:
    text = np.array2string(x, threshold=8) if isinstance(x, np.ndarray) else repr(x)
    return text if len(text) <= 200 else text[:200] + " ..."
