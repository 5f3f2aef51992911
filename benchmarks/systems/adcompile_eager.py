"""adcompile eager: ``ad.Value`` graphs and ``backward()``, as a micrograd user writes them."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import workloads as W
from . import Prepared, Skip, System


class AdcompileEager(System):
    name = "adcompile-eager"
    description = "adcompile.Value graph + backward() (the eager interpreter)"
    modules = ("adcompile",)
    interpreter = True

    def load(self) -> None:
        import adcompile

        if not hasattr(adcompile, "Value"):
            raise Skip("adcompile.Value not available")
        self.Value = adcompile.Value

    def version(self) -> str:
        import adcompile

        return f"adcompile {getattr(adcompile, '__version__', '?')}"

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        V = self.Value
        xl = x.tolist()

        def call() -> Any:
            xs = [V(v) for v in xl]
            f = W.rosenbrock_scalar(xs)
            f.backward()
            return f.data, [v.grad for v in xs]

        return Prepared(call, lambda out: (out[0], np.array(out[1])))

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
            lambda out: (out, np.array([p.grad for p in leaves])),
            params=lambda: np.array([p.data for p in leaves]),
        )

    def chain(self, n: int, x0: float) -> Prepared:
        V = self.Value
        sin = V.sin

        def call() -> Any:
            x = V(x0)
            out = W.chain_scalar(x, n, sin)
            out.backward()
            return out.data, x.grad

        return Prepared(call, lambda out: out)

    def compile(self, prog: W.Program) -> Prepared:
        V = self.Value
        xl = prog.x.tolist()

        def call() -> Any:
            xs = [V(v) for v in xl]
            out = W.compile_scalar(xs, prog, V.sin, V.tanh)
            out.backward()
            return out.data, [v.grad for v in xs]

        return Prepared(call, lambda out: (out[0], np.array(out[1])))
