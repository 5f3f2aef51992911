"""Tests of the benchmark harness (benchmarks/), on the smallest sizes.

Not timing tests: they check that the workloads are what benchmarks/README.md
defines, that the reference check catches a wrong gradient, and that a
missing system, a crash, a RecursionError and a hang are each recorded and
the run goes on.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks import report, run
from benchmarks import workloads as W
from benchmarks.cell import check, run_cell, steady_state

FIELDS = (
    "workload",
    "system",
    "n",
    "status",
    "reason",
    "import_s",
    "setup_s",
    "first_call_s",
    "per_call_s",
    "check",
    "wall_s",
)


def _run(tmp_path: Path, *args: str) -> tuple[int, list[dict]]:
    out = tmp_path / "out"
    rc = run.main([*args, "--out", str(out), "--no-plot", "--quick"])
    lines = (out / "results.jsonl").read_text().splitlines()
    return rc, [json.loads(line) for line in lines]


def _fd(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])


# ------------------------------------------------------------- the workloads


def test_rosenbrock_reference_matches_finite_differences():
    x = W.rosenbrock_input(12)
    assert x[3] == 0.9 * math.cos(3)
    ref = W.rosenbrock_reference(x)
    assert ref.value == pytest.approx(W.rosenbrock_scalar(x), rel=1e-14)
    assert W.rel_err(_fd(W.rosenbrock_scalar, x), ref.grad) < 1e-8


def test_mlp_inputs_and_reference():
    X, y = W.two_moons(101)
    assert X.shape == (101, 2) and X.dtype == np.float64
    assert sorted(set(y.tolist())) == [-1.0, 1.0] and (y == -1).sum() == 50
    X2, y2 = W.two_moons(101)
    assert np.array_equal(X, X2) and np.array_equal(y, y2)
    params = W.mlp_init()
    rng = np.random.default_rng(0)
    assert np.array_equal(params[0], rng.uniform(-1, 1, (16, 2)))  # W1 drawn first
    assert np.array_equal(params[2], rng.uniform(-1, 1, (16, 16)))
    assert not params[1].any() and not params[3].any() and not params[5].any()
    flat = W.mlp_flatten(params)
    assert flat.shape == (W.MLP_NPARAMS,) == (337,)

    X, y = W.two_moons(20)
    ref = W.mlp_reference(params, X, y)

    def loss(p: np.ndarray) -> float:
        return W.mlp_loss_scalar(W.mlp_unflatten(p), X.tolist(), y.tolist(), lambda z: max(z, 0.0))

    assert ref.value == pytest.approx(loss(flat), rel=1e-14)
    u = np.random.default_rng(3).normal(size=flat.size)
    fd = (loss(flat + 1e-6 * u) - loss(flat - 1e-6 * u)) / 2e-6
    assert fd == pytest.approx(ref.grad @ u, rel=1e-6)
    assert np.allclose(ref.params_after, flat - 0.05 * ref.grad, rtol=0, atol=1e-15)


def test_chain_reference():
    ref = W.chain_reference(W.CHAIN_CHECK_N)
    assert ref.value == W.chain_scalar(0.3, W.CHAIN_CHECK_N, math.sin)
    assert 1e-14 < float(ref.grad) < 2e-14  # "about 1.5e-14"
    assert float(W.chain_reference(1000).grad) == 0.0  # underflows, as benchmarks/README.md says


def test_compile_program_and_reference():
    prog = W.compile_program(300)
    assert len(prog) == 300 and prog.x.shape == (4,)
    assert np.all((prog.x >= 0.5) & (prog.x <= 1.5))
    for k in range(300):  # operands: an input or one of the previous 50 values
        for i in (prog.a[k], prog.b[k]):
            assert i < 4 or max(4, 4 + k - 50) <= i < 4 + k
    ref = W.compile_reference(prog)

    def f(x):
        return W.compile_scalar(x, prog, math.sin, math.tanh)

    assert ref.value == f(prog.x)
    assert W.rel_err(_fd(f, prog.x), ref.grad) < 1e-7


def test_rel_err():
    assert W.rel_err([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert W.rel_err([1.0, 2.0 + 2e-8], [1.0, 2.0]) == pytest.approx(1e-8)
    assert W.rel_err([math.nan], [1.0]) == math.inf
    assert W.rel_err([1.0, 2.0, 3.0], [1.0, 2.0]) == math.inf


# ------------------------------------------------------------- the check


def test_check_catches_a_wrong_gradient_in_process():
    data = W.inputs("rosenbrock", 10)
    ref = W.reference("rosenbrock", data)
    assert check("rosenbrock", ref, ref.value, ref.grad, None, 10)["ok"]
    g = ref.grad.copy()
    g[4] *= 1 + 1e-6
    bad = check("rosenbrock", ref, ref.value, g, None, 10)
    assert not bad["ok"] and bad["grad_rel_err"] > 1e-8


def test_steady_state_groups_fast_calls():
    t = steady_state(lambda: None, budget=0.02)
    assert t["group"] > 1 and t["samples"] >= 3 and t["per_call_s"] < 1e-3


@pytest.mark.parametrize("workload", W.WORKLOADS)
def test_numpy_and_eager_systems_pass_the_check(workload):
    n = {"rosenbrock": 10, "mlp": 20, "chain": 30, "compile": 50}[workload]
    for system in ("numpy", "adcompile-eager", "micrograd"):
        rec = run_cell(workload, system, n, budget=0.01)
        if rec["status"] == "skipped":
            assert rec["reason"]
            continue
        assert rec["status"] == "ok", rec
        assert rec["check"]["ok"] and rec["per_call_s"] > 0
        if workload == "chain":
            assert rec["check"]["n"] == W.CHAIN_CHECK_N


# ------------------------------------------------------------- the runner


def test_injected_wrong_gradient_is_a_failure_not_a_time(tmp_path):
    rc, recs = _run(
        tmp_path,
        "--workload",
        "rosenbrock",
        "--n",
        "10",
        "--systems",
        "numpy",
        "--no-reference",
        "--inject-wrong",
        "numpy",
    )
    assert rc == 1
    (rec,) = recs
    assert rec["status"] == "wrong"
    assert "grad rel. error" in rec["reason"]
    assert rec["per_call_s"] is None
    assert "**wrong**" in (tmp_path / "out" / "results.md").read_text()


def test_missing_system_is_skipped(tmp_path):
    rc, recs = _run(
        tmp_path,
        "--workload",
        "rosenbrock",
        "--n",
        "10",
        "--systems",
        "_missing,numpy",
        "--no-reference",
    )
    assert rc == 0
    by = {r["system"]: r for r in recs}
    assert by["_missing"]["status"] == "skipped"
    assert "not installed" in by["_missing"]["reason"]
    assert by["numpy"]["status"] == "ok"


def test_crash_recursion_and_timeout_are_recorded_and_the_run_goes_on(tmp_path):
    # --quick: rosenbrock at n = 10 and n = 100
    rc, recs = _run(
        tmp_path,
        "--workload",
        "rosenbrock",
        "--timeout",
        "3",
        "--systems",
        "_crash,_recursion,_slow,numpy",
        "--no-reference",
    )
    assert rc == 0
    by = {(r["system"], r["n"]): r for r in recs}
    assert len(by) == 8
    assert by["_crash", 10]["status"] == "failed"
    assert "SIGSEGV" in by["_crash", 10]["reason"]
    assert "first call" in by["_crash", 10]["reason"]
    # a larger size of a system that crashed is not run either (and says so)
    assert by["_crash", 100]["status"] == "failed"
    assert by["_crash", 100]["reason"].startswith("not run: crashed at n=10")
    for n in (10, 100):
        assert by["_recursion", n]["status"] == "failed"
        assert "RecursionError" in by["_recursion", n]["reason"]
        assert by["numpy", n]["status"] == "ok"  # after all of them
    assert by["_slow", 10]["status"] == "failed"
    assert "timed out" in by["_slow", 10]["reason"]
    # a larger size of a system that timed out is not run (and says so)
    assert by["_slow", 100]["status"] == "failed"
    assert by["_slow", 100]["reason"].startswith("not run: timed out at n=10")
    md = (tmp_path / "out" / "results.md").read_text()
    assert "SIGSEGV" in md and "RecursionError" in md and "timed out" in md


def test_json_line_fields_and_tables(tmp_path):
    rc, recs = _run(
        tmp_path,
        "--workload",
        "chain",
        "--n",
        "30",
        "--systems",
        "numpy,adcompile-eager",
        "--no-reference",
    )
    assert rc == 0
    by = {r["system"]: r for r in recs}
    assert by["numpy"]["status"] == "skipped" and "not applicable" in by["numpy"]["reason"]
    rec = by["adcompile-eager"]
    if rec["status"] == "skipped":
        pytest.skip(rec["reason"])
    for field in FIELDS:
        assert field in rec, field
    assert rec["status"] == "ok"
    assert rec["first_call_s"] > 0 and rec["per_call_s"] > 0 and rec["import_s"] >= 0
    assert rec["samples"] >= 1 and rec["group"] >= 1 and rec["ns_per_op"] > 0
    assert rec["check"]["ok"] and rec["check"]["n"] == W.CHAIN_CHECK_N
    assert {"value_rel_err", "grad_rel_err"} <= set(rec["check"])
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## chain" in md and "| adcompile-eager |" in md


def test_ratio_and_plot(tmp_path):
    recs = [
        {
            "workload": "rosenbrock",
            "system": s,
            "n": 10,
            "status": "ok",
            "per_call_s": t,
            "first_call_s": t,
            "import_s": 0.1,
        }
        for s, t in (("numba", 1e-6), ("numpy", 2e-5))
    ] + [
        {
            "workload": "rosenbrock",
            "system": "micrograd",
            "n": 10,
            "status": "failed",
            "reason": "RecursionError: deep",
        }
    ]
    md = report.markdown(recs)
    assert "(20×)" in md and "(1×)" in md and "RecursionError: deep" in md
    pytest.importorskip("matplotlib")
    (png,) = report.plots(recs, tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_and_usage_errors(tmp_path):
    cells = run.plan(["chain"], ["adcompile-eager", "torch", "numba"], None, quick=False)
    big = [c for c in cells if c[2] == 1_000_000]
    assert {c[1] for c in big} == {"adcompile-eager", "numba"}  # interpreters + reference
    assert run.main(["--systems", "nonesuch", "--out", str(tmp_path)]) == 2
    assert run.main(["--n", "0", "--out", str(tmp_path)]) == 2


def test_two_moons_agrees_with_the_package_when_it_has_one():
    datasets = pytest.importorskip("adcompile.datasets")
    if not hasattr(datasets, "make_moons"):
        pytest.skip("adcompile.datasets.make_moons not available")
    X, y = W.two_moons(100)
    X2, y2 = datasets.make_moons(100, noise=0.1, seed=1)
    assert np.array_equal(X, X2) and np.array_equal(y, y2)


def test_side_by_side_benchmarks_run_by_name(capsys):
    # 'adcompile bench first-call ...' hands its options to benchmarks/first_call.py
    assert run.main(["first-call", "--help"], prog="adcompile bench") == 0
    out = capsys.readouterr().out
    assert "--case" in out and "chain" in out
    assert out.startswith("usage: adcompile bench first-call")  # its own name, not another's
    assert run.main(["first-call", "--case", "no-such-case"]) == 2
    err = capsys.readouterr().err  # one line, naming the program as it was run
    assert err.startswith("python -m benchmarks.run first-call: error: argument --case")
    assert err.count("\n") == 1
    # ... and 'adcompile bench distributed' to benchmarks/distributed.py (issue 20)
    pytest.importorskip("distributed")
    assert run.main(["distributed", "--help"], prog="adcompile bench") == 0
    assert "--workers" in capsys.readouterr().out


# ------------------------------------------------------------- issue 18: benchmarks.transforms


def test_transforms_references_match_finite_differences():
    from benchmarks import transforms as T

    rng = np.random.default_rng(2)
    x = rng.uniform(-1.5, 1.5, size=7)

    def grad(x):
        return np.array(W.rosenbrock_reference(x).grad)

    np.testing.assert_allclose(T.rosen_hessian_ref(x), _fd(grad, x).T, rtol=1e-6, atol=1e-5)

    def coupled(x):
        return np.sin(x) * np.roll(x, -1) + 0.01 * x * np.sum(x * x)

    np.testing.assert_allclose(T.coupled_jacobian_ref(x), _fd(coupled, x).T, rtol=1e-7, atol=1e-8)
    X = rng.uniform(-1.5, 1.5, size=(4, 5))
    val, g = T.rosen_rows_ref(X)
    for row, v, gr in zip(X, val, g):
        ref = W.rosenbrock_reference(row)
        assert v == pytest.approx(ref.value, rel=1e-14)
        np.testing.assert_allclose(gr, ref.grad, rtol=1e-13)


def test_transforms_benchmark_checks_every_answer(tmp_path, capsys):
    from benchmarks import transforms as T

    path = tmp_path / "t.jsonl"
    argv = ["transforms", "--quick", "--systems", "adcompile,numba", "--json", str(path)]
    assert run.main(argv) == 0, capsys.readouterr().out
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["case"] for r in recs} == set(T.CASES)
    for r in recs:
        assert r["status"] == "ok", r
        assert r["rel_err"] < 1e-8 and r["per_call_s"] > 0
    assert {r["system"] for r in recs if r["case"] == "vmap"} >= {
        "adcompile, 1 thread",
        "numba prange, 1 thread",
    }
    # a wrong answer is reported as wrong, and the exit status says so
    argv = ["transforms", "--quick", "--case", "hvp", "--systems", "adcompile,numba"]
    assert run.main([*argv, "--inject-wrong", "adcompile"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"hvp n=100 +adcompile +wrong: relative error 1\.00e-06", out), out
