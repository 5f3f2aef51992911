"""The four benchmark workloads of benchmarks/README.md, their inputs and their references.

Everything is float64. Each workload has

- its inputs, built here exactly as benchmarks/README.md defines them;
- a plain-Python reference value and gradient, derived by hand (no autodiff,
  no NumPy in the arithmetic), that every system's answer is checked against;
- the scalar program written once as ordinary Python over scalar-like
  objects (``*_scalar`` functions), shared by every system that runs Python
  scalars (adcompile compiled and eager, micrograd, torch and jax where the
  workload has no array form), so that they all run the same program.

rosenbrock
    ``x[i] = 0.9 * cos(i)``; ``f(x) = sum_{i<n-1} 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2``;
    a call gives the value and the gradient. Sizes 10, 100, 1000, 10000.

mlp
    A 2-16-16-1 ReLU MLP with a linear output. Parameters, and the order in
    which they are drawn from ``numpy.random.default_rng(0)`` (every system
    starts from these same arrays)::

        rng = numpy.random.default_rng(0)
        W1 = rng.uniform(-1, 1, size=(16, 2))    # W1[j, k]: input k -> hidden-1 unit j
        W2 = rng.uniform(-1, 1, size=(16, 16))   # W2[j, k]: hidden-1 k -> hidden-2 j
        W3 = rng.uniform(-1, 1, size=(1, 16))    # W3[0, k]: hidden-2 k -> output
        b1, b2, b3 = zeros(16), zeros(16), zeros(1)

    That is layer by layer, neuron by neuron, one weight per input, as
    micrograd's ``MLP(2, [16, 16, 1])`` draws them (its biases are 0 too).
    The flat parameter vector (337 numbers) is ``W1, b1, W2, b2, W3, b3``,
    each C-ordered. Data: ``two_moons(n)`` below (scikit-learn's
    ``make_moons(n, noise=0.1)`` recipe, drawn from ``default_rng(1)``:
    first a permutation of the n points, then the noise; labels in {-1, +1}).
    Loss: ``mean_i relu(1 - y_i * score_i) + 1e-4 * sum(p**2)``. A call is one
    full-batch training step: forward, backward, ``p -= 0.05 * grad``. The
    check compares the loss and gradient of the first step and the
    parameters after it. Sizes (batch) 100, 1000.

chain
    ``x = 0.3; repeat n times: x = sin(x) + 0.5 * x``; a call gives the final
    x and dx_final/dx_0. Sizes 1000, 10000, 100000, and 1,000,000 for the
    eager interpreters only. The derivative underflows to 0.0 above n ~ 445,
    so correctness is checked at n = 25 and the larger sizes are timed.

compile
    A random scalar tape of N primitive operations on 4 inputs (seed 0),
    ``compile_program(N)``; the gradient is with respect to the 4 inputs.
    Sizes 100, 1000, 10000, 100000.

Relative error (the check passes below 1e-8) is measured norm-wise:
``max|got - ref| / max|ref|`` (with ``max|ref|`` floored at 1e-300).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

WORKLOADS = ("rosenbrock", "mlp", "chain", "compile")

#: The sizes of benchmarks/README.md.
SIZES: dict[str, tuple[int, ...]] = {
    "rosenbrock": (10, 100, 1000, 10000),
    "mlp": (100, 1000),
    "chain": (1000, 10000, 100000, 1000000),
    "compile": (100, 1000, 10000, 100000),
}
#: The smaller sizes ``--quick`` runs.
QUICK_SIZES: dict[str, tuple[int, ...]] = {
    "rosenbrock": (10, 100),
    "mlp": (100,),
    "chain": (1000,),
    "compile": (100, 1000),
}
#: Sizes run only by eager interpreters (systems with ``interpreter = True``).
INTERPRETER_ONLY: dict[str, tuple[int, ...]] = {"chain": (1000000,)}

TOLERANCE = 1e-8
CHAIN_CHECK_N = 25
CHAIN_X0 = 0.3

MLP_SIZES = (2, 16, 16, 1)
MLP_LR = 0.05
MLP_WEIGHT_DECAY = 1e-4
#: (name, shape) of each parameter array, in flat order.
MLP_PARAMS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("W1", (16, 2)),
    ("b1", (16,)),
    ("W2", (16, 16)),
    ("b2", (16,)),
    ("W3", (1, 16)),
    ("b3", (1,)),
)
MLP_NPARAMS = sum(math.prod(s) for _, s in MLP_PARAMS)  # 337

COMPILE_OPS = ("add", "mul", "sin", "tanh")
COMPILE_WINDOW = 50


# ---------------------------------------------------------------- checking


def rel_err(got: Any, ref: Any) -> float:
    """``max|got - ref| / max|ref|``: norm-wise relative error (nan/shape mismatch -> inf)."""
    g = np.asarray(got, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if g.shape != r.shape:
        if g.size == r.size:
            g = g.reshape(r.shape)
        else:
            return math.inf
    if r.size == 0:
        return 0.0
    scale = max(float(np.max(np.abs(r))), 1e-300)
    err = float(np.max(np.abs(g - r))) / scale
    return err if math.isfinite(err) else math.inf


@dataclass
class Reference:
    """What a system's answer is checked against."""

    value: float
    grad: np.ndarray
    params_after: np.ndarray | None = None  # mlp: the parameters after the step


# ---------------------------------------------------------------- rosenbrock


def rosenbrock_input(n: int) -> np.ndarray:
    """``x[i] = 0.9 * cos(i)``."""
    return np.array([0.9 * math.cos(i) for i in range(n)], dtype=np.float64)


def rosenbrock_scalar(x: Sequence[Any]) -> Any:
    """The Rosenbrock function as a Python loop over ``x[i]`` (any scalar type)."""
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def rosenbrock_reference(x: Sequence[float]) -> Reference:
    """Value and hand-derived gradient, plain Python floats."""
    x = [float(v) for v in x]
    n = len(x)
    g = [0.0] * n
    f = 0.0
    for i in range(n - 1):
        d = x[i + 1] - x[i] * x[i]
        e = 1.0 - x[i]
        f += 100.0 * d * d + e * e
        g[i] += -400.0 * x[i] * d - 2.0 * e
        g[i + 1] += 200.0 * d
    return Reference(f, np.array(g))


# ---------------------------------------------------------------- mlp


def two_moons(n: int, noise: float = 0.1, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``make_moons`` recipe with ``numpy.random.default_rng(seed)``.

    ``n // 2`` points on the outer moon, the rest on the inner one; the points
    are shuffled (``rng.permutation(n)``) and then Gaussian noise of standard
    deviation ``noise`` is added (``rng.normal(0, noise, (n, 2))``), in that
    order. Labels: -1 for the outer moon, +1 for the inner one.
    """
    rng = np.random.default_rng(seed)
    n_out = n // 2
    n_in = n - n_out
    t_out = np.linspace(0.0, np.pi, n_out)
    t_in = np.linspace(0.0, np.pi, n_in)
    X = np.vstack(
        [
            np.append(np.cos(t_out), 1.0 - np.cos(t_in)),
            np.append(np.sin(t_out), 1.0 - np.sin(t_in) - 0.5),
        ]
    ).T
    y = np.hstack([-np.ones(n_out), np.ones(n_in)])
    perm = rng.permutation(n)
    X, y = X[perm], y[perm]
    X = X + rng.normal(0.0, noise, size=X.shape)
    return np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64)


def mlp_init() -> list[np.ndarray]:
    """``[W1, b1, W2, b2, W3, b3]`` drawn as the module docstring says."""
    rng = np.random.default_rng(0)
    W1 = rng.uniform(-1.0, 1.0, size=(16, 2))
    W2 = rng.uniform(-1.0, 1.0, size=(16, 16))
    W3 = rng.uniform(-1.0, 1.0, size=(1, 16))
    return [W1, np.zeros(16), W2, np.zeros(16), W3, np.zeros(1)]


def mlp_flatten(params: Sequence[Any]) -> np.ndarray:
    """The 337-vector ``W1, b1, W2, b2, W3, b3`` (each C-ordered)."""
    return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in params])


def mlp_unflatten(flat: Sequence[Any]) -> list[Any]:
    """Nested Python lists ``[W1, b1, W2, b2, W3, b3]`` from any flat sequence.

    Matrices become lists of rows, vectors lists; elements are left as they
    are (floats, Values, tensors ...).
    """
    flat = list(flat)
    out: list[Any] = []
    k = 0
    for _, shape in MLP_PARAMS:
        size = math.prod(shape)
        chunk = flat[k : k + size]
        k += size
        if len(shape) == 2:
            rows, cols = shape
            out.append([chunk[r * cols : (r + 1) * cols] for r in range(rows)])
        else:
            out.append(chunk)
    return out


def mlp_loss_scalar(
    params: Sequence[Any], X: Sequence[Sequence[Any]], y: Sequence[Any], relu: Callable
) -> Any:
    """The hinge loss of the MLP, scalar by scalar (any scalar type with + * and ``relu``).

    ``params`` is ``mlp_unflatten``'s nested lists. Each neuron sums as
    micrograd's does: ``b + w0*x0 + w1*x1 + ...``.
    """
    W1, b1, W2, b2, W3, b3 = params
    n = len(X)
    total = 0.0
    for row, yi in zip(X, y):
        x0, x1 = row[0], row[1]
        h1 = [relu(b1[j] + W1[j][0] * x0 + W1[j][1] * x1) for j in range(16)]
        h2 = []
        for j in range(16):
            w = W2[j]
            a = b2[j]
            for k in range(16):
                a = a + w[k] * h1[k]
            h2.append(relu(a))
        s = b3[0]
        w = W3[0]
        for k in range(16):
            s = s + w[k] * h2[k]
        total = total + relu(1.0 - yi * s)
    reg = 0.0
    for p in _mlp_leaves(params):
        reg = reg + p * p
    return total * (1.0 / n) + MLP_WEIGHT_DECAY * reg


def _mlp_leaves(params: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for p in params:
        for e in p:
            if isinstance(e, list):
                out.extend(e)
            else:
                out.append(e)
    return out


def mlp_reference(params: Sequence[np.ndarray], X: np.ndarray, y: np.ndarray) -> Reference:
    """Loss, hand-derived gradient (flat) and the parameters after one SGD step.

    Plain Python floats: forward per sample, then backpropagation by hand
    (``dL/ds_i = -y_i/n`` where ``1 - y_i s_i > 0``, relu'(0) = 0).
    """
    W1, b1, W2, b2, W3, b3 = (np.asarray(p, dtype=np.float64).tolist() for p in params)
    gW1 = [[0.0, 0.0] for _ in range(16)]
    gb1 = [0.0] * 16
    gW2 = [[0.0] * 16 for _ in range(16)]
    gb2 = [0.0] * 16
    gW3 = [0.0] * 16
    gb3 = 0.0
    n = len(X)
    total = 0.0
    for (x0, x1), yi in zip(X.tolist(), y.tolist()):
        z1 = [b1[j] + W1[j][0] * x0 + W1[j][1] * x1 for j in range(16)]
        h1 = [z if z > 0.0 else 0.0 for z in z1]
        z2 = []
        for j in range(16):
            a = b2[j]
            w = W2[j]
            for k in range(16):
                a += w[k] * h1[k]
            z2.append(a)
        h2 = [z if z > 0.0 else 0.0 for z in z2]
        s = b3[0]
        for k in range(16):
            s += W3[0][k] * h2[k]
        m = 1.0 - yi * s
        if m > 0.0:
            total += m
            ds = -yi / n
        else:
            continue
        gb3 += ds
        dz2 = [0.0] * 16
        for k in range(16):
            gW3[k] += ds * h2[k]
            if z2[k] > 0.0:
                dz2[k] = ds * W3[0][k]
        dh1 = [0.0] * 16
        for j in range(16):
            d = dz2[j]
            if d == 0.0:
                continue
            gb2[j] += d
            w = W2[j]
            gw = gW2[j]
            for k in range(16):
                gw[k] += d * h1[k]
                dh1[k] += d * w[k]
        for j in range(16):
            if z1[j] > 0.0:
                d = dh1[j]
                gb1[j] += d
                gW1[j][0] += d * x0
                gW1[j][1] += d * x1
    p = mlp_flatten(params)
    loss = total / n + MLP_WEIGHT_DECAY * sum(v * v for v in p.tolist())
    g = mlp_flatten([gW1, gb1, gW2, gb2, [gW3], [gb3]]) + 2.0 * MLP_WEIGHT_DECAY * p
    return Reference(loss, g, p - MLP_LR * g)


# ---------------------------------------------------------------- chain


def chain_scalar(x: Any, n: int, sin: Callable) -> Any:
    """``repeat n times: x = sin(x) + 0.5 * x``."""
    for _ in range(n):
        x = sin(x) + 0.5 * x
    return x


def chain_reference(n: int, x0: float = CHAIN_X0) -> Reference:
    """Final x and dx_n/dx_0 = prod(cos(x_k) + 0.5), plain Python."""
    x, d = x0, 1.0
    for _ in range(n):
        d *= math.cos(x) + 0.5
        x = math.sin(x) + 0.5 * x
    return Reference(x, np.array(d))


# ---------------------------------------------------------------- compile scaling


@dataclass
class Program:
    """A random scalar tape: ``v[4 + k] = op[k](v[a[k]], v[b[k]])``."""

    x: np.ndarray  # the 4 inputs
    op: np.ndarray  # 0 add, 1 mul, 2 sin, 3 tanh
    a: np.ndarray
    b: np.ndarray

    def __len__(self) -> int:
        return len(self.op)


def compile_program(N: int) -> Program:
    """The random tape of benchmarks/README.md "compile scaling", seed 0."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, size=4)
    op = rng.integers(0, 4, size=N)
    ua = rng.random(N)
    ub = rng.random(N)
    a = np.empty(N, dtype=np.int64)
    b = np.empty(N, dtype=np.int64)
    for k in range(N):
        j = 4 + k
        lo = max(4, j - COMPILE_WINDOW)
        m = (j - lo) + 4
        ia = math.floor(ua[k] * m)
        ib = math.floor(ub[k] * m)
        a[k] = ia if ia < 4 else lo + ia - 4
        b[k] = ib if ib < 4 else lo + ib - 4
    return Program(x, op.astype(np.int64), a, b)


def compile_scalar(xs: Sequence[Any], prog: Program, sin: Callable, tanh: Callable) -> Any:
    """Run the random tape on scalars ``xs`` (any scalar type); the last value."""
    v = list(xs)
    for o, a, b in zip(prog.op.tolist(), prog.a.tolist(), prog.b.tolist()):
        if o == 0:
            v.append(v[a] + v[b])
        elif o == 1:
            v.append(v[a] * v[b])
        elif o == 2:
            v.append(sin(v[a]))
        else:
            v.append(tanh(v[a]))
    return v[-1]


def compile_reference(prog: Program) -> Reference:
    """Value and gradient by a hand-written forward and reverse sweep, plain Python."""
    ops, aa, bb = prog.op.tolist(), prog.a.tolist(), prog.b.tolist()
    v = [float(t) for t in prog.x]
    for o, a, b in zip(ops, aa, bb):
        if o == 0:
            v.append(v[a] + v[b])
        elif o == 1:
            v.append(v[a] * v[b])
        elif o == 2:
            v.append(math.sin(v[a]))
        else:
            v.append(math.tanh(v[a]))
    adj = [0.0] * len(v)
    adj[-1] = 1.0
    for k in range(len(ops) - 1, -1, -1):
        g = adj[4 + k]
        if g == 0.0:
            continue
        o, a, b = ops[k], aa[k], bb[k]
        if o == 0:
            adj[a] += g
            adj[b] += g
        elif o == 1:
            adj[a] += g * v[b]
            adj[b] += g * v[a]
        elif o == 2:
            adj[a] += g * math.cos(v[a])
        else:
            t = v[4 + k]
            adj[a] += g * (1.0 - t * t)
    return Reference(v[-1], np.array(adj[:4]))


# ---------------------------------------------------------------- one entry point


def inputs(workload: str, n: int) -> dict[str, Any]:
    """The inputs of ``workload`` at size ``n`` (what every system gets)."""
    if workload == "rosenbrock":
        return {"x": rosenbrock_input(n)}
    if workload == "mlp":
        X, y = two_moons(n)
        return {"params": mlp_init(), "X": X, "y": y}
    if workload == "chain":
        return {"n": n, "x0": CHAIN_X0}
    if workload == "compile":
        return {"prog": compile_program(n)}
    raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")


def reference(workload: str, data: dict[str, Any]) -> Reference:
    """The hand-derived reference answer for ``inputs(workload, n)``."""
    if workload == "rosenbrock":
        return rosenbrock_reference(data["x"])
    if workload == "mlp":
        return mlp_reference(data["params"], data["X"], data["y"])
    if workload == "chain":
        return chain_reference(data["n"], data["x0"])
    if workload == "compile":
        return compile_reference(data["prog"])
    raise ValueError(f"unknown workload {workload!r}")


def n_ops(workload: str, n: int) -> int:
    """Primitive operations in one forward pass (for ns per op)."""
    if workload == "compile":
        return n
    if workload == "chain":
        return 3 * n  # sin, mul, add
    if workload == "rosenbrock":
        return 7 * (n - 1)  # sub, pow, sub, pow, mul, pow, add (+ accumulate)
    if workload == "mlp":
        # per sample: 16*(2 mul + 2 add + relu) + 16*(16 mul + 16 add + relu) + 32 + 3 + 1
        return n * (16 * 5 + 16 * 33 + 32 + 4) + 3 * MLP_NPARAMS
    raise ValueError(f"unknown workload {workload!r}")
