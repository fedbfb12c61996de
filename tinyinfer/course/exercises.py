"""Find the exercise regions marked in the package source, and check that the markers are well formed.

A region is a pair of whole-line comments at the same indentation, around the reference solution:

    <indent># BEGIN EXERCISE 3.1: causal attention scores
    <indent>...reference lines...
    <indent># END EXERCISE 3.1

Only real comments count (the scan uses Python's tokenizer, so text inside a docstring is never a
marker). A comment that looks like a marker but is malformed, an unmatched or nested pair, an empty
region, or an id used twice is an error that names the file and line, never silently ignored.

    >>> parse_id("3.12")
    (3, 12)
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

from tinyinfer.errors import TinyInferError

PACKAGE = "tinyinfer"
BEGIN = re.compile(r"# BEGIN EXERCISE (\d+\.\d+): (\S.*?)\s*$")
END = re.compile(r"# END EXERCISE (\d+\.\d+)\s*$")
LOOKS_LIKE_MARKER = re.compile(r"#\s*(BEGIN|END)\s*EXERCISE", re.IGNORECASE)
# Exercise id -> the other exercises its tests run (and so a stub of which fails them), as measured by
# `python -m tinyinfer course prerequisites`; tests/test_course.py checks it is current.
PREREQUISITES = Path(__file__).with_name("prerequisites.json")
FORMAT_HINT = "write `# BEGIN EXERCISE N.M: title` ... `# END EXERCISE N.M` on their own lines, at the same indentation"


@dataclass(frozen=True)
class Exercise:
    """One marked region: `begin` and `end` are the 1-based line numbers of its two marker comments."""

    id: str
    title: str
    path: Path  # relative to the project root, e.g. tinyinfer/attention.py
    begin: int
    end: int
    indent: str

    @property
    def chapter(self) -> int:
        return parse_id(self.id)[0]

    @property
    def sort_key(self) -> tuple[int, int]:
        return parse_id(self.id)

    def where(self) -> str:
        return f"{self.path}:{self.begin}"


def parse_id(exercise_id: str) -> tuple[int, int]:
    """"3.12" -> (3, 12): chapter and number, for sorting and chapter selection."""
    match = re.fullmatch(r"(\d+)\.(\d+)", exercise_id)
    if not match:
        raise TinyInferError(f"{exercise_id!r} is not an exercise id: write it as CHAPTER.NUMBER, e.g. 3.1")
    return int(match[1]), int(match[2])


def find_exercises(root: Path) -> list[Exercise]:
    """All exercises under `root`/tinyinfer, sorted by id; raises TinyInferError on a malformed marker."""
    root = Path(root)
    found: dict[str, Exercise] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        for exercise in parse_markers(path.read_text(encoding="utf-8"), path.relative_to(root)):
            if exercise.id in found:
                raise TinyInferError(
                    f"exercise {exercise.id} is marked twice, at {found[exercise.id].where()} and "
                    f"{exercise.where()}: give each region its own id"
                )
            found[exercise.id] = exercise
    return sorted(found.values(), key=lambda e: e.sort_key)


def parse_markers(source: str, path: Path) -> list[Exercise]:
    """The exercises marked in one file's source text (`path` is only used in messages)."""
    lines = source.splitlines()
    exercises, open_region = [], None  # open_region: (id, title, line, indent) of a BEGIN not yet closed
    for line_no, comment in _comments(source, path):
        text = lines[line_no - 1]
        if not LOOKS_LIKE_MARKER.match(comment):
            continue
        where = f"{path}:{line_no}"
        if text.strip() != comment:
            raise TinyInferError(f"exercise marker at {where} shares its line with code: {FORMAT_HINT}")
        indent = text[: len(text) - len(text.lstrip())]
        begin, end = BEGIN.match(comment), END.match(comment)
        if begin:
            if open_region:
                raise TinyInferError(
                    f"exercise marker at {where} opens {begin[1]} inside exercise {open_region[0]} "
                    f"(opened at {path}:{open_region[2]}): regions cannot nest; close the first one before"
                )
            open_region = (begin[1], begin[2], line_no, indent)
        elif end:
            if not open_region:
                raise TinyInferError(f"`# END EXERCISE {end[1]}` at {where} has no matching BEGIN above it")
            region_id, title, begin_no, begin_indent = open_region
            if end[1] != region_id:
                raise TinyInferError(f"`# END EXERCISE {end[1]}` at {where} closes exercise {region_id} (opened at line {begin_no}): use the same id")
            if indent != begin_indent:
                raise TinyInferError(f"`# END EXERCISE {region_id}` at {where} is not at the indentation of its BEGIN (line {begin_no}): {FORMAT_HINT}")
            if not any(l.strip() for l in lines[begin_no:line_no - 1]):
                raise TinyInferError(f"exercise {region_id} at {path}:{begin_no} marks no code: put the reference solution between the markers")
            exercises.append(Exercise(region_id, title, Path(path), begin_no, line_no, indent))
            open_region = None
        else:
            raise TinyInferError(f"malformed exercise marker at {where}: {comment!r}; {FORMAT_HINT}")
    if open_region:
        raise TinyInferError(f"exercise {open_region[0]} opened at {path}:{open_region[2]} is never closed: add `# END EXERCISE {open_region[0]}`")
    return exercises


def _comments(source: str, path: Path):
    """(line number, comment text) of every real comment in a Python source."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string.strip()
    except (tokenize.TokenError, SyntaxError) as e:
        raise TinyInferError(f"cannot read {path} as Python ({e}): fix the syntax error first") from e


def split_selection(items: list[str]) -> tuple[list[str], list[int]]:
    """Exercise ids and chapter numbers, as typed after `course check`: ["3.1", "4"] -> (["3.1"], [4])."""
    for item in items:
        if not re.fullmatch(r"\d+(\.\d+)?", item):
            raise TinyInferError(f"{item!r} is neither an exercise id (like 3.1) nor a chapter number (like 3)")
    return [i for i in items if "." in i], [int(i) for i in items if "." not in i]


def select_exercises(exercises: list[Exercise], ids=(), chapters=()) -> list[Exercise]:
    """The exercises named by id ("3.1") or by chapter (3); all of them when nothing is named."""
    ids, chapters = list(ids), [int(c) for c in chapters]
    if not ids and not chapters:
        return list(exercises)
    known = {e.id for e in exercises}
    for exercise_id in ids:
        parse_id(exercise_id)
        if exercise_id not in known:
            raise TinyInferError(f"no exercise {exercise_id}: the marked exercises are {', '.join(sorted(known, key=parse_id)) or 'none'}")
    for chapter in chapters:
        if not any(e.chapter == chapter for e in exercises):
            raise TinyInferError(f"chapter {chapter} has no exercises: see `python -m tinyinfer course list`")
    return [e for e in exercises if e.id in ids or e.chapter in chapters]


def chapter_file(root: Path, chapter: int) -> str:
    """The chapter text an exercise points to, e.g. "chapters/03-attention.md", relative to the root."""
    matches = sorted((Path(root) / "chapters").glob(f"{chapter:02d}-*.md"))
    return f"chapters/{matches[0].name}" if matches else f"chapters/{chapter:02d}-*.md"


def stored_prerequisites(root: Path | None = None) -> dict[str, list[str]]:
    """What PREREQUISITES holds (that of the project at `root` when given); empty when never measured."""
    path = PREREQUISITES if root is None else Path(root) / PACKAGE / "course" / PREREQUISITES.name
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
