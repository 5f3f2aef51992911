"""The element-wise functions ``ad.sin``, ``ad.exp`` ... (``FUNCTIONS``), one per op.

Each takes floats, Values or NumPy arrays: a float gives the op's float, a Value
the recorded op (the same generated method as ``v.sin()``), an array its
element-wise application (``ops.apply``).
"""

from __future__ import annotations

from typing import Any

from ..ir import ops
from ..ir.ops import OPS, Op
from .value import Value, unary_method


def _function(op: Op) -> Any:
    ev = op.eval
    if op.arity == 1:
        method = unary_method(op)

        def f(x: Any) -> Any:
            if type(x) is Value:
                return method(x)
            if type(x) is float:
                return ev(x)
            return ops.apply(op, x)

    else:

        def f(*args: Any) -> Any:
            return ops.apply(op, *args)

    f.__name__ = op.name
    f.__doc__ = (
        f"Element-wise {op.name}: a float for floats, a Value for Values, an array for arrays."
    )
    return f


#: ``ad.<name>`` for every op of the table (and ``mod``, NumPy's name of ``remainder``).
FUNCTIONS = {name: _function(op) for name, op in OPS.items()}
FUNCTIONS["mod"] = FUNCTIONS["remainder"]  # np.mod's name
