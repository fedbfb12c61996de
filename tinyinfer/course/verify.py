"""Prove that grading is real, for every exercise marked in the source.

1. A workspace with nothing stubbed must pass every exercise test, and every exercise must have at least
   MIN_TESTS tests. (Grading the reference through a workspace also proves the workspace holds all that
   the tests need.) The run is probed, so it also measures each exercise's prerequisites: the other
   exercises its tests run, which a stub of them would fail. They are stored in PREREQUISITES (for the
   table in a workspace's README) and must match what is measured.
2. For each exercise, a workspace with only that exercise stubbed must fail at least one of its own tests:
   an exercise whose tests pass on a stub grades nothing.

Each stub run collects only the test files of its exercise and stops at the first failure (one is
enough), and two run at a time.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from tinyinfer.course.exercises import PREREQUISITES, find_exercises, parse_id
from tinyinfer.course.grading import ExerciseResult, grade_isolated, grade_workspace
from tinyinfer.course.workspace import start_workspace
from tinyinfer.errors import TinyInferError

MIN_TESTS = 3


@dataclass
class Check:
    reference: ExerciseResult
    stubbed: ExerciseResult | None = None  # None when the exercise has no tests to run

    @property
    def problem(self) -> str | None:
        exercise = self.reference.exercise
        if not self.reference.outcomes:
            return f"exercise {exercise.id} ({exercise.where()}) has no tests: mark its tests @pytest.mark.exercise(\"{exercise.id}\")"
        if len(self.reference.outcomes) < MIN_TESTS:
            return f"exercise {exercise.id} has {len(self.reference.outcomes)} test(s): give it at least {MIN_TESTS}, one of them failing a plausible wrong answer"
        if not self.reference.passed:
            return f"the reference solution of exercise {exercise.id} does not pass its tests ({self.reference.verdict}): fix the code or the tests"
        if self.stubbed is None or not self.stubbed.count("failed"):
            return f"with exercise {exercise.id} stubbed, all its tests still pass or skip: add a test that calls {exercise.where()}"
        return None


def verify_exercises(root: Path, workdir: Path, jobs: int = 2, progress: bool = False) -> list[Check]:
    """Run both proofs for every exercise of the project at `root`, using `workdir` for the workspaces."""
    checks = reference_checks(root, workdir)
    testable = [c for c in checks if c.reference.outcomes]

    def stub_one(check: Check) -> None:
        exercise = check.reference.exercise
        workspace = start_workspace(root, Path(workdir) / f"stub-{exercise.id}", [exercise])
        graded = grade_workspace(workspace, [exercise], targets=_test_files(check.reference), first_failure=True)
        check.stubbed = graded.results[0]

    if not checks:
        return []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(tqdm(pool.map(stub_one, testable), total=len(testable), desc="stubbed exercises", disable=not progress))
    return checks


def reference_checks(root: Path, workdir: Path) -> list[Check]:
    """Proof 1, probed: every exercise test on the reference, with the regions each test entered."""
    exercises = find_exercises(root)
    if not exercises:
        return []
    reference = start_workspace(root, Path(workdir) / "reference", [])
    grade = grade_isolated(reference, exercises, references={})
    if grade.uncollected:  # their tests would silently count as missing, and their prerequisites as none
        raise TinyInferError(f"test file(s) {', '.join(grade.uncollected)} could not be imported in the reference workspace "
                             f"(a test file must not fail when imported from a workspace); pytest printed:\n{grade.output[-3000:]}")
    return [Check(r) for r in grade.results]


def prerequisites(checks: list[Check]) -> dict[str, list[str]]:
    """Exercise id -> the other exercises its tests ran, as measured."""
    return {c.reference.exercise.id: sorted(c.reference.ran, key=parse_id) for c in checks}


def write_prerequisites(measured: dict[str, list[str]]) -> None:
    PREREQUISITES.write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")


def _test_files(result: ExerciseResult) -> list[str]:
    return sorted({nodeid.split("::")[0] for nodeid in result.outcomes})


def table(checks: list[Check]) -> str:
    lines = ["exercise  tests  reference  stubbed", "--------  -----  ---------  -------"]
    for c in checks:
        stub = "caught" if c.stubbed is not None and c.stubbed.count("failed") else "NOT caught"
        lines.append(f"{c.reference.exercise.id:<8}  {len(c.reference.outcomes):>5}  {c.reference.verdict:<9}  {stub}")
    return "\n".join(lines)

