"""Grade a workspace: run the exercise tests against its code and score each exercise.

The tests run in a fresh `python -m pytest` process whose working directory and PYTHONPATH are the
workspace, so `import tinyinfer` finds the workspace's copy first even when tinyinfer is installed in
editable mode (the editable finder comes after the path entries). The pytest plugin writes each test's
outcome to a JSON report, which also says where `tinyinfer` was imported from; a report naming another
copy is an error, never a grade.

An exercise passes when at least one of its tests ran and passed and none failed.

`course check` grades each exercise *alone* (`grade_alone`): in a private copy of the workspace where
every other exercise holds the reference solution, so a correct 5.2 passes even while 4.1 is still a stub,
and a wrong 4.1 cannot fail 5.2. Exercises graded together keep the student's code for all of them; one
whose failing tests entered another failing exercise's region (the copy is probed, see probe.py) is graded
again with that one's reference in place. What each exercise's tests ran is its list of prerequisites.
"""

from __future__ import annotations

import json
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tinyinfer.course.exercises import Exercise, find_exercises, parse_id, stored_prerequisites
from tinyinfer.course.probe import probe_line
from tinyinfer.course.workspace import COPIED, NOT_COPIED, SHARED_DATA_ENV, STATE_FILE, read_state
from tinyinfer.errors import TinyInferError

# Where the pytest plugin (pytest_plugin.py) writes the outcomes for the grader. Defined here, not there, so
# that the CLI imports without pytest, a development dependency.
REPORT_ENV = "TINYINFER_EXERCISE_REPORT"


@dataclass
class ExerciseResult:
    exercise: Exercise
    outcomes: dict[str, str] = field(default_factory=dict)  # test nodeid -> passed/failed/skipped/not run
    ran: set[str] = field(default_factory=set)  # the other exercises whose regions its tests entered
    unwritten: set[str] = field(default_factory=set)  # those of `ran` still a stub in the workspace

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
    uncollected: list[str]  # test files that could not be imported (their tests are missing from `results`)

    @property
    def all_passed(self) -> bool:
        return all(r.passed for r in self.results)

    def table(self) -> str:
        width = max([len(r.exercise.title) for r in self.results] + [5])
        lines = [f"{'exercise':<9} {'title':<{width}}  {'result':<30} needs", f"{'-' * 9} {'-' * width}  {'-' * 30} {'-' * 5}"]
        for r in self.results:
            result = f"{r.verdict} ({r.count('passed')}/{len(r.outcomes)} tests passed)"
            needs = " ".join(i + ("°" if i in r.unwritten else "") for i in sorted(r.ran, key=parse_id)) or "-"
            lines.append(f"{r.exercise.id:<9} {r.exercise.title:<{width}}  {result:<30} {needs}")
        if any(r.unwritten for r in self.results):
            lines.append("° not written in this workspace yet: graded with the reference solution in its place")
        if self.uncollected:
            lines.append(f"not graded, the file could not be imported (pytest's error is above): {', '.join(self.uncollected)}")
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
                results[exercise_id].ran |= set(test.get("ran", [])) - {exercise_id}
    return Grade(list(results.values()), output, report["exitstatus"], report.get("uncollected", []))


# --- grading one exercise at a time ----------------------------------------------------------------------


def region_body(root: Path, exercise: Exercise) -> list[str]:
    """The lines between an exercise's two markers, without the region's indentation."""
    lines = (Path(root) / exercise.path).read_text(encoding="utf-8").splitlines()
    return [line[len(exercise.indent):] if line.startswith(exercise.indent) else line for line in lines[exercise.begin : exercise.end - 1]]


def is_unwritten(root: Path, exercise: Exercise) -> bool:
    """Whether the region still holds only the stub that `course start` wrote."""
    body = [line for line in region_body(root, exercise) if line.strip()]
    return len(body) == 1 and body[0].startswith(f'raise NotImplementedError("Exercise {exercise.id}:')


def reference_bodies(reference_root: Path, exercises: list[Exercise]) -> dict[str, list[str]]:
    """Each exercise's reference lines, from the project the grader runs from."""
    reference = {e.id: e for e in find_exercises(reference_root)}
    missing = [e.id for e in exercises if e.id not in reference]
    if missing:
        raise TinyInferError(f"exercise(s) {', '.join(missing)} of the workspace are not marked in {reference_root}: "
                             "grade with the tinyinfer the workspace was started from")
    return {e.id: region_body(reference_root, reference[e.id]) for e in exercises}


def isolated_copy(workspace: Path, dest: Path, own: set[str], references: dict[str, list[str]]) -> Path:
    """Copy `workspace` to `dest`, every exercise not in `own` holding its reference, every region probed."""
    for name in COPIED + (STATE_FILE,):
        source = Path(workspace) / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=NOT_COPIED)
        elif source.is_file():
            shutil.copy2(source, dest / name)
    by_file: dict[Path, list[Exercise]] = {}
    for exercise in find_exercises(workspace):
        by_file.setdefault(exercise.path, []).append(exercise)
    for path, exercises in by_file.items():
        lines = (dest / path).read_text(encoding="utf-8").splitlines()
        for e in sorted(exercises, key=lambda e: e.begin, reverse=True):  # bottom up keeps line numbers valid
            if e.id not in own:
                lines[e.begin : e.end - 1] = [e.indent + line if line.strip() else line for line in references[e.id]]
            lines[e.begin - 1] = probe_line(e.id, e.indent, lines[e.begin - 1])
        (dest / path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def grade_isolated(workspace: Path, exercises: list[Exercise], references: dict[str, list[str]], echo: bool = False) -> Grade:
    """One grading run of `exercises` (the student's code) in a probed copy where all others hold the reference."""
    with tempfile.TemporaryDirectory(prefix="tinyinfer-grade-") as tmp:
        copy = isolated_copy(workspace, Path(tmp), {e.id for e in exercises}, references)
        return grade_workspace(copy, exercises, echo=echo)


def grade_alone(workspace: Path, exercises: list[Exercise], reference_root: Path, echo: bool = False) -> Grade:
    """Grade each of `exercises` as if every other exercise of the workspace were solved (see the top)."""
    workspace = Path(workspace).resolve()
    everything = find_exercises(workspace)
    references = reference_bodies(reference_root, everything)
    unwritten = {e.id for e in everything if is_unwritten(workspace, e)}
    final: dict[str, ExerciseResult] = {}
    pending, outputs, status, uncollected = list(exercises), [], 0, set()
    while pending:
        if echo:
            print(f"-- grading {' '.join(e.id for e in pending)} with the reference solution of every other exercise", flush=True)
        grade = grade_isolated(workspace, pending, references, echo)
        outputs.append(grade.output)
        status = max(status, grade.exitstatus)
        uncollected |= set(grade.uncollected)
        failing = {r.exercise.id for r in grade.results if not r.passed}
        retry = [r for r in grade.results if r.exercise.id in failing and r.exercise.id not in unwritten
                 and r.ran & (failing - {r.exercise.id})]  # it may have failed in another one's code
        final.update({r.exercise.id: r for r in grade.results if r not in retry})
        if retry and len(retry) == len(pending):  # each waits on another: grade them one at a time
            for r in retry:
                final[r.exercise.id] = grade_isolated(workspace, [r.exercise], references, echo).results[0]
            retry = []
        pending = [r.exercise for r in retry]
    results = [final[e.id] for e in exercises]
    needs = stored_prerequisites(reference_root)  # what the tests run when no stub stops them early
    for r in results:
        r.ran |= set(needs.get(r.exercise.id, []))
        r.unwritten = r.ran & unwritten
    return Grade(results, "".join(outputs), status, sorted(uncollected))
