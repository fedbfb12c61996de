"""Prove that grading is real, for every exercise marked in the source.

1. A workspace with nothing stubbed must pass every exercise test, and every exercise must have tests.
   (Grading the reference through a workspace also proves the workspace holds all that the tests need.)
2. For each exercise, a workspace with only that exercise stubbed must fail at least one of its own tests:
   an exercise whose tests pass on a stub grades nothing.

Each stub run collects only the test files of its exercise and stops at the first failure (one is
enough), and two run at a time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from tinyinfer.course.exercises import find_exercises
from tinyinfer.course.grading import ExerciseResult, grade_workspace
from tinyinfer.course.workspace import start_workspace


@dataclass
class Check:
    reference: ExerciseResult
    stubbed: ExerciseResult | None = None  # None when the exercise has no tests to run

    @property
    def problem(self) -> str | None:
        exercise = self.reference.exercise
        if not self.reference.outcomes:
            return f"exercise {exercise.id} ({exercise.where()}) has no tests: mark its tests @pytest.mark.exercise(\"{exercise.id}\")"
        if not self.reference.passed:
            return f"the reference solution of exercise {exercise.id} does not pass its tests ({self.reference.verdict}): fix the code or the tests"
        if self.stubbed is None or not self.stubbed.count("failed"):
            return f"with exercise {exercise.id} stubbed, all its tests still pass or skip: add a test that calls {exercise.where()}"
        return None


def verify_exercises(root: Path, workdir: Path, jobs: int = 2, progress: bool = False) -> list[Check]:
    """Run both proofs for every exercise of the project at `root`, using `workdir` for the workspaces."""
    exercises = find_exercises(root)
    if not exercises:
        return []
    reference = start_workspace(root, Path(workdir) / "reference", [])
    checks = [Check(r) for r in grade_workspace(reference, exercises).results]
    testable = [c for c in checks if c.reference.outcomes]

    def stub_one(check: Check) -> None:
        exercise = check.reference.exercise
        workspace = start_workspace(root, Path(workdir) / f"stub-{exercise.id}", [exercise])
        graded = grade_workspace(workspace, [exercise], targets=_test_files(check.reference), first_failure=True)
        check.stubbed = graded.results[0]

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(tqdm(pool.map(stub_one, testable), total=len(testable), desc="stubbed exercises", disable=not progress))
    return checks


def _test_files(result: ExerciseResult) -> list[str]:
    return sorted({nodeid.split("::")[0] for nodeid in result.outcomes})


def table(checks: list[Check]) -> str:
    lines = ["exercise  tests  reference  stubbed", "--------  -----  ---------  -------"]
    for c in checks:
        stub = "caught" if c.stubbed is not None and c.stubbed.count("failed") else "NOT caught"
        lines.append(f"{c.reference.exercise.id:<8}  {len(c.reference.outcomes):>5}  {c.reference.verdict:<9}  {stub}")
    return "\n".join(lines)

