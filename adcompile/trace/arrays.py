"""Tracing whole arrays: :class:`ArrayValue` records one node per NumPy call.

An array argument traced at array level is an ``ArrayValue``: a shape, a
dtype (float64, or bool for comparisons) and its slot in an
:class:`ArrayTrace`, the recorder. Operators, NumPy's ufuncs
(``__array_ufunc__``) and NumPy's functions (``__array_function__``, the
handlers of ``trace.numpy_api``) each append one node, whatever the size of
the arrays; the recorder lays them out as an ``ir.arrays.ArrayTape``.

What this level does not take raises :class:`NotArrayLevel` (a
``BaseException``, so that a user's ``except Exception`` does not swallow it),
and the caller traces the function element by element instead, as Values:

- reading more than ``MAX_ELEMENT_READS`` single elements (``x[i]`` with an
  integer per axis: a Python loop over elements, which folds into a loop when
  traced element by element); ``float(x)``, ``bool(x)`` (a branch on traced
  data), ``x.item()``;
- a NumPy function or ufunc it has no rule for (named in the reason);
- a micrograd ``Value`` meeting an array;
- writing into an argument, or into a view of one (the caller's array would
  change).

Writing into an array the function made (``z = np.zeros_like(x); z[1:] = ...``)
is a functional update: the ``ArrayValue`` takes the new node. Views are kept
as NumPy keeps them: a view (basic indexing, a reshape, a transpose) knows its
base and how it is made of it, so it is made again from the base when the base
was written since, and a write into a view is a write into its base (the view
written back: ``setitem`` for an index, the reshape or transpose undone).
Whether NumPy gives a view or a copy (``z.T.ravel()`` is a copy) is asked of
NumPy itself, on a stand-in array of the same shape (``probe``).
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import array_index as X
from ..ir import array_ops as A
from ..ir.array_products import matmul
from ..ir.arrays import ArrayOp, ArrayTape, Shape, broadcast, evaluate_node
from ..ir.ops import OPERATORS, Op
from ..ir.tape import CONST, INPUT, Node
from .mode import in_library

#: How a refusal ends that names a NumPy function with no rule here ("np.sort" + NO_RULE).
NO_RULE = " has no array-level rule"


#: What ``x[mask]`` with a traced mask gives (``trace.masked.Masked``, which sets it).
SELECTION: list[Callable[[Any, Any], Any]] = []


def numpy_name(func: Any) -> str:
    """A NumPy function's name as a user writes it (``np.linalg.inv``, ``np.sum``); a
    ufunc of SciPy's, ``scipy.special.erf``."""
    name = getattr(func, "__name__", str(func))
    if isinstance(func, np.ufunc) and getattr(np, name, None) is not func:
        special = sys.modules.get("scipy.special")
        if special is not None and getattr(special, name, None) is func:
            return f"scipy.special.{name}"
    parts = (getattr(func, "__module__", None) or "numpy").split(".")
    public = [p for p in parts[1:] if not p.startswith("_")] if parts[0] == "numpy" else parts
    return ".".join(["np", *public, getattr(func, "__name__", str(func))])


class NotArrayLevel(BaseException):  # noqa: N818 - a signal, not an error
    """The function does something array-level tracing does not take (the reason)."""


#: A function that reads more single elements than this (``x[i]``: a Python loop over
#: elements) is traced element by element instead, where such loops fold into loops.
MAX_ELEMENT_READS = 16

#: NumPy functions with an array-level rule: function -> handler taking NumPy's
#: arguments, and ``np.ufunc`` -> the handler of every ufunc (filled by
#: ``trace.numpy_api``).
HANDLED: dict[Callable, Callable] = {}


class ArrayTrace:
    """The recorder: nodes in order, each slot's shape and whether it is boolean."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.shapes: list[Shape] = []
        self.booleans: list[bool] = []
        self.inputs: list[int] = []
        self.element_reads = 0  # single elements read (x[i]), at most MAX_ELEMENT_READS
        self._consts: dict[Any, int] = {}
        self._seen: dict[tuple, int] = {}  # (op, operand slots) -> the node made of them

    def add(self, node: Node, shape: Shape, boolean: bool = False) -> int:
        self.nodes.append(node)
        self.shapes.append(tuple(shape))
        self.booleans.append(boolean)
        return len(self.nodes) - 1

    def input(self, shape: Shape) -> ArrayValue:
        slot = self.add(Node(INPUT), shape)
        self.inputs.append(slot)
        return ArrayValue(self, slot, kind="input")

    def const(self, value: Any) -> ArrayValue:
        """A constant: a number, or an array (kept as a copy)."""
        if isinstance(value, (numbers.Real, np.number, np.bool_)) and np.ndim(value) == 0:
            if isinstance(value, (bool, np.bool_)):
                value = np.asarray(value)
            else:
                v = float(value)
                key = ("f", v.hex() if math.isfinite(v) else repr(v))
                slot = self._consts.get(key)
                if slot is None:
                    slot = self._consts[key] = self.add(Node(CONST, (), v), ())
                return ArrayValue(self, slot)
        arr = np.array(value)
        if arr.dtype == object:
            raise NotArrayLevel("an array of Python objects (Values?) meets a traced array")
        is_bool = arr.dtype == np.bool_
        if not is_bool:
            arr = arr.astype(np.float64)
        arr.setflags(write=False)
        slot = self.add(Node(CONST, (), arr), arr.shape, is_bool)
        return ArrayValue(self, slot)

    def operand(self, x: Any) -> ArrayValue:
        """``x`` as an ArrayValue of this trace (numbers and arrays as constants)."""
        if isinstance(x, ArrayValue):
            if x.trace is not self:
                raise NotArrayLevel("an array traced by another transform")
            return x
        if hasattr(x, "_apply"):
            raise NotArrayLevel(f"a {type(x).__name__} meets a traced array")
        if isinstance(x, (list, tuple)) and any(isinstance(e, ArrayValue) for e in x):
            return HANDLED[np.stack](x)
        if isinstance(x, (numbers.Real, np.ndarray, np.number, np.bool_, list, tuple)):
            return self.const(x)
        raise NotArrayLevel(f"a {type(x).__name__} operand")

    def record(self, op: Op, args: Sequence[Any]) -> ArrayValue:
        """``op`` applied to ``args`` (ArrayValues, numbers, arrays): its node."""
        vals = [self.operand(a) for a in args]
        key = (id(op), *(v.slot for v in vals))
        seen = self._seen.get(key)
        if seen is not None:  # the same op of the same operands: its node again
            return ArrayValue(self, seen)
        if all(self.nodes[v.slot].op == CONST for v in vals):  # constants in: one out
            return self.const(evaluate_node(op, [self.nodes[v.slot].value for v in vals]))
        shapes = [v.shape for v in vals]
        if isinstance(op, ArrayOp):
            shape, boolean = op.shape_of(*shapes), op.boolean
            if op.keeps_shape and shape == shapes[0]:
                return ArrayValue(self, vals[0].slot)  # (a reshape to its own shape)
        else:
            shape, boolean = broadcast(*shapes), False
            same = self._identity(op, vals, shape)
            if same is not None:  # a new array, of the same values
                return ArrayValue(self, same.slot)
        slot = self._seen[key] = self.add(Node(op, tuple(v.slot for v in vals)), shape, boolean)
        return ArrayValue(self, slot)

    def _identity(self, op: Op, vals: Sequence[ArrayValue], shape: Shape) -> ArrayValue | None:
        """The operand ``op`` gives back unchanged, bit for bit, where the other is its
        identity (``x - 0.0``, ``1.0 * x``; ``ops.Op.identity``), or None."""
        if op.identity is None or len(vals) != 2:
            return None
        for keep, other in ((0, 1), (1, 0)) if op.commutative else ((0, 1),):
            node = self.nodes[vals[other].slot]
            if (
                node.op == CONST
                and not isinstance(node.value, np.ndarray)
                and math.copysign(1.0, node.value) == math.copysign(1.0, op.identity)
                and node.value == op.identity
                and vals[keep].shape == shape
                and not self.booleans[vals[keep].slot]
            ):
                return vals[keep]
        return None

    def tape(
        self, outputs: Sequence[ArrayValue], names: Sequence[str], adjoint_from: int | None = None
    ) -> ArrayTape:
        """The nodes the outputs need (every input kept), renumbered, as a tape; with
        ``adjoint_from`` (a node index here), the tape says where those nodes begin."""
        live = [False] * len(self.nodes)
        for s in self.inputs:
            live[s] = True
        for o in outputs:
            live[o.slot] = True
        for i in range(len(self.nodes) - 1, -1, -1):
            if live[i]:
                for a in self.nodes[i].args:
                    live[a] = True
        new: dict[int, int] = {}
        nodes, shapes, booleans = [], [], []
        for i, node in enumerate(self.nodes):
            if live[i]:
                new[i] = len(nodes)
                nodes.append(Node(node.op, tuple(new[a] for a in node.args), node.value))
                shapes.append(self.shapes[i])
                booleans.append(self.booleans[i])
        tape = ArrayTape(
            nodes,
            [new[s] for s in self.inputs],
            [new[o.slot] for o in outputs],
            names,
            shapes,
            booleans,
        )
        if adjoint_from is not None:
            tape.adjoint_from = min((new[i] for i in new if i >= adjoint_from), default=len(nodes))
        return tape


_INT = (numbers.Integral, np.integer)


def _index(x: ArrayValue, index: Any) -> tuple:
    """A NumPy index as a tuple of ints, slices, None, Ellipsis and constant arrays."""
    items = index if isinstance(index, tuple) else (index,)
    out: list[Any] = []
    for item in items:
        if isinstance(item, ArrayValue):
            raise NotArrayLevel("an index computed from traced data")
        if isinstance(item, (bool, np.bool_)):
            raise NotArrayLevel("a boolean scalar index")
        if isinstance(item, (numbers.Integral, np.integer)):
            out.append(int(item))
        elif isinstance(item, slice):
            parts = (item.start, item.stop, item.step)
            if any(p is not None and not isinstance(p, _INT) for p in parts):
                raise NotArrayLevel("a slice bound that is not an integer")
            out.append(slice(*(None if p is None else int(p) for p in parts)))
        elif item is None or item is Ellipsis:
            out.append(item)
        else:
            arr = np.asarray(item)
            if arr.dtype.kind not in "biu":
                raise NotArrayLevel(f"an index of type {type(item).__name__}")
            arr = arr.copy()
            arr.setflags(write=False)
            out.append(arr)
    return tuple(out)


def _one_element(shape: Shape, index: tuple) -> bool:
    """Whether ``index`` picks one element (an int per axis)."""
    return len(index) == len(shape) and all(isinstance(i, int) for i in index)


class ArrayValue:
    """A traced array: its recorder, slot, shape and dtype (module doc).

    ``kind`` is "input" for an argument, "view" for a view of another array
    (basic indexing, reshapes, transposes), else "" (an array of its own);
    ``viewed`` says that a view of it was taken."""

    __slots__ = ("trace", "_slot", "kind", "base", "via", "back", "seen", "probe", "__weakref__")
    __array_priority__ = 1000.0
    __hash__ = None  # type: ignore[assignment]  (as NumPy's arrays: == is element-wise)

    def __init__(self, trace: ArrayTrace, slot: int, kind: str = "") -> None:
        self.trace = trace
        self._slot = slot
        self.kind = kind  # "input" (an argument), "made" (np.zeros ...), "view", ""
        # a view's base, the op that makes it of the base, how a new value of it is
        # written back (None: read-only), and the base's slot it was made of
        self.base: ArrayValue | None = None
        self.via: ArrayOp | None = None
        self.back: Callable[[ArrayValue, ArrayValue], ArrayValue] | None = None
        self.seen = -1
        self.probe: np.ndarray | None = None  # (NumPy's stand-in for its memory)

    @property
    def slot(self) -> int:
        """Its node: for a view whose base was written since, the view made again."""
        base = self.base
        if base is not None:
            b = base.slot
            if b != self.seen:
                self._slot = self.trace.record(self.via, [base])._slot
                self.seen = b
        return self._slot

    # ---- what it is
    @property
    def shape(self) -> Shape:
        return self.trace.shapes[self.slot]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.bool_ if self.trace.booleans[self.slot] else np.float64)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        """``np.ndarray`` to the user's code, so that ``isinstance(x, np.ndarray)``
        holds as for the array it stands for; ``ArrayValue`` to adcompile's and
        NumPy's."""
        if in_library(1):
            return ArrayValue
        return np.ndarray

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ArrayValue(shape={self.shape}, dtype={self.dtype}, slot v{self.slot})"

    # ---- what it cannot be while tracing at array level
    def _concrete(self, what: str) -> Any:
        raise NotArrayLevel(f"{what} of a traced array (its value is not known while tracing)")

    def __bool__(self) -> bool:
        return self._concrete("bool()")

    def __float__(self) -> float:
        return self._concrete("float()")

    def __int__(self) -> int:
        return self._concrete("int()")

    def __index__(self) -> int:
        return self._concrete("an integer use")

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        return self._concrete("conversion to a NumPy array")

    def item(self, *args: Any) -> float:
        return self._concrete("item()")

    def tolist(self) -> list:
        return self._concrete("tolist()")

    def __iter__(self) -> Any:
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[k] for k in range(self.shape[0]))

    # ---- recording
    def _apply(self, op: Op, args: Sequence[Any]) -> ArrayValue:
        return self.trace.record(op, args)

    def viewed_as(
        self,
        op: ArrayOp,
        probe: Callable[[np.ndarray], np.ndarray],
        back: Callable[[ArrayValue, ArrayValue], ArrayValue] | None,
    ) -> ArrayValue:
        """``op`` of this array: a view of it where NumPy's ``probe`` (the same op on a
        stand-in array) shares its memory, else a copy. ``back(base, new)``: the base
        with the view's value ``new`` written in (None: a read-only view)."""
        out = self.trace.record(op, [self])
        if self.probe is None:
            self.probe = np.empty(self.shape, dtype=np.bool_)
        seen = probe(self.probe)
        if not np.may_share_memory(seen, self.probe):
            return out  # (NumPy copies: an array of its own)
        out.kind, out.base, out.via, out.back = "view", self, op, back
        out.seen, out.probe = self.slot, seen
        return out

    def _assign(self, new: ArrayValue) -> None:
        """This array's contents become ``new``'s (a view's: written into its base)."""
        if self.base is not None:
            if self.back is None:
                raise ValueError("assignment destination is read-only")
            self.base._assign(self.back(self.base, new))
            self._slot, self.seen = new.slot, self.base.slot
        else:
            self._slot = new.slot

    def __getitem__(self, index: Any) -> ArrayValue:
        if isinstance(index, ArrayValue) and index.dtype == np.bool_:
            return SELECTION[0](self, index)  # (x[mask]: its length is data)
        idx = _index(self, index)
        op = X.getitem(idx)
        if _one_element(self.shape, idx):  # a scalar node (NumPy gives a copy)
            self.trace.element_reads += 1
            if self.trace.element_reads > MAX_ELEMENT_READS:
                raise NotArrayLevel(
                    f"reading more than {MAX_ELEMENT_READS} single elements x[i] (a loop "
                    "over elements, traced element by element, where loops fold)"
                )
            return self.trace.record(op, [self])
        if any(isinstance(i, np.ndarray) for i in idx):
            return self.trace.record(op, [self])  # advanced indexing copies
        return self.viewed_as(
            op,
            lambda p: p[idx],
            lambda base, new: base.trace.record(X.setitem(idx), [base, new]),
        )

    def _number(self) -> bool:
        """Whether NumPy's value here is a number (``z[0]``, ``np.sum(x)``: immutable),
        not a 0-d array (one the function made, or a view)."""
        return not self.shape and self.base is None and self.kind != "made"

    def _writable(self, what: str) -> None:
        root = self
        while root.base is not None:
            root = root.base
        if root.kind == "input":
            raise NotArrayLevel(f"{what} an argument (it would change the caller's array)")

    def __setitem__(self, index: Any, value: Any) -> None:
        if self._number():
            raise NotArrayLevel("writing into a scalar")  # (NumPy refuses too)
        self._writable("writing into")
        if isinstance(index, ArrayValue):
            selected = getattr(value, "mask", None)  # (z[m] = x[m]: a trace.masked.Masked)
            if selected is not None and selected.slot == index.slot:
                value = value.data  # (of the full shape, as the mask)
            elif index.dtype != np.bool_ or np.ndim(value) != 0:
                raise NotArrayLevel("writing through a traced index")
            new = A.where()(index, value, self)
        else:
            new = self.trace.record(X.setitem(_index(self, index)), [self, value])
        if new.shape != self.shape:
            raise NotArrayLevel("a masked write that changes the shape")
        self._assign(new)

    def _inplace(self, name: str, other: Any) -> ArrayValue:
        self._writable("updating in place")
        new = self.trace.record(OPERATORS[name], [self, other])
        if new.shape != self.shape:
            raise ValueError(
                f"non-broadcastable output operand with shape {self.shape} doesn't match "
                f"the broadcast shape {new.shape}"
            )
        if self._number():
            return new  # (as z[0] and np.sum give: += makes a new one)
        self._assign(new)
        return self

    # ---- NumPy's protocols
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return HANDLED[np.ufunc](self.trace, ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Callable, types: Any, args: Any, kwargs: Any) -> Any:
        handler = HANDLED.get(func)
        if handler is None:
            raise NotArrayLevel(numpy_name(func) + NO_RULE)
        return handler(*args, **kwargs)

    # ---- NumPy's methods
    def _np(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        return HANDLED[fn](self, *args, **kwargs)

    def sum(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.sum, *a, **k)

    def mean(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.mean, *a, **k)

    def max(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.max, *a, **k)

    def min(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.min, *a, **k)

    def prod(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.prod, *a, **k)

    def var(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.var, *a, **k)

    def std(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.std, *a, **k)

    def cumsum(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.cumsum, *a, **k)

    def diagonal(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.diagonal, *a, **k)

    def clip(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.clip, *a, **k)

    def dot(self, other: Any) -> ArrayValue:
        return self._np(np.dot, other)

    def squeeze(self, *a: Any, **k: Any) -> ArrayValue:
        return self._np(np.squeeze, *a, **k)

    def ravel(self) -> ArrayValue:
        return self._np(np.ravel)

    def flatten(self) -> ArrayValue:
        return self.trace.record(A.reshape((self.size,)), [self])

    def reshape(self, *shape: Any, **k: Any) -> ArrayValue:
        if len(shape) == 1 and not isinstance(shape[0], (numbers.Integral, np.integer)):
            shape = tuple(shape[0])
        return self._np(np.reshape, shape, **k)

    def transpose(self, *axes: Any) -> ArrayValue:
        if len(axes) == 1 and not isinstance(axes[0], (numbers.Integral, np.integer)):
            axes = tuple(axes[0]) if axes[0] is not None else ()
        return self._np(np.transpose, axes or None)

    @property
    def T(self) -> ArrayValue:  # noqa: N802 - NumPy's name
        return self._np(np.transpose)

    def copy(self) -> ArrayValue:
        return ArrayValue(self.trace, self.slot)

    def astype(self, dtype: Any, *a: Any, **k: Any) -> ArrayValue:
        if np.dtype(dtype) == np.float64:  # (other dtypes round: their values differ)
            copy = k.get("copy", a[3] if len(a) > 3 else True)
            if self.dtype.kind != "f":
                return self * 1.0
            return self.copy() if copy else self  # (copy=False: the array itself, as NumPy)
        raise NotArrayLevel(f"astype({np.dtype(dtype)}) of a traced array")


def _binary(op: Op, reflected: bool = False) -> Callable:
    """The operator method recording ``op`` (with its operands swapped: ``__radd__``)."""

    def method(self: ArrayValue, other: Any) -> Any:
        args = [other, self] if reflected else [self, other]
        return self.trace.record(op, args)

    return method


for _name in ("add", "sub", "mul", "truediv", "pow", "floordiv", "mod"):
    setattr(ArrayValue, f"__{_name}__", _binary(OPERATORS[_name]))
    setattr(ArrayValue, f"__r{_name}__", _binary(OPERATORS[_name], reflected=True))
    setattr(
        ArrayValue,
        f"__i{_name}__",
        lambda self, other, _n=_name: self._inplace(_n, other),
    )
for _dunder, _name in (
    ("lt", "less"),
    ("le", "less_equal"),
    ("gt", "greater"),
    ("ge", "greater_equal"),
    ("eq", "equal"),
    ("ne", "not_equal"),
):
    setattr(ArrayValue, f"__{_dunder}__", _binary(A.boolean(_name)))
for _dunder, _name in (("and", "logical_and"), ("or", "logical_or"), ("xor", "logical_xor")):
    setattr(ArrayValue, f"__{_dunder}__", _binary(A.boolean(_name)))
    setattr(ArrayValue, f"__r{_dunder}__", _binary(A.boolean(_name), reflected=True))


def _unary(name: str) -> Callable:
    return lambda self: self.trace.record(OPERATORS[name], [self])


ArrayValue.__neg__ = _unary("neg")  # type: ignore[attr-defined]
ArrayValue.__abs__ = _unary("abs")  # type: ignore[attr-defined]
ArrayValue.__pos__ = lambda self: self.copy()  # type: ignore[attr-defined]  (a new array)
ArrayValue.__invert__ = lambda self: (  # type: ignore[attr-defined]
    self.trace.record(A.boolean("logical_not"), [self])
    if self.dtype == np.bool_
    else self._concrete("~ on a float array")
)
ArrayValue.__matmul__ = lambda self, other: self.trace.record(matmul(), [self, other])  # type: ignore[attr-defined]
ArrayValue.__rmatmul__ = lambda self, other: self.trace.record(matmul(), [other, self])  # type: ignore[attr-defined]
