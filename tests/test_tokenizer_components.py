"""Every tokenizer.json component tinyinfer implements, checked against the Hugging Face library.

The real files exercise only some settings, so each case here rewrites one part of a real tokenizer.json
(a pre-tokenizer, a flag of an added token, the post-processor...) and compares ids and decoded text on
llama.cpp's test strings and a few texts made to hit the rewritten part.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.conftest import shared_data
from tinyinfer.tokenizer import Tokenizer

tokenizers = pytest.importorskip("tokenizers")

EXTRA = ["Hello <mask> world<mask>!", " <mask> x", "a<mask>b", "<|endoftext|> <|endoftext|>x", "ABC Déjà vu", "ﬁne ①②",
         "I said 1234567 and 3.14159!!", "  leading\tand trailing  ", "<s> hi </s>", "Hello<|user|>world", "<|user|>"]


def trimmed(spec: dict, keep: int) -> dict:
    """The same tokenizer with only its first `keep` ids and the merges among them: quick to load twice."""
    added = {t["id"] for t in spec["added_tokens"]}
    spec["model"]["vocab"] = {t: i for t, i in spec["model"]["vocab"].items() if i < keep or i in added}
    vocab = spec["model"]["vocab"]
    pairs = [m.split(" ") if isinstance(m, str) else m for m in spec["model"]["merges"]]
    spec["model"]["merges"] = [f"{a} {b}" for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
    spec["truncation"] = None
    return spec


@pytest.fixture(scope="module")
def base_specs():
    return {name: trimmed(json.loads(shared_data(f"tokenizers/{name}/tokenizer.json").read_text(encoding="utf-8")), 4000)
            for name in ("gpt2", "phi-3-mini")}


@pytest.fixture(scope="module")
def texts():
    inp = shared_data("tokenizers/llamacpp-vocab-tests/ggml-vocab-test.inp").read_text(encoding="utf-8")
    return inp.split("\n__ggml_vocab_test__\n")[:-1] + EXTRA


def check(spec: dict, texts: list[str], tmp_path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    reference = tokenizers.Tokenizer.from_file(str(path))
    tok = Tokenizer.from_file(path)
    for text in texts:
        for special in (True, False):
            ids = tok.encode(text, add_special_tokens=special)
            assert ids == reference.encode(text, add_special_tokens=special).ids, text
        assert tok.decode(ids) == reference.decode(ids, skip_special_tokens=False), text
        assert tok.decode(ids, skip_special_tokens=True) == reference.decode(ids, skip_special_tokens=True), text


def byte_level(**overrides) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True, **overrides}


LLAMA3_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

GPT2_PRE_TOKENIZERS = {
    "prefix_space": byte_level(add_prefix_space=True),
    "llama3_split": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        byte_level(use_regex=False)]},
    **{f"split_{behavior}": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": behavior, "invert": False}, byte_level()]}
       for behavior in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")},
    "split_inverted": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{L}+"}, "behavior": "Removed", "invert": True}, byte_level()]},
    "digits_individual": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level()]},
    "punctuation_isolated": {"type": "Sequence", "pretokenizers": [{"type": "Punctuation", "behavior": "Isolated"}, byte_level()]},
    "punctuation_after_byte_level": {"type": "Sequence", "pretokenizers": [byte_level(), {"type": "Punctuation", "behavior": "MergedWithNext"}]},
    "whitespace": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, byte_level(use_regex=False)]},
    "whitespace_split": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, byte_level()]},
}


@pytest.mark.parametrize("case", list(GPT2_PRE_TOKENIZERS))
def test_byte_level_pre_tokenizers(base_specs, texts, tmp_path, case):
    spec = copy.deepcopy(base_specs["gpt2"])
    spec["pre_tokenizer"] = GPT2_PRE_TOKENIZERS[case]
    check(spec, texts, tmp_path)


NORMALIZERS = {
    "nfkc_lowercase": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
    "nfd_strip": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Strip", "strip_left": True, "strip_right": False}]},
    "regex_replace": {"type": "Replace", "pattern": {"Regex": r"\d"}, "content": "#"},
}


@pytest.mark.parametrize("case", list(NORMALIZERS))
def test_normalizers(base_specs, texts, tmp_path, case):
    spec = copy.deepcopy(base_specs["gpt2"])
    spec["normalizer"] = NORMALIZERS[case]
    check(spec, texts, tmp_path)


@pytest.mark.parametrize("flags", [{"lstrip": True}, {"rstrip": True}, {"lstrip": True, "rstrip": True},
                                   {"single_word": True}, {"normalized": True}, {"special": False}])
def test_added_token_flags(base_specs, texts, tmp_path, flags):
    spec = copy.deepcopy(base_specs["gpt2"])
    spec["normalizer"] = {"type": "Lowercase"}  # so that "normalized" matters: "<MASK>" matches too
    token = {"id": 50257, "content": "<mask>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True, **flags}
    spec["added_tokens"].append(token)
    check(spec, [*texts, "x <MASK> y", "<mask>word", "word <mask>", "  <mask>  "], tmp_path)


@pytest.mark.parametrize("scheme, split", [("always", True), ("first", True), ("never", True), ("always", False)])
def test_metaspace(base_specs, texts, tmp_path, scheme, split):
    spec = copy.deepcopy(base_specs["phi-3-mini"])
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}, {"type": "ByteFallback"}, {"type": "Fuse"}]}
    check(spec, texts, tmp_path)


def test_template_post_processor_adds_bos_and_eos(base_specs, texts, tmp_path):
    spec = copy.deepcopy(base_specs["phi-3-mini"])
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}, "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}},
    }
    check(spec, texts, tmp_path)
    assert Tokenizer(spec).encode("hi")[::len(Tokenizer(spec).encode("hi")) - 1] == [1, 2]


def test_merges_as_pairs_and_ignore_merges(base_specs, texts, tmp_path):
    spec = copy.deepcopy(base_specs["gpt2"])
    spec["model"]["merges"] = [m.split(" ") for m in spec["model"]["merges"]]  # the newer file format
    spec["model"]["ignore_merges"] = True  # Llama-3: a word that is a whole token skips merging
    check(spec, texts, tmp_path)


def test_unknown_token_without_byte_fallback(base_specs, texts, tmp_path):
    spec = copy.deepcopy(base_specs["phi-3-mini"])
    spec["model"]["byte_fallback"] = False  # characters outside the vocabulary become <unk> (fused)
    check(spec, texts, tmp_path)


@pytest.mark.parametrize("path", [5, None, ["tokenizer.json"]])
def test_from_file_wants_a_path(path):
    from tinyinfer.errors import TinyInferError  # noqa: PLC0415

    with pytest.raises(TinyInferError, match="takes a path"):
        Tokenizer.from_file(path)
