"""micrograd's own way of making an op, on adcompile's ``Value``.

micrograd's lecture makes an op by hand: ``out = Value(t, (self,), 'tanh')``, then
``out._backward = fn``, where ``fn`` adds ``out.grad`` times the local derivative
into each operand's ``.grad``; and it backpropagates by hand, calling ``_backward()``
node by node. Here such a Value's op is a :class:`MicrogradOp` (one per Value, not
in the op table) holding the closure: ``backward()`` runs it as that Value's
reverse step (``contributions``), and ``v._backward()`` of any Value is
:func:`by_hand`. Eager only: a trace cannot see how such a Value's data comes
from its operands, so it refuses one by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..ir.ops import Op
from .mode import MODE
from .numeric import Numeric


def made_by_hand() -> TypeError:
    """The error for a micrograd-style op met while tracing."""
    return TypeError(
        "a micrograd-style op (Value(data, (a, b), 'op'), out._backward = ... or "
        "v._backward()) in a traced function: adcompile cannot see how its data comes "
        "from its operands, so compiled it would be the number seen while tracing. "
        "Build it from Value operations (x.exp(), x * y ...), or define the op once "
        "with ad.primitive or ad.Function (docs/api.md), which traced code can use"
    )


def _refused(*args: Any) -> float:
    raise made_by_hand()


class MicrogradOp(Op):
    """The op of a Value made as micrograd makes its own (``Value(data, (a, b),
    'op')``), with its ``_backward`` closure (None: micrograd's default, which
    passes nothing on)."""

    def __init__(self, label: str, operands: tuple, closure: Callable | None = None) -> None:
        if MODE.get().trace is not None:
            raise made_by_hand()
        for p in operands:
            if not isinstance(p, Numeric):
                raise TypeError(
                    f"Value(data, _children, _op): the children are the Values it is made "
                    f"of, not {type(p).__name__!r} (a number needs no gradient: leave it out, "
                    "or make it a Value)"
                )
        super().__init__(label, len(operands), _refused, "")
        self.closure = closure

    def contributions(self, v: Any, g: float) -> list[tuple[Any, float]]:
        """What the closure adds into each operand's ``.grad`` when ``v.grad`` is ``g``
        (each operand once): run with those at 0, every ``.grad`` put back after, so
        that ``backward()`` adds the same again at each call."""
        if self.closure is None:
            return []
        own, operands = v.grad, list({id(p): p for p in v.operands}.values())
        kept = [p.grad for p in operands]
        try:
            v.grad = g
            for p in operands:
                p.grad = 0.0
            self.closure()
            return [(p, p.grad) for p in operands]
        finally:
            v.grad = own
            for p, k in zip(operands, kept):
                p.grad = k


def by_hand(v: Any, op: Op | None) -> None:
    """``v._backward()`` (``op`` made ``v``): ``v.grad`` times each local derivative
    added into the operands' ``.grad``, as micrograd's lecture backpropagates by hand
    (a MicrogradOp runs its closure)."""
    if MODE.get().trace is not None:
        raise made_by_hand()
    if op is None:  # a leaf
        return
    if isinstance(op, MicrogradOp):
        if op.closure is not None:
            op.closure()
        return
    xs = v.operands
    if not op.vjp or len(op.vjp) != len(xs):  # (a compiled loss's: its step alone)
        raise TypeError(
            f"_backward() of a Value made by {op.name!r}, which has no local derivative "
            "rules: call backward() on the result instead"
        )
    args = [x.data for x in xs]
    for x, rule in zip(xs, op.vjp):
        if rule is not None and x.requires_grad:
            x.grad += rule(float(v.grad), v.data, *args)
