"""The package's structure: imports flow one way, and an op is known from its table entry.

- No import cycle among adcompile's modules, counting imports inside functions
  (read with ``ast``, not by importing).
- A new scalar op, registered through the public extension (``ad.primitive``) or
  the op table's own call (``ops.defop``), works in the interpreter, compiled
  code, forward mode, eager ``backward`` and the SymPy bridge, with values and
  derivatives held to a hand formula and central finite differences; the tape
  passes read its declared algebra (identity, linear operand) from the table.
- Every op's declared algebra holds for its own float evaluation.
- Smaller rooms (issue 29 item 6): no module of the package over 600 lines and no
  function over 80, but for a list of today's offenders that can only shrink.
"""

from __future__ import annotations

import ast
import math
import operator
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import adcompile as ad
from adcompile.api.extend import primitive
from adcompile.diff import interpret
from adcompile.diff.forward import jvp_tape
from adcompile.diff.reverse import grad_tape
from adcompile.ir import BUILTIN, ops
from adcompile.ir.passes import simplify, zero_flow

PACKAGE = Path(ad.__file__).parent

#: The pipeline's stages, in order: a stage imports only the stages before it.
STAGES = ("ir", "trace", "diff", "loops", "emit", "backend", "pipeline", "api")


def _name(path: Path) -> str:
    """``adcompile/ir/ops.py`` -> ``ir.ops``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1] or ["__init__"]
    return ".".join(parts)


MODULES = {_name(p) for p in PACKAGE.rglob("*.py") if p.stem != "__main__"}


def _module(dotted: list[str]) -> str:
    """The package's module that an import of ``dotted`` (below adcompile) loads."""
    while dotted and ".".join(dotted) not in MODULES:
        dotted = dotted[:-1]
    return ".".join(dotted) or "__init__"


def _imported(path: Path, package: list[str] | None = None) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in it (``__init__`` for the
    package itself); ``importlib.import_module("adcompile.x")`` counts too.
    ``package``: the file's package below adcompile (default: where it lies)."""
    if package is None:
        package = list(path.relative_to(PACKAGE).parts[:-1])
    found: set[str] = set()

    def add(base: list[str], names: list[str]) -> None:
        if not names:
            found.add(_module(base))
        for n in names:  # ``from pkg import mod`` imports a module; else the package
            found.add(_module(base + [n]))

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            module = (node.module or "").split(".") if node.module else []
            if node.level == 0:
                if module and module[0] == "adcompile":
                    add(module[1:], names)
            else:
                if node.level - 1 > len(package):
                    raise AssertionError(f"{path.name}: import from above the package")
                base = package[: len(package) - (node.level - 1)]
                add(base + module, names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "adcompile":
                    add(a.name.split(".")[1:], [])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.startswith("adcompile")
        ):
            add(node.args[0].value.split(".")[1:], [])
    if path.exists() and path.is_relative_to(PACKAGE):
        found.discard(_name(path))
    return found


def _graph() -> dict[str, set[str]]:
    return {_name(p): _imported(p) for p in sorted(PACKAGE.rglob("*.py")) if p.stem != "__main__"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first again at the end)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state and nxt in graph:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_reader_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "tape.py"
    f.write_text(
        "from .ops import Op\n"
        "import adcompile.trace.value\n"
        "def g():\n"
        "    from ..symbolic.bridge import tape_to_sympy\n"
        "    from . import passes, outputs\n"
        "    from .. import nn\n"
        "    import importlib\n"
        "    importlib.import_module('adcompile.backend.jit')\n"
    )
    assert _imported(f, ["ir"]) == {
        "ir.ops",
        "trace.value",
        "symbolic.bridge",
        "ir.passes",
        "ir.outputs",
        "nn",
        "backend.jit",
    }


def test_no_import_cycle_among_the_modules():
    graph = _graph()
    assert {"ir.ops", "ir.tape", "ir.passes", "symbolic.bridge", "api.transform"} <= set(graph)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_flow_one_way_along_the_stages():
    """A stage imports only itself and the stages before it (ir -> trace -> diff ->
    loops -> emit -> backend -> pipeline -> api); the layers above (symbolic, nn, cli,
    distributed ...) may import any stage, and no stage imports them, except the
    SymPy bridge, which reads only the ir."""
    backwards = []
    for module, imports in _graph().items():
        stage = module.split(".")[0]
        if stage not in STAGES:
            continue
        for other in imports:
            theirs = other.split(".")[0]
            if theirs in STAGES and STAGES.index(theirs) <= STAGES.index(stage):
                continue
            if other == "symbolic.bridge" and stage == "api":  # to_sympy, ad.primitive
                continue
            backwards.append(f"{module} imports {other}")
    assert not backwards, "imports against the pipeline's order:\n" + "\n".join(backwards)
    assert _graph()["symbolic.bridge"] <= {m for m in MODULES if m.startswith("ir.")}


def test_every_module_states_its_contract():
    """Each stage folder and each module opens with a docstring."""
    missing = [
        _name(p)
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.stem != "__main__" and ast.get_docstring(ast.parse(p.read_text())) is None
    ]
    assert not missing, f"modules without a docstring: {missing}"
    assert {s for s in STAGES} <= MODULES  # the stages are packages


#: The op table's modules: one family of primitives each, defined with ``ops.defop``.
TABLE = {"ir.arithmetic", "ir.elementary", "ir.piecewise"}


def test_the_op_table_and_the_tape_import_little():
    graph = _graph()
    assert graph["ir.ops"] == set()
    for module in TABLE:
        assert graph[module] == {"ir.ops"}, module
    assert graph["ir"] == TABLE | {"ir.ops"}  # the package loads the table with ops
    assert graph["ir.tape"] == {"ir.ops"}


def test_the_op_table_is_complete_whenever_ops_is_imported():
    """``OPS`` holds every built-in op after importing ``adcompile.ir.ops`` alone (the
    package ``adcompile.ir`` loads the table's modules first), in a fresh interpreter."""
    code = (
        "import sys; from adcompile.ir import ops; "
        "print(sorted(m for m in sys.modules if m.startswith('adcompile.ir.'))); "
        "print(' '.join(ops.OPS))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parent,
    ).stdout.splitlines()
    assert {f"adcompile.{m}" for m in TABLE} <= set(ast.literal_eval(out[0]))
    assert out[1].split() == list(BUILTIN) and len(BUILTIN) > 30
    for module in TABLE:  # each defines ops with the table's own call
        tree = ast.parse((PACKAGE / (module.replace(".", "/") + ".py")).read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        assert any(getattr(c.func, "id", "") == "defop" for c in calls), module


# ------------------------------------------------------------------ a new op


def _xs_eval(x: float, y: float) -> float:
    return x * math.exp(-y)


def _xs_rules():
    return (lambda g, out, x, y: g * ops.exp(-y), lambda g, out, x, y: -(g * out))


@pytest.fixture(scope="module")
def new_ops():
    """The same op, x * exp(-y), registered both ways; removed afterwards."""
    n = len(ops.OPS)
    public = primitive(
        _xs_eval,
        vjp=_xs_rules(),
        code="({0} * math.exp(-{1}))",
        sympy=lambda s, x, y: x * s.exp(-y),
        name="st_public",
    )
    # The table's own call, with what the passes may know of it: x * exp(-0.0) is x
    # bit for bit, and it is 0 where x is.
    table = ops.defop(
        "st_table",
        2,
        _xs_eval,
        "({0} * math.exp(-{1}))",
        _xs_rules(),
        lambda s, x, y: x * s.exp(-y),
        identity=0.0,
        linear_in=(0,),
    )
    yield {"public": public, "table": table}
    for name in list(ops.OPS)[n:]:  # the last ops registered, so no opcode is reused
        del ops.OPS[name]


def _program(xs):
    def F(x, y):
        return xs(ad.sin(x), y) * x + xs(y, x)

    return F


def _by_hand(x: float, y: float) -> tuple[float, float, float]:
    """F, dF/dx, dF/dy: F = sin(x) exp(-y) x + y exp(-x)."""
    u, ey, ex = math.sin(x), math.exp(-y), math.exp(-x)
    value = u * ey * x + y * ex
    return value, math.cos(x) * ey * x + u * ey - y * ex, -u * ey * x + ex


def _central(f, x: float, y: float, h: float = 1e-6) -> tuple[float, float]:
    return (
        (f(x + h, y) - f(x - h, y)) / (2 * h),
        (f(x, y + h) - f(x, y - h)) / (2 * h),
    )


POINTS = [(0.7, -0.4), (-1.3, 0.9)]


@pytest.mark.parametrize("route", ["public", "table"])
def test_a_new_op_in_every_backend(new_ops, route):
    F = _program(new_ops[route])
    tape = ad.trace(F, *POINTS[0])
    grads = grad_tape(tape)
    tangents = jvp_tape(tape, [0, 1])
    vg = ad.value_and_grad(F, argnums=(0, 1))
    (expr,) = tape.to_sympy()
    sx, sy = sp.symbols("x y")
    dx, dy = sp.diff(expr, sx), sp.diff(expr, sy)
    for x, y in POINTS:
        value, gx, gy = _by_hand(x, y)
        fx, fy = _central(lambda a, b: _by_hand(a, b)[0], x, y)
        assert fx == pytest.approx(gx, rel=1e-7) and fy == pytest.approx(gy, rel=1e-7)
        want = [value, gx, gy]
        at = {sx: x, sy: y}

        def close(got, want=want):
            assert got == pytest.approx(want, rel=1e-12, abs=1e-14)

        # the interpreter: its own reverse sweep, and the gradient tape
        v, g = interpret.value_and_grad(tape, [x, y])
        close([v, *g])
        close(interpret.evaluate(grads, [x, y]))
        # compiled (Numba)
        cv, (cgx, cgy) = vg(x, y)
        close([cv, cgx, cgy])
        # forward mode: the tangent tape, and ad.jvp, along two directions
        for t in ((1.0, 0.0), (0.0, 1.0), (0.3, -2.0)):
            dir_ = gx * t[0] + gy * t[1]
            out, tan = interpret.evaluate(tangents, [x, y, *t])
            assert [out, tan] == pytest.approx([value, dir_], rel=1e-12, abs=1e-14)
            jv, jt = ad.jvp(F, (x, y), t)
            assert [jv, jt] == pytest.approx([value, dir_], rel=1e-12, abs=1e-14)
        # eager Values and backward()
        a, b = ad.Value(x), ad.Value(y)
        out = F(a, b)
        out.backward()
        close([out.data, a.grad, b.grad])
        # SymPy: the expression and its derivatives
        close([float(expr.subs(at)), float(dx.subs(at)), float(dy.subs(at))])


def test_the_passes_read_a_new_ops_algebra_from_the_table(new_ops):
    xs = new_ops["table"]
    tape = ad.trace(lambda x, y: xs(x, 0.0) + xs(y, x), 0.5, 0.25)
    used = [n.op for n in simplify(tape).nodes if isinstance(n.op, ops.Op)]
    assert used.count(xs) == 1  # xs(x, 0.0) is x (its identity), xs(y, x) stays
    assert simplify(tape).evaluate(0.5, 0.25) == pytest.approx([0.5 + 0.25 * math.exp(-0.5)])
    nodes = ad.trace(lambda x, y: xs(x, y) * y, 0.5, 0.25).nodes
    first = next(k for k, n in enumerate(nodes) if n.op is xs)
    zero, _ = zero_flow(nodes, nodes[first].args[0])  # x == 0: xs(x, y) is 0, and so is *y
    assert zero[first] and zero[len(nodes) - 1]
    public = new_ops["public"].op  # declares nothing: nothing follows from its zeros
    nodes = ad.trace(lambda x, y: new_ops["public"](x, y), 0.5, 0.25).nodes
    k = next(k for k, n in enumerate(nodes) if n.op is public)
    assert not zero_flow(nodes, nodes[k].args[0])[0][k]


# ------------------------------------------------------------------ the declarations hold

SAMPLES = [0.0, -0.0, 1.0, -2.5, 3.0, 1e-300, -1e300, math.inf, -math.inf, math.nan]
SMALL = [-3.0, -1.0, 0.0, 2.0, 5.0]  # small integers: sums and products exact


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or _bits(a) == _bits(b)


BUILT_IN = list(ops.OPS.values())


@pytest.mark.parametrize("op", BUILT_IN, ids=lambda op: op.name)
def test_declared_algebra_holds_for_the_float_evaluation(op):
    if op.identity is not None:
        for x in SAMPLES:
            assert _same(op.eval(x, op.identity), x), (op.name, x)
            if op.commutative:
                assert _same(op.eval(op.identity, x), x), (op.name, x)
    if op.commutative:
        for a in SAMPLES:
            for b in SAMPLES:
                assert _same(op.eval(a, b), op.eval(b, a)), (op.name, a, b)
    if op.associative:
        for a in SMALL:
            for b in SMALL:
                for c in SMALL:
                    assert op.eval(op.eval(a, b), c) == op.eval(a, op.eval(b, c))
    if op.involution:
        for x in SAMPLES:
            assert _same(op.eval(op.eval(x)), x), (op.name, x)
    for k in op.linear_in:
        for x in [v for v in SAMPLES if math.isfinite(v) and v != 0.0]:
            args = [x] * op.arity
            args[k] = 0.0
            assert op.eval(*args) == 0.0, (op.name, args)
    if op.linear:
        assert op.eval(*[0.0] * op.arity) == 0.0
        for a in SMALL:
            for b in SMALL:
                xs, ys = [a] * op.arity, [b] * op.arity
                xs[0], ys[-1] = b, a
                total = op.eval(*[p + q for p, q in zip(xs, ys)])
                assert total == op.eval(*xs) + op.eval(*ys), (op.name, xs, ys)
                assert op.eval(*[3.0 * p for p in xs]) == 3.0 * op.eval(*xs)


@pytest.mark.parametrize("op", [op for op in BUILT_IN if op.operator], ids=lambda op: op.name)
def test_the_declared_operator_records_the_op(op):
    python = getattr(operator, op.operator)
    tape = ad.trace(lambda x, y: python(*(x, y)[: op.arity]), 1.5, 0.5)
    assert [n.op for n in tape.nodes if isinstance(n.op, ops.Op)] == [op]
    assert ops.OPERATORS[op.operator] is op


@pytest.mark.parametrize(
    "name, op", [(u, op) for op in BUILT_IN for u in op.ufuncs], ids=lambda x: str(x)
)
def test_the_declared_ufunc_names_apply_the_op(name, op):
    assert ops.ufunc_op(name) is op
    ufunc = getattr(np, name, None)
    if ufunc is None:  # (a ufunc of SciPy's: scipy.special.expit)
        ufunc = getattr(pytest.importorskip("scipy.special"), name)
    tape = ad.trace(lambda x, y: ufunc(*(x, y)[: op.arity]), 1.5, 0.5)
    assert [n.op for n in tape.nodes if isinstance(n.op, ops.Op)] == [op]
    assert tape.evaluate(1.5, 0.5) == pytest.approx([ufunc(*(1.5, 0.5)[: op.arity])])


# ------------------------------------------------------------------ sizes

#: No module of the package over this many lines ...
MAX_MODULE_LINES = 600
#: ... and no function or method over this many, from its ``def`` line to its last
#: (decorators not counted; a nested function counts on its own and in its outer one).
MAX_FUNCTION_LINES = 80

#: The modules over the limit (paths under adcompile/), each at its size when listed. The
#: list only shrinks: a listed module that grows fails, and one that is now within the
#: limit (or gone) must come off the list.
MODULES_OVER: dict[str, int] = {}
#: The functions over the limit (``path::qualified name``), likewise.
FUNCTIONS_OVER: dict[str, int] = {}


def _sizes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Lines per module under ``root`` (its path there, ``/``-separated) and per function
    (``path::Class.method``, ``path::outer.inner``), read with ``ast``."""
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        modules[rel] = len(text.splitlines())

        def walk(node: ast.AST, prefix: str, rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = prefix + child.name
                    if not isinstance(child, ast.ClassDef):
                        key, n = f"{rel}::{name}", child.end_lineno - child.lineno + 1
                        functions[key] = max(functions.get(key, 0), n)  # (a property's setter)
                    walk(child, name + ".")
                else:
                    walk(child, prefix)

        walk(ast.parse(text, str(path)), "")
    return modules, functions


def _offences(sizes: dict[str, int], limit: int, listed: dict[str, int]) -> list[str]:
    """What breaks ``limit``: a new offender, a listed one that grew, and a listed one that
    is now within the limit or gone (its entry must go)."""
    found = []
    for name, n in sorted(sizes.items()):
        if n > limit and name not in listed:
            found.append(f"{name} has {n} lines, over the limit of {limit}: split it")
        elif name in listed and n > listed[name]:
            found.append(f"{name} has grown to {n} lines (listed at {listed[name]}): shrink it")
    for name, n in sorted(listed.items()):
        if sizes.get(name, 0) <= limit:
            now = f"{sizes[name]} lines" if name in sizes else "gone"
            found.append(f"{name} is listed at {n} lines but is now {now}: take it off the list")
    return found


def test_the_size_reader_counts_modules_and_functions(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text(
        "def f():\n    return 1\n\n\n"  # f: 2 lines
        "class C:\n    @property\n    def p(self):\n        return 1\n\n"  # C.p: 2
        "    @p.setter\n    def p(self, v):\n        x = v\n        self.v = x\n\n"  # 3
        "    def g(self):\n        def inner():\n            return 2\n\n"  # C.g: 5 lines
        "        return inner()\n"  # (C.g.inner: 2)
        "if True:\n    async def h():\n        pass\n"  # h: 2
    )
    (pkg / "sub" / "b.py").write_text("x = 1\n")
    modules, functions = _sizes(pkg)
    assert modules == {"a.py": 22, "sub/b.py": 1}
    assert functions == {
        "a.py::f": 2,
        "a.py::C.p": 3,
        "a.py::C.g": 5,
        "a.py::C.g.inner": 2,
        "a.py::h": 2,
    }


def test_the_size_check_finds_new_grown_and_stale_entries():
    sizes = {"new.py": 9, "grown.py": 12, "kept.py": 11, "shrunk.py": 10, "small.py": 3}
    listed = {"grown.py": 11, "kept.py": 11, "shrunk.py": 14, "gone.py": 20}
    found = _offences(sizes, 10, listed)
    assert [line.split()[0] for line in found] == ["grown.py", "gone.py", "shrunk.py"]
    assert "grown to 12 lines (listed at 11)" in found[0]
    assert "is now gone" in found[1] and "is now 10 lines" in found[2]
    assert _offences({**sizes, "new.py": 11}, 10, listed)[1].startswith("new.py has 11 lines")
    assert _offences(sizes, 10, {"grown.py": 12, "kept.py": 11}) == []


def test_no_module_over_600_lines_but_the_listed_ones():
    modules, _ = _sizes(PACKAGE)
    assert "symbolic/check.py" in modules and "__init__.py" in modules
    found = _offences(modules, MAX_MODULE_LINES, MODULES_OVER)
    assert not found, "\n".join(found)


def test_no_function_over_80_lines_but_the_listed_ones():
    _, functions = _sizes(PACKAGE)
    assert "symbolic/check.py::check_grad" in functions
    found = _offences(functions, MAX_FUNCTION_LINES, FUNCTIONS_OVER)
    assert not found, "\n".join(found)


# ------------------------------------------------------------------ private attributes


def _private_names(tree: ast.Module) -> set[str]:
    """The private names (``_x``, not ``__x__``) a module defines: attributes it
    assigns, functions, classes and variables."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            names.add(n.attr)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
    return {x for x in names if x.startswith("_") and not x.startswith("__")}


def _private_reads(root: Path) -> dict[str, set[str]]:
    """Per module under ``root``: the private names of other modules it reads as an
    attribute of something other than ``self``/``cls`` (``v._prev``, ``mod._helper``)."""
    trees = {p: ast.parse(p.read_text()) for p in root.rglob("*.py")}
    own = {p: _private_names(t) for p, t in trees.items()}
    theirs = set().union(*own.values()) if own else set()
    found: dict[str, set[str]] = {}
    for p, tree in trees.items():
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Attribute) and n.attr.startswith("_")):
                continue
            if n.attr.startswith("__") or n.attr in own[p] or n.attr not in theirs:
                continue
            if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
                continue
            found.setdefault(str(p.relative_to(root)), set()).add(n.attr)
    return found


def test_the_private_reader_finds_reads_of_another_modules_privates(tmp_path):
    (tmp_path / "a.py").write_text("class A:\n    def __init__(self):\n        self._x = 1\n")
    (tmp_path / "b.py").write_text(
        "import a\ndef f(v):\n    return v._x + v._own + a._helper\n_own = 2\n"
    )
    (tmp_path / "c.py").write_text("def _helper():\n    return self._x\n")
    assert _private_reads(tmp_path) == {"b.py": {"_x", "_helper"}}


#: Reads of another module's private names left, to be made public or removed
#: (the list only shrinks: an entry no longer read must come off it).
PRIVATE_READS = {
    "ir/ops.py": {"_apply"},  # the hook a tracing Value gives the op table
}


def test_no_module_reads_another_modules_private_names_but_the_listed_ones():
    found = _private_reads(PACKAGE)
    new = {m: names - PRIVATE_READS.get(m, set()) for m, names in found.items()}
    new = {m: names for m, names in new.items() if names}
    stale = {
        m: names - found.get(m, set())
        for m, names in PRIVATE_READS.items()
        if names - found.get(m, set())
    }
    assert not new, f"modules reading another module's private names: {new}"
    assert not stale, f"listed private reads no longer made (take them off the list): {stale}"
