"""Tables and charts from the cell records of a run."""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import workloads as W
from .systems import REFERENCE, REGISTRY


def fmt_time(s: Any) -> str:
    """Seconds, readably: ``812 ns``, ``3.4 µs``, ``12.5 ms``, ``2.31 s``."""
    if not isinstance(s, (int, float)):
        return "-"
    for unit, scale in (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3)):
        v = s / scale
        if float(f"{v:.3g}") < 1000:
            return f"{v:.3g} {unit}"
    return f"{s:.3g} s"


def fmt_bytes(b: Any) -> str:
    if not isinstance(b, (int, float)):
        return "-"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= k:
            return f"{b / k:.3g} {unit}"
    return f"{b:.0f} B"


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def _git_commit() -> str:
    """The checkout's commit, with "+dirty" when adcompile/ has uncommitted changes."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "adcompile"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return (head or "?") + ("+dirty" if dirty else "")


def _order(systems: Sequence[str]) -> list[str]:
    known = [s for s in REGISTRY if s in systems]
    return known + sorted(s for s in set(systems) if s not in REGISTRY)


def _index(records: Sequence[dict]) -> dict[tuple[str, str, int], dict]:
    return {(r["workload"], r["system"], r["n"]): r for r in records}


def _ratio(rec: dict, ref: dict | None) -> str:
    if ref is None or ref.get("status") != "ok" or rec.get("status") != "ok":
        return ""
    a, b = rec.get("per_call_s"), ref.get("per_call_s")
    if not a or not b:
        return ""
    r = a / b
    return f" ({r:.2g}×)" if r < 100 else f" ({r:,.0f}×)"


def markdown(records: Sequence[dict], meta: dict[str, Any] | None = None) -> str:
    """The run as Markdown: per workload, steady-state time (× Numba) and first calls."""
    idx = _index(records)
    notes: list[str] = []
    note_of: dict[str, int] = {}

    def note(text: str) -> str:
        if text not in note_of:
            notes.append(text)
            note_of[text] = len(notes)
        return f"[{note_of[text]}]"

    def cell(rec: dict | None, field: str, ref: dict | None = None) -> str:
        if rec is None:
            return ""
        st = rec["status"]
        if st == "ok":
            return fmt_time(rec.get(field)) + (_ratio(rec, ref) if ref is not None else "")
        if st == "wrong":
            return "**wrong** " + note(
                f"{rec['system']}, {rec['workload']} n={rec['n']}: " + rec.get("reason", "")
            )
        label = "skipped" if st == "skipped" else "failed"
        return f"{label} " + note(
            f"{rec['system']}: {rec.get('reason', '')}"
            if st == "skipped"
            else f"{rec['system']}, {rec['workload']} n={rec['n']}: " + rec.get("reason", "")
        )

    lines = ["# adcompile benchmarks", ""]
    if meta:
        lines += [
            f"Measured {meta.get('date', '?')} on {meta.get('cpu', '?')} "
            f"({meta.get('cores', '?')} cores), {meta.get('os', '?')}, "
            f"Python {meta.get('python', '?')}, adcompile at {meta.get('commit', '?')}; "
            f"mode {meta.get('mode', '?')}, threads per system {meta.get('threads', '?')}, "
            f"adcompile cache {meta.get('cache', '?')}, time-out {meta.get('timeout_s', '?')} s "
            "per cell.",
            "",
        ]
    lines += [
        "Each cell ran in a fresh process. *per call*: median of steady-state calls "
        "(in parentheses: the ratio to the hand-written Numba gradient in the same run, "
        "lower is faster). *first call*: the first call in the process, tracing and "
        "compilation included (imports not included; they are the *import* column). "
        f"Every answer was checked against a hand-derived reference (relative error "
        f"< {W.TOLERANCE:g}); the chain is checked at n = {W.CHAIN_CHECK_N}.",
        "",
    ]
    workloads = [w for w in W.WORKLOADS if any(r["workload"] == w for r in records)]
    for w in workloads:
        recs = [r for r in records if r["workload"] == w]
        sizes = sorted({r["n"] for r in recs})
        systems = _order([r["system"] for r in recs])
        lines += [f"## {w}", "", "Per call (× Numba):", ""]
        lines.append("| system | " + " | ".join(f"n = {n:,}" for n in sizes) + " |")
        lines.append("|---" * (len(sizes) + 1) + "|")
        for s in systems:
            row = [
                cell(idx.get((w, s, n)), "per_call_s", idx.get((w, REFERENCE, n))) for n in sizes
            ]
            lines.append(f"| {s} | " + " | ".join(row) + " |")
        lines += ["", "First call in a fresh process / import:", ""]
        lines.append("| system | " + " | ".join(f"n = {n:,}" for n in sizes) + " | import |")
        lines.append("|---" * (len(sizes) + 2) + "|")
        for s in systems:
            row = []
            imp = "-"
            for n in sizes:
                r = idx.get((w, s, n))
                if r is not None and r.get("first_call_s") is not None:
                    row.append(fmt_time(r["first_call_s"]))
                    imp = fmt_time(r.get("import_s"))
                else:
                    row.append(cell(r, "first_call_s"))
            lines.append(f"| {s} | " + " | ".join(row) + f" | {imp} |")
        if w in ("compile", "chain"):
            lines += [
                "",
                "Steady-state nanoseconds per primitive operation (forward + "
                "backward, per forward op):",
                "",
            ]
            lines.append("| system | " + " | ".join(f"n = {n:,}" for n in sizes) + " |")
            lines.append("|---" * (len(sizes) + 1) + "|")
            for s in systems:
                row = []
                for n in sizes:
                    r = idx.get((w, s, n))
                    v = r.get("ns_per_op") if r is not None and r["status"] == "ok" else None
                    row.append(f"{v:,.1f}" if isinstance(v, (int, float)) else "")
                lines.append(f"| {s} | " + " | ".join(row) + " |")
        staged = [r for r in recs if isinstance(r.get("stages"), dict)]
        if staged:
            lines += [
                "",
                "adcompile's stages, timed apart (after the cold first call, with "
                "its caches emptied):",
                "",
            ]
            keys = ["trace_s", "adjoint_s", "generate_s", "compile_s", "first_run_s"]
            lines.append(
                "| system | n | " + " | ".join(k[:-2] for k in keys) + " | backend | note |"
            )
            lines.append("|---" * (len(keys) + 4) + "|")
            for r in sorted(staged, key=lambda r: (r["system"], r["n"])):
                st = r["stages"]
                vals = [fmt_time(st.get(k)) for k in keys]
                lines.append(
                    f"| {r['system']} | {r['n']:,} | "
                    + " | ".join(vals)
                    + f" | {st.get('backend', '')} | {st.get('unavailable', '')} |"
                )
        mem = [r for r in recs if isinstance(r.get("memory"), dict)]
        if mem:
            lines += [
                "",
                "Memory of one call's graph (tracemalloc) and what is left after it is dropped:",
                "",
            ]
            lines.append("| system | n | peak | left after drop | left after gc.collect() |")
            lines.append("|---|---|---|---|---|")
            for r in sorted(mem, key=lambda r: (r["system"], r["n"])):
                m = r["memory"]
                lines.append(
                    f"| {r['system']} | {r['n']:,} | {fmt_bytes(m['peak_bytes'])} | "
                    f"{fmt_bytes(m['left_after_drop_bytes'])} | "
                    f"{fmt_bytes(m['left_after_gc_bytes'])} |"
                )
        lines.append("")
    if notes:
        lines += ["## Notes (failures and skips)", ""]
        lines += [f"{k}. {t}" for k, t in enumerate(notes, 1)]
        lines.append("")
    versions = sorted({f"{r['system']}: {r['version']}" for r in records if r.get("version")})
    if versions:
        lines += ["Versions: " + "; ".join(versions) + ".", ""]
    return "\n".join(lines)


def plots(records: Sequence[dict], out: Path) -> list[Path]:
    """One log-scale bar chart of per-call time per workload; [] without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    for w in W.WORKLOADS:
        recs = [r for r in records if r["workload"] == w]
        if not recs:
            continue
        sizes = sorted({r["n"] for r in recs})
        systems = _order([r["system"] for r in recs])
        idx = _index(recs)
        fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(sizes) + 3), 4.2))
        width = 0.8 / max(1, len(systems))
        cmap = plt.get_cmap("tab10")
        ymin = min(
            (r["per_call_s"] for r in recs if r["status"] == "ok" and r.get("per_call_s")),
            default=1e-6,
        )
        for j, s in enumerate(systems):
            xs, ys = [], []
            for i, n in enumerate(sizes):
                r = idx.get((w, s, n))
                x = i - 0.4 + width * (j + 0.5)
                if r is None:
                    continue
                if r["status"] == "ok" and r.get("per_call_s"):
                    xs.append(x)
                    ys.append(r["per_call_s"])
                elif r["status"] != "skipped":
                    mark = "wrong" if r["status"] == "wrong" else "fail"
                    ax.text(
                        x,
                        ymin / 2,
                        mark,
                        rotation=90,
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        color=cmap(j % 10),
                    )
            ax.bar(xs, ys, width=width, label=s, color=cmap(j % 10))
        ax.set_yscale("log")
        ax.set_ylim(bottom=ymin / 3)
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([f"n = {n:,}" for n in sizes])
        ax.set_ylabel("seconds per call (median, log scale)")
        ax.set_title(f"{w}: value and gradient" + (" (one training step)" if w == "mlp" else ""))
        ax.legend(fontsize=8, ncol=2)
        ax.grid(axis="y", which="major", alpha=0.3)
        fig.tight_layout()
        path = out / f"{w}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths
