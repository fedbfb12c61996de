"""Hints and questions: every exercise has hints, every chapter has questions, each question's
answer is what the project's own code computes, and `course hint` / `course answer` print them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tinyinfer.attention import causal_mask
from tinyinfer.cli import main
from tinyinfer.course.exercises import find_exercises, stored_prerequisites
from tinyinfer.course.study import TOLERANCE, Question, all_hints, all_questions, is_right, parse_questions
from tinyinfer.distributed.communicator import ring_all_reduce_bytes
from tinyinfer.engine.autoscale import desired_replicas
from tinyinfer.errors import TinyInferError
from tinyinfer.memory import kv_bytes_per_token
from tinyinfer.norms import rms_norm
from tinyinfer.safetensors_io import bf16_to_f32
from tinyinfer.sampling import apply_top_p
from tinyinfer.speculative import residual
from tinyinfer.tokenizer.bpe import merge

ROOT = Path(__file__).resolve().parents[1]


def softmax(x):
    e = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return e / e.sum()


# Each answer recomputed, with the project's functions where it has one.
COMPUTED = {
    "0.q1": lambda: 2 * TOLERANCE * all_questions(ROOT)["5.q1"].answer,
    "0.q2": lambda: len(stored_prerequisites()["5.2"]),
    "0.q3": lambda: (causal_mask(4, 0) == 0).sum() - np.tril(np.ones((4, 4)), k=-1).sum(),  # 10 - 6 (keys below the diagonal)
    "1.q1": lambda: 256 + 1000,
    "1.q2": lambda: len(merge([97] * 5, (97, 97), 256)),
    "2.q1": lambda: 7e9 * 2 / 2**30,
    "2.q2": lambda: 3.35e12 / (7e9 * 2),
    "2.q3": lambda: float(bf16_to_f32(np.array([0x4049], dtype=np.uint16))[0]),
    "2.q4": lambda: max(400 * 6e-6, 2.48e9 / 3.35e12) / max(6e-6, 2.48e9 / 3.35e12),  # eager step / graph step
    "3.q1": lambda: 4096 * 4096 * 4 / 2**20,
    "3.q2": lambda: sum(10_000 - 4096 < p <= 10_000 for p in range(10_001)),
    "3.q3": lambda: (1000 * 1001 / 2) / 1000**2,
    "4.q1": lambda: float(rms_norm(np.array([[3.0, 4.0]]), np.ones(2), 0.0)[0, 0]),
    "4.q2": lambda: 2 * math.pi / 10_000 ** (-2 * 63 / 128),
    "4.q3": lambda: 3 * 4096 * 14336,
    "5.q1": lambda: kv_bytes_per_token(32, 8, 128, 2),
    "5.q2": lambda: kv_bytes_per_token(32, 8, 128, 2) * 8192 / 2**30,
    "5.q3": lambda: 100 + sum(100 + t - 1 for t in range(2, 101)),
    "6.q1": lambda: softmax([2, 1, 0])[0],
    "6.q2": lambda: softmax([4, 2, 0])[0],
    "6.q3": lambda: int(np.isfinite(apply_top_p(np.log(np.array([0.5, 0.3, 0.15, 0.05])), 0.9)).sum()),
    "7.q1": lambda: 2 / 8,
    "7.q2": lambda: softmax([1, 0, 0, 0])[0] / softmax([1, 0, 0, 0])[:2].sum(),
    "8.q1": lambda: len(range(13, 30)),
    "8.q2": lambda: sum("ab".startswith(token) for token in ["a", "ab", "abc", "b"]),  # a prefix of "ab" keeps the parser alive
    "9.q1": lambda: -(-1000 // 16) * 16 - 1000,
    "9.q2": lambda: 9 * (2048 // 16),
    "10.q1": lambda: -(-2000 // (512 - 3)),
    "10.q2": lambda: 1 - (10 + 20 + 30 + 100) / (4 * 100),
    "11.q1": lambda: sum(0.8**i for i in range(5)),
    "11.q2": lambda: 1 - np.minimum([0.5, 0.4, 0.1], [0.3, 0.2, 0.5]).sum(),
    "12.q1": lambda: 4 + 16 / 32,
    "12.q2": lambda: round(0.1 / (0.635 / 127)),
    "13.q1": lambda: 8 * (4096 + 4096),
    "13.q2": lambda: 16 / math.sqrt(8),
    "14.q1": lambda: ring_all_reduce_bytes(1000, 4),
    "14.q2": lambda: (4 - 1) / (16 + 4 - 1),
    "15.q1": lambda: desired_replicas([{"tinyinfer:num_requests_waiting": 12.0, "tinyinfer:kv_cache_usage_perc": 0.5}] * 2),
    "15.q2": lambda: 140e9 / 2e9,
    "16.q1": lambda: math.log(2048),
    "16.q2": lambda: -math.log(1 / (1 + math.exp(0.0))),
    "16.q3": lambda: 0.2 + (2000 + 200) * 0.025,
}


def test_every_exercise_has_hints():
    hints = all_hints(ROOT)
    missing = [e.id for e in find_exercises(ROOT) if len(hints.get(e.id, [])) < 2]
    assert not missing, f"exercises with fewer than two hints (add them to their chapter's ## Hints): {missing}"


def test_every_chapter_has_questions():
    questions = all_questions(ROOT)
    chapters = {int(path.name[:2]) for path in (ROOT / "chapters").glob("[0-9][0-9]-*.md")}
    assert chapters >= {e.chapter for e in find_exercises(ROOT)} | {0}
    for chapter in sorted(chapters):
        count = sum(q.split(".")[0] == str(chapter) for q in questions)
        assert count >= 2, f"chapter {chapter} has {count} question(s): give it 2 or 3"


@pytest.mark.parametrize("question_id", sorted(COMPUTED))
def test_each_answer_is_what_the_code_computes(question_id):
    question = all_questions(ROOT)[question_id]
    computed = float(COMPUTED[question_id]())
    assert is_right(question, computed), f"{question_id}: the chapter says {question.answer}, the code computes {computed}"
    assert question.answer == pytest.approx(computed, rel=2e-3)  # the stated answer is given to 3-4 digits


def test_every_question_is_recomputed_here():
    assert sorted(all_questions(ROOT)) == sorted(COMPUTED), "recompute each new question's answer in COMPUTED"


def test_a_worked_answer_needs_exactly_one_answer_line():
    text = "**Question 1.q9.** Why?\n\n<details><summary>Worked answer</summary>\n\nBecause.\n\n</details>"
    with pytest.raises(TinyInferError, match="1.q9's worked answer must end with one"):
        parse_questions(text)
    assert not is_right(Question("x", "", "", 2.44), 2.4) and is_right(Question("x", "", "", 2.44), 2.441)


def test_hint_and_answer_commands(capsys):
    assert main(["course", "hint", "3.1"]) == 0
    out = capsys.readouterr().out
    assert "Hint 1 of 2 for exercise 3.1" in out and "course hint 3.1 --level 2" in out
    assert main(["course", "hint", "3.1", "--level", "3"]) == 1
    assert "has 2 hint(s)" in capsys.readouterr().err
    assert main(["course", "answer", "5.q1"]) == 0
    assert "KV cache of Llama-3-8B" in capsys.readouterr().out
    assert main(["course", "answer", "5.q1", "131072"]) == 0
    assert "Right: 5.q1 is 131072" in capsys.readouterr().out
    assert main(["course", "answer", "5.q1", "65536"]) == 1
    assert "is not the answer to 5.q1" in capsys.readouterr().out
    assert main(["course", "answer", "5.q9", "1"]) == 1
    assert "no question 5.q9" in capsys.readouterr().err
    assert main(["course", "answer", "5.q1", "lots"]) == 1
    assert "'lots' is not a number" in capsys.readouterr().err
