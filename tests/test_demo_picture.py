"""The demo's picture: axis labels, a legend for the two classes, the accuracy in its title."""

from __future__ import annotations

import numpy as np
import pytest

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
