"""pytest support for exercise tests: the `--exercise` option and a report for the grader.

A test grades exercise N.M when it carries `@pytest.mark.exercise("N.M")` (several ids may be given, or
several markers). `pytest --exercise 3.1 --exercise 4` keeps only the tests of exercise 3.1 and of every
exercise of chapter 4. When the environment variable named by REPORT_ENV holds a path, the outcome of
every collected exercise test is written there as JSON at the end of the session, together with the file
`tinyinfer` was imported from (the grader checks it is the workspace's copy). tests/conftest.py imports
these hooks.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from tinyinfer.course import probe
from tinyinfer.course.grading import REPORT_ENV
ID_OR_CHAPTER = re.compile(r"\d+(\.\d+)?")


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--exercise", action="append", default=[], metavar="ID",
        help="run only the tests that grade exercise ID (e.g. 3.1), or every exercise of a chapter (e.g. 3)",
    )


def pytest_configure(config) -> None:
    for wanted in config.getoption("--exercise"):
        if not ID_OR_CHAPTER.fullmatch(wanted):
            raise pytest.UsageError(f"--exercise {wanted!r}: give an exercise id like 3.1 or a chapter number like 3")
    config.pluginmanager.register(OutcomeRecorder(), "tinyinfer-exercise-outcomes")


def exercise_ids(item) -> list[str]:
    """The exercise ids a test grades, from all its `exercise` markers."""
    return [str(arg) for marker in item.iter_markers("exercise") for arg in marker.args]


def _wanted(ids: list[str], wanted: list[str]) -> bool:
    return any(i == w or i.split(".")[0] == w for i in ids for w in wanted)


def pytest_collection_modifyitems(config, items) -> None:
    wanted = config.getoption("--exercise")
    if wanted:
        keep = [item for item in items if _wanted(exercise_ids(item), wanted)]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


class OutcomeRecorder:
    """Collects the outcome of every exercise test and writes them where REPORT_ENV says."""

    def __init__(self):
        self.tests: dict[str, dict] = {}  # nodeid -> {"exercises": [...], "outcome": ...}
        self.uncollected: list[str] = []  # test files that could not be imported

    @pytest.hookimpl(trylast=True)  # after the selection above
    def pytest_collection_modifyitems(self, items) -> None:
        for item in items:
            if exercise_ids(item):
                self.tests[item.nodeid] = {"exercises": exercise_ids(item), "outcome": "not run", "ran": []}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        """Collect the exercise regions the test enters (only a grader's probed copy reports any)."""
        probe.start()
        yield
        ran = probe.stop()
        if item.nodeid in self.tests:
            self.tests[item.nodeid]["ran"] = sorted(ran)

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.uncollected.append(report.nodeid)

    def pytest_runtest_logreport(self, report) -> None:
        entry = self.tests.get(report.nodeid)
        if entry is None or entry["outcome"] == "failed":
            return
        if report.failed:
            entry["outcome"] = "failed"
        elif report.skipped:
            entry["outcome"] = "skipped"
        elif report.when == "call":
            entry["outcome"] = "passed"

    def pytest_sessionfinish(self, exitstatus) -> None:
        path = os.environ.get(REPORT_ENV)
        if not path:
            return
        report = {
            "tinyinfer_file": getattr(sys.modules.get("tinyinfer"), "__file__", None),
            "exitstatus": int(exitstatus),
            "tests": self.tests,
            "uncollected": self.uncollected,
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
