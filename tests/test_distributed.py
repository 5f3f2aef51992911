"""adcompile.distributed on a real LocalCluster of worker processes: answers equal
to single-process ad.value_and_grad / ad.vmap, uneven chunks, shipped source, a
killed worker, non-finite chunks, clear errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

import adcompile as ad  # noqa: E402
from adcompile import distributed as dd  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def client():
    import dask
    from distributed import Client, LocalCluster

    # the workers import this checkout's adcompile, and share the test's cache
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    # a worker that fetches rows from a killed one retries connecting until this
    # timeout (Dask's default is 30 s); the workers take the setting with them
    with dask.config.set({"distributed.comm.timeouts.connect": "3s"}):
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        c = Client(cluster)
        yield c
        c.close()
        cluster.close()


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sign(rng.normal(size=n))
    w = rng.normal(size=3)
    return w, X, y


def _close(got, want, rtol=1e-12):
    assert got[0] == pytest.approx(want[0], rel=rtol, abs=1e-15)
    g, h = got[1], want[1]
    if isinstance(h, tuple):
        assert isinstance(g, tuple) and len(g) == len(h)
        for a, b in zip(g, h):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-15)
    else:
        np.testing.assert_allclose(g, h, rtol=rtol, atol=1e-15)


def test_mean_loss_equals_single_process_with_numpy_and_uneven_dask_chunks(client):
    def loss(w, X, y):  # defined here: not importable on the workers
        return np.mean(np.log1p(np.exp(-y * (X @ w)))) + 1e-3 * np.sum(w * w)

    w, X, y = _data(1003)
    want = ad.value_and_grad(loss)(w, X, y)
    vg = dd.value_and_grad(loss, client=client)
    _close(vg(w, X, y), want)  # NumPy: one chunk per worker (502 and 501 rows)
    assert vg.last_program == "source"
    sizes = (300, 400, 303)  # uneven: a plain mean of the chunk means would be wrong
    got = vg(w, da.from_array(X, chunks=(sizes, 3)), da.from_array(y, chunks=(sizes,)))
    _close(got, want)
    unweighted = np.mean(
        [loss(w, X[a : a + s], y[a : a + s]) for a, s in [(0, 300), (300, 400), (700, 303)]]
    )
    assert abs(unweighted - want[0]) > 1e-6  # (so the test above can tell them apart)
    # eleven chunks (more than the workers): the parameters are scattered once and
    # the chunks combined in a tree (8 per task) before the client adds the rest
    sizes = (17, 100, 90, 91, 120, 64, 200, 33, 88, 100, 100)
    got = vg(w, da.from_array(X, chunks=(sizes, 3)), da.from_array(y, chunks=(sizes,)))
    _close(got, want)
    w2 = w + 0.5  # a new theta, the same data (kept on the workers)
    _close(vg(w2, X, y), ad.value_and_grad(loss)(w2, X, y))


def test_numpy_data_changed_in_place_is_sent_again(client):
    loss = lambda w, X, y: np.mean((X @ w - y) ** 2)  # noqa: E731
    w, X, y = _data(200, seed=3)
    vg = dd.value_and_grad(loss, client=client)
    _close(vg(w, X, y), ad.value_and_grad(loss)(w, X, y))
    X *= 2.0
    _close(vg(w, X, y), ad.value_and_grad(loss)(w, X, y))


def test_sum_reduction_tuple_argnums_and_a_broadcast_argument(client):
    def loss(w, b, X, y, scale):
        return np.sum((X @ w + b - y) ** 2) * scale

    w, X, y = _data(257, seed=1)
    args = (w, 0.25, X, y, 0.5)
    want = ad.value_and_grad(loss, argnums=(0, 1))(*args)
    vg = dd.value_and_grad(loss, argnums=(0, 1), reduction="sum", client=client, chunks=3)
    got = vg(*args)
    _close(got, want)
    assert isinstance(got[1][1], float)
    # by hand: d/db sum (r^2) * s = 2 s sum(r)
    r = X @ w + 0.25 - y
    assert got[1][1] == pytest.approx(2 * 0.5 * r.sum(), rel=1e-12)


def test_the_shipped_source_needs_no_function_on_the_workers(client):
    lock = threading.Lock()  # the loss closes over it: the loss cannot be pickled

    def loss(w, X, y):
        with lock:
            return np.mean(np.tanh(X @ w) * y)

    import cloudpickle

    with pytest.raises(TypeError):
        cloudpickle.dumps(loss)
    w, X, y = _data(600, seed=2)
    vg = dd.value_and_grad(loss, client=client)
    _close(vg(w, X, y), ad.value_and_grad(loss)(w, X, y))
    assert vg.last_program == "source"
    # what the workers hold: compiled programs, not transforms of a function
    kinds = client.run(
        lambda: sorted({type(v).__name__ for v in dd.worker.worker_cache.values()}),
    )
    assert all("Transformed" not in k for k in kinds.values()), kinds


def test_few_rows_ship_the_function_itself(client):
    loss = lambda w, X, y: np.mean((X @ w - y) ** 2) + np.sum(w**4)  # noqa: E731
    w, X, y = _data(10, seed=4)  # under 16 rows: no batch-generic code to ship
    vg = dd.value_and_grad(loss, client=client)
    _close(vg(w, X, y), ad.value_and_grad(loss)(w, X, y))
    assert vg.last_program == "function"


def test_mismatched_row_chunks_are_refused_before_any_work(client):
    loss = lambda w, X, y: np.mean((X @ w - y) ** 2)  # noqa: E731
    w, X, y = _data(100)
    vg = dd.value_and_grad(loss, client=object())  # never used: the check comes first
    Xd = da.from_array(X, chunks=(50, 3))
    yd = da.from_array(y, chunks=(40,))
    with pytest.raises(
        ValueError, match=r"chunked differently.*argument 1 .*\(50, 50\).*argument 2"
    ):
        vg(w, Xd, yd)
    with pytest.raises(ValueError, match="reduction='median'"):
        dd.value_and_grad(loss, reduction="median")


def test_a_non_finite_chunk_names_its_rows(client):
    def loss(w, X, y):
        return np.mean(np.log(X @ w) * y)

    X = np.abs(_data(90, seed=5)[1]) + 0.1
    y = np.ones(90)
    w = np.ones(3)
    X[70] = -1.0  # in the third chunk (rows 60:90) only: log of a negative number
    vg = dd.value_and_grad(loss, client=client)
    Xd = da.from_array(X, chunks=(30, 3))
    yd = da.from_array(y, chunks=(30,))
    with pytest.raises(ad.NonFiniteError, match=r"rows 60:90 "):
        vg(w, Xd, yd)
    got = vg(w, Xd[:60], yd[:60])  # without those rows all is well
    _close(got, ad.value_and_grad(loss)(w, X[:60], y[:60]))


def test_vmap_over_rows_equals_ad_vmap(client):
    def f(x):
        return np.sum(x**2) + np.sin(x[0]) * x[1]

    rng = np.random.default_rng(7)
    P = rng.normal(size=(101, 3))
    vg = ad.value_and_grad(f)
    got = dd.vmap(vg, P, client=client)
    want = ad.vmap(ad.value_and_grad(f))(P)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-14)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-14)
    # by hand: d/dx0 = 2 x0 + cos(x0) x1
    np.testing.assert_allclose(got[1][:, 0], 2 * P[:, 0] + np.cos(P[:, 0]) * P[:, 1])
    values = dd.vmap(lambda x: np.sum(x**2), da.from_array(P, chunks=((50, 51), 3)), client=client)
    np.testing.assert_allclose(values, np.sum(P**2, axis=1), rtol=1e-14)
    hess = dd.vmap(ad.hessian(f), P[:5], client=client)
    np.testing.assert_allclose(hess, ad.vmap(ad.hessian(f))(P[:5]), rtol=1e-14)


def test_missing_dask_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r'pip install "adcompile\[distributed\]"'):
        dd.value_and_grad(lambda w, X: np.mean(X @ w))


@pytest.mark.slow
def test_a_killed_worker_is_retried_and_the_answer_is_the_same(client):
    def loss(w, X, y):
        z = X @ w
        return np.mean(np.sin(np.sin(np.sin(np.sin(z) * 1.1) * 1.2) * 1.3) * y)

    w, X, y = _data(200_000, seed=6)
    want = ad.value_and_grad(loss)(w, X, y)
    vg = dd.value_and_grad(loss, client=client, chunks=48)
    _close(vg(w, X, y), want)  # the rows are on the workers now
    assert vg.last_program == "source"
    pids = client.run(os.getpid)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(got=vg(w, X, y)))
    thread.start()
    victim = None
    deadline = time.time() + 20
    while victim is None and thread.is_alive() and time.time() < deadline:
        for addr, keys in client.processing().items():
            if any("adcompile-chunk" in str(k) for k in keys):
                victim = addr
                break
        else:
            time.sleep(0.002)
    assert victim is not None, "the call ended before a chunk was seen running"
    os.kill(pids[victim], signal.SIGKILL)  # mid-computation: its rows and work are lost
    thread.join(60)
    assert not thread.is_alive()
    _close(result["got"], want)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it, for later tests
    assert victim not in client.scheduler_info()["workers"]


@pytest.mark.slow
def test_client_none_starts_a_local_cluster_and_says_so_once(tmp_path):
    script = (
        "import numpy as np\n"
        "from adcompile import distributed as dd\n"
        "vg = dd.value_and_grad(lambda w, X: np.mean((X @ w) ** 2))\n"
        "X = np.arange(60.0).reshape(20, 3) / 60\n"
        "w = np.ones(3)\n"
        "print(vg(w, X)[0], vg(w, X)[0], np.mean((X @ w) ** 2))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    a, b, c = map(float, proc.stdout.split())
    assert a == b == pytest.approx(c, rel=1e-12)
    assert proc.stderr.count("started a LocalCluster") == 1, proc.stderr


def test_a_value_compiled_into_the_source_that_changes_is_traced_again(client):
    power = [2]  # an int the loss reads: compiled in, and compared at every call

    def loss(w, X, y):
        return np.mean((X @ w - y) ** power[0])

    w, X, y = _data(300, seed=8)
    vg = dd.value_and_grad(loss, client=client)
    _close(vg(w, X, y), ad.value_and_grad(loss)(w, X, y))
    assert vg.last_program == "source"
    power[0] = 4
    with pytest.warns(ad.RetraceWarning):
        got = vg(w, X, y)
    _close(got, ad.value_and_grad(loss)(w, X, y))
    assert got[0] == pytest.approx(np.mean((X @ w - y) ** 4), rel=1e-12)


@pytest.mark.slow
def test_demo_with_workers_trains_as_the_single_process_demo(capsys):
    from adcompile.cli import commands as cli

    argv = ["demo", "--points", "40", "--steps", "8", "--out", ""]
    assert cli.main([*argv, "--workers", "2"]) == 0
    distributed_run = capsys.readouterr()
    assert cli.main(argv) == 0
    single = capsys.readouterr()
    assert "Dask dashboard: http://" in distributed_run.err
    assert "the workers run its source" in distributed_run.err
    # the same steps: the same loss after each (the bar's last line) and the same picture
    last = lambda err: [ln for ln in err.replace("\r", "\n").splitlines() if "8/8" in ln][-1]  # noqa: E731
    assert last(distributed_run.err).split("loss")[1][:8] == last(single.err).split("loss")[1][:8]
    assert distributed_run.out == single.out


def test_demo_workers_must_be_at_least_one(capsys):
    from adcompile.cli import commands as cli

    with pytest.raises(SystemExit):
        cli.main(["demo", "--workers", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("argument --workers: must be 1 or more, got 0")


@pytest.mark.slow
def test_the_multistart_example_finds_local_minima_of_rastrigin(tmp_path):
    import re

    pytest.importorskip("scipy")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "multistart_dask.py"), "--starts", "24"]
        + ["--per-task", "6", "--workers", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "24 L-BFGS runs in 4 tasks on 2 workers" in out, out
    best = float(re.search(r"best minimum (\S+)", out).group(1))
    median = float(re.search(r"median minimum found ([-\d.e+]+)", out).group(1))
    x = np.array(eval(re.search(r"at x = (\[.*\])", out, re.S).group(1)))
    assert x.shape == (10,) and best <= median
    # by hand: the value at x, and a zero gradient 2 x + 20 pi sin(2 pi x) (a local minimum)
    f = 10 * len(x) + np.sum(x * x - 10 * np.cos(2 * np.pi * x))
    assert f == pytest.approx(best, abs=1e-4)
    assert np.abs(2 * x + 20 * np.pi * np.sin(2 * np.pi * x)).max() < 1e-2
