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

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..emit.codegen import CodeFacts
from ..ir.ops import Op
from ..trace.arguments import int_data
from ..trace.mode import MODE
from ..trace.value import Value, set_step, topological_order
from .captured import LeavesGrew
from .introspect import ShowsLast
from .transform import Transformed


def _nan(*args: Any) -> float:
    return math.nan


#: The op a compiled loss's result is made by: no operands, and a reverse step of
#: its own (``set_step``), which adds its adjoint times the compiled gradients into
#: the parameters' ``.grad``. Not in the op table.
_LOSS = Op("compiled_loss", 0, _nan, "nan", ())


class CompiledLossValue(Value):
    """A loss computed by compiled code: ``backward()`` on it, or on a Value made from
    it (``step(X, y) * 0.5 + reg``), adds its gradients into the parameters' ``.grad``
    (it has no graph of its own: its op's reverse step does)."""

    __slots__ = ("_loss", "_grads")

    @classmethod
    def made(cls, loss: float, owner: CompiledLoss, grads: np.ndarray) -> CompiledLossValue:
        """The result of ``owner``'s call; inside another trace, a constant of it."""
        tracing = MODE.get().trace is not None
        out = cls(loss, requires_grad=not tracing)
        out._loss, out._grads = owner, grads
        if not tracing:
            out._fn = _LOSS
        return out


def _loss_step(v: CompiledLossValue, g: float) -> None:
    v._loss.add_grads(v._grads, g)


set_step(_LOSS, _loss_step)


class CompiledLoss(ShowsLast):
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
        self._leaves = list({id(p): p for p in self.params}.values())  # (each once)
        # where each parameter is among the leaves (one listed twice: the same place)
        at = {id(v): k for k, v in enumerate(self._leaves)}
        self._at = np.array([at[id(p)] for p in self.params], dtype=np.intp)
        self._n = len(at)
        self._vg = self._last = self._transform(loss_fn)
        self._labels: list[np.ndarray] = []  # (the call's integer arrays: _labelled)
        self._with_labels: dict[tuple[int, ...], Transformed] = {}

    def _adopt(self, values: Sequence[Value]) -> tuple[list[Value], list[Value]]:
        """Of the Values made outside ``loss_fn`` that a trace read, those that take a
        gradient become leaves; the others are inputs."""
        taken = [v for v in values if v.requires_grad]
        self._leaves.extend(taken)
        return taken, [v for v in values if not v.requires_grad]

    def _labelled(self, data: tuple) -> tuple[Transformed, tuple]:
        """The transform for a call with ``data``, and the arguments it takes. Integer
        arrays (class labels) are data as the function reads them: a transform of
        ``loss_fn`` with them put back in, which finds them in ``_labels`` (watched by
        their bytes: new labels trace again), the others its arguments."""
        where = tuple(k for k, a in enumerate(data) if int_data(a))
        if not where:
            return self._vg, data
        self._labels[:] = [data[k] for k in where]
        vg = self._with_labels.get(where)
        if vg is None:
            vg = self._with_labels[where] = self._transform(_with_labels(self, where))
        return vg, tuple(a for k, a in enumerate(data) if k not in where)

    def _transform(self, fun: Callable[..., Any]) -> Transformed:
        vg = Transformed(fun, 0, "value_and_grad", leaves=lambda: self._leaves)
        vg.adopt = self._adopt
        return vg

    def _raw(self, *data: Any) -> tuple[float, np.ndarray]:
        """The loss and its gradient with respect to ``_leaves``."""
        vg, data = self._labelled(data)
        self._last = vg  # (its code is what .source shows)
        for _ in range(8):
            theta = np.fromiter((p.data for p in self._leaves), float, len(self._leaves))
            try:
                return vg(theta, *data)
            except LeavesGrew:  # (theta is longer now)
                continue
        raise RuntimeError("compile_loss: the loss reads new Values at every trace")

    def value_and_grad(self, *data: Any) -> tuple[float, np.ndarray]:
        """The loss and its gradient (one entry per parameter) at the current ``.data``."""
        loss, grads = self._raw(*data)
        n = self._n  # (the parameters, each once, are the first leaves)
        through = [(v, g) for v, g in zip(self._leaves[n:], grads[n:].tolist()) if v.operands]
        if not through:
            return loss, grads[self._at]
        # what flows into the parameters through Values made from them: their own
        # backward, with every .grad it touches put back as it was
        touched = topological_order([v for v, _ in through])
        kept = [(v, v.grad) for v in (*touched, *self.params)]
        try:
            for p in self.params:
                p.grad = 0.0
            for v, g in through:
                v.backward(g)
            return loss, (grads[:n] + np.array([p.grad for p in self._leaves[:n]]))[self._at]
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
        return CompiledLossValue.made(loss, self, grads)

    @property
    def facts(self) -> CodeFacts:
        """What the most recent call's code is, in numbers (``codegen.CodeFacts``)."""
        return self._last.facts


def compile_loss(loss_fn: Callable[..., Any], params: Iterable[Value]) -> CompiledLoss:
    """Compile ``loss_fn(*data)`` for the parameter Values it reads (see module doc)."""
    return CompiledLoss(loss_fn, params)


def _with_labels(loss: CompiledLoss, where: tuple[int, ...]) -> Callable[..., Any]:
    """``loss.loss_fn`` taking the float arguments, the integer arrays at positions
    ``where`` read from ``loss._labels`` (what a trace reads there is watched)."""
    fn, labels = loss.loss_fn, loss._labels

    @functools.wraps(fn)
    def with_labels(*floats: Any) -> Any:
        args, rest = [], iter(floats)
        for k in range(len(floats) + len(where)):
            args.append(labels[where.index(k)] if k in where else next(rest))
        return fn(*args)

    del with_labels.__wrapped__  # (its parameters are the float arguments' alone)
    with_labels.user_function = fn  # (whose module makes its arrays: ``trace.creation``)
    return with_labels
