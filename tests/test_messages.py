"""Bad input and awkward points get one clear line and the right exit status (issue 21, item 2).

Each test checks the exact words a user sees and the exit status, through ``cli.main``
(or a fresh ``python -m adcompile.cli`` where the process matters), never only that
something was raised.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import adcompile as ad
from adcompile.cli import commands as cli
from adcompile.symbolic.check import GradientMismatch, check_grad

ROOT = Path(__file__).resolve().parent.parent


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``adcompile ARGV``, expecting a usage error: the one line on stderr."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    return captured.err.rstrip("\n")


# ------------------------------------------------ 1. check at a singular point


SINGULAR_END = (
    "SINGULAR: inf or nan here, so only the adjoint methods (compiled, adjoint tape, "
    "interpreter) are held to agree; check the gradient at a point where f is finite and smooth"
)


def test_check_at_a_pole_reports_inf_and_says_singular(capsys):
    assert cli.main(["check", "x/y", "--at", "x=1,y=0"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == "f(x, y) = x/y  at x=1.0, y=0.0"
    assert lines[3].split() == ["value", "inf", "inf", "inf", "nan", "-"]
    assert lines[4].split()[:5] == ["x", "inf", "inf", "inf", "nan"]
    assert lines[5].split()[:5] == ["y", "-inf", "-inf", "-inf", "nan"]
    assert "singular for compiled, adjoint tape, interpreter: value inf, x inf, y -inf" in lines
    assert "singular for sympy: value, x, y undefined (division by zero)" in lines
    assert lines[-1] == SINGULAR_END
    assert "MISMATCH" not in captured.out
    assert captured.err == (
        "adcompile check: warning: check_grad(f): the point is singular for compiled, "
        "adjoint tape, interpreter: value inf, x inf, y -inf; sympy: value, x, y undefined "
        "(division by zero); only the adjoint methods were compared there\n"
    )


def test_check_sqrt_at_zero_in_a_fresh_process_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "adcompile.cli", "check", "sqrt(x)", "--at", "x=0"],
        capture_output=True,
        text=True,
        env={**os.environ, "ADCOMPILE_QUIET": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "ZeroDivisionError" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[3].split() == ["value", "0", "0", "0", "0", "-"]
    assert lines[4].split() == ["x", "inf", "inf", "inf", "nan", "nan"]
    assert "singular for compiled, adjoint tape, interpreter: x inf" in lines
    assert "singular for sympy: x undefined (division by zero)" in lines
    assert lines[-1] == SINGULAR_END
    assert proc.stderr == (
        "adcompile check: warning: check_grad(f): the point is singular for compiled, "
        "adjoint tape, interpreter: x inf; sympy: x undefined (division by zero); only the "
        "adjoint methods were compared there\n"
    )


def test_check_grad_at_a_pole_warns_and_returns_a_singular_report():
    with pytest.warns(RuntimeWarning) as record:
        report = check_grad(lambda x, y: x / y, 1.0, 0.0, argnums=(0, 1))
    assert [str(w.message) for w in record] == [
        "check_grad(<lambda>): the point is singular for compiled, adjoint tape, "
        "interpreter: value inf, x inf, y -inf; sympy: value, x, y undefined (division by "
        "zero); only the adjoint methods were compared there"
    ]
    assert not report.ok and report.failures == []
    assert report.status() == "SINGULAR" and repr(report) == "<GradReport <lambda>: SINGULAR>"
    assert report.compiled.tolist() == [math.inf, -math.inf]
    assert report.singular["interpreter"] == {"value": "inf", "x": "inf", "y": "-inf"}
    assert report.sympy_undefined == {-1, 0, 1}
    assert str(report).splitlines()[-1] == SINGULAR_END


def test_check_grad_default_argnums_at_a_pole_says_so_too():
    with pytest.warns(RuntimeWarning, match=r"singular for compiled, adjoint tape, interpreter"):
        report = check_grad(lambda x, y: x / y, 1.0, 0.0)
    assert report.labels == ["x"] and report.status() == "SINGULAR"


def test_check_grad_outside_the_domain_is_singular_not_ok():
    # log(-1) is nan by every method (as in NumPy); its derivative -1 is finite
    with pytest.warns(
        RuntimeWarning, match=r"compiled, adjoint tape, interpreter, sympy: value nan"
    ):
        report = check_grad(lambda x: ad.log(x), -1.0)
    assert report.status() == "SINGULAR" and report.compiled.tolist() == [-1.0]


def test_check_grad_at_a_regular_point_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = check_grad(lambda x, y: x / y, 1.0, 2.0, argnums=(0, 1))
    assert report.ok and report.singular == {} and str(report).endswith("\nOK")


def test_check_grad_still_compares_the_regular_entries_of_a_singular_point():
    from adcompile.ir.ops import Op

    # d/dy sqrt(y) is inf at y = 0, but d/dx of the wrong rule is still caught
    wrong = Op(
        "msg_wrong_sin",
        1,
        math.sin,
        "math.sin({0})",
        (lambda g, o, a: g * 2.0 * ad.cos(a),),
        "sin",
    )
    with pytest.raises(GradientMismatch) as err:
        check_grad(lambda x, y: wrong(x) + ad.sqrt(y), 0.5, 0.0, argnums=(0, 1))
    first, *rest = str(err.value).splitlines()
    wrong_dx = 2 * math.cos(0.5)
    assert first.startswith(
        f"gradient check failed for d <lambda> / d x (argument 'x'): compiled={wrong_dx!r}"
    )
    assert "singular for compiled, adjoint tape, interpreter: y inf" in rest
    assert rest[-1] == "MISMATCH"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rtol": -1.0}, "check_grad: rtol must be a number >= 0 (a tolerance), got -1.0"),
        ({"atol": math.nan}, "check_grad: atol must be a number >= 0 (a tolerance), got nan"),
        ({"fd_rtol": "big"}, "check_grad: fd_rtol must be a number >= 0 (a tolerance), got 'big'"),
    ],
)
def test_check_grad_rejects_bad_tolerances(kwargs, message):
    with pytest.raises(ValueError) as err:
        check_grad(lambda x: x * x, 1.0, **kwargs)
    assert str(err.value) == message


# ------------------------------------------------ 2. demo options


@pytest.fixture
def no_demo(monkeypatch):
    """Fail the test if the demo itself runs: the parser must reject the options first."""

    def refuse(args):
        raise AssertionError("the demo ran; the parser should have rejected its options")

    monkeypatch.setattr(cli, "cmd_demo", refuse)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--points", "0"], "argument --points: must be 2 or more (a point for each moon), got 0"),
        (
            ["--points", "-3"],
            "argument --points: must be 2 or more (a point for each moon), got -3",
        ),
        (
            ["--points", "1.5"],
            "argument --points: expected a whole number, such as 100; got '1.5'",
        ),
        (["--seed", "-1"], "argument --seed: must be 0 or more, got -1"),
        (["--seed", "x"], "argument --seed: expected a whole number, such as 1; got 'x'"),
        (["--epochs", "-5"], "argument --steps/--epochs: must be 1 or more, got -5"),
        (["--steps", "0"], "argument --steps/--epochs: must be 1 or more, got 0"),
        (
            ["--out", "moons.txt"],
            "argument --out: 'moons.txt' is not an image file name; end it with .png, .svg, "
            ".pdf or .jpg (or give --out '' for no picture)",
        ),
        (
            ["--out", "no/such/folder/moons.png"],
            "argument --out: there is no folder 'no/such/folder' to write 'moons.png' into; "
            "create it first (or give --out '' for no picture)",
        ),
    ],
)
def test_demo_rejects_bad_options_in_the_parser(argv, message, capsys, no_demo):
    assert usage_error(["demo", *argv], capsys) == f"adcompile demo: error: {message}"


def test_demo_out_naming_a_folder_is_rejected(capsys, no_demo, tmp_path):
    folder = tmp_path / "pics.png"
    folder.mkdir()
    assert usage_error(["demo", "--out", str(folder)], capsys) == (
        f"adcompile demo: error: argument --out: {str(folder)!r} is a folder; name a file in "
        f"it, such as {str(folder / 'demo.png')!r}"
    )


def test_demo_steps_and_its_alias_epochs(capsys):
    parser = cli.build_parser()
    assert parser.parse_args(["demo", "--epochs", "7"]).steps == 7
    assert parser.parse_args(["demo", "--steps", "8", "--out", ""]).steps == 8
    assert parser.parse_args(["demo"]).steps == 100
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--steps STEPS, --epochs STEPS training steps" in text
    assert "--points POINTS data points, at least 2 (default 100)" in text
    assert "a .png, .svg, .pdf or .jpg file in a folder that exists" in text


def test_unknown_option_is_one_line(capsys):
    assert usage_error(["demo", "--fast"], capsys) == (
        "adcompile: error: unrecognized arguments: --fast"
    )


# ------------------------------------------------ 3. tolerances of check


@pytest.mark.parametrize(
    "option, value",
    [
        ("--rtol", "-1"),
        ("--atol", "-0.5"),
        ("--rtol", "abc"),
        ("--atol", "nan"),
        ("--rtol", "inf"),
    ],
)
def test_check_rejects_bad_tolerances(option, value, capsys):
    assert usage_error(["check", "x", "--at", "x=1", option, value], capsys) == (
        f"adcompile check: error: argument {option}: a tolerance is a number >= 0, such as "
        f"1e-7; got {value!r}"
    )


def test_check_with_zero_tolerance_on_identical_numbers_is_ok(capsys):
    assert cli.main(["check", "x", "--at", "x=1", "--rtol", "0", "--atol", "0"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("\nOK")


# ------------------------------------------------ 4. from_sympy


EXPECTED = (
    "from_sympy(expr, symbols) expects a SymPy expression or a string SymPy can parse "
    "(such as 'x**2 + sin(y)'), or a list of them, and the SymPy Symbols it uses "
    "(sympy.symbols('x y'))"
)


def test_from_sympy_unparsable_string():
    x = sp.Symbol("x")
    with pytest.raises(ValueError) as err:
        ad.from_sympy("not an expr", [x])
    assert not isinstance(err.value, sp.SympifyError)
    assert str(err.value) == f"{EXPECTED}; SymPy cannot parse 'not an expr'"
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_from_sympy_not_an_expression():
    x = sp.Symbol("x")
    with pytest.raises(TypeError) as err:
        ad.from_sympy(object, [x])
    assert str(err.value) == f"{EXPECTED}; got type {object!r}"
    with pytest.raises(TypeError) as err:
        ad.from_sympy(sp.Eq(x, 1), [x])
    assert str(err.value) == f"{EXPECTED}; got Eq(x, 1), of type Equality, not an expression"


def test_from_sympy_symbols_as_a_string():
    with pytest.raises(TypeError) as err:
        ad.from_sympy("x**2", "x")
    assert str(err.value) == (
        "from_sympy: symbols must be SymPy Symbols, not the string 'x'; make them with "
        "sympy.symbols('x')"
    )


def test_from_sympy_still_takes_a_parsable_string():
    x, y = sp.symbols("x y")
    tape = ad.from_sympy("x**2 + sin(y)", [x, y])
    from adcompile.diff import interpret

    assert interpret.evaluate(tape, np.array([3.0, 0.5]))[0] == pytest.approx(9 + math.sin(0.5))


# ------------------------------------------------ 5. and 6. bench


def test_bench_help_names_adcompile_bench(capsys):
    assert cli.main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: adcompile bench [-h]")
    assert "python -m benchmarks.run" not in out


NO_CHECKOUT = (
    "adcompile bench: error: the benchmarks are not part of the installed package; they need "
    "a checkout of the adcompile repository: clone it with git, then in it run "
    "pip install -e '.[bench]' and adcompile bench --quick"
)


def test_bench_outside_a_checkout(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "_bench_roots", lambda: [tmp_path])
    assert cli.main(["bench", "--quick"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == NO_CHECKOUT + "\n"


def _installed_copy(tmp_path: Path) -> dict[str, str]:
    """A copy of the package outside any checkout, as pip install (not -e) would leave it;
    the environment that imports it."""
    shutil.copytree(
        ROOT / "adcompile", tmp_path / "site" / "adcompile", ignore=shutil.ignore_patterns("*.pyc")
    )
    return {**os.environ, "PYTHONPATH": str(tmp_path / "site")}


def test_bench_from_an_installed_copy_in_a_fresh_process(tmp_path):
    env = _installed_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "adcompile.cli", "bench", "--quick"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", NO_CHECKOUT + "\n")


def test_bench_whose_benchmarks_cannot_be_imported(tmp_path):
    env = _installed_copy(tmp_path)
    checkout = tmp_path / "checkout"
    (checkout / "benchmarks" / "systems").mkdir(parents=True)
    (checkout / "benchmarks" / "__init__.py").write_text("")
    (checkout / "benchmarks" / "systems" / "adcompile_compiled.py").write_text("")
    (checkout / "benchmarks" / "run.py").write_text("import no_such_bench_dependency\n")
    proc = subprocess.run(
        [sys.executable, "-m", "adcompile.cli", "bench"],
        capture_output=True,
        text=True,
        cwd=checkout,
        env=env,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"adcompile bench: error: cannot import the benchmarks of {checkout} (No module named "
        "'no_such_bench_dependency'); install their requirements there with "
        "pip install -e '.[bench]'\n"
    )
