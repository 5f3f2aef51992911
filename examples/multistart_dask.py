"""Many local optimisations on Dask: SciPy's L-BFGS from many starts of Rastrigin.

Rastrigin's function in 10 dimensions has about 10^10 local minima and its
global minimum 0 at the origin. Each Dask task takes a batch of starting
points and runs ``scipy.optimize.minimize(..., jac=True, method="L-BFGS-B")``
from each, with the value and gradient compiled by adcompile (once per task;
the code itself comes from the worker's on-disk cache after the first).

    python examples/multistart_dask.py                      # 1000 starts, 2 workers
    python examples/multistart_dask.py --starts 40 --workers 1 --per-task 10

Needs ``pip install "adcompile[distributed]" scipy``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def rastrigin(x):
    """10 n + sum(x_i^2 - 10 cos(2 pi x_i)); minimum 0 at x = 0."""
    import adcompile as ad

    return 10.0 * len(x) + np.sum(x * x - 10.0 * ad.cos(2 * np.pi * x))


def run_batch(starts: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """L-BFGS from each row of ``starts``: (minimum found, where), on a worker."""
    from scipy.optimize import minimize

    import adcompile as ad

    vg = ad.value_and_grad(rastrigin)
    bounds = [(-5.12, 5.12)] * starts.shape[1]
    out = []
    for x0 in starts:
        res = minimize(vg, x0, jac=True, method="L-BFGS-B", bounds=bounds)
        out.append((float(res.fun), res.x))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=1000, help="starting points (1000)")
    parser.add_argument("--dim", type=int, default=10, help="dimensions (10)")
    parser.add_argument("--per-task", type=int, default=50, help="starts per Dask task (50)")
    parser.add_argument("--workers", type=int, default=2, help="local worker processes (2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    rng = np.random.default_rng(args.seed)
    starts = rng.uniform(-5.12, 5.12, size=(args.starts, args.dim))
    batches = [starts[i : i + args.per_task] for i in range(0, args.starts, args.per_task)]
    with (
        LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        print(f"Dask dashboard: {client.dashboard_link}")
        start = time.perf_counter()
        results = [r for part in client.gather(client.map(run_batch, batches)) for r in part]
        seconds = time.perf_counter() - start
    best, where = min(results, key=lambda r: r[0])
    found = sorted(r[0] for r in results)
    print(
        f"{args.starts} L-BFGS runs in {len(batches)} tasks on {args.workers} workers: "
        f"{seconds:.1f} s, {args.starts / seconds:.0f} starts/s"
    )
    print(f"median minimum found {np.median(found):.4f}, worst {found[-1]:.4f}")
    print(f"best minimum {best:.6f} at x = {np.array2string(where, precision=6, separator=', ')}")


if __name__ == "__main__":
    main()
