"""adcompile's eager ``Value`` beside micrograd, in one process, alternating.

    python -m benchmarks.eager_side_by_side [--blocks 4] [mlp rosenbrock chain trace]

On a shared machine the harness's cells (one process each, one after the
other) see different loads; here both engines run the same workload
(``ScalarValueSystem``, as in the harness) in alternating blocks of three
steady-state calls, each block after a ``gc.collect()``, so each engine pays
for its own garbage as it does in a training loop. Medians are printed.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from . import workloads as W
from .cli import parser
from .systems.adcompile_eager import AdcompileEager
from .systems.micrograd_sys import Micrograd


def _medians(calls: dict[str, Callable[[], Any]], blocks: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(blocks):
        for name, call in calls.items():
            gc.collect()
            call()  # warm: the first call of a block pays for the last block's garbage
            for _ in range(3):
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _show(label: str, med: dict[str, float]) -> None:
    base = med.get("micrograd")
    cells = []
    for name, t in med.items():
        ratio = f" ({base / t:.1f}x)" if base and name != "micrograd" else ""
        cells.append(f"{name} {t * 1e3:9.2f} ms{ratio}")
    print(f"{label:24s} " + "   ".join(cells), flush=True)


def _trace_chain(n: int) -> Callable[[], Any]:
    from adcompile.trace.mode import tracing
    from adcompile.trace.value import Value

    def call() -> Any:
        with tracing():
            x = Value(0.3)
            for _ in range(n):
                x = x.sin() + 0.5 * x
        return x

    return call


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Print the side-by-side medians of the workloads asked for (``prog``: the name in
    the usage)."""
    p = parser(prog, "python -m benchmarks.eager_side_by_side", __doc__.splitlines()[0])
    known = ["mlp", "rosenbrock", "chain", "trace"]
    p.add_argument(
        "workloads", nargs="*", default=known, help=f"of {', '.join(known)} (default: all)"
    )
    p.add_argument("--blocks", type=int, default=4, help="blocks of 3 timed calls per engine")
    args = p.parse_args(argv)
    unknown = [w for w in args.workloads if w not in known]
    if unknown:
        p.error(f"unknown workload {unknown[0]!r}; choose from {', '.join(known)}")
    systems = {"micrograd": Micrograd(), "adcompile-eager": AdcompileEager()}
    for s in systems.values():
        s.load()
    for w in args.workloads:
        if w in ("mlp", "rosenbrock"):
            data = W.inputs(w, 100)
            preps = {k: s.prepare(w, data) for k, s in systems.items()}
            _show(f"{w} n=100", _medians({k: p.call for k, p in preps.items()}, args.blocks))
        elif w == "chain":  # micrograd's recursive sort cannot go this deep
            prep = systems["adcompile-eager"].prepare(w, W.inputs(w, 100_000))
            _show("chain n=100,000 (f+b)", _medians({"adcompile-eager": prep.call}, args.blocks))
        elif w == "trace":
            call = _trace_chain(100_000)
            _show("chain n=100,000 traced", _medians({"adcompile-eager": call}, args.blocks))
        else:
            p.error(f"unknown workload {w!r}")


if __name__ == "__main__":
    main()
