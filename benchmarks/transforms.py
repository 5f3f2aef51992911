"""Hessians, Hessian-vector products, Jacobians and vmap, side by side in one process.

    python -m benchmarks.transforms [--case hvp] [--quick] [--systems adcompile,numba]
    adcompile bench transforms ...       # the same

Issue 18's benchmarks. Every system computes the same thing on the same
float64 inputs, and every answer is checked against a NumPy formula derived
by hand (relative error under 1e-8, norm-wise); a wrong answer is reported
as wrong, not timed. Cases:

- ``hvp``: the Hessian of Rosenbrock (benchmarks/README.md) at ``x[i] = 0.9 cos(i)``
  times ``v[i] = sin(i)``, n = 100 and 1,000: ``ad.hvp(f)``, a hand-written
  Numba product (the Hessian is tridiagonal), ``jax.jit`` of
  ``jax.jvp(jax.grad(f))`` and ``torch.func.jvp(torch.func.grad(f))``;
- ``hessian``: the full Hessian, same sizes: ``ad.hessian``, a hand-written
  Numba one (the tridiagonal filled into a dense array), ``jax.jit(jax.hessian)``,
  ``torch.func.hessian``;
- ``jacobian``: ``y_i = sin(x_i) x_{i+1 mod n} + 0.01 x_i sum_j x_j**2`` (100
  outputs of 100 inputs; the sum makes the Jacobian dense): ``ad.jacobian``,
  hand-written Numba, ``jax.jit(jax.jacrev)``, ``torch.func.jacrev``;
- ``vmap``: value and gradient of Rosenbrock at 100,000 points of dimension
  10 (uniform in [-1.5, 1.5], seed 0): ``ad.vmap(ad.value_and_grad(f))`` and
  a hand-written ``numba.prange`` loop each with 1 and 2 threads
  (``numba.set_num_threads``), ``jax.jit(jax.vmap(jax.value_and_grad(f)))``,
  ``torch.func.vmap(torch.func.grad_and_value(f))``.

adcompile runs ``f`` written as scalar Python (a loop over ``x[i]``); jax and
torch run it with whole arrays; jax and torch use their own thread defaults.
"first call" is the first call in this process: tracing and compiling
included (adcompile gets an empty cache folder unless ``ADCOMPILE_CACHE_DIR``
is set; the Numba kernels are compiled there and then, with no disk cache;
jax's includes its ``jit``). "per call" is the median over rounds that
alternate between the systems, each round the best of 3 groups of calls
lasting at least 10 ms. Exit status 1 when some answer was wrong.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from . import workloads as W
from .cli import parser

CASES = ("hvp", "hessian", "jacobian", "vmap")
SYSTEMS = ("adcompile", "numba", "jax", "torch")
SIZES = {"hvp": (100, 1000), "hessian": (100, 1000), "jacobian": (100,), "vmap": (100_000,)}
QUICK = {"hvp": (100,), "hessian": (100,), "jacobian": (20,), "vmap": (2000,)}
VMAP_DIM = 10
TOLERANCE = 1e-8


class Skip(Exception):
    """The system is not installed (or has no form for this case)."""


# ---------------------------------------------------------------- the functions


def rosen(x: Any) -> Any:
    """Rosenbrock as scalar Python (benchmarks/README.md), for adcompile."""
    return W.rosenbrock_scalar(x)


def coupled(x: Any) -> list:
    """``y_i = sin(x_i) x_{i+1 mod n} + 0.01 x_i sum_j x_j**2``, scalar Python."""
    import adcompile as ad

    n = len(x)
    s = sum(x[j] * x[j] for j in range(n))
    return [ad.sin(x[i]) * x[(i + 1) % n] + 0.01 * x[i] * s for i in range(n)]


# ---------------------------------------------------------------- hand-derived references


def rosen_hvp_ref(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    return rosen_hessian_ref(x) @ v


def rosen_hessian_ref(x: np.ndarray) -> np.ndarray:
    """Rosenbrock's Hessian, tridiagonal, from the second derivatives by hand."""
    diag = np.zeros_like(x)
    diag[:-1] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    diag[1:] += 200
    off = -400 * x[:-1]
    return np.diag(diag) + np.diag(off, 1) + np.diag(off, -1)


def coupled_jacobian_ref(x: np.ndarray) -> np.ndarray:
    n, s = x.size, float(np.sum(x * x))
    J = np.diag(np.cos(x) * np.roll(x, -1) + 0.01 * s) + 0.02 * np.outer(x, x)
    J[np.arange(n), (np.arange(n) + 1) % n] += np.sin(x)
    return J


def rosen_rows_ref(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Value and gradient of Rosenbrock for each row of ``X``."""
    a, b = X[:, :-1], X[:, 1:]
    d = b - a * a
    val = np.sum(100 * d * d + (1 - a) ** 2, axis=1)
    g = np.zeros_like(X)
    g[:, :-1] += -400 * a * d - 2 * (1 - a)
    g[:, 1:] += 200 * d
    return val, g


# ---------------------------------------------------------------- hand-written Numba


@numba.njit(cache=False)
def numba_hvp(x, v):
    n = x.size
    out = np.empty(n)
    for i in range(n):
        d = 0.0
        s = 0.0
        if i < n - 1:
            d += 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0
            s += -400.0 * x[i] * v[i + 1]
        if i > 0:
            d += 200.0
            s += -400.0 * x[i - 1] * v[i - 1]
        out[i] = d * v[i] + s
    return out


@numba.njit(cache=False)
def numba_hessian(x):
    n = x.size
    H = np.zeros((n, n))
    for i in range(n):
        if i < n - 1:
            H[i, i] += 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0
            H[i, i + 1] = H[i + 1, i] = -400.0 * x[i]
        if i > 0:
            H[i, i] += 200.0
    return H


@numba.njit(cache=False)
def numba_jacobian(x):
    n = x.size
    s = 0.0
    for j in range(n):
        s += x[j] * x[j]
    J = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            J[i, j] = 0.02 * x[i] * x[j]
        J[i, i] += math.cos(x[i]) * x[(i + 1) % n] + 0.01 * s
        J[i, (i + 1) % n] += math.sin(x[i])
    return J


@numba.njit(parallel=True, cache=False)
def numba_rows(X):
    m, n = X.shape
    val = np.empty(m)
    grad = np.empty((m, n))
    for r in numba.prange(m):
        f = 0.0
        for i in range(n):
            grad[r, i] = 0.0
        for i in range(n - 1):
            a = X[r, i]
            d = X[r, i + 1] - a * a
            f += 100.0 * d * d + (1.0 - a) * (1.0 - a)
            grad[r, i] += -400.0 * a * d - 2.0 * (1.0 - a)
            grad[r, i + 1] += 200.0 * d
        val[r] = f
    return val, grad


# ---------------------------------------------------------------- jax and torch forms


def _jax() -> Any:
    try:
        import jax
    except ImportError as e:
        raise Skip("jax is not installed (pip install jax jaxlib)") from e
    jax.config.update("jax_enable_x64", True)
    return jax


def _torch() -> Any:
    try:
        import torch
        import torch.func  # noqa: F401
    except ImportError as e:
        raise Skip("torch is not installed (pip install torch==2.13.0)") from e
    return torch


def _rosen_array(xp: Any) -> Callable:
    def f(x: Any) -> Any:
        a, b = x[..., :-1], x[..., 1:]
        return xp.sum(100.0 * (b - a**2) ** 2 + (1.0 - a) ** 2, axis=-1)

    return f


def _coupled_array(xp: Any, roll: Callable) -> Callable:
    def f(x: Any) -> Any:
        return xp.sin(x) * roll(x) + 0.01 * x * xp.sum(x * x)

    return f


def _jax_call(fn: Callable, *args: Any) -> Callable[[], Any]:
    jax = _jax()
    args = [jax.numpy.asarray(a) for a in args]

    def call() -> Any:
        return jax.block_until_ready(fn(*args))

    return call


def _torch_args(*args: np.ndarray) -> list:
    torch = _torch()
    return [torch.from_numpy(np.ascontiguousarray(a)) for a in args]


# ---------------------------------------------------------------- the cases


def _inputs(case: str, n: int) -> tuple:
    if case == "vmap":
        X = np.random.default_rng(0).uniform(-1.5, 1.5, size=(n, VMAP_DIM))
        return (X,)
    x = W.rosenbrock_input(n)
    if case == "hvp":
        return x, np.sin(np.arange(n, dtype=np.float64))
    return (x,)


def _reference(case: str, args: tuple) -> Any:
    if case == "hvp":
        return rosen_hvp_ref(*args)
    if case == "hessian":
        return rosen_hessian_ref(*args)
    if case == "jacobian":
        return coupled_jacobian_ref(*args)
    return rosen_rows_ref(*args)


def _as_numpy(out: Any) -> Any:
    if isinstance(out, tuple):
        return tuple(_as_numpy(o) for o in out)
    if hasattr(out, "detach"):  # torch
        return out.detach().numpy()
    return np.asarray(out, dtype=np.float64)


def _prepare(case: str, system: str, args: tuple) -> list[tuple[str, Callable[[], Any]]]:
    """``[(label, call)]``: the calls that system makes for the case (vmap's CPU loops:
    one per thread count). Raises :class:`Skip` when it cannot."""
    if system == "adcompile":
        import adcompile as ad

        if case == "vmap":
            vg = ad.vmap(ad.value_and_grad(rosen))
            return [
                (f"adcompile, {k} thread{'s' * (k > 1)}", _threads(k, vg, args))
                for k in _thread_counts()
            ]
        fn = {
            "hvp": lambda: ad.hvp(rosen),
            "hessian": lambda: ad.hessian(rosen),
            "jacobian": lambda: ad.jacobian(coupled),
        }[case]()
        return [("adcompile", lambda: fn(*args))]
    if system == "numba":
        if case == "vmap":
            return [
                (f"numba prange, {k} thread{'s' * (k > 1)}", _threads(k, numba_rows, args))
                for k in _thread_counts()
            ]
        fn = {"hvp": numba_hvp, "hessian": numba_hessian, "jacobian": numba_jacobian}[case]
        return [("numba (hand)", lambda: fn(*args))]
    if system == "jax":
        jax = _jax()
        jnp = jax.numpy
        f = _rosen_array(jnp)
        if case == "hvp":
            fn = jax.jit(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1])
            label = "jax.jit(jvp(grad))"
        elif case == "hessian":
            fn, label = jax.jit(jax.hessian(f)), "jax.jit(hessian)"
        elif case == "jacobian":
            g = _coupled_array(jnp, lambda x: jnp.roll(x, -1))
            fn, label = jax.jit(jax.jacrev(g)), "jax.jit(jacrev)"
        else:
            fn, label = jax.jit(jax.vmap(jax.value_and_grad(f))), "jax.jit(vmap(value_and_grad))"
        return [(label, _jax_call(fn, *args))]
    torch = _torch()
    tf = torch.func
    targs = _torch_args(*args)
    f = _rosen_array(torch)
    if case == "hvp":
        fn = lambda x, v: tf.jvp(tf.grad(f), (x,), (v,))[1]  # noqa: E731
        label = "torch.func jvp(grad)"
    elif case == "hessian":
        fn, label = tf.hessian(f), "torch.func.hessian"
    elif case == "jacobian":
        fn = tf.jacrev(_coupled_array(torch, lambda x: torch.roll(x, -1)))
        label = "torch.func.jacrev"
    else:
        gv = tf.vmap(tf.grad_and_value(f))

        def fn(X: Any) -> Any:
            g, v = gv(X)
            return v, g

        label = "torch.func vmap(grad_and_value)"
    return [(label, lambda: fn(*targs))]


def _thread_counts() -> list[int]:
    """1 and 2 threads (1 alone where Numba has only one)."""
    return sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)})


def _threads(k: int, fn: Callable, args: tuple) -> Callable[[], Any]:
    def call() -> Any:
        numba.set_num_threads(k)
        return fn(*args)

    return call


def _threads_of(rec: dict[str, Any]) -> str | None:
    """``"1 thread"`` or ``"2 threads"`` for vmap's CPU loops, else None."""
    tail = rec["system"].rsplit(", ", 1)[-1]
    return tail if tail.endswith(("thread", "threads")) else None


def _err(got: Any, ref: Any) -> float:
    if isinstance(ref, tuple):
        if not isinstance(got, tuple) or len(got) != len(ref):
            return math.inf
        return max(W.rel_err(g, r) for g, r in zip(got, ref))
    return W.rel_err(got, ref)


def _group(call: Callable[[], Any], least: float) -> int:
    """Calls per timed group, so that a group lasts at least ``least`` seconds."""
    number = 1
    while True:
        t = timeit.timeit(call, number=number)
        if t >= least or number >= 1 << 20:
            return number
        number *= max(2, min(100, int(least / max(t, 1e-9)) + 1))


def run_case(
    case: str, n: int, systems: list[str], rounds: int, inject: str | None
) -> list[dict[str, Any]]:
    """Each system's record for one case and size: first call, check, per-call median."""
    args = _inputs(case, n)
    ref = _reference(case, args)
    records, timed = [], []
    for system in systems:
        try:
            calls = _prepare(case, system, args)
        except Skip as e:
            records.append(
                {"case": case, "n": n, "system": system, "status": "skipped", "reason": str(e)}
            )
            continue
        for k, (label, call) in enumerate(calls):
            rec: dict[str, Any] = {"case": case, "n": n, "system": label}
            records.append(rec)
            try:
                t0 = time.perf_counter()
                out = call()
                first = time.perf_counter() - t0
                if k == 0:  # the later variants (other thread counts) reuse its compile
                    rec["first_call_s"] = first
                got = _as_numpy(out)
                if inject == system:
                    got = (
                        tuple(g * (1 + 1e-6) for g in got)
                        if isinstance(got, tuple)
                        else got * (1 + 1e-6)
                    )
                rec["rel_err"] = err = _err(got, ref)
            except Exception as e:  # noqa: BLE001 - a failing system is a result
                rec.update(status="failed", reason=f"{type(e).__name__}: {e}"[:300])
                continue
            if not err < TOLERANCE:
                rec.update(status="wrong", reason=f"relative error {err:.2e}")
                continue
            rec["status"] = "ok"
            timed.append((rec, call))
    groups = {id(rec): _group(call, 0.01) for rec, call in timed}
    samples: dict[int, list[float]] = {id(rec): [] for rec, _ in timed}
    for _ in range(rounds):  # alternating, so that each round sees the same load
        for rec, call in timed:
            number = groups[id(rec)]
            best = min(timeit.repeat(call, number=number, repeat=3))
            samples[id(rec)].append(best / number)
    for rec, _ in timed:
        rec["per_call_s"] = statistics.median(samples[id(rec)])
        rec["group"] = groups[id(rec)]
    hand = {
        _threads_of(r): r["per_call_s"]
        for r in records
        if "per_call_s" in r and r["system"].startswith("numba")
    }
    for r in records:
        base = hand.get(_threads_of(r)) or hand.get(None) or hand.get("2 threads")
        if "per_call_s" in r and base:
            r["vs_numba"] = r["per_call_s"] / base
    return records


# ---------------------------------------------------------------- printing


def fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t * 1e9:.3g} ns"


def show(records: list[dict[str, Any]], out: Any = None) -> None:
    out = out or sys.stdout
    for r in records:
        what = f"{r['case']} n={r['n']:,}"
        if r["status"] != "ok":
            print(f"  {what:18s} {r['system']:34s} {r['status']}: {r.get('reason', '')}", file=out)
            continue
        ratio = f"{r['vs_numba']:.2f}x" if "vs_numba" in r else "-"
        print(
            f"  {what:18s} {r['system']:34s} first {fmt_time(r.get('first_call_s')):>9s}   "
            f"per call {fmt_time(r['per_call_s']):>9s}   vs hand Numba {ratio:>7s}   "
            f"rel err {r['rel_err']:.1e}",
            file=out,
            flush=True,
        )


def speedups(records: list[dict[str, Any]]) -> list[str]:
    """The 1 -> 2 thread speedups of the vmap loops."""
    t = {r["system"]: r.get("per_call_s") for r in records}
    lines = []
    for prefix in ("adcompile", "numba prange"):
        one, two = t.get(f"{prefix}, 1 thread"), t.get(f"{prefix}, 2 threads")
        if one and two:
            lines.append(f"  {prefix}: 1 -> 2 threads {one / two:.2f}x faster")
    return lines


def _run_all(a: argparse.Namespace, systems: list[str]) -> list[dict[str, Any]]:
    rounds = a.rounds or (1 if a.quick else 5)
    print(
        f"numba {numba.__version__}, {numba.config.NUMBA_NUM_THREADS} threads available, "
        f"{os.cpu_count()} CPUs; {rounds} round(s); {time.strftime('%Y-%m-%d')}; "
        f"load average {_load()}",
        flush=True,
    )
    everything = []
    for case in a.case or CASES:
        for n in [a.n] if a.n else (QUICK if a.quick else SIZES)[case]:
            records = run_case(case, n, systems, rounds, a.inject_wrong)
            show(records)
            if case == "vmap":
                print("\n".join(speedups(records)), flush=True)
            everything.extend(records)
    print(f"load average {_load()} (others' work on a shared machine slows every system)")
    return everything


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # not on every platform
        return "unknown"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the cases asked for, print their tables; the exit status (1: a wrong answer).
    ``prog``: the name in the usage."""
    ap = parser(prog, "python -m benchmarks.transforms", __doc__.splitlines()[0])
    ap.add_argument("--case", action="append", choices=CASES, help="only this case (repeatable)")
    ap.add_argument("--n", type=int, help="only this size (vmap: the number of points)")
    ap.add_argument("--systems", help="comma-separated, of " + ",".join(SYSTEMS))
    ap.add_argument("--quick", action="store_true", help="the smallest sizes, one round")
    ap.add_argument("--rounds", type=int, help="alternating timing rounds (default 5, quick 1)")
    ap.add_argument("--json", type=str, help="also write the records, one JSON object a line")
    ap.add_argument("--inject-wrong", metavar="SYSTEM", help="self-test: perturb its answers")
    a = ap.parse_args(argv)
    systems = a.systems.split(",") if a.systems else list(SYSTEMS)
    if any(s not in SYSTEMS for s in systems):
        print(
            f"unknown system in {a.systems!r}; choose from {', '.join(SYSTEMS)}", file=sys.stderr
        )
        return 2
    saved = {k: os.environ.get(k) for k in ("ADCOMPILE_CACHE_DIR", "ADCOMPILE_QUIET")}
    threads = numba.get_num_threads()
    os.environ.setdefault("ADCOMPILE_CACHE_DIR", tempfile.mkdtemp(prefix="adcompile-bench-"))
    os.environ.setdefault("ADCOMPILE_QUIET", "1")
    try:
        everything = _run_all(a, systems)
    finally:  # (main may run inside another program: adcompile bench, the tests)
        numba.set_num_threads(threads)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if a.json:
        with open(a.json, "w") as fh:
            for r in everything:
                fh.write(json.dumps(r) + "\n")
    return 1 if any(r["status"] == "wrong" for r in everything) else 0


if __name__ == "__main__":
    sys.exit(main())
