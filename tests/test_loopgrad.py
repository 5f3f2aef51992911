"""Reverse mode on the loop IR, and the code printed from it.

The primal tape is folded first; each loop is differentiated once, as a
loop (``adcompile.loopgrad``), and printed (``adcompile.loopgen``). Both the
IR's interpreter and the generated code (run as plain Python here, and
through Numba by the public API) are checked against the unrolled adjoint
tape, against hand-derived gradients and against finite differences.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from test_fuzz import check_loop_pipeline
from test_loopir import loops

import adcompile as ad
from adcompile import pipeline
from adcompile.diff import interpret
from adcompile.diff.reverse import grad_tape
from adcompile.emit import loopgen
from adcompile.emit.codegen import module_source
from adcompile.ir.passes import hoist_constants
from adcompile.ir.tape import Param
from adcompile.loops import build as loopbuild
from adcompile.loops import generic as loopgeneric
from adcompile.loops import grad as loopgrad
from adcompile.loops import ir as loopir
from adcompile.loops.segments import find_segments


def rosen(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def rosen_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def chain(x):
    y = x[0]
    for i in range(1, len(x)):
        y = ad.sin(y) * x[i] + 0.5 * y
    return y


def program_of(f, params, *args, **kw):
    tape = hoist_constants(ad.trace(f, *args))
    return tape, loopbuild.build(tape, find_segments(tape, params, **kw), params, "f")


def run_generated(gp, params, args):
    code = loopgen.generate(gp, params, "f_vg")
    ns: dict = {}
    exec(compile(module_source([code.text]), "<loops>", "exec"), ns)
    n_out = 1 + sum(1 if params[p].size is None else params[p].size for p in gp.wrt)
    out = np.full(n_out, np.nan)
    flat = [np.asarray(a, float).ravel() if np.ndim(a) else float(a) for a in args]
    ok = ns["f_vg"](*flat, np.full(code.work_size, np.nan), code.columns, out)
    return ok, out, code


def test_rosenbrock_adjoint_is_one_backward_loop_with_the_hand_derived_gradient():
    x = np.linspace(-1.2, 1.1, 50)
    params = [Param("x", 50)]
    tape, program = program_of(rosen, params, x)
    gp = loopgrad.grad(program)
    (adj,) = [a for a in gp.adjoints if a is not None]
    assert adj.vjp.n_ops < 20  # the body's vjp, built once
    ok, got = gp.run([x])
    assert ok and got == interpret.evaluate(grad_tape(tape), x)  # the same numbers exactly
    np.testing.assert_allclose(got[1:], rosen_grad(x), rtol=1e-12)
    ok, out, code = run_generated(gp, params, [x])
    assert ok and list(out) == got
    assert code.text.count("for i in range(") == 2  # forward, then backward
    assert "range(48, -1, -1)" in code.text


def test_a_carried_value_s_cotangent_runs_back_through_the_repetitions():
    x = np.linspace(-0.9, 1.1, 30)
    params = [Param("x", 30)]
    tape, program = program_of(chain, params, x)
    gp = loopgrad.grad(program)
    ok, got = gp.run([x])
    assert ok
    np.testing.assert_allclose(got, interpret.evaluate(grad_tape(tape), x), rtol=1e-14)
    ok, out, _ = run_generated(gp, params, [x])
    np.testing.assert_allclose(out, got, rtol=1e-14)
    # finite differences, independent of every tape
    h = 1e-6
    for k in (0, 7, 29):
        e = np.zeros(30)
        e[k] = h
        fd = (chain(x + e) - chain(x - e)) / (2 * h)
        assert got[1 + k] == pytest.approx(fd, rel=1e-6, abs=1e-9)


def shifted(x):
    t, s = x[0], x[1]
    for i in range(12):
        t = ad.tanh(0.7 * t + 0.3 * s + 0.1 * x[i + 2])
        s = t
    return t + 0.5 * s


def test_two_prevs_of_one_slot_keep_their_own_starts_in_the_generated_code():
    """``t = g(t, s); s = t``: both read the last ``t``, one starting from ``t``,
    the other from ``s``; the generated loop gives each a local of its own."""
    x = np.linspace(-0.8, 0.9, 14)
    params = [Param("x", 14)]
    tape, program = program_of(shifted, params, x, min_reps=2, min_saved=1)
    (loop,) = [it for it in program.items if isinstance(it, loopir.Loop)]
    prevs = [r for r in loop.reads if isinstance(r, loopir.Prev)]
    assert len({r.slot for r in prevs}) < len(prevs)  # one slot, two starts
    assert len({r.init for r in prevs}) == len(prevs)
    gp = loopgrad.grad(program)
    ok, got = gp.run([x])
    assert ok
    np.testing.assert_allclose(got, interpret.evaluate(grad_tape(tape), x), rtol=1e-13)
    ok, out, _ = run_generated(gp, params, [x])
    assert ok
    np.testing.assert_allclose(out, got, rtol=1e-13, atol=1e-15)
    code = loopgen.generate(program, params, "f_v")
    ns: dict = {}
    exec(compile(module_source([code.text]), "<loops>", "exec"), ns)
    value = np.empty(1)
    assert ns["f_v"](x, np.empty(max(code.work_size, 1)), code.columns, value)
    assert value[0] == pytest.approx(shifted(x), rel=1e-13)


def test_only_the_asked_parameters_get_gradients_and_data_is_not_differentiated():
    rng = np.random.default_rng(1)
    X, y, w = rng.normal(size=(40, 2)), np.sign(rng.normal(size=40)), np.array([0.3, -0.2, 0.1])

    def loss(w, X, y):
        total = 0.0
        for i in range(len(y)):
            z = w[0] * X[i, 0] + w[1] * X[i, 1] + w[2]
            total = total + ad.log(1 + ad.exp(-y[i] * z))
        return total

    params = [Param("w", 3), Param("X", 80), Param("y", 40)]
    tape, program = program_of(loss, params, w, X, y)
    gp = loopgrad.grad(program, [0])
    ok, got = gp.run([w, X, y])
    expected = interpret.evaluate(grad_tape(tape, wrt=[0, 1, 2]), [*w, *X.ravel(), *y])
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    # hand-derived: d/dw sum log(1 + exp(-y z)) = -sum y x sigmoid(-y z)
    z = X @ w[:2] + w[2]
    s = 1 / (1 + np.exp(y * z))
    np.testing.assert_allclose(got[1:3], -(y * s) @ X, rtol=1e-12)
    assert got[3] == pytest.approx(-(y * s).sum(), rel=1e-12)
    ok, out, code = run_generated(gp, params, [w, X, y])
    np.testing.assert_allclose(out, got, rtol=1e-14)
    # a parameter read by every repetition is summed in a local, written once
    assert "out[1] = s" in code.text or "out[1] += s" in code.text


def test_argnums_in_another_order_and_scalars():
    def f(a, x):
        s = a
        for i in range(len(x)):
            s = ad.tanh(s * x[i] + a)
        return s

    x = np.linspace(-1, 1, 12)
    params = [Param("a", None), Param("x", 12)]
    tape, program = program_of(f, params, 0.4, x)
    gp = loopgrad.grad(program, [1, 0])
    ok, got = gp.run([0.4, x])
    expected = interpret.evaluate(grad_tape(tape, wrt=[*range(1, 13), 0]), [0.4, *x])
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    ok, out, _ = run_generated(gp, params, [0.4, x])
    np.testing.assert_allclose(out, got, rtol=1e-14)


def test_mlp_loops_and_straight_line_blocks_reverse_together():
    model = ad.nn.MLP(2, [4, 4, 1])
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 2))

    def loss(*args):
        out = 0.0
        for i in range(len(X)):
            out = out + (model([X[i, 0], X[i, 1]]) - 0.5) ** 2
        return out

    leaves = model.parameters()
    tape = hoist_constants(ad.api.tracing.trace_call(loss, [], leaves))
    theta = np.array([p.data for p in leaves])
    params = [Param("params", len(leaves))]
    program = loopbuild.build(tape, find_segments(tape, params), params)
    assert any(isinstance(it, loopir.Loop) for it in program.items)
    gp = loopgrad.grad(program)
    ok, got = gp.run([theta])
    np.testing.assert_allclose(got, interpret.evaluate(grad_tape(tape), theta), rtol=1e-12)
    ok, out, _ = run_generated(gp, params, [theta])
    np.testing.assert_allclose(out, got, rtol=1e-13)


def test_a_guard_inside_a_loop_fails_in_the_generated_code():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            u = x[i] * 2.0
            s = s + (u * u if u > 1.0 else -u)
        return s

    x = np.array([0.6, 0.7, 0.9, 0.9, 0.8, 0.8, 0.65, 0.6])
    params = [Param("x", 8)]
    tape, program = program_of(f, params, x, min_reps=2, min_saved=1)
    gp = loopgrad.grad(program)
    ok, out, code = run_generated(gp, params, [x])
    assert ok
    np.testing.assert_allclose(out[1:], 8 * x, rtol=1e-14)  # d(4 x^2)/dx
    assert "# guard:" in code.text
    flipped = x.copy()
    flipped[5] = 0.1
    ok, _, _ = run_generated(gp, params, [flipped])
    assert not ok


@settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    src=loops(),
    x=st.lists(st.floats(-1, 1), min_size=6, max_size=12).map(np.array),
    c=st.floats(-1, 1),
)
def test_random_loop_bodies_differentiate_as_the_unrolled_tape_does(src, x, c):
    note(src)
    ns = {"ad": ad}
    exec(compile(src, "<loop>", "exec"), ns)
    tape = ad.trace(ns["f"], x, c)
    params = [Param("x", len(x)), Param("c", None)]
    point = [*x, c]
    if not interpret.guards_hold(tape, interpret.values(tape, point)):
        return
    expected = interpret.evaluate(grad_tape(tape), point)
    check_loop_pipeline(tape, params, [x, c], expected)
    check_loop_pipeline(tape, params, [x, c], [expected[0], *expected[1:-1]], wrt=[0])


# ------------------------------------------------------------------ through the API


def test_value_and_grad_folds_before_differentiating_and_agrees_with_the_unrolled_path(
    monkeypatch,
):
    x = np.linspace(-1.2, 1.1, 300)
    vg = ad.value_and_grad(rosen)
    value, g = vg(x)
    assert "differentiated as loops" in vg.explanation
    assert value == pytest.approx(rosen(x), rel=1e-13)
    np.testing.assert_allclose(g, rosen_grad(x), rtol=1e-12)
    monkeypatch.setattr(pipeline, "LOOP_IR", False)
    old = ad.value_and_grad(rosen)
    v2, g2 = old(x)
    assert "differentiated as loops" not in old.explanation
    assert v2 == value
    np.testing.assert_allclose(g2, g, rtol=1e-14)


def test_parameters_named_like_the_generated_locals():
    def f(v, c, i):
        s = 0.0
        for k in range(len(v)):
            s = s + v[k] * c[k] + i
        return s

    rng = np.random.default_rng(3)
    v, c = rng.normal(size=100), rng.normal(size=100)
    value, (gv, gc, gi) = ad.value_and_grad(f, argnums=(0, 1, 2))(v, c, 0.5)
    assert value == pytest.approx(v @ c + 50.0, rel=1e-12)
    np.testing.assert_allclose(gv, c, rtol=1e-14)
    np.testing.assert_allclose(gc, v, rtol=1e-14)
    assert gi == pytest.approx(100.0)


def test_a_branch_taken_differently_traces_again_and_is_right():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + (x[i] ** 2 if x[i] > 0.0 else -x[i])
        return s

    vg = ad.value_and_grad(f)
    x = np.linspace(0.1, 1.0, 200)
    v, g = vg(x)
    assert "differentiated as loops" in vg.explanation
    np.testing.assert_allclose(g, 2 * x, rtol=1e-14)
    y = x.copy()
    y[::7] *= -1
    v, g = vg(y)
    assert vg.traces == 2
    assert v == pytest.approx(np.sum(np.where(y > 0, y**2, -y)), rel=1e-12)
    np.testing.assert_allclose(g, np.where(y > 0, 2 * y, -1.0), rtol=1e-14)


def test_jit_folds_the_value_alone():
    f = ad.jit(chain)
    x = np.linspace(-0.9, 1.1, 400)
    assert f(x) == pytest.approx(float(chain(x)), rel=1e-12)
    assert "differentiated" not in f.explanation and "for loops" in f.explanation


def test_the_unrolled_tape_is_made_when_a_nan_must_be_named():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + ad.log(x[i])  # (line 3 of f)
        return s

    vg = ad.value_and_grad(f, debug_nans=True)
    x = np.linspace(0.5, 1.5, 300)
    np.testing.assert_allclose(vg(x)[1], 1 / x, rtol=1e-14)
    x[17] = -1.0
    # compiling traced without source lines; naming the op traces again with them
    line = f"test_loopgrad.py:{f.__code__.co_firstlineno + 3}"
    with pytest.raises(ad.NonFiniteError, match=f"log.*{line}"):
        vg(x)


def _two_layer_hinge(relu):
    def loss(W1, b1, W2, b2, w3, X, y):
        h1 = relu(X @ W1.T + b1)
        h2 = relu(h1 @ W2.T + b2)
        return np.mean(relu(1 - y * (h2 @ w3)))

    return loss


def _two_layer_hinge_by_hand(W1, b1, W2, b2, w3, X, y):
    """Value and gradients (W1, b1, W2, b2, w3) by backpropagation by hand."""
    z1 = X @ W1.T + b1
    a1 = np.maximum(z1, 0)
    z2 = a1 @ W2.T + b2
    a2 = np.maximum(z2, 0)
    m = 1 - y * (a2 @ w3)
    ds = -y * (m > 0) / len(y)
    dw3 = a2.T @ ds
    dz2 = np.outer(ds, w3) * (z2 > 0)
    dW2, db2 = dz2.T @ a1, dz2.sum(0)
    dz1 = (dz2 @ W2) * (z1 > 0)
    dW1, db1 = dz1.T @ X, dz1.sum(0)
    return np.mean(np.maximum(m, 0)), (dW1, db1, dW2, db2, dw3)


def _two_layer_hinge_args(n, h=16):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(n, 2)), np.where(rng.normal(size=n) > 0, 1.0, -1.0)
    W1, b1 = rng.normal(size=(h, 2)), rng.normal(size=h)
    W2, b2, w3 = rng.normal(size=(h, h)) * 0.3, rng.normal(size=h), rng.normal(size=h)
    return W1, b1, W2, b2, w3, X, y


def test_many_short_loops_that_are_not_one_loop_go_to_the_interpreter_at_once():
    # a relu written as a choice (np.where on a comparison) keeps the Value or
    # puts the constant 0, so rows differ in which operands are constants: one
    # short loop per row, which the loop IR does not nest yet; the adjoint is
    # not searched for loops then (it would not fold either), and the
    # interpreter answers
    args = _two_layer_hinge_args(40)
    vg = ad.value_and_grad(
        _two_layer_hinge(lambda z: np.where(z > 0, z, 0)), argnums=(0, 1, 2, 3, 4)
    )
    vg.array_level = False  # (element by element: at array level the where is a select)
    value, grads = vg(*args)
    assert "interpreter" in vg.explanation and "not one loop" in vg.explanation
    ref_value, ref_grads = _two_layer_hinge_by_hand(*args)
    assert value == pytest.approx(ref_value, rel=1e-12)
    for got, want in zip(grads, ref_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def test_the_same_network_with_np_maximum_folds_and_keeps_its_argument_names_apart():
    # np.maximum on the traced arrays is the maximum op: every row has one
    # structure and the program is loops inside loops over n. The argument
    # named w3 is also the name of a nested loop's row base in the generated
    # code (w<n>), so it is renamed there
    vg = ad.value_and_grad(_two_layer_hinge(lambda z: np.maximum(z, 0)), argnums=(0, 1, 2, 3, 4))
    vg.array_level = False  # (its weights hold 338 numbers: array code otherwise)
    for n in (40, 27):
        args = _two_layer_hinge_args(n)
        value, grads = vg(*args)
        ref_value, ref_grads = _two_layer_hinge_by_hand(*args)
        assert value == pytest.approx(ref_value, rel=1e-12)
        for got, want in zip(grads, ref_grads):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)
    assert (
        "interpreter" not in vg.explanation and "Generic in the batch length n" in vg.explanation
    )
    assert "arg_w3" in vg.source and vg.traces == 1


# ------------------------------------------------------------------ one program in n


def test_lin_arithmetic_is_exact_and_prints_as_source():
    n_minus_1 = loopir.lin(-1, 1)
    assert str(n_minus_1) == "n - 1" and str(8 * n_minus_1 + 3) == "8 * n - 5"
    assert str(3 - n_minus_1) == "4 - n" and (n_minus_1 - n_minus_1) == 0
    assert (8 * n_minus_1 + 3) % 8 == 3 and str((8 * n_minus_1 + 3) // 8) == "n - 1"
    for n in (1, 7, 100):  # printed source evaluates to the same number
        assert eval(str(8 * n_minus_1 + 3), {"n": n}) == (8 * n_minus_1 + 3).at(n) == 8 * n - 5
    with pytest.raises(loopir.NotAffine):
        (n_minus_1 * 3) % 2  # depends on n's parity
    with pytest.raises(loopir.NotAffine):
        n_minus_1 * n_minus_1


def loss_over_rows(w, X, y):
    total = 0.0
    for i in range(len(y)):
        z = w[0] * X[i, 0] + w[1] * X[i, 1] + w[2]
        total = total + ad.log(1 + ad.exp(-y[i] * z))
    return total / len(y)


def programs_at(f, ks, rows):
    w, X, y = rows
    out = []
    for k in ks:
        params = [Param("w", 3), Param("X", 2 * k), Param("y", k)]
        tape = hoist_constants(ad.trace(f, w, X[:k], y[:k]))
        out.append(loopbuild.build(tape, find_segments(tape, params, min_saved=2), params, "f"))
    return out


def test_programs_at_three_lengths_become_one_in_n_that_runs_at_a_fourth():
    rng = np.random.default_rng(2)
    w, X, y = rng.normal(size=3), rng.normal(size=(40, 2)), np.sign(rng.normal(size=40))
    ks = (8, 9, 11)
    generic = loopgeneric.generalise(programs_at(loss_over_rows, ks, (w, X, y)), ks)
    assert generic is not None
    (loop,) = [it for it in generic.items if isinstance(it, loopir.Loop)]
    assert isinstance(loop.trips, loopir.Lin)  # n - something
    mean = [
        r
        for it in generic.items
        if isinstance(it, loopir.Block)
        for _, rs in it.nodes
        for r in rs
        if isinstance(r, loopir.Lit) and isinstance(r.value, loopir.NFloat)
    ]
    assert mean and "/ n" in repr(mean[0].value) or "* n" in repr(mean[0].value)
    gp = loopgrad.grad(generic, [0])
    params = generic.params
    code = loopgen.generate(gp, params, "f_vg", "", ks)
    ns: dict = {}
    exec(compile(module_source([code.text]), "<generic>", "exec"), ns)
    for n in (16, 23, 40):  # lengths it was not traced at
        out = np.empty(4)
        work = code.work_size.at(n) if isinstance(code.work_size, loopir.Lin) else code.work_size
        ok = ns["f_vg"](n, w, X[:n].ravel(), y[:n], np.empty(max(work, 1)), code.columns, out)
        assert ok
        z = X[:n] @ w[:2] + w[2]
        s = 1 / (1 + np.exp(y[:n] * z))
        assert out[0] == pytest.approx(np.mean(np.log1p(np.exp(-y[:n] * z))), rel=1e-12)
        np.testing.assert_allclose(out[1:3], -(y[:n] * s) @ X[:n] / n, rtol=1e-11)
        assert out[3] == pytest.approx(-(y[:n] * s).sum() / n, rel=1e-11)


def test_programs_that_differ_by_more_than_numbers_are_not_one():
    def first8(w, X, y):  # rows after the 8th are treated differently
        total = 0.0
        for i in range(len(y)):
            z = w[0] * X[i, 0] + w[1] * X[i, 1] + w[2]
            total = total + (ad.tanh(z) if i < 8 else z * y[i])
        return total

    rng = np.random.default_rng(3)
    rows = rng.normal(size=3), rng.normal(size=(40, 2)), np.sign(rng.normal(size=40))
    assert loopgeneric.generalise(programs_at(first8, (8, 9, 11), rows), (8, 9, 11)) is None
    assert loopgeneric.generalise(programs_at(loss_over_rows, (8, 9, 11), rows), (8, 9, 11))


@settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(src=loops(), c=st.floats(-1, 1))
def test_random_loops_generic_in_n_agree_with_the_unrolled_tape_at_other_lengths(src, c):
    note(src)
    ns = {"ad": ad}
    exec(compile(src, "<loop>", "exec"), ns)
    f = ns["f"]
    x = np.sin(np.arange(1.0, 31.0))  # 30 values in (-1, 1)
    ks = (8, 9, 11)
    programs = []
    for k in ks:
        params = [Param("x", k), Param("c", None)]
        tape = hoist_constants(ad.trace(f, x[:k], c))
        segments = find_segments(tape, params, min_reps=2, min_saved=1)
        programs.append(loopbuild.build(tape, segments, params, "f"))
    generic = loopgeneric.generalise(programs, ks)
    if generic is None:  # another structure at another length: the caller traces as it is
        return
    gp = loopgrad.grad(generic, [1])  # by c: x is the batch, as the API differentiates
    try:
        code = loopgen.generate(gp, generic.params, "f_vg", "", ks)
    except loopir.NotAffine:
        return
    ns2: dict = {}
    exec(compile(module_source([code.text]), "<generic>", "exec"), ns2)
    for n in (10, 17, 30):
        tape = ad.trace(f, x[:n], c)
        point = [*x[:n], c]
        if not interpret.guards_hold(tape, interpret.values(tape, point)):
            continue
        expected = interpret.evaluate(grad_tape(tape, wrt=[n]), point)
        work = code.work_size.at(n) if isinstance(code.work_size, loopir.Lin) else code.work_size
        out = np.empty(len(expected))
        if not ns2["f_vg"](n, x[:n], c, np.empty(max(work, 1)), code.columns, out):
            # a branch taken otherwise at this length than at those traced: the caller
            # traces again (a program without branches must never say so)
            assert tape.guards
            continue
        np.testing.assert_allclose(out, expected, rtol=1e-11, atol=1e-13)


# ------------------------------------------------------------------ loops inside loops


def nested_pipeline(f, params, args, wrt=None, min_ops=8):
    """Fold f's primal, fold each loop body in turn, differentiate, print and run
    the code as plain Python: (outputs, the unrolled adjoint tape's, program)."""
    tape = hoist_constants(ad.trace(f, *args))
    program = loopbuild.build(tape, find_segments(tape, params), params, "f")
    for it in program.items:
        if isinstance(it, loopir.Loop):
            it.inner = loopbuild.nest(it, params, min_ops=min_ops)
    gp = loopgrad.grad(program, wrt)
    ok, out, code = run_generated(gp, params, args)
    assert ok
    point = [v for a in args for v in np.ravel(a)]
    sizes = [1 if p.size is None else p.size for p in params]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    wrt = range(len(params)) if wrt is None else wrt
    positions = [q for w in wrt for q in range(starts[w], starts[w + 1])]
    expected = interpret.evaluate(grad_tape(tape, wrt=positions), point)
    return out, expected, program, code


def test_an_mlp_over_examples_nests_its_neurons_and_matches_the_unrolled_adjoint():
    h, n = 6, 10
    rng = np.random.default_rng(7)
    W1, b1 = rng.normal(size=(h, 2)), rng.normal(size=h)
    W2, b2, w3 = rng.normal(size=(h, h)) * 0.4, rng.normal(size=h), rng.normal(size=h)
    theta = np.concatenate([W1.ravel(), b1, W2.ravel(), b2, w3])
    X, y = rng.normal(size=(n, 2)), np.where(rng.normal(size=n) > 0, 1.0, -1.0)

    def loss(t, X, y):
        total = 0.0
        for i in range(len(y)):
            h1 = [
                ad.relu(t[2 * k] * X[i, 0] + t[2 * k + 1] * X[i, 1] + t[2 * h + k])
                for k in range(h)
            ]
            o = 3 * h + h * h
            h2 = [
                ad.tanh(sum(t[3 * h + k * h + m] * h1[m] for m in range(h)) + t[o + k])
                for k in range(h)
            ]
            s = sum(t[o + h + k] * h2[k] for k in range(h))
            total = total + ad.softplus(-y[i] * s)
        return total / len(y)

    params = [Param("t", len(theta)), Param("X", 2 * n), Param("y", n)]
    out, expected, program, code = nested_pipeline(loss, params, [theta, X, y], wrt=[0])
    (outer,) = [it for it in program.items if isinstance(it, loopir.Loop) and it.trips == n]
    assert outer.inner is not None  # the neurons: loops inside the loop over examples
    assert sum(isinstance(it, loopir.Loop) for it in outer.inner.program.items) >= 2
    assert "for j in range(6):" in code.text and "for i in range(10):" in code.text
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)
    # and against backpropagation by hand
    z1 = X @ W1.T + b1
    a1 = np.maximum(z1, 0)
    z2 = a1 @ W2.T + b2
    a2 = np.tanh(z2)
    s = a2 @ w3
    assert out[0] == pytest.approx(np.mean(np.logaddexp(0, -y * s)), rel=1e-12)
    ds = -y / (1 + np.exp(y * s)) / n
    dz2 = np.outer(ds, w3) * (1 - a2**2)
    dz1 = (dz2 @ W2) * (z1 > 0)
    g = np.concatenate(
        [(dz1.T @ X).ravel(), dz1.sum(0), (dz2.T @ a1).ravel(), dz2.sum(0), a2.T @ ds]
    )
    np.testing.assert_allclose(out[1:], g, rtol=1e-10, atol=1e-14)


@st.composite
def double_loops(draw) -> str:
    """``def f(x, w):`` with a loop over rows whose body loops over columns."""
    lines = ["def f(x, w):", "    s = 0.0", "    for i in range(len(x) // 8):", "        u = 0.0"]
    lines.append("        for k in range(8):")
    a = draw(st.sampled_from(["x[8 * i + k]", "w[k]", "u"]))
    b = draw(st.sampled_from(["x[8 * i + k]", "w[k]", "w[k + 1]"]))
    fn = draw(st.sampled_from(["sin", "tanh", "sigmoid"]))
    op = draw(st.sampled_from(["+", "*", "-"]))
    lines.append(f"            u = u * 0.5 + ad.{fn}({a} {op} {b})")
    lines.append(f"        s = s + ad.{draw(st.sampled_from(['tanh', 'sin']))}(u) * w[8]")
    lines.append("    return s")
    return "\n".join(lines)


@settings(
    max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(src=double_loops(), rows=st.integers(4, 7))
def test_random_double_loops_nest_and_agree_with_the_unrolled_adjoint(src, rows):
    note(src)
    ns = {"ad": ad}
    exec(compile(src, "<loops>", "exec"), ns)
    x = np.sin(np.arange(1.0, 8 * rows + 1))
    w = np.cos(np.arange(1.0, 10.0))
    params = [Param("x", len(x)), Param("w", 9)]
    out, expected, program, _ = nested_pipeline(ns["f"], params, [x, w], min_ops=6)
    assert any(it.inner for it in program.items if isinstance(it, loopir.Loop))
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-13)


def test_jit_of_nested_loops_prints_the_value_alone():
    def f(x):
        s = 0.0
        for i in range(len(x) // 8):
            u = 0.0
            for k in range(8):
                u = ad.tanh(u * 0.9 + x[8 * i + k] * 0.5)
            s = s + u * u
        return s

    x = np.sin(np.arange(1.0, 8 * 40 + 1))
    tape = hoist_constants(ad.trace(f, x))
    params = [Param("x", len(x))]
    program = loopbuild.build(tape, find_segments(tape, params), params, "f")
    (loop,) = [it for it in program.items if isinstance(it, loopir.Loop)]
    loop.inner = loopbuild.nest(loop, params, min_ops=8)
    assert loop.inner is not None
    code = loopgen.generate(program, params, "f_value")
    ns: dict = {}
    exec(compile(module_source([code.text]), "<jit>", "exec"), ns)
    out = np.empty(1)
    assert ns["f_value"](x, np.empty(max(code.work_size, 1)), code.columns, out)
    assert out[0] == pytest.approx(float(f(x)), rel=1e-13)


def test_a_matmul_over_rows_folds_as_one_loop_over_the_rows():
    # X @ W.T over object arrays: per row, 8 dot products of 3 terms; the row is the
    # loop (a loop inside it over the 8 outputs), not one short loop per row
    rng = np.random.default_rng(5)
    X, W = rng.normal(size=(40, 3)), rng.normal(size=(8, 3))

    def f(W, X):
        return np.sum(np.tanh(X @ W.T))  # (np.tanh calls each Value's tanh)

    params = [Param("W", 24), Param("X", 120)]
    tape = hoist_constants(ad.trace(f, W, X))
    segments = find_segments(tape, params)
    assert any(s.reps == 40 for s in segments)  # one repetition per row
    vg = ad.value_and_grad(f)
    value, g = vg(W, X)
    t = np.tanh(X @ W.T)
    assert value == pytest.approx(t.sum(), rel=1e-12)
    np.testing.assert_allclose(g, (1 - t**2).T @ X, rtol=1e-11)


def test_a_failure_of_the_loop_ir_falls_back_to_the_unrolled_path_with_a_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(pipeline, "loop_source", broken)
    # (folded code of the same tape kept on disk by an earlier run is not read, and
    # the fallback's code is not kept there for later runs, which would restore it)
    records = importlib.import_module("adcompile.backend.records")
    monkeypatch.setattr(records, "read_record", lambda d: None)
    monkeypatch.setattr(records, "write_record", lambda d, r: None)
    monkeypatch.setenv("ADCOMPILE_STRICT", "0")
    x = np.linspace(-1.2, 1.1, 300)
    vg = ad.value_and_grad(rosen)
    with pytest.warns(RuntimeWarning, match="folding rosen.. into loops failed.*KeyError"):
        value, g = vg(x)
    np.testing.assert_allclose(g, rosen_grad(x), rtol=1e-12)
    monkeypatch.setenv("ADCOMPILE_STRICT", "1")  # the test suite sees the bug itself
    # (else the same tape reuses the code compiled above)
    importlib.import_module("adcompile.backend.jit").forget_shared_code()
    with pytest.raises(KeyError, match="a bug"):
        ad.value_and_grad(rosen)(x)


def test_an_infinite_constant_in_a_folded_loop_compiles():
    """Constants are printed as literals of generated code (math.inf, not inf): a
    loop comparing with, or taking the minimum with, infinity folds and compiles."""

    def f(x):
        s = 0.0
        for i in range(len(x) - 1):
            t = x[i] * x[i + 1]
            s = s + (t if t < math.inf else 0.0) + ad.minimum(x[i], math.inf) * 0.5
        return s

    x = np.linspace(-1.0, 1.0, 400)
    vg = ad.value_and_grad(f)
    value, g = vg(x)
    assert vg.last.compiled.facts.kind == "folded"
    assert value == pytest.approx(f(x), rel=1e-12)
    want = np.zeros_like(x)
    want[:-1] += x[1:] + 0.5
    want[1:] += x[:-1]
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
