"""Repeated work on first calls (issue 28, items 14 and 15): transforms of one
function share the code of one tape, and threads calling a new transform at
once trace it once. Every answer is checked against a hand-derived gradient.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import adcompile as ad
from adcompile.ir.tape import Tape


def rosen(x):
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def rosen_grad(x):
    g = np.zeros_like(x)
    g[:-1] += -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return g


SHARED = "code shared with an earlier trace"


@pytest.mark.parametrize("n", [12, 300])  # straight-line, folded into loops
def test_grad_after_value_and_grad_reuses_its_code(n):
    x = np.linspace(-1.2, 1.1, n)
    vg = ad.value_and_grad(rosen)
    value, g = vg(x)
    assert SHARED not in vg.events[-1].stages
    grad = ad.grad(rosen)
    g2 = grad(x)
    assert SHARED in grad.events[-1].stages  # traced, not compiled again
    assert grad.last.compiled is vg.last.compiled
    np.testing.assert_allclose(g2, rosen_grad(x), rtol=1e-12, atol=1e-9)
    y = x[::-1].copy()  # a fresh point through the shared code
    np.testing.assert_allclose(grad(y), rosen_grad(y), rtol=1e-12, atol=1e-9)
    assert value == pytest.approx(rosen(x), rel=1e-12)


TERMS = 2


def partial_cubes(x):
    return sum(x[i] ** 3 for i in range(TERMS))


def test_another_tape_is_not_shared():
    """A global that steers the trace (a trip count, watched) changed: another
    tape, compiled again, with the new answer."""
    global TERMS
    x = np.array([0.5, -1.0, 2.0])
    first = ad.grad(partial_cubes)
    np.testing.assert_allclose(first(x), [0.75, 3.0, 0.0])
    try:
        TERMS = 3
        second = ad.grad(partial_cubes)
        np.testing.assert_allclose(second(x), 3.0 * x**2)
        assert SHARED not in second.events[-1].stages
        assert second.last.compiled is not first.last.compiled
    finally:
        TERMS = 2


def test_a_digest_tells_tapes_apart():
    f = lambda x: ad.sin(x[0]) * 0.5 + x[1]  # noqa: E731
    g = lambda x: ad.sin(x[0]) * 0.25 + x[1]  # noqa: E731 (another constant)
    h = lambda x: ad.cos(x[0]) * 0.5 + x[1]  # noqa: E731 (another op)
    k = lambda x: ad.sin(x[1]) * 0.5 + x[0]  # noqa: E731 (other operands)
    x = np.array([0.3, 0.4])
    digests = {ad.grad(fn).traced_spec(x).tape.digest()[0] for fn in (f, g, h, k)}
    assert len(digests) == 4
    again = ad.grad(f).traced_spec(np.array([-2.0, 5.0])).tape
    assert again.digest()[0] == ad.grad(f).traced_spec(x).tape.digest()[0]
    assert isinstance(again, Tape)
    assert again.digest("context")[0] != again.digest()[0]


def test_threads_calling_a_new_transform_trace_it_once():
    vg = ad.value_and_grad(rosen)
    x = np.linspace(-1.0, 1.0, 40)
    results: list = [None] * 16
    start = threading.Barrier(16)

    def call(k: int) -> None:
        start.wait()
        results[k] = vg(x + 0.01 * k)

    threads = [threading.Thread(target=call, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert vg.traces == 1
    for k, (value, g) in enumerate(results):
        assert value == pytest.approx(rosen(x + 0.01 * k), rel=1e-12)
        np.testing.assert_allclose(g, rosen_grad(x + 0.01 * k), rtol=1e-11, atol=1e-9)


DATA = np.array([1.0, 2.0, 0.5, -1.0])


def reads_data(x):
    return np.sum(DATA * x * x) + x[0] * x[1]


def data_grad(x):
    g = 2 * DATA * x
    g[0] += x[1]
    g[1] += x[0]
    return g


def test_a_function_reading_an_array_from_outside_gets_entries():
    """Item 13: data read from outside the arguments (an input read at every call)
    no longer keeps a transform off its entry and direct entry."""
    from adcompile.backend import entries

    vg = ad.value_and_grad(reads_data)
    x = np.array([0.3, -0.2, 1.5, 0.7])
    vg(x)
    assert "__call__" in type(vg).__dict__  # the entry is installed
    for _ in range(entries.HOT_CALLS + 1):
        value, g = vg(x)
    vg.wait_for_entries()
    assert "a direct entry" in ad.explain(vg)
    for _ in range(3):  # through the direct entry: read afresh at every call
        DATA[:] = np.random.default_rng(len(DATA)).normal(size=4)
        value, g = vg(x)
        assert value == pytest.approx(reads_data(x), rel=1e-12)
        np.testing.assert_allclose(g, data_grad(x), rtol=1e-12)
    DATA[:] = [1.0, 2.0, 0.5, -1.0]


def test_the_direct_entry_compiles_in_the_background():
    """Item 12: the call that makes a transform hot does not wait for its direct
    entry; calls answer right before, while and after it compiles."""
    from adcompile.backend import entries

    assert entries.BACKGROUND
    vg = ad.value_and_grad(rosen, check=False)  # (check mode compiles it in the call)
    x = np.linspace(-1.0, 1.0, 6)
    for k in range(entries.HOT_CALLS + 20):
        y = x + 0.001 * k
        value, g = vg(y)
        np.testing.assert_allclose(g, rosen_grad(y), rtol=1e-12, atol=1e-9)
    assert vg._heating is not None  # compiled by a thread of its own
    vg.wait_for_entries()
    assert "a direct entry" in ad.explain(vg)
    np.testing.assert_allclose(vg(x)[1], rosen_grad(x), rtol=1e-12, atol=1e-9)


RESTORED = "restored from the disk cache"

CHILD = """
import json, sys
import numpy as np
import adcompile as ad

def rosen(x):
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))

x = np.linspace(-1.2, 1.1, 300)
vg = ad.value_and_grad(rosen)
value, g = vg(x)
print(json.dumps({"stages": list(vg.events[-1].stages), "value": value, "grad": g.tolist()}))
"""


def _child(cache: str) -> dict:
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, ADCOMPILE_CACHE_DIR=cache, ADCOMPILE_QUIET="1")
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_restores_folded_code_without_folding_again(tmp_path):
    """Item 16: the code folded from a tape is kept on disk by the tape's digest; a
    fresh process that traces the same tape skips every pass after tracing."""
    x = np.linspace(-1.2, 1.1, 300)
    cold = _child(str(tmp_path))
    assert RESTORED not in cold["stages"] and "detect" in cold["stages"]
    records = list((tmp_path / "tapes").glob("*.json"))
    assert len(records) == 1
    warm = _child(str(tmp_path))
    assert RESTORED in warm["stages"] and "detect" not in warm["stages"]
    for run in (cold, warm):
        assert run["value"] == pytest.approx(rosen(x), rel=1e-12)
        np.testing.assert_allclose(run["grad"], rosen_grad(x), rtol=1e-12, atol=1e-9)
    records[0].write_text("{ damaged")  # a damaged record: folded again, and kept anew
    again = _child(str(tmp_path))
    assert RESTORED not in again["stages"]
    np.testing.assert_allclose(again["grad"], rosen_grad(x), rtol=1e-12, atol=1e-9)
    assert RESTORED in _child(str(tmp_path))["stages"]


def test_code_of_a_users_own_op_is_not_kept_on_disk(tmp_path, monkeypatch):
    """An op a user defines may be another op in another process: its tapes' code
    is shared in this process only."""
    monkeypatch.setenv("ADCOMPILE_CACHE_DIR", str(tmp_path))

    class Quartic(ad.Function):
        name = "quartic_first_calls_test"

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 4 * x * x * x

    def f(x):
        return sum(Quartic.apply(x[i]) * x[i + 1] for i in range(len(x) - 1))

    x = np.linspace(-1.0, 1.0, 300)
    grad = ad.grad(f)
    g = grad(x)
    assert grad.last.compiled.facts.kind == "folded"  # (a builtin op's would be kept)
    want = np.zeros_like(x)
    want[:-1] += 4 * x[:-1] ** 3 * x[1:]
    want[1:] += x[:-1] ** 4
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
    assert not list(tmp_path.glob("tapes/*.json"))
