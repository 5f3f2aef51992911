"""PyTorch eager (float64, CPU), written as a PyTorch user would.

Rosenbrock and the MLP use whole tensors (PyTorch's natural form); the
chain and the random tape have no array form, so they run the shared scalar
program on 0-d tensors. The harness sets the thread count (``--threads``,
default 1, as the Numba reference uses).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import workloads as W
from . import Prepared, System


class Torch(System):
    name = "torch"
    description = "torch eager autograd, float64"
    modules = ("torch",)

    def load(self) -> None:
        import torch

        threads = os.environ.get("BENCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self.torch = torch

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        torch = self.torch
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)

        def call() -> Any:
            xt.grad = None
            a, b = xt[:-1], xt[1:]
            f = (100.0 * (b - a**2) ** 2 + (1.0 - a) ** 2).sum()
            f.backward()
            return f, xt.grad

        return Prepared(call, lambda out: (out[0].item(), out[1].numpy().copy()))

    def mlp(self, params: list, X: np.ndarray, y: np.ndarray) -> Prepared:
        torch = self.torch
        ps = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params]
        W1, b1, W2, b2, W3, b3 = ps
        Xt = torch.tensor(X, dtype=torch.float64)
        yt = torch.tensor(y, dtype=torch.float64)
        lr, wd = W.MLP_LR, W.MLP_WEIGHT_DECAY

        def call() -> Any:
            for p in ps:
                p.grad = None
            h1 = torch.relu(Xt @ W1.T + b1)
            h2 = torch.relu(h1 @ W2.T + b2)
            score = (h2 @ W3.T + b3)[:, 0]
            loss = torch.relu(1.0 - yt * score).mean() + wd * sum((p**2).sum() for p in ps)
            loss.backward()
            with torch.no_grad():
                for p in ps:
                    p -= lr * p.grad
            return loss

        return Prepared(
            call,
            lambda out: (out.item(), np.concatenate([p.grad.numpy().ravel() for p in ps])),
            params=lambda: np.concatenate([p.detach().numpy().ravel() for p in ps]),
        )

    def chain(self, n: int, x0: float) -> Prepared:
        torch = self.torch

        def call() -> Any:
            x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
            out = W.chain_scalar(x, n, torch.sin)
            (d,) = torch.autograd.grad(out, x)
            return out, d

        return Prepared(call, lambda out: (out[0].item(), out[1].item()))

    def compile(self, prog: W.Program) -> Prepared:
        torch = self.torch
        xl = prog.x.tolist()

        def call() -> Any:
            xs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in xl]
            out = W.compile_scalar(xs, prog, torch.sin, torch.tanh)
            g = torch.autograd.grad(out, xs)
            return out, g

        return Prepared(call, lambda out: (out[0].item(), np.array([t.item() for t in out[1]])))
