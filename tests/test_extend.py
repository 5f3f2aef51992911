"""User-defined primitives: one registration, every backend."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import sympy as sp

import adcompile as ad
from adcompile.api.extend import Function, primitive
from adcompile.diff import interpret
from adcompile.diff.reverse import grad_tape
from adcompile.ir.ops import OPS
from adcompile.ir.tape import Param
from adcompile.symbolic.bridge import from_sympy
from adcompile.symbolic.check import GradientMismatch, check_grad
from adcompile.symbolic.transforms import to_sympy

# The primitives are registered for this module only (a fixture removes them
# afterwards), so that other modules' tests over the whole op table see only
# the built-in ops; they are reached as P.xt_erf ...
P = SimpleNamespace()


def _define_primitives() -> dict:
    """Register every primitive these tests use."""

    @primitive(
        vjp=lambda g, out, x: g * (2 / math.sqrt(math.pi)) * ad.exp(-x * x),
        code="math.erf({0})",
        sympy="erf",
    )
    def xt_erf(x):
        """The error function."""
        return math.erf(x)

    @primitive(vjp=lambda g, out, x: g * ad.sigmoid(x))  # no code, no sympy: both derived
    def xt_softplus(x):
        return ad.log(1.0 + ad.exp(x))

    # math.hypot(*xs) has no fixed arity: the two rules say it takes two arguments.
    # No SymPy form: in SymPy it is an undefined function.
    xt_hypot = primitive(
        math.hypot,
        vjp=(lambda g, out, a, b: g * a / out, lambda g, out, a, b: g * b / out),
        code="math.hypot({0}, {1})",
        name="xt_hypot",
    )

    @primitive(vjp=lambda g, out, x: g * 3.0 * ad.cos(x), code="math.sin({0})", sympy="sin")
    def xt_badsin(x):  # a deliberately wrong rule (3 cos x), with a SymPy form
        return math.sin(x)

    @primitive(vjp=lambda g, out, x: g * out, code="math.exp(2.0 * {0})")
    def xt_badexp2(x):  # a deliberately wrong rule (forgets the 2), without a SymPy form
        return math.exp(2.0 * x)

    class XtCube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3.0 * x * x

    class XtAtan2(Function):
        code = "math.atan2({0}, {1})"
        sympy = "atan2"

        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return math.atan2(a, b)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            r2 = a * a + b * b
            return g * b / r2, -g * a / r2

    class XtBadCube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2.0 * x * x  # wrong: 3 x^2

    # a rule written with math.*: fine on floats, refused when it would freeze a traced value
    xt_msin = primitive(
        math.sin, vjp=lambda g, out, x: g * math.cos(x), code="math.sin({0})", name="xt_msin"
    )

    class XtCtxAttr(Function):
        code = "{0}"

        @staticmethod
        def forward(ctx, x):
            ctx.scale = 2.0  # refused: backward may use only inputs and output
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    return dict(locals())


@pytest.fixture(scope="module", autouse=True)
def _primitives():
    n = len(OPS)
    P.__dict__.update(_define_primitives())
    yield
    for name in list(OPS)[n:]:  # the last ops registered, so no opcode is reused
        del OPS[name]
    P.__dict__.clear()


def uses_all(x, y):
    return (
        P.xt_erf(x) * P.xt_softplus(y)
        + P.xt_hypot(x, y)
        + P.XtCube.apply(x)
        - P.XtAtan2.apply(y, x)
    )


def uses_all_grad(x, y):
    erf, sp_ = math.erf(x), math.log1p(math.exp(y))
    derf = 2 / math.sqrt(math.pi) * math.exp(-x * x)
    sig = 1 / (1 + math.exp(-y))
    r, r2 = math.hypot(x, y), x * x + y * y
    return (derf * sp_ + x / r + 3 * x * x + y / r2, erf * sig + y / r - x / r2)


POINT = (0.4, 1.3)


def test_registered_in_the_op_table():
    assert OPS["xt_erf"] is P.xt_erf.op and P.xt_erf.op.arity == 1
    assert OPS["xtcube"] is P.XtCube.op and P.XtAtan2.op.arity == 2
    assert P.xt_erf.__doc__ == "The error function."
    assert P.xt_hypot.op.arity == 2


def test_floats_arrays_and_values():
    assert P.xt_erf(0.5) == math.erf(0.5)
    assert P.xt_hypot(3.0, 4.0) == 5.0
    assert np.allclose(P.xt_erf(np.array([0.1, 0.2])), [math.erf(0.1), math.erf(0.2)])
    v = ad.Value(0.5)
    out = v.xt_erf() * 2  # a Value method, as for built-in ops
    out.backward()
    assert out.data == 2 * math.erf(0.5)
    assert v.grad == pytest.approx(4 / math.sqrt(math.pi) * math.exp(-0.25))


def test_derived_code_and_sympy_form():
    assert P.xt_softplus.op.code == "math.log((1.0 + math.exp({0})))"
    assert P.XtCube.op.code == "(({0} * {0}) * {0})"
    y = sp.Symbol("y")
    assert P.xt_softplus.op.sympy(sp, y) == sp.log(sp.exp(y) + 1)


def test_interpreter_and_eager_backward():
    tape = ad.trace(uses_all, *POINT)
    value, grad = interpret.value_and_grad(tape, POINT)
    assert value == pytest.approx(uses_all(*POINT), rel=1e-14)
    assert grad == pytest.approx(uses_all_grad(*POINT), rel=1e-12)
    xs = [ad.Value(v) for v in POINT]
    uses_all(*xs).backward()
    assert [v.grad for v in xs] == pytest.approx(uses_all_grad(*POINT), rel=1e-12)


def test_compiled_straight_line_code():
    vg = ad.value_and_grad(uses_all, argnums=(0, 1))
    value, grad = vg(*POINT)
    assert value == pytest.approx(uses_all(*POINT), rel=1e-14)
    assert grad == pytest.approx(uses_all_grad(*POINT), rel=1e-12)
    assert "math.erf(" in vg.source and "math.hypot(" in vg.source


def test_compiled_tape_interpreter():
    gtape = grad_tape(ad.trace(uses_all, *POINT))
    from adcompile.backend.compiled import compile_tape

    compiled = compile_tape(gtape, [Param("x", None), Param("y", None)], "f", force="interpreter")
    ok, out = compiled(*POINT)
    assert ok and list(out) == pytest.approx([uses_all(*POINT), *uses_all_grad(*POINT)])


def test_sympy_bridge_both_ways():
    x, y = sp.symbols("x y")
    expr = to_sympy(uses_all, *POINT)
    assert expr.has(sp.erf(x)) and expr.has(sp.Function("xt_hypot")(x, y))
    back = from_sympy(expr, [x, y])  # erf -> an op of that SymPy name, xt_hypot by name
    assert back.evaluate(*POINT)[0] == pytest.approx(uses_all(*POINT), rel=1e-13)
    assert from_sympy(sp.erf(x), [x]).nodes[-1].op.sympy == "erf"  # (xt_erf's or the table's)


def test_check_grad_passes_on_right_rules():
    report = check_grad(lambda x: P.xt_erf(x) * P.XtCube.apply(x) + P.xt_softplus(x), 0.3)
    assert report.sympy is not None  # every op here has a SymPy form (given or derived)
    report = check_grad(uses_all, *POINT, argnums=(0, 1))
    assert report.sympy is None and any("xt_hypot" in n for n in report.notes)
    assert not np.isnan(report.finite_diff).any()


@pytest.mark.parametrize(
    "f, methods",
    [
        (lambda x: P.xt_badsin(x) + x, ("sympy", "finite diff")),
        (lambda x: P.xt_badexp2(x) * 2.0, ("finite diff",)),
        (lambda x: P.XtBadCube.apply(x) - x, ("sympy", "finite diff")),
    ],
)
def test_check_grad_catches_a_wrong_rule(f, methods):
    with pytest.raises(GradientMismatch, match=r"argument 'x'") as info:
        check_grad(f, 0.8)
    first = str(info.value).splitlines()[0]
    for m in ("compiled=", "interpreter=", *(f"{m}=" for m in methods)):
        assert m in first


def test_errors_at_definition():
    with pytest.raises(TypeError, match="needs code="):

        @primitive(vjp=lambda g, out, x: g)
        def xt_uses_math(x):
            return math.lgamma(x)

    with pytest.raises(ValueError, match="uses 'numpy'"):
        primitive(math.tan, vjp=lambda g, out, x: g, code="numpy.tan({0})", name="xt_tan")
    with pytest.raises(ValueError, match="not a Python expression"):
        primitive(math.tan, vjp=lambda g, out, x: g, code="math.tan({0}", name="xt_tan")
    with pytest.raises(ValueError, match="already defined"):
        primitive(math.sin, vjp=lambda g, out, x: g, code="math.sin({0})", name="sin")
    with pytest.raises(ValueError, match="Value attribute"):
        primitive(math.sin, vjp=lambda g, out, x: g, code="math.sin({0})", name="backward")
    with pytest.raises(TypeError, match="1 or 2"):
        primitive(lambda a, b, c: a, vjp=(None,) * 3, code="{0}", name="xt_three")
    with pytest.raises(TypeError, match="a tuple of 2 functions"):
        primitive(lambda a, b: a, vjp=lambda g, out, a, b: g, code="{0}", name="xt_two")
    with pytest.raises(ValueError, match="lambda needs name"):
        primitive(lambda x: x, vjp=lambda g, out, x: g, code="{0}")
    assert "xt_tan" not in OPS and "xt_uses_math" not in OPS


def test_rule_written_with_math_fails_clearly_when_traced():
    v = ad.Value(0.3)
    P.xt_msin(v).backward()  # on floats the rule is fine
    assert v.grad == pytest.approx(math.cos(0.3))
    with pytest.raises(TypeError, match="derivative rule of primitive 'xt_msin'.*not math"):
        ad.grad(P.xt_msin)(0.3)


def test_function_ctx_keeps_only_inputs_and_output():
    with pytest.raises(AttributeError, match="save_for_backward"):
        P.XtCtxAttr.apply(1.0)
