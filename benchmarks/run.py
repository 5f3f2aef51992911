"""Run the benchmark: every (workload, system, size) cell in its own fresh process.

    python -m benchmarks.run [--workload W] [--n N] [--systems a,b] [--quick] [--out DIR]

Each cell runs as ``python -m benchmarks.cell`` in a new process with a
time-out, so a crash, a RecursionError or a hang is recorded as that cell's
failure (with its reason and the phase it was in) and the run goes on. The
results go to ``DIR/results.jsonl`` (one JSON object per cell, written as
each cell ends), ``DIR/results.md`` (Markdown tables, each system's time as
a ratio to the hand-written Numba gradient measured in the same run, also
printed) and ``DIR/<workload>.png`` (log-scale bar charts, if matplotlib is
installed).

Exit status: 0 when every system that ran gave the right answer (failures
such as micrograd's RecursionError and skipped systems are results, not
errors), 1 when some system's answer was wrong, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import workloads as W
from .cell import MARKER, PARTIAL
from .cli import parser
from .systems import DEFAULT_SYSTEMS, REFERENCE, REGISTRY, TESTING, get

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

#: Thread-count variables of the BLAS / OpenMP libraries the systems use.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")

FULL = {"budget": 1.0, "timeout": 300.0}
QUICK = {"budget": 0.1, "timeout": 60.0}


def plan(
    workloads: list[str], systems: list[str], n: int | None, quick: bool
) -> list[tuple[str, str, int]]:
    """The cells to run, in order: workload, then size, then system."""
    cells = []
    for w in workloads:
        if n is not None:
            sizes = [n]
        elif quick:
            sizes = list(W.QUICK_SIZES[w])
        else:
            sizes = list(W.SIZES[w])
        interp_only = W.INTERPRETER_ONLY.get(w, ())
        for size in sizes:
            for s in systems:
                if size in interp_only and n is None:
                    if not (get(s).interpreter or s == REFERENCE):
                        continue
                cells.append((w, s, size))
    return cells


def run_one(
    workload: str,
    system: str,
    n: int,
    *,
    budget: float,
    timeout: float,
    cache_dir: str | None = None,
    inject_wrong: bool = False,
    memory: bool = False,
    threads: int | None = 1,
) -> dict[str, Any]:
    """One cell in a fresh process; its record (a failure if the process died or hung)."""
    base = {"workload": workload, "system": system, "n": n}
    sysobj = get(system)
    why = sysobj.missing() or sysobj.unsupported(workload, n)
    if why is not None:  # no process needed to know that
        return {**base, "status": "skipped", "reason": why, "description": sysobj.description}

    cmd = [
        sys.executable,
        "-m",
        "benchmarks.cell",
        workload,
        system,
        str(n),
        "--budget",
        repr(budget),
    ]
    if inject_wrong:
        cmd.append("--inject-wrong")
    if memory:
        cmd.append("--memory")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    own_cache = cache_dir is None
    cache = tempfile.mkdtemp(prefix="adcompile-bench-cache-") if own_cache else cache_dir
    env["ADCOMPILE_CACHE_DIR"] = cache
    env.setdefault("PYTHONHASHSEED", "0")
    if threads is not None:
        for var in THREAD_VARS:
            env[var] = str(threads)
        env["BENCH_THREADS"] = str(threads)
        flags = env.get("XLA_FLAGS", "")
        if threads == 1 and "multi_thread_eigen" not in flags:
            env["XLA_FLAGS"] = (
                flags + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
            ).strip()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    finally:
        if own_cache:
            shutil.rmtree(cache, ignore_errors=True)
    wall = time.perf_counter() - t0

    result = partial = None
    for line in out.splitlines():
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER) :])
        elif line.startswith(PARTIAL):
            partial = json.loads(line[len(PARTIAL) :])
    if result is not None and not timed_out:
        result["wall_s"] = wall
        return result
    rec = {**base, **(partial or {})}
    phase = rec.pop("phase", "start-up")
    if timed_out:
        why = f"timed out after {timeout:g} s (in {phase})"
    elif proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        why = f"process crashed with {sig} (in {phase})"
        if sig == "SIGKILL":
            why = f"process killed with SIGKILL, most likely out of memory (in {phase})"
    else:
        why = f"process exited with status {proc.returncode} (in {phase})"
    tail = [ln for ln in err.strip().splitlines() if ln.strip()][-3:]
    if tail and not timed_out:
        why += ": " + " | ".join(t.strip() for t in tail)[-400:]
    rec.update(status="failed", reason=why, wall_s=wall)
    return rec


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _summary(rec: dict[str, Any]) -> str:
    from .report import fmt_time

    st = rec["status"]
    if st == "ok":
        return (
            f"ok  {fmt_time(rec.get('per_call_s'))}/call, first call "
            f"{fmt_time(rec.get('first_call_s'))}"
        )
    return f"{st}: {rec.get('reason', '')}"


#: ``adcompile bench NAME ...`` runs these instead of the peer comparison:
#: first calls in fresh processes (issue 16), per-call overhead against the
#: Numba kernel and the eager Value against micrograd (issue 17); Hessians,
#: Jacobians and vmap against hand-written Numba, jax and torch.func (issue 18);
#: data-parallel gradients and multi-start on Dask workers (issue 20); NumPy-style
#: losses on whole arrays against hand-written NumPy, torch and jax (issue 30).
SIDE_BY_SIDE = {
    "first-call": "first_call",
    "call-overhead": "call_overhead",
    "eager": "eager_side_by_side",
    "transforms": "transforms",
    "distributed": "distributed",
    "arrays": "arrays",
}


def parse_args(
    argv: list[str] | None, prog: str = "python -m benchmarks.run"
) -> argparse.Namespace:
    """The options; ``prog`` is the command shown in the usage line."""
    ap = parser(
        prog,
        "python -m benchmarks.run",
        "Benchmark adcompile against its peers on the workloads of benchmarks/README.md. "
        "'first-call', 'call-overhead', 'eager', 'transforms', 'distributed' and 'arrays' as "
        f"the first argument run those benchmarks instead (see {prog} first-call --help ...).",
    )
    ap.add_argument(
        "--workload",
        action="append",
        choices=W.WORKLOADS,
        help="run only this workload (repeatable; default: all)",
    )
    ap.add_argument("--n", type=int, help="run only this size")
    ap.add_argument(
        "--systems", help="comma-separated systems (default: all): " + ",".join(REGISTRY)
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="the smaller sizes and short timings (under two minutes)",
    )
    ap.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})"
    )
    ap.add_argument("--timeout", type=float, help="seconds per cell (default 300, quick 60)")
    ap.add_argument(
        "--budget",
        type=float,
        help="seconds of steady-state timing per cell (default 1.0, quick 0.1)",
    )
    ap.add_argument(
        "--no-reference",
        action="store_true",
        help="do not add the Numba reference when --systems leaves it out",
    )
    ap.add_argument(
        "--warm-cache",
        action="store_true",
        help="share one adcompile cache folder between cells (default: a fresh "
        "empty one per cell, so first calls are cold starts)",
    )
    ap.add_argument(
        "--memory",
        action="store_true",
        help="also measure eager graphs' memory and what is left after a drop",
    )
    ap.add_argument(
        "--inject-wrong",
        metavar="SYSTEM",
        help="harness self-test: perturb SYSTEM's gradient by 1e-6 before the check",
    )
    ap.add_argument(
        "--no-skip-larger",
        action="store_true",
        help="run larger sizes of a system that timed out, crashed or ran out of memory on a "
        "smaller one",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads each system may use (default 1, like the Numba reference; 0 leaves "
        "every library at its own default)",
    )
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG charts")
    ap.add_argument("--list", action="store_true", help="list the cells and exit")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None, prog: str = "python -m benchmarks.run") -> int:
    """Entry point (also for ``adcompile bench``, which passes its name as ``prog``); the exit
    status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SIDE_BY_SIDE:  # the other benchmarks, each its own program
        import importlib

        module = importlib.import_module(f"benchmarks.{SIDE_BY_SIDE[argv[0]]}")
        try:  # each names itself after this program in its usage and errors
            return int(module.main(argv[1:], prog=f"{prog} {argv[0]}") or 0)  # 1: a wrong answer
        except SystemExit as e:
            return int(e.code or 0)
    try:
        a = parse_args(argv, prog)
    except SystemExit as e:
        return int(e.code or 0)
    workloads = a.workload or list(W.WORKLOADS)
    systems = (
        [s.strip() for s in a.systems.split(",") if s.strip()]
        if a.systems
        else list(DEFAULT_SYSTEMS)
    )
    unknown = [s for s in systems if s not in REGISTRY and s not in TESTING]
    if unknown:
        print(
            f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}",
            file=sys.stderr,
        )
        return 2
    if REFERENCE not in systems and not a.no_reference:
        systems.append(REFERENCE)  # the ratios need it
    if a.n is not None and a.n < 1:
        print("--n must be a positive size", file=sys.stderr)
        return 2
    mode = QUICK if a.quick else FULL
    budget = a.budget if a.budget is not None else mode["budget"]
    timeout = a.timeout if a.timeout is not None else mode["timeout"]
    cells = plan(workloads, systems, a.n, a.quick)
    if a.list:
        for c in cells:
            print(*c)
        return 0

    from . import report

    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "results.jsonl"
    shared_cache = tempfile.mkdtemp(prefix="adcompile-bench-warm-") if a.warm_cache else None
    records = []
    given_up: dict[tuple[str, str], tuple[int, str]] = {}
    t_start = time.perf_counter()
    meta = report.machine_info()
    meta.update(
        threads=a.threads or "library defaults",
        mode="quick" if a.quick else "full",
        budget_s=budget,
        timeout_s=timeout,
        cache="warm (shared)" if a.warm_cache else "cold (fresh per cell)",
    )
    try:
        with jsonl.open("w") as f:
            for k, (w, s, n) in enumerate(cells, 1):
                gave_up = given_up.get((w, s))
                if gave_up is not None and n > gave_up[0]:
                    rec = {
                        "workload": w,
                        "system": s,
                        "n": n,
                        "status": "failed",
                        "reason": f"not run: {gave_up[1]} at n={gave_up[0]}, a smaller size "
                        "(use --no-skip-larger to run it anyway)",
                    }
                else:
                    rec = run_one(
                        w,
                        s,
                        n,
                        budget=budget,
                        timeout=timeout,
                        cache_dir=shared_cache,
                        inject_wrong=(s == a.inject_wrong),
                        memory=a.memory,
                        threads=a.threads or None,
                    )
                    reason = rec.get("reason", "")
                    if rec["status"] == "failed" and not a.no_skip_larger:
                        if reason.startswith("timed out"):
                            given_up[(w, s)] = (n, "timed out")
                        elif "MemoryError" in reason or "out of memory" in reason:
                            given_up[(w, s)] = (n, "ran out of memory")
                        elif reason.startswith("process crashed"):
                            given_up[(w, s)] = (n, "crashed")
                records.append(rec)
                f.write(json.dumps(rec) + "\n")
                f.flush()
                print(
                    f"[{k}/{len(cells)}] {w} n={n} {s}: {_summary(rec)} "
                    f"[{rec.get('wall_s', 0.0):.1f} s]",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if shared_cache:
            shutil.rmtree(shared_cache, ignore_errors=True)
    meta["total_s"] = time.perf_counter() - t_start
    md = report.markdown(records, meta)
    (out / "results.md").write_text(md)
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(md)
    if not a.no_plot:
        for p in report.plots(records, out):
            print(f"chart: {p}", file=sys.stderr)
    print(f"results: {jsonl}, {out / 'results.md'} ({meta['total_s']:.0f} s)", file=sys.stderr)
    return 1 if any(r["status"] == "wrong" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
