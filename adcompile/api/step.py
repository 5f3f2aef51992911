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

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..emit.codegen import CodeFacts
from ..trace.value import Value, topological_order
from .captured import LeavesGrew
from .transform import Transformed


class CompiledLossValue(Value):
    """A loss computed by compiled code: ``backward()`` adds its gradients to the
    parameters' ``.grad`` (it has no graph of its own)."""

    __slots__ = ("_loss", "_grads")

    def backward(self, gradient: float = 1.0) -> None:
        """Add ``gradient * d loss / d p`` to ``p.grad`` for every parameter (and for
        the other Values the loss read, as micrograd's backward does)."""
        self._loss.add_grads(self._grads, gradient)


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
        # the parameters, then the other Values made outside loss_fn that take a
        # gradient and that its traces read (a Value made from a parameter before the
        # trace: its gradient goes on through its own graph, as in micrograd)
        self._leaves = list(self.params)
        self._vg = Transformed(loss_fn, 0, "value_and_grad", leaves=lambda: self._leaves)
        self._vg.adopt = self._adopt

    def _adopt(self, values: Sequence[Value]) -> tuple[list[Value], list[Value]]:
        """Of the Values made outside ``loss_fn`` that a trace read, those that take a
        gradient become leaves; the others are inputs."""
        taken = [v for v in values if v.requires_grad]
        self._leaves.extend(taken)
        return taken, [v for v in values if not v.requires_grad]

    def _raw(self, *data: Any) -> tuple[float, np.ndarray]:
        """The loss and its gradient with respect to ``_leaves``."""
        for _ in range(8):
            theta = np.fromiter((p.data for p in self._leaves), float, len(self._leaves))
            try:
                return self._vg(theta, *data)
            except LeavesGrew:  # (theta is longer now)
                continue
        raise RuntimeError("compile_loss: the loss reads new Values at every trace")

    def value_and_grad(self, *data: Any) -> tuple[float, np.ndarray]:
        """The loss and its gradient (one entry per parameter) at the current ``.data``."""
        loss, grads = self._raw(*data)
        n = len(self.params)
        if len(self._leaves) == n:
            return loss, grads
        through = [(v, g) for v, g in zip(self._leaves[n:], grads[n:].tolist()) if v.operands]
        if not through:
            return loss, grads[:n]
        # what flows into the parameters through Values made from them: their own
        # backward, with every .grad it touches put back as it was
        touched = topological_order([v for v, _ in through])
        kept = [(v, v.grad) for v in (*touched, *self.params)]
        try:
            for p in self.params:
                p.grad = 0.0
            for v, g in through:
                v.backward(g)
            return loss, grads[:n] + np.array([p.grad for p in self.params])
        finally:
            for v, g in reversed(kept):
                v.grad = g

    def add_grads(self, grads: np.ndarray, gradient: float = 1.0) -> None:
        """Add ``gradient`` times ``grads`` (a gradient with respect to the leaves)
        into their ``.grad``; through a Value made from the parameters, its backward."""
        for v, g in zip(self._leaves, grads.tolist()):
            if v.operands:
                v.backward(gradient * g)
            else:
                v.grad += gradient * g

    def __call__(self, *data: Any) -> CompiledLossValue:
        loss, grads = self._raw(*data)
        out = CompiledLossValue(loss, requires_grad=False)
        out._loss = self
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
