"""The demo: its compile stage, and its picture (axis labels, a legend, the accuracy)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import adcompile as ad
from adcompile import cli


def test_picture_has_labels_legend_and_accuracy(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    seen = {}
    save = Figure.savefig

    def keep(fig, *args, **kw):
        ax = fig.axes[0]
        seen.update(
            x=ax.get_xlabel(),
            y=ax.get_ylabel(),
            title=ax.get_title(),
            legend=[t.get_text() for t in ax.get_legend().get_texts()],
        )
        return save(fig, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    X = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 0.5]])
    y = np.array([1.0, -1.0, 1.0])
    path = tmp_path / "p.png"
    predict = lambda P: P[:, 0] - 1.5  # noqa: E731  (right of x0 = 1.5 is class +1)
    accuracy = float(np.mean((predict(X) > 0) == (y > 0)))
    assert cli._plot(predict, X, y, str(path), accuracy)
    assert path.stat().st_size > 1000
    assert seen["x"].startswith("x0") and seen["y"].startswith("x1")
    assert seen["legend"] == ["class +1", "class -1"]
    assert "training accuracy 66.7%" in seen["title"]  # 2 of 3 points on their side


def test_demo_compiles_as_a_stage_of_its_own_before_training(capsys, monkeypatch):
    monkeypatch.delenv("ADCOMPILE_QUIET", raising=False)
    monkeypatch.setattr(ad.api, "ANNOUNCE_AFTER", 0.0)  # would speak at once, if not silenced
    assert cli.main(["demo", "--points", "30", "--steps", "4", "--out", ""]) == 0
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    stage = err.index("compiling the loss and its gradient ...")
    done = next(k for k, line in enumerate(err) if line.startswith("compiled in "))
    first_bar = next(k for k, line in enumerate(err) if line.startswith("["))
    assert stage < done < first_bar
    assert "folded into loops" in err[done] or "straight-line" in err[done].lower()
    assert not any("adcompile: tracing and compiling" in line for line in err)  # said once
    assert "ADCOMPILE_QUIET" not in os.environ  # restored
