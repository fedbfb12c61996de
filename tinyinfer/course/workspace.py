"""A student workspace: a copy of the project where chosen exercise regions are replaced by stubs.

The copy holds everything the tests need (the package, `tests/`, `pyproject.toml` with the pytest
settings, the chapters and notebooks to read). Each chosen region keeps its two marker comments, so the
student sees where to write and the grader can find the exercises again; the lines between them become

    raise NotImplementedError("Exercise 3.1: causal attention scores — see chapters/03-attention.md")

at the region's indentation. `.course.json` records which exercises were stubbed and where the project's
shared test data lives, because a workspace usually sits outside the project tree.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import tinyinfer
from tinyinfer.course.exercises import Exercise, chapter_file, stored_prerequisites
from tinyinfer.errors import TinyInferError

COPIED = ("tinyinfer", "tests", "weights_scripts", "chapters", "notebooks", "pyproject.toml")
NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".ipynb_checkpoints")
STATE_FILE = ".course.json"
SHARED_DATA_ENV = "TINYINFER_SHARED_DATA"  # tests/conftest.py reads it to find the real test data


def project_root() -> Path:
    """The checkout tinyinfer runs from; the course needs its tests, so an installed wheel will not do."""
    root = Path(tinyinfer.__file__).resolve().parent.parent
    if not (root / "tests").is_dir() or not (root / "pyproject.toml").is_file():
        raise TinyInferError(
            f"the course needs a source checkout of tinyinfer with its tests, but tinyinfer runs from {root}: "
            "clone the repository and `pip install -e \".[dev]\"` in it"
        )
    return root


def shared_data_dir(root: Path) -> Path:
    """Where a checkout finds the real test data: ../shared/data beside it (see tests/conftest.py),
    unless TINYINFER_SHARED_DATA names another folder."""
    return Path(os.environ.get(SHARED_DATA_ENV) or Path(root).resolve().parent / "shared" / "data")


def stub_line(exercise: Exercise, root: Path) -> str:
    """The one line that replaces a region in a workspace."""
    message = f"Exercise {exercise.id}: {exercise.title} — see {chapter_file(root, exercise.chapter)}"
    return f"{exercise.indent}raise NotImplementedError({json.dumps(message, ensure_ascii=False)})"


def stub_file(text: str, exercises: list[Exercise], root: Path) -> str:
    """`text` with the body of each region (all in this file) replaced by its stub line."""
    lines = text.splitlines()
    for exercise in sorted(exercises, key=lambda e: e.begin, reverse=True):  # bottom up keeps line numbers valid
        lines[exercise.begin : exercise.end - 1] = [stub_line(exercise, root)]
    return "\n".join(lines) + "\n"


def start_workspace(root: Path, dest: Path, chosen: list[Exercise]) -> Path:
    """Copy the project at `root` into the new directory `dest`, stubbing the `chosen` exercises."""
    root, dest = Path(root).resolve(), Path(dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise TinyInferError(f"{dest} already exists and is not empty: choose a new directory for the workspace")
    if dest == root or root in dest.parents:
        raise TinyInferError(f"{dest} is inside the project {root}: put the workspace somewhere else")
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=NOT_COPIED)
        elif source.is_file():
            shutil.copy2(source, dest / name)
    by_file: dict[Path, list[Exercise]] = {}
    for exercise in chosen:
        by_file.setdefault(exercise.path, []).append(exercise)
    for path, exercises in by_file.items():
        target = dest / path
        target.write_text(stub_file(target.read_text(encoding="utf-8"), exercises, root), encoding="utf-8")
    state = {"stubbed": [e.id for e in chosen], "source": str(root), "shared_data": str(shared_data_dir(root))}
    (dest / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    (dest / "README.md").write_text(readme(chosen, root, dest), encoding="utf-8")
    return dest


def read_state(workspace: Path) -> dict:
    """What `start_workspace` recorded; a clear error when `workspace` is not one."""
    path = Path(workspace) / STATE_FILE
    if not path.is_file():
        raise TinyInferError(f"{Path(workspace).resolve()} is not a course workspace (no {STATE_FILE}): create one with `python -m tinyinfer course start DIR`")
    return json.loads(path.read_text(encoding="utf-8"))


def readme(chosen: list[Exercise], root: Path, workspace: Path) -> str:
    needs = stored_prerequisites()
    rows = "\n".join(f"| {e.id} | {e.title} | `{e.path}` line {e.begin} | {chapter_file(root, e.chapter)} | {', '.join(needs.get(e.id, [])) or '-'} |"
                     for e in chosen)
    return f"""# Your tinyinfer workspace

This folder is a copy of tinyinfer in which {len(chosen)} exercise(s) are left for you to write. Each one is
a function body between two comments, `# BEGIN EXERCISE N.M: title` and `# END EXERCISE N.M`; right now it
only raises `NotImplementedError`. Read the chapter it names, replace the `raise` line with your code, and
keep the two marker comments.

| exercise | title | where | read | needs |
|---|---|---|---|---|
{rows}

"needs" lists the exercises whose code the tests of an exercise also run. You can still do them in any
order: `course check N` grades N with the reference solution of every other exercise in place, so 5.2 can
pass while 4.1 is a stub, and a mistake in 4.1 cannot fail 5.2. When you grade several at once, each keeps
your code; one that fails inside another failing exercise is graded again with that one's reference.

Grade your work (the tests run against the code here, not the installed tinyinfer). Run it from outside
this folder, so that the grader itself is the installed tinyinfer and starts even if your code does not:

    python -m tinyinfer course check --workspace {workspace}          # every exercise of this workspace
    python -m tinyinfer course check 3.1 --workspace {workspace}      # one exercise (or `3` for all of chapter 3)

The table it prints says which exercises pass and what each needs; the pytest output above it shows why a
test failed. Stuck? `python -m tinyinfer course hint 3.1` prints a first hint; `--level 2` the next.
Start again from scratch with `python -m tinyinfer course start NEW_DIR`.
"""
