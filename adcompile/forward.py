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

from collections.abc import Sequence
from typing import Any

from .passes import simplify
from .reverse import grad_tape
from .tape import Tape, active_slots, forward_sweep, reverse_sweep, tangent_sweep
from .value import Value, build_tape, constant, gc_paused, recording

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


def _leaf(v: Any) -> Value:
    """A sweep's result as a Value (``None`` and numbers become constants)."""
    return v if isinstance(v, Value) else constant(0.0 if v is None else v)


def _replay(tape: Tape) -> tuple[list[Value], list[Any], list[tuple]]:
    """Fresh input Values, every slot's Value, and the guards over those Values."""
    inputs = [Value(0.5) for _ in tape.inputs]
    vals = forward_sweep(tape, inputs, const=constant)
    guards = [(g.cmp, vals[g.a], vals[g.b], g.expected, g.where) for g in tape.guards]
    return inputs, vals, guards


def _tape(
    outputs: Sequence[Any], inputs: Sequence[Value], guards: list[tuple], names: Sequence[str]
) -> Tape:
    return simplify(build_tape([_leaf(v) for v in outputs], inputs, guards, names))


def jvp_tape(tape: Tape, wrt: Sequence[int], suffix: str = "_t") -> Tape:
    """``[*outputs, *their tangents]`` of ``tape``; its inputs are the primal inputs,
    then one tangent per position in ``wrt`` (named after it, with ``suffix``)."""
    with gc_paused(), recording():
        inputs, vals, guards = _replay(tape)
        tangents = [Value(0.5) for _ in wrt]
        tan: list[Any] = [None] * len(vals)
        for p, t in zip(wrt, tangents):
            tan[tape.inputs[p]] = t
        tangent_sweep(tape, vals, tan)
        outs = [vals[o] for o in tape.outputs] + [tan[o] for o in tape.outputs]
        names = [*tape.names, *(tape.names[p] + suffix for p in wrt)]
        return _tape(outs, [*inputs, *tangents], guards, names)


def vjp_tape(tape: Tape, wrt: Sequence[int], suffix: str = "_ct") -> Tape:
    """``w^T J``: the derivatives of ``sum(w[o] * outputs[o])`` with respect to the
    inputs at ``wrt``; its inputs are the primal inputs, then one ``w`` per output."""
    with gc_paused(), recording():
        inputs, vals, guards = _replay(tape)
        seeds = [Value(0.5) for _ in tape.outputs]
        adj: list[Any] = [None] * len(vals)
        for o, w in zip(tape.outputs, seeds):
            adj[o] = w if adj[o] is None else adj[o] + w
        reverse_sweep(tape, vals, adj, active_slots(tape, [tape.inputs[p] for p in wrt]))
        outs = [adj[tape.inputs[p]] for p in wrt]
        names = [*tape.names, *(f"w{k}{suffix}" for k in range(len(seeds)))]
        return _tape(outs, [*inputs, *seeds], guards, names)


def jacobian_tape(
    tape: Tape, wrt: Sequence[int], outputs: Sequence[int] | None = None, mode: str = "auto"
) -> Tape:
    """The Jacobian of ``outputs`` (slots; default ``tape.outputs``) with respect to
    the inputs at positions ``wrt``: outputs ``J[o, p]`` in row-major order."""
    outs = list(tape.outputs if outputs is None else outputs)
    how = choose_mode(len(outs), len(wrt), mode)
    with gc_paused(), recording():
        inputs, vals, guards = _replay(tape)
        jac: list[list[Any]] = [[None] * len(wrt) for _ in outs]
        if how == "reverse":
            active = active_slots(tape, [tape.inputs[p] for p in wrt])
            for r, o in enumerate(outs):
                adj: list[Any] = [None] * len(vals)
                adj[o] = 1.0
                reverse_sweep(tape, vals, adj, active)
                for c, p in enumerate(wrt):
                    jac[r][c] = adj[tape.inputs[p]]
        else:
            for c, p in enumerate(wrt):
                tan: list[Any] = [None] * len(vals)
                tan[tape.inputs[p]] = 1.0
                tangent_sweep(tape, vals, tan)
                for r, o in enumerate(outs):
                    jac[r][c] = tan[o]
        new = _tape([x for row in jac for x in row], inputs, guards, tape.names)
    new.sweeps = how  # type: ignore[attr-defined]
    return new


def hessian_tape(tape: Tape, wrt: Sequence[int], output: int = 0) -> Tape:
    """The Hessian of ``tape.outputs[output]`` with respect to the inputs at ``wrt``
    (outputs ``H[i, j]`` row-major): forward sweeps over the gradient's tape."""
    g = grad_tape(tape, wrt=wrt, output=output)
    new = jacobian_tape(g, wrt, g.outputs[1:], mode="forward")
    new.sweeps = "forward over reverse"  # type: ignore[attr-defined]
    return new


def hvp_tape(tape: Tape, wrt: Sequence[int], output: int = 0) -> Tape:
    """``H v`` for the Hessian of ``tape.outputs[output]`` with respect to the inputs at
    ``wrt``: inputs are the primal inputs, then ``v`` (one per position in ``wrt``)."""
    g = grad_tape(tape, wrt=wrt, output=output)
    both = jvp_tape(g, wrt, suffix="_v")
    n = len(g.outputs)
    return simplify(Tape(both.nodes, both.inputs, both.outputs[n + 1 :], both.guards, both.names))


def permute_inputs(tape: Tape, order: Sequence[int]) -> Tape:
    """The same tape taking its inputs in another order (``order[k]`` is the
    position, among the old inputs, of the new input ``k``)."""
    tape.inputs = [tape.inputs[k] for k in order]
    tape.names = [tape.names[k] for k in order]
    return tape
