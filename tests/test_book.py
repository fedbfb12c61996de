"""The book builds: one HTML page per chapter and per notebook, the images beside them, hints folded.

CI builds it without executing the notebooks (`execute=False`): tests/test_notebooks.py executes every one
already, and the pictures the chapters show are those notebooks' plots, checked current there; what is left to
prove here is the build itself, its pages and its links.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("markdown")
pytest.importorskip("nbconvert")

from tinyinfer.cli import main  # noqa: E402
from tinyinfer.course.book import build, rewrite_links  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("book") / "site"
    build(ROOT, out, execute=False, echo=lambda _: None)
    return out


def test_every_chapter_and_notebook_has_a_page(site):
    index = (site / "index.html").read_text()
    for chapter in sorted((ROOT / "chapters").glob("[0-9][0-9]-*.md")):
        assert (site / f"{chapter.stem}.html").is_file() and f'href="{chapter.stem}.html"' in index
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")):
        page = (site / "notebooks" / f"{notebook.stem}.html").read_text()
        assert "jp-Cell" in page or "cell" in page  # nbconvert's cells, inside our page


def test_images_and_links_resolve(site):
    for page in site.glob("*.html"):
        text = page.read_text()
        for target in re.findall(r'(?:src|href)="([^"#:]+)"', text):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which the book does not have"


def test_hints_stay_folded_with_their_markdown_rendered(site):
    text = (site / "03-attention.html").read_text()
    hint = re.search(r"<details>\s*<summary>Hint 3.1.1</summary>(.*?)</details>", text, re.S)
    assert hint and "<code>" in hint[1]


def test_chapter_links_point_to_pages():
    assert rewrite_links("see [06](06-sampling.md#2-x) and [nb](../notebooks/06-sampling.ipynb)") == \
        "see [06](06-sampling.html#2-x) and [nb](notebooks/06-sampling.html)"


def test_book_command_refuses_a_directory_with_other_things(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep me")
    assert main(["course", "book", str(tmp_path), "--no-execute"]) == 1
    assert "holds something other than a book" in capsys.readouterr().err
    assert (tmp_path / "mine.txt").is_file()
