"""``has_aux=True``: a function that returns ``(output, aux)``, as in JAX.

``grad(f, has_aux=True)(x)`` is ``(gradient, aux)`` and ``value_and_grad(f,
has_aux=True)(x)`` is ``((value, aux), gradient)``: the gradient is of the
output alone, and ``aux`` (numbers, arrays, Values, in tuples, lists and dicts:
an accuracy, the predictions) is computed by compiled code too, as ``jit``
computes it. Two transforms of ``f`` do the work, one for each half, each
traced, guarded and compiled as any other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .tracing import function_name


def _pair(fun: Callable, out: Any) -> Any:
    """``out``, checked to be the pair ``(output, aux)``."""
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(
            f"with has_aux=True, {function_name(fun)}() must return a pair (output, aux), "
            f"but it returned {type(out).__name__!r}"
            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        )
    return out


def _split(x: Any) -> tuple[Any, Any]:
    """``x`` with each dict a tuple of its values (what compiled code returns), and
    its skeleton: the dicts' keys, to build them again (``_join``)."""
    if isinstance(x, dict):
        parts = [_split(v) for v in x.values()]
        return ("dict", tuple(x), [k for k, _ in parts]), tuple(v for _, v in parts)
    if isinstance(x, (tuple, list)):
        parts = [_split(v) for v in x]
        kind = "tuple" if isinstance(x, tuple) else "list"
        return (kind, [k for k, _ in parts]), type(x)(v for _, v in parts)
    return None, x


def _shape(x: Any) -> Any:
    """How ``x``'s tuples and lists nest, and their lengths (hashable)."""
    if isinstance(x, (tuple, list)):
        return (isinstance(x, tuple), tuple(_shape(v) for v in x))
    return None


def _join(skeleton: Any, x: Any) -> Any:
    if skeleton is None:
        return x
    if skeleton[0] == "dict":
        return {k: _join(s, v) for k, s, v in zip(skeleton[1], skeleton[2], x)}
    parts = [_join(s, v) for s, v in zip(skeleton[1], x)]
    return tuple(parts) if skeleton[0] == "tuple" else parts


class WithAux:
    """A gradient transform of ``fun`` (``mode`` "grad" or "value_and_grad") whose
    ``fun`` returns ``(output, aux)``: made by ``make(mode, fun)``, one transform for
    the output and ``jit`` for ``aux``."""

    def __init__(self, fun: Callable, mode: str, make: Callable[[str, Callable], Any]) -> None:
        self.fun = fun
        self.mode = mode
        # aux's dicts' keys as its traces found them, by what compiled code returns
        self.skeletons: dict[Any, Any] = {}

        @functools.wraps(fun)
        def output(*args: Any, **kwargs: Any) -> Any:
            return _pair(fun, fun(*args, **kwargs))[0]

        @functools.wraps(fun)
        def aux(*args: Any, **kwargs: Any) -> Any:
            skeleton, flat = _split(_pair(fun, fun(*args, **kwargs))[1])
            if self.skeletons.setdefault(_shape(flat), skeleton) != skeleton:
                raise TypeError(
                    f"{function_name(fun)}()'s aux holds dicts of other keys at other "
                    "inputs; with has_aux=True, give them the same keys"
                )
            return flat

        self.output = make(mode, output)
        self.aux = make("jit", aux)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.join(self.output(*args, **kwargs), self.aux(*args, **kwargs))

    def join(self, out: Any, flat: Any) -> Any:
        """The result, of the output transform's result and the aux transform's (or
        of their results stacked over points, by ``vmap``)."""
        aux = _join(self.skeletons.get(_shape(flat)), flat)
        if self.mode == "grad":
            return out, aux
        value, grads = out
        return (value, aux), grads

    @property
    def traces(self) -> int:
        """How many times ``fun`` was traced, for both halves."""
        return self.output.traces + self.aux.traces

    def __repr__(self) -> str:
        return f"<{self.mode}(has_aux=True) of {function_name(self.fun)}>"
