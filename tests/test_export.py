"""``ad.export``: standalone Python and C modules, checked against adcompile.

Exported Python runs in a fresh interpreter where ``import adcompile`` fails;
exported C is compiled with the system's compiler (skipped without one) and
called through ctypes.
"""

from __future__ import annotations

import ast
import ctypes
import importlib
import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import build_c
from hypothesis import HealthCheck, given, settings
from test_fuzz import _args, _compile, programs

import adcompile as ad
from adcompile.api.export import c_header, exported_name
from adcompile.ir import BUILTIN

HERE = Path(__file__).resolve().parent


def branchy(x, y):
    if x[0] > 0.5:
        return ad.sin(x[0]) * y + x[1] ** 2
    return x[1] * y


def rosen(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def load(src: str, name: str):
    """The exported module's function, run in this process."""
    ns: dict = {}
    exec(compile(src, f"<exported {name}>", "exec"), ns)
    return ns[name]


# A fresh interpreter: -I ignores PYTHONPATH and the user's site; adcompile may still
# be installed in the environment, so a meta path finder refuses it as well.
CHILD = """
import importlib.util, json, sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "adcompile":
            raise ImportError("adcompile is hidden")
sys.meta_path.insert(0, Hide())
try:
    import adcompile
    hidden = False
except ImportError:
    hidden = True
import numpy as np
def load(path, name):
    spec = importlib.util.spec_from_file_location(path[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)
def plain(r):
    if isinstance(r, (tuple, list)):
        return [plain(e) for e in r]
    return np.asarray(r).tolist()
results = {"hidden": hidden, "modules": sorted(sys.modules)}
for path, name, args in json.loads(sys.argv[1]):
    args = [np.array(a) if isinstance(a, list) else a for a in args]
    results[path] = plain(load(path, name)(*args))
print(json.dumps(results))
"""


def imported(src: str) -> set[str]:
    """The top-level packages a module's source imports."""
    names = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names


def run_isolated(folder: Path, calls: list) -> dict:
    """Run exported modules in ``folder`` in a fresh interpreter without adcompile."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", CHILD, json.dumps(calls)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def same(got, want) -> None:
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        return
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


def test_exported_python_runs_without_adcompile(tmp_path):
    x, y, v = np.array([1.0, 2.0]), 3.0, np.array([0.5, -1.0])
    transforms = {
        "value": ad.jit(branchy),
        "grad": ad.grad(branchy),
        "value_and_grad": ad.value_and_grad(branchy),
        "jacobian": ad.jacobian(branchy),
        "hessian": ad.hessian(branchy),
        "hvp": ad.hvp(branchy),
    }
    calls, wants = [], {}
    for name, t in transforms.items():
        args = (x, v, y) if name == "hvp" else (x, y)
        src = ad.export(branchy, *args, transform=name, path=tmp_path / f"m_{name}.py")
        # what it imports, whatever the path of this checkout (git names it adcompile/)
        assert imported(src) == {"math", "numbers", "numpy"}, imported(src)
        assert str(HERE) not in src  # the user's file by its base name, not where it lies
        calls.append((f"m_{name}.py", "branchy", [a.tolist() if np.ndim(a) else a for a in args]))
        wants[f"m_{name}.py"] = t(*args)
    got = run_isolated(tmp_path, calls)
    assert got["hidden"] and not any(m.startswith("adcompile") for m in got["modules"])
    for path, want in wants.items():
        same(got[path], want)
    # and by hand: f = sin(x0) y + x1^2 at (1, 2), y = 3
    s, c = math.sin(1.0), math.cos(1.0)
    same(got["m_value_and_grad.py"], [3 * s + 4, [3 * c, 4.0]])
    same(got["m_hessian.py"], [[-3 * s, 0.0], [0.0, 2.0]])
    same(got["m_hvp.py"], [-3 * s * 0.5, 2.0 * -1.0])


def test_return_convention_matches_adcompile():
    x, y = np.array([1.0, 2.0]), 3.0
    value, grads = load(ad.export(branchy, x, y, argnums=(0, 1)), "branchy")(x, y)
    want = ad.value_and_grad(branchy, argnums=(0, 1))(x, y)
    assert isinstance(grads, tuple) and isinstance(grads[1], float)
    same((value, grads), want)

    def pair(x):
        return [x[0] * x[1], ad.exp(x)]

    jac = load(ad.export(pair, x, transform="jacobian"), "pair")(x)
    assert isinstance(jac, list) and jac[0].shape == (2,) and jac[1].shape == (2, 2)
    same(jac, ad.jacobian(pair)(x))


def test_guard_on_the_other_branch_names_comparison_and_line():
    x, y = np.array([1.0, 2.0]), 3.0
    for transform in ("value", "value_and_grad", "hessian"):
        f = load(ad.export(branchy, x, y, transform=transform), "branchy")
        with pytest.raises(ValueError) as e:
            f(np.array([0.0, 2.0]), y)
        msg = str(e.value)
        assert "guard 1 failed: x[0] > 0.5 was True" in msg
        # the user's file:line and its text
        assert re.search(r"test_export\.py:\d+: if x\[0\] > 0\.5:", msg), msg


def test_guards_name_the_users_file_by_its_base_name_in_python_and_c():
    x, y = np.array([1.0, 2.0]), 3.0
    for target in ("python", "c"):
        src = ad.export(branchy, x, y, target=target)
        assert str(HERE) not in src and "test_export.py:" in src
        # in the guard's message and in the generated code's comment on the guard
        assert re.search(r"at test_export\.py:\d+: if x\[0\] > 0\.5:", src), target
        assert re.search(r"guard: .* was True at test_export\.py:\d+", src), target


def test_export_from_a_folder_named_adcompile_runs_without_adcompile(tmp_path):
    """The issue's case: the user's code lies under a folder named ``adcompile`` (git's
    name for a clone); the exported module neither names that path nor imports it."""
    folder = tmp_path / "adcompile" / "work"
    folder.mkdir(parents=True)
    (folder / "model_in_clone.py").write_text(
        "import adcompile as ad\n\n\n"
        "def model(x):\n"
        "    if x[0] > 0.0:\n"
        "        return ad.exp(x[0]) * x[1]\n"
        "    return x[1]\n"
    )
    spec = importlib.util.spec_from_file_location("model_in_clone", folder / "model_in_clone.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = np.array([0.5, 2.0])
    src = ad.export(module.model, x, path=folder / "exported_model.py")
    assert str(tmp_path) not in src and "model_in_clone.py:5: if x[0] > 0.0:" in src
    assert imported(src) == {"math", "numbers", "numpy"}
    got = run_isolated(folder, [("exported_model.py", "model", [x.tolist()])])
    assert got["hidden"] and not any(m.startswith("adcompile") for m in got["modules"])
    # by hand: f = exp(x0) x1, df = (exp(x0) x1, exp(x0))
    e = math.exp(0.5)
    same(got["exported_model.py"], [2 * e, [2 * e, e]])


def test_a_lambda_exports_as_lambda_():
    x = np.array([0.3, 2.0])
    src = ad.export(lambda x: ad.sin(x[0]) * x[1], x)
    compile(src, "<exported lambda>", "exec")  # no SyntaxError: was "def lambda(x):"
    assert "def lambda_(x):" in src
    value, grad = load(src, "lambda_")(x)
    # by hand: f = sin(x0) x1, df = (cos(x0) x1, sin(x0))
    assert value == pytest.approx(math.sin(0.3) * 2.0, rel=1e-15)
    np.testing.assert_allclose(grad, [math.cos(0.3) * 2.0, math.sin(0.3)], rtol=1e-15)
    # C names its function after the kernel, which was always valid
    c_src = ad.export(lambda x: ad.sin(x[0]) * x[1], x, target="c")
    assert "int lambda_value_and_grad(const double* x, double* out);" in c_src


@pytest.mark.parametrize(
    "name, want",
    [
        ("lambda", "lambda_"),
        ("class", "class_"),
        ("np", "np_"),  # would hide numpy from the module's own code
        ("max", "max_"),  # a builtin the module's code may call
        ("1f", "f_1f"),
        ("a-b", "a_b"),
        ("", "f"),
        ("rosen", "rosen"),
        ("match", "match"),  # a soft keyword is a valid name
    ],
)
def test_exported_names_are_valid_identifiers(name, want):
    got = exported_name(name)
    assert got == want
    compile(f"def {got}(x):\n    return x\n", "<name>", "exec")


def test_a_function_named_like_a_keyword_or_a_module_name_exports(tmp_path):
    x = np.array([0.3, 2.0])

    def f(x):
        return x[0] * x[1] ** 2

    for name in ("class", "np", "math"):
        f.__name__ = name
        src = ad.export(f, x)
        value, grad = load(src, exported_name(name))(x)
        # by hand: f = x0 x1^2, df = (x1^2, 2 x0 x1)
        assert value == pytest.approx(1.2, rel=1e-15)
        np.testing.assert_allclose(grad, [4.0, 1.2], rtol=1e-15)


def test_wrong_shape_is_a_value_error_naming_the_argument():
    f = load(ad.export(branchy, np.array([1.0, 2.0]), 3.0), "branchy")
    with pytest.raises(
        ValueError, match=r"argument x of branchy\(\): expected shape \(2,\), got \(3,\)"
    ):
        f(np.ones(3), 3.0)
    with pytest.raises(ValueError, match=r"argument y of branchy\(\): expected a scalar"):
        f(np.ones(2), np.ones(2))
    assert f([1.0, 2.0], 3)[0] == pytest.approx(3 * math.sin(1.0) + 4)  # lists and ints do


def test_unknown_transform_or_target():
    with pytest.raises(ValueError, match="'value', 'grad'"):
        ad.export(branchy, np.ones(2), 1.0, transform="laplacian")
    with pytest.raises(ValueError, match="'python', 'c'"):
        ad.export(branchy, np.ones(2), 1.0, target="fortran")


def test_rosenbrock_stays_folded_short_and_correct():
    x = np.linspace(-1.0, 1.0, 10_000)
    src = ad.export(rosen, x)
    assert len(src.splitlines()) < 200
    assert "for i in range(9999)" in src
    value, grad = load(src, "rosen")(x)
    want_v, want_g = ad.value_and_grad(rosen)(x)
    assert value == pytest.approx(want_v, rel=1e-12)
    np.testing.assert_allclose(grad, want_g, rtol=1e-10, atol=1e-9)
    # by hand at the ends: d/dx0 = -400 x0 (x1 - x0^2) - 2 (1 - x0)
    x0, x1 = x[0], x[1]
    assert grad[0] == pytest.approx(-400 * x0 * (x1 - x0**2) - 2 * (1 - x0), rel=1e-10)
    assert grad[-1] == pytest.approx(200 * (x[-1] - x[-2] ** 2), rel=1e-10)


def relu_sum(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + x[i] * x[i]
        else:
            s = s - x[i]
    return s


def test_guard_in_folded_code_names_its_element():
    x = np.linspace(0.1, 1.0, 120)
    src = ad.export(relu_sum, x)
    assert "for i in range(" in src  # folded: the guard on x[i] is checked in the loop
    f = load(src, "relu_sum")
    same(f(x), ad.value_and_grad(relu_sum)(x))
    x[7] = -1.0
    with pytest.raises(ValueError, match=r"x\[7\] > 0.0 was True .*if x\[i\] > 0:"):
        f(x)


def test_jit_module_compiles_with_numba():
    x = np.linspace(-1.0, 1.0, 500)
    src = ad.export(rosen, x, jit=True)
    assert "import numba" in src and "numba.njit(cache=False" in src
    same(load(src, "rosen")(x), ad.value_and_grad(rosen)(x))


def test_the_printers_return_each_guard_as_data_with_the_number_its_code_returns():
    """No comment is read back: the printer numbers the guards as it prints them and
    returns them (render.GuardInfo); the exported code returns those numbers."""
    from adcompile.emit.codegen import print_tape
    from adcompile.emit.fold import loop_source
    from adcompile.emit.render import PYTHON
    from adcompile.ir.tape import Param

    x, y = np.array([1.0, 2.0]), 3.0
    printed = print_tape(
        ad.trace(branchy, x, y), "f", [Param("x", 2), Param("y", None)], target=PYTHON
    )
    [g] = printed.guards
    assert (g.number, g.condition, g.expected) == (1, "x[0] > 0.5", True)
    assert re.fullmatch(r".*test_export\.py:\d+", g.where)
    f = load("import math\n" + printed.text, "f")
    assert f(x, y, np.empty(1)) == 0 and f(np.array([0.2, 2.0]), y, np.empty(1)) == 1
    # folded: a loop of 120 guards, one number (and record) per element
    z = np.linspace(0.1, 1.0, 120)
    code = loop_source(ad.trace(relu_sum, z), [Param("x", 120)], [0], "g").printed(PYTHON)
    assert [g.number for g in code.guards] == list(range(1, 121))
    assert code.guards[7].condition == "x[7] > 0.0" and code.guards[7].expected
    g = load("import math\n" + code.text, "g")
    work, out = np.empty(max(code.work_size, 1)), np.empty(121)
    assert g(z, work, code.columns, out) == 0
    np.testing.assert_allclose(out, [np.sum(z * z), *(2 * z)], rtol=1e-14)
    z[7] = -1.0
    assert g(z, work, code.columns, out) == 8  # guards[7], x[7] > 0.0, fails


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(src=programs(), **_args)
def test_fuzz_programs_exported_agree(src, x, y, a):
    f = _compile(src)
    want = ad.value_and_grad(f, argnums=(0, 1, 2))(x, y, a)
    got = load(ad.export(f, x, y, a, argnums=(0, 1, 2)), "f")(x, y, a)
    assert got[0] == pytest.approx(want[0], rel=1e-9, abs=1e-12)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ C


def build(tmp_path: Path, src: str, name: str) -> ctypes.CDLL:
    return build_c(tmp_path, src, name)


P = ctypes.POINTER(ctypes.c_double)


def ptr(a: np.ndarray):
    return a.ctypes.data_as(P)


#: Points every op's templates are compared at: each op's test domain and the edges.
EDGES = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.0, 1e300, -1e300, math.inf, -math.inf, math.nan]


def test_every_builtin_op_states_a_c_template_that_computes_what_its_python_one_does(
    tmp_path,
):
    """Each op of the table has a C99 template of its own (none is derived from the Python
    one), and compiled by the C compiler it gives what Numba computes from the Python
    template (adcompile's compiled code), at points of the op's domain and at the edges."""
    import numba

    names = list(BUILTIN)
    ops = [ad.OPS[n] for n in names]
    assert all(op.c for op in ops), [op.name for op in ops if not op.c]
    args = ["a", "b"]
    py = "def all_ops(a, b, out):\n" + "".join(
        f"    out[{k}] = {op.code.format(*args[: op.arity])}\n" for k, op in enumerate(ops)
    )
    c = "#include <math.h>\nvoid all_ops(double a, double b, double* out) {\n" + "".join(
        f"    out[{k}] = {op.c.format(*args[: op.arity])};\n" for k, op in enumerate(ops)
    )
    ns: dict = {"math": math}
    exec(py, ns)
    compiled = numba.njit(error_model="numpy")(ns["all_ops"])
    fn = build(tmp_path, c + "}\n", "all_ops").all_ops
    fn.argtypes, fn.restype = [ctypes.c_double, ctypes.c_double, P], None
    rng = np.random.default_rng(0)
    points = [(a, b) for a in EDGES for b in EDGES] + list(rng.uniform(-3, 3, (50, 2)))
    points += [tuple(rng.uniform(*op.domain, 2)) for op in ops for _ in range(5)]
    want, got = np.empty(len(ops)), np.empty(len(ops))
    for a, b in points:
        compiled(float(a), float(b), want)
        fn(float(a), float(b), ptr(got))
        for name, w, g in zip(names, want, got):
            same_value = (w == g or (w != w and g != g)) or abs(w - g) <= 1e-14 * abs(w)
            assert same_value, (name, a, b, w, g)


def test_user_primitives_export_to_c_with_their_c_template(tmp_path):
    @ad.primitive(
        vjp=lambda g, out, x: g * 2 / math.sqrt(math.pi) * ad.exp(-x * x),
        code="math.erf({0})",
        c="erf({0})",  # (no sympy=: test_extend's erf maps SymPy's erf back)
    )
    def xc_erf(x):
        return math.erf(x)

    @ad.primitive(vjp=lambda g, out, x: g * (1.0 - out * out))  # traced: code and C from it
    def xc_tanh_like(x):
        return 2.0 * ad.sigmoid(2.0 * x) - 1.0

    def f(x):
        return xc_erf(x[0]) * xc_tanh_like(x[1])

    assert xc_tanh_like.op.c == "((2.0 * (1.0 / (1.0 + exp(-(2.0 * {0}))))) - 1.0)"
    x = np.array([0.3, -0.7])
    fn = build(tmp_path, ad.export(f, x, target="c"), "user_ops").f_value_and_grad
    fn.argtypes, fn.restype = [P, P], ctypes.c_int
    out = np.empty(3)
    assert fn(ptr(x), ptr(out)) == 0
    # by hand: f = erf(x0) tanh(x1)
    t, e = math.tanh(-0.7), math.erf(0.3)
    want = [e * t, 2 / math.sqrt(math.pi) * math.exp(-0.09) * t, e * (1 - t * t)]
    np.testing.assert_allclose(out, want, rtol=1e-13)


def test_c_export_of_a_primitive_without_a_c_template_says_to_give_one():
    @ad.primitive(vjp=lambda g, out, x: g * out, code="math.exp({0})")
    def xc_no_c(x):
        return math.exp(x)

    assert xc_no_c.op.c is None  # code= given, c= not: nothing is derived from code
    with pytest.raises(NotImplementedError, match=r"op 'xc_no_c' has no C form.*c="):
        ad.export(lambda x: xc_no_c(x) * x, 0.5, target="c")
    assert load(ad.export(lambda x: xc_no_c(x) * x, 0.5), "lambda_")(0.5)[0] == pytest.approx(
        0.5 * math.exp(0.5), rel=1e-15
    )


def test_c_export_compiles_and_agrees(tmp_path):
    x, y = np.array([1.0, 2.0]), 3.0
    src = ad.export(branchy, x, y, target="c", path=tmp_path / "vg.c")
    assert (tmp_path / "vg.h").read_text() == c_header(src)
    assert "int branchy_value_and_grad(const double* x, double y, double* out);" in src
    assert "#include <math.h>" in src and src.count("#include") == 1
    fn = build(tmp_path, src, "vg").branchy_value_and_grad
    fn.argtypes, fn.restype = [P, ctypes.c_double, P], ctypes.c_int
    out = np.empty(3)
    assert fn(ptr(x), y, ptr(out)) == 0
    value, grad = ad.value_and_grad(branchy)(x, y)
    np.testing.assert_allclose(out, [value, *grad], rtol=1e-14)
    np.testing.assert_allclose(out, [3 * math.sin(1) + 4, 3 * math.cos(1), 4.0], rtol=1e-14)
    assert fn(ptr(np.array([0.2, 2.0])), y, ptr(out)) == 1  # guard 1 fails


def test_c_hessian_by_basis_loop(tmp_path):
    def h(x):
        return ad.sin(x[0]) * (x**2).sum() + ad.softplus(x[1] - x[2]) + ad.maximum(x[3], 0.5)

    x = np.linspace(0.1, 1.0, 10)  # 10 > 8 unit vectors: a loop around one product
    src = ad.export(h, x, transform="hessian", target="c")
    assert "one basis vector" in src
    fn = build(tmp_path, src, "hess").h_hessian
    fn.argtypes, fn.restype = [P, P], ctypes.c_int
    out = np.empty(100)
    assert fn(ptr(x), ptr(out)) == 0
    np.testing.assert_allclose(out.reshape(10, 10), ad.hessian(h)(x), rtol=1e-12, atol=1e-14)


def test_c_of_folded_code_keeps_its_loops_and_agrees(tmp_path):
    x = np.linspace(-1.0, 1.0, 80)
    vg = ad.value_and_grad(rosen)
    vg(x)
    assert vg.explanation.startswith("Folded")  # adcompile's own code has loops
    src = ad.export(rosen, x, target="c")
    assert "for (long i = 0; i < 79; i++) {" in src  # and so has the C
    fn = build(tmp_path, src, "rosen_c").rosen_value_and_grad
    fn.argtypes, fn.restype = [P, P], ctypes.c_int
    out = np.empty(81)
    assert fn(ptr(x), ptr(out)) == 0
    value, grad = vg(x)
    np.testing.assert_allclose(out, [value, *grad], rtol=1e-13, atol=1e-13)


def test_c_of_batch_generic_code_is_traced_at_the_example_length(tmp_path):
    def loss(w, X, y):
        return np.mean((X @ w - y) ** 2)

    rng = np.random.default_rng(0)
    X, y, w = rng.normal(size=(30, 3)), rng.normal(size=30), np.array([0.5, -1.0, 2.0])
    vg = ad.value_and_grad(loss)
    vg(w, X, y)
    src = ad.export(loss, w, X, y, target="c")
    fn = build(tmp_path, src, "loss_c").loss_value_and_grad
    fn.argtypes, fn.restype = [P, P, P, P], ctypes.c_int
    out = np.empty(4)
    assert fn(ptr(w), ptr(np.ascontiguousarray(X)), ptr(y), ptr(out)) == 0
    np.testing.assert_allclose(out[1:], 2 * X.T @ (X @ w - y) / 30, rtol=1e-12)


# ------------------------------------------------------------------ the CLI


def test_cli_export_python_and_c(tmp_path, capsys):
    from adcompile.cli.commands import main

    assert main(["export", "sin(x)*y", "--at", "x=0.5,y=2"]) == 0
    src = capsys.readouterr().out
    value, (dx, dy) = load(src, "f")(0.5, 2.0)
    assert (value, dx, dy) == pytest.approx((2 * math.sin(0.5), 2 * math.cos(0.5), math.sin(0.5)))
    out = tmp_path / "f.c"
    assert main(["export", "sin(x)*y", "--target", "c", "-o", str(out)]) == 0
    assert "int f_value_and_grad(double x, double y, double* out);" in out.read_text()
    assert (tmp_path / "f.h").exists()
    assert main(["export", "x**2*y", "--transform", "hessian"]) == 0
    hess = load(capsys.readouterr().out, "f")(3.0, 2.0)
    assert hess == ((4.0, 6.0), (6.0, 0.0))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sin(x)*y", "--target", "fortran"], "unknown target 'fortran'; choose python or c"),
        (["sin(x)*"], "cannot parse 'sin(x)*'"),
        (["sin(x)*y", "--transform", "curl"], "unknown transform 'curl'"),
        (["foo(x)"], "unknown function foo()"),
    ],
)
def test_cli_export_bad_input_exits_2_with_one_line(argv, message, capsys):
    from adcompile.cli.commands import main

    assert main(["export", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("adcompile export: error:")
    assert message in err


def test_batch_generic_code_exports_at_the_example_length():
    def loss(w, X, y):
        s = 0.0
        for i in range(len(y)):
            r = w[0] * X[i, 0] + w[1] * X[i, 1] - y[i]
            s = s + r * r
        return s / len(y)

    rng = np.random.default_rng(0)
    X, y, w = rng.normal(size=(40, 2)), rng.normal(size=40), np.array([0.3, -0.2])
    vg = ad.value_and_grad(loss)
    assert type(vg.spec_for((w, X, y))[0].compiled).__name__ == "AtLength"
    got = load(ad.export(loss, w, X, y), "loss")(w, X, y)
    same(got, vg(w, X, y))
    r = X @ w - y  # by hand: mean of squares, its gradient 2 X^T r / n
    same(got, (np.mean(r * r), 2 * X.T @ r / 40))


def test_interpreter_code_exports_with_guard_numbers(monkeypatch):
    records = importlib.import_module("adcompile.backend.records")
    monkeypatch.setattr(records, "STRAIGHT_LINE_LIMIT", 3)
    x = np.array([1.0, 2.0])
    vg = ad.value_and_grad(branchy)
    assert vg.spec_for((x, 3.0))[0].compiled.facts.kind == "interpreter"
    f = load(ad.export(branchy, x, 3.0), "branchy")
    same(f(x, 3.0), vg(x, 3.0))
    with pytest.raises(ValueError, match=r"guard 1 failed: x\[0\] > 0.5"):
        f(np.array([0.0, 1.0]), 3.0)


def test_jvp_exports_primals_then_tangents():
    def g(x, y):
        return ad.sin(x) * y

    got = load(ad.export(g, 1.0, 2.0, 0.5, 0.0, transform="jvp"), "g")(1.0, 2.0, 0.5, 0.0)
    same(got, ad.jvp(g, (1.0, 2.0), (0.5, 0.0)))
    same(got, (2 * math.sin(1.0), 0.5 * 2 * math.cos(1.0)))
