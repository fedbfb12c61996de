"""Identical ids and text to the Hugging Face `tokenizers` library on real tokenizers and real text.

Real tokenizer files: GPT-2 (byte-level BPE), Falcon (Punctuation/Digits/Split/ByteLevel sequence),
Phi-3-mini (SentencePiece-style: Prepend/Replace normalizers, byte fallback, added tokens with flags).
Expected ids also come from llama.cpp's own tokenizer tests, a third implementation.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import shared_data
from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer import Tokenizer

tokenizers = pytest.importorskip("tokenizers")

# tokenizer folder -> name of llama.cpp's expected-ids file
REAL = {"gpt2": "gpt-2", "falcon": "falcon", "phi-3-mini": "phi-3"}


def load_pair(name: str):
    path = shared_data(f"tokenizers/{name}/tokenizer.json")
    reference = tokenizers.Tokenizer.from_file(str(path))
    reference.no_truncation()  # GPT-2's file truncates to 50 tokens; tinyinfer never truncates
    return Tokenizer.from_file(path.parent), reference


@pytest.fixture(scope="module", params=list(REAL))
def pair(request):
    return request.param, *load_pair(request.param)


def llama_cpp_cases(expected_name: str) -> list[tuple[str, list[int]]]:
    folder = shared_data("tokenizers/llamacpp-vocab-tests")
    texts = (folder / "ggml-vocab-test.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    lines = (folder / f"ggml-vocab-{expected_name}.gguf.out").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(texts) == len(lines) > 40
    return [(text, [int(x) for x in line.split()]) for text, line in zip(texts, lines)]


def assert_same(tok, reference, text: str, both_special_settings: bool = True) -> None:
    for special in (False, True) if both_special_settings else (True,):
        ids = tok.encode(text, add_special_tokens=special)
        assert ids == reference.encode(text, add_special_tokens=special).ids, text
    for skip in (True, False):
        assert tok.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip), text
    if reference.decode(ids, skip_special_tokens=False) == text:
        assert tok.decode(ids) == text


@pytest.mark.exercise("1.2")
def test_llama_cpp_test_strings(pair):
    name, tok, reference = pair
    for text, expected in llama_cpp_cases(REAL[name]):
        assert tok.encode(text, add_special_tokens=False) == expected, text
        assert_same(tok, reference, text)


@pytest.mark.parametrize("relative", ["unicode/UTF-8-demo.txt", "unicode/german.txt", "corpora/address.txt",
                                      "corpora/tinystories_sample.txt", "corpora/corpus.en", "corpora/tinyshakespeare.txt"])
def test_real_text_files(pair, relative):
    name, tok, reference = pair
    text = shared_data(relative).read_text(encoding="utf-8")[:40_000]
    assert_same(tok, reference, text, both_special_settings=False)


def test_added_and_special_tokens(pair):
    name, tok, reference = pair
    for text in ["<|endoftext|>Hello<|endoftext|> world", "<s>hi</s> <unk>", "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>",
                 "x <|user|>  \n y<|end|>", ">>TITLE<<A>>ABSTRACT<< b", "<|endoftext|><|endoftext|>"]:
        assert_same(tok, reference, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_any_unicode_text(pair, text):
    name, tok, reference = pair
    assert_same(tok, reference, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_ids_decode_like_the_reference(pair, data):
    """Random ids make invalid UTF-8 (half a character, stray byte tokens): U+FFFD where the reference puts it."""
    name, tok, reference = pair
    ids = data.draw(st.lists(st.integers(0, tok.vocab_size - 1), max_size=12))
    for skip in (True, False):
        assert tok.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


def test_lone_surrogates_encode_as_replacement_character(pair):
    name, tok, _ = pair
    assert tok.encode("a\ud800b\udfff") == tok.encode("a\ufffdb\ufffd")


def test_out_of_range_ids_are_a_clear_error(pair):
    name, tok, _ = pair
    for bad in (tok.vocab_size, -1, 10**9):
        with pytest.raises(TinyInferError, match="outside this tokenizer's vocabulary"):
            tok.decode([0, bad])
        with pytest.raises(TinyInferError, match="outside"):
            tok.token_bytes(bad)


def test_token_bytes_glue_into_the_decoded_text(pair):
    """Mid-sequence, a text's bytes are the concatenation of its tokens' bytes (the prefix space aside)."""
    name, tok, _ = pair
    text = " Hello wörld 😀\n\t<0x41> x"
    ids = tok.encode(text, add_special_tokens=False)
    glued = b"".join(tok.token_bytes(i) for i in ids).decode("utf-8")
    assert glued in (text, " " + text)  # SentencePiece-style tokenizers add a leading '▁'


@pytest.mark.parametrize("section, entry, component", [
    ("model", {"type": "Unigram", "vocab": [["a", 0.0]]}, "Unigram"),
    ("model", {"type": "WordPiece", "vocab": {"a": 0}}, "WordPiece"),
    ("normalizer", {"type": "Precompiled", "precompiled_charsmap": ""}, "Precompiled"),
    ("pre_tokenizer", {"type": "UnicodeScripts"}, "UnicodeScripts"),
    ("decoder", {"type": "CTC", "pad_token": "<pad>"}, "CTC"),
    ("post_processor", {"type": "Unknown"}, "Unknown"),
])
def test_unknown_components_are_named_in_the_error(tmp_path, section, entry, component):
    spec = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, section: entry}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(TinyInferError, match=component):
        Tokenizer.from_file(path)


def test_missing_file_and_bad_json_are_clear_errors(tmp_path):
    with pytest.raises(TinyInferError, match="does not exist"):
        Tokenizer.from_file(tmp_path / "nope.json")
    with pytest.raises(TinyInferError, match="neither tokenizer.json nor tokenizer.bin"):
        Tokenizer.from_file(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(TinyInferError, match="not valid JSON"):
        Tokenizer.from_file(tmp_path)
