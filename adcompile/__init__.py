"""adcompile: scalar Python code in, fast and verified derivative code out."""

from __future__ import annotations

from typing import Any

from .ir.ops import OPS, Op
from .ir.tape import Guard, Node, Tape
from .trace.functions import FUNCTIONS
from .trace.mode import NonFiniteError, debug_nans, no_grad
from .trace.value import Value

from .api.transform import grad, jit, show_code, trace, value_and_grad  # isort: skip
from .api.events import RetraceWarning  # isort: skip
from .trace.randomness import RandomDrawError  # isort: skip
from .api.step import compile_loss  # isort: skip
from .api.derived import hessian, hvp, jacobian, jvp  # isort: skip
from .api.vmap import vmap  # isort: skip
from .api.explain import explain  # isort: skip
from .api.export import export  # isort: skip
from . import datasets, nn, optim  # isort: skip  (ad.nn.Linear, ad.optim.Adam)
from .nn import MLP, Layer, Module, Neuron  # isort: skip
from .viz import GraphvizMissing, draw, to_dot  # isort: skip
from .api.extend import Function, primitive  # isort: skip  (user-defined primitives)
from .symbolic.check import (  # isort: skip
    GradientMismatch,
    GradReport,
    JacobianReport,
    check_grad,
    check_jacobian,
)
from .trace.checking import CheckError  # isort: skip  (check mode: ADCOMPILE_CHECK=1)
from .trace.tensor import ValueArray, data, grad_of, tensor  # isort: skip

# ad.exp, ad.sin, ad.relu ...: one function per op, for floats, Values and arrays.
globals().update(FUNCTIONS)


def _tape_to_sympy(tape: Tape) -> list:
    """The outputs as SymPy expressions, in symbols named after the inputs."""
    from .symbolic.bridge import tape_to_sympy  # SymPy loads on first use, not with adcompile

    return tape_to_sympy(tape)


def _tape_compile(tape: Tape, wrt: Any = None) -> Any:
    """The tape's compiled code (``api.tape_code``), called as ``tape.evaluate`` is;
    with ``wrt`` (input positions), the value and then its gradient."""
    from .api.tape_code import compile_tape  # (Numba: on the first compile)

    return compile_tape(tape, wrt)


# The methods of the tape that layers above it provide: SymPy's bridge, the pipeline.
Tape.to_sympy = _tape_to_sympy  # type: ignore[attr-defined]
Tape.compile = _tape_compile  # type: ignore[attr-defined]

__version__ = "0.1.0"

# Loaded on first use, not at import: the Numba side, and SymPy.
_LAZY = {
    **dict.fromkeys(
        ("CacheDirError", "CacheWarning", "CompileError", "cache_dir", "clear_cache"),
        "adcompile.backend.jit",
    ),
    "from_sympy": "adcompile.symbolic.bridge",
    "to_sympy": "adcompile.symbolic.transforms",
    "sympy_value_and_grad": "adcompile.symbolic.transforms",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'adcompile' has no attribute {name!r}")


__all__ = [
    "OPS",
    "Op",
    "Guard",
    "Node",
    "Tape",
    "Value",
    "NonFiniteError",
    "debug_nans",
    "no_grad",
    "CacheDirError",
    "CacheWarning",
    "CompileError",
    "cache_dir",
    "clear_cache",
    "RetraceWarning",
    "RandomDrawError",
    "grad",
    "jit",
    "show_code",
    "trace",
    "value_and_grad",
    "jacobian",
    "hessian",
    "jvp",
    "hvp",
    "vmap",
    "explain",
    "export",
    "compile_loss",
    "datasets",
    "nn",
    "optim",
    "MLP",
    "Layer",
    "Module",
    "Neuron",
    "GraphvizMissing",
    "draw",
    "to_dot",
    "ValueArray",
    "data",
    "grad_of",
    "tensor",
    "Function",
    "primitive",
    "GradReport",
    "GradientMismatch",
    "CheckError",
    "check_grad",
    "JacobianReport",
    "check_jacobian",
    "to_sympy",
    "from_sympy",
    "sympy_value_and_grad",
    *FUNCTIONS,
]
