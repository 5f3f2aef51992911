"""``Value``: the micrograd-compatible scalar that records what is done to it.

A Value holds its op and its operands (in two slots, ``_a`` and ``_b``: no
tuple per op), nothing else: no closure that points back at the Value itself,
so a dropped graph is freed by reference counting alone. ``backward()``
collects the Values that take a gradient, sorts them by creation (a
topological order) and runs each op's reverse step. The operator methods and
the reverse steps are Python source generated once from the op table
(``methods``), so the table stays the one definition of every primitive.
While tracing (``mode.tracing``), comparisons are kept as guards and each op's
source line as (code, offset); ``.data`` is then a ``TracedFloat`` (``traced``).

This is the one module that reads a Value's slots: the graph walks
(``topological_order``, ``outer_values``) and the layout of
Values as tape nodes (``lay_out``, ``append_nodes``) are here. ``numeric`` (its
base class) makes it a Python number.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import operator
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..ir import ops
from ..ir.ops import OPS, Op
from ..ir.tape import CONST, INPUT, Node
from . import methods, ufuncs
from .micrograd import MicrogradOp, by_hand
from .mode import (
    COMPARE_FLOATS,
    DEFAULT_MODE,
    MODE,
    bad_operand,
    caller_line,
    caller_site,
    nonfinite_error,
)
from .numeric import Numeric
from .traced import as_float, frozen_data, traced_float

serials = itertools.count()

# A Value that takes no gradient (a constant, a requires_grad=False leaf, a result
# made under no_grad) has _adj = _SINK for good: the reverse steps add into it
# without testing, and backward() never reads it. Any other Value has _adj None
# except while backward() runs.
_SINK = 0.0

_new = object.__new__


def _result(op: Op, operands: tuple, data: float) -> Value:
    """The Value ``op`` made from ``operands``; it records them if any takes a gradient."""
    out = _new(Value)
    out.data = data
    out.grad = 0.0
    out.label = ""
    out._serial = next(serials)
    if MODE.get() is not DEFAULT_MODE:
        return _moded(out, op, operands)
    return _recorded(out, op, operands)


def _recorded(out: Value, op: Op, operands: tuple) -> Value:
    """``out`` made by ``op``: it records its operands if any takes a gradient."""
    for v in operands:
        if v._rg:
            out._fn = op
            _link(out, operands)
            out._rg = True
            out._adj = None
            return out
    out._fn = None
    out._a = out._b = None
    out._rg = False
    out._adj = _SINK
    return out


def _moded(out: Value, op: Op, operands: tuple) -> Value:
    """``_result``'s ending outside the default mode (debug_nans, tracing, no_grad)."""
    mode = MODE.get()
    if mode.nans and not math.isfinite(out.data) and all(math.isfinite(v.data) for v in operands):
        raise nonfinite_error(op, [v.data for v in operands], out.data, caller_line())
    if mode.trace is not None:
        traced_float(out, op, operands, _result)
        if mode.trace.sites:
            mode.trace.where[out._serial] = caller_site(3)
    return _recorded(out, op, operands if mode.grad else ())


def _link(out: Value, operands: Sequence[Value]) -> None:
    """Record ``operands`` in ``out``: ``_a`` the first, ``_b`` the second (or a tuple
    of the rest, for three or more), so that a unary or binary op allocates no tuple."""
    n = len(operands)
    out._a = operands[0] if n else None
    out._b = None if n < 2 else (operands[1] if n == 2 else tuple(operands[1:]))


#: The numbers an operator takes besides Values (np.bool_ is no numbers.Real; bool is).
_REALS = (numbers.Real, np.bool_)


def _operand(other: Any, op: Op) -> Any:
    """A binary operator's other operand as a Value (NotImplemented for arrays)."""
    if type(other) is float or type(other) is int:
        return constant(other)
    if isinstance(other, _REALS) and not isinstance(other, Value):
        frozen_data(other)
        return constant(other)
    if isinstance(other, Value):
        return other
    if isinstance(other, (np.ndarray, list, tuple)):
        return NotImplemented
    raise bad_operand(other, op.symbol or op.name)


def _names() -> dict[str, Any]:
    """The names the generated operator methods read (see ``methods``' templates)."""
    return dict(
        __name__=__name__,  # a library frame: error messages name the user's line
        Value=Value,
        _new=_new,
        serials=serials,
        _MODE=MODE,
        _DEFAULT_MODE=DEFAULT_MODE,
        _moded=_moded,
        constant=constant,
        _CONSTS=_CONSTS,
        _SINK=_SINK,
        _operand=_operand,
    )


def unary_method(op: Op) -> Callable[[Value], Value]:
    """The method for a unary op (``v.sin()``, ``-v``), made from the op table's entry."""
    return methods.unary(op, _names())


class Value(Numeric):
    """A scalar that records the operations applied to it, as in micrograd."""

    __slots__ = (
        "data",
        "grad",
        "_fn",
        "_a",
        "_b",
        "label",
        "_rg",
        "_serial",
        "_adj",
        "__weakref__",
    )

    def __init__(
        self,
        data: Any,
        _children: Iterable[Value] = (),
        _op: str = "",
        label: str = "",
        requires_grad: bool = True,
    ) -> None:
        if data is self:  # (Value(x) of a traced x: see Numeric.__new__)
            self.label = label or self.label
            return
        self.data = data if type(data) is float else as_float(data)
        self.grad = 0.0
        self._fn: Op | None = None
        _link(self, tuple(_children))  # micrograd's _children: its own op (_backward)
        if self._a is not None:
            self._fn = MicrogradOp(_op, self._prev)
        self.label = label
        self._rg = bool(requires_grad)
        self._serial = next(serials)
        # None, or while backward() runs the adjoint; _SINK if it takes no gradient
        self._adj: float | None = None if self._rg else _SINK

    # -- recording ---------------------------------------------------------

    @classmethod
    def _apply(cls, op: Op, args: Sequence[Any]) -> Value:
        """Apply ``op`` to Values and numbers: the result records its operands."""
        vals = []
        for a in args:
            if type(a) is not Value:
                if type(a) is float or type(a) is int:
                    a = constant(a)
                elif isinstance(a, _REALS) and not isinstance(a, Value):
                    frozen_data(a)
                    a = constant(a)
                elif isinstance(a, Value):
                    pass
                else:
                    raise bad_operand(a, op.name)
            vals.append(a)
        return _result(op, tuple(vals), op.eval(*[v.data for v in vals]))

    @property
    def requires_grad(self) -> bool:
        """Whether ``backward()`` computes a gradient for this Value (and what it depends on)."""
        return self._rg

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self._rg = bool(flag)
        self._adj = None if self._rg else _SINK

    @property
    def _prev(self) -> tuple[Value, ...]:
        """The operands (micrograd's ``_prev``), held as ``_a`` and ``_b``."""
        a = self._a
        if a is None:
            return ()
        b = self._b
        if b is None:
            return (a,)
        return (a, *b) if type(b) is tuple else (a, b)

    @property
    def _op(self) -> str:
        """micrograd's op label: ``'+'``, ``'*'``, ``'tanh'`` ... (``''`` for leaves)."""
        fn = self._fn
        return "" if fn is None else (fn.symbol or fn.name)

    operands = _prev  # (public names of micrograd's)
    op_label = _op

    @property
    def is_leaf(self) -> bool:
        """Whether no op made it (a number the user wrapped, or a parameter), as
        PyTorch's ``Tensor.is_leaf``."""
        return self._fn is None

    # -- operators ---------------------------------------------------------

    # The operators (__add__, __radd__ ... __neg__, __abs__) and one method per
    # op (sin, tanh ...) are generated from the op table below the class.

    def __pos__(self) -> Value:
        return self

    # -- comparisons: a bool from .data; while tracing, kept as a guard -----

    def _compare(self, cmp: str, other: Any) -> bool:
        """``self cmp other`` as floats; while tracing, kept as a guard."""
        if isinstance(other, Value):
            b = other.data
        elif isinstance(other, numbers.Real):
            b = float(other)
        else:
            raise TypeError(
                f"cannot compare a Value with {type(other).__name__!r} using {cmp!r}; "
                "compare with a number or another Value"
            )
        result = bool(COMPARE_FLOATS[cmp](self.data, b))
        state = MODE.get().trace
        if state is not None:
            rhs = other if isinstance(other, Value) else constant(b)
            state.guards.append((cmp, self, rhs, result, caller_line(3)))
        return result

    # <, <=, >, >=, ==, !=, bool() and hash() (object identity): Numeric's, through
    # _compare; float(), int(), round(), item() ...: Numeric's too.

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """NumPy ufuncs on Values, read from the op table (``ufuncs.array_ufunc``): a
        ufunc named after an op applies it (``np.floor(v)``, ``np.maximum(v, 0.0)``);
        ``np.isnan``, ``np.isinf``, ``np.isfinite`` answer a bool, guarded while
        tracing; anything else is NumPy's own object loop."""
        return ufuncs.array_ufunc(self, Value, Value._apply, ufunc, method, inputs, kwargs)

    def detach(self) -> Value:
        """A new leaf with the same value that takes no gradient."""
        if MODE.get().trace is not None:
            raise TypeError(
                "detach() was called on a traced Value: the new leaf would freeze the "
                "value seen while tracing into the compiled code. Compute what needs "
                "no gradient outside the function and pass it as an argument"
            )
        return Value(float(self.data), requires_grad=False)

    @property
    def _backward(self) -> Callable[[], None]:
        """micrograd's ``_backward``: ``self.grad`` times each local derivative added
        into the operands' ``.grad`` (backpropagation by hand, one node at a time);
        assigned, the reverse step of a Value made by ``Value(data, (a, b), 'op')``."""
        return functools.partial(by_hand, self, self._fn)

    @_backward.setter
    def _backward(self, closure: Callable[[], None]) -> None:
        self._fn = MicrogradOp(self._op, self._prev, closure)

    def __getattr__(self, name: str) -> Any:
        # user-defined unary ops become methods too (built-in ones are set below)
        op = OPS.get(name)
        if op is not None and op.arity == 1:
            return lambda: Value._apply(op, (self,))
        raise AttributeError(f"'Value' object has no attribute {name!r}")

    # -- reverse mode ------------------------------------------------------

    def backward(self, gradient: float = 1.0) -> None:
        """Add d self / d v to ``v.grad`` for every Value ``v`` this one depends on.

        Each call adds the same gradients again (PyTorch's ``retain_graph=True``).
        The sweep runs each op's derivative rules (``backward_step``); adjoints live
        on the Values while it runs."""
        if not self._rg:  # a constant: nothing to pass a gradient to
            self.grad += float(gradient)
            return
        order = _grad_order(self)
        try:
            self._adj = float(gradient)
            _sweep(order, _STEPS, backward_step)
        except BaseException:
            for v in order:
                v._adj = None
            raise


# While backward() runs, a Value's _adj is _SEEN once the sweep will reach it,
# then the sum of the contributions it has had (0 + c is c).
_SEEN = 0


def _grad_order(root: Value) -> list[Value]:
    """The Values that take a gradient from ``root``, in creation (topological) order.

    ``root`` must take a gradient; each Value found is marked ``_SEEN``.
    """
    found = [root]
    root._adj = _SEEN
    stack = [root]
    pop, push, keep = stack.pop, stack.append, found.append
    try:
        while stack:
            v = pop()
            p = v._a
            if p is not None:
                if p._adj is None:
                    p._adj = _SEEN
                    keep(p)
                    push(p)
                p = v._b
                if p is not None:
                    if type(p) is tuple:
                        for q in p:
                            if q._adj is None:
                                q._adj = _SEEN
                                keep(q)
                                push(q)
                    elif p._adj is None:
                        p._adj = _SEEN
                        keep(p)
                        push(p)
    except BaseException:
        for v in found:
            v._adj = None
        raise
    found.sort(key=serial_of)
    return found


def backward_step(op: Op) -> Callable[[Value, float], None]:
    """The reverse step of ``op``: add each operand's contribution to its ``_adj``
    (its source written from the op's derivative rules, ``methods.backward_step``)."""
    if isinstance(op, MicrogradOp):
        return _own_step  # (each such Value has its op: not kept)
    step = methods.backward_step(op, __name__)
    _STEPS[op] = step
    return step


_STEPS: dict[Op, Callable[[Value, float], None]] = {}


def _own_step(v: Value, g: float) -> None:
    """The reverse step of a Value made by micrograd's way (``MicrogradOp``)."""
    for p, c in v._fn.contributions(v, g):
        if p._rg:
            p._adj += c


def set_step(op: Op, step: Callable[[Value, float], None]) -> None:
    """``step(v, g)``: the reverse step of ``op``, not in the table (``api.step``)."""
    _STEPS[op] = step


def constant(x: Any) -> Value:
    """A number used as an operand: a leaf that takes no gradient.

    Constants are immutable and never take gradients, so recent ones are shared
    (fewer allocations, less work for the garbage collector).
    """
    x = float(x)
    v = _CONSTS.get(x)
    if (
        v is not None
        and v.data == x
        and (x != 0.0 or math.copysign(1.0, x) == math.copysign(1.0, v.data))
    ):
        return v
    v = _new(Value)
    v.data = x
    v.grad = 0.0
    v._fn = None
    v._a = v._b = None
    v.label = ""
    v._rg = False
    v._serial = next(serials)
    v._adj = _SINK
    if len(_CONSTS) > 4096:
        _CONSTS.clear()
    _CONSTS[x] = v
    return v


_CONSTS: dict[float, Value] = {}


for _name, _op in ops.OPERATORS.items():  # + - * / ** // % and unary -, abs()
    if _op.arity == 1:
        setattr(Value, f"__{_name}__", unary_method(_op))
    else:
        setattr(Value, f"__{_name}__", methods.binop(_op, _names(), dunder=_name))
        setattr(Value, f"__r{_name}__", methods.binop(_op, _names(), True, _name))
# Every op becomes a method named as NumPy's ufunc is (so np.sin(object_array)
# calls v.sin()), except the ones only Python operators record (Op.method).
for _op in OPS.values():
    if _op.method:
        _m = unary_method(_op) if _op.arity == 1 else methods.nary(_op, Value._apply)
        setattr(Value, _op.name, _m)
Value.absolute = Value.abs  # np.absolute's name
Value.mod = Value.remainder  # np.mod's name
# math.floor(v) ... give Values too (NumPy's object loops for np.floor ... call them)
Value.__floor__, Value.__ceil__, Value.__trunc__ = Value.floor, Value.ceil, Value.trunc


def topological_order(roots: Iterable[Value], before: int | None = None) -> list[Value]:
    """Every Value the roots depend on, each after its operands (no recursion).

    The set only answers "seen already?"; the order is creation order, which is
    a topological order because operands exist before their results. With
    ``before``, a Value made before that serial is taken as it is (a leaf):
    a trace does not look behind what existed before it started.
    """
    seen: set[int] = set()  # (ids: a Value's hash is refused while tracing)
    found: list[Value] = []
    stack = list(roots)
    pop, push, extend, add, keep = stack.pop, stack.append, stack.extend, seen.add, found.append
    if before is None:
        before = -1
    while stack:
        v = pop()
        if id(v) not in seen:
            add(id(v))
            keep(v)
            if v._serial < before:
                continue
            a = v._a
            if a is not None:
                push(a)
                b = v._b
                if b is not None:
                    if type(b) is tuple:
                        extend(b)
                    else:
                        push(b)
    found.sort(key=serial_of)
    return found


serial_of = operator.attrgetter("_serial")


def append_nodes(values: Iterable[Value], index: dict[int, int], nodes: list[Node]) -> None:
    """Lay ``values`` (each after its operands) out at the end of ``nodes``: an op's
    result over its operands' slots, a Value made by no op a constant of its value.
    ``index`` (id of a Value -> its slot) gives the operands' slots and takes theirs."""
    mk = tuple.__new__
    for v in values:
        if v._fn is None:
            node = mk(Node, (CONST, (), v.data))
        else:
            node = mk(Node, (v._fn, tuple([index[id(p)] for p in v._prev]), 0.0))
        index[id(v)] = len(nodes)
        nodes.append(node)


def lay_out(
    order: list[Value], input_ids: set[int], before: int | None = None, hoist: bool = False
) -> tuple[list[Node], dict[int, int], list[Value], list[Value]]:
    """``order`` (each Value after its operands) as tape nodes: an input (its id in
    ``input_ids``), a constant of its ``.data`` (made by no op, or with ``before``
    made before that serial), or an op over its operands' slots. With ``hoist``,
    each constant value has one slot, at the front. The nodes, the slot of each
    Value (by id), and the Values of the constant slots in front and of the others."""
    index: dict[int, int] = {}
    nodes: list[Node] = []
    mk, input_node = tuple.__new__, Node(INPUT)
    firsts: list[Value] = []  # with hoist: the Value of each constant slot
    if hoist:
        firsts, order = _constants_first(order, input_ids, index, nodes, before)
    old = -1 if before is None else before
    for k, v in enumerate(order, len(nodes)):
        fn = v._fn
        if fn is None or v._serial < old and id(v) not in input_ids:
            node = input_node if id(v) in input_ids else mk(Node, (CONST, (), float(v.data)))
        elif id(v) in input_ids:
            node = input_node
        else:
            b = v._b
            if b is None:
                args = (index[id(v._a)],)
            elif type(b) is tuple:
                args = tuple([index[id(p)] for p in v._prev])
            else:
                args = (index[id(v._a)], index[id(b)])
            node = mk(Node, (fn, args, 0.0))
        index[id(v)] = k
        nodes.append(node)
    return nodes, index, firsts, order


def _constants_first(
    order: list[Value],
    input_ids: set[int],
    index: dict[int, int],
    nodes: list[Node],
    before: int | None = None,
) -> tuple[list[Value], list[Value]]:
    """Give each constant value one slot at the front (``index``, ``nodes``); the
    first Value of each constant value, and the Values that are not constants."""
    slot_of: dict[bytes, int] = {}
    firsts: list[Value] = []
    rest: list[Value] = []
    pack = struct.Struct("<d").pack  # by bit pattern: -0.0 and 0.0 stay apart
    old = -1 if before is None else before
    for v in order:
        if (v._fn is None or v._serial < old) and id(v) not in input_ids:
            key = pack(v.data)
            k = slot_of.get(key)
            if k is None:
                k = slot_of[key] = len(nodes)
                nodes.append(tuple.__new__(Node, (CONST, (), float(v.data))))
                firsts.append(v)
            index[id(v)] = k
        else:
            rest.append(v)
    return firsts, rest


def next_serial() -> int:
    """A serial no Value made so far has (every Value made later has a larger one)."""
    return next(serials)


def shared_constants() -> set[int]:
    """The ids of the constants shared now (``constant``): taken when a trace starts,
    they tell the old Values it reads that are constants from those that are not."""
    return set(map(id, _CONSTS.values()))


def outer_values(
    order: Sequence[Value], before: int, inputs: Iterable[Value], constants: set[int]
) -> list[Value]:
    """The Values of ``order`` made before serial ``before`` that are not ``inputs``
    nor shared ``constants`` (as ``shared_constants`` gave them when the trace
    started): what a trace read from outside (a model's parameters)."""
    ids = {id(v) for v in inputs}
    return [
        v
        for v in order
        if v._serial < before
        and id(v) not in ids
        and not (v._fn is None and not v._rg and (id(v) in constants or _CONSTS.get(v.data) is v))
    ]


def _make_sweep(inline: Sequence[str]) -> Callable[..., None]:
    """The reverse sweep over ``order``, the steps of the ``inline`` ops written into it."""
    return methods.sweep(inline, backward_step, __name__, _SEEN)


# The Python operators' steps run inline (most ops of a typical graph are these).
_sweep = _make_sweep(("add", "mul", "sub"))
