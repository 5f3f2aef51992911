"""adcompile: scalar Python code in, fast and verified derivative code out."""

from __future__ import annotations

import sys
import types

from .ops import OPS, Op
from .tape import Guard, Node, Tape
from .value import FUNCTIONS, NonFiniteError, Value, debug_nans, no_grad

from .api import RetraceWarning, grad, jit, show_code, trace, value_and_grad  # isort: skip
from .randomness import RandomDrawError  # isort: skip
from .step import compile_loss  # isort: skip
from .transforms import hessian, hvp, jacobian, jvp  # isort: skip
from .vmap import vmap  # isort: skip
from .explain import explain  # isort: skip
from .export import export  # isort: skip
from . import datasets, nn, optim  # isort: skip  (ad.nn.Linear, ad.optim.Adam)
from .nn import MLP, Layer, Module, Neuron  # isort: skip
from .viz import GraphvizMissing, draw, to_dot  # isort: skip
from .extend import Function, primitive  # isort: skip  (user-defined primitives)
from .check import GradReport, GradientMismatch, JacobianReport, check_grad, check_jacobian  # isort: skip
from .checking import CheckError  # isort: skip  (check mode: ADCOMPILE_CHECK=1)

# ad.tensor is a function (it shadows the module adcompile.tensor, as ad.jit does).
from .tensor import ValueArray, data, grad_of, tensor  # isort: skip

# ad.exp, ad.sin, ad.relu ...: one function per op, for floats, Values and arrays.
globals().update(FUNCTIONS)


def _tape_to_sympy(tape: Tape) -> list:
    """The outputs as SymPy expressions, in symbols named after the inputs."""
    from .symbolic import tape_to_sympy  # SymPy loads on first use, not with adcompile

    return tape_to_sympy(tape)


# The method of the tape that the SymPy bridge, a layer above the tape, provides.
Tape.to_sympy = _tape_to_sympy  # type: ignore[attr-defined]

__version__ = "0.1.0"

_FROM_JIT = ("CacheDirError", "CacheWarning", "CompileError", "cache_dir", "clear_cache")
_FROM_SYMPY = ("to_sympy", "from_sympy", "sympy_value_and_grad")


class _Package(types.ModuleType):
    """``ad.jit`` and ``ad.tensor`` are functions that share a name with a submodule;
    importing the submodule later must not rebind them to the module."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("jit", "tensor") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):  # the Numba side loads on first use, not at import
    if name in _FROM_JIT:
        import importlib

        return getattr(importlib.import_module("adcompile.jit"), name)
    if name in _FROM_SYMPY:  # SymPy, too, loads on first use
        import importlib

        module = "adcompile.symbolic" if name == "from_sympy" else "adcompile.symbolic_transforms"
        return getattr(importlib.import_module(module), name)
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
