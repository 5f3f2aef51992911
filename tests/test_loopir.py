"""The loop IR: a folded program as data, checked against the unrolled tape.

Every program is run by its own interpreter and compared with the
interpreter on the tape it folds (the same primitives in the same order, so
the numbers agree exactly), for hand-written loops, their adjoints, and
random loop bodies with branches and per-repetition constants.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import adcompile as ad
from adcompile.diff import interpret
from adcompile.diff.reverse import grad_tape
from adcompile.ir.passes import hoist_constants
from adcompile.ir.tape import Param
from adcompile.loops import build as loopbuild
from adcompile.loops import ir as loopir
from adcompile.loops.segments import Segment, find_segments


def rosen(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def fold(tape, params, **kw):
    return loopbuild.build(tape, find_segments(tape, params, **kw), params, "f")


def test_rosenbrock_and_its_adjoint_fold_to_loops_that_run_exactly():
    x = np.linspace(-1.2, 1.1, 40)
    params = [Param("x", 40)]
    tape = ad.trace(rosen, x)
    gtape = grad_tape(tape)
    for t in (tape, gtape):
        program = fold(t, params)
        ok, out = program.run([x])
        assert ok and out == interpret.evaluate(t, x)
        loops = [it for it in program.items if isinstance(it, loopir.Loop)]
        assert loops and all(lp.trips >= 36 for lp in loops)
        assert program.statements < t.n_ops / 8
    # the gradient is the hand-derived one
    _, out = fold(gtape, params).run([x])
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    np.testing.assert_allclose(out[1:], g, rtol=1e-12)


def test_body_reads_are_named_operands():
    x = np.linspace(-1.0, 1.0, 20)
    params = [Param("x", 20)]
    program = fold(ad.trace(rosen, x), params)
    (loop,) = [it for it in program.items if isinstance(it, loopir.Loop)]
    kinds = {type(r) for r in loop.reads}
    assert kinds == {loopir.Arg, loopir.Prev}
    strides = [r.index.c1 for r in loop.reads if isinstance(r, loopir.Arg)]
    assert len(strides) >= 2 and set(strides) == {1}  # x[i], x[i + 1] ...
    (prev,) = [r for r in loop.reads if isinstance(r, loopir.Prev)]
    assert loop.body.nodes[prev.slot].op.name == "add"  # the accumulator
    text = str(program)
    assert "loop i in range(" in text and "input x[i + 1]" in text and "input prev b" in text


def test_adjoint_loop_reads_forward_values_backwards():
    x = np.linspace(-1.0, 1.0, 20)
    params = [Param("x", 20)]
    program = fold(grad_tape(ad.trace(rosen, x)), params)
    loops = [it for it in program.items if isinstance(it, loopir.Loop)]
    backwards = [r for lp in loops for r in lp.reads if isinstance(r, loopir.At)]
    assert backwards and all(r.index.c1 < 0 for r in backwards)
    assert " - i]" in str(program)


def test_per_repetition_constants_become_a_column():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + x[i] * (i + 1.5) + ad.sin(x[i])
        return s

    x = np.linspace(0.1, 1.0, 12)
    params = [Param("x", 12)]
    # constants to the front first, as the pipeline does (emit.fold): a constant Value
    # cached by an earlier trace (trace.value._CONSTS) is recorded where it was made,
    # which would split the loop where this test's own constants are interleaved
    tape = hoist_constants(ad.trace(f, x))
    program = fold(tape, params)
    ok, out = program.run([x])
    assert ok and out == interpret.evaluate(tape, x)
    reads = [r for it in program.items if isinstance(it, loopir.Loop) for r in it.reads]
    (col,) = [r for r in reads if isinstance(r, loopir.Column)]
    first = col.values[0] - 1.5  # the repetition the loop starts at: i + 1.5 from there
    assert first == int(first) and col.values == tuple(np.arange(len(col.values)) + col.values[0])


def test_guards_inside_a_loop_are_checked_per_repetition():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            u = x[i] * 2.0  # (a computed value: its guard belongs to the loop)
            s = s + (u * u if u > 1.0 else -u)
        return s

    x = np.array([0.6, 0.7, 0.9, 0.9, 0.8, 0.8, 0.65, 0.6])
    params = [Param("x", 8)]
    tape = ad.trace(f, x)
    program = fold(tape, params, min_reps=2, min_saved=1)
    assert any(isinstance(it, loopir.Loop) and it.body.guards for it in program.items)
    ok, out = program.run([x])
    assert ok and out == interpret.evaluate(tape, x)
    flipped = x.copy()
    flipped[5] = 0.1  # another branch at one repetition
    ok, _ = program.run([flipped])
    assert not ok
    assert not interpret.guards_hold(tape, interpret.values(tape, flipped))


def test_an_mlp_and_its_gradient_fold_and_run_exactly():
    model = ad.nn.MLP(2, [4, 4, 1])
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 2))

    def loss(*args):
        out = 0.0
        for i in range(len(X)):
            out = out + (model([X[i, 0], X[i, 1]]) - 0.5) ** 2
        return out

    leaves = model.parameters()
    tape = ad.api.tracing.trace_call(loss, [], leaves)
    theta = np.array([p.data for p in leaves])
    params = [Param("params", len(leaves))]
    for t in (tape, grad_tape(tape)):
        program = fold(t, params)
        ok, out = program.run([theta])
        assert ok and out == interpret.evaluate(t, theta)
        assert any(isinstance(it, loopir.Loop) and it.trips >= 10 for it in program.items)


def test_segments_that_do_not_fit_are_refused():
    x = np.linspace(-1.0, 1.0, 20)
    tape = ad.trace(rosen, x)
    params = [Param("x", 20)]
    seg = find_segments(tape, params)[0]
    with pytest.raises(ValueError, match="overlaps another or does not fit"):
        loopbuild.build(tape, [seg, Segment(seg.start + 1, seg.size, 2)], params)
    with pytest.raises(ValueError, match="parameters hold 3 values"):
        loopbuild.build(tape, [seg], [Param("x", 3)])


UNARY = ["sin", "tanh", "exp", "sigmoid", "cos"]


@st.composite
def loops(draw) -> str:
    """``def f(x, c):`` with a loop over x whose body is random, with carried state."""
    lines = ["def f(x, c):", "    s = c", "    t = 0.5", "    for i in range(len(x) - 1):"]
    names = ["x[i]", "x[i + 1]", "s", "t", "c"]
    for k in range(draw(st.integers(1, 5))):
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        kind = draw(st.sampled_from(["bin", "unary", "if", "const"]))
        if kind == "bin":
            e = f"({a} {draw(st.sampled_from(['+', '-', '*']))} {b})"
        elif kind == "unary":
            e = f"ad.{draw(st.sampled_from(UNARY))}({a} * 0.3)"
        elif kind == "if":
            e = f"({a} * 0.5 if {b} > 0.1 else {a} - 0.25)"
        else:
            e = f"({a} * (i * 0.1 + 1.0))"
        lines.append(f"        u{k} = {e}")
        names.append(f"u{k}")
    lines.append(f"        s = ad.tanh(s + {names[-1]} * 0.5)")
    lines.append(f"        t = t * 0.9 + {draw(st.sampled_from(names))} * 0.1")
    lines.append("    return s + t")
    return "\n".join(lines)


@settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    src=loops(),
    x=st.lists(st.floats(-1, 1), min_size=6, max_size=12).map(np.array),
    c=st.floats(-1, 1),
)
def test_random_loop_bodies_run_as_the_tape_does(src, x, c):
    note(src)
    ns = {"ad": ad}
    exec(compile(src, "<loop>", "exec"), ns)
    tape = ad.trace(ns["f"], x, c)
    params = [Param("x", len(x)), Param("c", None)]
    point = [*x, c]
    for t in (tape, grad_tape(tape)):
        program = fold(t, params, min_reps=2, min_saved=1)
        ok, out = program.run([x, c])
        assert ok
        np.testing.assert_array_equal(out, interpret.evaluate(t, point))
        str(program)  # prints
