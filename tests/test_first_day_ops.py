"""Issue 28, items 2 and 9: ``x ** y`` at 0, integers used while tracing, ``%`` and ``//``,
``np.isnan`` and friends, ``np.floor`` and the other rounding ufuncs, under the transforms.

Each test is written from the issue's description. Values are checked against NumPy
(and Python's operators), derivatives against hand-derived formulas, finite
differences and the eager ``backward()``; compiled code (Numba, and C where a
compiler is found) against the same values, bit for bit at special values.
"""

from __future__ import annotations

import argparse
import ctypes
import inspect
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy
from conftest import NUMPY_REF, build_c

import adcompile as ad
from adcompile.cli.formula import add_check_parser
from adcompile.diff import interpret
from adcompile.ir.ops import OPS
from adcompile.symbolic.bridge import from_sympy, limit_at

INF, NAN = math.inf, math.nan
SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, 3.0, -7.25, 1e300, -1e300, INF, -INF, NAN]
NEW_UNARY = ["floor", "ceil", "trunc", "rint"]
NEW_BINARY = ["floor_divide", "remainder"]
NUMPY = {name: NUMPY_REF[name] for name in NEW_UNARY + NEW_BINARY}


def same_bits(a: float, b: float) -> bool:
    """Equal as floats, nan with nan, and the same sign of a zero."""
    if math.isnan(b):
        return math.isnan(a)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def numpy_value(name: str, *xs: float) -> float:
    with np.errstate(all="ignore"):
        return float(NUMPY[name](*(np.float64(x) for x in xs)))


def points(name: str) -> list[tuple[float, ...]]:
    if name in NEW_UNARY:
        return [(x,) for x in SPECIAL]
    return [(a, b) for a in SPECIAL for b in SPECIAL]


# ---------------------------------------------------------------- item 2: x ** y at 0


def check(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="adcompile")
    add_check_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_pow_at_zero_has_the_limit_gradient_in_every_adjoint_method():
    # d/dx x**y = y x**(y-1) = 0 and d/dy x**y = x**y log x -> 0 at x = 0, y = 2 (it was
    # nan: 0 * log 0); central differences: ((h**2 - h**2) / 2h, (0 - 0) / 2h) = (0, 0)
    f = lambda x, y: x**y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (SymPy's column: the test below)
        report = ad.check_grad(f, 0.0, 2.0, argnums=(0, 1))
    assert not report.failures
    for method in (report.compiled, report.adjoint_tape, report.interpreter):
        assert list(method) == [0.0, 0.0]
    assert list(report.finite_diff) == [0.0, 0.0]
    x, y = ad.Value(0.0), ad.Value(2.0)
    (x**y).backward()
    assert (x.grad, y.grad) == (0.0, 0.0)


def test_adcompile_check_x_pow_y_at_zero_is_ok_not_singular(capsys):
    assert check("check", "x**y", "--at", "x=0,y=2") == 0
    out = capsys.readouterr().out
    assert "SINGULAR" not in out and out.rstrip().endswith("OK")


@pytest.mark.parametrize("x", [2.0, 2.0 + 1e-9, 3.0 - 1e-7])
def test_check_grad_on_or_next_to_a_jump_of_floor_is_not_a_mismatch(x):
    # f = floor(x) * x: the derivative is floor(x) (floor' = 0, as JAX), also on the jump
    # at 2, where a difference across it (about 1 / 2h) is no reference
    report = ad.check_grad(lambda x: np.floor(x) * x, x)
    assert report.ok
    assert report.compiled[0] == report.interpreter[0] == report.sympy[0] == math.floor(x)


def test_pow_rules_elsewhere_are_unchanged_and_hessian_at_zero_is_the_limit():
    # d2/dx2 x**y = y (y-1) x**(y-2) = 2, d2/dxdy = x**(y-1) (1 + y log x) -> 0,
    # d2/dy2 = x**y log(x)**2 -> 0 at (0, 2)
    h = ad.hessian(lambda p: p[0] ** p[1])(np.array([0.0, 2.0]))
    np.testing.assert_array_equal(h, [[2.0, 0.0], [0.0, 0.0]])
    x, y = 1.5, 2.5
    lx = math.log(x)
    want = [
        [y * (y - 1) * x ** (y - 2), x ** (y - 1) * (1 + y * lx)],
        [x ** (y - 1) * (1 + y * lx), x**y * lx**2],
    ]
    np.testing.assert_allclose(ad.hessian(lambda p: p[0] ** p[1])(np.array([x, y])), want)


# ---------------------------------------------------------------- item 9: integers


def test_an_int_argument_in_range_says_how_to_pass_it():
    def f(x, n):
        return sum(x * i for i in range(n))

    with pytest.raises(TypeError) as e:
        ad.grad(f)(2.0, 3)
    text = str(e.value)
    assert "cannot be interpreted as an integer" not in text
    assert "traced Value (now 3.0) was used as an integer" in text
    assert "keyword argument" in text and "f(x, n=3)" in text
    assert "static_argnums" in text and "ad.grad(f, static_argnums=1)" in text


@pytest.mark.parametrize(
    "f",
    [
        lambda x, n: (x[:n] ** 2).sum(),  # a slice
        lambda x, n: [x[0], x[1], x[2]][n] * 2.0,  # a list's index
        lambda x, n: sum([x[0]] * n),  # a repetition
    ],
    ids=["slice", "list index", "repetition"],
)
def test_an_int_argument_as_a_slice_index_or_count_says_the_same(f):
    with pytest.raises(TypeError, match=r"used as an integer.*static_argnums"):
        ad.grad(f)(np.arange(4.0), 2)


def test_an_eager_value_used_as_an_integer_says_what_it_holds():
    with pytest.raises(
        TypeError,
        match=r"a Value \(holding 3.0\) cannot be used as an "
        r"integer.*int\(v.data\)",
    ):
        range(ad.Value(3.0))


def test_int_of_a_traced_value_names_static_argnums_too():
    with pytest.raises(TypeError, match=r"int\(\) was called on a traced Value.*static_argnums"):
        ad.grad(lambda x, n: x * int(n))(1.0, 2.0)


@pytest.mark.parametrize("n", [3, 300])  # (traced element by element, at array level)
def test_a_float_array_conversion_of_an_argument_is_named(n: int):
    with pytest.raises(TypeError, match=r"np\.asarray\(x, dtype=float\).*left out"):
        ad.grad(lambda x: np.sum(np.asarray(x, dtype=float) ** 2))(np.ones(n))
    g = ad.grad(lambda x: np.sum(x.astype(float) ** 2))(np.arange(n, dtype=float))
    np.testing.assert_allclose(g, 2.0 * np.arange(n))  # (d/dx sum x^2, by hand)


@pytest.mark.skipif(
    "static_argnums" not in inspect.signature(ad.grad).parameters,
    reason="ad.grad has no static_argnums yet (another part of issue 28)",
)
def test_the_advice_works_a_static_int_sizes_the_range():
    def f(x, n):
        return sum(x ** float(i) for i in range(n))  # d/dx = sum i x**(i-1) = 0 + 1 + 2x

    assert ad.grad(f, static_argnums=1)(2.0, 3) == 1.0 + 2.0 * 2.0
    assert ad.grad(f)(2.0, n=3) == 5.0


# ---------------------------------------------------------------- item 9: % and //


def f_mod(x, y):
    return (x % y) * x + (x // y) * y + (7.0 % x) + (7 // y) + (x % 1.5) * (2.5 // y)


def grad_mod(x: float, y: float) -> tuple[float, float]:
    """By hand: d(x % y)/dx = 1, d(x % y)/dy = -(x // y), d(//) = 0."""
    dx = (x % y) + x + (-(7.0 // x)) + (2.5 // y)
    dy = x * (-(x // y)) + (x // y)
    return dx, dy


@pytest.mark.parametrize("x, y", [(5.3, 2.0), (-5.3, 2.0), (5.3, -2.0), (-5.3, -2.0), (0.65, 0.3)])
def test_mod_and_floordiv_on_traced_values_follow_python_with_jax_derivatives(x, y):
    vg = ad.value_and_grad(f_mod, argnums=(0, 1))
    value, (dx, dy) = vg(x, y)
    assert value == pytest.approx(f_mod(x, y), rel=1e-14)  # Python's own floats
    want = grad_mod(x, y)
    assert (dx, dy) == pytest.approx(want, rel=1e-13)
    vx, vy = ad.Value(x), ad.Value(y)
    out = f_mod(vx, vy)
    out.backward()
    assert out.data == value and (vx.grad, vy.grad) == (dx, dy)
    h = 1e-7  # (no jump within h of these points)
    fdx = (f_mod(x + h, y) - f_mod(x - h, y)) / (2 * h)
    fdy = (f_mod(x, y + h) - f_mod(x, y - h)) / (2 * h)
    assert (fdx, fdy) == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_mod_and_floordiv_by_zero_follow_numpy():
    # Python raises ZeroDivisionError; NumPy (and adcompile, as for 1 / 0) answers
    for x in (1.0, -1.0, 0.0):
        v = ad.Value(x)
        assert same_bits((v // 0.0).data, numpy_value("floor_divide", x, 0.0))
        assert math.isnan((v % 0.0).data)
        assert same_bits(ad.jit(lambda a, b: a // b)(x, 0.0), numpy_value("floor_divide", x, 0.0))
        assert math.isnan(ad.jit(lambda a, b: a % b)(x, 0.0))


def test_divmod_of_values():
    q, r = divmod(ad.Value(-7.5), 2.0)
    assert (q.data, r.data) == divmod(-7.5, 2.0) == (-4.0, 0.5)
    q, r = divmod(7.5, ad.Value(-2.0))
    assert (q.data, r.data) == divmod(7.5, -2.0)


def test_numpy_floor_divide_remainder_and_mod_on_arrays_of_values():
    xs = np.array([5.3, -5.3, 0.7, 2.0])
    ys = np.array([2.0, 2.0, -0.3, 0.5])
    plain = np.array([ad.Value(x) for x in xs], dtype=object)
    for a in (plain, ad.tensor(xs)):
        for fn in (np.floor_divide, np.remainder, np.mod):
            out = fn(a, ys)
            assert all(isinstance(v, ad.Value) for v in out)
            np.testing.assert_array_equal([v.data for v in out], fn(xs, ys))
    # gradients through a traced array argument: d/dx sum(x % y) = 1, d/dy = -(x // y)
    g = ad.grad(lambda x, y: np.mod(x, y).sum() + np.floor_divide(x, y).sum(), argnums=(0, 1))
    dx, dy = g(xs, ys)
    np.testing.assert_array_equal(dx, np.ones(4))
    np.testing.assert_array_equal(dy, -np.floor_divide(xs, ys))


# ---------------------------------------------------------------- item 9: isnan ...


def test_isnan_isfinite_isinf_on_a_value_answer_bools():
    for x in (1.5, -0.0, INF, -INF, NAN):
        v = ad.Value(x)
        for fn in (np.isnan, np.isfinite, np.isinf):
            got = fn(v)
            assert type(got) is bool and got == bool(fn(x)), (fn, x)


def branchy(x):
    if np.isnan(x):
        return 0.0 * x
    if np.isinf(x):
        return 3.0 * x
    if not np.isfinite(x * 1e300):  # (x * 1e300 overflows for |x| > 1.8e8)
        return 2.0 * x
    return x * x


@pytest.mark.parametrize("transform", ["grad", "jit"])
def test_isnan_branches_are_guarded_in_compiled_code(transform):
    # each branch is traced once; a later input taking another branch never gets the
    # first branch's answer (the tests are guards, re-checked by the compiled code)
    calls = []

    def f(x):
        calls.append(x)
        return branchy(x)

    fn = getattr(ad, transform)(f)
    want = {
        "grad": {3.0: 6.0, NAN: 0.0, INF: 3.0, 1e200: 2.0, -2.0: -4.0},
        "jit": {3.0: 9.0, NAN: NAN, INF: INF, 1e200: 2e200, -2.0: 4.0},
    }[transform]
    for x, y in want.items():
        got = fn(x)
        assert same_bits(got, y) or (math.isnan(y) and math.isnan(got)), (x, got, y)
    assert len(calls) == 4  # 3.0 (then -2.0 on the same branch), nan, inf, 1e200
    text = ad.explain(fn)
    assert "x != x" in text  # np.isnan's guard, with the user's line


def test_isnan_and_isfinite_guards_in_a_loop_fold_and_hold():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            if np.isnan(x[i]) or not np.isfinite(x[i]):
                continue
            s = s + x[i] * x[i]
        return s

    g = ad.grad(f)
    x = np.linspace(-3.0, 3.0, 300)
    np.testing.assert_array_equal(g(x), 2.0 * x)
    y = x.copy()
    y[5], y[7] = NAN, -INF
    want = 2.0 * y
    want[5] = want[7] = 0.0
    np.testing.assert_array_equal(g(y), want)
    assert g.traces == 2


def test_isnan_of_the_data_of_a_traced_value_is_guarded_too():
    def f(x):
        return x * 2.0 if np.isnan(x.data) else x * x

    g = ad.grad(f)
    assert g(3.0) == 6.0
    assert g(NAN) == 2.0  # not the first branch's 2x = nan


# ---------------------------------------------------------------- item 9: np.floor ...


@pytest.mark.parametrize("fn", [np.floor, np.ceil, np.trunc, np.rint, np.round, np.around])
def test_rounding_ufuncs_on_traced_values_have_zero_derivative(fn):
    # d/dx [x * r(x)] = r(x) (r' = 0, as JAX); for x an array argument too
    for x in (2.3, -2.7, 2.5, -0.5):
        value, g = ad.value_and_grad(lambda x: x * fn(x))(x)
        assert value == x * float(fn(x)) and g == float(fn(x))
    xs = np.array([2.3, -2.7, 2.5, -0.5, 3.5])
    np.testing.assert_array_equal(ad.grad(lambda x: (x * fn(x)).sum())(xs), fn(xs))


def test_round_with_decimals_follows_numpy():
    for x, d in [(2.345, 2), (-2.355, 2), (1234.5, -2), (0.125, 2), (2.5, 0)]:
        assert ad.Value(x).round(d).data == np.round(x, d)
        assert ad.jit(lambda x: np.round(x, d))(x) == np.round(x, d)


@pytest.mark.parametrize("name", NEW_UNARY + NEW_BINARY)
def test_compiled_values_match_numpy_bit_for_bit_at_special_values(name):
    op = OPS[name]
    f = ad.jit(lambda x: op(x)) if op.arity == 1 else ad.jit(lambda x, y: op(x, y))
    for xs in points(name):
        want = numpy_value(name, *xs)
        assert same_bits(op.eval(*xs), want), ("eval", xs)
        assert same_bits(f(*xs), want), ("compiled", xs)


def test_compiled_rounding_at_every_half_and_near_2_to_the_52():
    xs = np.concatenate(
        [np.arange(-6.0, 6.0, 0.25), [2.0**52 - 0.5, -(2.0**52) + 0.5, 2.0**52, 2.0**53 + 2]]
    )
    xs = np.concatenate([xs, np.nextafter(xs, INF), np.nextafter(xs, -INF)])
    for name in NEW_UNARY:
        f = ad.jit(lambda x, _n=name: OPS[_n](x).sum())
        for x in xs:
            assert same_bits(f(np.array([x])), numpy_value(name, x)), (name, x)


# ---------------------------------------------------------------- C templates


def build(tmp_path: Path, src: str, name: str) -> ctypes.CDLL:
    return build_c(tmp_path, src, name)


def test_c_export_of_rounding_and_remainder_matches_numpy(tmp_path):
    def f(x, y):
        return (np.floor(x), np.ceil(x), np.trunc(x), np.rint(x), x // y, x % y)

    src = ad.export(f, 1.0, 2.0, transform="value", target="c")
    fn = build(tmp_path, src, "rounding").f_value
    fn.argtypes = [ctypes.c_double, ctypes.c_double, ctypes.POINTER(ctypes.c_double)]
    fn.restype = ctypes.c_int
    out = np.empty(6)
    halves = [k / 2 for k in range(-7, 8)]
    for x in SPECIAL + halves:
        for y in SPECIAL:
            assert fn(x, y, out.ctypes.data_as(ctypes.POINTER(ctypes.c_double))) == 0
            names = ["floor", "ceil", "trunc", "rint", "floor_divide", "remainder"]
            for got, name in zip(out, names):
                want = numpy_value(name, *((x,) if name in NEW_UNARY else (x, y)))
                assert same_bits(float(got), want), (name, x, y, got, want)


# ---------------------------------------------------------------- SymPy forms


def test_sympy_forms_of_the_new_ops_differentiate_as_the_rules_and_map_back():
    def f(x, y):
        return np.floor(x) * y + np.ceil(y) + np.trunc(x) + np.rint(y) + (x // y) + (x % y) * x

    expr = ad.to_sympy(f, 5.3, 2.0)
    x, y = sorted(expr.free_symbols, key=str)
    # floor' = 0 (as JAX; SymPy's own floor leaves it unevaluated), Mod: 1 and -floor(x/y)
    dx, dy = sympy.diff(expr, x), sympy.diff(expr, y)
    at = {x: 5.3, y: 2.0}
    assert float(dx.subs(at)) == pytest.approx(5.3 % 2.0 + 5.3, rel=1e-14)
    assert float(dy.subs(at)) == pytest.approx(5.0 - 5.3 * 2.0, rel=1e-14)
    # the tape's SymPy form maps back to the same ops, and so do SymPy's own classes
    tape = from_sympy(expr, [x, y])
    assert {n.op.name for n in tape.nodes if hasattr(n.op, "name")} >= {
        "floor",
        "ceil",
        "trunc",
        "rint",
        "remainder",
    }
    assert interpret.evaluate(tape, [5.3, 2.0])[0] == pytest.approx(f(5.3, 2.0), rel=1e-14)
    own = from_sympy(sympy.floor(x) + sympy.ceiling(y) + sympy.Mod(x, y), [x, y])
    assert interpret.evaluate(own, [-5.3, 2.0])[0] == -6.0 + 2.0 + (-5.3 % 2.0)
    # limit_at: the value where SymPy's form is undefined as written, and says so
    a, b = sympy.symbols("a b", real=True)
    assert limit_at(sympy.diff(a**b, b), {a: 0.0, b: 2.0}) == (0.0, "limit a -> 0")
    assert limit_at(sympy.diff(a**b, a), {a: 0.0, b: 2.0}) == (0.0, "limit a -> 0")
    assert limit_at(a * b, {a: 2.0, b: 3.0}) == (6.0, "")
    assert math.isnan(limit_at(1 / a, {a: 0.0})[0])  # no finite limit: nan


def test_in_on_a_set_or_dict_is_refused_a_tuple_is_guarded():
    # a set or dict looks a float up by its hash, which a traced Value (hashed by
    # identity) cannot match: refused by name, not answered "absent"
    for f in (
        lambda x: x * 2.0 if x in {1.0, 2.0} else -x,
        lambda x: x * {1.0: 5.0}.get(x, 0.5),
    ):
        with pytest.raises(TypeError, match=r"hash\(\) of a traced Value.*x in \(1\.0, 2\.0\)"):
            ad.grad(f)(1.0)
    g = ad.value_and_grad(lambda x: x * 2.0 if x in (1.0, 2.0) else -x)  # (== on each)
    for x in (1.0, 3.0, 2.0, -1.0):
        assert g(x) == ((2.0 * x, 2.0) if x in (1.0, 2.0) else (-x, -1.0))
    v = ad.Value(1.0)
    assert v in {v} and len({v, ad.Value(1.0)}) == 2  # (outside a trace: identity)
