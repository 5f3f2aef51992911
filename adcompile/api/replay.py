"""A transform called on Values: inside another trace, or eagerly on micrograd Values.

Its result must record on the Values it was given, and on those its function reads
from outside (an outer trace's Value it closes over), so that the outer derivative
(or ``backward()``) sees it: :meth:`ReplayMixin._call_traced` traces the function
at the numbers they hold and replays the tape of value and gradient on the Values
themselves (``tracing.replay``). Part of :class:`adcompile.api.transform.Transformed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..diff.reverse import grad_tape
from ..trace.traced import TracedFloat
from .tracing import as_tensor, data_point, flatten_args, replay, trace_call, values_like


class ReplayMixin:
    """Calls on Values, by replaying the tape on them (see the module doc)."""

    def _call_traced(self, args: Sequence[Any]) -> Any:
        """Called on Values (under an outer transform, or eagerly): replay the tape
        of value and gradient on those Values, so the result records as well. The
        Values ``fun`` reads from outside (``Captures.outer``, the last hidden input)
        are inputs too, replayed on themselves: a result made of one (an outer
        trace's Value that ``fun`` closes over) records on it."""
        outer = self._caps.outer if self._caps is not None else []
        if outer:
            values = np.empty(len(outer), dtype=object)
            values[:] = outer
            args = (*args[:-1], values)
        point = data_point(args)
        _, key = flatten_args(self._name, point)
        wrt = self._wrt(len(args))
        tape = trace_call(
            self._fun_for_trace(),
            point,
            names=self._names(len(point)),
            multi=self.mode == "jit",
            outer=list(outer) if self._caps is not None else None,
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
                grads.append(as_tensor(arr.reshape(shape)))
                k += size
        g = tuple(grads) if self._many else grads[0]
        return g if self.mode == "grad" else (outs[0], g)


def owner(a: Any) -> Any:
    """An argument, or the Value whose traced ``.data`` it is (an outer trace's)."""
    if type(a) is TracedFloat:
        v = a.value()
        return a if v is None else v
    return a
