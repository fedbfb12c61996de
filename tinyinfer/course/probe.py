"""Which exercise regions a test runs: the grader's copy of a workspace calls `hit` on entering each region.

The grader (grading.py, `isolated_copy`) writes one call at the start of every region of its private copy,
on the line of the region's BEGIN comment, so line numbers in tracebacks stay those of the workspace:

    __import__("tinyinfer.course.probe").course.probe.hit("4.1")  # BEGIN EXERCISE 4.1: RMSNorm

The pytest plugin points `current` at a fresh set around each test and reports what it collected. A
region that a test never enters cannot make it fail, so the ids a failing test ran are the exercises it
may be waiting on.

    >>> current = start(); hit("4.1"); hit("4.1"); sorted(stop())
    ['4.1']
"""

from __future__ import annotations

current: set[str] | None = None  # the regions entered by the test running now (None: nobody is listening)


def hit(exercise_id: str) -> None:
    if current is not None:
        current.add(exercise_id)


def start() -> set[str]:
    global current
    current = set()
    return current


def stop() -> set[str]:
    global current
    ran, current = current or set(), None
    return ran


def probe_line(exercise_id: str, indent: str, marker: str) -> str:
    """The BEGIN marker line with the call in front of it."""
    return f'{indent}__import__("tinyinfer.course.probe").course.probe.hit("{exercise_id}")  {marker.strip()}'
