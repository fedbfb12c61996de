"""Training: the fast trainer learns the textbook trainer's merges, and its tokenizer.json loads in
the Hugging Face `tokenizers` library with identical ids on text it was not trained on."""

from __future__ import annotations

from collections import Counter

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import shared_data
from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer import Tokenizer
from tinyinfer.tokenizer.byte_level import GPT2_SPLIT_PATTERN
from tinyinfer.tokenizer.train import learn_merges


def textbook_merges(chunks: Counter, num_merges: int) -> list[tuple[int, int]]:
    """minbpe's loop: recount every pair of every chunk before each merge; ties go to the smallest pair."""
    words = {tuple(chunk): n for chunk, n in chunks.items()}
    merges = []
    for new_id in range(256, 256 + num_merges):
        counts = Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                counts[pair] += n
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        merged = {}
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i:i + 2] == best:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    return merges


@pytest.fixture(scope="module")
def shakespeare() -> str:
    return shared_data("corpora/tinyshakespeare.txt").read_text(encoding="utf-8")


@pytest.mark.exercise("1.1")
def test_fast_trainer_learns_the_textbook_merges(shakespeare):
    text = shakespeare[:20_000]
    chunks = Counter(c.encode("utf-8") for c in regex.findall(GPT2_SPLIT_PATTERN, text))
    assert learn_merges(chunks, 150) == textbook_merges(chunks, 150)


@pytest.mark.exercise("1.2")  # trains with 1.1's merge, but grades 1.2's encode: it needs both
def test_trained_tokenizer_matches_hf_on_held_back_text(shakespeare, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    split = len(shakespeare) * 9 // 10  # train on 90% of the megabyte, hold back the rest
    train, held_back = shakespeare[:split], shakespeare[split:]
    tok = Tokenizer.train(train, 2048, ["<|endoftext|>"])
    assert tok.vocab_size == 2048 and tok.eos_token_id == 2047
    path = tmp_path / "tokenizer.json"
    tok.save(path)
    reference = tokenizers.Tokenizer.from_file(str(path))
    for text in [held_back, "ROMEO:<|endoftext|>JULIET: ça va? 😀\n\n  x", ""]:
        ids = tok.encode(text)
        assert ids == reference.encode(text).ids
        assert tok.decode(ids) == reference.decode(ids, skip_special_tokens=False) == text
        assert Tokenizer.from_file(path).encode(text) == ids  # from_file round-trips the saved file
    assert len(tok.encode(held_back)) < 0.4 * len(held_back.encode("utf-8"))  # it did learn to compress


def test_special_tokens_are_never_split_or_learned():
    text = "ab<|endoftext|>ab<|endoftext|>" * 50
    tok = Tokenizer.train(text, 260, ["<|endoftext|>"])
    # only one pair ("a", "b") is ever seen outside the special token, so training stops after one merge
    assert tok.vocab_size == 258
    assert tok.token_bytes(256) == b"ab"
    assert tok.encode("<|endoftext|>ab") == [257, 256]


def test_too_small_vocab_is_a_clear_error():
    with pytest.raises(TinyInferError, match="at least 257"):
        Tokenizer.train("hello", 100, ["<|endoftext|>"])


@pytest.fixture(scope="module")
def small_trained(shakespeare):
    return Tokenizer.train(shakespeare[:50_000], 400, ["<|endoftext|>", "<|pad|>"])


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60))
def test_trained_tokenizer_round_trips_any_text(small_trained, text):
    ids = small_trained.encode(text)
    assert small_trained.decode(ids) == text
    assert b"".join(small_trained.token_bytes(i) for i in ids) == text.encode("utf-8")
