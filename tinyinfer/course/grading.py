"""Grade a workspace: run the exercise tests against its code and score each exercise.

The tests run in a fresh `python -m pytest` process whose working directory and PYTHONPATH are the
workspace, so `import tinyinfer` finds the workspace's copy first even when tinyinfer is installed in
editable mode (the editable finder comes after the path entries). The pytest plugin writes each test's
outcome to a JSON report, which also says where `tinyinfer` was imported from; a report naming another
copy is an error, never a grade.

An exercise passes when at least one of its tests ran and passed and none failed.
"""

from __future__ import annotations

import json
import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tinyinfer.course.exercises import Exercise
from tinyinfer.course.workspace import SHARED_DATA_ENV, read_state
from tinyinfer.errors import TinyInferError

# Where the pytest plugin (pytest_plugin.py) writes the outcomes for the grader. Defined here, not there, so
# that the CLI imports without pytest, a development dependency.
REPORT_ENV = "TINYINFER_EXERCISE_REPORT"


@dataclass
class ExerciseResult:
    exercise: Exercise
    outcomes: dict[str, str] = field(default_factory=dict)  # test nodeid -> passed/failed/skipped/not run

    def count(self, outcome: str) -> int:
        return sum(o == outcome for o in self.outcomes.values())

    @property
    def passed(self) -> bool:
        return self.count("passed") > 0 and self.count("passed") + self.count("skipped") == len(self.outcomes)

    @property
    def verdict(self) -> str:
        if not self.outcomes:
            return "no tests"
        if self.passed:
            return "passed"
        return "skipped" if self.count("skipped") == len(self.outcomes) else "failed"


@dataclass
class Grade:
    results: list[ExerciseResult]
    output: str  # what pytest printed
    exitstatus: int

    @property
    def all_passed(self) -> bool:
        return all(r.passed for r in self.results)

    def table(self) -> str:
        width = max([len(r.exercise.title) for r in self.results] + [5])
        lines = [f"{'exercise':<9} {'title':<{width}}  result", f"{'-' * 9} {'-' * width}  {'-' * 20}"]
        for r in self.results:
            lines.append(f"{r.exercise.id:<9} {r.exercise.title:<{width}}  {r.verdict} ({r.count('passed')}/{len(r.outcomes)} tests passed)")
        score = sum(r.passed for r in self.results)
        lines.append(f"score: {score}/{len(self.results)} exercises passed")
        return "\n".join(lines)


def run_exercise_tests(workspace: Path, ids: list[str], targets: list[str] | None = None, echo: bool = False,
                       first_failure: bool = False) -> tuple[dict, str]:
    """Run the tests of exercises `ids` in `workspace`: in `targets` (files or nodeids), or in every test
    file that mentions `mark.exercise` (so files without exercise tests are not even imported).

    Returns the plugin's report and pytest's output. `echo` streams the output to the terminal too;
    `first_failure` stops at the first failing test.
    """
    if importlib.util.find_spec("pytest") is None:
        raise TinyInferError("grading runs the exercise tests with pytest: install it with pip install -e '.[dev]'")
    workspace = Path(workspace).resolve()
    state = read_state(workspace)
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(workspace)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env[REPORT_ENV] = str(report_path)
        env.setdefault(SHARED_DATA_ENV, state["shared_data"])
        # A test file that cannot be imported (a syntax error in your code, say) must not stop the others.
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=short", "-rfE", "--continue-on-collection-errors"]
        command += ["-x"] if first_failure else []
        command += [f"--exercise={i}" for i in ids] + (targets or exercise_test_files(workspace) or ["tests"])
        process = subprocess.Popen(command, cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = []
        for line in process.stdout:
            output.append(line)
            if echo:
                print(line, end="", flush=True)
        process.wait()
        if not report_path.is_file():
            tail = "".join(output[-20:])
            raise TinyInferError(f"pytest could not run the tests in {workspace} (exit code {process.returncode}); its output ends with:\n{tail}")
        report = json.loads(report_path.read_text(encoding="utf-8"))
    imported = Path(report["tinyinfer_file"] or "").resolve()
    if workspace not in imported.parents:
        raise TinyInferError(f"the tests imported tinyinfer from {imported}, not from the workspace {workspace}: run the tests from the workspace")
    return report, "".join(output)


def exercise_test_files(workspace: Path) -> list[str]:
    """The test files that can hold exercise tests, relative to the workspace."""
    files = sorted(Path(workspace).glob("tests/**/test_*.py"))
    return [str(f.relative_to(workspace)) for f in files if "mark.exercise" in f.read_text(encoding="utf-8")]


def grade_workspace(workspace: Path, exercises: list[Exercise], targets: list[str] | None = None, echo: bool = False,
                    first_failure: bool = False) -> Grade:
    """Run the tests of `exercises` against `workspace` and collect each exercise's outcomes."""
    report, output = run_exercise_tests(workspace, [e.id for e in exercises], targets, echo, first_failure)
    results = {e.id: ExerciseResult(e) for e in exercises}
    for nodeid, test in report["tests"].items():
        for exercise_id in test["exercises"]:
            if exercise_id in results:
                results[exercise_id].outcomes[nodeid] = test["outcome"]
    return Grade(list(results.values()), output, report["exitstatus"])
