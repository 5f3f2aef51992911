"""Neural-network modules: micrograd's ``Neuron``/``Layer``/``MLP`` and PyTorch-style layers.

A ``Module`` finds its parameters through its attributes (Values, lists and
arrays of Values, Modules, lists of Modules), as PyTorch does, so a subclass
need not write ``parameters()``. Attributes whose name starts with ``_`` and
Values computed from others (not leaves) are not parameters.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..trace.functions import FUNCTIONS
from ..trace.tensor import ValueArray, asarray, data, tensor
from ..trace.value import Value

# these work on floats and Values alike
_exp, _log, _relu, _softplus, _maximum = (
    FUNCTIONS[n] for n in ("exp", "log", "relu", "softplus", "maximum")
)

# ---------------------------------------------------------------- Module


class Module:
    """Base class: ``parameters()``, ``zero_grad()``, ``state_dict()`` from the attributes."""

    def zero_grad(self) -> None:
        """Set every parameter's ``.grad`` to 0."""
        for p in self.parameters():
            p.grad = 0.0

    def parameters(self) -> list[Value]:
        """Every parameter Value, in the order the attributes were set."""
        return [p for _, p in self.named_parameters()]

    def named_parameters(self) -> list[tuple[str, Value]]:
        """``(name, Value)`` for every parameter, e.g. ``('0.weight[1,0]', Value)``."""
        out, seen = [], set()
        for name, group in self._groups():
            if isinstance(group, Value):
                items: Iterable[tuple[str, Value]] = [(name, group)]
            else:
                a = np.asarray(group, dtype=object)
                items = ((f"{name}[{','.join(map(str, i))}]", v) for i, v in np.ndenumerate(a))
            for n, v in items:
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append((n, v))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The parameters' values as plain floats and nested float lists, by name."""
        return {
            name: g.data if isinstance(g, Value) else data(g).tolist()
            for name, g in self._groups()
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set the parameter values from ``state_dict()`` output (names and shapes must match)."""
        groups = dict(self._groups())
        missing, unexpected = groups.keys() - state.keys(), state.keys() - groups.keys()
        if missing or unexpected:
            raise KeyError(
                f"state_dict does not match this {type(self).__name__}: "
                f"missing {sorted(missing)}, unexpected {sorted(unexpected)}"
            )
        for name, group in groups.items():
            new = np.asarray(state[name], dtype=float)
            if isinstance(group, Value):
                if new.shape != ():
                    raise ValueError(f"{name}: expected a number, got shape {new.shape}")
                group.data = float(new)
                continue
            a = np.asarray(group, dtype=object)
            if new.shape != a.shape:
                raise ValueError(f"{name}: expected shape {a.shape}, got {new.shape}")
            for v, x in zip(a.flat, new.flat):
                v.data = float(x)

    def _groups(self, prefix: str = "", seen: set[int] | None = None) -> Iterator[tuple[str, Any]]:
        """``(name, Value or list/array of Values)`` for each attribute holding parameters."""
        seen = set() if seen is None else seen
        if id(self) in seen:
            return
        seen.add(id(self))
        for name, attr in self._children():
            yield from _walk(attr, prefix + name, seen)

    def _children(self) -> Iterable[tuple[str, Any]]:
        return ((k, v) for k, v in vars(self).items() if not k.startswith("_"))

    def forward(self, *args: Any) -> Any:
        """What the module computes; subclasses define it (or ``__call__``)."""
        raise NotImplementedError(f"{type(self).__name__} must define forward() or __call__()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)


def _is_param(v: Any) -> bool:
    return isinstance(v, Value) and v.is_leaf


def _walk(obj: Any, name: str, seen: set[int]) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, Value):
        if _is_param(obj):
            yield name, obj
    elif isinstance(obj, Module):
        yield from obj._groups(name + ".", seen)
    elif isinstance(obj, np.ndarray):
        if obj.dtype == object and obj.size and all(_is_param(v) for v in obj.flat):
            yield name, obj
    elif isinstance(obj, (list, tuple)):
        if obj and all(_is_param(v) for v in obj):
            yield name, list(obj)
        else:
            for i, item in enumerate(obj):
                yield from _walk(item, f"{name}.{i}", seen)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield from _walk(item, f"{name}.{key}", seen)


# ---------------------------------------------------------------- micrograd


class Neuron(Module):
    """micrograd's neuron: ``relu(w . x + b)`` (or linear), weights uniform(-1, 1)."""

    def __init__(self, nin: int, nonlin: bool = True) -> None:
        self.w = [Value(random.uniform(-1, 1)) for _ in range(nin)]
        self.b = Value(0)
        self.nonlin = nonlin

    def __call__(self, x: Iterable[Any]) -> Value:
        act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)
        return act.relu() if self.nonlin else act

    def parameters(self) -> list[Value]:
        """The weights, then the bias."""
        return self.w + [self.b]

    def __repr__(self) -> str:
        return f"{'ReLU' if self.nonlin else 'Linear'}Neuron({len(self.w)})"


class Layer(Module):
    """micrograd's layer: ``nout`` neurons; one output is returned as a Value, not a list."""

    def __init__(self, nin: int, nout: int, **kwargs: Any) -> None:
        self.neurons = [Neuron(nin, **kwargs) for _ in range(nout)]

    def __call__(self, x: Iterable[Any]) -> Value | list[Value]:
        out = [n(x) for n in self.neurons]
        return out[0] if len(out) == 1 else out

    def parameters(self) -> list[Value]:
        """Every neuron's parameters, in order."""
        return [p for n in self.neurons for p in n.parameters()]

    def __repr__(self) -> str:
        return f"Layer of [{', '.join(str(n) for n in self.neurons)}]"


class MLP(Module):
    """micrograd's multi-layer perceptron: ReLU hidden layers, a linear last layer."""

    def __init__(self, nin: int, nouts: list[int]) -> None:
        sz = [nin] + list(nouts)
        self.layers = [
            Layer(sz[i], sz[i + 1], nonlin=i != len(nouts) - 1) for i in range(len(nouts))
        ]

    def __call__(self, x: Iterable[Any]) -> Value | list[Value]:
        for layer in self.layers:
            x = layer(x)
        return x

    def parameters(self) -> list[Value]:
        """Every layer's parameters, in order."""
        return [p for layer in self.layers for p in layer.parameters()]

    def __repr__(self) -> str:
        return f"MLP of [{', '.join(str(layer) for layer in self.layers)}]"


# ---------------------------------------------------------------- PyTorch style


class ModuleList(Module):
    """A list of modules whose parameters are found (``layers.0.weight`` ...)."""

    def __init__(self, modules: Iterable[Any] = ()) -> None:
        self._list = list(modules)

    def _children(self) -> Iterable[tuple[str, Any]]:
        return ((str(i), m) for i, m in enumerate(self._list))

    def append(self, module: Any) -> ModuleList:
        """Add ``module`` at the end."""
        self._list.append(module)
        return self

    def extend(self, modules: Iterable[Any]) -> ModuleList:
        """Add ``modules`` at the end."""
        self._list.extend(modules)
        return self

    def __getitem__(self, i: int) -> Any:
        return self._list[i]

    def __len__(self) -> int:
        return len(self._list)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._list)

    def __repr__(self) -> str:
        inner = "".join(f"\n  ({i}): {m!r}" for i, m in enumerate(self._list))
        return f"{type(self).__name__}({inner}\n)" if inner else f"{type(self).__name__}()"


class Sequential(ModuleList):
    """Modules applied one after the other."""

    def __init__(self, *modules: Callable[[Any], Any]) -> None:
        super().__init__(modules)

    def forward(self, x: Any) -> Any:
        """Each module applied to the previous one's output."""
        for m in self._list:
            x = m(x)
        return x


class Linear(Module):
    """``x @ weight.T + bias`` with PyTorch's init: uniform(-1/sqrt(nin), 1/sqrt(nin))."""

    def __init__(self, nin: int, nout: int, bias: bool = True) -> None:
        k = 1.0 / math.sqrt(nin)
        self.in_features, self.out_features = nin, nout
        self.weight = tensor([[random.uniform(-k, k) for _ in range(nin)] for _ in range(nout)])
        self.bias = tensor([random.uniform(-k, k) for _ in range(nout)]) if bias else None

    def forward(self, x: Any) -> ValueArray:
        """``x`` (``nin`` numbers or Values, or a batch of rows) through the layer."""
        x = asarray(x)
        if x.ndim == 0:
            x = x.reshape(1)
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"Linear({self.in_features}, {self.out_features}) got an input of shape "
                f"{x.shape}; its last dimension must be {self.in_features}"
            )
        y = x @ self.weight.T
        return y if self.bias is None else y + self.bias

    def __repr__(self) -> str:
        return (
            f"Linear(in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None})"
        )


class _Elementwise(Module):
    op = ""

    def forward(self, x: Any) -> Any:
        """The op applied to a Value, or to each element of a list or array."""
        return getattr(x if isinstance(x, Value) else asarray(x), self.op)()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ReLU(_Elementwise):
    """Element-wise ``max(x, 0)``."""

    op = "relu"


class Tanh(_Elementwise):
    """Element-wise ``tanh``."""

    op = "tanh"


class Sigmoid(_Elementwise):
    """Element-wise ``1 / (1 + exp(-x))``."""

    op = "sigmoid"


# ---------------------------------------------------------------- losses


class _Loss(Module):
    """A loss over predictions and targets of matching length, with a reduction."""

    def __init__(self, reduction: str = "mean") -> None:
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
        self.reduction = reduction

    def term(self, p: Any, t: Any) -> Value:
        """The loss of one prediction ``p`` against its target ``t``."""
        raise NotImplementedError

    def forward(self, input: Any, target: Any) -> Any:
        """The loss of ``input`` (a Value, a list or an array) against ``target``."""
        single = not isinstance(input, (list, tuple, np.ndarray))
        preds = asarray(input)
        targets = np.asarray(target, dtype=object)
        if targets.size != preds.size:
            raise ValueError(
                f"{type(self).__name__}: {preds.size} prediction(s) but {targets.size} "
                "target(s); give one target per prediction (a number for a single one)"
            )
        terms = [self.term(p, _number(t)) for p, t in zip(preds.flat, targets.flat)]
        return _reduce(terms, self.reduction, preds.shape, single)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reduction={self.reduction!r})"


def _number(t: Any) -> Any:
    return t if isinstance(t, Value) else float(t)


def _total(terms: list[Any]) -> Any:
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def _reduce(terms: list[Any], reduction: str, shape: tuple, single: bool) -> Any:
    if reduction == "none":
        if single:
            return terms[0]
        out = np.empty(len(terms), dtype=object)
        out[:] = terms
        return out.reshape(shape).view(ValueArray)
    if not terms:
        raise ValueError("a loss over no predictions is undefined; pass at least one")
    total = _total(terms)
    return total if reduction == "sum" or len(terms) == 1 else total / len(terms)


class MSELoss(_Loss):
    """Mean squared error ``(p - t)**2``."""

    def term(self, p: Any, t: Any) -> Value:
        """``(p - t)**2``."""
        d = p - t
        return d * d


class BCELoss(_Loss):
    """Binary cross-entropy of probabilities ``p`` in (0, 1); logs clamped at -100 as PyTorch."""

    def term(self, p: Any, t: Any) -> Value:
        """``-(t log p + (1 - t) log(1 - p))``; a term whose weight is 0 is left out."""
        loss = 0.0
        if not (isinstance(t, float) and t == 0.0):
            loss = loss - t * _maximum(_log(p), -100.0)
        if not (isinstance(t, float) and t == 1.0):
            loss = loss - (1.0 - t) * _maximum(_log(1.0 - p), -100.0)
        return loss


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of ``sigmoid(x)``, computed stably as ``softplus(x) - t x``."""

    def term(self, p: Any, t: Any) -> Value:
        """``softplus(x) - t x``."""
        return _softplus(p) - t * p


class HingeLoss(_Loss):
    """The max-margin loss of micrograd's demo: ``relu(1 - y * score)``, labels in {-1, +1}."""

    def term(self, p: Any, t: Any) -> Value:
        """``relu(1 - t p)``."""
        return _relu(1.0 - t * p)


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits against an integer class (stable log-sum-exp)."""

    def forward(self, input: Any, target: Any) -> Any:
        """``logsumexp(z) - z[target]`` for one row of logits, or for each row of a batch."""
        z = asarray(input)
        if z.ndim == 1:
            return _reduce([self._one(list(z), target)], self.reduction, (), True)
        if z.ndim != 2:
            raise ValueError(
                f"CrossEntropyLoss takes logits of shape (C,) or (N, C), not {z.shape}"
            )
        targets = np.asarray(target).reshape(-1)
        if targets.size != z.shape[0]:
            raise ValueError(f"{z.shape[0]} rows of logits but {targets.size} targets")
        terms = [self._one(list(row), t) for row, t in zip(z, targets)]
        return _reduce(terms, self.reduction, (len(terms),), False)

    @staticmethod
    def _one(logits: list[Any], target: Any) -> Any:
        k = int(target)
        if k != target or not 0 <= k < len(logits):
            raise ValueError(
                f"target must be a class index in 0..{len(logits) - 1}, not {target!r}"
            )
        # shifting by the largest logit keeps exp from overflowing; a chain of maximum
        # (not Python's max, whose comparisons are guards, or .data, a number of a
        # trace): the result's derivative through the shift is zero
        m = logits[0]
        for v in logits[1:]:
            m = _maximum(m, v)
        return _log(_total([_exp(v - m) for v in logits])) + m - logits[k]
