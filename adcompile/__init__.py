"""adcompile: scalar Python code in, fast and verified derivative code out."""

from __future__ import annotations

from .ops import OPS, Op
from .tape import Guard, Node, Tape
from .api import RetraceWarning, grad, jit, show_code, trace, value_and_grad
from .value import FUNCTIONS, Value, no_grad

# ad.exp, ad.sin, ad.relu ...: one function per op, for floats, Values and arrays.
globals().update(FUNCTIONS)

__version__ = "0.1.0"
