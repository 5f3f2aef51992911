"""First calls as a new user meets them: a fresh process, an empty cache, gradient checked.

Run from the repository root::

    python -m benchmarks.first_call            # every case, a few minutes on 2 cores
    python -m benchmarks.first_call --case chain
    adcompile bench first-call --case chain    # the same

Each case runs ``ad.value_and_grad`` in a fresh Python process with an empty
adcompile cache (cold), then again in a second fresh process on the same
cache (warm), and checks the answer against the hand-derived references of
``benchmarks/workloads.py`` (or NumPy formulas). Cases are the workloads of
issue 16, written the ways a user writes them: Rosenbrock as a ``sum`` over
a generator, as a ``for`` loop and in NumPy style; the chain; a logistic
regression loss and the 2-16-16-1 MLP in NumPy style; the MLP with Python
lists and a loop over rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from .cli import parser

CASES = {
    "rosenbrock-sum": 10_000,
    "rosenbrock-loop": 10_000,
    "rosenbrock-numpy": 10_000,
    "chain": 100_000,
    "logistic-numpy": 10_000,
    "mlp-lists": 1000,
    "mlp-numpy": 1000,
}


def _case(name: str, n: int) -> tuple[Any, tuple, Any]:
    """(function, arguments, check(value, grad) -> relative error)."""
    import adcompile as ad

    from . import workloads as W

    def rel(got: Any, ref: Any) -> float:
        return W.rel_err(got, ref)

    if name.startswith("rosenbrock"):
        x = W.rosenbrock_input(n)
        ref = W.rosenbrock_reference(x)
        if name == "rosenbrock-sum":

            def f(x):
                return sum(
                    100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
                    for i in range(len(x) - 1)
                )
        elif name == "rosenbrock-loop":
            f = W.rosenbrock_scalar
        else:

            def f(x):
                return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

        return f, (x,), lambda v, g: max(rel(v, ref.value), rel(g, ref.grad))
    if name == "chain":
        ref = W.chain_reference(n)
        return (
            lambda x: W.chain_scalar(x, n, ad.sin),
            (W.CHAIN_X0,),
            lambda v, g: max(rel(v, ref.value), rel(g, ref.grad)),
        )
    if name == "logistic-numpy":
        rng = np.random.default_rng(0)
        X, y = rng.normal(size=(n, 3)), np.sign(rng.normal(size=n))
        w = np.array([0.1, -0.2, 0.3])

        def f(w, X, y):
            return np.mean(np.log1p(np.exp(-y * (X @ w))))

        m = -y * (X @ w)
        value = np.mean(np.log1p(np.exp(m)))
        grad = (X * (-y / (1 + np.exp(-m)))[:, None]).mean(axis=0)
        return f, (w, X, y), lambda v, g: max(rel(v, value), rel(g, grad))
    X, y = W.two_moons(n)
    params = W.mlp_init()
    ref = W.mlp_reference(params, X, y)
    theta = W.mlp_flatten(params)
    if name == "mlp-lists":

        def f(theta, X, y):
            return W.mlp_loss_scalar(W.mlp_unflatten(theta), X, y, ad.relu)
    else:
        shapes = [p.shape for p in params]
        cuts = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]

        def f(theta, X, y):
            W1, b1, W2, b2, W3, b3 = (p.reshape(s) for p, s in zip(np.split(theta, cuts), shapes))
            h1 = np.maximum(X @ W1.T + b1, 0)
            h2 = np.maximum(h1 @ W2.T + b2, 0)
            s = (h2 @ W3.T + b3)[:, 0]
            return np.mean(np.maximum(1 - y * s, 0)) + W.MLP_WEIGHT_DECAY * np.sum(theta * theta)

    return f, (theta, X, y), lambda v, g: max(rel(v, ref.value), rel(g, ref.grad))


def child(name: str, n: int) -> dict[str, Any]:
    """One first call in this process: seconds, and the relative error."""
    t0 = time.perf_counter()
    import adcompile as ad

    f, args, check = _case(name, n)
    start = time.perf_counter()
    vg = ad.value_and_grad(f)
    value, grad = vg(*args)
    first = time.perf_counter() - start
    # ("trace", "trace and detect", "trace at four lengths": array code in the batch length)
    trace = sum(t for e in vg.events for k, t in e.stages.items() if k.startswith("trace"))
    return {
        "import_s": start - t0,
        "first_call_s": first,
        "trace_s": trace,
        "rel_err": check(value, grad),
    }


def spawn(name: str, n: int, cache: str) -> dict[str, Any]:
    env = dict(os.environ, ADCOMPILE_CACHE_DIR=cache, ADCOMPILE_QUIET="1")
    cmd = [sys.executable, "-m", "benchmarks.first_call", "--child", json.dumps([name, n])]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=root)
    if res.returncode:
        return {"error": (res.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Run the cases asked for and print their table (``prog``: the name in the usage)."""
    ap = parser(prog, "python -m benchmarks.first_call", __doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), action="append", help="(default: all)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.child:
        print(json.dumps(child(*json.loads(opts.child))))
        return
    print(
        "| case | n | cold first call s | warm first call s | of which tracing s | "
        "warm minus tracing s | import s | rel err |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in opts.case or CASES:
        n = CASES[name]
        with tempfile.TemporaryDirectory() as cache:
            cold, warm = spawn(name, n, cache), spawn(name, n, cache)
        if "error" in cold or "error" in warm:
            print(
                f"| {name} | {n:,} | {cold.get('error', '')} | {warm.get('error', '')} | | | | |"
            )
            continue
        print(
            f"| {name} | {n:,} | {cold['first_call_s']:.2f} | {warm['first_call_s']:.2f} | "
            f"{warm['trace_s']:.2f} | {warm['first_call_s'] - warm['trace_s']:.2f} | "
            f"{cold['import_s']:.2f} | {max(cold['rel_err'], warm['rel_err']):.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
