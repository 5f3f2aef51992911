"""Forward mode as a tape transform, and the derivative tapes made of both modes.

Each function here takes a primal tape and returns a new tape: the primal is
replayed on fresh tracing Values, a sweep (``tape.tangent_sweep`` forward,
``tape.reverse_sweep`` backward) runs on those Values, and what it recorded
is laid out as a tape again. So a Jacobian, a Hessian or a Hessian-vector
product is an ordinary tape, which the interpreter, the code generator and
SymPy all accept, exactly as the gradient of ``reverse.grad_tape`` is.

- ``jvp_tape``: the outputs and their directional derivatives (tangent inputs
  added after the primal inputs);
- ``jacobian_tape``: every output's derivative with respect to the chosen
  inputs, by reverse sweeps (one per output) or forward sweeps (one per
  input), whichever are fewer;
- ``hessian_tape``: forward over reverse, the Jacobian of the gradient;
- ``hvp_tape``: the Hessian times a vector without forming the Hessian: the
  tangent of the gradient tape along that vector.

The primal tape's guards carry over: a derivative tape is valid where the
primal's branches are.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..ir.ops import OPERATORS, OPS, Op
from ..ir.passes import prune, simplify
from ..ir.tape import (
    CONST,
    INPUT,
    Node,
    Tape,
    active_slots,
    forward_sweep,
    reverse_sweep,
    tangent_sweep,
)
from ..trace.mode import gc_paused, recording
from ..trace.tapes import build_tape
from ..trace.value import Value, constant

#: Which sweeps ``jacobian_tape`` uses: reverse (one per output), forward (one
#: per input), or the fewer of the two.
MODES = ("auto", "reverse", "forward")


def choose_mode(n_outputs: int, n_inputs: int, mode: str = "auto") -> str:
    """``"reverse"`` or ``"forward"``: as asked, or whichever needs fewer sweeps."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: choose one of {', '.join(map(repr, MODES))}")
    if mode != "auto":
        return mode
    return "reverse" if n_outputs <= n_inputs else "forward"


_BUILT_IN = frozenset(OPS.values())  # ops defined before any user's (rules on plain handles)


class _Slot:
    """A slot of a tape being extended: what a derivative rule computes with.

    Operators and ``ops.apply`` (through ``_apply``) append a node and return
    the new slot, so the op table's rules, run on slots, write the derivative
    straight into the new tape, without replaying the primal on Values.
    """

    __slots__ = ("rec", "i")

    def __init__(self, rec: _Slots, i: int) -> None:
        self.rec, self.i = rec, i

    def _apply(self, op: Op, args: Sequence[Any]) -> _Slot:
        return self.rec.record(op, args)


def _recorder(op: Op, reflected: bool = False) -> Callable[..., _Slot]:
    """``_Slot``'s method for the Python operator that records ``op``."""
    if op.arity == 1:
        return lambda self: self.rec.record(op, (self,))
    if reflected:
        return lambda self, o: self.rec.record(op, (o, self))
    return lambda self, o: self.rec.record(op, (self, o))


for _name, _op in OPERATORS.items():  # + - * / ** // % and unary -, abs()
    setattr(_Slot, f"__{_name}__", _recorder(_op))
    if _op.arity == 2:
        setattr(_Slot, f"__r{_name}__", _recorder(_op, reflected=True))


class _Slots:
    """The primal tape, copied, with what the sweeps record appended as nodes."""

    def __init__(self, tape: Tape) -> None:
        self.tape = tape
        self.nodes: list[Node] = list(tape.nodes)
        self.vals: list[Any] = [_Slot(self, i) for i in range(len(tape.nodes))]
        self.extra: list[int] = []
        self.consts: dict[tuple[float, float], int] = {}

    def slot(self, x: Any) -> int:
        """The slot of ``x``: a slot as it is, a number as a constant."""
        if isinstance(x, _Slot):
            return x.i
        x = float(x)
        key = (x, math.copysign(1.0, x))
        found = self.consts.get(key)
        if found is None:
            found = self.consts[key] = len(self.nodes)
            self.nodes.append(Node(CONST, (), x))
        return found

    def record(self, op: Op, args: Sequence[Any]) -> _Slot:
        self.nodes.append(Node(op, tuple(self.slot(a) for a in args), 0.0))
        return _Slot(self, len(self.nodes) - 1)

    def input(self) -> _Slot:
        self.extra.append(len(self.nodes))
        self.nodes.append(Node(INPUT))
        return _Slot(self, len(self.nodes) - 1)

    def finish(self, outputs: Sequence[Any], names: Sequence[str]) -> Tape:
        outs = [self.slot(0.0 if o is None else o) for o in outputs]
        inputs = [*self.tape.inputs, *self.extra]
        return simplify(Tape(self.nodes, inputs, outs, self.tape.guards, names))


class _Values:
    """The same, by replaying the primal on tracing Values: for tapes holding a
    user's primitive, whose rules may need Values."""

    def __init__(self, tape: Tape) -> None:
        self.inputs = [Value(0.5) for _ in tape.inputs]
        self.vals = forward_sweep(tape, self.inputs, const=constant)
        self.guards = [
            (g.cmp, self.vals[g.a], self.vals[g.b], g.expected, g.where) for g in tape.guards
        ]
        self.extra: list[Value] = []

    def input(self) -> Value:
        self.extra.append(Value(0.5))
        return self.extra[-1]

    def finish(self, outputs: Sequence[Any], names: Sequence[str]) -> Tape:
        outs = [o if isinstance(o, Value) else constant(0.0 if o is None else o) for o in outputs]
        return simplify(build_tape(outs, [*self.inputs, *self.extra], self.guards, names))


@contextlib.contextmanager
def _session(tape: Tape) -> Iterator[_Slots | _Values]:
    """Where a derivative of ``tape`` is recorded (see :class:`_Slots`)."""
    with gc_paused(), recording():
        if all(n.op in _BUILT_IN for n in tape.nodes if isinstance(n.op, Op)):
            yield _Slots(tape)
        else:
            yield _Values(tape)


def jvp_tape(tape: Tape, wrt: Sequence[int], suffix: str = "_t") -> Tape:
    """``[*outputs, *their tangents]`` of ``tape``; its inputs are the primal inputs,
    then one tangent per position in ``wrt`` (named after it, with ``suffix``)."""
    with _session(tape) as s:
        tan: list[Any] = [None] * len(tape.nodes)
        for p in wrt:
            tan[tape.inputs[p]] = s.input()
        tangent_sweep(tape, s.vals, tan)
        outs = [s.vals[o] for o in tape.outputs] + [tan[o] for o in tape.outputs]
        return s.finish(outs, [*tape.names, *(tape.names[p] + suffix for p in wrt)])


def vjp_tape(tape: Tape, wrt: Sequence[int], suffix: str = "_ct") -> Tape:
    """``w^T J``: the derivatives of ``sum(w[o] * outputs[o])`` with respect to the
    inputs at ``wrt``; its inputs are the primal inputs, then one ``w`` per output."""
    with _session(tape) as s:
        adj: list[Any] = [None] * len(tape.nodes)
        for o in tape.outputs:
            w = s.input()
            adj[o] = w if adj[o] is None else adj[o] + w
        reverse_sweep(tape, s.vals, adj, active_slots(tape, [tape.inputs[p] for p in wrt]))
        names = [*tape.names, *(f"w{k}{suffix}" for k in range(len(tape.outputs)))]
        return s.finish([adj[tape.inputs[p]] for p in wrt], names)


def gradient_tape(tape: Tape, wrt: Sequence[int], output: int = 0) -> Tape:
    """The gradient of ``tape.outputs[output]`` with respect to the inputs at ``wrt``
    (only the gradient: the code tape a second derivative starts from)."""
    with _session(tape) as s:
        adj: list[Any] = [None] * len(tape.nodes)
        adj[tape.outputs[output]] = 1.0
        reverse_sweep(tape, s.vals, adj, active_slots(tape, [tape.inputs[p] for p in wrt]))
        return s.finish([adj[tape.inputs[p]] for p in wrt], tape.names)


def jacobian_tape(
    tape: Tape, wrt: Sequence[int], outputs: Sequence[int] | None = None, mode: str = "auto"
) -> Tape:
    """The Jacobian of ``outputs`` (slots; default ``tape.outputs``) with respect to
    the inputs at positions ``wrt``: outputs ``J[o, p]`` in row-major order."""
    outs = list(tape.outputs if outputs is None else outputs)
    how = choose_mode(len(outs), len(wrt), mode)
    with _session(tape) as s:
        jac: list[list[Any]] = [[None] * len(wrt) for _ in outs]
        if how == "reverse":
            active = active_slots(tape, [tape.inputs[p] for p in wrt])
            for r, o in enumerate(outs):
                adj: list[Any] = [None] * len(tape.nodes)
                adj[o] = 1.0
                reverse_sweep(tape, s.vals, adj, active)
                for c, p in enumerate(wrt):
                    jac[r][c] = adj[tape.inputs[p]]
        else:
            for c, p in enumerate(wrt):
                tan: list[Any] = [None] * len(tape.nodes)
                tan[tape.inputs[p]] = 1.0
                tangent_sweep(tape, s.vals, tan)
                for r, o in enumerate(outs):
                    jac[r][c] = tan[o]
        new = s.finish([x for row in jac for x in row], tape.names)
    new.sweeps = how  # type: ignore[attr-defined]
    return new


def hessian_tape(tape: Tape, wrt: Sequence[int], output: int = 0) -> Tape:
    """The Hessian of ``tape.outputs[output]`` with respect to the inputs at ``wrt``
    (outputs ``H[i, j]`` row-major): forward sweeps over the gradient's tape."""
    g = gradient_tape(tape, wrt, output)
    new = jacobian_tape(g, wrt, mode="forward")
    new.sweeps = "forward over reverse"  # type: ignore[attr-defined]
    return new


def hvp_tape(tape: Tape, wrt: Sequence[int], output: int = 0) -> Tape:
    """``H v`` for the Hessian of ``tape.outputs[output]`` with respect to the inputs at
    ``wrt``: inputs are the primal inputs, then ``v`` (one per position in ``wrt``)."""
    g = gradient_tape(tape, wrt, output)
    both = jvp_tape(g, wrt, suffix="_v")
    n = len(g.outputs)
    return prune(Tape(both.nodes, both.inputs, both.outputs[n:], both.guards, both.names))


def permute_inputs(tape: Tape, order: Sequence[int]) -> Tape:
    """The same tape taking its inputs in another order (``order[k]`` is the
    position, among the old inputs, of the new input ``k``)."""
    tape.inputs = [tape.inputs[k] for k in order]
    tape.names = [tape.names[k] for k in order]
    return tape
