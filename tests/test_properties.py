"""Random expression DAGs over every op: backward() vs finite differences and the interpreter.

A program is a list of nodes; each applies an op from ``OPS`` to earlier
nodes, the inputs or constants, so subexpressions are shared. Programs run on
Values (recording), on floats through NumPy's functions (the finite
difference reference) and, laid out as a tape, through the interpreter.
"""

from __future__ import annotations

import math

import numpy as np
from conftest import NUMPY_REF, numpy_ref
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import adcompile as ad
from adcompile.diff import interpret
from adcompile.ir.ops import OPS
from adcompile.trace.tapes import build_tape

NAMES = sorted(OPS)
N_INPUTS = 3
MAX_DEPTH = 6
CONSTS = [0.5, 2.0, -1.5, 3.0]

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


@st.composite
def programs(draw):
    """Nodes ``(op name, operands)``; operands: ``("x", i)``, ``("c", value)``, ``("n", j)``."""
    depth = {("x", i): 0 for i in range(N_INPUTS)}
    pool = list(depth)
    nodes = []
    for j in range(draw(st.integers(1, 10))):
        name = draw(st.sampled_from(NAMES))
        usable = [r for r in pool if depth[r] < MAX_DEPTH]
        args = []
        for _ in range(OPS[name].arity):
            if draw(st.integers(0, 5)) == 0:
                args.append(("c", draw(st.sampled_from(CONSTS))))
            else:  # counted from the newest, so long chains and reuse are common
                args.append(usable[-1 - draw(st.integers(0, len(usable) - 1))])
        nodes.append((name, tuple(args)))
        ref = ("n", j)
        depth[ref] = 1 + max((depth.get(a, 0) for a in args), default=0)
        pool.append(ref)
    return nodes


def run(program, inputs, apply):
    """Every node's value; ``apply(name, *args)`` applies one op."""
    vals = []
    for name, args in program:
        operands = [
            inputs[i] if kind == "x" else (i if kind == "c" else vals[i]) for kind, i in args
        ]
        vals.append(apply(name, *operands))
    return vals


def apply_value(name, *args):
    return getattr(ad, name)(*args)


def apply_float(name, *args):
    if name in NUMPY_REF:
        return numpy_ref(name, *args)
    return OPS[name].eval(*map(float, args))


def show(program) -> str:
    def operand(a):
        kind, i = a
        return f"x{i}" if kind == "x" else (repr(i) if kind == "c" else f"n{i}")

    return "\n".join(
        f"n{j} = {name}({', '.join(operand(a) for a in args)})"
        for j, (name, args) in enumerate(program)
    )


inputs = st.lists(
    st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False),
    min_size=N_INPUTS,
    max_size=N_INPUTS,
)
directions = st.integers(0, 2**32 - 1).map(
    lambda seed: np.random.default_rng(seed).standard_normal(N_INPUTS)
)


def no_kink_near(program, xs, d, h=1e-4) -> bool:
    """Each kinked node is linear-looking on [x - h d, x + h d] (no kink, no jump), and
    its operands on one side of its kinks there (``Op.switch``: one sign, not 0; at
    ``x % y`` with ``x = 0`` both sides may look alike while the derivative jumps)."""
    points = [list(np.asarray(xs) + t * np.asarray(d)) for t in (-h, 0, h)]
    at = [run(program, p, apply_float) for p in points]
    for j, (name, args) in enumerate(program):
        if OPS[name].smooth:
            continue
        signs = set()
        for p, vals in zip(points, at):
            ops = [p[i] if kind == "x" else (i if kind == "c" else vals[i]) for kind, i in args]
            signs.add(np.sign(OPS[name].switch(*ops)))
        if len(signs) > 1 or 0.0 in signs:
            return False
        left = (at[1][j] - at[0][j]) / h
        right = (at[2][j] - at[1][j]) / h
        if not (math.isfinite(left) and math.isfinite(right)):
            return False
        if abs(right - left) > 1e-2 * (abs(left) + abs(right)) + 1e-12:
            return False
    return True


@SETTINGS
@given(programs(), inputs, directions)
def test_backward_matches_finite_differences(program, xs, d):
    note(show(program))
    d = d / np.linalg.norm(d)
    vs = [ad.Value(x) for x in xs]
    vals = run(program, vs, apply_value)
    out = vals[-1] if isinstance(vals[-1], ad.Value) else ad.Value(vals[-1])
    assume(math.isfinite(out.data) and abs(out.data) < 1e4)
    out.backward()
    grad = np.array([v.grad for v in vs])
    # Bounded adjoints everywhere: otherwise large terms that cancel (expm1(x) / x at
    # tiny x) make the float gradient inexact however right the rules are.
    inner = [v for v in vals if isinstance(v, ad.Value)]
    adjoints = np.array([v.grad for v in vs + inner] + [v.data for v in inner])
    assume(np.isfinite(adjoints).all() and np.abs(adjoints).max() < 1e6)
    assume(np.abs(grad).max() < 1e4)
    assume(no_kink_near(program, xs, d))

    def f(z):
        return run(program, list(z), apply_float)[-1]

    x = np.asarray(xs)
    fd1 = (f(x + 1e-5 * d) - f(x - 1e-5 * d)) / 2e-5
    fd2 = (f(x + 2e-5 * d) - f(x - 2e-5 * d)) / 4e-5
    assume(math.isfinite(fd1) and abs(fd1 - fd2) <= 1e-6 * (1 + abs(fd1)))
    note(f"grad={grad.tolist()} d={d.tolist()} fd={fd1}")
    assert abs(grad @ d - fd1) <= 1e-5 * (1 + abs(fd1))


@SETTINGS
@given(programs(), inputs)
def test_interpreter_matches_backward(program, xs):
    note(show(program))
    vs = [ad.Value(x) for x in xs]
    out = run(program, vs, apply_value)[-1]
    assume(isinstance(out, ad.Value))  # not a float made of constants alone
    out.backward()
    tape = build_tape([out], vs)
    assert tape.n_ops <= len(program)
    value, grads = interpret.value_and_grad(tape, xs)
    np.testing.assert_allclose(value, out.data, rtol=1e-12, atol=0, equal_nan=True)
    np.testing.assert_allclose(grads, [v.grad for v in vs], rtol=1e-12, atol=0, equal_nan=True)
    np.testing.assert_allclose(
        interpret.evaluate(tape, xs), [out.data], rtol=1e-12, atol=0, equal_nan=True
    )
