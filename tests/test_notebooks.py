"""Every notebook runs top to bottom, and is stored without outputs (so its diffs stay readable).

Notebooks execute in a fresh `python3` Jupyter kernel from the repository root. Figures go through the
kernel's inline backend (Agg rendering to PNG, no display needed), so plotting code really draws. A cell
that raises fails the test, and the message shows that cell and its traceback. Each figure a notebook draws
is also compared with the image the chapters show (tinyinfer/course/figures.py): a plot that changed while
its image did not fails, naming the command that renders them again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import nbclient  # dev dependencies: missing is a failure, not a skip
import nbformat

from tinyinfer.course import figures  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "python3"
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def execute(path: Path, timeout: int = 240) -> None:
    """Run a notebook in a fresh kernel from the repository root; raise CellExecutionError on a failing cell."""
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, kernel_name=KERNEL, timeout=timeout, resources={"metadata": {"path": str(ROOT)}})
    client.execute()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path):
    failure = None
    try:
        drawn, _ = figures.run_notebook(path, ROOT)
    except nbclient.exceptions.CellExecutionError as e:
        failure = ANSI_COLOUR.sub("", str(e))  # the failing cell's source and its traceback, without colour codes
    if failure:
        pytest.fail(f"{path.name}: a cell failed\n{failure}", pytrace=False)
    stale = figures.stale(ROOT, drawn)
    stored = [name for name in figures.read_manifest(ROOT) if name.startswith(f"{path.stem}-")]
    gone = sorted(set(stored) - {f["name"] for f in drawn})
    assert not stale and not gone, f"{figures.STALE_HINT}:\n" + "\n".join(stale + [f"{g}: no longer drawn" for g in gone])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_clean(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    dirty = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code" and (cell.outputs or cell.execution_count)]
    assert not dirty, f"{path.name} stores outputs in cells {dirty}: clear them before committing (Jupyter: Edit > Clear All Outputs)"


def test_a_failing_cell_fails_with_the_cell_shown(tmp_path):
    """The check above can fail: a notebook whose cell raises is reported with that cell's source."""
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("raise ValueError('broken cell ' + str(x))"),
    ])
    path = tmp_path / "broken.ipynb"
    nbformat.write(notebook, path)
    with pytest.raises(nbclient.exceptions.CellExecutionError) as e:
        execute(path, timeout=60)
    assert "raise ValueError('broken cell ' + str(x))" in str(e.value) and "broken cell 1" in str(e.value)


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb: the course needs one notebook per chapter"


def test_chapters_and_notebooks_come_in_pairs():
    chapters = {p.stem for p in (ROOT / "chapters").glob("[0-9][0-9]-*.md")}
    notebooks = {p.stem for p in NOTEBOOKS}
    assert chapters == notebooks, f"chapters without a notebook: {sorted(chapters - notebooks)}; notebooks without a chapter: {sorted(notebooks - chapters)}"
