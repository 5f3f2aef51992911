"""JAX: ``jax.jit(jax.value_and_grad(f))`` with 64-bit floats enabled (CPU).

Rosenbrock and the MLP are written with ``jax.numpy`` arrays; the chain and
the random tape run the shared scalar Python program, which ``jit`` unrolls
into one XLA computation (as any traced Python loop is). The MLP's whole
training step (loss, gradient and SGD update) is one jitted function.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import workloads as W
from . import Prepared, System


class Jax(System):
    name = "jax"
    description = "jax.jit(jax.value_and_grad(f)), x64"
    modules = ("jax", "jaxlib")

    def load(self) -> None:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp

    def version(self) -> str:
        import jax
        import jaxlib

        return f"jax {jax.__version__}, jaxlib {jaxlib.__version__}"

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        jax, jnp = self.jax, self.jnp

        def rosenbrock(x):
            a, b = x[:-1], x[1:]
            return jnp.sum(100.0 * (b - a**2) ** 2 + (1.0 - a) ** 2)

        vg = jax.jit(jax.value_and_grad(rosenbrock))
        xj = jnp.asarray(x)

        def call() -> Any:
            v, g = vg(xj)
            g.block_until_ready()
            return v, g

        return Prepared(call, lambda out: (float(out[0]), np.asarray(out[1])))

    def mlp(self, params: list, X: np.ndarray, y: np.ndarray) -> Prepared:
        jax, jnp = self.jax, self.jnp
        lr, wd = W.MLP_LR, W.MLP_WEIGHT_DECAY

        def loss_fn(ps, X, y):
            W1, b1, W2, b2, W3, b3 = ps
            h1 = jax.nn.relu(X @ W1.T + b1)
            h2 = jax.nn.relu(h1 @ W2.T + b2)
            score = (h2 @ W3.T + b3)[:, 0]
            reg = sum(jnp.sum(p**2) for p in ps)
            return jnp.mean(jax.nn.relu(1.0 - y * score)) + wd * reg

        @jax.jit
        def step(ps, X, y):
            loss, g = jax.value_and_grad(loss_fn)(ps, X, y)
            return loss, g, tuple(p - lr * gp for p, gp in zip(ps, g))

        state = {"p": tuple(jnp.asarray(p) for p in params)}
        Xj, yj = jnp.asarray(X), jnp.asarray(y)

        def call() -> Any:
            loss, g, new = step(state["p"], Xj, yj)
            jax.block_until_ready(new)
            state["p"] = new
            return loss, g

        return Prepared(
            call,
            lambda out: (float(out[0]), W.mlp_flatten([np.asarray(t) for t in out[1]])),
            params=lambda: W.mlp_flatten([np.asarray(t) for t in state["p"]]),
        )

    def chain(self, n: int, x0: float) -> Prepared:
        jax, jnp = self.jax, self.jnp

        def chain(x):
            return W.chain_scalar(x, n, jnp.sin)

        vg = jax.jit(jax.value_and_grad(chain))
        xj = jnp.asarray(x0, dtype=jnp.float64)

        def call() -> Any:
            v, d = vg(xj)
            d.block_until_ready()
            return v, d

        return Prepared(call, lambda out: (float(out[0]), float(out[1])))

    def compile(self, prog: W.Program) -> Prepared:
        jax, jnp = self.jax, self.jnp

        def random_tape(x):
            return W.compile_scalar([x[0], x[1], x[2], x[3]], prog, jnp.sin, jnp.tanh)

        vg = jax.jit(jax.value_and_grad(random_tape))
        xj = jnp.asarray(prog.x)

        def call() -> Any:
            v, g = vg(xj)
            g.block_until_ready()
            return v, g

        return Prepared(call, lambda out: (float(out[0]), np.asarray(out[1])))
