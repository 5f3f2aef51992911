"""The eager scalar engines (adcompile's ``Value``, micrograd's): one program for both.

Both run the same scalar Python of ``workloads.py`` on their own ``Value``
class and call ``backward()``; a subclass sets ``self.Value`` in ``load()``
and says how its Values take ``sin`` and ``tanh`` (``functions()``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import workloads as W
from . import Prepared, System


def _floats(out: Any) -> tuple[float, np.ndarray]:
    return float(out[0]), np.array(out[1], dtype=float)


class ScalarValueSystem(System):
    """A micrograd-style engine: Values, operators, ``relu``, ``backward()``."""

    interpreter = True
    Value: Any = None

    def functions(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """``(sin, tanh)`` on this engine's Values."""
        return self.Value.sin, self.Value.tanh

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        V = self.Value
        xl = x.tolist()

        def call() -> Any:
            xs = [V(v) for v in xl]
            f = W.rosenbrock_scalar(xs)
            f.backward()
            return f.data, [v.grad for v in xs]

        return Prepared(call, _floats)

    def mlp(self, params: list, X: np.ndarray, y: np.ndarray) -> Prepared:
        V = self.Value
        leaves = [V(v) for v in W.mlp_flatten(params).tolist()]
        nested = W.mlp_unflatten(leaves)
        Xl, yl = X.tolist(), y.tolist()
        relu = V.relu
        lr = W.MLP_LR

        def call() -> Any:
            for p in leaves:
                p.grad = 0.0
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
        sin = self.functions()[0]

        def call() -> Any:
            x = V(x0)
            out = W.chain_scalar(x, n, sin)
            out.backward()
            return out.data, x.grad

        return Prepared(call, lambda out: (float(out[0]), float(out[1])))

    def compile(self, prog: W.Program) -> Prepared:
        V = self.Value
        sin, tanh = self.functions()
        xl = prog.x.tolist()

        def call() -> Any:
            xs = [V(v) for v in xl]
            out = W.compile_scalar(xs, prog, sin, tanh)
            out.backward()
            return out.data, [v.grad for v in xs]

        return Prepared(call, _floats)
