"""Every ```python block of README.md and docs/*.md runs on its own, in a fresh
process, as a reader would paste it into a new file; none may raise or print nan
(a wrong answer found this way once: the training example printed nan). Where a
```text block follows a Python block, it is that block's output, compared as
doctest compares (``...`` matches anything, runs of whitespace are one space).

A block that imports an optional extra (Dask, PyTorch, JAX, graphviz) is skipped,
with the reason, where the extra is not installed. The pages also cite only files
that exist, and the README's test command is the one CI runs."""

from __future__ import annotations

import ast
import doctest
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Modules a block may need that a test machine may lack: the top-level import
#: name, and how to install it.
OPTIONAL = {
    "dask": 'pip install "adcompile[distributed]"',
    "distributed": 'pip install "adcompile[distributed]"',
    "torch": "pip install torch",
    "jax": "pip install jax jaxlib",
    "graphviz": "pip install graphviz (and Graphviz's dot)",
    "scipy": 'pip install "adcompile[test]"',
}

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """The page's Python blocks: (line, source, the output shown after it or None)."""
    text = page.read_text()
    found = []
    fences = list(FENCE.finditer(text))
    for k, m in enumerate(fences):
        if m.group(1) != "python":
            continue
        output = None
        if k + 1 < len(fences):
            nxt = fences[k + 1]
            if nxt.group(1) == "text" and not text[m.end() : nxt.start()].strip():
                output = nxt.group(2)
        found.append((text.count("\n", 0, m.start()) + 2, m.group(2), output))
    return found


CASES = [
    pytest.param(source, output, id=f"{page.relative_to(ROOT)}:{line}")
    for page in PAGES
    for line, source, output in blocks(page)
]


def missing_extras(source: str) -> list[str]:
    """The optional modules the block imports that are not installed here."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names & OPTIONAL.keys() if importlib.util.find_spec(n) is None)


@pytest.mark.parametrize(("source", "output"), CASES)
def test_block_runs_alone(source, output, tmp_path):
    missing = missing_extras(source)
    if missing:
        how = "; ".join(OPTIONAL[n] for n in missing)
        pytest.skip(f"needs {', '.join(missing)}, not installed ({how})")
    (tmp_path / "block.py").write_text(source)
    env = dict(os.environ, ADCOMPILE_QUIET="1", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "block.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    if output is None or not re.search(r"\bnan\b", output):
        assert not re.search(r"\bnan\b", run.stdout), run.stdout
    if output is not None:
        checker = doctest.OutputChecker()
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        if not checker.check_output(output, run.stdout, flags):
            example = doctest.Example(source, output)
            pytest.fail(checker.output_difference(example, run.stdout, flags))


def test_every_page_has_blocks_and_the_readme_shows_output():
    per_page = {page.name: blocks(page) for page in PAGES}
    assert len(per_page["README.md"]) >= 8
    assert sum(out is not None for _, _, out in per_page["README.md"]) >= 8
    assert all(per_page[name] for name in ("api.md", "how-it-works.md", "distributed.md"))
    for page in PAGES:
        text = page.read_text()
        # (```py or ```python3 would hide a block from this test)
        langs = re.findall(r"^( *)```(\w*)$", text, re.M)
        assert {lang for _, lang in langs} <= {"python", "text", ""}, page.name
        assert all(not indent for indent, lang in langs if lang == "python"), page.name
        fences = list(FENCE.finditer(text))
        for a, b in zip(fences, fences[1:]):  # an output shown belongs to one Python block
            together = not text[a.end() : b.start()].strip()
            assert not (together and a.group(1) == b.group(1) == "text"), (page.name, b.group(2))


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub makes them."""
    heads = re.findall(r"^#+ (.*)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_links_and_files_named_exist():
    for page in PAGES:
        text = page.read_text()
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if "://" in target:
                continue
            linked = (page.parent / target) if target else page
            assert linked.exists(), (page.name, target)
            if anchor and linked.suffix == ".md":
                assert anchor in anchors(linked), (page.name, target, anchor)
        for name in ("CONTRACT.md", "WORKLOADS.md"):  # (not files of this project)
            assert name not in text, (page.name, name)
    assert "WORKLOADS.md" not in (ROOT / "benchmarks" / "README.md").read_text()


def test_the_readme_test_command_is_cis():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    install = re.search(r"^pip install -q (\S+)$", ci, re.M).group(1)
    pytest_cmd = re.search(r"^(python -m pytest [^\n]*)$", ci, re.M).group(1)
    first_screen = "\n".join(readme.splitlines()[:40])
    assert f"pip install {install} && {pytest_cmd}" in first_screen
    assert "pip install . && adcompile demo" in first_screen
