"""The course's pictures: every plot the notebooks draw, and a few diagrams, saved as PNG files the chapters show.

    python -m tinyinfer course figures        # runs every notebook and draws every diagram into chapters/images/

Each notebook runs in a fresh kernel with a hook (KERNEL_HOOK) that, after every cell, saves each open
figure as `chapters/images/NN-slug-K.png` (K counts the notebook's figures from 1) before the inline backend
closes it. The diagrams (`diagrams.py`) are drawn in this process. Rendering uses the Agg backend, a fixed
DPI and no `Software` metadata, so one machine renders the same bytes every time.

Pixels differ between machines (fonts, FreeType), so the check that an image is current compares what a
figure *shows* instead: `summary(fig)` lists its texts (titles, labels, tick labels, legend entries), the
shapes of its data arrays (lines, bars, images, scatter points) and four statistics of each (mean, std, min,
max). `chapters/images/figures.json` stores the summary of every image; tests/test_notebooks.py (which
executes the notebooks anyway) and tests/test_figures.py compare a fresh summary with it, the statistics
within RTOL, and fail naming the command above when a plot changed. A plot of measured times (MEASURED) is
compared by its texts and shapes only: its numbers change from run to run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from tinyinfer.course.diagrams import DIAGRAMS

IMAGES = Path("chapters") / "images"
MANIFEST = IMAGES / "figures.json"
DPI = 80
RTOL = 1e-3  # the data of a plot computed in float32 agrees to ~1e-6 across machines; a changed plot moves far more
# Figures whose numbers are timings or memory measured while the notebook runs, or (00-course-1) counts
# that grow with every exercise added to the source.
MEASURED = {"00-course-1",
    "03-attention-4", "03-attention-5", "05-generation-kv-cache-1", "05-generation-kv-cache-2",
    "10-continuous-batching-1", "10-continuous-batching-2", "10-continuous-batching-3", "10-continuous-batching-4",
    "11-speculative-decoding-3", "13-lora-1", "14-parallelism-1", "15-serving-in-production-1",
}

# Run in the kernel before the notebook's first cell: `tinyinfer_figures` collects each figure's summary.
KERNEL_HOOK = """\
from tinyinfer.course.figures import capture_in_kernel
tinyinfer_figures = capture_in_kernel({stem!r}, {save_dir!r})
"""
READ_BACK = "import json; print(json.dumps(tinyinfer_figures))"


NUMBER = re.compile(r"[−+-]?[\d.,]+(e[−+-]?\d+)?%?|\$\\mathdefault\{.*\}\$")  # 1.5, −2, 10%, $\mathdefault{10^{-4}}$
DIGITS = re.compile(r"\d+([.,]\d+)*")


def _texts(fig, measured: bool = False) -> list[str]:
    """Titles, labels, legend entries and the non-numeric tick labels (numeric ones follow from the data, and
    their choice varies with matplotlib's version); in a measured figure, numbers in texts become '#'."""
    texts = [fig._suptitle.get_text()] if getattr(fig, "_suptitle", None) else []
    for ax in fig.axes:
        texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        texts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if not NUMBER.fullmatch(t.get_text())]
        texts += [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        texts += [t.get_text() for t in legend.get_texts()] if legend else []
    texts = [t for t in texts if t]
    return [DIGITS.sub("#", t) for t in texts] if measured else texts


def _arrays(fig) -> list[np.ndarray]:
    arrays = []
    for ax in fig.axes:
        arrays += [np.asarray(line.get_xydata(), dtype=float) for line in ax.get_lines()]
        if ax.patches:  # bars, spans, polygons: their corners in data coordinates
            arrays.append(np.concatenate([p.get_patch_transform().transform(p.get_path().vertices) for p in ax.patches]))
        arrays += [np.asarray(image.get_array(), dtype=float) for image in ax.get_images()]
        arrays += [np.asarray(c.get_offsets(), dtype=float) for c in ax.collections if hasattr(c, "get_offsets")]
    return arrays


def _stats(a: np.ndarray) -> list[float]:
    finite = a[np.isfinite(a)] if a.size else a
    if not finite.size:
        return [0.0, 0.0, 0.0, 0.0]
    return [float(finite.mean()), float(finite.std()), float(finite.min()), float(finite.max())]


def summary(fig, measured: bool = False) -> dict:
    """What a figure shows, comparable across machines: texts, data shapes and (unless measured) statistics."""
    arrays = _arrays(fig)
    return {"texts": _texts(fig, measured), "shapes": [list(a.shape) for a in arrays],
            "stats": None if measured else [_stats(a) for a in arrays]}


def save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None}, bbox_inches="tight")


def capture_in_kernel(stem: str, save_dir: str | None) -> list:
    """Inside a notebook's kernel: summarise (and, with `save_dir`, save) every figure when `plt.show()` is
    called and after each cell, before the inline backend shows and closes it. Returns the list the
    summaries are appended to."""
    import matplotlib.pyplot as plt
    from IPython import get_ipython

    collected: list = []
    seen: set[int] = set()

    def capture(*_):
        for number in plt.get_fignums():
            fig = plt.figure(number)
            if id(fig) in seen:
                continue
            seen.add(id(fig))
            name = f"{stem}-{len(collected) + 1}"
            if save_dir:
                save(fig, Path(save_dir) / f"{name}.png")
            collected.append({"name": name, **summary(fig, measured=name in MEASURED)})

    show = plt.show

    def show_and_capture(*args, **kwargs):
        capture()
        return show(*args, **kwargs)

    plt.show = show_and_capture
    get_ipython().events.callbacks["post_execute"].insert(0, capture)  # before the backend's flush_figures
    return collected


def run_notebook(path: Path, root: Path, save_dir: Path | None = None, timeout: int = 300):
    """Execute one notebook in a fresh kernel from `root`: the summaries of its figures, in order, and the
    executed notebook (its first and last cells are the hook's)."""
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    hook = KERNEL_HOOK.format(stem=Path(path).stem, save_dir=str(save_dir) if save_dir else None)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(hook))
    notebook.cells.append(nbformat.v4.new_code_cell(READ_BACK))
    nbclient.NotebookClient(notebook, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(root)}}).execute()
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.get("name") == "stdout")
    return json.loads(printed), notebook


def read_manifest(root: Path) -> dict[str, dict]:
    path = Path(root) / MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_manifest(root: Path, entries: dict[str, dict]) -> None:
    text = json.dumps(dict(sorted(entries.items())), indent=1) + "\n"
    (Path(root) / MANIFEST).write_text(text, encoding="utf-8")


def differences(stored: dict | None, fresh: dict) -> str | None:
    """Why a fresh summary does not match the stored one (None when it does)."""
    if stored is None:
        return "it has no image yet"
    texts = [[t for t in entry["texts"] if not NUMBER.fullmatch(t)] for entry in (stored, fresh)]
    if texts[0] != texts[1]:
        return f"its texts changed ({texts[0]} -> {texts[1]})"
    if stored["stats"] is None or fresh["stats"] is None:
        return None  # measured: how many samples it holds may vary too
    if stored["shapes"] != fresh["shapes"]:
        return f"its shapes changed ({stored['shapes']} -> {fresh['shapes']})"
    old, new = np.array(stored["stats"], dtype=float), np.array(fresh["stats"], dtype=float)
    scale = np.abs(old).max() if old.size else 1.0
    return None if np.allclose(old, new, rtol=RTOL, atol=RTOL * scale) else "its data changed"


def stale(root: Path, fresh: list[dict]) -> list[str]:
    """One line per figure of `fresh` whose image is missing or out of date."""
    stored = read_manifest(root)
    lines = []
    for entry in fresh:
        why = differences(stored.get(entry["name"]), entry)
        if why is None and not (Path(root) / IMAGES / f"{entry['name']}.png").is_file():
            why = "its image file is missing"
        if why:
            lines.append(f"{entry['name']}: {why}")
    return lines


STALE_HINT = "the chapters' images are out of date: run `python -m tinyinfer course figures` and commit chapters/images/"


def diagram_summaries(save_dir: Path | None = None) -> list[dict]:
    """Draw every diagram (saving it under `save_dir` when given); their summaries."""
    import matplotlib.pyplot as plt

    entries = []
    for name, draw in DIAGRAMS.items():
        fig = draw()
        if save_dir:
            save(fig, Path(save_dir) / f"diagram-{name}.png")
        entries.append({"name": f"diagram-{name}", **summary(fig)})
        plt.close(fig)
    return entries


def render(root: Path, notebooks: list[Path], diagrams: bool = True, echo=print) -> int:
    """Run `notebooks` and draw the diagrams, saving their images and summaries; the number of images."""
    root = Path(root)
    images = root / IMAGES
    images.mkdir(parents=True, exist_ok=True)
    entries, count = read_manifest(root), 0
    for path in notebooks:
        stem = Path(path).stem
        for old in images.glob(f"{stem}-*.png"):
            old.unlink()
        figures, _ = run_notebook(path, root, save_dir=images)
        entries = {k: v for k, v in entries.items() if not k.startswith(f"{stem}-")}
        entries |= {f["name"]: {k: v for k, v in f.items() if k != "name"} for f in figures}
        count += len(figures)
        write_manifest(root, entries)  # after each notebook: a failure later keeps what was rendered
        echo(f"{stem}: {len(figures)} figure(s)")
    if diagrams:
        for f in diagram_summaries(images):
            entries[f["name"]] = {k: v for k, v in f.items() if k != "name"}
            count += 1
    write_manifest(root, entries)
    return count
