"""``tape.compile()``: a tape from ``ad.trace`` compiled, as the transforms compile theirs.

``ad.trace(f, *args)`` gives the tape; ``tape.evaluate(*args)`` runs it in the
interpreter, and ``tape.compile()`` gives its code from the pipeline
(``adcompile.pipeline.compile``: folded into loops where it repeats, then Numba),
called the same way. With ``wrt`` (positions of inputs), the code gives the value
and then its gradient with respect to those inputs, as ``ad.value_and_grad`` does.
A call whose inputs take another branch than the traced one raises, as
``evaluate`` does: the tape holds the branches it was traced on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import pipeline
from ..ir.arrays import ArrayTape
from ..ir.tape import Param, Tape


class CompiledTape:
    """A tape's compiled code (see the module doc); ``.source`` shows it."""

    def __init__(self, tape: Tape, wrt: Sequence[int] | None = None) -> None:
        if isinstance(tape, ArrayTape):
            raise TypeError(
                "tape.compile() takes the element tape ad.trace gives; an array tape's "
                "code is ad.jit's or ad.value_and_grad's"
            )
        n = len(tape.inputs)
        self.wrt = None if wrt is None else [int(k) for k in wrt]
        if self.wrt is not None:
            if len(tape.outputs) != 1:
                raise ValueError("tape.compile(wrt=...) differentiates a tape of one output")
            bad = [k for k in self.wrt if not 0 <= k < n]
            if bad:
                raise ValueError(f"wrt={bad}: the tape has inputs 0 to {n - 1}")
        self.tape = tape
        names: list[str] = []
        for k, name in enumerate(tape.names):
            text = _identifier(name, k)
            names.append(text if text not in names else f"{text}_{k}")
        params = [Param(name, None) for name in names]
        self.program = pipeline.compile(
            tape,
            params,
            "tape_code",
            "a tape compiled (ad.trace(...).compile())",
            self.wrt,
            self.wrt,
        )

    @property
    def source(self) -> str:
        """The generated code."""
        return self.program.source

    def __call__(self, *args: Any) -> list[float]:
        """The outputs (and with ``wrt``, the gradient after the value) at these
        inputs: floats, or arrays whose elements are the inputs in order."""
        flat = [float(v) for a in args for v in np.ravel(np.asarray(a, dtype=float))]
        if len(flat) != len(self.tape.inputs):
            raise TypeError(f"this tape takes {len(self.tape.inputs)} inputs, got {len(flat)}")
        ok, out = self.program.call(*flat)
        if not ok:
            raise ValueError(
                "at these inputs a guard of the tape fails: it holds the branches taken "
                "where it was traced, not this one's; trace the function again at them"
            )
        return [float(v) for v in out]


def _identifier(name: str, k: int) -> str:
    """An input's name as a Python identifier of the generated code (``x[0]``: ``x_0``)."""
    text = re.sub(r"\W", "_", str(name)).strip("_") or f"x{k}"
    return text if text.isidentifier() else f"x{k}"


def compile_tape(tape: Tape, wrt: Sequence[int] | None = None) -> CompiledTape:
    """``tape.compile(wrt=None)``: the tape's compiled code (see the module doc)."""
    return CompiledTape(tape, wrt)
