"""The demo: its compile stage, and its picture (axis labels, a legend, the accuracy)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import adcompile as ad
from adcompile.cli import commands as cli
from adcompile.datasets import make_moons


def _capture_figure(monkeypatch) -> dict:
    """Have ``cli._plot``'s figure measured as it is saved: its labels, its legend's
    entries and their colours, where the legend is drawn, and the shading."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.contour import ContourSet
    from matplotlib.figure import Figure

    seen: dict = {}
    save = Figure.savefig

    def keep(fig, *args, **kw):
        ax = fig.axes[0]
        legend = ax.get_legend()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box = legend.get_window_extent(renderer)
        shade = next(c for c in ax.findobj(ContourSet) if c.filled)
        seen.update(
            x=ax.get_xlabel(),
            y=ax.get_ylabel(),
            title=ax.get_title(),
            legend=[t.get_text() for t in legend.get_texts()],
            handles=dict(zip([t.get_text() for t in legend.get_texts()], legend.legend_handles)),
            legend_box=box,
            axes_box=ax.get_window_extent(renderer),
            saved_box=fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans),
            # the colour each band of the shading is drawn in, lowest band first
            band_colours=[
                matplotlib.colors.to_rgba(shade.cmap(shade.norm(level)), shade.alpha)
                for level in shade.layers
            ],
            band_levels=list(shade.layers),
            points=ax.transData.transform(
                np.concatenate([c.get_offsets() for c in ax.collections if c.get_offsets().size])
            ),
        )
        return save(fig, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    return seen


def test_picture_has_labels_legend_and_accuracy(tmp_path, monkeypatch):
    seen = _capture_figure(monkeypatch)
    X = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 0.5]])
    y = np.array([1.0, -1.0, 1.0])
    path = tmp_path / "p.png"
    predict = lambda P: P[:, 0] - 1.5  # noqa: E731  (right of x0 = 1.5 is class +1)
    accuracy = float(np.mean((predict(X) > 0) == (y > 0)))
    assert cli._plot(predict, X, y, str(path), accuracy)
    assert path.stat().st_size > 1000
    assert seen["x"].startswith("x0") and seen["y"].startswith("x1")
    assert seen["legend"] == [
        "class +1 points",
        "class -1 points",
        "model says +1 (shaded)",
        "model says -1 (shaded)",
        "decision boundary",
    ]
    assert "training accuracy 66.7%" in seen["title"]  # 2 of 3 points on their side


def test_legend_shows_the_shaded_regions_in_their_own_colours(tmp_path, monkeypatch):
    seen = _capture_figure(monkeypatch)
    X, y = make_moons(40, noise=0.1, seed=3)
    predict = lambda P: P[:, 1] - 0.25  # noqa: E731  (above x1 = 0.25 the model says +1)
    assert cli._plot(predict, X, y, str(tmp_path / "p.png"))
    below, above = seen["band_levels"]
    assert below < 0.0 < above  # the band drawn for -1, then the one for +1
    plus = seen["handles"]["model says +1 (shaded)"].get_facecolor()
    minus = seen["handles"]["model says -1 (shaded)"].get_facecolor()
    assert np.allclose(plus, seen["band_colours"][1]) and np.allclose(
        minus, seen["band_colours"][0]
    )
    assert not np.allclose(plus, minus)


def test_legend_sits_outside_the_data_and_the_boundary(tmp_path, monkeypatch):
    seen = _capture_figure(monkeypatch)
    X, y = make_moons(100, noise=0.1, seed=1)
    # a boundary through the top right, where a legend inside the axes used to sit
    predict = lambda P: P[:, 0] + P[:, 1] - 1.5  # noqa: E731
    assert cli._plot(predict, X, y, str(tmp_path / "p.png"))
    legend, axes, saved = seen["legend_box"], seen["axes_box"], seen["saved_box"]
    assert not legend.overlaps(axes)  # nothing drawn in the axes is under it
    assert not any(legend.contains(px, py) for px, py in seen["points"])
    # and it is in the saved picture, not cut off by bbox_inches="tight"
    assert saved.x0 <= legend.x0 and legend.x1 <= saved.x1
    assert saved.y0 <= legend.y0 and legend.y1 <= saved.y1


def test_a_model_that_says_one_class_everywhere_has_no_boundary_entry(tmp_path, monkeypatch):
    seen = _capture_figure(monkeypatch)
    X, y = make_moons(20, noise=0.1, seed=2)
    assert cli._plot(lambda P: P[:, 0] * 0.0 + 1.0, X, y, str(tmp_path / "p.png"))
    assert "decision boundary" not in seen["legend"]
    assert "model says +1 (shaded)" in seen["legend"]


def test_demo_compiles_as_a_stage_of_its_own_before_training(capsys, monkeypatch):
    monkeypatch.delenv("ADCOMPILE_QUIET", raising=False)
    # (it would speak at once, if not silenced)
    monkeypatch.setattr(ad.api.events, "ANNOUNCE_AFTER", 0.0)
    assert cli.main(["demo", "--points", "30", "--steps", "4", "--out", ""]) == 0
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    stage = err.index("compiling the loss and its gradient ...")
    done = next(k for k, line in enumerate(err) if line.startswith("compiled in "))
    first_bar = next(k for k, line in enumerate(err) if line.startswith("["))
    assert stage < done < first_bar
    assert "folded into loops" in err[done] or "straight-line" in err[done].lower()
    assert not any("adcompile: tracing and compiling" in line for line in err)  # said once
    assert "ADCOMPILE_QUIET" not in os.environ  # restored
