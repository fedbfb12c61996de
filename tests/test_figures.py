"""The chapters' pictures: every chapter shows one, every image exists and is current, and the staleness check
can fail. (The notebooks' plots are compared with their images in tests/test_notebooks.py, which runs them.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from tinyinfer.course import figures  # noqa: E402
from tinyinfer.course.diagrams import DIAGRAMS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGE_REF = re.compile(r"!\[[^\]]*\]\((images/[\w.-]+\.png)\)")


def test_every_chapter_shows_a_picture_that_exists():
    for chapter in sorted((ROOT / "chapters").glob("[0-9][0-9]-*.md")):
        refs = IMAGE_REF.findall(chapter.read_text())
        assert refs, f"{chapter.name} shows no picture: add ![what it shows](images/NAME.png) where the text discusses it"
        for ref in refs:
            assert (chapter.parent / ref).is_file(), f"{chapter.name} shows {ref}, which does not exist: run `python -m tinyinfer course figures`"


def test_every_image_has_its_summary_and_every_summary_its_image():
    images = {p.stem for p in (ROOT / figures.IMAGES).glob("*.png")}
    assert images == set(figures.read_manifest(ROOT)), figures.STALE_HINT


def test_the_diagrams_are_current():
    assert not figures.stale(ROOT, figures.diagram_summaries()), figures.STALE_HINT


def test_a_changed_plot_is_stale_and_a_remeasured_one_is_not():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def drawn(ys, title="loss"):
        fig, ax = plt.subplots()
        ax.plot(range(len(ys)), ys)
        ax.set_title(title)
        plt.close(fig)
        return fig

    stored = figures.summary(drawn([3.0, 2.0, 1.5]))
    assert figures.differences(stored, figures.summary(drawn([3.0, 2.0, 1.5 * (1 + 1e-6)]))) is None  # rounding: same plot
    assert figures.differences(stored, figures.summary(drawn([3.0, 2.0, 1.2]))) == "its data changed"
    assert "texts changed" in figures.differences(stored, figures.summary(drawn([3.0, 2.0, 1.5], "accuracy")))
    assert "shapes changed" in figures.differences(stored, figures.summary(drawn([3.0, 2.0])))
    timed = figures.summary(drawn([1.0, 2.0], "12.5 ms per step"), measured=True)
    assert timed["stats"] is None and timed["texts"] == ["# ms per step"]
    assert figures.differences(timed, figures.summary(drawn([4.0, 1.0, 2.0], "9.1 ms per step"), measured=True)) is None
    assert "texts changed" in figures.differences(timed, figures.summary(drawn([1.0], "9.1 s per step"), measured=True))


def test_rendering_is_deterministic(tmp_path):
    """Same figure, same bytes: Agg, a fixed DPI and no Software metadata."""
    draw = DIAGRAMS["block-table"]
    figures.save(draw(), tmp_path / "a.png")
    figures.save(draw(), tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
