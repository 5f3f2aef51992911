"""Loop fusion (``adcompile.loopfuse``) and value code whose outputs loops write.

A fused program must compute exactly what the tape does (the same primitives
in the same order within a repetition): every check compares the fused
program's interpreter, and the compiled code, with the interpreter on the
unrolled tape, with NumPy, or with hand-derived gradients.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import adcompile as ad
from adcompile.diff import interpret
from adcompile.diff.reverse import grad_tape
from adcompile.emit.fold import loop_source
from adcompile.ir.tape import Param
from adcompile.loops import build as loopbuild
from adcompile.loops import ir as loopir
from adcompile.loops.fuse import fuse
from adcompile.loops.segments import find_segments


def rosen_numpy(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosen_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def programs(tape, params, **kw):
    """The program of ``tape`` unfused and fused."""
    segments = find_segments(tape, params, **kw)
    return loopbuild.build(tape, segments, params), fuse(loopbuild.build(tape, segments, params))


def n_loops(program) -> int:
    return sum(type(it) is loopir.Loop for it in program.items)


def test_numpy_rosenbrock_fuses_its_elementwise_loops_and_runs_exactly():
    x = np.linspace(-1.2, 1.1, 60)
    params = [Param("x", 60)]
    tape = ad.trace(rosen_numpy, x)
    for t in (tape, grad_tape(tape)):
        plain, fused = programs(t, params)
        assert n_loops(fused) < n_loops(plain)
        assert fused.run([x]) == plain.run([x])
        assert fused.run([x])[1] == interpret.evaluate(t, x)
    # seven elementwise loops (**, -, **, *, -, **, +) are one
    plain, fused = programs(tape, params)
    assert n_loops(plain) - n_loops(fused) == 6
    np.testing.assert_allclose(
        fuse(loopbuild.build(*_fold(grad_tape(tape), params))).run([x])[1][1:],
        rosen_grad(x),
        rtol=1e-12,
    )


def _fold(tape, params):
    return tape, find_segments(tape, params), params


def test_a_loop_reading_the_previous_repetition_of_another_is_not_fused_into_it():
    # y[i + 1] - y[i] reads y's repetition i + 1 at repetition i: after y's loop
    def f(x):
        y = np.sin(x) * 2.0
        return np.sum((y[1:] - y[:-1]) ** 2)

    x = np.linspace(-1.0, 2.0, 40)
    tape = ad.trace(f, x)
    for t in (tape, grad_tape(tape)):
        plain, fused = programs(t, [Param("x", 40)])
        assert fused.run([x])[1] == interpret.evaluate(t, x)
    y = np.sin(x) * 2.0
    value, grad = ad.value_and_grad(f)(x)
    assert abs(value - np.sum(np.diff(y) ** 2)) < 1e-12 * value
    d = np.diff(y)
    ref = np.zeros_like(x)
    ref[1:] += 2 * d
    ref[:-1] -= 2 * d
    np.testing.assert_allclose(grad, ref * 2.0 * np.cos(x), rtol=1e-12, atol=1e-14)


OPS = ["sin", "tanh", "exp", "cos"]


@st.composite
def numpy_chains(draw) -> str:
    """``def f(x, y):`` with random NumPy elementwise steps, some shifted."""
    lines = ["def f(x, y):", "    a = x", "    b = y"]
    names = ["a", "b"]
    for k in range(draw(st.integers(2, 7))):
        p, q = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        kind = draw(st.sampled_from(["bin", "unary", "shift", "where"]))
        if kind == "bin":
            e = f"{p} {draw(st.sampled_from(['+', '-', '*']))} {q}"
        elif kind == "unary":
            e = f"ad.{draw(st.sampled_from(OPS))}({p} * 0.3)"
        elif kind == "shift":  # reads another repetition: not fusable into its maker
            e = f"np.concatenate([{p}[1:], {p}[:1]]) * 0.5 + {q}"
        else:
            e = f"ad.maximum({p}, {q} * 0.5)"
        lines.append(f"    t{k} = {e}")
        names.append(f"t{k}")
    lines.append(f"    return np.sum({names[-1]} * {draw(st.sampled_from(names))})")
    return "\n".join(lines)


@settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(src=numpy_chains(), seed=st.integers(0, 2**16))
def test_random_numpy_chains_fused_run_as_the_tape_does(src, seed):
    note(src)
    ns = {"ad": ad, "np": np}
    exec(compile(src, "<chain>", "exec"), ns)
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=12), rng.normal(size=12)
    tape = ad.trace(ns["f"], x, y)
    params = [Param("x", 12), Param("y", 12)]
    for t in (tape, grad_tape(tape)):
        plain, fused = programs(t, params, min_reps=2, min_saved=1)
        ok, out = fused.run([x, y])
        assert ok and fused.run([x, y]) == plain.run([x, y])
        np.testing.assert_array_equal(out, interpret.evaluate(t, [*x, *y]))
        str(fused)  # prints


def test_value_code_of_a_gradient_tape_writes_its_outputs_in_its_loops():
    # a gradient tape's outputs are one per repetition of its last adjoint loop:
    # the loop writes them, not one statement per element
    n = 2000
    x = np.linspace(-1.2, 1.1, n)
    gt = grad_tape(ad.trace(rosen_numpy, x))
    loops = loop_source(gt, [Param("x", n)], None, "g", "", 1000)
    assert loops is not None
    body = [ln for ln in loops.source.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(body) < 60
    ns: dict = {}
    exec(compile(loops.source, "<g>", "exec"), ns)
    v = np.empty(max(loops.code.work_size, 1))
    out = np.empty(loops.n_out)
    assert ns["g"](x, v, loops.code.columns, out)
    assert abs(out[0] - rosen_numpy(x)) < 1e-12 * out[0]
    np.testing.assert_allclose(out[1:], rosen_grad(x), rtol=1e-12)


def test_jit_of_an_array_output_copies_runs_of_outputs_in_loops():
    # outputs read as runs of one loop's stored values (every other one, then all),
    # of an argument and of a constant: each run one loop (or a slice), not one
    # statement per element; the values NumPy's
    def f(x):
        y = np.tanh(x) * 2.0
        return np.concatenate([y[::2], x[:30], np.zeros(20), y])

    x = np.linspace(-2.0, 2.0, 200)
    jf = ad.jit(f)
    y = np.tanh(x) * 2.0
    np.testing.assert_allclose(
        jf(x), np.concatenate([y[::2], x[:30], np.zeros(20), y]), rtol=1e-15
    )
    writes = [ln for ln in jf.source.splitlines() if "out[" in ln]
    assert len(writes) < 10, jf.source
    x2 = np.linspace(-1.0, 3.0, 200)  # a fresh point, the same code
    y2 = np.tanh(x2) * 2.0
    np.testing.assert_allclose(jf(x2), np.concatenate([y2[::2], x2[:30], np.zeros(20), y2]))
