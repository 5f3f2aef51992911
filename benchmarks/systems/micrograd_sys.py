"""micrograd (PyPI ``micrograd``): its ``Value`` and ``backward()``, as published.

micrograd 0.1.0 has ``+ - * / **`` and ``relu`` but no ``sin`` or ``tanh``;
the chain and compile-scaling workloads need them, so they are added here
in micrograd's own style (a ``_backward`` closure on a new ``Value``),
without changing anything else. micrograd's recursive topological sort
hits Python's recursion limit (left at its default) on deep graphs: that is
recorded as the cell's failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .scalar import ScalarValueSystem


class Micrograd(ScalarValueSystem):
    name = "micrograd"
    description = "micrograd.engine.Value + backward() (PyPI micrograd)"
    modules = ("micrograd",)

    def load(self) -> None:
        from micrograd.engine import Value

        self.Value = Value

    def version(self) -> str:
        from importlib.metadata import version

        return f"micrograd {version('micrograd')}"

    # sin and tanh in micrograd's style (micrograd 0.1.0 has neither)
    def _sin(self, v: Any) -> Any:
        out = self.Value(math.sin(v.data), (v,), "sin")

        def _backward() -> None:
            v.grad += math.cos(v.data) * out.grad

        out._backward = _backward
        return out

    def _tanh(self, v: Any) -> Any:
        t = math.tanh(v.data)
        out = self.Value(t, (v,), "tanh")

        def _backward() -> None:
            v.grad += (1 - t**2) * out.grad

        out._backward = _backward
        return out

    def functions(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        return self._sin, self._tanh
