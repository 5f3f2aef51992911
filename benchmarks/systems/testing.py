"""Systems that test the harness itself (run only when named with ``--systems``).

``_missing`` needs a module that does not exist (reported as skipped);
``_crash`` kills its own process (a crash is recorded, the run goes on);
``_recursion`` raises RecursionError as micrograd does on deep graphs;
``_slow`` sleeps past any short time-out. (A wrong gradient is injected
into any real system with ``--inject-wrong SYSTEM``.)
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

from . import Prepared, System


class Missing(System):
    name = "_missing"
    description = "needs a module that is not installed"
    modules = ("adcompile_bench_no_such_module",)


class Crash(System):
    name = "_crash"
    description = "kills its own process on the first call"
    modules = ()

    def _call(self) -> Any:
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        return Prepared(self._call, lambda out: out)

    def chain(self, n: int, x0: float) -> Prepared:
        return Prepared(self._call, lambda out: out)


class Recursion(System):
    name = "_recursion"
    description = "recurses past Python's limit, as micrograd does on deep graphs"
    modules = ()

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        def deep(k: int) -> int:
            return deep(k + 1) + 1

        return Prepared(lambda: deep(0), lambda out: out)


class Slow(System):
    name = "_slow"
    description = "sleeps for a minute"
    modules = ()

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        return Prepared(lambda: time.sleep(60), lambda out: out)
