"""Hand-written gradients compiled with Numba: the reference for "as fast as it gets".

Forward and adjoint loops written by hand, ``@numba.njit`` with Numba's
defaults (no ``fastmath``, no parallelism, no disk cache, so the first call
in a fresh process includes compilation). The random tape of "compile
scaling" is run by a hand-written tape interpreter (forward then reverse
over the op/operand arrays).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import workloads as W
from . import Prepared, System

_kernels: dict[str, Any] = {}


def build_kernels() -> dict[str, Any]:
    if _kernels:
        return _kernels
    import numba

    njit = numba.njit(cache=False)

    @njit
    def rosenbrock(x, g):
        n = x.shape[0]
        f = 0.0
        for i in range(n):
            g[i] = 0.0
        for i in range(n - 1):
            d = x[i + 1] - x[i] * x[i]
            e = 1.0 - x[i]
            f += 100.0 * d * d + e * e
            g[i] += -400.0 * x[i] * d - 2.0 * e
            g[i + 1] += 200.0 * d
        return f

    @njit
    def mlp_step(W1, b1, W2, b2, W3, b3, X, y, gW1, gb1, gW2, gb2, gW3, gb3, lr, wd):
        n = X.shape[0]
        H = W1.shape[0]
        z1 = np.empty(H)
        h1 = np.empty(H)
        z2 = np.empty(H)
        h2 = np.empty(H)
        dz2 = np.empty(H)
        dh1 = np.empty(H)
        gW1[:] = 0.0
        gb1[:] = 0.0
        gW2[:] = 0.0
        gb2[:] = 0.0
        gW3[:] = 0.0
        gb3[:] = 0.0
        total = 0.0
        for i in range(n):
            x0 = X[i, 0]
            x1 = X[i, 1]
            for j in range(H):
                z = b1[j] + W1[j, 0] * x0 + W1[j, 1] * x1
                z1[j] = z
                h1[j] = z if z > 0.0 else 0.0
            s = b3[0]
            for j in range(H):
                a = b2[j]
                for k in range(H):
                    a += W2[j, k] * h1[k]
                z2[j] = a
                h2[j] = a if a > 0.0 else 0.0
                s += W3[0, j] * h2[j]
            m = 1.0 - y[i] * s
            if m <= 0.0:
                continue
            total += m
            ds = -y[i] / n
            gb3[0] += ds
            for k in range(H):
                gW3[0, k] += ds * h2[k]
                dz2[k] = ds * W3[0, k] if z2[k] > 0.0 else 0.0
                dh1[k] = 0.0
            for j in range(H):
                d = dz2[j]
                if d != 0.0:
                    gb2[j] += d
                    for k in range(H):
                        gW2[j, k] += d * h1[k]
                        dh1[k] += d * W2[j, k]
            for j in range(H):
                if z1[j] > 0.0:
                    d = dh1[j]
                    gb1[j] += d
                    gW1[j, 0] += d * x0
                    gW1[j, 1] += d * x1
        reg = 0.0
        for P, G in ((W1, gW1), (W2, gW2), (W3, gW3)):
            for j in range(P.shape[0]):
                for k in range(P.shape[1]):
                    p = P[j, k]
                    reg += p * p
                    G[j, k] += 2.0 * wd * p
                    P[j, k] = p - lr * G[j, k]
        for P, G in ((b1, gb1), (b2, gb2), (b3, gb3)):
            for j in range(P.shape[0]):
                p = P[j]
                reg += p * p
                G[j] += 2.0 * wd * p
                P[j] = p - lr * G[j]
        return total / n + wd * reg

    @njit
    def chain(x, n):
        d = 1.0
        for _ in range(n):
            d *= math.cos(x) + 0.5
            x = math.sin(x) + 0.5 * x
        return x, d

    @njit
    def tape(x, op, a, b, v, adj, g):
        N = op.shape[0]
        for k in range(4):
            v[k] = x[k]
        for k in range(N):
            o = op[k]
            if o == 0:
                v[4 + k] = v[a[k]] + v[b[k]]
            elif o == 1:
                v[4 + k] = v[a[k]] * v[b[k]]
            elif o == 2:
                v[4 + k] = math.sin(v[a[k]])
            else:
                v[4 + k] = math.tanh(v[a[k]])
        adj[:] = 0.0
        adj[4 + N - 1] = 1.0
        for k in range(N - 1, -1, -1):
            gk = adj[4 + k]
            if gk == 0.0:
                continue
            o = op[k]
            if o == 0:
                adj[a[k]] += gk
                adj[b[k]] += gk
            elif o == 1:
                adj[a[k]] += gk * v[b[k]]
                adj[b[k]] += gk * v[a[k]]
            elif o == 2:
                adj[a[k]] += gk * math.cos(v[a[k]])
            else:
                t = v[4 + k]
                adj[a[k]] += gk * (1.0 - t * t)
        for k in range(4):
            g[k] = adj[k]
        return v[4 + N - 1]

    _kernels.update(rosenbrock=rosenbrock, mlp_step=mlp_step, chain=chain, tape=tape)
    return _kernels


class NumbaHand(System):
    name = "numba"
    description = "hand-written forward + adjoint loops, numba.njit (the reference)"
    modules = ("numba",)

    def load(self) -> None:
        import numba  # noqa: F401

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        k = build_kernels()["rosenbrock"]
        g = np.empty_like(x)
        return Prepared(lambda: (k(x, g), g), lambda out: (float(out[0]), out[1].copy()))

    def mlp(self, params: list, X: np.ndarray, y: np.ndarray) -> Prepared:
        k = build_kernels()["mlp_step"]
        ps = [np.array(p, dtype=np.float64) for p in params]
        gs = [np.zeros_like(p) for p in ps]
        lr, wd = W.MLP_LR, W.MLP_WEIGHT_DECAY

        def call() -> Any:
            return k(*ps, X, y, *gs, lr, wd)

        return Prepared(
            call,
            lambda out: (float(out), W.mlp_flatten(gs)),
            params=lambda: W.mlp_flatten(ps),
        )

    def chain(self, n: int, x0: float) -> Prepared:
        k = build_kernels()["chain"]
        return Prepared(lambda: k(x0, n), lambda out: (float(out[0]), float(out[1])))

    def compile(self, prog: W.Program) -> Prepared:
        k = build_kernels()["tape"]
        N = len(prog)
        v = np.empty(4 + N)
        adj = np.empty(4 + N)
        g = np.empty(4)
        x, op, a, b = prog.x, prog.op, prog.a, prog.b
        return Prepared(
            lambda: (k(x, op, a, b, v, adj, g), g), lambda out: (float(out[0]), out[1].copy())
        )
