"""Every Python block of README.md (fenced ```python; ```py marks a sketch that
needs what a test machine lacks, such as a cluster) runs, in order, as a reader
pastes them into one session; none may raise or print nan (a wrong answer found
this way once: the training example printed nan)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 5
    script = "\n".join(
        f"print('--- block {k}', flush=True)\n{block}" for k, block in enumerate(blocks)
    )
    (tmp_path / "readme_blocks.py").write_text(script)
    env = dict(os.environ, ADCOMPILE_QUIET="1", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(README.parent), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "readme_blocks.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert f"--- block {len(blocks) - 1}" in run.stdout
    assert not re.search(r"\bnan\b", run.stdout), run.stdout
