"""Data-parallel value and gradient on Dask (issue 20): ``python -m benchmarks.distributed``.

Measures, on local clusters of 1 and 2 worker processes (1 thread each):

- the MLP loss of benchmarks/README.md ``mlp`` (2-16-16-1, hinge loss plus weight
  decay, two moons) at n = 100,000 and 1,000,000: one value-and-gradient
  call of ``adcompile.distributed.value_and_grad`` against single-process
  ``ad.value_and_grad`` (the answers are checked to agree);
- the overhead per call on its own: the same call at n = 1,000 rows, where
  the compiled work is microseconds, so the time is the parameters' trip,
  the scheduling and the reduction;
- multi-start: L-BFGS starts per second on 10-d Rastrigin (as
  ``examples/multistart_dask.py``).

Each figure is the median of ``--repeat`` calls after a warm-up call.
Needs ``pip install "adcompile[distributed]" scipy``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from .cli import parser
from .workloads import MLP_PARAMS, MLP_WEIGHT_DECAY, mlp_flatten, mlp_init, two_moons


def mlp_loss(theta: Any, X: Any, y: Any) -> Any:
    """The ``mlp`` workload's loss of the flat 337 parameters, NumPy style."""
    parts, k = [], 0
    for _, shape in MLP_PARAMS:
        size = int(np.prod(shape))
        parts.append(theta[k : k + size].reshape(shape))
        k += size
    W1, b1, W2, b2, W3, b3 = parts
    h = np.maximum(X @ W1.T + b1, 0.0)
    h = np.maximum(h @ W2.T + b2, 0.0)
    score = (h @ W3.T + b3)[:, 0]
    return np.mean(np.maximum(1.0 - y * score, 0.0)) + MLP_WEIGHT_DECAY * np.sum(theta * theta)


def rastrigin(x: Any) -> Any:
    import adcompile as ad

    return 10.0 * len(x) + np.sum(x * x - 10.0 * ad.cos(2 * np.pi * x))


def lbfgs_batch(starts: np.ndarray) -> float:
    """The best minimum L-BFGS finds from the rows of ``starts`` (on a worker)."""
    from scipy.optimize import minimize

    import adcompile as ad

    vg = ad.value_and_grad(rastrigin)
    bounds = [(-5.12, 5.12)] * starts.shape[1]
    return min(
        float(minimize(vg, x0, jac=True, method="L-BFGS-B", bounds=bounds).fun) for x0 in starts
    )


def median_time(fn: Any, repeat: int) -> float:
    fn()  # warm-up (compiles, sends the data)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the benchmark and print its table (``prog``: the name in the usage)."""
    ap = parser(prog, "python -m benchmarks.distributed", __doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000", help="rows of the MLP loss")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--starts", type=int, default=400, help="multi-start runs per cluster")
    args = ap.parse_args(argv)
    os.environ.setdefault("ADCOMPILE_QUIET", "1")
    from distributed import Client, LocalCluster

    import adcompile as ad
    from adcompile import distributed as dd

    sizes = [int(s) for s in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    theta = mlp_flatten(mlp_init())
    data = {n: two_moons(n) for n in [1000, *sizes]}
    single = ad.value_and_grad(mlp_loss)
    rows: list[tuple[str, str]] = []
    base: dict[int, float] = {}
    for n in sizes:
        X, y = data[n]
        base[n] = median_time(lambda X=X, y=y: single(theta, X, y), args.repeat)
        rows.append((f"single process, n = {n:,}", f"{1e3 * base[n]:.1f} ms"))
    print(*rows[-len(sizes) :], sep="\n", file=sys.stderr)
    rng = np.random.default_rng(0)
    starts = rng.uniform(-5.12, 5.12, size=(args.starts, 10))
    batches = [starts[i : i + 25] for i in range(0, len(starts), 25)]
    for w in workers:
        with (
            LocalCluster(
                n_workers=w, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            vg = dd.value_and_grad(mlp_loss, client=client)
            X, y = data[1000]
            t = median_time(lambda: vg(theta, X, y), max(args.repeat, 20))
            rows.append((f"{w} worker(s): overhead per call (n = 1,000)", f"{1e3 * t:.1f} ms"))
            print(rows[-1], file=sys.stderr)
            for n in sizes:
                X, y = data[n]
                got, want = vg(theta, X, y), single(theta, X, y)
                assert abs(got[0] - want[0]) <= 1e-12 * abs(want[0])
                assert np.allclose(got[1], want[1], rtol=1e-10, atol=1e-14)
                t = median_time(lambda X=X, y=y: vg(theta, X, y), args.repeat)
                rows.append(
                    (
                        f"{w} worker(s), n = {n:,}",
                        f"{1e3 * t:.1f} ms ({base[n] / t:.2f}x single process)",
                    )
                )
                print(rows[-1], file=sys.stderr)
            client.gather(client.map(lbfgs_batch, batches[: 2 * w]))  # warm-up
            t = time.perf_counter()
            best = min(client.gather(client.map(lbfgs_batch, batches)))
            t = time.perf_counter() - t
            rows.append(
                (
                    f"{w} worker(s): multi-start L-BFGS, 10-d Rastrigin",
                    f"{len(starts) / t:.0f} starts/s (best minimum {best:.3f})",
                )
            )
            print(rows[-1], file=sys.stderr)
    print("| measurement | figure |\n|---|---|")
    for what, fig in rows:
        print(f"| {what} | {fig} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
