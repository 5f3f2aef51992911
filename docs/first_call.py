"""Time README's ten lines: the first call (trace and compile) and later calls.

    python docs/first_call.py

It runs itself again in a fresh process with an empty cache directory
(ADCOMPILE_CACHE_DIR=$(mktemp -d)), as a newcomer's first run would be, and
prints the import time, the first call, the second call and the median of
later calls.
"""

import os
import subprocess
import sys
import tempfile
import time

if os.environ.get("_FIRST_CALL_CHILD") != "1":
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ADCOMPILE_CACHE_DIR=cache, _FIRST_CALL_CHILD="1")
        sys.exit(subprocess.call([sys.executable, __file__], env=env))

start = time.perf_counter()
import numpy as np  # noqa: E402

import adcompile as ad  # noqa: E402

imported = time.perf_counter()


def rosen(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


vg = ad.value_and_grad(rosen)
t0 = time.perf_counter()
vg(np.array([0.5, 1.0, 1.5]))
t1 = time.perf_counter()
x = np.array([0.1, 0.2, 0.3])
vg(x)
t2 = time.perf_counter()
later = []
for _ in range(20):
    a = time.perf_counter()
    for _ in range(1000):
        vg(x)
    later.append((time.perf_counter() - a) / 1000)
print(f"import adcompile: {imported - start:.2f} s")
print(f"first call (trace and compile): {t1 - t0:.2f} s")
print(f"second call: {1e6 * (t2 - t1):.0f} us")
print(f"later calls: {1e6 * sorted(later)[len(later) // 2]:.1f} us each (median)")
