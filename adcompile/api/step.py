"""Compiled training steps for micrograd-style models.

``compile_loss(loss_fn, model.parameters())`` traces ``loss_fn(*data)`` once
with the model's parameter Values as inputs of the tape and the data as array
inputs, compiles value and gradient, and then runs without building a graph:

    step = ad.compile_loss(lambda X, y: loss(model, X, y), model.parameters())
    for k in range(100):
        loss = step(X, y)          # was: loss = loss(model, X, y)
        model.zero_grad()
        loss.backward()            # adds the compiled gradients into p.grad
        for p in model.parameters():
            p.data -= 0.05 * p.grad

New data shapes or branches trace again, as for ``ad.value_and_grad``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..emit.codegen import CodeFacts
from ..trace.value import Value
from .transform import Transformed


class CompiledLossValue(Value):
    """A loss computed by compiled code: ``backward()`` adds its gradients to the
    parameters' ``.grad`` (it has no graph of its own)."""

    __slots__ = ("_params", "_grads")

    def backward(self, gradient: float = 1.0) -> None:
        """Add ``gradient * d loss / d p`` to ``p.grad`` for every parameter."""
        for p, g in zip(self._params, self._grads.tolist()):
            p.grad += gradient * g


class CompiledLoss:
    """``loss_fn(*data)`` compiled with ``params`` (Values) as inputs."""

    def __init__(self, loss_fn: Callable[..., Any], params: Iterable[Value]) -> None:
        self.params = list(params)
        bad = [type(p).__name__ for p in self.params if not isinstance(p, Value)]
        if bad:
            raise TypeError(
                f"compile_loss needs the parameters as adcompile Values, got {bad[0]!r}; "
                "pass model.parameters()"
            )
        self.loss_fn = loss_fn
        self._vg = Transformed(loss_fn, 0, "value_and_grad", leaves=lambda: self.params)

    def value_and_grad(self, *data: Any) -> tuple[float, np.ndarray]:
        """The loss and its gradient (one entry per parameter) at the current ``.data``."""
        theta = np.fromiter((p.data for p in self.params), float, len(self.params))
        return self._vg(theta, *data)

    def __call__(self, *data: Any) -> CompiledLossValue:
        loss, grads = self.value_and_grad(*data)
        out = CompiledLossValue(loss, requires_grad=False)
        out._params = self.params
        out._grads = grads
        return out

    @property
    def source(self) -> str:
        """The generated source of the most recent call."""
        return self._vg.source

    @property
    def explanation(self) -> str:
        """Why the most recent call's code has the form it has (folded loops ...)."""
        return self._vg.explanation

    @property
    def facts(self) -> CodeFacts:
        """What the most recent call's code is, in numbers (``codegen.CodeFacts``)."""
        return self._vg.facts


def compile_loss(loss_fn: Callable[..., Any], params: Iterable[Value]) -> CompiledLoss:
    """Compile ``loss_fn(*data)`` for the parameter Values it reads (see module doc)."""
    return CompiledLoss(loss_fn, params)
