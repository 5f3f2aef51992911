"""One compiled path of a transform (:class:`Specialisation`), and how many are kept.

A specialisation holds a tape, its compiled program, and how the output array
unpacks into what the transform returns (``grad``: the gradients in the
arguments' shapes; ``value_and_grad``: the value first; ``jit``: the value).
:func:`keep_first` keeps at most ``MAX_SPECIALISATIONS`` per argument structure
and :func:`too_many` says when a transform has traced often enough to warn (both
read it here, at each call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend.program import CompiledProgram
from ..ir.outputs import OutLayout
from ..ir.tape import Tape

#: How many specialisations (branch paths) one function keeps per argument shape; a
#: transform traced more times than this warns (``RetraceWarning``).
MAX_SPECIALISATIONS = 16


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


def keep_first(specs: dict[tuple, list[Specialisation]], key: tuple, spec: Specialisation) -> None:
    """Put ``spec`` first among ``specs[key]``, which keeps ``MAX_SPECIALISATIONS`` at most."""
    kept = specs.setdefault(key, [])
    kept.insert(0, spec)
    del kept[MAX_SPECIALISATIONS:]


def too_many(traces: int) -> bool:
    """Whether a transform traced ``traces`` times should warn: more traces than it
    keeps specialisations of one argument structure."""
    return traces > MAX_SPECIALISATIONS
