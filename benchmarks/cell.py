"""One benchmark cell (workload, system, size), measured in the current process.

``benchmarks.run`` starts ``python -m benchmarks.cell ...`` in a fresh
process for every cell and reads back the one line that starts with
``BENCH-RESULT``: a JSON object with the fields listed in ``README.md``.

Order of events in a cell:

1. the system's imports (``import_s``);
2. building the inputs and the system's function or model (``setup_s``);
3. the first call (``first_call_s``: tracing and compilation included);
4. the check of that call's answer against the hand-derived reference
   (a wrong answer ends the cell: status ``wrong``, no time);
5. steady-state calls (``per_call_s``: the median; calls under 1 ms are
   timed in groups and divided);
6. for the chain, the check again at n = 25 (its derivative underflows at
   the timed sizes); for compile scaling, the stage times where known;
7. with ``--memory``, for eager interpreters, the memory a call's graph
   takes and what is left after it is dropped (tracemalloc).

Any exception is caught and recorded with its phase; a crash of the process
itself is recorded by the parent.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from . import workloads as W
from .systems import Prepared, Skip, System, get

MARKER = "BENCH-RESULT "
PARTIAL = "BENCH-PARTIAL "


def steady_state(
    call: Callable[[], Any], budget: float, min_samples: int = 3, max_samples: int = 50
) -> dict[str, Any]:
    """Median seconds per call after warm-up; calls under 1 ms are timed in groups."""
    clock = time.perf_counter
    t0 = clock()
    call()
    est = clock() - t0
    group = 1
    samples: list[float] = []
    if est < 1e-3:
        # groups of at least ~10 ms
        group = int(min(100000, max(2, math.ceil(0.01 / max(est, 1e-7)))))
    else:
        samples.append(est)
    unit = est * group
    k = max(1, min(max_samples, int(budget / max(unit, 1e-9))))
    if unit * min_samples <= 3.0 * budget:
        k = max(k, min_samples)
    while len(samples) < k:
        t0 = clock()
        for _ in range(group):
            call()
        samples.append((clock() - t0) / group)
    return {
        "per_call_s": statistics.median(samples),
        "per_call_min_s": min(samples),
        "samples": len(samples),
        "group": group,
    }


def check(
    workload: str,
    ref: W.Reference,
    value: float,
    grad: Any,
    params: np.ndarray | None,
    n: int,
) -> dict[str, Any]:
    """Relative errors of value, gradient (and mlp parameters after the step)."""
    out: dict[str, Any] = {
        "n": n,
        "value_rel_err": W.rel_err(value, ref.value),
        "grad_rel_err": W.rel_err(grad, ref.grad),
    }
    if ref.params_after is not None:
        out["params_rel_err"] = (
            W.rel_err(params, ref.params_after) if params is not None else math.inf
        )
    out["ok"] = all(v < W.TOLERANCE for k, v in out.items() if k.endswith("_rel_err"))
    return out


def _reason(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_profile(call: Callable[[], Any]) -> dict[str, Any]:
    """Bytes a call's graph takes at its peak, and what is left once it is dropped."""
    import tracemalloc

    gc.collect()
    rss0 = _rss_bytes()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    out = call()
    cur, peak = tracemalloc.get_traced_memory()
    del out
    after_drop = tracemalloc.get_traced_memory()[0] - base
    gc.collect()
    after_gc = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    rss1 = _rss_bytes()
    return {
        "peak_bytes": peak - base,
        "left_after_drop_bytes": after_drop,
        "left_after_gc_bytes": after_gc,
        "rss_before_bytes": rss0,
        "rss_after_bytes": rss1,
    }


def run_cell(
    workload: str,
    system: str,
    n: int,
    budget: float = 1.0,
    inject_wrong: bool = False,
    memory: bool = False,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Measure one cell here; never raises (errors are recorded in the result).

    ``progress(partial_record)`` is called as each phase starts (the parent
    process keeps the last one, to say where a cell that crashed or timed out was).
    """
    rec: dict[str, Any] = {
        "workload": workload,
        "system": system,
        "n": n,
        "status": "ok",
        "reason": "",
        "import_s": None,
        "setup_s": None,
        "first_call_s": None,
        "per_call_s": None,
        "check": None,
        "python": platform.python_version(),
    }
    phase = "load"
    _note(progress, rec, phase)
    try:
        sysobj: System = get(system)
        rec["description"] = sysobj.description
        why = sysobj.missing() or sysobj.unsupported(workload, n)
        if why is not None:
            return {**rec, "status": "skipped", "reason": why}
        t0 = time.perf_counter()
        try:
            sysobj.load()
        except (Skip, ImportError) as e:
            return {
                **rec,
                "status": "skipped",
                "reason": _reason(e) if isinstance(e, ImportError) else str(e),
            }
        rec["import_s"] = time.perf_counter() - t0
        try:
            rec["version"] = sysobj.version()
        except Exception:  # noqa: BLE001 - a version string is not worth a failure
            rec["version"] = "?"

        phase = "setup"
        _note(progress, rec, phase)
        data = W.inputs(workload, n)
        ref = W.reference(workload, data)
        t0 = time.perf_counter()
        prep: Prepared = sysobj.prepare(workload, data)
        rec["setup_s"] = time.perf_counter() - t0

        phase = "first call"
        _note(progress, rec, phase)
        t0 = time.perf_counter()
        out = prep.call()
        rec["first_call_s"] = time.perf_counter() - t0

        phase = "check"
        _note(progress, rec, phase)
        value, grad = prep.unpack(out)
        if inject_wrong:
            grad = _perturb(grad)
        params = prep.params() if prep.params is not None else None
        if workload == "chain" and n != W.CHAIN_CHECK_N:
            # the timed sizes underflow to 0.0: check the value here, both at n = 25
            rec["check_value_at_n"] = W.rel_err(value, ref.value)
        else:
            rec["check"] = check(workload, ref, value, grad, params, n)
        if prep.info is not None:
            rec["info"] = prep.info()
        if workload == "chain" and n != W.CHAIN_CHECK_N and rec["check_value_at_n"] >= W.TOLERANCE:
            return {
                **rec,
                "status": "wrong",
                "reason": f"value rel. error {rec['check_value_at_n']:.2e} at n={n}",
            }
        if rec["check"] is not None and not rec["check"]["ok"]:
            return {**rec, "status": "wrong", "reason": _wrong_reason(rec["check"])}

        phase = "steady state"
        _note(progress, rec, phase)
        rec.update(steady_state(prep.call, budget))
        n_ops = W.n_ops(workload, n)
        if workload in ("compile", "chain"):
            rec["ns_per_op"] = rec["per_call_s"] / n_ops * 1e9

        if workload == "chain" and n != W.CHAIN_CHECK_N:
            phase = f"check at n={W.CHAIN_CHECK_N}"
            _note(progress, rec, phase)
            d25 = W.inputs("chain", W.CHAIN_CHECK_N)
            p25 = sysobj.prepare("chain", d25)
            v25, g25 = p25.unpack(p25.call())
            if inject_wrong:
                g25 = _perturb(g25)
            rec["check"] = check(
                "chain", W.reference("chain", d25), v25, g25, None, W.CHAIN_CHECK_N
            )
            if not rec["check"]["ok"]:
                return {**rec, "status": "wrong", "reason": _wrong_reason(rec["check"])}

        if prep.stages is not None:
            phase = "stages"
            _note(progress, rec, phase)
            try:
                rec["stages"] = prep.stages()
            except Exception as e:  # noqa: BLE001 - internals may move; say so
                rec["stages"] = {"unavailable": _reason(e)}

        if memory and sysobj.interpreter:
            phase = "memory"
            _note(progress, rec, phase)
            rec["memory"] = memory_profile(prep.call)
    except BaseException as e:  # noqa: BLE001 - RecursionError, MemoryError, anything
        if isinstance(e, KeyboardInterrupt):
            raise
        rec["status"] = "failed"
        rec["reason"] = f"{_reason(e)} (in {phase})"
        rec["traceback_tail"] = traceback.format_exc().splitlines()[-6:]
    return rec


def _note(progress: Callable[[dict[str, Any]], None] | None, rec: dict, phase: str) -> None:
    if progress is not None:
        progress({**rec, "phase": phase})


def _perturb(grad: Any) -> Any:
    """The deliberately wrong gradient of ``--inject-wrong``: one entry off by 1e-6."""
    g = np.array(grad, dtype=np.float64, copy=True)
    flat = g.reshape(-1)
    k = flat.size // 2
    flat[k] = flat[k] * (1.0 + 1e-6) if flat[k] != 0.0 else 1e-6
    return g


def _wrong_reason(chk: dict[str, Any]) -> str:
    bad = [
        f"{k[:-8]} rel. error {v:.2e}"
        for k, v in chk.items()
        if k.endswith("_rel_err") and not v < W.TOLERANCE
    ]
    return f"wrong answer at n={chk['n']}: " + ", ".join(bad) + f" (tolerance {W.TOLERANCE:g})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cell", description=__doc__)
    ap.add_argument("workload", choices=W.WORKLOADS)
    ap.add_argument("system")
    ap.add_argument("n", type=int)
    ap.add_argument(
        "--budget", type=float, default=1.0, help="seconds of steady-state timing to aim for"
    )
    ap.add_argument("--inject-wrong", action="store_true")
    ap.add_argument("--memory", action="store_true")
    a = ap.parse_args(argv)

    def progress(partial: dict[str, Any]) -> None:
        print(PARTIAL + json.dumps(_finite(partial), default=_json_default), flush=True)

    rec = run_cell(a.workload, a.system, a.n, a.budget, a.inject_wrong, a.memory, progress)
    sys.stdout.flush()
    print(MARKER + json.dumps(_finite(rec), default=_json_default), flush=True)
    return 0


def _finite(o: Any) -> Any:
    """Non-finite floats as the strings "inf" / "nan" (strict JSON has neither)."""
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


if __name__ == "__main__":
    sys.exit(main())
