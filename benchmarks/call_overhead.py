"""Per-call cost of a compiled gradient against hand-written Numba, side by side.

    python -m benchmarks.call_overhead

Rosenbrock (``workloads.rosenbrock_scalar``) at n = 10 and 100, a function
of one float, and a tuple ``argnums`` of two floats: ``ad.value_and_grad``
after its first call against a hand-written ``@numba.njit`` value and
gradient (for Rosenbrock, the ``numba`` benchmark system's kernel), timed in
alternating rounds in one process (medians of 7 rounds), so that their ratio
does not depend on how loaded the machine was at two moments.

The reference kernel reuses its gradient array, as the harness times it;
adcompile returns a new array each call (as JAX does), so for Rosenbrock the
hand kernel is also timed with a new array per call (``np.empty``), the
fairest like-for-like figure, and a hand-written ``@njit`` value and gradient
that returns a new array (allocated in Numba, which costs more to box). The
timed calls begin after the first, so they include the direct entry made
after ``entries.HOT_CALLS`` calls.
"""

import timeit
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

import adcompile as ad

from . import workloads as W
from .cli import parser
from .systems.numba_sys import NumbaHand, build_kernels


def returning_new(kernel: Callable) -> Callable:
    """A hand-written @njit value and gradient that returns a new gradient array
    (allocated in Numba), around the reference ``kernel``."""

    @numba.njit
    def rosen_new(x: np.ndarray) -> tuple:
        g = np.empty(x.shape[0])
        return kernel(x, g), g

    return rosen_new


@numba.njit
def hf(x):
    return (x - 1.0) ** 2 + np.sin(x), 2 * (x - 1.0) + np.cos(x)


@numba.njit
def hf2(x, y):
    return (x - 1.0) ** 2 * y + np.sin(x * y), (
        2 * (x - 1.0) * y + np.cos(x * y) * y,
        (x - 1.0) ** 2 + np.cos(x * y) * x,
    )


class _Settings:
    """Ten float attributes a function reads (``cfg.a0`` ... ``cfg.a9``)."""

    def __init__(self) -> None:
        for k in range(10):
            setattr(self, f"a{k}", float(k + 1))


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Print each case's medians and ratio (no options but ``--help``; ``prog``: the name
    in the usage)."""
    parser(prog, "python -m benchmarks.call_overhead", __doc__.splitlines()[0]).parse_args(argv)
    g1 = ad.value_and_grad(lambda x: (x - 1.0) ** 2 + ad.sin(x))
    g2 = ad.value_and_grad(lambda x, y: (x - 1.0) ** 2 * y + ad.sin(x * y), argnums=(0, 1))
    cases = []
    hand = NumbaHand()
    for n in (10, 100):
        x = W.rosenbrock_input(n)
        vg = ad.value_and_grad(W.rosenbrock_scalar)
        vg(x)
        hand_call = hand.rosenbrock(x).call  # the reference system's own kernel
        hand_call()
        kernel = build_kernels()["rosenbrock"]
        rosen_new = returning_new(kernel)

        def fresh(x: np.ndarray = x, n: int = n) -> tuple:
            g = np.empty(n)
            return kernel(x, g), g

        rosen_new(x)
        others = [
            ("given a new array", fresh),
            ("returning one from @njit", lambda x=x, r=rosen_new: r(x)),
        ]
        cases.append((f"rosenbrock n={n}", lambda vg=vg, x=x: vg(x), hand_call, others))
    g1(0.3)
    hf(0.3)
    g2(0.3, 0.7)
    hf2(0.3, 0.7)
    cases.append(("one float", lambda: g1(0.3), lambda: hf(0.3), []))
    cases.append(("tuple argnums (2 floats)", lambda: g2(0.3, 0.7), lambda: hf2(0.3, 0.7), []))

    # the cost of watching what f reads from outside its arguments (issue 27):
    # ten float attributes of an object, against the same function with the ten
    # numbers written in
    cfg = _Settings()
    g10 = ad.value_and_grad(lambda x: sum(getattr(cfg, f"a{k}") * x**2 for k in range(10)))
    g0 = ad.value_and_grad(lambda x: sum(float(k + 1) * x**2 for k in range(10)))
    g10(0.3)
    g0(0.3)
    cases.append(
        (
            "10 watched attributes",
            lambda: g10(0.3),
            lambda: hf(0.3),
            [("the same, none", lambda: g0(0.3))],
        )
    )

    def ns(call: Callable[[], Any]) -> float:
        return min(timeit.repeat(call, number=5000, repeat=3)) / 5000 * 1e9

    for name, a, h, others in cases:
        times: dict[str, list[float]] = {}
        for _ in range(7):  # alternating rounds
            for label, call in [("adcompile", a), ("hand", h), *others]:
                times.setdefault(label, []).append(ns(call))
        med = {label: float(np.median(t)) for label, t in times.items()}
        ma, mh = med["adcompile"], med["hand"]
        line = f"{name}: adcompile {ma:.0f} ns, hand Numba {mh:.0f} ns, ratio {ma / mh:.2f}x"
        for label, _ in others:
            line += f"; hand Numba {label}: {med[label]:.0f} ns, {ma / med[label]:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
