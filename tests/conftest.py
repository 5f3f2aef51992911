"""Shared test helpers: independent NumPy references and finite differences."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from scipy.special import erf, erfc, expit

# A failure of the loop IR raises here, instead of falling back to the unrolled path
# with a warning as it does for users.
os.environ.setdefault("ADCOMPILE_STRICT", "1")


@pytest.fixture(autouse=True)
def _no_code_shared_between_tests():
    """Each test compiles its own code: code kept for later traces of the same tape
    (``jit.shared_code``) would hide, from a test that patches the compiler, the
    compile it tests. tests/test_first_calls.py tests the sharing itself."""
    import sys

    jit = sys.modules.get("adcompile.backend.jit")
    forget = getattr(jit, "forget_shared_code", None)  # (None: still being imported, by
    if forget is not None:  # a thread loading Numba: nothing shared yet)
        forget()
    yield


def fresh_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader of generated code as in a new process, for one test: nothing
    loaded or written yet, no cache directory checked, failed or warned about."""
    from adcompile.trace import loader

    for name, empty in (
        ("_modules", {}),
        ("_placed", {}),
        ("_usable", {}),
        ("_disk_off", {}),
        ("_warned", set()),
        ("_pending", []),
    ):
        monkeypatch.setattr(loader, name, empty)


# Tests left out of check mode (ADCOMPILE_CHECK=1, which .ci/run sets for its second
# run of the suite: every call of a transform also calls f eagerly), and why: those
# that watch f's calls, and three that would take minutes there.
NOT_IN_CHECK_MODE = {
    "tests/test_compile.py::test_cache_hit_does_not_call_f_again": "it counts f's calls",
    "tests/test_compile.py::test_new_shape_traces_again": "it counts f's calls",
    "tests/test_first_day_ops.py::test_isnan_branches_are_guarded_in_compiled_code[grad]": (
        "it counts f's calls"
    ),
    "tests/test_first_day_ops.py::test_isnan_branches_are_guarded_in_compiled_code[jit]": (
        "it counts f's calls"
    ),
    "tests/test_reliability.py::"
    "test_compiling_pauses_the_cyclic_collector_and_restores_its_state": (
        "it records the collector's state at each call of f"
    ),
    "tests/test_call_errors.py::test_no_direct_entry_where_a_call_takes_long": (
        "it times 101 calls on 40,000 elements; each eager run takes seconds (280 s in all)"
    ),
    "tests/test_examples.py::test_newton_trust_ncg_reaches_one_and_hvp_is_rosenbrocks": (
        "its subprocess runs rosen at n = 1000 eagerly at every Newton step (200 s in all)"
    ),
    "tests/test_entries_adversarial.py::test_hot_transforms_answer_as_the_general_path"
    "[generated names as parameters]": (
        "whether a direct entry is made depends on a timing (entries.worth_it) that the "
        "eager runs beside it disturb"
    ),
    "tests/test_loop_fuzz.py::test_generated_loops_agree_on_random_programs": (
        "it runs the generated loop code as plain Python (no transform to check); the "
        "first run covers it"
    ),
    "tests/test_numba_entry.py::test_gradient_descent_in_njit_matches_the_transform[300]": (
        "10,000 calls at n = 300, each run eagerly too (100 s); the n = 10 case runs"
    ),
    **{
        f"tests/test_array_loops.py::test_nan_inf_and_zeros_as_numpy_gives_them[{name}]": (
            "np.max and np.clip of an array of Values skip a nan as Python's max does, where "
            "NumPy (and the compiled code, checked against it there) give nan"
        )
        for name in ("max min", "clip")
    },
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In check mode, skip the tests of NOT_IN_CHECK_MODE (with their reason)."""
    if os.environ.get("ADCOMPILE_CHECK", "") in ("", "0"):
        return
    for item in items:
        reason = NOT_IN_CHECK_MODE.get(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"check mode: {reason}"))


# An independent float reference for each op (NumPy / SciPy), where one exists.
NUMPY_REF: dict[str, Callable[..., float]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "neg": np.negative,
    "pow": np.power,
    "abs": np.absolute,
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "arcsin": np.arcsin,
    "arccos": np.arccos,
    "arctan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "sigmoid": expit,
    "erf": erf,  # (SciPy's, an independent implementation of math.erf)
    "erfc": erfc,
    "softplus": lambda x: np.logaddexp(0.0, x),
    "relu": lambda x: np.maximum(x, 0.0),
    "maximum": np.maximum,
    "minimum": np.minimum,
    "sign": np.sign,
    "step": lambda x: np.heaviside(x, 0.0),
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "rint": np.rint,
    "floor_divide": np.floor_divide,
    "remainder": np.remainder,
    "square": np.square,
    "reciprocal": np.reciprocal,
    "exp2": np.exp2,
    "log10": np.log10,
    "log2": np.log2,
    "logaddexp": np.logaddexp,
    "logaddexp2": np.logaddexp2,
    "cbrt": np.cbrt,
    "arctan2": np.arctan2,
    "hypot": np.hypot,
    "arcsinh": np.arcsinh,
    "arccosh": np.arccosh,
    "arctanh": np.arctanh,
}


def build_c(tmp_path, src: str, name: str, opt: str = "-O2"):  # noqa: ANN201 (a ctypes.CDLL)
    """Compile C99 source ``src`` (exported code) to a shared library (at optimisation
    level ``opt``, warnings as errors) and load it; skip the test where there is no C
    compiler."""
    import ctypes
    import shutil
    import subprocess

    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) found")
    c, so = tmp_path / f"{name}.c", tmp_path / f"{name}.so"
    c.write_text(src)
    flags = [opt, "-shared", "-fPIC", "-std=c99", "-Werror", "-Wall"]
    done = subprocess.run(
        [cc, *flags, "-o", str(so), str(c), "-lm"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return ctypes.CDLL(str(so))


def numpy_ref(name: str, *args: float) -> float:
    """The NumPy reference value of op ``name`` (warnings silenced, as a float)."""
    with np.errstate(all="ignore"):
        return float(NUMPY_REF[name](*(np.float64(a) for a in args)))


def central_diff(
    f: Callable[[np.ndarray], float], x: Sequence[float], d: Sequence[float], h: float = 1e-6
) -> float:
    """Central finite difference of ``f`` at ``x`` along direction ``d``."""
    x, d = np.asarray(x, float), np.asarray(d, float)
    return (f(x + h * d) - f(x - h * d)) / (2.0 * h)


def one_sided_agree(
    f: Callable[[np.ndarray], float],
    x: Sequence[float],
    d: Sequence[float],
    h: float = 1e-3,
    rtol: float = 1e-2,
) -> bool:
    """Whether left and right difference quotients agree (no kink or jump near ``x``)."""
    x, d = np.asarray(x, float), np.asarray(d, float)
    f0 = f(x)
    right = (f(x + h * d) - f0) / h
    left = (f0 - f(x - h * d)) / h
    scale = 1.0 + abs(left) + abs(right)
    return bool(np.isfinite([left, right]).all() and abs(right - left) <= rtol * scale)


@pytest.fixture
def loops_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Array code at every size, its loop nests made at its first call, in that call,
    and kept once they agree with its NumPy code (test_array_loops, test_array_scans)."""
    from adcompile.api import captured
    from adcompile.backend import arrays

    monkeypatch.setattr(captured, "ARRAY_LEVEL_MIN", 0)
    monkeypatch.setattr(arrays, "HOT_CALLS", 1)
    monkeypatch.setattr(arrays, "BACKGROUND", False)
    monkeypatch.setattr(arrays, "PREFER", "loops")
