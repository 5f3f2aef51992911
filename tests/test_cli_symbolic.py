"""``adcompile check`` and ``adcompile grad``, through a throwaway argparse parser."""

from __future__ import annotations

import argparse
import math
import re

import numpy as np
import pytest
from conftest import fresh_loader

import adcompile as ad
from adcompile.api.extend import primitive
from adcompile.cli.formula import (
    FormulaError,
    add_check_parser,
    add_grad_parser,
    parse_formula,
    parse_point,
)
from adcompile.ir.ops import OPS


@pytest.fixture
def badsin():
    """A primitive with a wrong rule, callable from formulas by name (for this test only)."""
    n = len(OPS)
    primitive(
        math.sin,
        vjp=lambda g, out, x: g * 2.0 * ad.cos(x),
        code="math.sin({0})",
        sympy="sin",
        name="clit_badsin",
    )
    yield "clit_badsin"
    for name in list(OPS)[n:]:  # the last ops registered, so no opcode is reused
        del OPS[name]


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="adcompile")
    sub = parser.add_subparsers(dest="command", required=True)
    add_check_parser(sub)
    add_grad_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_check_prints_every_method_and_exits_0(capsys):
    assert run("check", "sin(x)*y + exp(x/y)", "--at", "x=1,y=2") == 0
    out = capsys.readouterr().out
    assert "f(x, y) = sin(x)*y + exp(x/y)  at x=1.0, y=2.0" in out
    for method in ("compiled", "adjoint tape", "interpreter", "sympy", "finite diff"):
        assert method in out
    dfdx = math.cos(1) * 2 + math.exp(0.5) / 2
    assert f"{dfdx:.12g}"[:12] in out
    assert out.rstrip().endswith("OK")


def test_check_mismatch_exits_1(capsys, badsin):
    assert run("check", f"{badsin}(x) + x", "--at", "x=0.5") == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out
    assert "gradient check failed for d f / d x" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (("check", "sin(x", "--at", "x=1"), "cannot parse"),
        (("check", "__import__('os')", "--at", "x=1"), "unknown function __import__"),
        (("check", "x.real", "--at", "x=1"), "not allowed"),
        (("check", "x[0]", "--at", "x=1"), "not allowed"),
        (("check", "x ^ 2", "--at", "x=1"), "use \\*\\* for powers"),
        (("check", "x < 2", "--at", "x=1"), "not allowed"),
        (("check", "'a' * x", "--at", "x=1"), "not a real number"),
        (("check", "sin(x, x)", "--at", "x=1"), "takes 1 argument"),
        (("check", "sin + x", "--at", "x=1"), "sin is a function"),
        (("check", "x * y", "--at", "x=1"), "no value for y"),
        (("check", "x", "--at", "x=1,z=2"), "does not use"),
        (("check", "x", "--at", "x=one"), "not a number"),
        (("check", "x", "--at", "x"), "name=value"),
        (("grad", "2 + pi"), "no variables"),
        (("grad", "lambda: 1"), "not allowed"),
        (("grad", "sin(x", "--hessian"), "cannot parse"),
        (("grad", "x*y", "--hessian", "--at", "x=1"), "no value for y"),
        (("check", "x*y", "--at", "x=1", "--hessian"), "no value for y"),
        (("check", "x*e", "--at", "x=1,e=2"), "e is a constant \\(2.718281828459045\\)"),
        (("grad", "2 + e"), "no variables"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert run(*argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"adcompile {argv[0]}: error:")
    assert "Traceback" not in err
    assert re.search(message, err), err


def test_grad_prints_the_symbolic_gradient(capsys):
    assert run("grad", "sin(x)*y + exp(x/y)") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "f(x, y) = y*sin(x) + exp(x/y)",
        "df/dx = y*cos(x) + exp(x/y)/y",
        "df/dy = -x*exp(x/y)/y**2 + sin(x)",
    ]


def test_grad_code_prints_the_adjoint_source(capsys):
    assert run("grad", "asin(x) * y ** 2", "--code") == 0
    out = capsys.readouterr().out
    assert "df/dy = 2*y*asin(x)" in out
    assert "def f_value_and_grad(x, y, out):" in out and "# v" in out


def test_parse_formula_builds_a_function_over_adcompile():
    formula = parse_formula(" max(b, a) + E * pi ")
    assert formula.variables == ["a", "b"]
    assert formula.fn(1.0, 2.0) == 2.0 + math.e * math.pi
    assert isinstance(formula.fn(ad.Value(1.0), 2.0), ad.Value)
    assert parse_point(["b=2", "a=1"], formula.variables) == [1.0, 2.0]
    with pytest.raises(FormulaError):
        parse_formula("import os")


@pytest.mark.parametrize(
    "expr, value",
    [
        ("3", 3.0),
        ("e", math.e),
        ("2*pi - E", 2 * math.pi - math.e),
        ("exp(1) - e", 0.0),
        ("1/0", math.inf),  # as NumPy, not a ZeroDivisionError
        ("log(-1)", math.nan),
    ],
)
def test_check_of_a_constant_prints_its_value(expr, value, capsys):
    assert run("check", expr) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    head, _, shown = lines[0].rpartition(" = ")
    assert head == f"f() = {expr}" and " at " not in lines[0]
    assert float(shown) == pytest.approx(value, rel=1e-15, nan_ok=True)
    assert lines[1:] == ["a constant: no variables, so no gradient to check"]
    assert captured.err == ""


def test_e_is_eulers_number_not_a_variable(capsys):
    formula = parse_formula("x * e + E")
    assert formula.variables == ["x"]
    assert formula.fn(2.0) == 2.0 * math.e + math.e
    assert run("check", "x * e", "--at", "x=2") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "f(x) = x * e  at x=2.0"
    row = next(line for line in out.splitlines() if line.startswith("x "))  # d(x e)/dx = e
    assert [float(v) for v in row.split()[1:5]] == pytest.approx([math.e] * 4, rel=1e-14)


def _hessian_rows(out: str) -> np.ndarray:
    """The numbers printed under ``Hessian at ...``."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("Hessian at")) + 1
    rows = []
    for line in lines[start:]:
        try:
            rows.append([float(x) for x in line.split()])
        except ValueError:
            break
    return np.array(rows)


def test_grad_hessian_prints_second_derivatives(capsys):
    assert run("grad", "sin(x)*y", "--hessian") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3:] == ["d2f/dx^2 = -y*sin(x)", "d2f/dx dy = cos(x)", "d2f/dy^2 = 0"]


def test_grad_hessian_at_a_point_prints_its_numbers(capsys):
    assert run("grad", "sin(x)*y + x*x*x*y", "--hessian", "--at", "x=0.5,y=2") == 0
    out = capsys.readouterr().out
    assert "Hessian at x=0.5, y=2.0 (rows and columns x, y):" in out
    # by hand: f_xx = -y sin x + 6 x y, f_xy = cos x + 3 x^2, f_yy = 0
    fxy = math.cos(0.5) + 0.75
    hand = [[-2 * math.sin(0.5) + 6.0, fxy], [fxy, 0.0]]
    np.testing.assert_allclose(_hessian_rows(out), hand, rtol=1e-14, atol=1e-15)


def test_check_hessian_runs_check_jacobian(capsys):
    assert run("check", "x*x*y", "--at", "x=1,y=2", "--hessian") == 0
    out = capsys.readouterr().out
    assert "check_grad(f)" in out and "check_jacobian(f)" in out
    # H = [[2y, 2x], [2x, 0]] at (1, 2), by hand; the finite difference (differences of the
    # gradient) is shown with its estimated error, as 4.00000000000001±1.6e-09
    rows = {
        line.split()[4] + line.split()[6]: line.split()[7:11]
        for line in out.splitlines()
        if line.startswith("d2 f / d ")
    }
    hand = {"xx": 4.0, "xy": 2.0, "yx": 2.0, "yy": 0.0}
    for entry, want in hand.items():
        assert [float(x) for x in rows[entry][:3]] == [want] * 3
        fd, _, error = rows[entry][3].partition("±")
        assert abs(float(fd) - want) <= max(4 * float(error), 1e-6), rows[entry]
    assert out.rstrip().endswith("OK")


@pytest.fixture
def bad_second():
    """``clit_mysin`` with a right first derivative ``clit_mycos`` whose own rule is wrong:
    the gradient is right, the Hessian is not."""
    n = len(OPS)
    mycos = primitive(
        math.cos,
        vjp=lambda g, out, x: g * ad.sin(x),  # wrong sign
        code="math.cos({0})",
        sympy="cos",
        name="clit_mycos",
    )
    primitive(
        math.sin,
        vjp=lambda g, out, x: g * mycos(x),
        code="math.sin({0})",
        sympy="sin",
        name="clit_mysin",
    )
    yield "clit_mysin"
    for name in list(OPS)[n:]:
        del OPS[name]


def test_check_hessian_catches_a_wrong_second_derivative(capsys, bad_second):
    assert run("check", f"{bad_second}(x) * y", "--at", "x=0.5,y=2") == 0  # gradient fine
    capsys.readouterr()
    assert run("check", f"{bad_second}(x) * y", "--at", "x=0.5,y=2", "--hessian") == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out
    err = captured.err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("adcompile check: jacobian check failed for hessian d2 f / d x d x")
    assert f"sympy={-2 * math.sin(0.5)!r}"[:20] in err  # the true f_xx = -y sin x


def test_check_says_once_that_the_cache_cannot_be_used(tmp_path, monkeypatch, capsys):
    """adcompile's own warnings (here: a cache directory that is a file) reach stderr
    as one line; the check still runs, without a disk cache."""

    fresh_loader(monkeypatch)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path / "file"))
    assert run("check", "sin(x) * y + x ** 3", "--at", "x=0.31,y=2") == 0
    out, err = capsys.readouterr()
    assert "OK" in out
    lines = [line for line in err.splitlines() if "cache directory" in line]
    assert len(lines) == 1 and lines[0].startswith("adcompile: warning: ")
    assert "is a file" in lines[0] and "without a disk cache" in lines[0]


def test_check_takes_mod_and_floor_division(capsys):
    """% and // in formulas (the op table has them): d/dx (x % y + (x // y) x) =
    1 + x // y, d/dy = -(x // y), as JAX."""
    assert run("check", "x % y + x // y * x", "--at", "x=5.5,y=2") == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split()[1:5] for line in out.splitlines() if line[:2] in ("x ", "y ")
    }
    assert [float(v) for v in rows["x"]] == [3.0] * 4
    assert [float(v) for v in rows["y"]] == [-2.0] * 4
    assert out.rstrip().endswith("OK")
