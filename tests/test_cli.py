"""The command line (``adcompile demo``, ``--help``) and the two-moons data it trains on."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import fresh_loader

import adcompile as ad
from adcompile.cli import commands as cli
from adcompile.datasets import make_moons


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "subcommands" in out and "demo" in out


def test_no_subcommand_prints_help(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_help_in_a_fresh_process_is_fast():
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "adcompile.cli", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "demo" in out.stdout
    assert time.perf_counter() - start < 15


def test_demo_trains_to_high_accuracy(capsys, tmp_path):
    png = tmp_path / "moons.png"
    start = time.perf_counter()
    assert cli.main(["demo", "--points", "50", "--steps", "30", "--out", str(png)]) == 0
    elapsed = time.perf_counter() - start
    captured = capsys.readouterr()
    acc = float(re.search(r"final training accuracy: ([\d.]+)%", captured.out)[1])
    assert acc >= 95.0
    assert "loss" in captured.err and "acc" in captured.err and "30/30" in captured.err
    picture = [line for line in captured.out.splitlines() if line.startswith("|")]
    assert len(picture) == 22 and "o" in "".join(picture) and "x" in "".join(picture)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in captured.out
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {png}" in captured.out
    assert elapsed < 60


def test_plot_without_matplotlib_says_so_and_skips(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    X, y = make_moons(10)
    cli._plot(lambda P: P[:, 0], X, y, str(tmp_path / "x.png"))
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "matplotlib is not installed" in out
    assert not (tmp_path / "x.png").exists()


def test_ascii_boundary_of_a_known_classifier():
    X = np.array([[-1.0, 0.0], [1.0, 0.0]])
    y = np.array([-1.0, 1.0])
    pic = cli.ascii_boundary(lambda P: P[:, 0], X, y, cols=20, rows=5).splitlines()
    assert pic[0] == pic[-1] == "+" + "-" * 20 + "+"
    rows = [line[1:-1] for line in pic[1:-1]]
    # x > 0 is class +1: right half dotted, left half blank. The frame pads the data
    # by 0.25, so x = -1 and x = 1 fall in columns 0.25 / 2.5 * 20 = 2 and 18, y = 0 in row 2.
    assert rows[0] == " " * 10 + "." * 10
    assert rows[2] == " " * 2 + "x" + " " * 7 + "." * 8 + "o" + "."


def test_progress_bar_without_a_terminal():
    s = io.StringIO()
    bar = cli.Progress(20, stream=s, width=10)
    for k in range(1, 21):
        bar.update(k, loss=0.5, acc="90%")
    lines = s.getvalue().splitlines()
    assert len(lines) == 10  # a line per tenth
    assert lines[-1].startswith("[##########] 20/20 loss 0.5000 acc 90%")


def test_make_moons_shape_labels_and_geometry():
    X, y = make_moons(101, noise=0.0, seed=3)
    assert X.shape == (101, 2) and y.shape == (101,)
    assert set(y.tolist()) == {-1.0, 1.0} and (y == -1).sum() == 50
    outer, inner = X[y == -1], X[y == 1]
    # without noise: the outer moon is the upper unit half circle, the inner one the
    # lower unit half circle around (1, 0.5)
    np.testing.assert_allclose(np.hypot(outer[:, 0], outer[:, 1]), 1.0, rtol=1e-12)
    assert (outer[:, 1] >= -1e-12).all()
    np.testing.assert_allclose(np.hypot(inner[:, 0] - 1, inner[:, 1] - 0.5), 1.0, rtol=1e-12)
    assert (inner[:, 1] <= 0.5 + 1e-12).all()
    a, b = make_moons(50, seed=7), make_moons(50, seed=7)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], make_moons(50, seed=8)[0])
    noisy, _ = make_moons(2000, noise=0.1, seed=0)
    clean, _ = make_moons(2000, noise=0.0, seed=0)
    assert np.std(noisy - clean) == pytest.approx(0.1, rel=0.05)


def test_progress_bar_on_a_terminal_redraws_one_line():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    s = Terminal()
    bar = cli.Progress(3, stream=s, width=3)
    bar.update(1, loss=12345.0)
    bar.update(2, loss=1.0)
    bar.update(3, loss=1.0)
    text = s.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    first, second, third = text.strip("\r\n").split("\r")
    assert first.startswith("[#--] 1/3 loss 12345.0000")
    assert len(second) == len(first)  # padded over the longer line before it
    assert third.startswith("[###] 3/3 loss 1.0000")


def test_demo_compiled_and_eager_reach_the_same_loss(capsys):
    from adcompile.cli.commands import main

    losses = []
    for extra in ([], ["--eager"]):  # --epochs: the old name of --steps still works
        assert main(["demo", "--points", "30", "--epochs", "5", "--out", "", *extra]) == 0
        err = capsys.readouterr().err.replace("\r", "\n")
        last = [ln for ln in err.splitlines() if "5/5" in ln][-1]
        losses.append(float(last.split("loss")[1].split()[0]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-3)


def test_cache_path_and_clear(tmp_path, monkeypatch, capsys):
    from adcompile.cli.commands import main

    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))
    assert main(["cache", "path"]) == 0
    assert str(tmp_path) in capsys.readouterr().out
    (tmp_path / "x.py").write_text("1")
    assert main(["cache", "clear"]) == 0
    assert "removed 1 files" in capsys.readouterr().out
    assert not (tmp_path / "x.py").exists()


# ---------------------------------------------------------------- a bad cache directory


@pytest.mark.parametrize("action", ["clear", "path"])
def test_cache_command_with_a_file_for_a_directory_is_one_line_and_status_2(
    tmp_path, monkeypatch, capsys, action
):
    from adcompile.cli.commands import main

    (tmp_path / "file").write_text("keep")
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path / "file"))
    assert main(["cache", action]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(
        f"adcompile cache: error: the cache directory ADCOMPILE_CACHE_DIR={tmp_path / 'file'} "
        "is a file, not a directory; set ADCOMPILE_CACHE_DIR to a directory you can write to"
    )
    assert (tmp_path / "file").read_text() == "keep"


def test_cache_clear_under_a_path_that_cannot_be_made_in_a_fresh_process(tmp_path):
    (tmp_path / "file").write_text("")
    env = dict(os.environ, ADCOMPILE_CACHE_DIR=str(tmp_path / "file" / "sub"))
    proc = subprocess.run(
        [sys.executable, "-m", "adcompile.cli", "cache", "clear"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "cannot be created" in proc.stderr and str(tmp_path / "file" / "sub") in proc.stderr


def test_demo_with_a_bad_cache_directory_says_so_in_one_line_and_trains(
    tmp_path, monkeypatch, capsys
):
    import importlib

    jit = importlib.import_module("adcompile.backend.jit")
    fresh_loader(monkeypatch)
    jit.forget_shared_code()  # (the demo's code, if an earlier test compiled it)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path / "file"))
    assert cli.main(["demo", "--points", "20", "--steps", "3", "--out", ""]) == 0
    err = capsys.readouterr().err.splitlines()
    said = [line for line in err if "ADCOMPILE_CACHE_DIR" in line]
    assert len(said) == 1
    assert said[0].startswith("adcompile: warning: the cache directory ADCOMPILE_CACHE_DIR=")
    assert "Compiling without a disk cache" in said[0]
    assert not any("CacheWarning" in line or "warnings.warn" in line for line in err)
    assert any(line.startswith("compiled in ") for line in err)


# ---------------------------------------------------------------- adcompile bench


SIDE_PROGRAMS = ["first-call", "call-overhead", "eager", "transforms", "distributed"]


@pytest.mark.parametrize("program", SIDE_PROGRAMS)
def test_each_bench_program_answers_its_own_help(capsys, program):
    assert cli.main(["bench", program, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: adcompile bench {program} [-h]")
    assert "subcommands" not in out and "--workload" not in out  # not another program's


def test_bench_first_call_help_lists_its_cases(capsys):
    assert cli.main(["bench", "first-call", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--case" in out and "rosenbrock-sum" in out


def test_bench_unknown_case_is_one_line_naming_the_program(capsys):
    assert cli.main(["bench", "first-call", "--case", "no-such-case"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(
        "adcompile bench first-call: error: argument --case: invalid choice: 'no-such-case'"
    )
    assert "rosenbrock-sum" in captured.err  # the choices
    assert captured.err.rstrip().endswith("(see adcompile bench first-call --help)")


def test_bench_unknown_option_is_one_line(capsys):
    assert cli.main(["bench", "--workload", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("adcompile bench: error: argument --workload")


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["first-call", "--help"], ["--help-bench"]])
def test_bench_help_outside_a_checkout_is_help(capsys, monkeypatch, tmp_path, argv):
    monkeypatch.setattr(cli, "_bench_roots", lambda: [tmp_path])
    assert cli.main(["bench", *argv]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith("usage: adcompile bench")
    assert "need a checkout of the adcompile repository" in captured.out
    assert "pip install -e '.[bench]'" in captured.out


def test_bench_help_from_an_installed_copy_in_a_fresh_process(tmp_path):
    root = Path(ad.__file__).resolve().parent  # the whole package
    shutil.copytree(root, tmp_path / "site" / "adcompile", ignore=shutil.ignore_patterns("*.pyc"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "adcompile.cli", "bench", "--help"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("usage: adcompile bench")
    assert "need a checkout" in proc.stdout
