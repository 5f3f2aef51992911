"""Gradient of a SymPy expression: ``adcompile.from_sympy`` vs ``sympy.diff`` + ``lambdify``.

On the Rosenbrock function in n symbols, side by side in one run:

- adcompile: ``sympy_value_and_grad(expr, symbols)``, reverse mode on SymPy's
  expression DAG (``from_sympy`` -> tape -> adjoint tape -> Numba);
- SymPy: ``sympy.diff(expr, s)`` for every symbol, then
  ``lambdify(symbols, [expr, *grads], cse=True)``.

Reported: time to build the value-and-gradient function, and time per call.
Builds run with an empty adcompile cache directory (so Numba compiles for real);
the compiled tape interpreter that tapes above 1,000 slots run on is compiled
once per op table, before the timings, and its one-off cost is printed apart.

    python benchmarks/sympy_bridge.py [n ...]     # default: 10 100 1000
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
import timeit

os.environ["ADCOMPILE_CACHE_DIR"] = tempfile.mkdtemp(prefix="adcompile-bench-")

import numpy as np  # noqa: E402
import sympy  # noqa: E402

from adcompile.symbolic.transforms import sympy_value_and_grad  # noqa: E402

jit_module = importlib.import_module("adcompile.backend.jit")  # ad.jit is the transform


def rosenbrock(n: int) -> tuple[sympy.Expr, list[sympy.Symbol]]:
    """sum_i 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2 in symbols x_0 ... x_{n-1}."""
    xs = list(sympy.symbols(f"x_0:{n}"))
    terms = [100 * (xs[i + 1] - xs[i] ** 2) ** 2 + (1 - xs[i]) ** 2 for i in range(n - 1)]
    return sympy.Add(*terms), xs


def per_call(f: object, arg: object) -> float:
    """Best time of one call, in seconds."""
    timer = timeit.Timer(lambda: f(arg))
    number, _ = timer.autorange()
    return min(timer.repeat(5, number)) / number


def main(sizes: list[int]) -> None:
    t0 = time.perf_counter()
    jit_module.interpreter()
    print(f"one-off: compiling the tape interpreter took {time.perf_counter() - t0:.2f} s\n")
    header = (
        f"{'n':>5}  {'build adcompile':>16}  {'build sympy':>12}  "
        f"{'call adcompile':>15}  {'call sympy':>11}  {'max |diff|':>10}"
    )
    print(header)
    rng = np.random.default_rng(0)
    for n in sizes:
        expr, xs = rosenbrock(n)
        point = rng.uniform(-1.0, 1.0, n)

        t0 = time.perf_counter()
        ours = sympy_value_and_grad(expr, xs)
        build_ours = time.perf_counter() - t0

        t0 = time.perf_counter()
        grads = [sympy.diff(expr, s) for s in xs]
        theirs = sympy.lambdify([xs], [expr, *grads], cse=True)
        build_theirs = time.perf_counter() - t0

        value, grad = ours(point)
        ref = theirs(point.tolist())
        err = max(abs(value - ref[0]), float(np.max(np.abs(grad - np.array(ref[1:])))))

        call_ours = per_call(ours, point)
        call_theirs = per_call(theirs, point.tolist())
        print(
            f"{n:>5}  {build_ours:>14.3f} s  {build_theirs:>10.3f} s  "
            f"{call_ours * 1e6:>12.1f} us  {call_theirs * 1e6:>8.1f} us  {err:>10.2e}"
            f"   ({ours.compiled.facts.kind}, {len(ours.grad_tape)} slots)"
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 1000])
