"""One compiled-program type: every kind of compiled code is a ``CompiledProgram``.

- Walking the package's source (not a hand list): every class that holds
  generated code (it has a ``source`` and a call that returns ``(ok,
  outputs)``) is a ``CompiledProgram`` subclass, concrete, and sets every
  data attribute of the interface; no module asks which kind of compiled code
  it holds (``isinstance`` on the program classes, ``getattr``/``hasattr`` on
  a ``compiled``).
- Each transform (grad, value_and_grad, jit, jacobian, hessian, hvp, jvp,
  vmap(grad) over 16 rows and more, batch-generic code, loop code, basis
  code, the tape interpreter): its program's interface holds, and its numbers
  agree with central finite differences of ``f`` (or of a hand gradient); its
  Numba function, called from the user's own ``@numba.njit`` code, and its
  native call give the transform's numbers; its tape, run by the Python
  interpreter, gives them too; its guards name the branch taken, as data.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import numba
import numpy as np
import pytest

import adcompile as ad
from adcompile.api.derived import jvp_transform
from adcompile.backend import records
from adcompile.backend.program import CompiledProgram, GuardCheck, NativeCall
from adcompile.diff import interpret

PACKAGE = Path(ad.__file__).parent
#: The data every program holds (the interface's annotations).
DATA = ("params", "n_out", "source", "explanation", "facts", "timings")


# ------------------------------------------------------------------ the package


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _provided(cls: ast.ClassDef) -> set[str]:
    """The names a class defines in its body and assigns to ``self.`` in its methods."""
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.value is not None:
                names.add(node.target.id)
    for node in ast.walk(cls):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                ):
                    names.add(sub.attr)
    return names


def _classes(root: Path = PACKAGE) -> list[tuple[str, ast.ClassDef, set[str]]]:
    """(module, class node, names it provides) for every class in the package's source."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found.append((_module_name(path, root), node, _provided(node)))
    return found


def holds_code(names: set[str]) -> bool:
    """Whether a class providing ``names`` holds generated code: a ``source`` and a
    call returning ``(ok, outputs)`` (``call``, or ``call_n`` with a batch length)."""
    return "source" in names and bool(names & {"call", "call_n"})


def test_the_detector_sees_a_class_that_holds_code(tmp_path):
    (tmp_path / "m.py").write_text(
        "class Sneaky:\n"
        "    def __init__(self):\n"
        "        self.source = 'def f(out): return True'\n"
        "    def call_n(self, n, *args):\n"
        "        return True, None\n"
        "class Plain:\n"
        "    source = 'text'\n"
    )
    found = {node.name: holds_code(names) for _, node, names in _classes(tmp_path)}
    assert found == {"Sneaky": True, "Plain": False}


def test_every_class_holding_compiled_code_is_a_compiled_program():
    found = [(mod, node.name) for mod, node, names in _classes() if holds_code(names)]
    assert len(found) >= 5  # straight-line, interpreter, loops, basis, a batch length
    for mod, name in found:
        cls = getattr(importlib.import_module(mod), name)
        assert issubclass(cls, CompiledProgram), f"{mod}.{name} holds code: a CompiledProgram"


def test_every_compiled_program_class_implements_the_whole_interface():
    nodes = {(mod, node.name): names for mod, node, names in _classes()}
    classes = []
    for mod, name in nodes:
        cls = getattr(importlib.import_module(mod), name, None)
        if isinstance(cls, type) and issubclass(cls, CompiledProgram):
            classes.append(cls)
    concrete = [c for c in classes if c is not CompiledProgram]
    assert len(concrete) >= 5
    for cls in concrete:
        assert not inspect.isabstract(cls), f"{cls.__name__} leaves {cls.__abstractmethods__}"
        provided: set[str] = set()
        for base in cls.__mro__:
            if base is not CompiledProgram and issubclass(base, CompiledProgram):
                provided |= nodes[(base.__module__, base.__name__)]
        missing = [d for d in DATA if d not in provided]
        assert not missing, f"{cls.__name__} never sets {missing}"


def _asks_which_kind(tree: ast.AST, program_names: set[str]) -> list[str]:
    """Calls that tell compiled code apart by its type or by the attributes it has."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        fn, args = node.func.id, node.args
        if fn in ("isinstance", "issubclass") and len(args) == 2:
            named = {n.id for n in ast.walk(args[1]) if isinstance(n, ast.Name)}
            named |= {n.attr for n in ast.walk(args[1]) if isinstance(n, ast.Attribute)}
            if named & program_names:
                found.append(ast.unparse(node))
        elif fn in ("getattr", "hasattr") and args:
            first = args[0]
            if (isinstance(first, ast.Name) and first.id == "compiled") or (
                isinstance(first, ast.Attribute) and first.attr == "compiled"
            ):
                found.append(ast.unparse(node))
    return found


def test_the_check_for_asking_which_kind_finds_such_calls():
    text = (
        "a = isinstance(spec.compiled, api.AtLength)\n"
        "b = getattr(compiled, 'folded', None)\n"
        "c = hasattr(spec.compiled, 'record')\n"
        "d = isinstance(x, (list, tuple))\n"
    )
    assert len(_asks_which_kind(ast.parse(text), {"AtLength"})) == 3


def test_no_module_asks_which_kind_of_compiled_code_it_holds():
    program_names = {"CompiledProgram", "BatchCompiled", "Deferred"}
    for mod, node, _ in _classes():
        cls = getattr(importlib.import_module(mod), node.name, None)
        if isinstance(cls, type) and issubclass(cls, CompiledProgram):
            program_names.add(node.name)
    asked = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for call in _asks_which_kind(ast.parse(path.read_text()), program_names):
            asked.append(f"{path.name}: {call}")
    assert asked == []


# ------------------------------------------------------------------ each transform


def f2(x, y):
    return ad.sin(x[0] * y) + x[1] ** 2 * y + ad.exp(x[2] / 3.0)


def f2_grad(x, y):
    c = np.cos(x[0] * y)
    gx = np.array([c * y, 2 * x[1] * y, np.exp(x[2] / 3.0) / 3.0])
    return gx, c * x[0] + x[1] ** 2


def fn(x):  # scalar, for the Hessian and hvp
    return sum(ad.sin(x[i]) * x[i + 1] for i in range(len(x) - 1)) + x[0] ** 3


def fn_grad(x):  # by hand
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    g[:-1] += np.cos(x[:-1]) * x[1:]
    g[1:] += np.sin(x[:-1])
    g[0] += 3 * x[0] ** 2
    return g


def vec(x):  # vector output, for the Jacobian
    return ad.sin(x) * x[0] + x[-1]


def rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def branchy(x):
    return x[0] * x[1] if x[0] > 0.5 else x[1] - x[0]


def mse(w, X):
    return np.mean((X @ w) ** 2)


def loss(theta, X, y):
    return np.mean(np.log1p(np.exp(-y * (X @ theta))))


RNG = np.random.default_rng(7)
X3 = np.array([0.3, -0.7, 1.1])
V10 = np.linspace(-0.8, 0.9, 10)
XB, YB = RNG.normal(size=(40, 3)), RNG.choice([-1.0, 1.0], 40)
W5, XW = RNG.normal(size=(5, 3)), RNG.normal(size=(20, 3))
ROWS = 300  # a Rosenbrock of this length folds into loops


def fd(fun, x, h=1e-6):
    """Central differences of ``fun`` (scalar or array valued) in every entry of ``x``."""
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        up, down = fun(x + e.reshape(x.shape)), fun(x - e.reshape(x.shape))
        cols.append((np.asarray(up, dtype=float) - np.asarray(down, dtype=float)) / (2 * h))
    return np.stack(cols, axis=-1)


def plain(fun):
    """``fun`` on plain floats (NumPy arrays), its result a float array."""
    return lambda *a: np.asarray(fun(*a), dtype=float)


def _vmap_grad_rows():
    g = ad.vmap(ad.grad(mse), in_axes=(0, None))(W5, XW)
    want = np.array([fd(lambda w: mse(w, XW), w) for w in W5])
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)
    return g


#: name -> (the transform, its arguments, the kind of code, batch-generic, the check of
#: its result against finite differences of f or a hand gradient)
CASES = {
    "grad": (
        lambda: ad.grad(f2, argnums=(0, 1)),
        (X3, 0.4),
        "straight-line",
        False,
        lambda r: (
            np.testing.assert_allclose(r[0], fd(lambda x: f2(x, 0.4), X3), rtol=1e-7),
            np.testing.assert_allclose(r[1], fd(lambda y: f2(X3, y), 0.4), rtol=1e-7),
        ),
    ),
    "value_and_grad": (
        lambda: ad.value_and_grad(f2),
        (X3, 0.4),
        "straight-line",
        False,
        lambda r: (
            np.testing.assert_allclose(r[0], f2(X3, 0.4), rtol=1e-14),
            np.testing.assert_allclose(r[1], fd(lambda x: f2(x, 0.4), X3), rtol=1e-7),
            np.testing.assert_allclose(r[1], f2_grad(X3, 0.4)[0], rtol=1e-13),
        ),
    ),
    "jit": (
        lambda: ad.jit(f2),
        (X3, 0.4),
        "straight-line",
        False,
        lambda r: np.testing.assert_allclose(r, f2(X3, 0.4), rtol=1e-14),
    ),
    "jacobian": (
        lambda: ad.jacobian(vec),
        (X3,),
        "straight-line",
        False,
        lambda r: np.testing.assert_allclose(r, fd(plain(vec), X3), rtol=1e-7, atol=1e-9),
    ),
    "jacobian, basis": (  # 10 outputs, 10 inputs: one basis vector at a time
        lambda: ad.jacobian(vec),
        (V10,),
        "straight-line",
        False,
        lambda r: np.testing.assert_allclose(r, fd(plain(vec), V10), rtol=1e-7, atol=1e-9),
    ),
    "hessian": (
        lambda: ad.hessian(fn),
        (X3,),
        "straight-line",
        False,
        lambda r: np.testing.assert_allclose(r, fd(fn_grad, X3), rtol=1e-6, atol=1e-8),
    ),
    "hessian, basis": (
        lambda: ad.hessian(fn),
        (V10,),
        "straight-line",
        False,
        lambda r: np.testing.assert_allclose(r, fd(fn_grad, V10), rtol=1e-6, atol=1e-8),
    ),
    "hvp": (
        lambda: ad.hvp(fn),
        (X3, np.array([1.0, -2.0, 0.5])),
        "straight-line",
        False,
        lambda r: np.testing.assert_allclose(
            r, fd(fn_grad, X3) @ np.array([1.0, -2.0, 0.5]), rtol=1e-6, atol=1e-8
        ),
    ),
    "jvp": (
        lambda: jvp_transform(vec),
        (X3, np.array([0.5, 1.0, -1.0])),
        "straight-line",
        False,
        lambda r: (
            np.testing.assert_allclose(r[0], plain(vec)(X3), rtol=1e-14),
            np.testing.assert_allclose(
                r[1], fd(plain(vec), X3) @ np.array([0.5, 1.0, -1.0]), rtol=1e-7, atol=1e-9
            ),
        ),
    ),
    "vmap(grad), 20 shared rows": (
        lambda: ad.vmap(ad.grad(mse), in_axes=(0, None)).inner,
        (W5[0], XW),
        "folded",
        True,
        lambda r: (
            np.testing.assert_allclose(r, fd(lambda w: mse(w, XW), W5[0]), rtol=1e-6),
            _vmap_grad_rows(),
        ),
    ),
    "batch-generic": (
        lambda: ad.value_and_grad(loss),
        (np.array([0.2, -0.1, 0.3]), XB, YB),
        "folded",
        True,
        lambda r: np.testing.assert_allclose(
            r[1], fd(lambda t: loss(t, XB, YB), np.array([0.2, -0.1, 0.3])), rtol=1e-6
        ),
    ),
    "loops": (
        lambda: ad.value_and_grad(rosen),
        (np.linspace(-0.5, 0.7, ROWS),),
        "folded",
        False,
        lambda r: np.testing.assert_allclose(
            r[1], fd(rosen, np.linspace(-0.5, 0.7, ROWS)), rtol=1e-5, atol=1e-6
        ),
    ),
}


@numba.njit
def _user1(fn, a, out):
    return fn(a, out)


@numba.njit
def _user2(fn, a, b, out):
    return fn(a, b, out)


@numba.njit
def _user3(fn, a, b, c, out):
    return fn(a, b, c, out)


USER = {1: _user1, 2: _user2, 3: _user3}


def _flat(args):
    return [float(a) if np.ndim(a) == 0 else np.ascontiguousarray(a, float).ravel() for a in args]


class Seen:
    """A ``ProgramVisitor`` that says which method it was called with, and with what."""

    def straight_line(self, program):
        return ("straight_line", program)

    def folded(self, program, loops, lead):
        return ("folded", program, loops, lead)

    def interpreter(self, program, opcodes):
        return ("interpreter", program, opcodes)

    def basis(self, program, one, m, dest):
        return ("basis", program, one, m, dest)


def check_program(t, args, kind, generic):
    """The interface of the program serving ``t(*args)``: every part, against the
    transform's own result. Returns that result."""
    result = t(*args)
    spec, _ = t.spec_for(args)
    program = spec.compiled
    assert isinstance(program, CompiledProgram)
    flat = _flat(args)
    # call: the transform's numbers
    ok, out = program(*flat)
    assert ok and out.shape == (program.n_out,)
    np.testing.assert_array_equal(np.concatenate(_leaves(spec.unpack(out))), _all(result))
    # source: Python that compiles, defining the generated function (or, for the
    # interpreter, naming it above the tape it runs)
    compile(program.source, "<source>", "exec")
    name = t.compiled_name
    assert f"def {name}(" in program.source or f"# {name}: " in program.source
    assert isinstance(program.explanation, str) and program.explanation
    # facts, timings
    assert program.facts.kind == kind and program.facts.generic == generic
    assert (program.generic is not None) == generic
    assert program.timings and all(s >= 0 for s in program.timings.values())
    assert isinstance(program.from_disk, bool)
    # numba: the same numbers from the user's @numba.njit code
    user_out = np.empty(program.n_out)
    assert USER[len(flat)](program.numba, *flat, user_out)
    np.testing.assert_array_equal(user_out, out)
    assert program.numba is program.numba  # made once
    for p in program.params:
        assert p.name in program.numba_signature
    # native: the Numba function itself, called as it says
    native = program.native
    assert native is None or isinstance(native, NativeCall)
    if native is not None:
        nat_out = np.empty(program.n_out)
        extra = [] if native.work is None else [np.empty(native.work), native.columns]
        assert native.fn(*native.lead, *flat, *extra, nat_out)
        np.testing.assert_array_equal(nat_out, out)
        assert native.signature(program.params).endswith("-> bool")
    # visit: the method of its kind, with what it needs
    seen = program.visit(Seen())
    assert seen[1] is program
    if seen[0] == "folded":  # (the program it was printed from: the same source again)
        assert kind == "folded" and seen[2].source == program.source
        assert seen[3] == program.native.lead and len(seen[3]) == generic
    elif seen[0] == "basis":
        one, m, dest = seen[2:]
        assert isinstance(one, CompiledProgram) and dest.shape[0] == m
    else:
        assert seen[0] == kind.replace("-", "_")
    # tape: run by the Python interpreter, the same outputs (for a loop over basis
    # vectors, the tape is that of one; for batch-generic code, of a traced length)
    if seen[0] not in ("basis",) and not generic:
        point = np.concatenate([np.atleast_1d(a) for a in flat])
        np.testing.assert_allclose(
            interpret.evaluate(program.tape, point.tolist()), out, rtol=1e-12, atol=1e-12
        )
    assert all(isinstance(g, GuardCheck) for g in program.guards)
    return result, program, seen


def _leaves(r):
    if isinstance(r, (tuple, list)):
        return [x for item in r for x in _leaves(item)]
    return [np.atleast_1d(np.asarray(r, dtype=float)).ravel()]


def _all(r):
    return np.concatenate(_leaves(r))


@pytest.mark.parametrize("case", list(CASES))
def test_each_transform_runs_one_compiled_program(case):
    make, args, kind, generic, against_fd = CASES[case]
    result, program, seen = check_program(make(), args, kind, generic)
    against_fd(result)
    if case.endswith("basis"):
        assert seen[0] == "basis" and "in a loop" in program.facts.how
    assert program.guards == ()  # (none of these branch)


def test_interpreter_code_is_a_compiled_program(monkeypatch):
    monkeypatch.setattr(records, "STRAIGHT_LINE_LIMIT", 3)
    t = ad.value_and_grad(f2)
    result, program, _ = check_program(t, (X3, 0.4), "interpreter", False)
    assert program.native is None
    np.testing.assert_allclose(result[1], fd(lambda x: f2(x, 0.4), X3), rtol=1e-7)


@pytest.mark.parametrize("limit", [None, 3])  # straight-line code, the tape interpreter
def test_guards_are_data_naming_the_branch_taken(monkeypatch, limit):
    if limit is not None:
        monkeypatch.setattr(records, "STRAIGHT_LINE_LIMIT", limit)
    t = ad.value_and_grad(branchy)
    x = np.array([0.9, 2.0])
    _, program, _ = check_program(
        t, (x,), "straight-line" if limit is None else "interpreter", False
    )
    (g,) = program.guards
    assert g.condition == "x[0] > 0.5" and g.expected is True
    assert Path(g.where.rsplit(":", 1)[0]).name == Path(__file__).name
    np.testing.assert_allclose(t(x)[1], fd(plain(branchy), x), rtol=1e-7)
    other = np.array([0.1, 2.0])  # the other branch: this program's guard fails there
    assert not program(other)[0]
    np.testing.assert_allclose(t(other)[1], [-1.0, 1.0])


def test_guards_of_loop_code_are_data():
    def relu_chain(x):
        return sum(ad.relu(x[i]) * x[i + 1] if x[i] > -5.0 else x[i] for i in range(len(x) - 1))

    x = np.linspace(-0.5, 0.7, ROWS)
    t = ad.value_and_grad(relu_chain)
    _, program, _ = check_program(t, (x,), "folded", False)
    assert len(program.guards) >= ROWS - 1
    assert all(g.expected is True and g.condition.endswith("> -5.0") for g in program.guards[:3])
    plain_chain = lambda x: sum(  # noqa: E731
        max(x[i], 0.0) * x[i + 1] for i in range(len(x) - 1)
    )
    np.testing.assert_allclose(t(x)[1], fd(plain_chain, x), rtol=1e-5, atol=1e-6)
