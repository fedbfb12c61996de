"""The course machinery: exercise markers, workspaces, grading, and the proof that grading is real.

Two kinds of tests. On a tiny fixture project (a toy `tinyinfer` package written here) they pin down the
machinery itself, including its failure modes. On the real source they prove, for every exercise marked
today, that the reference passes its tests and that a stub of it fails at least one of them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_exercise_mistakes import plant  # puts an exercise's plausible mistake in place of its reference

from tinyinfer.cli import main
from tinyinfer.course.exercises import find_exercises, parse_markers, select_exercises, stored_prerequisites
from tinyinfer.course.grading import ExerciseResult, grade_alone, grade_workspace, is_unwritten
from tinyinfer.course.verify import MIN_TESTS, Check, prerequisites, table, verify_exercises
from tinyinfer.course.workspace import start_workspace, stub_file
from tinyinfer.errors import TinyInferError

ROOT = Path(__file__).resolve().parents[1]

TOY_MODULE = '''\
"""A toy module. Text in a docstring is never a marker:
    # BEGIN EXERCISE 9.9: not a marker
"""


def add(a, b):
    """Sum of two numbers."""
    # BEGIN EXERCISE 1.1: add two numbers
    total = a + b
    return total
    # END EXERCISE 1.1


class Scaler:
    def scale(self, xs, k):
        # BEGIN EXERCISE 1.2: scale a list
        return [k * x for x in xs]
        # END EXERCISE 1.2


def negate(x):
    # BEGIN EXERCISE 2.1: negate (its test is too weak to notice a stub)
    return -x
    # END EXERCISE 2.1


def square(x):
    # BEGIN EXERCISE 2.2: square (nobody wrote its test)
    return x * x
    # END EXERCISE 2.2
'''

TOY_TESTS = '''\
import pytest

from tinyinfer.toy import Scaler, add, negate


@pytest.mark.exercise("1.1")
def test_add():
    assert add(2, 3) == 5


@pytest.mark.exercise("1.1")
def test_add_negatives():
    assert add(-2, -3) == -5


@pytest.mark.exercise("1.1", "1.2")
def test_add_then_scale():
    assert Scaler().scale([add(1, 1)], 3) == [6]


@pytest.mark.exercise("1.2")
def test_scale():
    assert Scaler().scale([1, 2], 3) == [3, 6]


@pytest.mark.exercise("1.2")
def test_scale_nothing():
    assert Scaler().scale([], 3) == []


@pytest.mark.exercise("2.1")
@pytest.mark.parametrize("x", [1, 2, 3])
def test_negate_exists(x):
    assert callable(negate)


def test_not_an_exercise():
    assert True
'''


@pytest.fixture
def toy_project(tmp_path, monkeypatch) -> Path:
    """A minimal project: a `tinyinfer` package holding the real course machinery and a toy module."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # its tests need no plugin: start pytest fast
    project = tmp_path / "project"
    package = project / "tinyinfer"
    shutil.copytree(ROOT / "tinyinfer" / "course", package / "course", ignore=shutil.ignore_patterns("__pycache__", "prerequisites.json"))
    shutil.copy(ROOT / "tinyinfer" / "errors.py", package / "errors.py")
    (package / "__init__.py").write_text('"""A toy stand-in for tinyinfer."""\n')
    (package / "toy.py").write_text(TOY_MODULE)
    (project / "tests").mkdir()
    (project / "tests" / "conftest.py").write_text(
        "from tinyinfer.course.pytest_plugin import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa\n"
    )
    (project / "tests" / "test_toy.py").write_text(TOY_TESTS)
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\nmarkers = ["exercise(id): grades an exercise"]\n')
    (project / "chapters").mkdir()
    (project / "chapters" / "01-toys.md").write_text("# Toys\n")
    return project


def replace_region(workspace: Path, source_root: Path, exercise_id: str) -> None:
    """Copy the reference lines of an exercise from `source_root` into the workspace, between its markers."""
    reference = {e.id: e for e in find_exercises(source_root)}[exercise_id]
    stubbed = {e.id: e for e in find_exercises(workspace)}[exercise_id]
    body = (source_root / reference.path).read_text().splitlines()[reference.begin : reference.end - 1]
    lines = (workspace / stubbed.path).read_text().splitlines()
    lines[stubbed.begin : stubbed.end - 1] = body
    (workspace / stubbed.path).write_text("\n".join(lines) + "\n")


def write_region(workspace: Path, exercise_id: str, body: list[str]) -> None:
    """Put `body` (lines without the region's indentation) between an exercise's markers in the workspace."""
    exercise = {e.id: e for e in find_exercises(workspace)}[exercise_id]
    lines = (workspace / exercise.path).read_text().splitlines()
    lines[exercise.begin : exercise.end - 1] = [exercise.indent + line for line in body]
    (workspace / exercise.path).write_text("\n".join(lines) + "\n")


# --- markers ---------------------------------------------------------------------------------------------


def test_markers_are_found_with_their_place(toy_project):
    exercises = find_exercises(toy_project)
    assert [(e.id, e.title, str(e.path), e.begin, e.end, e.indent) for e in exercises[:2]] == [
        ("1.1", "add two numbers", "tinyinfer/toy.py", 8, 11, "    "),
        ("1.2", "scale a list", "tinyinfer/toy.py", 16, 18, "        "),
    ]
    assert [e.id for e in exercises] == ["1.1", "1.2", "2.1", "2.2"]  # 9.9 in the docstring is no marker
    assert [e.id for e in select_exercises(exercises, chapters=[2])] == ["2.1", "2.2"]
    assert [e.id for e in select_exercises(exercises, ids=["1.2"], chapters=[2])] == ["1.2", "2.1", "2.2"]


def test_ids_sort_numerically():
    source = "".join(f"def f{n}():\n    # BEGIN EXERCISE 3.{n}: f\n    pass\n    # END EXERCISE 3.{n}\n" for n in (10, 2))
    exercises = parse_markers(source, Path("x.py"))
    assert sorted(e.sort_key for e in exercises) == [(3, 2), (3, 10)]


BAD_SOURCES = {
    "never closed": "def f():\n    # BEGIN EXERCISE 1.1: f\n    pass\n",
    "no matching BEGIN": "def f():\n    pass\n    # END EXERCISE 1.1\n",
    "closes exercise 1.1": "def f():\n    # BEGIN EXERCISE 1.1: f\n    pass\n    # END EXERCISE 1.2\n",
    "cannot nest": "def f():\n    # BEGIN EXERCISE 1.1: f\n    # BEGIN EXERCISE 1.2: g\n    pass\n    # END EXERCISE 1.2\n    # END EXERCISE 1.1\n",
    "malformed exercise marker": "def f():\n    # BEGIN EXERCISE 1: f\n    pass\n    # END EXERCISE 1\n",
    "shares its line with code": "def f():\n    x = 1  # BEGIN EXERCISE 1.1: f\n    pass\n    # END EXERCISE 1.1\n",
    "marks no code": "def f():\n    # BEGIN EXERCISE 1.1: f\n\n    # END EXERCISE 1.1\n    pass\n",
    "not at the indentation": "def f():\n    # BEGIN EXERCISE 1.1: f\n    if True:\n        pass\n        # END EXERCISE 1.1\n",
}


@pytest.mark.parametrize("problem", BAD_SOURCES)
def test_bad_markers_are_clear_errors(problem):
    with pytest.raises(TinyInferError, match=problem) as e:
        parse_markers(BAD_SOURCES[problem], Path("tinyinfer/x.py"))
    assert "tinyinfer/x.py:" in str(e.value)  # names the place


def test_an_id_used_twice_is_an_error(toy_project):
    (toy_project / "tinyinfer" / "other.py").write_text("def g():\n    # BEGIN EXERCISE 1.2: again\n    pass\n    # END EXERCISE 1.2\n")
    with pytest.raises(TinyInferError, match=r"1.2 is marked twice, at tinyinfer/other.py:2 and tinyinfer/toy.py:16"):
        find_exercises(toy_project)


def test_unknown_ids_and_chapters_are_errors(toy_project):
    exercises = find_exercises(toy_project)
    with pytest.raises(TinyInferError, match="no exercise 1.7"):
        select_exercises(exercises, ids=["1.7"])
    with pytest.raises(TinyInferError, match="chapter 5 has no exercises"):
        select_exercises(exercises, chapters=[5])
    with pytest.raises(TinyInferError, match="not an exercise id"):
        select_exercises(exercises, ids=["one"])


# --- workspaces and grading ------------------------------------------------------------------------------


def test_stub_replaces_the_region_at_its_indentation(toy_project):
    exercises = find_exercises(toy_project)
    stubbed = stub_file(TOY_MODULE, exercises[:2], toy_project)
    assert stubbed.splitlines()[6:13] == [
        '    """Sum of two numbers."""',
        "    # BEGIN EXERCISE 1.1: add two numbers",
        '    raise NotImplementedError("Exercise 1.1: add two numbers — see chapters/01-toys.md")',
        "    # END EXERCISE 1.1",
        "",
        "",
        "class Scaler:",
    ]
    assert '        raise NotImplementedError("Exercise 1.2: scale a list — see chapters/01-toys.md")' in stubbed
    assert "return -x" in stubbed  # exercises not chosen stay as they are
    compile(stubbed, "toy.py", "exec")


def test_workspace_is_graded_against_its_own_copy(toy_project, tmp_path):
    workspace = start_workspace(toy_project, tmp_path / "ws", select_exercises(find_exercises(toy_project), ids=["1.1"]))
    assert (workspace / "README.md").read_text().count("1.1") >= 1
    grade = grade_workspace(workspace, select_exercises(find_exercises(workspace), ids=["1.1", "1.2"]))
    # The installed tinyinfer has no `toy` module: these outcomes can only come from the workspace's copy.
    assert [(r.exercise.id, r.verdict, r.count("passed"), len(r.outcomes)) for r in grade.results] == [
        ("1.1", "failed", 0, 3),
        ("1.2", "failed", 2, 3),  # test_add_then_scale grades both and calls the stubbed add
    ]
    assert not grade.all_passed
    assert "score: 0/2 exercises passed" in grade.table()
    assert "NotImplementedError: Exercise 1.1: add two numbers — see chapters/01-toys.md" in grade.output
    replace_region(workspace, toy_project, "1.1")
    grade = grade_workspace(workspace, select_exercises(find_exercises(workspace), ids=["1.1", "1.2"]))
    assert grade.all_passed and "score: 2/2 exercises passed" in grade.table()


def test_an_exercise_is_graded_with_the_reference_of_the_others(toy_project, tmp_path):
    """1.2's tests call 1.1's add: with 1.1 still a stub, a correct 1.2 passes, and the table says it needs 1.1."""
    workspace = start_workspace(toy_project, tmp_path / "ws", find_exercises(toy_project))  # everything stubbed
    replace_region(workspace, toy_project, "1.2")
    exercises = {e.id: e for e in find_exercises(workspace)}
    assert is_unwritten(workspace, exercises["1.1"]) and not is_unwritten(workspace, exercises["1.2"])
    grade = grade_alone(workspace, [exercises["1.2"]], toy_project)
    assert (grade.results[0].verdict, grade.results[0].ran, grade.results[0].unwritten) == ("passed", {"1.1"}, {"1.1"})
    assert re.search(r"1\.2 .* passed \(3/3 tests passed\) +1\.1°", grade.table())
    assert "graded with the reference solution in its place" in grade.table()
    assert "return a + b" not in (workspace / "tinyinfer" / "toy.py").read_text()  # the workspace is left as it was
    # Graded together, a wrong 1.1 fails, and is not what 1.2 is graded with.
    write_region(workspace, "1.1", ["return a - b"])
    grade = grade_alone(workspace, [exercises["1.1"], exercises["1.2"]], toy_project)
    assert [(r.exercise.id, r.verdict) for r in grade.results] == [("1.1", "failed"), ("1.2", "passed")]
    assert "1.1°" not in grade.table()  # 1.1 is written, just wrong


def test_grading_refuses_tests_that_import_another_tinyinfer(toy_project, tmp_path):
    """If the tests end up importing some other copy of tinyinfer, the grade would be about that copy."""
    other = tmp_path / "elsewhere"
    shutil.copytree(toy_project / "tinyinfer", other / "tinyinfer")
    conftest = toy_project / "tests" / "conftest.py"
    conftest.write_text(f"import sys\nsys.path.insert(0, {str(other)!r})\n" + conftest.read_text())
    workspace = start_workspace(toy_project, tmp_path / "ws", [])
    with pytest.raises(TinyInferError, match="imported tinyinfer from .*elsewhere"):
        grade_workspace(workspace, find_exercises(workspace)[:1])


def test_a_test_file_that_cannot_be_imported_is_named_not_skipped(toy_project, tmp_path):
    """pytest goes on past a file that fails to import; the grade must say so, and the proof must refuse."""
    (toy_project / "tests" / "test_broken.py").write_text(
        "import pytest\nraise RuntimeError('broken at import')\n\n@pytest.mark.exercise('1.1')\ndef test_never():\n    pass\n")
    workspace = start_workspace(toy_project, tmp_path / "ws", [])
    grade = grade_workspace(workspace, select_exercises(find_exercises(workspace), ids=["1.1"]))
    assert grade.uncollected == ["tests/test_broken.py"] and grade.results[0].verdict == "passed"  # the others still ran
    assert "not graded, the file could not be imported (pytest's error is above): tests/test_broken.py" in grade.table()
    with pytest.raises(TinyInferError, match="test_broken.py could not be imported in the reference workspace"):
        verify_exercises(toy_project, tmp_path / "verify")


def test_workspace_must_be_new_and_outside_the_project(toy_project, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(TinyInferError, match="not empty"):
        start_workspace(toy_project, tmp_path / "used", [])
    with pytest.raises(TinyInferError, match="inside the project"):
        start_workspace(toy_project, toy_project / "ws", [])


def test_pytest_exercise_option_selects_by_marker(toy_project):
    def selected(*options):
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *options],
                             cwd=toy_project, env={**_env(), "PYTHONPATH": str(toy_project)}, capture_output=True, text=True)
        return run.returncode, sorted(re.findall(r"::(test_\w+)", run.stdout)), run.stdout + run.stderr

    assert selected("--exercise", "1.2")[1] == ["test_add_then_scale", "test_scale", "test_scale_nothing"]
    assert selected("--exercise", "2.1", "--exercise", "1")[1] == [
        "test_add", "test_add_negatives", "test_add_then_scale", "test_negate_exists", "test_negate_exists", "test_negate_exists",
        "test_scale", "test_scale_nothing"]
    code, _, output = selected("--exercise", "x.1")
    assert code != 0 and "give an exercise id like 3.1" in output


def test_verify_flags_weak_and_missing_tests(toy_project, tmp_path):
    checks = {c.reference.exercise.id: c for c in verify_exercises(toy_project, tmp_path / "verify")}
    assert checks["1.1"].problem is None and checks["1.2"].problem is None
    assert "still pass" in checks["2.1"].problem
    assert "has no tests" in checks["2.2"].problem
    assert re.search(r"2\.1 +3 +passed +NOT caught", table(list(checks.values())))
    two_tests = Check(ExerciseResult(checks["1.1"].reference.exercise, {"a": "passed", "b": "passed"}))
    assert f"has 2 test(s): give it at least {MIN_TESTS}" in two_tests.problem


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


# --- the real source ---------------------------------------------------------------------------------------

@pytest.mark.slow  # runs every exercise test twice (reference and stubbed): its cost is those tests' cost
def test_every_marked_exercise_is_graded_for_real(tmp_path):
    """The reference passes every exercise test; each exercise, stubbed alone, fails one of its own tests."""
    if not find_exercises(ROOT):
        pytest.fail("no exercise is marked in tinyinfer/ yet")
    checks = verify_exercises(ROOT, tmp_path)
    problems = [c.problem for c in checks if c.problem]
    assert not problems, table(checks) + "\n" + "\n".join(problems)
    assert all(len(c.reference.outcomes) >= MIN_TESTS for c in checks)
    assert prerequisites(checks) == stored_prerequisites(), (
        "what the exercise tests run has changed: `python -m tinyinfer course prerequisites` stores it again")


@pytest.mark.slow  # grades two exercises through the CLI, each in its own pytest process
def test_an_exercise_passes_while_those_it_needs_are_stubs(tmp_path, capsys):
    """The issue's proofs: 8.2 passes with only 8.1 stubbed; a correct 5.2 passes with everything stubbed."""
    only = tmp_path / "only-8.1"
    assert main(["course", "start", str(only), "--only", "8.1"]) == 0
    capsys.readouterr()
    assert main(["course", "check", "8.2", "--workspace", str(only), "--quiet"]) == 0
    assert re.search(r"8\.2 .* passed .* 8\.1°", capsys.readouterr().out)
    everything = tmp_path / "everything"
    assert main(["course", "start", str(everything)]) == 0
    row = next(line for line in (everything / "README.md").read_text().splitlines() if line.startswith("| 5.2 |"))
    assert row.endswith(" | " + ", ".join(stored_prerequisites()["5.2"]) + " |") and "4.1" in row
    replace_region(everything, ROOT, "5.2")
    capsys.readouterr()
    assert main(["course", "check", "5.2", "--workspace", str(everything), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"5\.2 .* passed .*4\.1°", out) and "score: 1/1 exercises passed" in out


def test_every_exercise_is_listed_in_its_chapter():
    """The stub message sends the student to chapters/NN-*.md: it must exist and end by listing the exercise."""
    for exercise in find_exercises(ROOT):
        chapters = sorted((ROOT / "chapters").glob(f"{exercise.chapter:02d}-*.md"))
        assert len(chapters) == 1, f"exercise {exercise.id} needs exactly one chapters/{exercise.chapter:02d}-*.md, found {chapters}"
        text = chapters[0].read_text()
        assert "## Exercises" in text, f"{chapters[0].name} has no '## Exercises' section"
        listed = text[text.rindex("## Exercises"):]
        assert re.search(rf"(?<![\d.]){re.escape(exercise.id)}(?![\d])", listed), f"{chapters[0].name} does not list exercise {exercise.id}"


@pytest.mark.slow  # grades exercise 1.1 twice, with its real (hypothesis and training) tests
def test_newcomer_path(tmp_path, capsys):
    """course start, course check fails on the stub, the reference body makes it pass."""
    exercises = find_exercises(ROOT)
    if not exercises:
        pytest.fail("no exercise is marked in tinyinfer/ yet")
    first = "1.1" if any(e.id == "1.1" for e in exercises) else exercises[0].id
    workspace = tmp_path / "my-course"
    assert main(["course", "start", str(workspace)]) == 0
    assert [e.id for e in find_exercises(workspace)] == [e.id for e in exercises]
    assert "raise NotImplementedError" in (workspace / exercises[0].path).read_text()
    capsys.readouterr()
    assert main(["course", "check", first, "--workspace", str(workspace), "--quiet"]) == 1
    assert re.search(rf"{re.escape(first)} .* failed", capsys.readouterr().out)
    replace_region(workspace, ROOT, first)
    assert main(["course", "check", first, "--workspace", str(workspace), "--quiet"]) == 0
    assert "score: 1/1 exercises passed" in capsys.readouterr().out


def test_check_names_a_missing_workspace_and_bad_ids(tmp_path, capsys):
    assert main(["course", "check", "--workspace", str(tmp_path)]) == 1
    assert "is not a course workspace" in capsys.readouterr().err
    assert main(["course", "check", "three", "--workspace", str(tmp_path)]) == 1
    assert "'three' is neither an exercise id (like 3.1) nor a chapter number (like 3)" in capsys.readouterr().err


@pytest.mark.slow  # grades one exercise in its own pytest process
def test_a_plausible_wrong_answer_fails(tmp_path):
    """Beyond stubs: an answer that runs and is almost right is graded failed by `course check` (that each
    exercise's planted mistake fails its tests is shown in tests/test_exercise_mistakes.py)."""
    exercise_id = "3.1"
    workspace = start_workspace(ROOT, tmp_path / "ws", [])
    exercise = {e.id: e for e in find_exercises(workspace)}[exercise_id]
    plant(workspace, exercise)
    grade = grade_alone(workspace, [exercise], ROOT)
    assert grade.results[0].verdict == "failed" and grade.results[0].count("failed") >= 1
