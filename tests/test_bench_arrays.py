"""Tests of benchmarks/arrays.py (issue 30's array-level workloads), at small sizes.

Not timing tests: they check that the hand-written NumPy gradients (the
reference of the benchmark) agree with finite differences, that adcompile,
torch and jax (each skipped where not installed) agree with them, that the
check catches a wrong gradient, and that the program runs and says so.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import arrays as B

#: Small sizes of each workload, still large enough to be traced at array level.
SMALL = {
    "mlp": {"batch": 8, "inputs": 40, "hidden": 16, "classes": 5},
    "moons": {"n": 60, "hidden": 16},
    "logistic": {"n": 200, "d": 5},
    "rnn": {"steps": 6, "hidden": 12, "inputs": 3, "outputs": 2},
    "huber": {"n": 300},
}


def _fd(prob: B.Problem, k: int, h: float = 1e-6) -> np.ndarray:
    """Central differences of ``prob.loss`` in its argument ``k``."""
    args = [np.array(a, dtype=np.float64) for a in prob.args]
    x = args[k]
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = prob.loss(*args)
        x[i] = old - h
        down = prob.loss(*args)
        x[i] = old
        g[i] = (up - down) / (2 * h)
    return g


@pytest.mark.parametrize("workload", sorted(SMALL))
def test_hand_gradient_matches_finite_differences(workload):
    prob = B.build(workload, **SMALL[workload])
    value, grads = prob.hand(*prob.args)
    assert value == pytest.approx(prob.loss(*prob.args), rel=1e-12)
    assert len(grads) == len(prob.argnums) == len(prob.names)
    for k, g in zip(prob.argnums, grads):
        assert np.shape(g) == np.shape(prob.args[k])
        assert B.rel_err(g, _fd(prob, k)) < 1e-6, (workload, prob.names[prob.argnums.index(k)])


@pytest.mark.parametrize("system", ["adcompile", "torch", "jax"])
@pytest.mark.parametrize("workload", sorted(SMALL))
def test_system_agrees_with_hand_numpy(system, workload):
    if system != "adcompile":
        pytest.importorskip(system)
    prob = B.build(workload, **SMALL[workload])
    v, g = prob.hand(*prob.args)
    ref = (float(v), tuple(g))
    if prob.lbfgs:
        fun, _ = B._lbfgs_fun(system, prob)
        value, grad = fun(prob.args[0])
        got = (float(value), (np.asarray(grad),))
    else:
        step, _ = B.make_step(system, prob)
        got = step()
        got = step()  # a second call, from what the first one made
    assert B.check(*got, ref) <= B.RTOL


def test_adcompile_says_how_it_traced():
    prob = B.build("mlp", **SMALL["mlp"])
    step, facts = B.make_step("adcompile", prob)
    step()
    f = B._adcompile_facts(facts["vg"])
    assert f["traces"] == 1
    assert f["array_level"] is (f["array_refused"] is None and "array code" in f["produced"])


def test_check_catches_a_wrong_gradient():
    prob = B.build("rnn", **SMALL["rnn"])
    v, g = prob.hand(*prob.args)
    ref = (float(v), tuple(g))
    assert B.check(v, g, ref) == 0.0
    bad = list(g)
    bad[1] = bad[1] * (1 + 1e-6)
    assert B.check(v, bad, ref) > B.RTOL
    assert B.check(v * (1 + 1e-6), g, ref) > B.RTOL
    assert B.check(v, g[:2], ref) == float("inf")
    assert B.check(v, [g[0], g[1].T, g[2]], ref) == float("inf")  # (a transposed shape)

    records = [{"system": "adcompile", "status": "ok", "name": "rnn", "value": v, "grads": bad}]
    (failure,) = B.compare(records, ref)
    assert "adcompile" in failure and "hand NumPy gradient" in failure


def test_plan():
    assert B.plan(["mlp"], grid=False) == [("mlp", {})]
    cross = B.plan(["mlp-grid"], grid=False)
    assert {(s["batch"], s["hidden"]) for _, s in cross} == {
        (32, 128),
        (512, 128),
        (128, 32),
        (128, 512),
    }
    grid = B.plan(["mlp", "mlp-grid"], grid=True)
    assert len(grid) == 9
    assert {(s.get("batch", 128), s.get("hidden", 128)) for _, s in grid} == {
        (b, h) for b in (32, 128, 512) for h in (32, 128, 512)
    }


def test_program_runs_one_workload_in_fresh_processes(capsys):
    systems = ["numpy", "adcompile"] + [s for s in ("torch", "jax") if B.available(s) is None]
    rc = B.main(["huber", "--systems", ",".join(systems), "--budget", "0.01",
                 "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out["failures"]
    assert out["failures"] == []
    assert "OPENBLAS_NUM_THREADS" in out["meta"]["threads"]
    recs = {r["system"]: r for r in out["results"]}
    assert set(recs) == set(systems)
    for r in recs.values():
        assert r["status"] == "ok", r
        assert r["rel_err"] <= B.RTOL and r["x_err"] <= B.RTOL_MINIMUM
        assert r["nfev"] > 2
    assert recs["adcompile"]["traces"] == 1


@pytest.mark.parametrize("argv", [["--systems", "numpy,nope"], ["no-such-workload"]])
def test_program_usage_errors(capsys, argv):
    with pytest.raises(SystemExit) as e:
        B.main(argv, prog="adcompile bench arrays")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("adcompile bench arrays: error: unknown") and err.count("\n") == 1


def test_adcompile_bench_arrays_is_this_program(capsys):
    from benchmarks import run

    assert run.main(["arrays", "--help"], prog="adcompile bench") == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: adcompile bench arrays [-h]") and "--quick" in out
