"""Every script in examples/ runs, and what it prints is right."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompile as ad

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(name: str, *args: str, cwd: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def load(name: str):
    """The example as a module (its ``main()`` not run), to check its functions."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_is_tested():
    tested = {"moons.py", "moons_pytorch_style.py", "rosenbrock_scipy.py"}
    tested |= {"check_derivatives.py", "graph_picture.py"}
    tested |= {"numba_descent.py"}  # (tests/test_numba_entry.py runs it)
    tested |= {"newton_scipy.py", "least_squares_fit.py", "per_example_grads.py"}
    tested |= {"multistart_dask.py"}  # (tests/test_distributed.py runs it)
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_moons_reaches_full_training_accuracy_and_writes_the_picture(tmp_path):
    pytest.importorskip("matplotlib")
    out = run("moons.py", "--points", "60", "--epochs", "100", "--out", "m.png", cwd=tmp_path)
    last = out.strip().splitlines()[-2]
    assert last.endswith("accuracy 100%"), out
    png = (tmp_path / "m.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_rosenbrock_with_scipy_bfgs_finds_the_minimum_at_one(tmp_path):
    pytest.importorskip("scipy")
    out = run("rosenbrock_scipy.py", "--n", "6", cwd=tmp_path)
    dist = float(re.search(r"\|x - 1\| = (\S+)", out).group(1))
    assert dist < 1e-6, out
    assert "traced 1 time(s)" in out


def test_check_derivatives_agrees_and_catches_the_wrong_rule(tmp_path):
    out = run("check_derivatives.py", cwd=tmp_path)
    assert out.count("\nOK") == 3
    # the wrong rule is twice the right one: compiled 2x what sympy and finite differences say
    line = next(ln for ln in out.splitlines() if ln.startswith("caught the wrong rule"))
    nums = dict(re.findall(r"(compiled|sympy|finite diff)=([-\d.e]+)", line))
    assert float(nums["compiled"]) == pytest.approx(2 * float(nums["sympy"]), rel=1e-12)
    assert float(nums["finite diff"]) == pytest.approx(float(nums["sympy"]), rel=1e-7)


@pytest.mark.parametrize("mode", [[], ["--eager"]])
def test_pytorch_style_moons_trains_eagerly_and_compiled(tmp_path, mode):
    out = run("moons_pytorch_style.py", "--points", "40", "--epochs", "60", *mode, cwd=tmp_path)
    acc = [int(a) for a in re.findall(r"accuracy (\d+)%", out)]
    assert acc[-1] >= 95 and acc[-1] > acc[0], out
    # 2-16-16-1: 2*16 + 16 + 16*16 + 16 + 16 + 1 parameters
    assert "6 tensors, 337 floats" in out


def test_graph_picture_prints_dot_with_data_and_grad(tmp_path):
    out = run("graph_picture.py", "--out", str(tmp_path / "g.svg"), cwd=tmp_path)
    assert out.lstrip().startswith("digraph")
    # micrograd's neuron example: o = tanh(n) = 0.7071, do/dx1 = w1 * (1 - o**2) = -1.5
    assert "0.7071" in out and "-1.5" in out


def rosen_hessp(x, p):
    """Rosenbrock's Hessian (tridiagonal) times p, derived by hand."""
    diag = np.zeros_like(x)
    diag[:-1] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    diag[1:] += 200
    off = -400 * x[:-1]  # d2f / dx_i dx_{i+1}
    hp = diag * p
    hp[:-1] += off * p[1:]
    hp[1:] += off * p[:-1]
    return hp


def test_newton_trust_ncg_reaches_one_and_hvp_is_rosenbrocks(tmp_path):
    pytest.importorskip("scipy")
    out = run("newton_scipy.py", cwd=tmp_path)
    assert "n = 1000" in out, out
    dist = float(re.search(r"\|x - 1\| = (\S+)", out).group(1))
    assert dist < 1e-6, out
    hvp = ad.hvp(load("newton_scipy.py").rosen)
    rng = np.random.default_rng(3)
    for n in (2, 7, 50):
        x, p = rng.normal(size=n), rng.normal(size=n)
        np.testing.assert_allclose(hvp(x, p), rosen_hessp(x, p), rtol=1e-12, atol=1e-9)


def test_least_squares_fit_finds_the_true_parameters_within_the_noise(tmp_path):
    pytest.importorskip("scipy")
    out = run("least_squares_fit.py", cwd=tmp_path)
    ex = load("least_squares_fit.py")
    fit = np.array([float(v) for v in re.search(r"fitted a, b, c = (.*)", out).group(1).split()])
    t = np.linspace(0.0, 4.0, 200)  # the example's defaults
    y = ex.TRUE[0] * np.exp(-ex.TRUE[1] * t) + ex.TRUE[2]
    # the Jacobian against central differences, at the fit and away from it
    jac = ad.jacobian(ex.residuals)
    for p in (fit, np.array([1.0, 0.3, -2.0])):
        J = jac(p, t, y)
        assert J.shape == (200, 3)
        fd = np.empty((200, 3))
        for k in range(3):
            h = np.zeros(3)
            h[k] = 1e-6
            fd[:, k] = (ex.residuals(p + h, t, y) - ex.residuals(p - h, t, y)) / 2e-6
        np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-8)
    # within 5 standard errors of the truth (covariance noise**2 (J^T J)^-1)
    J = jac(fit, t, y)
    stderr = ex.NOISE * np.sqrt(np.diag(np.linalg.inv(J.T @ J)))
    assert np.all(np.abs(fit - ex.TRUE) < 5 * stderr), (fit, stderr)
    assert np.all(5 * stderr < 0.1)  # and that says something


def test_per_example_gradients_are_the_logistic_loss_gradients(tmp_path):
    out = run("per_example_grads.py", "--rows", "3000", cwd=tmp_path)
    assert "shape (3000, 5)" in out, out
    assert float(re.search(r"Python loop of ad.grad: (\S+)", out).group(1)) < 1e-12
    ex = load("per_example_grads.py")
    rng = np.random.default_rng(5)
    X, y, w = rng.normal(size=(40, 3)), np.sign(rng.normal(size=40)), rng.normal(size=3)
    G = ad.vmap(ad.grad(ex.loss), in_axes=(None, 0, 0))(w, X, y)
    s = -y * (X @ w)  # d/dw log(1 + exp(s)) = sigmoid(s) * ds/dw, ds/dw = -y x
    np.testing.assert_allclose(G, (1 / (1 + np.exp(-s)) * -y)[:, None] * X, rtol=1e-12)
