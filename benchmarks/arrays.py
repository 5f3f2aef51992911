"""NumPy-style losses on whole arrays: adcompile beside hand-written NumPy, torch and jax.

    python -m benchmarks.arrays            # every workload, under 2 minutes on 2 cores
    python -m benchmarks.arrays --quick    # no size grid, short timings (about 30 s)
    python -m benchmarks.arrays rnn huber --systems numpy,adcompile --json
    adcompile bench arrays --quick         # the same program

The workloads of issue 30, each written the natural NumPy way, float64, with
the same data and weights for every system (built from fixed seeds in every
process):

- ``mlp``: a 784-128-10 ReLU network, softmax cross-entropy (stable
  log-sum-exp) at batch 128 on MNIST-shaped synthetic data; gradient with
  respect to W1, b1, W2, b2;
- ``mlp-grid``: the same at the other eight of batch {32, 128, 512} x
  hidden width {32, 128, 512} (``--cross``: only batch 32 / 512 at width 128
  and width 32 / 512 at batch 128; ``--quick`` leaves the grid out unless
  named, and then runs the cross): how first call and step cost grow;
- ``moons``: a 2-16-16-1 ReLU network, hinge loss plus 1e-4 times the sum of
  squares of its parameters, on 1,000 two-moons rows (noise 0.1, seed 1);
- ``logistic``: ``mean(log1p(exp(-y * (X @ w))))`` on 10,000 x 20;
- ``rnn``: ``h = tanh(W @ h + U @ x_t)`` over 200 steps (width 32, inputs of
  8), the mean squared error of a linear readout of the last ``h``;
- ``huber``: a Huber line fit (``np.where``) minimised by
  ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)``: the time of the
  whole minimisation (cold, then again), its evaluations, and adcompile's
  number of traces (``vg.traces``).

Each (workload, system) runs in a fresh process (adcompile with a new, empty
``ADCOMPILE_CACHE_DIR``), which measures the first call (cold: adcompile's
trace and code generation, jax's jit compile, torch's first eager call), the
median of steady-state steps, and the process's peak resident memory (VmHWM)
with how much the calls raised that peak above what imports and data had
taken (+0: they fitted under it); for adcompile also whether it traced at
array level (``vg.array_refused`` and what ``ad.explain`` says it made).
Every system's value and gradient is checked against the hand-written NumPy
gradient to a relative error of ``RTOL``; a failed check is printed loudly
and the exit status is 1. torch and jax are skipped (and said so) where they
are not installed. Every process runs single-threaded: OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS, MKL_NUM_THREADS and NUMBA_NUM_THREADS are 1,
``torch.set_num_threads(1)``, and each cell process is pinned to one CPU (XLA
ignores its thread flags).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # (where numpy is not loaded yet: this process too)

import numpy as np  # noqa: E402

from .cli import parser  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

#: Each system's value and gradient must agree with the hand-written NumPy one to this.
RTOL = 1e-8
#: L-BFGS-B's answer (its path, many steps long) must agree to this.
RTOL_MINIMUM = 1e-6

SYSTEMS = ("numpy", "adcompile", "torch", "jax")
DESCRIPTION = {
    "numpy": "value and gradient written by hand in NumPy (the reference)",
    "adcompile": "ad.value_and_grad of the NumPy function",
    "torch": "torch.autograd.grad, eager, float64",
    "jax": "jax.jit(jax.value_and_grad) of the same source with np -> jax.numpy, x64",
}
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
MARKER = "@@ARRAYS-BENCH@@ "
#: Set on some machines to force OpenBLAS's kernels (see ``blas_kernels``).
BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

FULL = {"budget": 1.0, "min_steps": 5}
QUICK = {"budget": 0.15, "min_steps": 3}


# ---------------------------------------------------------------- the losses, NumPy style


def mlp_loss(W1, b1, W2, b2, X, Y):  # noqa: ANN001, ANN201, N803
    """Softmax cross-entropy of a one-hidden-layer ReLU network (Y one-hot)."""
    h = np.maximum(X @ W1 + b1, 0.0)
    z = h @ W2 + b2
    m = np.max(z, axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.sum(np.exp(z - m), axis=1))
    return np.mean(lse - np.sum(z * Y, axis=1))


MOONS_DECAY = 1e-4


def moons_loss(W1, b1, W2, b2, W3, b3, X, y):  # noqa: ANN001, ANN201, N803
    """Hinge loss of a 2-16-16-1 ReLU network plus 1e-4 times the squared parameters."""
    h1 = np.maximum(X @ W1 + b1, 0.0)
    h2 = np.maximum(h1 @ W2 + b2, 0.0)
    score = (h2 @ W3 + b3)[:, 0]
    data = np.mean(np.maximum(1.0 - y * score, 0.0))
    squares = (
        np.sum(W1 * W1)
        + np.sum(b1 * b1)
        + np.sum(W2 * W2)
        + np.sum(b2 * b2)
        + np.sum(W3 * W3)
        + np.sum(b3 * b3)
    )
    return data + MOONS_DECAY * squares


def logistic_loss(w, X, y):  # noqa: ANN001, ANN201, N803
    """The logistic loss of a linear model, labels +-1."""
    return np.mean(np.log1p(np.exp(-y * (X @ w))))


def rnn_loss(W, U, V, h0, xs, target):  # noqa: ANN001, ANN201, N803
    """A tanh RNN over the rows of xs; mean squared error of a readout of the last state."""
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t])
    return np.mean((V @ h - target) ** 2)


HUBER_DELTA = 1.0


def huber_loss(theta, x, y):  # noqa: ANN001, ANN201
    """The Huber loss (delta 1) of the line theta[0] * x + theta[1]."""
    r = theta[0] * x + theta[1] - y
    a = np.abs(r)
    return np.mean(np.where(a <= HUBER_DELTA, 0.5 * r * r, HUBER_DELTA * (a - 0.5 * HUBER_DELTA)))


# ---------------------------------------------------------------- their gradients by hand


def mlp_hand(W1, b1, W2, b2, X, Y):  # noqa: ANN001, ANN201, N803
    a1 = X @ W1 + b1
    h = np.maximum(a1, 0.0)
    z = h @ W2 + b2
    m = np.max(z, axis=1, keepdims=True)
    e = np.exp(z - m)
    s = np.sum(e, axis=1, keepdims=True)
    value = np.mean(m[:, 0] + np.log(s[:, 0]) - np.sum(z * Y, axis=1))
    dz = (e / s - Y) / X.shape[0]
    da1 = (dz @ W2.T) * (a1 > 0)
    return value, (X.T @ da1, da1.sum(axis=0), h.T @ dz, dz.sum(axis=0))


def moons_hand(W1, b1, W2, b2, W3, b3, X, y):  # noqa: ANN001, ANN201, N803
    a1 = X @ W1 + b1
    h1 = np.maximum(a1, 0.0)
    a2 = h1 @ W2 + b2
    h2 = np.maximum(a2, 0.0)
    score = (h2 @ W3 + b3)[:, 0]
    margin = 1.0 - y * score
    params = (W1, b1, W2, b2, W3, b3)
    value = np.mean(np.maximum(margin, 0.0)) + MOONS_DECAY * sum(np.sum(p * p) for p in params)
    ds = (-y * (margin > 0) / X.shape[0])[:, None]
    da2 = (ds @ W3.T) * (a2 > 0)
    da1 = (da2 @ W2.T) * (a1 > 0)
    grads = (X.T @ da1, da1.sum(0), h1.T @ da2, da2.sum(0), h2.T @ ds, ds.sum(0))
    return value, tuple(g + 2 * MOONS_DECAY * p for g, p in zip(grads, params))


def logistic_hand(w, X, y):  # noqa: ANN001, ANN201, N803
    m = -y * (X @ w)
    value = np.mean(np.log1p(np.exp(m)))
    return value, (X.T @ (-y / (1.0 + np.exp(-m))) / X.shape[0],)


def rnn_hand(W, U, V, h0, xs, target):  # noqa: ANN001, ANN201, N803
    hs = [h0]
    for t in range(xs.shape[0]):
        hs.append(np.tanh(W @ hs[-1] + U @ xs[t]))
    d = V @ hs[-1] - target
    value = np.mean(d**2)
    dout = 2.0 * d / d.size
    gW, gU = np.zeros_like(W), np.zeros_like(U)
    dh = V.T @ dout
    for t in range(xs.shape[0] - 1, -1, -1):
        da = dh * (1.0 - hs[t + 1] ** 2)
        gW += np.outer(da, hs[t])
        gU += np.outer(da, xs[t])
        dh = W.T @ da
    return value, (gW, gU, np.outer(dout, hs[-1]))


def huber_hand(theta, x, y):  # noqa: ANN001, ANN201
    r = theta[0] * x + theta[1] - y
    a = np.abs(r)
    inside = a <= HUBER_DELTA
    value = np.mean(np.where(inside, 0.5 * r * r, HUBER_DELTA * (a - 0.5 * HUBER_DELTA)))
    dr = np.where(inside, r, HUBER_DELTA * np.sign(r)) / x.size
    return value, (np.array([dr @ x, dr.sum()]),)


# ---------------------------------------------------------------- the same in torch


def _torch_losses() -> dict[str, Callable]:
    import torch

    def mlp(W1, b1, W2, b2, X, Y):  # noqa: ANN001, ANN202, N803
        z = torch.relu(X @ W1 + b1) @ W2 + b2
        return torch.mean(torch.logsumexp(z, dim=1) - torch.sum(z * Y, dim=1))

    def moons(W1, b1, W2, b2, W3, b3, X, y):  # noqa: ANN001, ANN202, N803
        h2 = torch.relu(torch.relu(X @ W1 + b1) @ W2 + b2)
        score = (h2 @ W3 + b3)[:, 0]
        squares = sum(torch.sum(p * p) for p in (W1, b1, W2, b2, W3, b3))
        return torch.mean(torch.relu(1.0 - y * score)) + MOONS_DECAY * squares

    def logistic(w, X, y):  # noqa: ANN001, ANN202, N803
        return torch.mean(torch.log1p(torch.exp(-y * (X @ w))))

    def rnn(W, U, V, h0, xs, target):  # noqa: ANN001, ANN202, N803
        h = h0
        for t in range(xs.shape[0]):
            h = torch.tanh(W @ h + U @ xs[t])
        return torch.mean((V @ h - target) ** 2)

    def huber(theta, x, y):  # noqa: ANN001, ANN202
        r = theta[0] * x + theta[1] - y
        a = torch.abs(r)
        return torch.mean(
            torch.where(a <= HUBER_DELTA, 0.5 * r * r, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))
        )

    return {"mlp": mlp, "moons": moons, "logistic": logistic, "rnn": rnn, "huber": huber}


def _jax_version(f: Callable) -> Callable:
    """``f``'s own code with ``np`` bound to ``jax.numpy`` (the same source, for jax)."""
    import jax.numpy as jnp

    return types.FunctionType(
        f.__code__, dict(f.__globals__, np=jnp), f.__name__, f.__defaults__, f.__closure__
    )


# ---------------------------------------------------------------- the workloads


@dataclasses.dataclass
class Problem:
    """One workload at one size: its NumPy loss, arguments and which to differentiate."""

    name: str
    workload: str
    loss: Callable
    hand: Callable
    args: tuple
    argnums: tuple[int, ...]
    names: tuple[str, ...]  # of the differentiated arguments
    lbfgs: bool = False


LOSSES = {
    "mlp": (mlp_loss, mlp_hand),
    "moons": (moons_loss, moons_hand),
    "logistic": (logistic_loss, logistic_hand),
    "rnn": (rnn_loss, rnn_hand),
    "huber": (huber_loss, huber_hand),
}


def build(workload: str, **size: int) -> Problem:
    """The problem ``workload`` at ``size`` (its defaults: issue 30's sizes)."""
    loss, hand = LOSSES[workload]
    if workload == "mlp":
        batch, hidden = size.get("batch", 128), size.get("hidden", 128)
        inputs, classes = size.get("inputs", 784), size.get("classes", 10)
        rng = np.random.default_rng(0)
        X = rng.random((batch, inputs))  # pixel intensities in [0, 1)
        Y = np.eye(classes)[rng.integers(0, classes, batch)]
        W1 = rng.normal(size=(inputs, hidden)) * np.sqrt(2.0 / inputs)
        b1 = rng.normal(size=hidden) * 0.01
        W2 = rng.normal(size=(hidden, classes)) * np.sqrt(1.0 / hidden)
        b2 = rng.normal(size=classes) * 0.01
        name = f"mlp {inputs}-{hidden}-{classes} batch {batch}"
        return Problem(
            name,
            workload,
            loss,
            hand,
            (W1, b1, W2, b2, X, Y),
            (0, 1, 2, 3),
            ("W1", "b1", "W2", "b2"),
        )
    if workload == "moons":
        from adcompile.datasets import make_moons

        n, hidden = size.get("n", 1000), size.get("hidden", 16)
        X, y = make_moons(n, noise=0.1, seed=1)
        rng = np.random.default_rng(0)
        W1 = rng.uniform(-1.0, 1.0, size=(2, hidden))
        W2 = rng.uniform(-1.0, 1.0, size=(hidden, hidden))
        W3 = rng.uniform(-1.0, 1.0, size=(hidden, 1))
        b1, b2, b3 = rng.normal(size=hidden) * 0.1, rng.normal(size=hidden) * 0.1, np.full(1, 0.1)
        args = (W1, b1, W2, b2, W3, b3, X, y)
        return Problem(
            f"moons 2-{hidden}-{hidden}-1 hinge, {n:,} rows",
            workload,
            loss,
            hand,
            args,
            tuple(range(6)),
            ("W1", "b1", "W2", "b2", "W3", "b3"),
        )
    if workload == "logistic":
        n, d = size.get("n", 10_000), size.get("d", 20)
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, d))
        y = np.sign(X @ rng.normal(size=d) + rng.normal(size=n))
        w = rng.normal(size=d) * 0.1
        return Problem(f"logistic {n:,} x {d}", workload, loss, hand, (w, X, y), (0,), ("w",))
    if workload == "rnn":
        steps, hidden = size.get("steps", 200), size.get("hidden", 32)
        inputs, outputs = size.get("inputs", 8), size.get("outputs", 4)
        rng = np.random.default_rng(0)
        W = rng.normal(size=(hidden, hidden)) * (0.9 / np.sqrt(hidden))
        U = rng.normal(size=(hidden, inputs)) * (1.0 / np.sqrt(inputs))
        V = rng.normal(size=(outputs, hidden)) * (1.0 / np.sqrt(hidden))
        h0 = np.zeros(hidden)
        xs = rng.normal(size=(steps, inputs))
        target = rng.normal(size=outputs)
        return Problem(
            f"rnn {steps} steps, width {hidden}, inputs {inputs}",
            workload,
            loss,
            hand,
            (W, U, V, h0, xs, target),
            (0, 1, 2),
            ("W", "U", "V"),
        )
    if workload == "huber":
        n = size.get("n", 10_000)
        rng = np.random.default_rng(2)
        x = rng.uniform(-3.0, 3.0, size=n)
        y = 2.0 * x - 1.0 + rng.normal(scale=0.3, size=n)
        outliers = rng.random(n) < 0.05
        y[outliers] += rng.normal(scale=10.0, size=int(outliers.sum()))
        return Problem(
            f"huber line fit, L-BFGS-B, {n:,} points",
            workload,
            loss,
            hand,
            (np.zeros(2), x, y),
            (0,),
            ("theta",),
            lbfgs=True,
        )
    raise ValueError(f"unknown workload {workload!r}")


MLP_CROSS = [(32, 128), (512, 128), (128, 32), (128, 512)]
MLP_GRID = [(b, h) for b in (32, 128, 512) for h in (32, 128, 512) if (b, h) != (128, 128)]
WORKLOADS = ("mlp", "mlp-grid", "moons", "logistic", "rnn", "huber")


def plan(workloads: Sequence[str], grid: bool) -> list[tuple[str, dict]]:
    """The (workload, size) cells to run, in order."""
    cells: list[tuple[str, dict]] = []
    for w in workloads:
        if w == "mlp-grid":
            cells += [
                ("mlp", {"batch": b, "hidden": h}) for b, h in (MLP_GRID if grid else MLP_CROSS)
            ]
        else:
            cells.append((w, {}))
    return cells


# ---------------------------------------------------------------- one system, in this process


def rel_err(got: Any, ref: Any) -> float:
    """Largest difference over the largest reference magnitude (inf-norms), 0 when equal."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return float("inf")
    diff = float(np.max(np.abs(got - ref))) if got.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return diff / scale if scale > 0 else diff


def check(value: float, grads: Sequence[Any], ref: tuple[float, Sequence[Any]]) -> float:
    """The largest relative error of ``value`` and each of ``grads`` against ``ref``."""
    ref_value, ref_grads = ref
    if len(grads) != len(ref_grads):
        return float("inf")
    errs = [rel_err(value, ref_value)] + [rel_err(g, r) for g, r in zip(grads, ref_grads)]
    return max(errs)


def make_step(system: str, prob: Problem) -> tuple[Callable[[], tuple[float, tuple]], dict]:
    """A call computing (value, gradients as NumPy arrays) with ``system``, and facts
    about it; building it (imports, conversions) is not part of the first call."""
    facts: dict[str, Any] = {}
    args, argnums = prob.args, prob.argnums
    if system == "numpy":

        def step() -> tuple[float, tuple]:
            v, g = prob.hand(*args)
            return float(v), tuple(g)

        return step, facts
    if system == "adcompile":
        import adcompile as ad

        state: dict[str, Any] = {}

        def step() -> tuple[float, tuple]:
            vg = state.get("vg")
            if vg is None:  # the first call makes it: its cost is the first call's
                vg = state["vg"] = ad.value_and_grad(prob.loss, argnums=argnums)
                facts["vg"] = vg
            v, g = vg(*args)
            return float(v), tuple(g)

        return step, facts
    if system == "torch":
        import torch

        torch.set_num_threads(1)
        f = _torch_losses()[prob.workload]
        ts = [torch.from_numpy(np.array(a, dtype=np.float64)) for a in args]
        params = [ts[i].requires_grad_(True) for i in argnums]

        def step() -> tuple[float, tuple]:
            loss = f(*ts)
            grads = torch.autograd.grad(loss, params)
            return loss.item(), tuple(g.numpy() for g in grads)

        return step, facts
    if system == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
        fn = jax.jit(jax.value_and_grad(_jax_version(prob.loss), argnums=argnums))
        jargs = [jax.device_put(a) for a in args]

        def step() -> tuple[float, tuple]:
            v, g = fn(*jargs)
            jax.block_until_ready(g)
            return float(v), tuple(np.asarray(x) for x in g)

        return step, facts
    raise ValueError(f"unknown system {system!r}")


def _lbfgs_fun(system: str, prob: Problem) -> tuple[Callable, dict]:
    """``fun(theta) -> (value, gradient)`` for scipy, made the way a user of ``system``
    would; its first call is the system's first call."""
    data = prob.args[1:]
    facts: dict[str, Any] = {}
    if system == "numpy":
        return lambda th: (lambda v, g: (v, g[0]))(*prob.hand(th, *data)), facts
    if system == "adcompile":
        import adcompile as ad

        vg = ad.value_and_grad(prob.loss)
        facts["vg"] = vg
        return lambda th: vg(th, *data), facts
    if system == "torch":
        import torch

        torch.set_num_threads(1)
        f = _torch_losses()["huber"]
        tdata = [torch.from_numpy(a) for a in data]

        def fun(th: np.ndarray) -> tuple[float, np.ndarray]:
            t = torch.tensor(th, dtype=torch.float64, requires_grad=True)
            loss = f(t, *tdata)
            (g,) = torch.autograd.grad(loss, [t])
            return loss.item(), g.numpy()

        return fun, facts
    if system == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
        fn = jax.jit(jax.value_and_grad(_jax_version(prob.loss)))
        jdata = [jax.device_put(a) for a in data]

        def fun(th: np.ndarray) -> tuple[float, np.ndarray]:
            v, g = fn(th, *jdata)
            return float(v), np.asarray(g)

        return fun, facts
    raise ValueError(f"unknown system {system!r}")


def _maxrss_mib() -> float:
    """This process's peak resident memory so far, MiB: VmHWM (that of its own address
    space; getrusage's ru_maxrss starts from the parent's peak, which fork hands down)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _steady(step: Callable[[], Any], budget: float, min_steps: int) -> dict[str, Any]:
    """The median seconds of ``step`` over about ``budget`` seconds (at least ``min_steps``),
    and the minor page faults per step (memory the allocator took from the system anew)."""
    for _ in range(2):  # warm
        step()
    times: list[float] = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    while len(times) < min_steps or (time.perf_counter() - start < budget and len(times) < 5000):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {
        "step_s": statistics.median(times),
        "steps": len(times),
        "faults_per_step": faults / len(times),
    }


def _loops_ready(step: Callable[[], Any], facts: dict, rec: dict) -> None:
    """For adcompile: the calls after which array code's loop nests are made (in the
    background), and the wait for them, so that the steps timed are of what runs
    from then on (``loops_ready_s``: how long that took)."""
    if "vg" not in facts:
        return
    from adcompile.backend import arrays as array_code

    clock = time.perf_counter()
    for _ in range(array_code.HOT_CALLS):
        step()
    facts["vg"].wait_for_entries()
    rec["loops_ready_s"] = time.perf_counter() - clock


def _adcompile_facts(vg: Any) -> dict[str, Any]:
    events = getattr(vg, "events", [])
    produced = events[-1].produced if events else ""
    kind = getattr(events[-1].facts, "kind", None) if events and events[-1].facts else None
    programs = [s.compiled for group in vg.specialisations.values() for s in group]
    versions = [p.loops if hasattr(p, "loops") else getattr(p.generic, "loops", None)
                for p in programs if hasattr(p, "loops") or hasattr(p, "generic")]
    outcomes = [getattr(v, "outcome", None) for v in versions]
    return {
        "runs": next((o for o in outcomes if o), None) or "NumPy code (no loop nests)",
        "array_level": kind == "arrays" or "array code" in produced,
        "array_refused": getattr(vg, "array_refused", None),
        "produced": produced,
        "traces": getattr(vg, "traces", None),
    }


def measure(
    system: str,
    workload: str,
    size: dict,
    budget: float,
    min_steps: int,
    grads_out: str | None = None,
) -> dict[str, Any]:
    """One system on one workload in this process: first call, median step, memory;
    the value and gradients go to ``grads_out`` (an .npz) for the parent to check."""
    t0 = time.perf_counter()
    prob = build(workload, **size)
    rec: dict[str, Any] = {"system": system, "workload": workload, "size": size}
    if prob.lbfgs:
        from scipy.optimize import minimize

        fun, facts = _lbfgs_fun(system, prob)
        rec["setup_s"] = time.perf_counter() - t0
        rss0 = _maxrss_mib()
        t1 = time.perf_counter()
        res = minimize(fun, prob.args[0], jac=True, method="L-BFGS-B")
        rec["total_s"] = time.perf_counter() - t1  # cold: the first call is in it
        t1 = time.perf_counter()
        res2 = minimize(fun, prob.args[0], jac=True, method="L-BFGS-B")
        rec["total_warm_s"] = time.perf_counter() - t1
        rec.update(
            nfev=int(res.nfev),
            nit=int(res.nit),
            final_loss=float(res.fun),
            same_again=bool(np.array_equal(res.x, res2.x)),
        )
        value, grad = fun(prob.args[0])
        value, grads, x_final = float(value), (np.asarray(grad),), np.asarray(res.x)
        step = lambda: fun(prob.args[0])  # noqa: E731
        _loops_ready(step, facts, rec)
        rec.update(_steady(step, budget, min_steps))
    else:
        step, facts = make_step(system, prob)
        rec["setup_s"] = time.perf_counter() - t0
        rss0 = _maxrss_mib()
        t1 = time.perf_counter()
        value, grads = step()
        rec["first_call_s"] = time.perf_counter() - t1
        _loops_ready(step, facts, rec)
        rec.update(_steady(step, budget, min_steps))
        x_final = None
        if system == "adcompile":  # the answer of a steady-state call, too
            v2, g2 = step()
            rec["steady_vs_first"] = check(v2, g2, (value, grads))
    rec["rss_peak_mib"] = _maxrss_mib()
    rec["rss_rise_mib"] = rec["rss_peak_mib"] - rss0
    if "vg" in facts:
        rec.update(_adcompile_facts(facts["vg"]))
    if grads_out:
        arrays = {f"g{k}": np.asarray(g, dtype=np.float64) for k, g in enumerate(grads)}
        if x_final is not None:
            arrays["x_final"] = x_final
        np.savez(grads_out, value=np.float64(value), **arrays)
    return rec


# ---------------------------------------------------------------- the parent


def available(system: str) -> str | None:
    """None when ``system`` can run here, else why not."""
    mod = {"torch": "torch", "jax": "jax"}.get(system)
    if mod is not None and importlib.util.find_spec(mod) is None:
        return f"{mod} is not installed"
    return None


def one_cpu() -> None:
    """Run this process on one CPU (before torch or jax is imported). XLA's CPU
    runtime ignores ``--xla_cpu_multi_thread_eigen=false`` and ran its matmuls on
    both cores of the 2-core machine (312 us of CPU in 183 us of wall time for a
    128x784 @ 784x128 product); one CPU in the affinity mask makes every system
    single-threaded."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def child_env(cache: str) -> dict[str, str]:
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = "1"
    flags = env.get("XLA_FLAGS", "")
    if "multi_thread_eigen" not in flags:
        env["XLA_FLAGS"] = (
            flags + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        ).strip()
    env["ADCOMPILE_CACHE_DIR"] = cache
    env["ADCOMPILE_QUIET"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def run_cell(
    system: str, workload: str, size: dict, budget: float, min_steps: int, timeout: float
) -> dict[str, Any]:
    """``measure`` in a fresh process with an empty adcompile cache; its record, with
    ``value`` and ``grads`` (and ``x_final``) read back."""
    rec: dict[str, Any] = {"system": system, "workload": workload, "size": size}
    why = available(system)
    if why is not None:
        return {**rec, "status": "skipped", "reason": why}
    with tempfile.TemporaryDirectory(prefix="adcompile-arrays-bench-") as tmp:
        out = os.path.join(tmp, "answer.npz")
        cache = os.path.join(tmp, "cache")
        os.mkdir(cache)
        spec = json.dumps([system, workload, size, budget, min_steps, out])
        cmd = [sys.executable, "-m", "benchmarks.arrays", "--child", spec]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd,
                cwd=ROOT,
                env=child_env(cache),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {**rec, "status": "failed", "reason": f"timed out after {timeout:.0f} s"}
        wall = time.perf_counter() - t0
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)]
        if proc.returncode or not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return {**rec, "status": "failed", "reason": f"exit {proc.returncode}: {tail}"}
        rec = json.loads(lines[-1][len(MARKER) :])
        rec["status"], rec["wall_s"] = "ok", wall
        with np.load(out) as z:
            rec["value"] = float(z["value"])
            rec["grads"] = [z[f"g{k}"] for k in range(len(z.files)) if f"g{k}" in z.files]
            if "x_final" in z.files:
                rec["x_final"] = z["x_final"]
    return rec


def compare(records: list[dict], ref: tuple[float, tuple]) -> list[str]:
    """Check each record's answer against the hand gradient ``ref`` (and L-BFGS-B's
    minimum against the NumPy run's); the failures, in words."""
    failures = []
    numpy_rec = next((r for r in records if r["system"] == "numpy" and r["status"] == "ok"), None)
    for r in records:
        if r["status"] != "ok":
            continue
        r["rel_err"] = check(r["value"], r["grads"], ref)
        if not r["rel_err"] <= RTOL:
            failures.append(
                f"{r['system']} on {r['name']}: value/gradient off the hand NumPy gradient by "
                f"{r['rel_err']:.2e} (more than {RTOL:g})"
            )
        if r.get("steady_vs_first", 0.0) > RTOL:
            failures.append(
                f"{r['system']} on {r['name']}: a later call's answer differs from "
                f"the first call's by {r['steady_vs_first']:.2e}"
            )
        if "x_final" in r and numpy_rec is not None and "x_final" in numpy_rec:
            r["x_err"] = rel_err(r["x_final"], numpy_rec["x_final"])
            if not r["x_err"] <= RTOL_MINIMUM:
                failures.append(
                    f"{r['system']} on {r['name']}: L-BFGS-B's minimum {r['x_final']} is off the "
                    f"NumPy run's {numpy_rec['x_final']} by {r['x_err']:.2e}"
                )
    return failures


def _t(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _path(r: dict) -> str:
    if r["system"] != "adcompile":
        return ""
    if r.get("array_level"):
        runs = r.get("runs") or ""
        return "array level" + (", " + runs.split(" (")[0] if runs else "")
    why = r.get("array_refused")
    what = r.get("produced", "")
    return f"NOT array level ({'refused: ' + why if why else what})"


def table(records: list[dict]) -> str:
    """The records of one workload as a Markdown table."""
    lbfgs = any("total_s" in r for r in records)
    if lbfgs:
        head = (
            "| system | minimize, cold | minimize, again | nfev/nit | one f+g, median | "
            "page faults/f+g | peak RSS (rise) | grad err | minimum err | adcompile |"
        )
    else:
        head = (
            "| system | first call, cold | step, median | page faults/step | peak RSS (rise) "
            "| grad err | adcompile |"
        )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records:
        if r["status"] != "ok":
            cols = head.count("|") - 2
            lines.append(f"| {r['system']} | {r['status']}: {r['reason']} |" + " |" * (cols - 1))
            continue
        mem = f"{r['rss_peak_mib']:.0f} MiB ({r['rss_rise_mib']:+.0f})"
        err = r.get("rel_err", float("nan"))
        flag = "" if err <= RTOL else " **FAILED**"
        note = _path(r)
        if r.get("traces") is not None:
            note += f", traces {r['traces']}"
        if lbfgs:
            xerr = r.get("x_err")
            xs = (
                "-"
                if xerr is None
                else f"{xerr:.1e}" + ("" if xerr <= RTOL_MINIMUM else " **FAILED**")
            )
            lines.append(
                f"| {r['system']} | {_t(r['total_s'])} | {_t(r['total_warm_s'])} | "
                f"{r['nfev']}/{r['nit']} | {_t(r['step_s'])} | {r['faults_per_step']:.0f} | "
                f"{mem} | {err:.1e}{flag} | {xs} "
                f"| {note} |"
            )
        else:
            lines.append(
                f"| {r['system']} | {_t(r['first_call_s'])} | {_t(r['step_s'])} | "
                f"{r['faults_per_step']:.0f} | {mem} | "
                f"{err:.1e}{flag} | {note} |"
            )
    return "\n".join(lines)


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        with open("/proc/loadavg") as f:
            return "load " + f.read().strip()


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("adcompile", "torch", "jax", "scipy"):
        if importlib.util.find_spec(mod) is not None:
            try:
                from importlib.metadata import version

                out[mod] = version(mod)
            except Exception:  # noqa: BLE001 - a version is only shown
                out[mod] = "?"
    return out


_KERNELS = """
import json, numpy
try:
    import scipy.linalg
except ImportError:
    pass
try:
    import threadpoolctl
except ImportError:
    print(json.dumps(None))
else:
    print(json.dumps(sorted({(i.get("prefix", "?"), i.get("architecture", "?"))
                             for i in threadpoolctl.threadpool_info()
                             if i.get("user_api") == "blas"})))
"""


def blas_kernels() -> str:
    """Which kernels the cells' BLAS libraries took (NumPy's, and SciPy's, which
    Numba's ``np.dot`` calls), as threadpoolctl reports them in a fresh process."""
    try:
        run = subprocess.run(
            [sys.executable, "-c", _KERNELS], capture_output=True, text=True, timeout=60,
            env=child_env(tempfile.gettempdir()),
        )
        found = json.loads(run.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return "unknown"
    if found is None:
        return "unknown (threadpoolctl is not installed)"
    text = ", ".join(f"{prefix} {arch}" for prefix, arch in found)
    forced = {v: os.environ[v] for v in BLAS_VARS if v in os.environ}
    if forced:
        text += (
            f", as {' and '.join(f'{k}={v}' for k, v in forced.items())} in the environment "
            "say (unset both for the kernels OpenBLAS itself picks for this CPU)"
        )
    return text


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the workloads asked for; print their tables (or JSON). Exit status 1 when a
    system's gradient disagrees with the hand-written one (``prog``: the usage's name)."""
    ap = parser(prog, "python -m benchmarks.arrays", __doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="no mlp size grid, short timings (under a minute)"
    )
    ap.add_argument(
        "workloads",
        nargs="*",
        metavar="WORKLOAD",
        help=f"of {', '.join(WORKLOADS)} (default: all)",
    )
    ap.add_argument(
        "--cross",
        action="store_true",
        help="mlp-grid: only batch 32, 512 at width 128 and width 32, 512 at batch 128",
    )
    ap.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, of {','.join(SYSTEMS)} (default: all)",
    )
    ap.add_argument("--budget", type=float, help="seconds of steady-state steps per cell")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per cell")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.child:
        system, workload, size, budget, min_steps, out = json.loads(opts.child)
        one_cpu()
        rec = measure(system, workload, size, budget, min_steps, out)
        print(MARKER + json.dumps(rec), flush=True)
        return 0
    unknown = [w for w in opts.workloads if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload {unknown[0]!r}; choose from {', '.join(WORKLOADS)}")
    systems = [s.strip() for s in opts.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown system {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    if "numpy" not in systems:
        systems.insert(0, "numpy")  # the reference every answer is checked against
    mode = QUICK if opts.quick else FULL
    budget = opts.budget if opts.budget is not None else mode["budget"]
    workloads = opts.workloads or [w for w in WORKLOADS if not (opts.quick and w == "mlp-grid")]
    cells = plan(workloads, grid=not (opts.cross or opts.quick))

    meta = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "uptime": _uptime(),
        "cpus": os.cpu_count(),
        "threads": "OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=NUMBA_NUM_THREADS=1, "
        "torch.set_num_threads(1), each cell pinned to one CPU",
        "python_executable": sys.executable,
        "versions": _versions(),
        "blas": blas_kernels(),
        "quick": opts.quick,
        "budget_s": budget,
        "rtol": RTOL,
    }
    if not opts.json:
        print(f"# adcompile array-level benchmark, {meta['date']}")
        print(f"uptime: {meta['uptime']}")
        print(f"threads: {meta['threads']}; {meta['cpus']} CPUs")
        print("versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
        print(f"BLAS kernels: {meta['blas']}")
        print(
            f"each cell a fresh process (adcompile: a new empty ADCOMPILE_CACHE_DIR); "
            f"steps timed for {budget:g} s, median; checked to rtol {RTOL:g} against the "
            "hand-written NumPy gradient",
            flush=True,
        )
    all_records: list[dict] = []
    failures: list[str] = []
    t_start = time.perf_counter()
    for workload, size in cells:
        prob = build(workload, **size)
        v, g = prob.hand(*prob.args)
        ref = (float(v), tuple(g))
        records = []
        for system in systems:
            r = run_cell(system, workload, size, budget, mode["min_steps"], opts.timeout)
            r["name"] = prob.name
            records.append(r)
        failures += compare(records, ref)
        failures += [
            f"{r['system']} on {prob.name}: {r['reason']}"
            for r in records
            if r["status"] == "failed"
        ]
        all_records += records
        if not opts.json:
            print(f"\n## {prob.name}  (d/d {', '.join(prob.names)})\n", flush=True)
            print(table(records), flush=True)
    elapsed = time.perf_counter() - t_start
    if opts.json:
        out = [
            {k: v for k, v in r.items() if k not in ("grads", "x_final", "value")}
            | ({"x_final": list(map(float, r["x_final"]))} if "x_final" in r else {})
            for r in all_records
        ]
        print(
            json.dumps(
                {"meta": meta | {"elapsed_s": elapsed}, "results": out, "failures": failures},
                indent=1,
                default=str,
            )
        )
    else:
        print(f"\n{len(cells)} workloads x {len(systems)} systems in {elapsed:.0f} s")
        skipped = sorted(
            {f"{r['system']} ({r['reason']})" for r in all_records if r["status"] == "skipped"}
        )
        if skipped:
            print("skipped: " + ", ".join(skipped))
    if failures:
        bar = "!" * 78
        print(
            f"\n{bar}\nCHECK FAILED: {len(failures)} wrong answer(s) or failure(s)",
            file=sys.stderr,
        )
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        print(bar, file=sys.stderr)
        return 1
    if not opts.json:
        print("every answer agrees with the hand-written NumPy gradient")
    return 0


if __name__ == "__main__":
    sys.exit(main())
