"""micrograd (PyPI ``micrograd``): its ``Value`` and ``backward()``, as published.

micrograd 0.1.0 has ``+ - * / **`` and ``relu`` but no ``sin`` or ``tanh``;
the chain and compile-scaling workloads need them, so they are added here
in micrograd's own style (a ``_backward`` closure on a new ``Value``),
without changing anything else. micrograd's recursive topological sort
hits Python's recursion limit (left at its default) on deep graphs: that is
recorded as the cell's failure.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import workloads as W
from . import Prepared, System


class Micrograd(System):
    name = "micrograd"
    description = "micrograd.engine.Value + backward() (PyPI micrograd)"
    modules = ("micrograd",)
    interpreter = True

    def load(self) -> None:
        from micrograd.engine import Value

        self.Value = Value

    def version(self) -> str:
        from importlib.metadata import version

        return f"micrograd {version('micrograd')}"

    # sin and tanh in micrograd's style (micrograd 0.1.0 has neither)
    def _sin(self, v: Any) -> Any:
        out = self.Value(math.sin(v.data), (v,), "sin")

        def _backward() -> None:
            v.grad += math.cos(v.data) * out.grad

        out._backward = _backward
        return out

    def _tanh(self, v: Any) -> Any:
        t = math.tanh(v.data)
        out = self.Value(t, (v,), "tanh")

        def _backward() -> None:
            v.grad += (1 - t**2) * out.grad

        out._backward = _backward
        return out

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        V = self.Value
        xl = x.tolist()

        def call() -> Any:
            xs = [V(v) for v in xl]
            f = W.rosenbrock_scalar(xs)
            f.backward()
            return f.data, [v.grad for v in xs]

        return Prepared(call, lambda out: (float(out[0]), np.array(out[1], dtype=float)))

    def mlp(self, params: list, X: np.ndarray, y: np.ndarray) -> Prepared:
        V = self.Value
        leaves = [V(v) for v in W.mlp_flatten(params).tolist()]
        nested = W.mlp_unflatten(leaves)
        Xl, yl = X.tolist(), y.tolist()
        relu = V.relu
        lr = W.MLP_LR

        def call() -> Any:
            for p in leaves:
                p.grad = 0
            loss = W.mlp_loss_scalar(nested, Xl, yl, relu)
            loss.backward()
            for p in leaves:
                p.data -= lr * p.grad
            return loss.data

        return Prepared(
            call,
            lambda out: (float(out), np.array([p.grad for p in leaves], dtype=float)),
            params=lambda: np.array([p.data for p in leaves], dtype=float),
        )

    def chain(self, n: int, x0: float) -> Prepared:
        V = self.Value
        sin = self._sin

        def call() -> Any:
            x = V(x0)
            out = W.chain_scalar(x, n, sin)
            out.backward()
            return out.data, x.grad

        return Prepared(call, lambda out: (float(out[0]), float(out[1])))

    def compile(self, prog: W.Program) -> Prepared:
        V = self.Value
        xl = prog.x.tolist()

        def call() -> Any:
            xs = [V(v) for v in xl]
            out = W.compile_scalar(xs, prog, self._sin, self._tanh)
            out.backward()
            return out.data, [v.grad for v in xs]

        return Prepared(call, lambda out: (float(out[0]), np.array(out[1], dtype=float)))
