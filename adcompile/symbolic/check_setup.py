"""What a check sets up before any method runs; shared by ``check_grad`` and
``check_jacobian``.

- ``setup``: the function (unwrapped from a transform), its arguments' shapes, the flat
  point, and the positions and labels (``x``, ``a[0, 1]``) of the inputs checked;
- ``check_tolerances`` and ``check_seconds``: the tolerances and the time bound, each
  checked (a ValueError names a bad one);
- ``Clock``: the seconds each method took, and the bound ``max_seconds`` on the
  reference methods (everything but compiling and running the transforms checked);
- ``kink_nodes`` and ``point_on_kink``: where the point is relative to the kinks of
  non-smooth ops (``abs``, ``relu``, ``maximum`` ...), where a derivative is a convention.

Nothing here computes a derivative.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..api.transform import Transformed
from ..diff import interpret
from ..ir.ops import Op
from ..ir.tape import Tape
from ..trace.arguments import param_names

#: check_grad's and check_jacobian's default bound, in seconds, on the time of the reference
#: methods (everything but compiling and running the transforms checked).
MAX_SECONDS = 60.0


def check_tolerances(name: str, **tols: float) -> dict[str, float]:
    """The tolerances, after checking each is a number >= 0 (ValueError otherwise)."""
    for key, tol in tols.items():
        try:
            valid = 0.0 <= float(tol) < math.inf
        except (TypeError, ValueError):
            valid = False
        if not valid:
            raise ValueError(f"{name}: {key} must be a number >= 0 (a tolerance), got {tol!r}")
    return {
        "rtol": tols["rtol"],
        "atol": tols["atol"],
        "fd_rtol": max(tols["rtol"], tols["fd_rtol"]),
        "fd_atol": max(tols["atol"], tols["fd_atol"]),
    }


def check_seconds(name: str, max_seconds: float | None) -> float | None:
    """``max_seconds`` after checking it is None or a number > 0 (ValueError otherwise)."""
    if max_seconds is None:
        return None
    try:
        valid = float(max_seconds) > 0 and not isinstance(max_seconds, bool)
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(
            f"{name}: max_seconds must be a number of seconds > 0, or None for no bound; "
            f"got {max_seconds!r}"
        )
    return float(max_seconds)


def setup(f: Callable, args: Sequence[Any], argnums: int | Sequence[int]) -> tuple:
    """What a check needs to know of ``f`` and its arguments: the function (unwrapped from
    a transform), its name, whether ``argnums`` is a tuple, the argument numbers, every
    argument's shape, the flat positions and labels of the inputs checked, and the point."""
    fun = f.fun if isinstance(f, Transformed) else f
    name = getattr(fun, "__name__", "f")
    many = isinstance(argnums, (tuple, list))
    nums = [k % len(args) for k in (argnums if many else [argnums])]
    names, shapes, offsets = _arg_layout(fun, args)
    positions = [p for k in nums for p in range(offsets[k], offsets[k + 1])]
    labels = [lb for k in nums for lb in element_labels(names[k], shapes[k])]
    point = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in args] or [[]])
    return fun, name, many, nums, shapes, positions, labels, point


def _arg_layout(f: Callable, args: Sequence[Any]) -> tuple[list[str], list[tuple], list[int]]:
    """Per argument: its name and shape (``()`` for a number); and offsets in the flat point."""
    names = param_names(f, len(args))
    shapes = [np.shape(a) for a in args]
    offsets = [0]
    for s in shapes:
        offsets.append(offsets[-1] + int(np.prod(s, dtype=int)))
    return names, shapes, offsets


def element_labels(name: str, shape: tuple) -> list[str]:
    """``name`` for a number; ``name[i, j]`` ... for each element of an array of ``shape``."""
    if shape == ():
        return [name]
    return [f"{name}[{', '.join(map(str, idx))}]" for idx in np.ndindex(*shape)]


class Clock:
    """check_grad's time: the seconds each method took, and the bound on the reference
    methods (``max_seconds`` from when they start; None: no bound)."""

    #: The methods that compile a transform the first time.
    COMPILED = ("compiled", "jvp", "jacobian", "hessian")

    def __init__(self, max_seconds: float | None) -> None:
        self.max_seconds = max_seconds
        self.deadline = math.inf
        self.seconds: dict[str, float] = {}

    def start_references(self) -> None:
        """The reference methods start now: the bound counts from here."""
        if self.max_seconds is not None:
            self.deadline = time.perf_counter() + self.max_seconds

    def over(self) -> bool:
        """Whether the bound is reached."""
        return time.perf_counter() > self.deadline

    @contextmanager
    def timing(self, method: str) -> Iterator[None]:
        """Add the time of the ``with`` block to ``method``'s seconds (a compiled method's
        time does not count against the bound)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - t
            self.seconds[method] = self.seconds.get(method, 0.0) + spent
            if method in self.COMPILED:
                self.deadline += spent

    def line(self) -> str:
        """``time: compiled 1.2 s (compiling included), ...`` for a report."""
        parts = [
            f"{m} {_duration(s)}" + (" (compiling included)" if m in self.COMPILED else "")
            for m, s in self.seconds.items()
        ]
        bound = (
            ""
            if self.max_seconds is None
            else f"; the reference methods are bounded by max_seconds={self.max_seconds:g}"
        )
        return f"time: {', '.join(parts)}{bound}"


def _duration(seconds: float) -> str:
    """``31.2 s``, ``760 ms``, ``0.41 ms``."""
    ms = seconds * 1000
    return f"{seconds:.1f} s" if seconds >= 1.0 else f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


def kink_nodes(tape: Tape) -> list[Any]:
    """The nodes of non-smooth ops (``abs``, ``relu``, ``maximum`` ...)."""
    return [node for node in tape.nodes if isinstance(node.op, Op) and not node.op.smooth]


def _switch(vals: list[float], node: Any) -> float:
    """Where a non-smooth op is relative to its kink: its operand, or ``a - b``."""
    return node.op.switch(*[vals[a] for a in node.args])


def point_on_kink(tape: Tape, point: np.ndarray, notes: list[str], sympy_present: bool) -> bool:
    """Whether the point is on a kink of a non-smooth op (where the derivative is a
    convention, so SymPy is shown but not compared); notes it."""
    vals = interpret.values(tape, point)
    on_kink = sorted({n.op.name for n in kink_nodes(tape) if _switch(vals, n) == 0.0})
    if on_kink and sympy_present:
        notes.append(
            f"sympy not compared: the point is on a kink of {', '.join(on_kink)}, where the "
            "derivative is a convention"
        )
    return bool(on_kink)
