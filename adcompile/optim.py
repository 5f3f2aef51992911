"""Optimisers with PyTorch's update formulas: ``SGD`` (momentum, Nesterov) and ``Adam``.

Each optimiser does its arithmetic on float arrays in ``update(data, grad)``;
``step()`` gathers ``.data`` and ``.grad`` of its Values into arrays, calls
it and writes the result back. A training step that keeps its parameters in
a float array (``ad.value_and_grad``) makes the optimiser from that array
and calls ``theta = opt.update(theta, g)`` directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .trace.value import Value


def _flatten(params: Iterable[Any]) -> list[Value]:
    """The Values of ``params`` (Values, arrays or lists of them), each once, in order."""
    out: list[Value] = []
    seen: set[int] = set()
    stack = [params]
    while stack:
        item = stack.pop()
        if isinstance(item, Value):
            if id(item) not in seen and item.requires_grad:
                seen.add(id(item))
                out.append(item)
        elif isinstance(item, np.ndarray):
            stack.extend(reversed(item.ravel().tolist()))
        elif isinstance(item, Iterable) and not isinstance(item, (str, bytes)):
            stack.extend(reversed(list(item)))
        else:
            raise TypeError(
                f"optimiser parameters must be adcompile Values, not {type(item).__name__!r}; "
                "pass model.parameters()"
            )
    return out


class Optimizer:
    """Holds the parameters; ``step()`` applies ``update`` to their values and gradients."""

    def __init__(self, params: Iterable[Any], lr: float) -> None:
        array = isinstance(params, np.ndarray) and params.dtype != object
        # made from a float array, the optimiser has no Values: only update() applies
        self.params = [] if array else _flatten(params)
        if not (array or self.params):
            raise ValueError("the optimiser got an empty parameter list")
        if lr < 0.0:
            raise ValueError(f"invalid learning rate: {lr}")
        self.lr = lr

    def zero_grad(self) -> None:
        """Set every parameter's ``.grad`` to 0."""
        for p in self.params:
            p.grad = 0.0

    def step(self) -> None:
        """Update every parameter's ``.data`` from its ``.grad``."""
        if not self.params:
            raise TypeError(
                "this optimiser was made from a float array, not Values: "
                "call theta = opt.update(theta, grad) instead of step()"
            )
        n = len(self.params)
        data = np.fromiter((p.data for p in self.params), float, n)
        grad = np.fromiter((p.grad for p in self.params), float, n)
        for p, x in zip(self.params, self.update(data, grad).tolist()):
            p.data = x

    def update(self, data: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """One step on float arrays: updates ``data`` in place and returns it."""
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with PyTorch's momentum, Nesterov and weight decay."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(params, lr)
        if nesterov and momentum <= 0.0:
            raise ValueError("Nesterov momentum needs momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.buf: np.ndarray | None = None  # the momentum buffer

    def update(self, data: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """``p -= lr * g`` with ``g`` from weight decay and momentum as in ``torch.optim.SGD``."""
        g = grad + self.weight_decay * data if self.weight_decay else grad
        if self.momentum:
            if self.buf is None:
                self.buf = np.array(g, dtype=float)
            else:
                self.buf = self.momentum * self.buf + g
            g = g + self.momentum * self.buf if self.nesterov else self.buf
        data -= self.lr * g
        return data


class Adam(Optimizer):
    """Adam with PyTorch's bias correction and (L2, not decoupled) weight decay."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr)
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        self.t = 0
        self.m: np.ndarray | None = None  # first moment
        self.v: np.ndarray | None = None  # second moment

    def update(self, data: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """One Adam step as in ``torch.optim.Adam`` (single-tensor implementation)."""
        b1, b2 = self.betas
        g = grad + self.weight_decay * data if self.weight_decay else grad
        if self.m is None or self.v is None:
            self.m, self.v = np.zeros_like(data), np.zeros_like(data)
        self.t += 1
        w = 1.0 - b1  # m moves towards g as torch's lerp does, rounding included
        self.m = self.m + w * (g - self.m) if w < 0.5 else g - (g - self.m) * (1.0 - w)
        self.v = self.v * b2 + (1.0 - b2) * g * g
        step_size = self.lr / (1.0 - b1**self.t)
        denom = np.sqrt(self.v) / (1.0 - b2**self.t) ** 0.5 + self.eps
        data -= step_size * (self.m / denom)
        return data
