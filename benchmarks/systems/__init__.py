"""The systems a benchmark compares, each optional.

A system is a class with a ``name``, the top-level ``modules`` it needs, a
``load()`` that imports them (timed as ``import_s``; raising :class:`Skip`
or ``ImportError`` makes the cell "skipped" with the reason) and one method
per workload that returns a :class:`Prepared` call. Importing this package
imports no system's dependencies.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


class Skip(Exception):
    """This system cannot run here (not installed, or not applicable); the message says why."""


@dataclass
class Prepared:
    """One workload set up on one system.

    ``call()`` is what is timed (one value-and-gradient, or one training
    step); ``unpack(out)`` turns its result into ``(value, gradient)`` as a
    float and a float array for the check (not timed); ``params()`` (mlp
    only) gives the flat parameters after the steps taken so far.
    ``stages()`` (compile scaling, where the system can tell them apart) maps
    stage names to seconds; ``info()``, called after the first call, gives
    anything else worth recording (which back end ran, tape lengths).
    """

    call: Callable[[], Any]
    unpack: Callable[[Any], tuple[float, Any]]
    params: Callable[[], np.ndarray] | None = None
    stages: Callable[[], dict[str, float]] | None = None
    info: Callable[[], dict[str, Any]] | None = None


class System:
    """Base class: subclasses set the names and implement the workloads they support."""

    name = ""
    description = ""
    modules: tuple[str, ...] = ()
    #: an eager op-by-op interpreter (runs the 1,000,000-step chain)
    interpreter = False
    #: workload -> why it is not applicable to this system
    not_applicable: dict[str, str] = {}

    def missing(self) -> str | None:
        """Why this system cannot run here, found without importing it (None if it can)."""
        for m in self.modules:
            try:
                found = importlib.util.find_spec(m) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                return f"{m} is not installed"
        return None

    def load(self) -> None:
        """Import what the system needs (timed as ``import_s``)."""
        for m in self.modules:
            importlib.import_module(m)

    def version(self) -> str:
        parts = []
        for m in self.modules:
            mod = importlib.import_module(m)
            parts.append(f"{m} {getattr(mod, '__version__', '?')}")
        return ", ".join(parts)

    def unsupported(self, workload: str, n: int) -> str | None:
        if workload in self.not_applicable:
            return self.not_applicable[workload]
        if not hasattr(self, workload):
            return f"{self.name} does not implement {workload}"
        return None

    def prepare(self, workload: str, data: dict[str, Any]) -> Prepared:
        return getattr(self, workload)(**data)


#: name -> "module:Class", in the order tables list them.
REGISTRY: dict[str, str] = {
    "adcompile": "benchmarks.systems.adcompile_compiled:AdcompileCompiled",
    "adcompile-eager": "benchmarks.systems.adcompile_eager:AdcompileEager",
    "micrograd": "benchmarks.systems.micrograd_sys:Micrograd",
    "torch": "benchmarks.systems.torch_sys:Torch",
    "jax": "benchmarks.systems.jax_sys:Jax",
    "numba": "benchmarks.systems.numba_sys:NumbaHand",
    "numpy": "benchmarks.systems.numpy_sys:NumpyHand",
}
#: Systems for testing the harness itself: run only when named.
TESTING: dict[str, str] = {
    "_missing": "benchmarks.systems.testing:Missing",
    "_crash": "benchmarks.systems.testing:Crash",
    "_recursion": "benchmarks.systems.testing:Recursion",
    "_slow": "benchmarks.systems.testing:Slow",
}
DEFAULT_SYSTEMS = tuple(REGISTRY)
REFERENCE = "numba"


def get(name: str) -> System:
    """An instance of the system called ``name``."""
    path = REGISTRY.get(name) or TESTING.get(name)
    if path is None:
        raise KeyError(f"unknown system {name!r}; choose from {', '.join(REGISTRY)}")
    module, cls = path.split(":")
    return getattr(importlib.import_module(module), cls)()
