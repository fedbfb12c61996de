"""llama2.c tokenizer.bin: encode and decode exactly as run.c does."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import shared_data
from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer import Tokenizer


def run_c_encode(pieces: list[bytes], scores: list[float], text: str) -> list[int]:
    """A line-by-line transcription of run.c's encode(t, text, bos=1, eos=0): O(n^2), slow, obviously run.c."""
    lookup = {}
    for i, p in enumerate(pieces):
        lookup.setdefault(p, i)
    tokens = [1]
    if text:
        tokens.append(lookup[b" "])
    for char in text:
        b = char.encode("utf-8")
        tokens.extend([lookup[b]] if b in lookup else [x + 3 for x in b])
    while True:
        best_score, best_id, best_idx = -1e10, -1, -1
        for i in range(len(tokens) - 1):
            id_ = lookup.get(pieces[tokens[i]] + pieces[tokens[i + 1]], -1)
            if id_ != -1 and scores[id_] > best_score:
                best_score, best_id, best_idx = scores[id_], id_, i
        if best_idx == -1:
            return tokens
        tokens[best_idx:best_idx + 2] = [best_id]


def run_c_decode(pieces: list[bytes], ids: list[int]) -> str:
    """run.c's decode(t, prev, token) for each token, printed one after another."""
    out, prev = b"", None
    for token in ids:
        piece = pieces[token]
        if prev == 1 and piece.startswith(b" "):
            piece = piece[1:]
        if piece.startswith(b"<0x") and len(piece) == 6 and piece.endswith(b">"):
            piece = bytes([int(piece[3:5], 16)])
        out += piece
        prev = token
    return out.decode("utf-8", errors="replace")


TEXTS = ["Once upon a time, there was a little girl named Lily.", "", " ", "  two  spaces ", "Füße 😀 日本語\n\tok",
         "One day, Lily's mom said: \"Let's go!\""]


@pytest.fixture(scope="module")
def tok512():
    return Tokenizer.from_file(shared_data("models/stories260K/tok512.bin"))


def test_stories260k_tokenizer_encodes_like_run_c(tok512):
    story = shared_data("corpora/tinystories_sample.txt").read_text(encoding="utf-8")[:1500]
    for text in [*TEXTS, story]:
        assert tok512.encode(text) == run_c_encode(tok512.pieces, tok512.scores, text)
        assert tok512.encode(text, add_special_tokens=False) == run_c_encode(tok512.pieces, tok512.scores, text)[1:]


def test_stories260k_tokenizer_decodes_like_run_c(tok512):
    for text in TEXTS:
        ids = tok512.encode(text)
        assert tok512.decode(ids) == run_c_decode(tok512.pieces, ids)
        assert tok512.decode(ids, skip_special_tokens=True) == text  # the space after BOS is dropped
    assert tok512.vocab_size == 512 and tok512.bos_token_id == 1 and tok512.eos_token_id == 2
    assert tok512.token_bytes(3 + 0x41) == b"A"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=30))
def test_any_text_encodes_like_run_c_and_round_trips(tok512, text):
    ids = tok512.encode(text)
    assert ids == run_c_encode(tok512.pieces, tok512.scores, text)
    assert tok512.decode(ids, skip_special_tokens=True) == text


def test_lone_surrogates_encode_as_replacement_character(tok512):
    assert tok512.encode("a\ud800b") == tok512.encode("a\ufffdb")


def test_llama2_tokenizer_bin_matches_llama_cpp_expected_ids():
    tok = Tokenizer.from_file(shared_data("tokenizers/llama2-sentencepiece/tokenizer.bin"))
    folder = shared_data("tokenizers/llamacpp-vocab-tests")
    texts = (folder / "ggml-vocab-test.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    expected = (folder / "ggml-vocab-llama-spm.gguf.out").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(texts) == len(expected) > 40
    for text, line in zip(texts, expected):
        assert tok.encode(text, add_special_tokens=False) == [int(x) for x in line.split()], text
        assert tok.decode(tok.encode(text), skip_special_tokens=True) == text


def test_malformed_tokenizer_bin_is_a_clear_error(tmp_path):
    bad = tmp_path / "tokenizer.bin"
    bad.write_bytes(struct.pack("<ifi", 10, 0.0, 1000) + b"abc")
    with pytest.raises(TinyInferError, match="not a llama2.c tokenizer.bin"):
        Tokenizer.from_file(bad)


def test_save_of_a_tokenizer_bin_is_a_clear_error(tok512, tmp_path):
    with pytest.raises(TinyInferError, match="scores"):
        tok512.save(tmp_path / "tokenizer.json")
