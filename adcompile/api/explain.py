"""``ad.explain(fn)``: why a compiled transform traced and compiled, each time.

Each transform keeps a :class:`~adcompile.api.CompileEvent` per trace and
compile (and per new batch length served by code generic in it): the reason
(the first call, a new shape and which argument, a guard that failed with
its comparison, values and source line), what was made, and the seconds per
stage. This module prints them with the specialisations now cached.
"""

from __future__ import annotations

from typing import Any

from ..backend.entries import HOT_CALLS
from ..trace.arguments import shape_text
from .transform import Transformed
from .vmap import Vmapped


def explain(fn: Any) -> str:
    """Text saying, for each trace and compile of ``fn`` so far, why it happened,
    what it made and how long each stage took; then the specialisations cached."""
    if isinstance(fn, Vmapped):
        return f"vmap of {_name(fn.inner)}: its points run the code of\n" + explain(fn.inner)
    if not isinstance(fn, Transformed):
        raise TypeError(
            f"explain() takes a compiled transform (ad.grad(f), ad.jit(f), ad.jacobian(f) "
            f"...), not {type(fn).__name__!r}"
        )
    fn.wait_for_entries()  # (a direct entry compiling in the background: its outcome)
    name, events = fn.compiled_name, fn.events
    traced = sum(e.traced for e in events)
    head = f"{name} ({fn.mode} of {fn.fun_name}): {traced} trace{'s' * (traced != 1)} and compile"
    head += "s" * (traced != 1)
    served = len(events) - traced
    if served:
        head += f", {served} batch length{'s' * (served != 1)} served without one"
    lines = [head]
    if not events:
        lines.append("  not called yet: the first call traces and compiles it")
    for k, e in enumerate(events, 1):
        lines.append(f"{k}. why: {e.reason}")
        disk = " (Numba's machine code loaded from the disk cache)" if e.from_disk else ""
        lines.append(f"   made: {e.produced}{disk}")
        stages = ", ".join(f"{stage} {sec:.3f} s" for stage, sec in e.stages.items())
        lines.append(f"   took: {e.seconds:.3f} s" + (f" ({stages})" if stages else ""))
    if events and fn.array_refused is not None:
        lines.append(f"traced element by element, not at array level: {fn.array_refused}")
    cached = fn.specialisations
    if cached:
        lines.append("specialisations cached (by argument shapes):")
        names = fn.arg_names(len(next(iter(cached))))
        for key, specs in cached.items():
            args = ", ".join(
                f"{names[k] if k < len(names) else k}: {shape_text(s)}" for k, s in enumerate(key)
            )
            last = " <- used last" if any(s is fn.last for s in specs) else ""
            paths = f"{len(specs)} branch path{'s' * (len(specs) != 1)}"
            lines.append(f"  {args}: {paths}{last}")
            for spec in specs:
                if spec.direct is not None:
                    lines.append(
                        f"    a direct entry, compiled in {spec.direct:.3f} s after "
                        f"{HOT_CALLS} calls (the code once more, called with less Python "
                        "around it)"
                    )
    caps = fn.captures if events else None
    if caps is not None and (caps.hidden or caps.watched):
        lines.append(
            "read from outside its arguments (every specialisation: inputs are read at "
            "each call; a watched value that changed traces again):"
        )
        lines.extend("  " + line for line in caps.listing())
    for variant in fn.variants:
        lines.append("called with keyword arguments:")
        lines.extend("  " + line for line in explain(variant).split("\n"))
    return "\n".join(lines)


def _name(fn: Any) -> str:
    return fn.compiled_name if isinstance(fn, Transformed) else getattr(fn, "__name__", "f")
