"""Folding repeated tape segments into loops: detection, generated code, compiled results.

These are derivative tapes (differentiated unrolled) folded as value code
through the loop IR (``loops.fold_program``, ``loopgen``), the path of
``compiled.compile_tape`` for tapes the loop pipeline does not differentiate itself.
Every folded function is checked against the interpreter on the same tape
(rtol 1e-12): compiled with Numba for the workloads, and executed as plain
Python (the generated source needs only ``math``) for the many random tapes
hypothesis draws, which keeps those fast.
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import adcompile as ad
from adcompile.diff import interpret
from adcompile.diff.reverse import grad_tape
from adcompile.emit import loopgen
from adcompile.emit.codegen import module_source
from adcompile.emit.fold import fold_program, loop_source
from adcompile.ir.ops import OPS
from adcompile.ir.passes import hoist_constants
from adcompile.ir.tape import CONST, INPUT, Guard, Node, Param, Tape
from adcompile.loops import ir as loopir
from adcompile.loops.segments import Segment, find_segments

RTOL = 1e-12


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def params_of(*args) -> list[Param]:
    return [
        Param(f"a{k}", None if np.ndim(a) == 0 else int(np.size(a))) for k, a in enumerate(args)
    ]


def flat_args(*args) -> list:
    return [float(a) if np.ndim(a) == 0 else np.ascontiguousarray(a, float).ravel() for a in args]


def point(*args) -> np.ndarray:
    return np.concatenate([np.atleast_1d(np.asarray(a, float)).ravel() for a in args])


def generate(tape: Tape, segments, params=None, long_body: int | None = None):
    """The value code of ``tape`` with ``segments`` folded (``loopgen.Generated``)."""
    kw = {} if long_body is None else {"long_body": long_body}
    program = fold_program(tape, segments, params, "f", **kw)
    return loopgen.generate(program, program.params, "f")


def folded_source(tape: Tape, segments, params=None) -> str:
    return module_source([generate(tape, segments, params).text])


def folded_statements(tape: Tape, segments, params=None) -> int:
    return fold_program(tape, segments, params).statements


def loops_of(ff) -> list:
    return [it for it in ff.program.items if type(it) is loopir.Loop]


def run_python(tape: Tape, segments, params, args) -> tuple[bool, np.ndarray]:
    """Run the folded source as plain Python (no Numba)."""
    code = generate(tape, segments, params)
    ns: dict = {}
    exec(compile(module_source([code.text]), "<folded>", "exec"), ns)
    out = np.empty(len(tape.outputs))
    ok = ns["f"](*args, np.empty(code.work_size), code.columns, out)
    return ok, out


def assert_matches(got, tape: Tape, args) -> None:
    ref = np.array(interpret.evaluate(tape, point(*args)))
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=0)


def compile_folded(gt: Tape, params, name: str):
    """The gradient tape folded as value code and compiled (``compiled.LoopCompiled``)."""
    from adcompile.backend.compiled import compile_tape

    return compile_tape(gt, params, name, force="folded")


def compiled_check(f, *args, name: str = "f"):
    """Trace f, fold its gradient tape, compile, compare with the interpreter."""
    gt = grad_tape(ad.trace(f, *args))
    ff = compile_folded(gt, params_of(*args), name)
    ok, out = ff.call(*flat_args(*args))
    assert ok
    assert_matches(out, gt, args)
    return ff


def statements(source: str) -> int:
    return sum(1 for ln in source.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))


# ---------------------------------------------------------------- the workloads


def rosen_loop(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def rosen_numpy(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosen_grad(x):
    g = np.zeros_like(x)
    d = x[1:] - x[:-1] ** 2
    g[:-1] += -400 * x[:-1] * d - 2 * (1 - x[:-1])
    g[1:] += 200 * d
    return g


@pytest.mark.parametrize("f", [rosen_loop, rosen_numpy])
def test_rosenbrock_folds_compiles_and_matches(f):
    x = 0.9 * np.cos(np.arange(200))
    ff = compiled_check(f, x, name=f.__name__)
    assert ff.facts.kind == "folded"
    gt = ff.tape
    folded = sum(lp.body.n_ops * lp.trips for lp in loops_of(ff))
    assert folded > 0.95 * gt.n_ops
    np.testing.assert_allclose(ff.call(x)[1][1:], rosen_grad(x), rtol=1e-12, atol=1e-12)
    assert "for i in range(" in ff.source and "Folded" in ff.explanation
    assert re.search(r"\n        out\[\d+ - i\] = ", ff.source)  # the gradient, from the loop


@pytest.mark.parametrize("f", [rosen_loop, rosen_numpy])
def test_source_length_does_not_grow_with_n(f):
    sizes = []
    for n in (40, 400):
        gt = grad_tape(ad.trace(f, 0.9 * np.cos(np.arange(n))))
        params = [Param("x", n)]
        segs = find_segments(gt, params)
        sizes.append(statements(folded_source(gt, segs, params)))
        assert folded_statements(gt, segs, params) < 40
    assert sizes[0] == sizes[1]


def chain(n):
    def f(x):
        for _ in range(n):
            x = ad.sin(x) + 0.5 * x
        return x

    return f


def test_chain_folds_and_gives_the_derivative():
    ff = compiled_check(chain(25), 0.3)
    x, d = 0.3, 1.0
    for _ in range(25):
        d *= math.cos(x) + 0.5
        x = math.sin(x) + 0.5 * x
    ok, out = ff.call(0.3)
    assert out[0] == pytest.approx(x, rel=1e-14) and out[1] == pytest.approx(d, rel=1e-12)
    long = grad_tape(ad.trace(chain(600), 0.3))
    segs = find_segments(long, [Param("x", None)])
    assert [s.reps for s in segs] == [600, 598]  # forward; adjoint less its two edges
    assert statements(folded_source(long, segs, [Param("x", None)])) < 30


H = 3  # hidden units: small, so that Numba compiles the loop body quickly


def mlp_loss(p, X, y):
    """A 2-H-H-1 ReLU MLP's hinge loss, written as a Python loop over examples."""
    total = 0.0
    for e in range(len(y)):
        h1 = [
            ad.relu(p[2 * j] * X[e, 0] + p[2 * j + 1] * X[e, 1] + p[2 * H + j]) for j in range(H)
        ]
        o2 = 3 * H
        h2 = [
            ad.relu(sum(p[o2 + H * j + k] * h1[k] for k in range(H)) + p[o2 + H * H + j])
            for j in range(H)
        ]
        o3 = o2 + H * H + H
        score = sum(p[o3 + k] * h2[k] for k in range(H)) + p[o3 + H]
        total = total + ad.relu(1 - y[e] * score)
    return total / len(y) + 1e-4 * sum(q * q for q in p)


def mlp_data(n):
    rng = np.random.default_rng(0)
    p = rng.uniform(-1, 1, 3 * H + H * H + 2 * H + 1)
    return p, rng.normal(size=(n, 2)), np.where(rng.normal(size=n) > 0, 1.0, -1.0)


def test_mlp_loop_over_examples_folds_per_example():
    p, X, y = mlp_data(8)
    gt = grad_tape(ad.trace(mlp_loss, p, X, y), wrt=range(len(p)))
    ff = compile_folded(gt, params_of(p, X, y), "mlp")
    ok, out = ff.call(*flat_args(p, X, y))
    assert ok
    assert_matches(out, gt, (p, X, y))
    big = [lp for lp in loops_of(ff) if lp.size > 30]
    assert len(big) == 2 and all(lp.trips >= 6 for lp in big)  # forward and adjoint per example
    # parameters used by every example get the sum of their contributions
    eps = 1e-6
    f0 = interpret.evaluate(gt, point(p, X, y))[0]
    q = p.copy()
    q[0] += eps
    f1 = interpret.evaluate(gt, point(q, X, y))[0]
    assert out[1] == pytest.approx((f1 - f0) / eps, rel=1e-3, abs=1e-6)


def test_mlp_source_length_does_not_grow_with_examples():
    sizes = []
    for n in (8, 16):
        p, X, y = mlp_data(n)
        gt = grad_tape(ad.trace(mlp_loss, p, X, y), wrt=range(len(p)))
        params = params_of(p, X, y)
        sizes.append(statements(folded_source(gt, find_segments(gt, params), params)))
    assert sizes[0] == sizes[1]


# ---------------------------------------------------------------- guards, columns, printing


def test_guards_fold_with_their_loop_and_still_reject_other_branches():
    def f(x):
        s = x[0]
        for i in range(1, len(x)):
            if x[i] > 0:  # a guard on an input
                s = s + x[i] * ad.sin(s)
            if s < 100.0:  # a guard on a computed value, inside the loop
                s = s * 0.9
        return s

    x = 0.5 + 0.4 * np.cos(np.arange(30))
    ff = compiled_check(f, x)
    assert len(ff.tape.guards) == 58
    assert ff.source.count("return False") < 8  # checked in loops, not one line each
    bad = x.copy()
    bad[17] = -1.0
    assert not ff.call(bad)[0]
    assert not ff.call(x * 1000)[0]  # s grows past 100: another branch


def test_constants_that_differ_per_repetition_are_read_from_a_column():
    w = [1.0 + 0.5 * i for i in range(20)]

    def f(x):
        return sum(w[i] * ad.sin(x[i]) ** 2 for i in range(len(x)))

    ff = compiled_check(f, np.linspace(-1, 1, 20))
    assert ff.columns.size >= 18 and "c[" in ff.source


def test_describe_and_explain():
    gt = grad_tape(ad.trace(chain(50), 0.3))
    segs = find_segments(gt)
    text = str(fold_program(gt, segs, None))
    assert "loop i in range(50)" in text and "sin(" in text and text.count("\n") < 30
    words = loop_source(gt, [Param("x", None)], None, "f").explanation
    assert "3 slots x 50 repetitions" in words and "Folded 2" in words


def test_a_segment_that_does_not_repeat_is_refused():
    gt = grad_tape(ad.trace(chain(20), 0.3))
    (s, _) = find_segments(gt)
    with pytest.raises(ValueError, match="holds an input"):
        folded_source(gt, [Segment(0, s.size, 2)], [Param("x", None)])
    with pytest.raises(ValueError, match="overlaps"):
        folded_source(gt, [s, s], [Param("x", None)])


# ---------------------------------------------------------------- random repetition structure

UNARY = [OPS[n] for n in ("sin", "cos", "tanh", "neg")]
BINARY = [OPS[n] for n in ("add", "sub", "mul")]


def build(body, reps, n_in, mutation=None):
    """A tape: n_in inputs, a prelude, then ``body`` repeated ``reps`` times.

    A body item is ("const", value, varies) or (op, operands); an operand is
    ("same", d) (d slots back in this repetition), ("carry", d) (d slots back,
    into the previous repetition), ("input", offset, stride) or ("inv", k)
    (prelude slot k). ``mutation`` makes a near miss in one repetition.
    """
    nodes = [Node(INPUT) for _ in range(n_in)]
    nodes.append(Node(OPS["mul"], (0, n_in - 1)))
    nodes.append(Node(OPS["sin"], (n_in,)))
    prelude = [n_in, n_in + 1]
    k = len(body)
    for r in range(reps):
        base = len(nodes)
        for p, item in enumerate(body):
            if item[0] == "const":
                value = item[1] + (0.25 * r if item[2] else 0.0)
                if mutation == ("const", r, p):
                    value += 1.0
                nodes.append(Node(CONST, (), value))
                continue
            op, operands = item
            if mutation is not None and mutation[:3] == ("op", r, p):
                op = mutation[3]
            args = []
            for opd in operands:
                kind = opd[0]
                if kind == "same":
                    args.append(base + p - opd[1])
                elif kind == "carry":
                    args.append(max(0, base + p - opd[1]))
                elif kind == "input":
                    stride = opd[2]
                    if mutation is not None and mutation[0] == "stride" and r >= mutation[1]:
                        stride += 1
                    args.append((opd[1] + stride * r) % n_in)
                else:
                    args.append(prelude[opd[1]])
            nodes.append(Node(op, tuple(args)))
    n = len(nodes)
    ends = [j for j in range(n_in + 1 + k, n, k) if nodes[j].op != CONST]
    total = n_in + 1
    for j in ends:  # output 0 sums every repetition's last value: the adjoint spans them all
        nodes.append(Node(OPS["add"], (total, j)))
        total = len(nodes) - 1
    outs = [total, *range(max(n_in + 2, n - k), n), n_in + 2 + k, n_in + 2 + 2 * k + 1]
    outs = [j for j in outs if j < len(nodes) and nodes[j].op != CONST]
    return Tape(nodes, list(range(n_in)), outs)


@st.composite
def bodies(draw):
    k = draw(st.integers(1, 7))
    body = []
    for p in range(k):
        if p < k - 1 and draw(st.integers(0, 5)) == 0:
            body.append(("const", draw(st.sampled_from([0.5, 2.0, -1.5])), draw(st.booleans())))
            continue
        op = draw(st.sampled_from(UNARY + BINARY))
        operands = []
        for _ in range(op.arity):
            choices = ["carry", "input", "inv"] + (["same"] if p > 0 else [])
            kind = draw(st.sampled_from(choices))
            if kind == "same":
                operands.append(("same", draw(st.integers(1, p))))
            elif kind == "carry":
                operands.append(("carry", draw(st.integers(p + 1, p + k))))
            elif kind == "input":
                operands.append(("input", draw(st.integers(0, 3)), draw(st.integers(0, 2))))
            else:
                operands.append(("inv", draw(st.integers(0, 1))))
        body.append((op, operands))
    return body


def finite(tape: Tape) -> bool:
    vals = interpret.values(tape, 0.3 + 0.5 * np.sin(np.arange(len(tape.inputs)) + 1.0))
    return bool(np.isfinite(vals).all() and np.abs(vals).max() < 1e6)


def check_random(tape: Tape, **thresholds: int) -> list:
    """Fold, run the folded source as Python, compare with the interpreter; the segments."""
    x = 0.3 + 0.5 * np.sin(np.arange(len(tape.inputs)) + 1.0)
    params = [Param("x", len(tape.inputs))]
    segs = find_segments(tape, params, **thresholds)
    ok, out = run_python(tape, segs, params, [x])
    assert ok
    assert_matches(out, tape, (x,))
    return segs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies(), reps=st.integers(1, 12), mutate=st.integers(0, 3), where=st.integers(0, 11))
def test_random_repetition_structure(body, reps, mutate, where):
    """Random bodies, repeated; sometimes one repetition differs; forward and adjoint."""
    n_in = 4 + 3 * reps
    r = min(where, reps - 1)
    ops = [p for p, item in enumerate(body) if item[0] != "const"]
    consts = [p for p, item in enumerate(body) if item[0] == "const"]
    mutation = None
    if mutate == 1:
        p = ops[where % len(ops)]
        op = body[p][0]
        other = [o for o in (UNARY if op.arity == 1 else BINARY) if o is not op]
        mutation = ("op", r, p, other[where % len(other)])
    elif mutate == 2:
        mutation = ("stride", r)
    elif mutate == 3 and consts:
        mutation = ("const", r, consts[where % len(consts)])
    tape = build(body, reps, n_in, mutation)
    assume(finite(tape))
    for t in (tape, grad_tape(tape)):
        check_random(t, min_reps=2, min_saved=1)  # fold whatever repeats at all


# ---------------------------------------------------------------- near misses

BODY = [
    (OPS["mul"], [("input", 0, 1), ("input", 1, 1)]),
    (OPS["sin"], [("same", 1)]),
    ("const", 2.0, False),
    (OPS["mul"], [("same", 1), ("same", 2)]),
    (OPS["add"], [("carry", 5), ("same", 1)]),
]


def segments_of(tape: Tape, reps: int, n_in: int) -> list:
    """The checked segments that lie in the repeated body (not in the final sum)."""
    assert finite(tape)
    return [s for s in check_random(tape) if s.start < rep_slot(reps, 0, n_in)]


def rep_slot(r: int, p: int, n_in: int) -> int:
    """Slot of body position p in repetition r of ``build``."""
    return n_in + 2 + 5 * r + p


def test_clean_body_folds_in_one_segment():
    (s,) = segments_of(build(BODY, 30, 40), 30, 40)
    assert s.size == 5 and s.reps == 30


def test_stride_that_changes_halfway_splits_the_segment():
    segs = segments_of(build(BODY, 30, 80, mutation=("stride", 15)), 30, 80)
    assert len(segs) == 2
    before, after = rep_slot(14, 0, 80), rep_slot(15, 0, 80)
    assert not any(s.start <= before and after < s.stop for s in segs)
    assert sum(s.reps for s in segs) >= 27


def test_one_repetition_with_another_op_is_left_out():
    tape = build(BODY, 30, 40, mutation=("op", 12, 1, OPS["cos"]))
    segs = segments_of(tape, 30, 40)
    odd = rep_slot(12, 1, 40)
    assert len(segs) == 2 and not any(s.start <= odd < s.stop for s in segs)
    assert check_random(grad_tape(tape))


def test_a_constant_that_differs_in_one_repetition_is_read_per_repetition():
    tape = build(BODY, 30, 40, mutation=("const", 7, 2))
    segs = segments_of(tape, 30, 40)
    assert sum(s.reps for s in segs) >= 25
    code = generate(tape, segs, [Param("x", 40)])
    assert 3.0 in code.columns.tolist() or len(segs) > 1


def test_guard_that_differs_in_one_repetition_is_not_folded_over():
    tape = build(BODY, 20, 40)
    guards = []
    two = rep_slot(0, 2, 40)  # the constant 2.0 of repetition 0
    for r in range(20):  # sin(...) < 2.0 in every repetition, ">" in one
        guards.append(Guard("<" if r != 9 else ">", rep_slot(r, 1, 40), two, r != 9))
    tape.guards = guards
    x = 0.3 + 0.5 * np.sin(np.arange(40) + 1.0)
    params = [Param("x", 40)]
    segs = find_segments(tape, params)
    assert segs and not any(s.start <= rep_slot(9, 1, 40) < s.stop for s in segs)
    assert "return False" in folded_source(tape, segs, params)
    ok, _ = run_python(tape, segs, params, [x])
    assert ok == all(g.holds(interpret.values(tape, x)) for g in tape.guards)


# ---------------------------------------------------------------- cost


def synthetic_chain(reps: int) -> Tape:
    """The chain workload's value-and-gradient tape, built directly (no tracing)."""
    sin, cos, mul, add = (OPS[n] for n in ("sin", "cos", "mul", "add"))
    nodes = [Node(CONST, (), 0.5), Node(INPUT)]
    x = 1
    xs = []
    for _ in range(reps):
        xs.append(x)
        nodes += [Node(sin, (x,)), Node(mul, (0, x))]
        nodes.append(Node(add, (len(nodes) - 2, len(nodes) - 1)))
        x = len(nodes) - 1
    g = None
    for x in reversed(xs):
        j = len(nodes)
        if g is None:
            nodes += [Node(cos, (x,)), Node(add, (j, 0))]
        else:
            nodes += [Node(mul, (g, 0)), Node(cos, (x,)), Node(mul, (g, j + 1))]
            nodes.append(Node(add, (j, j + 2)))
        g = len(nodes) - 1
    return Tape(nodes, [1], [x, g])


def test_folding_time_is_about_linear():
    def best(tape: Tape) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            segs = find_segments(tape)
            times.append(time.perf_counter() - t0)
        assert len(segs) == 2
        return min(times)

    # 10x the tape in under 30x the time: linear, not quadratic (100x). A ratio of
    # two times taken side by side, not a bound in seconds (the machine is shared).
    small, big = synthetic_chain(10_000), synthetic_chain(100_000)
    t_small, t_big = best(small), best(big)
    assert t_big < 30 * t_small, (t_small, t_big)


def test_random_tape_that_does_not_fold_is_cheap_to_scan():
    rng = np.random.default_rng(0)
    n = 20_000
    nodes = [Node(INPUT) for _ in range(4)]
    for k in range(n):
        j = 4 + k
        lo = max(4, j - 50)
        a, b = (int(u * (j - lo + 4)) for u in rng.random(2))
        a, b = (i if i < 4 else lo + i - 4 for i in (a, b))
        op = [OPS["add"], OPS["mul"], OPS["sin"], OPS["tanh"]][rng.integers(4)]
        nodes.append(Node(op, (a, b)[: op.arity]))
    tape = Tape(nodes, [0, 1, 2, 3], [len(nodes) - 1])
    t0 = time.perf_counter()
    assert find_segments(tape) == []
    assert time.perf_counter() - t0 < 2.0


def _terms_then_sum(x):
    """Two terms per i recorded first, then one long sum over all the terms."""
    terms = []
    for i in range(len(x) - 1):
        terms.append(ad.sin(x[i]))
        terms.append(ad.cos(x[i + 1]))
    total = terms[0]
    for s in terms[1:]:
        total = total + s
    return total


def test_a_loop_reading_another_loops_values_at_a_changing_position_folds():
    # the sum reads the terms with stride 1, while the term loop makes 2 per repetition
    x = np.linspace(-1.0, 1.0, 30)
    for tape in (ad.trace(_terms_then_sum, x), grad_tape(ad.trace(_terms_then_sum, x))):
        params = params_of(x)
        segments = find_segments(tape, params)
        assert any(s.size == 1 and s.reps > 30 for s in segments)  # the sum is a loop
        assert folded_statements(tape, segments, params) < 40
        ok, out = run_python(tape, segments, params, flat_args(x))
        assert ok
        assert_matches(out, tape, (x,))
    expected = np.sum(np.sin(x[:-1]) + np.cos(x[1:]))
    assert interpret.evaluate(tape, x)[0] == pytest.approx(expected, rel=1e-13)


def test_a_body_whose_ops_repeat_at_half_its_period_folds_at_the_full_period():
    # (sub, mul, mul, sub, mul, mul): op codes repeat every 3 slots, operands every 6
    def f(x):
        terms = []
        for i in range(len(x) - 1):
            a = 1.0 - x[i]
            terms.append(a * a)
            b = x[i + 1] - x[i] * x[i]
            terms.append(100.0 * (b * b))
        total = terms[0]
        for s in terms[1:]:
            total = total + s
        return total

    x = np.linspace(-0.9, 0.8, 40)
    tape = grad_tape(ad.trace(f, x))
    ff = compiled_check(f, x, name="half_period")
    assert any(lp.size == 6 for lp in loops_of(ff))
    assert ff.program.statements < 60 < tape.n_ops


def test_rosenbrock_from_sympy_folds():
    sp = pytest.importorskip("sympy")
    from adcompile.symbolic.bridge import from_sympy

    n = 60
    xs = sp.symbols(f"x0:{n}")
    expr = sum(100 * (xs[i + 1] - xs[i] ** 2) ** 2 + (1 - xs[i]) ** 2 for i in range(n - 1))
    gt = grad_tape(from_sympy(expr, xs))
    params = [Param("x", n)]
    segments = find_segments(gt, params)
    assert folded_statements(gt, segments, params) < 50 < gt.n_ops
    x = np.linspace(-1.2, 1.1, n)
    ok, out = run_python(gt, segments, params, [x])
    assert ok
    np.testing.assert_allclose(out, interpret.evaluate(gt, x), rtol=RTOL, atol=0)


# ---------------------------------------------------------------- loops inside loops


def make_mlp_loss(h: int):
    """``mlp_loss`` with ``h`` hidden units per layer."""

    def loss(p, X, y):
        total = 0.0
        o2, o3 = 3 * h, 3 * h + h * h + h
        for e in range(len(y)):
            h1 = [
                ad.relu(p[2 * j] * X[e, 0] + p[2 * j + 1] * X[e, 1] + p[2 * h + j])
                for j in range(h)
            ]
            h2 = []
            for j in range(h):
                a = p[o2 + h * h + j]
                for k in range(h):
                    a = a + p[o2 + h * j + k] * h1[k]
                h2.append(ad.relu(a))
            score = p[o3 + h]
            for k in range(h):
                score = score + p[o3 + k] * h2[k]
            total = total + ad.relu(1 - y[e] * score)
        return total / len(y) + 1e-4 * sum(q * q for q in p)

    return loss


def mlp_numpy(p, X, y, h):
    """The same loss and its gradient with NumPy, derived by hand."""
    o2, o3 = 3 * h, 3 * h + h * h + h
    W1 = np.stack([p[0 : 2 * h : 2], p[1 : 2 * h : 2]], axis=1)
    b1, W2 = p[2 * h : 3 * h], p[o2 : o2 + h * h].reshape(h, h)
    b2, w3, b3 = p[o2 + h * h : o3], p[o3 : o3 + h], p[o3 + h]
    z1 = X @ W1.T + b1
    h1 = np.maximum(z1, 0)
    z2 = h1 @ W2.T + b2
    h2 = np.maximum(z2, 0)
    s = h2 @ w3 + b3
    m = 1 - y * s
    loss = np.maximum(m, 0).mean() + 1e-4 * (p @ p)
    ds = np.where(m > 0, -y, 0.0) / len(y)
    dz2 = (ds[:, None] * w3) * (z2 > 0)
    dz1 = (dz2 @ W2) * (z1 > 0)
    g = 2e-4 * p
    gW1 = dz1.T @ X
    g[0 : 2 * h : 2] += gW1[:, 0]
    g[1 : 2 * h : 2] += gW1[:, 1]
    g[2 * h : 3 * h] += dz1.sum(0)
    g[o2 : o2 + h * h] += (dz2.T @ h1).ravel()
    g[o2 + h * h : o3] += dz2.sum(0)
    g[o3 : o3 + h] += ds @ h2
    g[o3 + h] += ds.sum()
    return loss, g


def test_a_long_loop_body_is_outlined_and_its_inner_loops_fold():
    h, n = 8, 12
    rng = np.random.default_rng(3)
    p = rng.uniform(-1, 1, 3 * h + h * h + 2 * h + 1)
    X, y = rng.normal(size=(n, 2)), np.where(rng.normal(size=n) > 0, 1.0, -1.0)
    gt = grad_tape(ad.trace(make_mlp_loss(h), p, X, y), wrt=range(len(p)))
    params = params_of(p, X, y)
    ff = compile_folded(gt, params, "mlp")
    ok, out = ff.call(*flat_args(p, X, y))
    assert ok
    assert_matches(out, gt, (p, X, y))
    loss, g = mlp_numpy(p, X, y, h)
    np.testing.assert_allclose(out, [loss, *g], rtol=1e-12, atol=1e-15)
    # the loop over examples' forward has its body folded in turn: loops over the
    # neurons inside it (the adjoint's body, differentiated unrolled, does not
    # repeat so: its parameter gradients are summed in one carried value each)
    assert sum(lp.inner is not None for lp in loops_of(ff)) >= 1
    assert "for j in range(" in ff.source and "folded in turn" in ff.explanation
    # the source is shorter than the loops' bodies printed flat
    hoisted = hoist_constants(gt)
    flat = fold_program(hoisted, find_segments(hoisted, params), params, long_body=10**9)
    assert ff.program.statements < flat.statements - 100


def test_value_and_grad_of_a_wide_mlp_folds_loops_inside_loops():
    h, n = 12, 40
    rng = np.random.default_rng(4)
    p = rng.uniform(-1, 1, 3 * h + h * h + 2 * h + 1)
    X, y = rng.normal(size=(n, 2)), np.where(rng.normal(size=n) > 0, 1.0, -1.0)
    vg = ad.value_and_grad(make_mlp_loss(h))
    loss, g = vg(p, X, y)
    ref_loss, ref_g = mlp_numpy(p, X, y, h)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(g, ref_g, rtol=1e-10, atol=1e-15)
    compiled = vg._last.compiled
    # printed flat, the per-example bodies would be over the 1,000-statement limit:
    # each is folded in turn, its neurons a loop inside the loop over examples
    assert compiled.facts.kind == "folded"
    assert "folded in turn into" in compiled.explanation
    assert "for j in range(12):" in compiled.source
    # one program for every batch length: every example runs in the loop over n,
    # the first one included (a sum starts at 0.0)
    assert "Generic in the batch length n" in compiled.explanation
    assert "for i in range(n):" in compiled.source
    # later calls at other points agree with NumPy too
    q = p + 0.01
    loss, g = vg(q, X, y)
    ref_loss, ref_g = mlp_numpy(q, X, y, h)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(g, ref_g, rtol=1e-10, atol=1e-15)


def test_a_sum_that_starts_at_zero_folds_from_its_first_term():
    def sumsq(x):
        total = 0.0
        for i in range(len(x)):
            total = total + ad.sin(x[i]) * x[i]
        return total

    x = np.linspace(-1, 1, 50)
    gt = grad_tape(ad.trace(sumsq, x))
    made = loop_source(gt, [Param("x", 50)], None, "f")
    assert max(it.trips for it in made.program.items if type(it) is loopir.Loop) == 50
    ns: dict = {}
    exec(compile(made.source, "<folded>", "exec"), ns)
    out = np.empty(51)
    assert ns["f"](x, np.empty(made.code.work_size), made.code.columns, out)
    np.testing.assert_allclose(out[0], np.sum(np.sin(x) * x), rtol=1e-13)
    np.testing.assert_allclose(out[1:], np.cos(x) * x + np.sin(x), rtol=1e-13)


def test_hoisting_constants_keeps_the_values():
    def f(x, y):
        t = 0.0
        for k in range(5):
            t = t + (x * 0.5 + k) * ad.exp(y - 2.0) + 0.5
        return t * 3.0

    tape = grad_tape(ad.trace(f, 0.3, -0.7))
    hoisted = hoist_constants(tape)
    consts = [i for i, nd in enumerate(hoisted.nodes) if nd.op == CONST]
    assert consts == list(range(len(consts)))  # all at the front ...
    values = [hoisted.nodes[i].value for i in consts]
    assert len(set(values)) == len(values)  # ... once per value
    for pt in ([0.3, -0.7], [-1.2, 0.4]):
        np.testing.assert_allclose(interpret.evaluate(hoisted, pt), interpret.evaluate(tape, pt))


def test_an_example_whose_cotangent_is_zero_is_skipped_and_adds_nothing():
    h, n = 8, 24
    rng = np.random.default_rng(5)
    p = rng.uniform(-1, 1, 3 * h + h * h + 2 * h + 1)
    X, y = rng.normal(size=(n, 2)), np.where(rng.normal(size=n) > 0, 1.0, -1.0)
    o3 = 3 * h + h * h + h
    confident = p.copy()  # score 5 for every example: no hinge is active
    confident[o3 : o3 + h] = 0.0
    confident[o3 + h] = 5.0
    vg = ad.value_and_grad(make_mlp_loss(h))
    for q, yy in ((p, y), (confident, np.ones(n))):
        loss, g = vg(q, X, yy)
        ref_loss, ref_g = mlp_numpy(q, X, yy, h)
        assert loss == pytest.approx(ref_loss, rel=1e-12, abs=1e-300)
        np.testing.assert_allclose(g, ref_g, rtol=1e-10, atol=1e-15)
    assert "nothing flows back through this repetition" in vg.source
    np.testing.assert_allclose(g, 2e-4 * confident, rtol=1e-12)  # only the L2 term is left


def test_an_outlined_body_reads_an_argument_element_that_moves_from_e():
    # two loops of one shape, grouped as one outer loop of two repetitions: a[j % 3]
    # is the same element in both (read directly), the multiplier a[1] then a[0]
    # moves, and must come from the body's per-repetition array (found by the
    # fuzz suite's long profile: it was read as a[1] in both)
    def f(x, y, a):
        t2 = a[1]
        for j in range(3):
            t2 = ad.tanh(t2 * 0.7 + a[j % 3] * a[1])
        t3 = a[0]
        for j in range(4):
            t3 = ad.tanh(t3 * 0.7 + a[j % 3] * a[0])
        return t3 + 0.1 * t2

    x, y, a = 0.0, 0.0, np.array([0.3, 1.0, -0.4])
    tape = ad.trace(f, x, y, a)
    params = [Param("x", None), Param("y", None), Param("a", 3)]
    for t in (tape, grad_tape(tape)):
        hoisted = hoist_constants(t)
        segments = find_segments(hoisted, params, min_reps=2, min_saved=1)
        code = generate(hoisted, segments, params, long_body=2)  # folded in turn
        ns: dict = {}
        exec(compile(module_source([code.text]), "<outlined>", "exec"), ns)
        out = np.empty(len(t.outputs))
        assert ns["f"](x, y, a, np.empty(code.work_size), code.columns, out)
        np.testing.assert_allclose(out, interpret.evaluate(t, [x, y, *a]), rtol=1e-13)
