"""ad.explain and ADCOMPILE_LOG=compiles (issue 19 part 2): every reason a transform
traces and compiles, named; answers checked too, so a reason is never a wrong one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import adcompile as ad


def branchy(x, a):
    s = 0.0
    for i in range(len(x)):
        if x[i] > a:  # the guard's line
            s = s + x[i] ** 2
        else:
            s = s - ad.sin(x[i])
    return s


def branchy_grad(x, a):
    return np.where(x > a, 2 * x, -np.cos(x))


GUARD_LINE = branchy.__code__.co_firstlineno + 3


def test_first_call_and_new_shape():
    vg = ad.value_and_grad(branchy)
    assert "not called yet" in ad.explain(vg)
    vg(np.full(4, 1.0), 0.5)
    vg(np.full(6, 1.0), 0.5)
    text = ad.explain(vg)
    assert "2 traces and compiles" in text
    assert "1. why: first call" in text
    assert "2. why: new shape: argument 0 (x) has shape (6,), was shape (4,)" in text
    assert "made: Straight-line code" in text and "took:" in text and "trace " in text
    assert "x: shape (6,), a: a number: 1 branch path <- used last" in text
    assert [e.reason.split(":")[0] for e in vg.events] == ["first call", "new shape"]


def test_a_guard_failing_inside_a_folded_loop_is_named_with_values_and_line():
    vg = ad.value_and_grad(branchy)
    x = np.full(250, 1.0)
    vg(x, 0.5)
    assert "folded" in vg.events[0].produced
    x[120] = 0.25
    value, grad = vg(x, 0.5)
    np.testing.assert_allclose(grad, branchy_grad(x, 0.5), rtol=1e-15)
    reason = vg.events[1].reason
    assert reason.startswith("a guard failed: x_120 > a was True when traced, now False")
    assert "(0.25 > 0.5)" in reason
    assert f"test_explain.py:{GUARD_LINE}" in reason
    assert "2 branch paths" in ad.explain(vg)


def test_new_batch_length_served_without_a_trace():
    def loss(w, X, y):
        return np.mean((X @ w - y) ** 2)

    rng = np.random.default_rng(0)
    vg = ad.value_and_grad(loss)
    w = np.array([0.5, -1.0, 2.0])
    for n in (100, 40):
        X, y = rng.normal(size=(n, 3)), rng.normal(size=n)
        _, g = vg(w, X, y)
        np.testing.assert_allclose(g, 2 * X.T @ (X @ w - y) / n, rtol=1e-12)
    first, second = vg.events
    assert "traced at batch lengths" in first.reason and first.traced
    assert "batch length 40 served by the code generic in the batch length" in second.reason
    assert not second.traced
    assert "1 trace and compile, 1 batch length served without one" in ad.explain(vg)


def test_explain_other_transforms_and_bad_input():
    jac = ad.jacobian(lambda x: np.array([x[0] * x[1], x[1]]))
    jac(np.array([1.0, 2.0]))
    text = ad.explain(jac)
    assert text.startswith("lambda_jacobian (jacobian of lambda): 1 trace and compile")
    assert "made: Jacobian by reverse-mode sweeps" in text
    vm = ad.vmap(ad.grad(lambda x: (x * x).sum()))
    np.testing.assert_allclose(vm(np.ones((5, 2))), 2 * np.ones((5, 2)))
    assert ad.explain(vm).startswith("vmap of")
    with pytest.raises(TypeError, match="compiled transform"):
        ad.explain(branchy)


def test_retrace_warning_names_the_reason():
    f = ad.grad(lambda x: (x * x).sum())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 19):
            f(np.ones(n))
    messages = [str(w.message) for w in caught if issubclass(w.category, ad.RetraceWarning)]
    assert len(messages) == 1
    assert "this time because of new shape: argument 0 (x) has shape (17,)" in messages[0]


SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import adcompile as ad

    def f(x):
        return (ad.sin(x) * x).sum()

    vg = ad.grad(f)
    g = vg(np.linspace(0, 1, 7))
    assert np.allclose(g, np.cos(np.linspace(0, 1, 7)) * np.linspace(0, 1, 7)
                       + np.sin(np.linspace(0, 1, 7)))
    vg(np.linspace(0, 1, 9))
    print(ad.explain(vg))
    """
)


def test_disk_cache_and_the_compile_log(tmp_path):
    env = dict(os.environ, ADCOMPILE_CACHE_DIR=str(tmp_path), ADCOMPILE_LOG="compiles")
    runs = [
        subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        log = [ln for ln in run.stderr.splitlines() if ln.startswith("adcompile: traced")]
        assert len(log) == 2, run.stderr  # one line per compile
        assert "f_value_and_grad" in log[0] and "first call" in log[0]
    assert "from the disk cache" not in runs[0].stdout
    # the code restored from its record, its first call run as Python while Numba
    # loads (python_first); the second compile (a new shape) then loads Numba's code
    assert "restored from the disk cache" in runs[1].stdout


def _primitive_statements(source: str) -> int:
    """Assignments of an expression (a primitive) in generated source, counted by its
    syntax tree, apart from the generator's own count."""
    import ast

    kinds = (ast.BinOp, ast.UnaryOp, ast.Call, ast.Compare, ast.IfExp, ast.BoolOp)
    return sum(
        isinstance(n, (ast.Assign, ast.AugAssign)) and isinstance(n.value, kinds)
        for n in ast.walk(ast.parse(source))
    )


def nested_tanh(x):
    s = 0.0
    for i in range(20):
        t = x[i % 4]
        for j in range(4):
            t = ad.tanh(t * x[j] + 0.1 * j)
        s = s + t
    return s


@pytest.mark.parametrize("transform", [ad.jit, ad.grad])
def test_what_was_made_is_kept_as_numbers(transform):
    # issue 29: the event and the transform keep the numbers of what was made
    # (statements printed, operations of the tape, loops), read by summary and the
    # CLI, instead of reading them back out of the explanation's prose
    t = transform(nested_tanh)
    x = np.linspace(0.1, 0.4, 4)
    t(x)
    facts = t.events[0].facts
    assert facts == t.facts
    assert facts.kind == "folded" and facts.loops >= 1
    assert facts.statements == _primitive_statements(t.source)
    assert facts.operations == ad.trace(nested_tanh, x).n_ops  # the primal's
    assert t.events[0].produced == (
        f"folded into loops: {facts.statements} statements for {facts.operations} operations"
    )

    small = transform(lambda x: x * ad.sin(x) + 1.0)
    small(0.3)
    facts = small.events[0].facts
    tape = ad.trace(lambda x: x * ad.sin(x) + 1.0, 0.3)
    assert facts.kind == "straight-line"
    assert facts.statements == _primitive_statements(small.source) > 0
    if transform is ad.jit:
        assert facts.operations == tape.n_ops == 3
    assert small.events[0].produced == "Straight-line code"


def test_the_numbers_of_loop_code_outlive_its_disk_record():
    import json

    from adcompile.backend.compiled import LoopCompiled

    t = ad.grad(nested_tanh)
    x = np.linspace(0.1, 0.4, 4)
    t(x)
    compiled = t.last.compiled
    assert isinstance(compiled, LoopCompiled)
    record = json.loads(json.dumps(compiled.record()))
    again = LoopCompiled.restored(record, compiled.params, t.compiled_name, lambda: None)
    assert again.facts == compiled.facts
    assert again.facts.statements == _primitive_statements(again.source)


def test_batch_generic_code_says_so_in_its_numbers():
    def loss(w, X):
        s = 0.0
        for r in X:
            s = s + ad.tanh(w[0] * r[0] + w[1] * r[1]) ** 2
        return s

    vg = ad.grad(loss)
    vg(np.ones(2), np.ones((40, 2)))
    facts = vg.facts
    assert facts.generic and facts.kind == "folded"
    assert facts.statements == _primitive_statements(vg.source)
    assert vg.events[-1].produced.startswith("one program for every batch length, folded")


def test_a_record_of_folded_code_is_versioned_by_every_module_of_adcompile():
    """Folded code kept on disk is keyed by a hash of adcompile's own source
    (``records.code_version``): every module counts, those in the stage folders too (the
    printer is ``emit/loopgen.py``; a hash of ``backend/`` alone would let a record
    outlive the printer that wrote it)."""
    from pathlib import Path

    from adcompile.backend import records

    package = Path(ad.__file__).resolve().parent
    files = {p.relative_to(package).as_posix() for p in records.code_files()}
    on_disk = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert files == on_disk
    assert {"emit/loopgen.py", "loops/grad.py", "backend/jit.py", "__init__.py"} <= files
