"""The course machinery: exercises that live in the real source, student workspaces, and grading.

An exercise is a region of the runtime's own source, between a comment pair at the region's indentation
(`BEGIN EXERCISE N.M: title` ... `END EXERCISE N.M`, each written as a `#` comment on its own line).
The marked lines are the reference solution: there is no second copy of it anywhere.

- `exercises.py` finds and validates the markers in `tinyinfer/**/*.py`.
- `workspace.py` copies the project into a student workspace with chosen regions replaced by a stub
  that raises `NotImplementedError` and names the chapter to read.
- `grading.py` runs the tests marked `@pytest.mark.exercise("N.M")` against a workspace in a fresh
  pytest process (so `import tinyinfer` means the workspace's copy) and scores each exercise, alone: in a
  probed copy where every other exercise holds its reference (`probe.py` records which regions a test ran).
- `verify.py` proves the grading is real: the reference passes every exercise test, and stubbing any one
  exercise makes at least one of its own tests fail.
- `pytest_plugin.py` adds the `--exercise N.M` option to pytest and reports outcomes to the grader.
- `study.py` reads each chapter's hints and questions (`course hint`, `course answer`).
- `figures.py` and `diagrams.py` render the notebooks' plots and the diagrams into chapters/images and
  check them current; `book.py` builds the HTML book.
"""

from __future__ import annotations

from tinyinfer.course.exercises import Exercise, find_exercises, select_exercises
from tinyinfer.course.grading import grade_workspace
from tinyinfer.course.workspace import start_workspace

__all__ = ["Exercise", "find_exercises", "select_exercises", "grade_workspace", "start_workspace"]
