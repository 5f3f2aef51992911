"""The ``adcompile check`` and ``adcompile grad`` subcommands.

A formula such as ``"sin(x)*y + exp(x/y)"`` is parsed with Python's ``ast``
and accepted only if it is made of numbers, variables, ``+ - * / **`` and
calls of adcompile's functions (every op in the table, user primitives
included, plus the aliases ``asin acos atan max min`` and the constants
``pi``, ``e`` and ``E``); nothing else is ever evaluated. It becomes an ordinary
Python function over adcompile's functions, in its variables sorted by name.

Wire them into the main parser with ``add_check_parser(subparsers)`` and
``add_grad_parser(subparsers)``; each sets ``func`` (``args.func(args)``
returns the exit code: 0 fine, 1 a gradient mismatch, 2 bad input).
"""

from __future__ import annotations

import argparse
import ast
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..ir.ops import OPS, Op, apply

__all__ = [
    "add_check_parser",
    "add_export_parser",
    "add_grad_parser",
    "parse_formula",
    "FormulaError",
]

ALIASES = {
    "asin": "arcsin",
    "acos": "arccos",
    "atan": "arctan",
    "max": "maximum",
    "min": "minimum",
}
#: Names that are constants, not variables: ``e`` is Euler's number, as ``E`` (SymPy's name).
CONSTANTS = {"pi": math.pi, "e": math.e, "E": math.e}
_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.Pow: "**",
    ast.Mod: "%",
    ast.FloorDiv: "//",
}


class FormulaError(ValueError):
    """A formula that is not made of numbers, variables, operators and known functions."""


class Formula:
    """A parsed formula: its text, variables (sorted) and the Python function computing it."""

    def __init__(self, text: str, variables: list[str], fn: Callable[..., Any]) -> None:
        self.text = text
        self.variables = variables
        self.fn = fn

    def signature(self) -> str:
        return f"f({', '.join(self.variables)})"


def _functions() -> dict[str, Op]:
    table = dict(OPS)
    for alias, name in ALIASES.items():
        table.setdefault(alias, OPS[name])
    return table


def _validate(tree: ast.Expression, functions: dict[str, Op]) -> set[str]:
    """The formula's variables, after checking every node is allowed."""
    variables: set[str] = set()
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.Load)) or type(node) in _BINOPS:
            continue
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                hint = " (use ** for powers)" if isinstance(node.op, ast.BitXor) else ""
                raise FormulaError(f"operator {type(node.op).__name__} is not allowed{hint}")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd)):
                raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
        elif isinstance(node, (ast.USub, ast.UAdd)):
            continue
        elif isinstance(node, ast.Constant):
            if type(node.value) not in (int, float):
                raise FormulaError(f"{node.value!r} is not a real number")
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in functions:
                what = ast.unparse(node.func)
                raise FormulaError(
                    f"unknown function {what}(); known: {', '.join(sorted(functions))}"
                )
            op = functions[node.func.id]
            if node.keywords or len(node.args) != op.arity:
                raise FormulaError(
                    f"{node.func.id}() takes {op.arity} argument(s), got "
                    f"{len(node.args) + len(node.keywords)}"
                )
        elif isinstance(node, ast.Name):
            if id(node) in called:
                continue
            if node.id in functions:
                raise FormulaError(f"{node.id} is a function: call it, as in {node.id}(x)")
            if node.id not in CONSTANTS:
                variables.add(node.id)
        else:
            raise FormulaError(f"{ast.unparse(node)!r} is not allowed in a formula")
    return variables


def _namespace(functions: dict[str, Op]) -> dict[str, Any]:
    """What a formula's code sees: the constants and the functions, no builtins."""
    namespace: dict[str, Any] = {"__builtins__": {}, **CONSTANTS}
    for name, op in functions.items():
        namespace[name] = lambda *args, _op=op: apply(_op, *args)
    return namespace


def parse_formula(text: str) -> Formula:
    """Parse ``text`` into a Formula; FormulaError if it is not a plain formula."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise FormulaError(f"cannot parse {text!r}: {e.msg}") from None
    functions = _functions()
    variables = sorted(_validate(tree, functions))
    namespace = _namespace(functions)
    source = f"def f({', '.join(variables)}):\n    return {ast.unparse(tree.body)}\n"
    exec(compile(source, "<formula>", "exec"), namespace)  # validated above
    return Formula(text.strip(), variables, namespace["f"])


def parse_point(specs: list[str] | None, variables: list[str]) -> list[float]:
    """``["x=1,y=2"]`` -> the values of ``variables`` in order."""
    given: dict[str, float] = {}
    for spec in specs or []:
        for item in spec.replace(" ", "").split(","):
            if not item:
                continue
            name, sep, value = item.partition("=")
            if not sep:
                raise FormulaError(f"--at expects name=value pairs, got {item!r}")
            try:
                given[name] = float(value)
            except ValueError:
                raise FormulaError(f"--at {name}={value}: not a number") from None
    constants = sorted(set(given) & set(CONSTANTS))
    if constants:
        name = constants[0]
        raise FormulaError(
            f"--at {name}=...: {name} is a constant ({CONSTANTS[name]!r}), not a variable; "
            "name the variable otherwise"
        )
    unknown = sorted(set(given) - set(variables))
    if unknown:
        raise FormulaError(f"--at names {', '.join(unknown)}, which the formula does not use")
    missing = [v for v in variables if v not in given]
    if missing:
        example = ",".join(f"{v}=1" for v in missing)
        raise FormulaError(f"no value for {', '.join(missing)}: add it, as in --at {example}")
    return [given[v] for v in variables]


class _Floats(ast.NodeTransformer):
    """Every number of a formula as a NumPy float (``1/0`` is then inf, not an error)."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Call(ast.Name("_float", ast.Load()), [node], [])


def constant_value(formula: Formula) -> float:
    """The value of a formula without variables, computed as NumPy would (``1/0`` is inf,
    ``log(-1)`` nan)."""
    tree = ast.fix_missing_locations(_Floats().visit(ast.parse(formula.text, mode="eval")))
    namespace = _namespace(_functions())
    namespace.update({"_float": np.float64, **{k: np.float64(v) for k, v in CONSTANTS.items()}})
    with np.errstate(all="ignore"):  # the formula was validated by parse_formula
        return float(eval(compile(tree, "<formula>", "eval"), namespace))


def tolerance(text: str) -> float:
    """An argparse ``type=``: a finite number >= 0 (``--rtol``, ``--atol``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0.0 or math.isinf(value):
        raise argparse.ArgumentTypeError(
            f"a tolerance is a number >= 0, such as 1e-7; got {text!r}"
        )
    return value


def _fail(command: str, message: str) -> int:
    print(f"adcompile {command}: error: {message}", file=sys.stderr)
    return 2


def run_check(args: argparse.Namespace) -> int:
    """``adcompile check``: the gradient by every method; 1 on a mismatch."""
    from ..symbolic.check import check_grad, check_jacobian

    try:
        formula = parse_formula(args.expr)
        point = parse_point(args.at, formula.variables)
    except FormulaError as e:
        return _fail("check", str(e))
    if not formula.variables:
        print(f"{formula.signature()} = {formula.text} = {constant_value(formula)!r}")
        print("a constant: no variables, so no gradient to check")
        return 0
    at = ", ".join(f"{v}={x!r}" for v, x in zip(formula.variables, point))
    print(f"{formula.signature()} = {formula.text}  at {at}")
    argnums = tuple(range(len(point)))
    code = _report(check_grad, formula, point, argnums, args)
    if code == 0 and args.hessian:
        print()
        return _report(check_jacobian, formula, point, argnums, args)
    return code


def _report(
    check: Callable[..., Any], formula: Formula, point: list[float], argnums: tuple, args: Any
) -> int:
    """Run ``check`` (check_grad or check_jacobian) on the formula and print its report;
    1 on a mismatch (its first line on stderr), a singular point's warning on stderr."""
    from ..symbolic.check import GradientMismatch

    try:
        with warnings.catch_warnings(record=True) as caught:  # the report says so, and stderr
            warnings.simplefilter("always", RuntimeWarning)
            report = check(formula.fn, *point, argnums=argnums, rtol=args.rtol, atol=args.atol)
    except GradientMismatch as e:
        print(e)
        print(f"adcompile check: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(report)
    for w in caught:  # the check's own warnings and adcompile's (a cache it cannot
        text = str(w.message)  # use), not NumPy's on the way
        if text.startswith(("check_grad(", "check_jacobian(")):
            print(f"adcompile check: warning: {text}", file=sys.stderr)
        elif text.startswith("adcompile: "):
            print(f"adcompile: warning: {text[len('adcompile: ') :]}", file=sys.stderr)
    return 0


def run_grad(args: argparse.Namespace) -> int:
    """``adcompile grad``: the symbolic gradient (by reverse mode); with --code, its source."""
    from ..api.transform import show_code, trace
    from ..diff.reverse import grad_tape
    from ..symbolic.bridge import tape_to_sympy

    try:
        formula = parse_formula(args.expr)
        point = parse_point(args.at, formula.variables) if args.at else None
    except FormulaError as e:
        return _fail("grad", str(e))
    if not formula.variables:
        return _fail("grad", f"{formula.text!r} has no variables to differentiate by")
    point = point or [0.5] * len(formula.variables)
    tape = trace(formula.fn, *point)
    value, *grads = tape_to_sympy(grad_tape(tape))
    print(f"{formula.signature()} = {value}")
    for v, g in zip(formula.variables, grads):
        print(f"df/d{v} = {g}")
    if args.hessian:
        _print_hessian(formula, tape, point if args.at else None)
    if args.code:
        print()
        print(show_code(formula.fn, *point), end="")
    return 0


def _print_hessian(formula: Formula, tape: Any, point: list[float] | None) -> None:
    """``grad --hessian``: each second derivative (the upper triangle, by forward over
    reverse mode on the tape) in SymPy form, and with a point the compiled Hessian there."""
    from ..api.derived import hessian
    from ..diff.forward import hessian_tape
    from ..symbolic.bridge import tape_to_sympy

    names = formula.variables
    n = len(names)
    entries = tape_to_sympy(hessian_tape(tape, list(range(n))))
    for i in range(n):
        for j in range(i, n):
            by = f"d{names[i]}^2" if i == j else f"d{names[i]} d{names[j]}"
            print(f"d2f/{by} = {entries[i * n + j]}")
    if point is None:
        return
    blocks = hessian(formula.fn, argnums=tuple(range(n)))(*point)
    at = ", ".join(f"{v}={x!r}" for v, x in zip(names, point))
    print(f"Hessian at {at} (rows and columns {', '.join(names)}):")
    for row in blocks:
        print("  " + "  ".join(f"{float(h):>22.15g}" for h in row))


def add_check_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``check EXPR --at x=1,y=2`` to ``subparsers``."""
    p = subparsers.add_parser(
        "check",
        help="compare a formula's gradient by every method (compiled, interpreter, SymPy, "
        "finite differences)",
        description="Print the value and gradient of a formula by every method adcompile has; "
        "exit 1 if they disagree, 2 on a bad formula or option. At a singular point (inf or "
        "nan, as in x/y at y=0) the report says which methods are singular there, and only "
        "the adjoint methods are compared.",
    )
    p.add_argument("expr", help='a formula, such as "sin(x)*y + exp(x/y)"')
    p.add_argument(
        "--at", action="append", metavar="x=1,y=2", help="the point (every variable a value)"
    )
    p.add_argument(
        "--rtol",
        type=tolerance,
        default=1e-7,
        help="relative tolerance of the exact methods, a number >= 0 (default 1e-7)",
    )
    p.add_argument(
        "--atol",
        type=tolerance,
        default=1e-9,
        help="absolute tolerance of the exact methods, a number >= 0 (default 1e-9)",
    )
    p.add_argument(
        "--hessian",
        action="store_true",
        help="also check the Hessian, Hessian-vector product and jvp (check_jacobian)",
    )
    p.set_defaults(func=run_check)
    return p


def add_grad_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``grad EXPR [--code]`` to ``subparsers``."""
    p = subparsers.add_parser(
        "grad",
        help="print a formula's symbolic gradient (reverse mode) and, with --code, the "
        "generated adjoint source",
        description="Print the gradient of a formula as SymPy expressions, computed by "
        "reverse mode on its tape; exit 2 on a bad formula.",
    )
    p.add_argument("expr", help='a formula, such as "sin(x)*y + exp(x/y)"')
    p.add_argument("--code", action="store_true", help="also print the generated adjoint code")
    p.add_argument(
        "--hessian",
        action="store_true",
        help="also print the second derivatives (forward over reverse mode) and, with --at, "
        "the Hessian's numbers there",
    )
    p.add_argument(
        "--at",
        action="append",
        metavar="x=1,y=2",
        help="where to trace (default 0.5 for every variable; a formula has no branches, "
        "so this only matters for --code's specialisation and --hessian's numbers)",
    )
    p.set_defaults(func=run_grad)
    return p


#: What ``adcompile export`` offers (``hvp`` and ``jvp`` take vectors: use ``ad.export``).
EXPORT_TRANSFORMS = ("value", "grad", "value_and_grad", "jacobian", "hessian")


def run_export(args: argparse.Namespace) -> int:
    """``adcompile export``: a formula's transform as standalone Python or C source."""
    from ..api.export import TARGETS, export

    if args.target not in TARGETS:
        return _fail("export", f"unknown target {args.target!r}; choose python or c")
    if args.transform not in EXPORT_TRANSFORMS:
        choices = ", ".join(EXPORT_TRANSFORMS)
        return _fail("export", f"unknown transform {args.transform!r}; choose one of {choices}")
    try:
        formula = parse_formula(args.expr)
        point = parse_point(args.at, formula.variables) if args.at else None
    except FormulaError as e:
        return _fail("export", str(e))
    if not formula.variables and args.transform != "value":
        return _fail("export", f"{formula.text!r} has no variables to differentiate by")
    point = point or [0.5] * len(formula.variables)
    try:
        text = export(
            formula.fn,
            *point,
            transform=args.transform,
            target=args.target,
            path=args.output,
            argnums=tuple(range(len(point))),
        )
    except OSError as e:
        return _fail("export", f"cannot write {args.output}: {e.strerror}")
    if args.output is None:
        print(text, end="")
    else:
        also = f" and {Path(args.output).with_suffix('.h')}" if args.target == "c" else ""
        print(f"wrote {args.output}{also}", file=sys.stderr)
    return 0


def add_export_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``export EXPR [--target c|python] [-o FILE] [--transform T] [--at ...]``."""
    p = subparsers.add_parser(
        "export",
        help="print standalone Python or C source of a formula's value and gradient",
        description="Print (or write with -o) a standalone module computing a transform of a "
        "formula, f(variables sorted by name), differentiated by every variable: Python "
        "needing only math and numpy, or C99 needing only <math.h> (with -o FILE.c, the "
        "header is written beside it as FILE.h). Exit 2 on a bad formula or option.",
    )
    p.add_argument("expr", help='a formula, such as "sin(x)*y"')
    p.add_argument("--target", default="python", help="python (default) or c")
    p.add_argument(
        "--transform",
        default="value_and_grad",
        help=f"one of {', '.join(EXPORT_TRANSFORMS)} (default value_and_grad)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the source there")
    p.add_argument(
        "--at",
        action="append",
        metavar="x=1,y=2",
        help="where to trace (default 0.5 for every variable)",
    )
    p.set_defaults(func=run_export)
    return p
