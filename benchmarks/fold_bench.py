"""Folded loops against hand-written Numba, and the tape interpreter against straight-line code.

Run from the repository root::

    python -m benchmarks.fold_bench            # everything, about five minutes on 2 cores
    python -m benchmarks.fold_bench --quick    # the small sizes only

Every measurement runs in a fresh Python process with an empty adcompile
cache, so a first call is a cold start: trace, gradient tape, fold, generate,
compile (Numba, no disk cache), run. The hand-written Numba gradients (the
same kernels as ``benchmarks/systems/numba_sys.py``) get their own fresh
process for their first call (which includes their compilation). Per call is
a median over repeated calls, the folded code and the hand-written kernel
timed in alternating rounds in one process, so that their ratio does not
depend on how loaded the machine was at two different moments. Every answer is checked against the
hand-derived references of ``benchmarks/workloads.py`` (relative error < 1e-8).

Cases (benchmarks/README.md): rosenbrock n = 1000, 10000 written as a Python loop
(``workloads.rosenbrock_scalar``) and as NumPy on the object array; chain
n = 100,000; compile scaling N = 100 .. 100,000 (random tapes, which do not
fold): trace and gradient-tape time, the fold scan, and nanoseconds per
operation on the compiled tape interpreter and on straight-line code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

FIRST_CALL = (("rosenbrock-loop", 1000), ("rosenbrock-numpy", 1000))
LARGE = (("rosenbrock-loop", 10000), ("rosenbrock-numpy", 10000), ("chain", 100000))
SCALING = (100, 1000, 10000, 100000)
STRAIGHT_LINE_MAX = 1000  # straight-line code for N = 10,000 would compile for minutes


def per_call(fn: Callable[[], Any], budget: float = 0.5) -> float:
    """Median seconds per call (at least 20 calls, about ``budget`` seconds)."""
    fn()
    times: list[float] = []
    end = time.perf_counter() + budget
    while len(times) < 20 or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def rosenbrock_numpy(x: Any) -> Any:
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


# ---------------------------------------------------------------- child processes


def child_adcompile(case: str, n: int) -> dict[str, Any]:
    """First call, stage by stage, then per call, of the folded value and gradient."""
    t0 = time.perf_counter()
    from importlib import import_module

    import adcompile as ad
    from adcompile.diff.reverse import grad_tape
    from adcompile.ir.tape import Param

    from . import workloads as W

    compile_tape = import_module("adcompile.backend.compiled").compile_tape
    rec: dict[str, Any] = {"import_s": time.perf_counter() - t0}
    if case == "chain":
        arg: Any = W.CHAIN_X0
        f = lambda x: W.chain_scalar(x, n, ad.sin)  # noqa: E731
        params, ref = [Param("x", None)], W.chain_reference(n)
    else:
        arg = W.rosenbrock_input(n)
        f = W.rosenbrock_scalar if case == "rosenbrock-loop" else rosenbrock_numpy
        params, ref = [Param("x", n)], W.rosenbrock_reference(arg)
    start = time.perf_counter()
    tape = ad.trace(f, arg)
    rec["trace_s"] = time.perf_counter() - start
    t1 = time.perf_counter()
    gtape = grad_tape(tape)
    rec["grad_tape_s"] = time.perf_counter() - t1
    ff = compile_tape(gtape, params, "f_value_and_grad", force="folded")
    t = ff.timings  # (the loop pipeline's stages: detect, build, reverse, generate, compile)
    rec["find_s"] = t.get("detect", 0.0) + t.get("build", 0.0)
    rec["generate_s"] = t.get("reverse", 0.0) + t.get("generate", 0.0)
    rec["compile_s"] = t.get("compile", 0.0)
    t2 = time.perf_counter()
    ok, out = ff.call(arg)
    rec["run_s"] = time.perf_counter() - t2
    rec["first_call_s"] = time.perf_counter() - start
    hand, _ = hand_kernel(case, n)
    rec["per_call_s"], rec["hand_per_call_s"] = side_by_side(lambda: ff.call(arg), hand)
    rec["ok"] = bool(ok)
    rec["rel_err"] = max(W.rel_err(out[0], ref.value), W.rel_err(out[1:], ref.grad))
    rec["slots"] = len(gtape)
    rec["segments"] = [
        f"{it.size} x {it.trips}" for it in ff.program.items if type(it).__name__ == "Loop"
    ]
    rec["statements"] = ff.facts.statements
    rec["source_lines"] = ff.source.count("\n")
    # the same gradient tape on the compiled tape interpreter (today's path for big tapes)
    interp = compile_tape(gtape, params, "f_interp", force="interpreter")
    rec["interpreter_per_call_s"] = per_call(lambda: interp.call(arg))
    return rec


def hand_kernel(case: str, n: int) -> tuple[Callable[[], Any], Any]:
    """The hand-written Numba gradient (compiled on first call): ``(call, reference)``.

    The same kernels as the ``numba`` system of ``adcompile bench``.
    """
    from . import workloads as W
    from .systems.numba_sys import build_kernels

    kernels = build_kernels()
    if case == "chain":
        chain = kernels["chain"]
        return (lambda: chain(W.CHAIN_X0, n)), W.chain_reference(n)

    rosenbrock = kernels["rosenbrock"]
    x = W.rosenbrock_input(n)

    def call() -> Any:
        g = np.empty(n)  # as a gradient function must: a fresh array per call
        return rosenbrock(x, g), g

    return call, W.rosenbrock_reference(x)


def child_hand(case: str, n: int) -> dict[str, Any]:
    """The hand-written Numba gradient's first call, with its compilation."""
    from . import workloads as W

    start = time.perf_counter()
    call, ref = hand_kernel(case, n)
    value, grad = call()
    return {
        "first_call_s": time.perf_counter() - start,
        "rel_err": max(W.rel_err(value, ref.value), W.rel_err(grad, ref.grad)),
    }


def side_by_side(a: Callable[[], Any], b: Callable[[], Any], rounds: int = 7) -> tuple:
    """Median per-call seconds of a and of b, timed in alternating short rounds."""
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(per_call(a, 0.08))
        tb.append(per_call(b, 0.08))
    return float(np.median(ta)), float(np.median(tb))


def child_scaling(n_ops: int) -> dict[str, Any]:
    """A random tape that does not fold: fold scan, interpreter and straight-line per op."""
    from importlib import import_module

    import adcompile as ad
    from adcompile.diff.reverse import grad_tape
    from adcompile.ir.tape import Param
    from adcompile.loops.segments import find_segments

    from . import workloads as W

    compile_tape = import_module("adcompile.backend.compiled").compile_tape
    prog = W.compile_program(n_ops)
    ref = W.compile_reference(prog)
    rec: dict[str, Any] = {}
    t0 = time.perf_counter()
    tape = ad.trace(lambda x: W.compile_scalar(x, prog, ad.sin, ad.tanh), prog.x)
    rec["trace_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    gtape = grad_tape(tape)
    rec["grad_tape_s"] = time.perf_counter() - t1
    rec["grad_ops"] = gtape.n_ops
    params = [Param("x", 4)]
    t2 = time.perf_counter()
    rec["fold_segments"] = len(find_segments(gtape, params))
    rec["fold_scan_s"] = time.perf_counter() - t2
    x = np.ascontiguousarray(prog.x)
    kinds = ["interpreter"] + (["straight-line"] if n_ops <= STRAIGHT_LINE_MAX else [])
    for kind in kinds:
        t3 = time.perf_counter()
        c = compile_tape(gtape, params, f"f_{kind[0]}", force=kind)
        rec[f"{kind}_compile_s"] = time.perf_counter() - t3
        ok, out = c.call(x)
        rec[f"{kind}_rel_err"] = max(W.rel_err(out[0], ref.value), W.rel_err(out[1:], ref.grad))
        t = per_call(lambda c=c: c.call(x))
        rec[f"{kind}_ns_per_op"] = 1e9 * t / n_ops
        rec[f"{kind}_ns_per_grad_op"] = 1e9 * t / gtape.n_ops
    return rec


# ---------------------------------------------------------------- the parent


def spawn(what: str, *args: Any) -> dict[str, Any]:
    """Run one measurement in a fresh process with an empty cache; its record."""
    with tempfile.TemporaryDirectory(prefix="fold_bench_") as cache:
        env = dict(os.environ, ADCOMPILE_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache)
        cmd = [sys.executable, "-m", "benchmarks.fold_bench", "--child", json.dumps([what, *args])]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr else "failed"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def fmt(t: float | None, unit: str = "s") -> str:
    if t is None:
        return "-"
    if unit == "us":
        return f"{t * 1e6:,.1f}"
    return f"{t:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.child:
        what, *args = json.loads(opts.child)
        fn = {"adcompile": child_adcompile, "hand": child_hand, "scaling": child_scaling}[what]
        print(json.dumps(fn(*args)))
        return 0
    cases = FIRST_CALL if opts.quick else FIRST_CALL + LARGE
    scaling = SCALING[:2] if opts.quick else SCALING
    print("## Folded value-and-gradient vs hand-written Numba (fresh process each)\n")
    print(
        "| workload | n | first call s | trace | grad tape | fold | generate | compile | "
        "per call us | hand first s | hand per call us | ratio | interpreter per call us "
        "| statements | rel err |"
    )
    print("|---" * 15 + "|")
    failed = False
    for case, n in cases:
        a, h = spawn("adcompile", case, n), spawn("hand", case, n)
        if "error" in a or "error" in h:
            print(f"| {case} | {n} | error: {a.get('error') or h.get('error')} |")
            failed = True
            continue
        err = max(a["rel_err"], h["rel_err"])
        failed |= not (err < 1e-8 and a["ok"])
        print(
            f"| {case} | {n:,} | {fmt(a['first_call_s'])} | {fmt(a['trace_s'])} | "
            f"{fmt(a['grad_tape_s'])} | {fmt(a['find_s'])} | {fmt(a['generate_s'])} | "
            f"{fmt(a['compile_s'])} | {fmt(a['per_call_s'], 'us')} | {fmt(h['first_call_s'])} | "
            f"{fmt(a['hand_per_call_s'], 'us')} | {a['per_call_s'] / a['hand_per_call_s']:.2f} | "
            f"{fmt(a['interpreter_per_call_s'], 'us')} | {a['statements']} | {err:.1e} |"
        )
        sys.stdout.flush()
    print("\n## Compile scaling (random tapes; nothing folds): interpreter vs straight-line\n")
    print(
        "| N | trace s | grad tape s | fold scan s | segments | interpreter compile s | "
        "interpreter ns/op | straight-line compile s | straight-line ns/op | rel err |"
    )
    print("|---" * 10 + "|")
    for n in scaling:
        r = spawn("scaling", n)
        if "error" in r:
            print(f"| {n:,} | error: {r['error']} |")
            failed = True
            continue
        errs = [v for k, v in r.items() if k.endswith("rel_err")]
        failed |= not max(errs) < 1e-8
        print(
            f"| {n:,} | {fmt(r['trace_s'])} | {fmt(r['grad_tape_s'])} | {fmt(r['fold_scan_s'])} | "
            f"{r['fold_segments']} | {fmt(r['interpreter_compile_s'])} | "
            f"{r['interpreter_ns_per_op']:.1f} | {fmt(r.get('straight-line_compile_s'))} | "
            f"{r.get('straight-line_ns_per_op', float('nan')):.1f} | {max(errs):.1e} |"
        )
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
