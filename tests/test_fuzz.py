"""Differential fuzzing: random programs through every backend.

Each example is a small Python function (as source text, printed on failure)
with shared subexpressions, branches on traced values, loops and an array
argument. It runs through the compiled adjoint, the tape interpreter, the
interpreter on the adjoint tape, folded code, the loop IR (its primal
folded first and differentiated as loops), SymPy (when the bridge is
present) and central finite differences, which must all agree.

CI runs a bounded profile; ``ADCOMPILE_FUZZ_EXAMPLES=2000 pytest -m fuzz``
runs a long one.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import adcompile as ad
from adcompile.diff import interpret
from adcompile.diff.reverse import grad_tape
from adcompile.emit import loopgen
from adcompile.emit.codegen import module_source
from adcompile.emit.fold import fold_program
from adcompile.ir.passes import hoist_constants
from adcompile.ir.tape import Param
from adcompile.loops import build as loopbuild
from adcompile.loops import grad as loopgrad
from adcompile.loops import ir as loopir
from adcompile.loops.segments import find_segments

LONG = int(os.environ.get("ADCOMPILE_FUZZ_EXAMPLES", "0"))
UNARY = ["sin", "cos", "tanh", "exp", "sigmoid", "arctan", "softplus", "sinh", "expm1"]
SAFE = {
    "sqrt": "ad.sqrt(1.5 + {0} * {0})",
    "log": "ad.log(2.0 + ad.sin({0}))",
    "div": "{0} / (1.5 + ad.tanh({1}))",
    "pow": "ad.sigmoid({0}) ** (1.0 + ad.sigmoid({1}))",
}


@st.composite
def programs(draw) -> str:
    """Source of ``def f(x, y, a):`` with n statements over earlier names."""
    names = ["x", "y", "a[0]", "a[1]", "a[2]"]
    lines = ["def f(x, y, a):"]
    n = draw(st.integers(2, 9))

    def operand() -> str:
        return draw(st.sampled_from(names[-6:] + names[:2]))

    def expr() -> str:
        kind = draw(st.sampled_from(["bin", "unary", "safe", "const"]))
        if kind == "bin":
            return f"({operand()} {draw(st.sampled_from(['+', '-', '*']))} {operand()})"
        if kind == "unary":
            return f"ad.{draw(st.sampled_from(UNARY))}({operand()} * 0.5)"
        if kind == "safe":
            return SAFE[draw(st.sampled_from(sorted(SAFE)))].format(operand(), operand())
        return f"({operand()} * {draw(st.floats(-2, 2, allow_nan=False)):.3f})"

    for k in range(n):
        t = f"t{k}"
        form = draw(st.sampled_from(["assign", "assign", "if", "loop", "numpy"]))
        if form == "assign":
            lines.append(f"    {t} = {expr()}")
        elif form == "if":
            c = draw(st.floats(-1, 1, allow_nan=False))
            lines.append(f"    if {operand()} > {c:.3f}:")
            lines.append(f"        {t} = {expr()}")
            lines.append("    else:")
            lines.append(f"        {t} = {expr()}")
        elif form == "loop":
            m = draw(st.integers(1, 4))
            src = operand()
            lines.append(f"    {t} = {src}")
            lines.append(f"    for j in range({m}):")
            lines.append(f"        {t} = ad.tanh({t} * 0.7 + a[j % 3] * {src})")
        else:
            fn = draw(st.sampled_from(["sin", "tanh", "exp"]))
            lines.append(f"    {t} = np.sum(np.{fn}(a * {operand()})) * 0.3")
        names.append(t)
    lines.append(f"    return {names[-1]} + 0.1 * ({names[-2]})")
    return "\n".join(lines)


def _compile(src: str):
    ns = {"ad": ad, "np": np}
    exec(compile(src, "<fuzz>", "exec"), ns)
    return ns["f"]


def _fd(f, args, k, h=1e-6):
    x = np.array(args[k], dtype=float)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        ap, am = list(args), list(args)
        ap[k], am[k] = (xp, xm) if x.shape else (float(xp), float(xm))
        g[idx] = (f(*ap) - f(*am)) / (2 * h)
    return g if x.shape else float(g)


def _sympy_grads(tape, point):
    symbolic = pytest.importorskip("adcompile.symbolic.bridge")
    sp = pytest.importorskip("sympy")
    (expr,) = symbolic.tape_to_sympy(tape)
    syms = {s.name: s for s in expr.free_symbols}
    subs = {syms[n]: v for n, v in zip(tape.names, point) if n in syms}
    return [
        float(sp.diff(expr, syms[n]).evalf(subs=subs)) if n in syms else 0.0 for n in tape.names
    ]


def check_program(src: str, x: float, y: float, a: np.ndarray, with_sympy: bool) -> None:
    note(src)
    f = _compile(src)
    args = (x, y, a)
    tape = ad.trace(f, *args)
    point = [x, y, *a]
    # stay away from branch thresholds, where finite differences cross over
    vals = interpret.values(tape, point)
    assume(all(abs(vals[g.a] - vals[g.b]) > 1e-3 for g in tape.guards))
    val, grads = interpret.value_and_grad(tape, point)
    assume(math.isfinite(val) and all(map(math.isfinite, grads)) and abs(val) < 1e6)

    cval, (gx, gy, ga) = ad.value_and_grad(f, argnums=(0, 1, 2))(*args)
    compiled = [gx, gy, *ga]
    np.testing.assert_allclose(cval, val, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(compiled, grads, rtol=1e-11, atol=1e-13)

    gtape = grad_tape(tape)
    adj = interpret.evaluate(gtape, point)  # the adjoint tape, interpreted
    np.testing.assert_allclose(adj, [val, *grads], rtol=1e-12, atol=1e-13)

    # folded code: every repetition of two or more that saves a statement is
    # folded (far more eagerly than the compiler does), run as plain Python
    params = [Param("x", None), Param("y", None), Param("a", 3)]
    segments = find_segments(gtape, params, min_reps=2, min_saved=1)
    ns: dict = {}
    code = _value_code(gtape, segments, params)
    exec(compile(module_source([code.text]), "<folded>", "exec"), ns)
    out = np.empty(len(gtape.outputs))
    ok = ns["f"](x, y, np.array(a, float), np.empty(code.work_size), code.columns, out)
    assert ok
    np.testing.assert_allclose(out, [val, *grads], rtol=1e-12, atol=1e-13)
    # the loop IR of the same folding, run by its interpreter: the unrolled tape's
    # numbers exactly, primal and adjoint
    for t in (tape, gtape):
        program = loopbuild.build(t, find_segments(t, params, min_reps=2, min_saved=1), params)
        ok, got = program.run([x, y, a])
        assert ok and got == interpret.evaluate(t, point)
    # the primal tape folded first and its loops differentiated as loops
    # (adcompile.loopgrad), by the reference interpreter and as generated code
    check_loop_pipeline(tape, params, [x, y, a], [val, *grads])
    # ... and with every loop body of two or more operations folded in turn as
    # eagerly (loops inside loops)
    hoisted = hoist_constants(gtape)
    segments = find_segments(hoisted, params, min_reps=2, min_saved=1)
    code = _value_code(hoisted, segments, params, long_body=2)
    ns = {}
    exec(compile(module_source([code.text]), "<outlined>", "exec"), ns)
    ok = ns["f"](x, y, np.array(a, float), np.empty(code.work_size), code.columns, out)
    assert ok
    np.testing.assert_allclose(out, [val, *grads], rtol=1e-12, atol=1e-13)

    jf = ad.jit(f)
    fd = [_fd(jf, args, 0), _fd(jf, args, 1), *_fd(jf, args, 2)]
    np.testing.assert_allclose(compiled, fd, rtol=1e-4, atol=1e-6)

    if with_sympy:
        np.testing.assert_allclose(compiled, _sympy_grads(tape, point), rtol=1e-9, atol=1e-10)


def _value_code(tape, segments, params, long_body=None):
    """The value code of ``tape`` with ``segments`` folded (``loopgen.Generated``)."""
    kw = {} if long_body is None else {"long_body": long_body}
    return loopgen.generate(fold_program(tape, segments, params, "f", **kw), params, "f")


def check_loop_pipeline(tape, params, args, expected, wrt=None) -> None:
    """Fold the primal ``tape`` eagerly, differentiate the program as loops and
    compare the interpreter and the generated code with ``expected``."""
    hoisted = hoist_constants(tape)
    segments = find_segments(hoisted, params, min_reps=2, min_saved=1)
    program = loopbuild.build(hoisted, segments, params)
    gp = loopgrad.grad(program, wrt)
    ok, got = gp.run(args)
    assert ok
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13)
    flat = [np.asarray(a, float).ravel() if np.ndim(a) else float(a) for a in args]
    for nested in (False, True):  # ... and with loop bodies folded in turn where they repeat
        if nested:
            for it in program.items:
                if isinstance(it, loopir.Loop):
                    it.inner = loopbuild.nest(it, params, min_ops=4)
            gp = loopgrad.grad(program, wrt)
        code = loopgen.generate(gp, params, "f_vg")
        ns: dict = {}
        exec(compile(module_source([code.text]), "<loops>", "exec"), ns)
        out = np.empty(len(expected))
        assert ns["f_vg"](*flat, np.empty(max(code.work_size, 1)), code.columns, out)
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-13)


_args = dict(
    x=st.floats(-1.5, 1.5),
    y=st.floats(-1.5, 1.5),
    a=st.lists(st.floats(-1, 1), min_size=3, max_size=3).map(np.array),
)


#: hypothesis settings of every test here: no deadline (Numba compiles), many assume()s
PATIENT = dict(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


@settings(max_examples=25, derandomize=True, **PATIENT)
@given(src=programs(), **_args)
def test_backends_agree_on_random_programs(src, x, y, a):
    check_program(src, x, y, a, with_sympy=False)


@pytest.mark.fuzz
@settings(max_examples=max(LONG, 300), **PATIENT)
@given(src=programs(), **_args)
def test_backends_agree_long_profile(src, x, y, a):
    check_program(src, x, y, a, with_sympy=True)


# ------------------------------------------------------------------ beyond the gradient


def _as_vector(f):
    """``f(x, y, a)`` as a function of one vector ``v = [x, y, a0, a1, a2]``."""

    def fv(v):
        return f(v[0], v[1], v[2:5])

    return fv


def _fd_jacobian(g, v, h=1e-6):
    """Central differences of the vector function ``g`` (columns: the entries of ``v``)."""
    cols = []
    for i in range(len(v)):
        vp, vm = v.copy(), v.copy()
        vp[i] += h
        vm[i] -= h
        cols.append((np.asarray(g(vp), float) - np.asarray(g(vm), float)) / (2 * h))
    return np.stack(cols, axis=-1)


def check_transforms(src: str, x: float, y: float, a: np.ndarray, t, with_sympy: bool) -> None:
    """hessian, hvp, jvp, jacobian (both modes) and vmap(grad) of a random program, each
    against something computed another way."""
    note(src)
    f = _compile(src)
    fv = _as_vector(f)
    v = np.array([x, y, *a])
    tape = ad.trace(fv, v)
    vals = interpret.values(tape, list(v))
    # stay away from branch thresholds: finite differences of the gradient step ±1e-6
    assume(all(abs(vals[g.a] - vals[g.b]) > 1e-3 for g in tape.guards))
    val, grads = interpret.value_and_grad(tape, list(v))
    assume(math.isfinite(val) and all(map(math.isfinite, grads)) and abs(val) < 1e6)
    grad = ad.grad(fv)
    g = grad(v)
    np.testing.assert_allclose(g, grads, rtol=1e-11, atol=1e-13)

    H = ad.hessian(fv)(v)
    assert H.shape == (5, 5)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(H, _fd_jacobian(grad, v), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ad.hvp(fv)(v, t), H @ t, rtol=1e-9, atol=1e-11)
    out, tangent = ad.jvp(fv, (v,), (t,))
    np.testing.assert_allclose(out, val, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(tangent, g @ t, rtol=1e-9, atol=1e-11)

    # a vector version: f at v, at v shifted, and at a permutation of v
    def fm(w):
        return [fv(w), fv(w * 0.5 + 0.1), fv(w[::-1] * 0.9)]

    shifted = [v * 0.5 + 0.1, v[::-1] * 0.9]
    stacked = np.stack([g, grad(shifted[0]) * 0.5, (grad(shifted[1]) * 0.9)[::-1]])
    for mode in ("reverse", "forward"):
        J = ad.jacobian(fm, mode=mode)(v)
        np.testing.assert_allclose(np.array(J), stacked, rtol=1e-10, atol=1e-12)

    points = np.stack([v, v * 0.9, v + 0.05])
    batched = ad.vmap(grad)(points)
    np.testing.assert_allclose(batched, [grad(p) for p in points], rtol=1e-12, atol=1e-13)

    if with_sympy:
        symbolic = pytest.importorskip("adcompile.symbolic.bridge")
        sp = pytest.importorskip("sympy")
        (expr,) = symbolic.tape_to_sympy(tape)
        syms = [sp.Symbol(n) for n in tape.names]
        firsts = [sp.diff(expr, p) for p in syms]
        second = sp.lambdify(syms, [[sp.diff(d, q) for q in syms] for d in firsts], "mpmath")
        want = np.array(second(*v), dtype=float)  # evalf(subs=...) is minutes here
        np.testing.assert_allclose(H, want, rtol=1e-8, atol=1e-10)


_transform_args = dict(
    **_args,
    t=st.lists(st.floats(-1, 1), min_size=5, max_size=5).map(np.array),
)


@settings(max_examples=8, derandomize=True, **PATIENT)
@given(src=programs(), **_transform_args)
def test_transforms_agree_on_random_programs(src, x, y, a, t):
    check_transforms(src, x, y, a, t, with_sympy=False)


@pytest.mark.fuzz
@settings(max_examples=max(LONG // 4, 100), **PATIENT)
@given(src=programs(), **_transform_args)
def test_transforms_agree_long_profile(src, x, y, a, t):
    check_transforms(src, x, y, a, t, with_sympy=True)
