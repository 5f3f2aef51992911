"""Exported C against adcompile's own compiled code, side by side: the Rosenbrock
function's value and gradient at n = 1,000 (``ad.export(..., target="c")``,
compiled by the system's C compiler and loaded with ctypes, against
``ad.value_and_grad``'s compiled call), and the line counts of the exported C
and Python.

    python -m benchmarks.export_c [--n 1000] [--cc cc] [--opt -O2] [--budget 1.0]

Prints one line per measure. Each time is the median over repeated batches of
calls (each batch about ``--budget`` / 10 seconds), in microseconds per call;
the answers are checked to agree first (relative 1e-12).
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import adcompile as ad


def rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def per_call(fn, budget: float) -> float:
    """Median seconds per call of ``fn()`` over 10 batches of about budget / 10 s."""
    fn()
    start, k = time.perf_counter(), 0
    while time.perf_counter() - start < budget / 100:
        fn()
        k += 1
    batch = max(1, k * 10)
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - t0) / batch)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--opt", default="-O2")
    ap.add_argument("--budget", type=float, default=1.0)
    args = ap.parse_args(argv)
    cc = shutil.which(args.cc)
    if cc is None:
        print(f"no C compiler {args.cc!r} on PATH")
        return 2
    x = np.random.default_rng(0).random(args.n)
    vg = ad.value_and_grad(rosen)
    value, grad = vg(x)
    c_src = ad.export(rosen, x, target="c")
    py_src = ad.export(rosen, x)
    print(
        f"rosen, n = {args.n}: exported C {len(c_src.splitlines())} lines, "
        f"Python {len(py_src.splitlines())} lines"
    )
    folder = Path(tempfile.mkdtemp())
    nop = "int nop(const double* x, double* out) { (void) x; (void) out; return 0; }\n"
    (folder / "rosen.c").write_text(c_src + "\n" + nop)  # (nop: what ctypes costs)
    t0 = time.perf_counter()
    flags = [args.opt, "-std=c99", "-shared", "-fPIC"]
    cmd = [cc, *flags, "-o", str(folder / "rosen.so"), str(folder / "rosen.c"), "-lm"]
    subprocess.run(cmd, check=True)
    print(f"{args.cc} {args.opt}: {time.perf_counter() - t0:.2f} s to compile")
    lib = ctypes.CDLL(str(folder / "rosen.so"))
    fn, nop_fn = lib.rosen_value_and_grad, lib.nop
    P = ctypes.POINTER(ctypes.c_double)
    for f in (fn, nop_fn):
        f.argtypes, f.restype = [P, P], ctypes.c_int
    out = np.empty(args.n + 1)
    xp, op = x.ctypes.data_as(P), out.ctypes.data_as(P)
    assert fn(xp, op) == 0
    np.testing.assert_allclose(out, [value, *grad], rtol=1e-12, atol=1e-12)
    vg.wait_for_entries()  # (its direct entry, made after 100 calls, in the background)
    for _ in range(200):
        vg(x)
    vg.wait_for_entries()
    nb = vg.numba(x)
    nb_out = np.empty(args.n + 1)
    rows = [
        ("C through ctypes (pointers made once)", lambda: fn(xp, op)),
        ("  an empty C function through ctypes, the same way", lambda: nop_fn(xp, op)),
        ("ad.value_and_grad(rosen)(x)", lambda: vg(x)),
        ("its Numba function, vg.numba(x)(x, out)", lambda: nb(x, nb_out)),
    ]
    for what, call in rows:
        print(f"{what}: {per_call(call, args.budget) * 1e6:.2f} us per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
