"""Hints and questions, read from the chapters' own Markdown (the only place they are written).

A chapter ends with two optional sections. Each hint and each worked answer is an HTML `<details>` block, so
a reader of the page or the book sees it folded until asked for, and `course hint` / `course answer` read
the same text:

    ## Hints

    <details><summary>Hint 3.1.1</summary>

    A query at position p may look at keys 0..p. Compare two `np.arange`s.

    </details>

    ## Questions

    **Question 5.q1.** How many bytes does one token add to the KV cache of ...?

    <details><summary>Worked answer</summary>

    2 x 32 layers x 8 KV heads x 128 x 2 bytes ...

    **Answer: 131072**

    </details>

A question's answer is the number after `Answer:`; `course answer 5.q1 131072` accepts a value within
TOLERANCE of it (relative: 1.31e5 passes for 131072, 2.4 does not for 2.44).

    >>> hints = parse_hints("<details><summary>Hint 3.1.2</summary>\\n\\nsecond\\n\\n</details>")
    >>> hints["3.1"]
    ['second']
    >>> is_right(Question("5.q1", "", "", 131072.0), 131000)
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tinyinfer.errors import TinyInferError

TOLERANCE = 0.01  # relative; answers are computed numbers a reader may round to three digits
HINT = re.compile(r"<details><summary>Hint (\d+\.\d+)\.(\d+)</summary>\s*(.*?)\s*</details>", re.S)
QUESTION = re.compile(r"\*\*Question (\d+\.q\d+)\.\*\*\s*(.*?)\s*<details><summary>Worked answer</summary>\s*(.*?)\s*</details>", re.S)
ANSWER = re.compile(r"\*\*Answer: (-?[0-9][0-9_,]*(?:\.[0-9]+)?(?:e-?[0-9]+)?)")


@dataclass(frozen=True)
class Question:
    id: str  # "5.q1"
    text: str
    worked: str  # the worked answer, Markdown
    answer: float


def chapter_texts(root: Path) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((Path(root) / "chapters").glob("[0-9][0-9]-*.md"))]


def parse_hints(text: str) -> dict[str, list[str]]:
    """Exercise id -> its hints in order."""
    found: dict[str, list[tuple[int, str]]] = {}
    for exercise_id, number, body in HINT.findall(text):
        found.setdefault(exercise_id, []).append((int(number), body))
    return {i: [body for _, body in sorted(hints)] for i, hints in found.items()}


def parse_questions(text: str) -> list[Question]:
    questions = []
    for question_id, question, worked in QUESTION.findall(text):
        numbers = ANSWER.findall(worked)
        if len(numbers) != 1:
            raise TinyInferError(f"question {question_id}'s worked answer must end with one `**Answer: NUMBER**` line, found {len(numbers)}")
        questions.append(Question(question_id, question, worked, float(numbers[0].replace(",", "").replace("_", ""))))
    return questions


def all_hints(root: Path) -> dict[str, list[str]]:
    hints: dict[str, list[str]] = {}
    for text in chapter_texts(root):
        hints.update(parse_hints(text))
    return hints


def all_questions(root: Path) -> dict[str, Question]:
    return {q.id: q for text in chapter_texts(root) for q in parse_questions(text)}


def hint(root: Path, exercise_id: str, level: int) -> tuple[str, int]:
    """Hint number `level` (1-based) of an exercise, and how many it has."""
    hints = all_hints(root).get(exercise_id)
    if not hints:
        raise TinyInferError(f"exercise {exercise_id} has no hints: see `python -m tinyinfer course list` for the ids")
    if not 1 <= level <= len(hints):
        raise TinyInferError(f"exercise {exercise_id} has {len(hints)} hint(s): ask for --level 1 to {len(hints)}")
    return hints[level - 1], len(hints)


def question(root: Path, question_id: str) -> Question:
    questions = all_questions(root)
    if question_id not in questions:
        raise TinyInferError(f"no question {question_id}: the questions are {', '.join(sorted(questions)) or 'none'}")
    return questions[question_id]


def parse_value(text: str) -> float:
    try:
        return float(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise TinyInferError(f"{text!r} is not a number: give the answer as digits, e.g. 131072 or 2.44") from None


def is_right(q: Question, value: float) -> bool:
    return abs(value - q.answer) <= TOLERANCE * abs(q.answer) + 1e-12
