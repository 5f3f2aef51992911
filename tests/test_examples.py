"""Every script in examples/ runs, and what it prints is right."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_every_example_is_tested():
    tested = {"moons.py", "moons_pytorch_style.py", "rosenbrock_scipy.py"}
    tested |= {"check_derivatives.py", "graph_picture.py"}
    tested |= {"numba_descent.py"}  # (tests/test_numba_entry.py runs it)
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
