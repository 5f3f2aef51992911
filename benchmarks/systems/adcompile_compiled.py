"""adcompile compiled: ``ad.value_and_grad`` (trace once, Numba-compiled forward and adjoint).

Each function is written as plain Python over scalars (the Rosenbrock sum is
a loop over ``x[i]``), exactly the program the eager systems run. The
harness gives every cell a fresh, empty ``ADCOMPILE_CACHE_DIR``, so
``first_call_s`` is a cold start (tracing, code generation and Numba
compilation all included) unless ``--warm-cache`` is asked for.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import numpy as np

from .. import workloads as W
from . import Prepared, Skip, System


class AdcompileCompiled(System):
    name = "adcompile"
    description = "adcompile.value_and_grad (traced, compiled with Numba)"
    modules = ("adcompile",)

    def load(self) -> None:
        import adcompile

        if not hasattr(adcompile, "value_and_grad"):
            raise Skip("ad.value_and_grad not available")
        self.ad = adcompile

    def version(self) -> str:
        import numba

        import adcompile

        return f"adcompile {getattr(adcompile, '__version__', '?')}, numba {numba.__version__}"

    def rosenbrock(self, x: np.ndarray) -> Prepared:
        def rosenbrock(x):
            s = 0.0
            for i in range(len(x) - 1):
                s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
            return s

        vg = self.ad.value_and_grad(rosenbrock)
        return Prepared(lambda: vg(x), _unpack, info=_info(vg))

    def mlp(self, params: list, X: np.ndarray, y: np.ndarray) -> Prepared:
        relu = self.ad.relu

        def mlp_loss(p, X, y):
            return W.mlp_loss_scalar(W.mlp_unflatten(p), X, y, relu)

        vg = self.ad.value_and_grad(mlp_loss, argnums=0)
        p = W.mlp_flatten(params)
        lr = W.MLP_LR

        def call() -> Any:
            loss, g = vg(p, X, y)
            p[:] -= lr * g
            return loss, g

        return Prepared(call, _unpack, params=lambda: p.copy(), info=_info(vg))

    def chain(self, n: int, x0: float) -> Prepared:
        sin = self.ad.sin

        def chain(x):
            return W.chain_scalar(x, n, sin)

        vg = self.ad.value_and_grad(chain)
        return Prepared(lambda: vg(x0), _unpack, info=_info(vg))

    def compile(self, prog: W.Program) -> Prepared:
        ad = self.ad

        def random_tape(x):
            return W.compile_scalar([x[0], x[1], x[2], x[3]], prog, ad.sin, ad.tanh)

        vg = ad.value_and_grad(random_tape)
        x = prog.x.copy()
        return Prepared(
            lambda: vg(x),
            _unpack,
            stages=lambda: stage_times(random_tape, x),
            info=_info(vg),
        )


def _unpack(out: Any) -> tuple[float, Any]:
    value, g = out
    return float(value), np.asarray(g, dtype=np.float64)


def _info(vg: Any) -> Any:
    """After the first call: which back end ran (straight-line code or the interpreter)."""

    def info() -> dict[str, Any]:
        spec = getattr(vg, "_last", None)
        compiled = getattr(spec, "compiled", None)
        if compiled is None:
            return {}
        out = {"backend": compiled.facts.kind}
        if spec.tape is None:  # batch-generic code: traced at small lengths only
            out["backend"] += ", generic in the batch length"
            return out
        out["tape_len"] = len(spec.tape)
        out["grad_tape_len"] = len(compiled.tape)
        return out

    return info


def stage_times(f: Any, x: np.ndarray) -> dict[str, float]:
    """Trace, adjoint, code generation and compilation of ``f`` at ``x``, timed apart.

    Uses adcompile's internal stages (``tracing.trace_call``, ``reverse.grad_tape``,
    ``codegen``, ``compiled.compile_tape``) with the in-memory and on-disk caches
    emptied first; Numba's own in-process state is warm by then, so the
    compile figure is a slight underestimate of a cold one. Raises if the
    internals have moved (the harness then reports the stages as unavailable).
    """
    import importlib

    api, codegen, compiled, jit, reverse = (
        importlib.import_module(f"adcompile.{m}")
        for m in (
            "api.tracing",
            "emit.codegen",
            "backend.compiled",
            "backend.jit",
            "diff.reverse",
        )
    )
    old = os.environ.get("ADCOMPILE_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="adcompile-stages-") as tmp:
        os.environ["ADCOMPILE_CACHE_DIR"] = tmp
        try:
            return _stages(f, x, api, codegen, compiled.compile_tape, jit, reverse)
        finally:
            if old is None:
                os.environ.pop("ADCOMPILE_CACHE_DIR", None)
            else:
                os.environ["ADCOMPILE_CACHE_DIR"] = old


def _stages(
    f: Any, x: np.ndarray, api: Any, codegen: Any, compile_tape: Any, jit: Any, reverse: Any
) -> dict:
    import importlib

    records = importlib.import_module("adcompile.backend.records")
    jit.clear_cache()  # empties the (new, empty) directory and the in-memory caches
    t0 = time.perf_counter()
    tape = api.trace_call(f, (x,))
    t1 = time.perf_counter()
    gtape = reverse.grad_tape(tape, wrt=list(range(len(tape.inputs))))
    t2 = time.perf_counter()
    params = [codegen.Param("x", 4)]
    if len(gtape) <= records.STRAIGHT_LINE_LIMIT:
        codegen.module_source([codegen.straight_line(gtape, "random_tape", params)])
    else:
        codegen.to_program(gtape)
    t3 = time.perf_counter()
    jit.clear_cache()
    compiled = compile_tape(gtape, params, "random_tape_value_and_grad")
    t4 = time.perf_counter()
    compiled.call(x)
    t5 = time.perf_counter()
    return {
        "trace_s": t1 - t0,
        "adjoint_s": t2 - t1,
        "generate_s": t3 - t2,
        "compile_s": max(0.0, (t4 - t3) - (t3 - t2)),
        "first_run_s": t5 - t4,
        "tape_ops": tape.n_ops,
        "grad_tape_len": len(gtape),
        "backend": compiled.facts.kind,
    }
