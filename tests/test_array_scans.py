"""Scans in loop nests (issue 30): a Python loop over time steps, recorded once
per step at array level, is folded into one loop body (``loops.array_scan``).

Each program runs by its loop nests at a fresh point and is held against plain
NumPy's value, central differences, and the tape interpreter (NumPy calls node
by node, the steps unrolled); each also checks that the loop nests hold a scan,
so that an unrolled program cannot pass for one.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import central_diff
from hypothesis import assume, given
from hypothesis import strategies as st
from test_arrays_fuzz import ENDS, HALF, STEPS, _program

import adcompile as ad
from adcompile.emit.array_scans import lay_out
from adcompile.ir.arrays import ArrayTape
from adcompile.loops import ir as loopir
from adcompile.loops.array_scan import run, scan

RNG = np.random.default_rng(32)
T, H, D = 12, 5, 3


pytestmark = pytest.mark.usefixtures("loops_at_once")


def rnn(W, U, h0, xs):  # noqa: ANN001, ANN201, N803
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t])
    return np.sum(h**2)


def two_carries(W, U, h0, xs):  # noqa: ANN001, ANN201, N803
    h, c = h0, np.zeros_like(h0) + 0.5
    for t in range(xs.shape[0]):
        c = 0.9 * c + 0.1 * np.tanh(W @ h + U @ xs[t])
        h = np.sin(c) * h + 0.2
    return np.sum(h * c)


def summed_over_steps(W, U, h0, xs):  # noqa: ANN001, ANN201, N803
    h, total = h0, 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t])
        total = total + np.sum(h**2) / (t + 1.0)
    return total


def backwards_and_a_middle_step(W, U, h0, xs):  # noqa: ANN001, ANN201, N803
    h, kept = h0, None
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[-t - 1])
        if t == 4:
            kept = h
    return np.sum(h * kept) + np.sum(kept)


def written_step_by_step(W, U, h0, xs):  # noqa: ANN001, ANN201, N803
    h, z = h0, np.zeros(xs.shape[0])
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t])
        z[t] = np.sum(h)
    return np.sum(np.diff(z) ** 2) + z[2]


def two_loops(W, U, h0, xs):  # noqa: ANN001, ANN201, N803
    h, g = h0, h0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t])
    for t in range(xs.shape[0]):
        g = np.cos(W.T @ g) * h + U @ xs[t]
    return np.sum(g**2)


PROGRAMS = [rnn, two_carries, summed_over_steps, backwards_and_a_middle_step,
            written_step_by_step, two_loops]


def _args() -> list[np.ndarray]:
    return [
        0.4 * RNG.normal(size=(H, H)),
        0.4 * RNG.normal(size=(H, D)),
        RNG.normal(size=H),
        RNG.normal(size=(T, D)),
    ]


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_loops_over_steps_fold_into_scans(f) -> None:  # noqa: ANN001
    vg = ad.value_and_grad(f, argnums=(0, 1, 2))
    vg(*_args())
    assert "# Loop nests" in vg.source and "steps of" in vg.source, vg.source[:600]
    args = _args()
    v, grads = vg(*args)
    assert v == pytest.approx(f(*args), rel=1e-11)
    tape = vg.last.compiled.tape
    iv, *igs = tape.evaluate(*args)
    assert v == pytest.approx(iv, rel=1e-12)
    for k in range(3):
        np.testing.assert_allclose(grads[k], igs[k], rtol=1e-10, atol=1e-12)
        d = RNG.normal(size=args[k].shape)

        def along(x, k=k):  # noqa: ANN001, ANN202
            moved = list(args)
            moved[k] = x
            return f(*moved)

        assert float(np.sum(grads[k] * d)) == pytest.approx(
            central_diff(along, args[k], d), rel=1e-6, abs=1e-8
        )


def test_what_a_scan_folds() -> None:
    """The RNN's value-and-gradient tape: its forward steps one run, its adjoint's
    another, reading the forward states backwards from a stack."""
    vg = ad.value_and_grad(rnn, argnums=(0, 1, 2))
    vg(*_args())
    tape = vg.last.compiled.tape
    assert isinstance(tape, ArrayTape)
    program = scan(tape, vg.last.compiled.params)
    loops = [item for item in program.items if type(item) is loopir.Loop]
    assert [loop.trips for loop in loops][:1] == [T] and len(loops) == 2
    folded, spans = lay_out(tape, program)
    assert len(spans) == 2
    forward, adjoint = spans
    assert forward.reps == T
    assert adjoint.reps >= T - 2
    assert [name for name, _, _ in forward.carries] and forward.stacks
    assert len(folded.nodes) < len(tape.nodes) / 3
    assert "S_" in vg.source and "r1)]" in vg.source  # (a stack read backwards)
    # the gradient of W summed over steps: each step's product accumulates onto the
    # array of the sum so far, which no one reads after (no copy a step)
    assert "onto its array" in vg.source and "onto a copy" not in vg.source


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_the_loop_ir_of_a_scan_runs_as_the_unrolled_tape(f) -> None:  # noqa: ANN001
    """Each program's value-and-gradient tape in the loop IR (``scan``: a loop per run
    of steps, whose body is an array tape) runs, repetition by repetition, to the
    answers of the tape interpreter (every step unrolled) at a fresh point; and its
    printed program shows the scans."""
    vg = ad.value_and_grad(f, argnums=(0, 1, 2))
    vg(*_args())
    compiled = vg.last.compiled
    program = scan(compiled.tape, compiled.params)
    loops = [item for item in program.items if type(item) is loopir.Loop]
    assert loops and all(isinstance(loop.body, ArrayTape) for loop in loops)
    assert sum(len(loop.body.nodes) for loop in loops) < len(compiled.tape.nodes) / 3
    args = _args()
    for got, want in zip(run(program, args), compiled.tape.evaluate(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    text = str(program)
    assert f"loop i in range({loops[0].trips})" in text and "input prev b" in text, text


def outer_sums(G0, A, B):  # noqa: ANN001, ANN201, N803
    """Sums of small products over steps, onto the caller's G0 (which must not be
    written into) and onto a product also read at the end (which must be kept)."""
    h, d = G0.shape
    G, K = G0, A[0].reshape(h, 1) @ B[0].reshape(1, d)
    S = K
    for t in range(A.shape[0]):
        G = G + A[t].reshape(h, 1) @ B[t].reshape(1, d)
        S = S + np.tanh(A[t]).reshape(h, 1) @ B[t].reshape(1, d)
    return np.sum(G * S) + np.sum(K**2)


def test_sums_onto_arrays_others_read_are_made_on_copies() -> None:
    """In place only where no one reads the array after: the caller's G0 and the
    product K (read again at the end) are summed onto copies; the answers are
    NumPy's, and G0 is as the caller gave it, call after call."""
    G0, A, B = RNG.normal(size=(H, D)), RNG.normal(size=(T, H)), RNG.normal(size=(T, D))
    kept = G0.copy()
    vg = ad.value_and_grad(outer_sums, argnums=(0, 1, 2))
    for _ in range(3):
        v, grads = vg(G0, A, B)
        np.testing.assert_array_equal(G0, kept)
        assert v == pytest.approx(outer_sums(G0, A, B), rel=1e-12)
    assert "steps of" in vg.source and "onto a copy" in vg.source
    iv, *igs = vg.last.compiled.tape.evaluate(G0, A, B)
    for got, want in zip(grads, igs):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
    d = RNG.normal(size=A.shape)
    assert float(np.sum(grads[1] * d)) == pytest.approx(
        central_diff(lambda a: outer_sums(G0, a, B), A, d), rel=1e-6, abs=1e-8
    )


def test_no_fold_where_steps_differ() -> None:
    """Steps that read differently (each step's own weight matrix) are not one body."""

    def f(Ws, h):  # noqa: ANN001, ANN202, N803
        for k in range(Ws.shape[0]):
            h = np.tanh(Ws[k] @ h) * (1.0 + k)
        return np.sum(h)

    Ws, h = 0.5 * RNG.normal(size=(6, H, H)), RNG.normal(size=H)
    vg = ad.value_and_grad(f, argnums=(0, 1))
    vg(Ws, h)
    v, (gW, gh) = vg(Ws, h)
    assert v == pytest.approx(f(Ws, h), rel=1e-12)
    d = RNG.normal(size=h.shape)
    assert float(gh @ d) == pytest.approx(central_diff(lambda x: f(Ws, x), h, d), rel=1e-6)


@HALF
@given(
    steps=st.lists(STEPS, min_size=1, max_size=3),
    end=ENDS,
    reps=st.integers(5, 9),
    backwards=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_loops_over_steps(steps, end, reps, backwards, seed) -> None:  # noqa: ANN001
    """test_arrays_fuzz's random NumPy programs as the step of a loop that reads one
    row of its data each step (forwards or backwards), held at a fresh point against
    plain NumPy, the tape interpreter and central differences."""
    body = _program(steps, "sum")
    last = _program([], end)

    def f(x, data, sizes=None):  # noqa: ANN001, ANN202
        for t in range(data.shape[0]):
            row = data[-t - 1] if backwards else data[t]
            x = 0.5 * np.tanh(x) + 0.1 * body(x) * row + 0.2 * x
            if sizes is not None:
                sizes.append(float(np.max(np.abs(x))))
        return last(x)

    rng = np.random.default_rng(seed)
    data = rng.normal(size=(reps, 4))
    first, fresh = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    # (a step that squares a sum blows up: after 6 steps the rows differ in their last
    # bits only, and no two orders of the same sums agree on what is left of them)
    for x in (first, fresh):
        sizes: list[float] = []
        with np.errstate(all="ignore"):
            f(x, data, sizes)
        assume(max(sizes) < 1e4)
    vg = ad.value_and_grad(f)
    vg(first, data)
    assert "steps of" in vg.source, vg.source[:400]
    v, g = vg(fresh, data)
    compiled = vg.last.compiled
    with np.errstate(all="ignore"):
        want = float(f(fresh, data))
        iv, ig = compiled.tape.evaluate(fresh, data)
        lv, lg = run(scan(compiled.tape, compiled.params), [fresh, data])  # (the loop IR)
    assert v == pytest.approx(want, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(g, ig, rtol=1e-9, atol=1e-12)
    assert lv == pytest.approx(iv, rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(lg, ig, rtol=1e-12, atol=1e-14)
    d = rng.normal(size=fresh.shape)
    fd = central_diff(lambda x: f(x, data), fresh, d, h=1e-6)
    coarse = central_diff(lambda x: f(x, data), fresh, d, h=1e-5)
    assume(abs(fd - coarse) < 1e-5 * (1 + abs(fd)))  # (differences of what cancels: noise)
    assert float(np.sum(g * d)) == pytest.approx(fd, rel=2e-5, abs=2e-6)
