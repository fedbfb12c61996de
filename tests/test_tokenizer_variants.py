"""Tokenizer parity on tokenizer.json files never seen before, across the settings the format allows.

The real tokenizers (test_tokenizer_parity.py) use only a few of those settings. Here small BPE tokenizers
are trained with the Hugging Face `tokenizers` library on real text (one byte-level, one SentencePiece-style
with byte fallback, one over characters with an unknown token, one with '##' prefixes and '</w>' suffixes);
each case then rewrites parts of the file (normalizer, pre-tokenizer, model flags, added tokens,
post-processor, decoder) and compares tinyinfer to the library: ids with and without special tokens, decoded text with and without skip_special_tokens, and
the streaming detokenizer's pieces joined. The texts are made to be hard: emoji and CJK split across tokens,
combining marks, whitespace runs, digits, punctuation runs, added tokens inside words, the empty string.
"""

from __future__ import annotations

import copy
import json
import random

import pytest

from tests.conftest import shared_data
from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer import StreamingDetokenizer, Tokenizer

tokenizers = pytest.importorskip("tokenizers")

SPECIALS = ["<unk>", "<s>", "</s>", "<|endoftext|>"]  # ids 0..3 in every trained vocabulary
HARD_TEXTS = [
    "", " ", "  ", "\t", "\n", "\n\n\n", " \t \n ", "Hello world", " Hello world ", "  leading", "trailing  ",
    "😀", "🦙😀👍🏽", "a😀b", "👨\u200d👩\u200d👧\u200d👦 family", "日本語のテキスト", "中文测试 text", "한국어",
    "e\u0301 combining \u0303\u0323", "café naïve Ünïcödé", "ﬁne ①② Ⅻ ½ x²³", "1234567890", "3.14159 and 1,000",
    "!!!???...", "---===+++", "a\tb\nc\r\nd", "   \t\t  \n\n  x  \n", "Don't you'll we've I'm", "ΟΔΟΣ ΣΊΣΥΦΟΣ",
    "İstanbul ǅ", "\u00a0nbsp\u2003em\u3000ideo", "\x1c\x1d\x1f sep", "\u200bzero width", "a  b   c    d",
    "ROMEO: What light through yonder window breaks?", "▁already▁metaspace", "Ġhello ##ing </w>", "a\x00b\ufffd",
]
# Added tokens of every kind; "<|e" overlaps "<|endoftext|>" and "<|end|>", "日本" sits inside words. No two
# normalize to the same text: the reference then picks one at random (it walks a hash map).
ADDED = [
    {"content": "<mask>", "lstrip": True, "rstrip": False, "single_word": False, "normalized": True, "special": False},
    {"content": "special word", "lstrip": False, "rstrip": False, "single_word": True, "normalized": True, "special": False},
    {"content": "日本", "lstrip": False, "rstrip": False, "single_word": False, "normalized": True, "special": False},
    {"content": "<|e", "lstrip": False, "rstrip": True, "single_word": False, "normalized": True, "special": False},
    {"content": "[SPECIAL]", "lstrip": False, "rstrip": False, "single_word": False, "normalized": False, "special": True},
    {"content": "<|end|>", "lstrip": True, "rstrip": True, "single_word": False, "normalized": False, "special": True},
    {"content": "<Extra>", "lstrip": False, "rstrip": False, "single_word": True, "normalized": True, "special": True},
]
WITH_ADDED = ["<s> hi </s>", "hi<s>there", "x <mask> y", " <mask> ", "a<mask>b", "[SPECIAL]x[SPECIAL]", "<|endoftext|>",
              "t<|endoftext|> <|end|>x", "<|e  <|end|>  <|e", "a special word here", "aspecial word", "日本語 and 日本",
              "<Extra> <extra>", "x<EXTRA>", "<extra>x", "<unk> <0x41>"]


def random_texts(count: int, seed: int = 0) -> list[str]:
    """Short texts glued from the hard pieces above, so that their joins are hard too."""
    rng = random.Random(seed)
    parts = [*HARD_TEXTS, *WITH_ADDED, *(t["content"] for t in ADDED), "Hello", "é", "😀", "日", "7", "!", "'s", "_", "\u0301"]
    return ["".join(rng.choice(parts) for _ in range(rng.randint(2, 6))) for _ in range(count)]


TEXTS = HARD_TEXTS + WITH_ADDED + random_texts(30)


# ---- the trained tokenizers ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus() -> list[str]:
    english = shared_data("corpora/corpus.en").read_text(encoding="utf-8")[:50_000]
    unicode_text = shared_data("unicode/UTF-8-demo.txt").read_text(encoding="utf-8")
    return (english + unicode_text + " 😀🦙 日本語 中文 café e\u0301 12345 3.14 !!! ---\t\t\n" * 10).splitlines()


def train(corpus: list[str], model, trainer_options: dict, normalizer=None, pre_tokenizer=None) -> dict:
    """The tokenizer.json (as a dict) of a BPE tokenizer trained with the reference library."""
    from tokenizers import trainers
    reference = tokenizers.Tokenizer(model)
    reference.normalizer, reference.pre_tokenizer = normalizer, pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False, **trainer_options)
    reference.train_from_iterator(corpus, trainer)
    return json.loads(reference.to_str())


@pytest.fixture(scope="module")
def bases(corpus) -> dict[str, dict]:
    from tokenizers import models, normalizers, pre_tokenizers
    byte_level = train(corpus, models.BPE(), {"initial_alphabet": pre_tokenizers.ByteLevel.alphabet()},
                       pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=False))
    byte_level["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    llama = train(corpus, models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True), {"limit_alphabet": 200},
                  normalizer=normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]))
    vocab = llama["model"]["vocab"]
    vocab.update({f"<0x{b:02X}>": len(vocab) + b for b in range(256)})  # the byte tokens byte_fallback needs
    chars = train(corpus, models.BPE(unk_token="<unk>"), {"limit_alphabet": 80}, pre_tokenizer=pre_tokenizers.Whitespace())
    prefixed = train(corpus, models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>"),
                     {"limit_alphabet": 80, "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>"},
                     pre_tokenizer=pre_tokenizers.WhitespaceSplit())
    return {"byte_level": byte_level, "llama": llama, "chars": chars, "prefixed": prefixed}


def variant(base: dict, *, added: list[dict] = ADDED, model: dict | None = None, **parts) -> dict:
    """`base` with some top-level parts replaced, model options merged, and `added` tokens given the next ids."""
    spec = copy.deepcopy(base)
    spec.update(parts)
    spec["model"].update(model or {})
    next_id = max(spec["model"]["vocab"].values()) + 1
    for entry in added:
        known = spec["model"]["vocab"].get(entry["content"])
        spec["added_tokens"].append({"id": next_id if known is None else known, **entry})
        next_id += known is None
    return spec


def streamed(tok: Tokenizer, ids: list[int], skip: bool) -> str:
    stream = StreamingDetokenizer(tok, skip_special_tokens=skip)
    return "".join(stream.push(i) for i in ids) + stream.flush()


def check(spec: dict, tmp_path, texts: list[str] = TEXTS) -> None:
    """tinyinfer and the reference agree on `texts`, and on random ids, for the tokenizer.json `spec`."""
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    reference, tok = tokenizers.Tokenizer.from_file(str(path)), Tokenizer.from_file(path)
    rng = random.Random(0)
    random_ids = [rng.sample(range(reference.get_vocab_size()), 6) for _ in range(20)]
    encoded = [reference.encode(text, add_special_tokens=add).ids for text in texts for add in (True, False)]
    for i, text in enumerate(texts):
        for add, expected in zip((True, False), encoded[2 * i:2 * i + 2]):
            assert tok.encode(text, add_special_tokens=add) == expected, (text, add)
    for ids in encoded + random_ids:
        for skip in (False, True):
            text = reference.decode(ids, skip_special_tokens=skip)
            assert tok.decode(ids, skip_special_tokens=skip) == text, (ids, skip)
            assert streamed(tok, ids, skip) == text, (ids, skip)


# ---- the cases ----------------------------------------------------------------------------------------

def byte_level(**options) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True, **options}


def split(pattern: dict, behavior: str, invert: bool = False) -> dict:
    return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}


def then_bytes(*steps: dict) -> dict:
    """A pre-tokenizer sequence ending in ByteLevel without its own regex (as Llama-3 and Qwen do)."""
    return {"type": "Sequence", "pretokenizers": [*steps, byte_level(use_regex=False)]}


def llama_decoder(strip: int = 1) -> dict:
    return {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                             {"type": "ByteFallback"}, {"type": "Fuse"},
                                             {"type": "Strip", "content": " ", "start": strip, "stop": 0}]}


def metaspace(scheme: str, split_words: bool) -> dict:
    return {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split_words}


def template(single: str) -> dict:
    """TemplateProcessing from a template string like "<s> $A </s>"."""
    items = [{"Sequence": {"id": "A", "type_id": 0}} if word == "$A" else {"SpecialToken": {"id": word, "type_id": 0}}
             for word in single.split()]
    ids = {"<s>": 1, "</s>": 2}
    return {"type": "TemplateProcessing", "single": items, "pair": items,
            "special_tokens": {name: {"id": name, "ids": [i], "tokens": [name]} for name, i in ids.items()}}


def added(content: str, **flags) -> dict:
    return {"content": content, "lstrip": False, "rstrip": False, "single_word": False, "normalized": False,
            "special": False, **flags}


BERT_NORMALIZER = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None, "lowercase": True}
CASES = {
    # byte-level BPE (GPT-2 style)
    "byte_level": ("byte_level", {}),
    "byte_level_prefix_space": ("byte_level", {"pre_tokenizer": byte_level(add_prefix_space=True)}),
    "byte_level_no_regex": ("byte_level", {"pre_tokenizer": byte_level(use_regex=False)}),
    "byte_level_prefix_space_no_regex": ("byte_level", {"pre_tokenizer": byte_level(add_prefix_space=True, use_regex=False, trim_offsets=False)}),
    "byte_level_processors": ("byte_level", {"post_processor": {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}, template("<s> $A </s>")]}}),
    "roberta_processing": ("byte_level", {"post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                                                             "trim_offsets": True, "add_prefix_space": True}}),
    "merges_as_strings": ("byte_level", {"model": {"merges": "strings"}}),
    "ignore_merges": ("byte_level", {"model": {"ignore_merges": True}}),
    "no_added_tokens": ("byte_level", {"added": []}),
    "whitespace_run_tokens": ("byte_level", {"added": [added(" " * n, normalized=True) for n in range(2, 9)] + [added("\t\t")]}),
    # normalizers
    **{f"normalizer_{kind}": ("byte_level", {"normalizer": {"type": kind}}) for kind in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Nmt")},
    "normalizer_strip": ("byte_level", {"normalizer": {"type": "Strip", "strip_left": True, "strip_right": True}}),
    "normalizer_strip_right": ("byte_level", {"normalizer": {"type": "Strip", "strip_left": False, "strip_right": True}}),
    "normalizer_replace_regex": ("byte_level", {"normalizer": {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "}}),
    "normalizer_replace_word": ("byte_level", {"normalizer": {"type": "Replace", "pattern": {"Regex": r"o\w"}, "content": "0"}}),
    "normalizer_prepend": ("byte_level", {"normalizer": {"type": "Prepend", "prepend": "__"}}),
    "normalizer_accents": ("byte_level", {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]}}),
    "normalizer_bert": ("byte_level", {"normalizer": BERT_NORMALIZER}),
    "normalizer_byte_level": ("byte_level", {"normalizer": {"type": "ByteLevel"}, "pre_tokenizer": None}),
    "normalizer_bert_options": ("byte_level", {"normalizer": {**BERT_NORMALIZER, "handle_chinese_chars": False, "strip_accents": True, "lowercase": False}}),
    # pre-tokenizers before ByteLevel
    **{f"split_{behavior}": ("byte_level", {"pre_tokenizer": then_bytes(split({"String": " "}, behavior))})
       for behavior in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")},
    **{f"split_regex_inverted_{behavior}": ("byte_level", {"pre_tokenizer": then_bytes(split({"Regex": r"\w+"}, behavior, invert=True))})
       for behavior in ("Removed", "Isolated", "Contiguous")},
    "split_regex_newlines": ("byte_level", {"pre_tokenizer": then_bytes(split({"Regex": r"\s*[\r\n]+|\s+(?!\S)"}, "MergedWithNext"))}),
    "split_line_ends": ("byte_level", {"pre_tokenizer": then_bytes(split({"Regex": r"\s+$"}, "Isolated"), split({"Regex": r"^\s*\h"}, "MergedWithNext"))}),
    "split_deepseek_v3": ("byte_level", {"pre_tokenizer": then_bytes(
        split({"Regex": r"\p{N}{1,3}"}, "Isolated"), split({"Regex": "[一-龥\u3040-ゟ゠-ヿ]+"}, "Isolated"),
        split({"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
                       " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "Isolated"))}),
    "split_bloom": ("byte_level", {"pre_tokenizer": then_bytes(split({"Regex": " ?[^(\\s|[.,!?…。，、।۔،])]+"}, "Isolated"))}),
    "digits": ("byte_level", {"pre_tokenizer": then_bytes({"type": "Digits", "individual_digits": False})}),
    "digits_individual": ("byte_level", {"pre_tokenizer": then_bytes({"type": "Digits", "individual_digits": True})}),
    "punctuation": ("byte_level", {"pre_tokenizer": then_bytes({"type": "Punctuation", "behavior": "Isolated"})}),
    "punctuation_contiguous": ("byte_level", {"pre_tokenizer": then_bytes({"type": "Punctuation", "behavior": "Contiguous"})}),
    "whitespace": ("byte_level", {"pre_tokenizer": then_bytes({"type": "Whitespace"})}),
    "whitespace_split": ("byte_level", {"pre_tokenizer": then_bytes({"type": "WhitespaceSplit"})}),
    "bert_pre_tokenizer": ("byte_level", {"pre_tokenizer": then_bytes({"type": "BertPreTokenizer"})}),
    "char_delimiter": ("byte_level", {"pre_tokenizer": then_bytes({"type": "CharDelimiterSplit", "delimiter": "e"})}),
    "fixed_length": ("byte_level", {"pre_tokenizer": then_bytes({"type": "FixedLength", "length": 3})}),
    "nested_sequence": ("byte_level", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True}]},
        byte_level(add_prefix_space=True)]}}),
    # SentencePiece-style BPE: the Llama-2 layout, then Metaspace in each setting
    "llama": ("llama", {"decoder": llama_decoder(), "post_processor": template("<s> $A")}),
    "llama_eos_template": ("llama", {"decoder": llama_decoder(), "post_processor": template("<s> $A </s>")}),
    "llama_no_byte_fallback": ("llama", {"decoder": llama_decoder(), "model": {"byte_fallback": False}}),
    "llama_unfused_unk": ("llama", {"decoder": llama_decoder(), "model": {"byte_fallback": False, "fuse_unk": False}}),
    **{f"metaspace_{scheme}_{split_words}": ("llama", {
        "normalizer": None, "pre_tokenizer": metaspace(scheme, split_words),
        "decoder": {"type": "Sequence", "decoders": [metaspace(scheme, split_words), {"type": "ByteFallback"}, {"type": "Fuse"}]}})
       for scheme in ("always", "first", "never") for split_words in (True, False)},
    "mistral": ("llama", {"normalizer": None, "pre_tokenizer": metaspace("first", False), "decoder": llama_decoder(),
                          "post_processor": template("<s> $A")}),
    "gemma": ("llama", {"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
                        "decoder": {"type": "Sequence", "decoders": llama_decoder()["decoders"][:3]}}),
    "metaspace_after_split": ("llama", {"normalizer": None, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, metaspace("first", True)]}, "decoder": metaspace("first", True)}),
    "metaspace_after_strip": ("llama", {"normalizer": {"type": "Strip", "strip_left": True, "strip_right": False},
                                        "pre_tokenizer": metaspace("first", True), "decoder": metaspace("first", True)}),
    "metaspace_after_whitespace_split": ("llama", {"normalizer": {"type": "NFKC"}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, metaspace("first", False)]}, "decoder": metaspace("first", False)}),
    "metaspace_after_bert": ("llama", {"normalizer": BERT_NORMALIZER, "pre_tokenizer": metaspace("first", True),
                                       "decoder": metaspace("first", True)}),
    # a character-level model with an unknown token, and the prefix/suffix options with their decoders
    "chars_no_decoder": ("chars", {}),
    "chars_fuse_unk": ("chars", {"model": {"fuse_unk": True}, "decoder": {"type": "Fuse"}}),
    "chars_bert": ("chars", {"normalizer": BERT_NORMALIZER, "pre_tokenizer": {"type": "BertPreTokenizer"},
                             "post_processor": {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]}}),
    "prefix_suffix_word_piece": ("prefixed", {"decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True}}),
    "prefix_suffix_bpe_decoder": ("prefixed", {"decoder": {"type": "BPEDecoder", "suffix": "</w>"}}),
    "prefix_suffix_ignore_merges": ("prefixed", {"decoder": {"type": "BPEDecoder", "suffix": "</w>"}, "model": {"ignore_merges": True}}),
}


def build_case(bases: dict, name: str) -> dict:
    base, parts = CASES[name]
    parts = copy.deepcopy(parts)
    model = parts.pop("model", {})
    if model.get("merges") == "strings":  # the older file format: "a b" rather than ["a", "b"]
        model["merges"] = [" ".join(pair) for pair in bases[base]["model"]["merges"]]
    return variant(bases[base], model=model, **parts)


@pytest.mark.parametrize("name", list(CASES))
def test_variant_matches_reference(bases, tmp_path, name):
    check(build_case(bases, name), tmp_path)


# ---- one test per mismatch found, each on the text that showed it ---------------------------------------

def test_lowercase_lowers_each_character_alone(bases, tmp_path):
    """Rust lowers one char at a time, so a word-final capital sigma becomes 'σ', not str.lower's 'ς'."""
    check(variant(bases["byte_level"], normalizer={"type": "Lowercase"}), tmp_path, ["ΟΔΟΣ ΣΊΣΥΦΟΣ", "ΑΣ."])


def test_strip_removes_unicode_white_space_only(bases, tmp_path):
    """U+001C..U+001F are str.isspace() but not White_Space, so Strip keeps them."""
    check(variant(bases["byte_level"], normalizer={"type": "Strip", "strip_left": True, "strip_right": True}),
          tmp_path, ["\x1c\x1d x \x1e\x1f", "\u3000 x \u2003"])


def test_split_regex_word_class_is_onigurumas(bases, tmp_path):
    """tokenizer.json regexes run on Oniguruma, whose \\w holds ²³¹¼½¾ but not the emoji joiner U+200D."""
    spec = variant(bases["byte_level"], pre_tokenizer=then_bytes(split({"Regex": r"\w+"}, "Removed")))  # words dropped
    check(spec, tmp_path, ["👨\u200d👩\u200d👧 x²³ ½", "a\u200cb"])


def test_split_regex_anchors_and_escapes_are_onigurumas(bases, tmp_path):
    """In Oniguruma (Ruby syntax) ^ and $ match at every line, \\h is a hex digit, \\Z may stand before
    a final newline, and \\x{263A} names a code point."""
    for pattern in (r"\s+$", r"^\s*", r"\h+", r"[\h_]+", r"\s+\Z", r"\x{263a}"):
        spec = variant(bases["byte_level"], pre_tokenizer=then_bytes(split({"Regex": pattern}, "Isolated")))
        check(spec, tmp_path, ["a  \nb  \n", "ab\n\n", "cafe 12 ☺ x\n", "a\r\nb  "])


def test_whitespace_pre_tokenizer_word_class_is_rust_regexs(bases, tmp_path):
    """Whitespace's own \\w+|[^\\w\\s]+ runs on Rust's regex crate instead: there U+200D is a word character."""
    check(variant(bases["chars"]), tmp_path, ["👨\u200d👩\u200d👧 x²³ ½", "a\u200cb"])


def test_normalized_added_token_decodes_as_its_normalized_text(bases, tmp_path):
    """The reference decodes a normalized added token as normalizer(content) ('__<mask>' under Prepend), and
    skip_special_tokens keeps a special one whose text the normalizer changed ('<Extra>' -> '<extra>')."""
    check(variant(bases["byte_level"], normalizer={"type": "Prepend", "prepend": "__"}), tmp_path, ["<mask>", "x <mask> y"])
    check(variant(bases["byte_level"], normalizer={"type": "Lowercase"}), tmp_path, ["<Extra>", "a <EXTRA> b"])


def test_metaspace_first_marks_only_text_at_offset_zero(bases, tmp_path):
    """prepend_scheme "first" prepends '▁' to the piece at offset 0 of the input only: not when a Strip
    normalizer or a Removed split dropped the text in front of it."""
    for normalizer, pre_tokenizers in (({"type": "Strip", "strip_left": True, "strip_right": True}, []),
                                       (None, [{"type": "WhitespaceSplit"}])):
        spec = variant(bases["llama"], normalizer=normalizer, decoder=metaspace("first", True),
                       pre_tokenizer={"type": "Sequence", "pretokenizers": [*pre_tokenizers, metaspace("first", True)]})
        check(spec, tmp_path, [" Hello world", "\t\tHello", "Hello", "<s> Hello"])


def test_added_token_after_one_that_took_its_whitespace(bases, tmp_path):
    """Matches are found first, stripped after: a later match that begins in the whitespace an rstrip took
    still counts (its id follows), unless its whole text was that whitespace."""
    for later in (added("  "), added("  ", lstrip=True), added(" w"), added(" w", lstrip=True), added("world", lstrip=True)):
        spec = variant(bases["byte_level"], added=[added("Hello", rstrip=True), later])
        check(spec, tmp_path, ["Hello  world", "Hello world", "Hello  world  Hello\t\tworld"])  # 3 spaces: the reference panics


def test_added_token_listed_twice_keeps_one_id_and_its_last_flags(bases, tmp_path):
    """The reference gives a repeated content the id of its first listing and the flags of its last."""
    spec = variant(bases["byte_level"], added=[added("<x>"), added("<x>", rstrip=True, single_word=True),
                                               added("<s>", lstrip=True, normalized=True)])
    check(spec, tmp_path, ["a <x>  b", "a<x> b", "hi <s>  there", "hi<s>there"])


def test_split_regex_with_empty_matches(bases, tmp_path):
    """Oniguruma reports no empty match right where a match ended; the regex module does ('x*' on 'axb')."""
    for behavior in ("Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous", "Removed"):
        spec = variant(bases["chars"], pre_tokenizer=split({"Regex": "x*"}, behavior, invert=True))
        check(spec, tmp_path, ["axb", "xxaxx text", "abc"])


@pytest.mark.parametrize("fuse_unk", [False, True])
def test_unknown_token_waits_for_the_next_known_character(tmp_path, fuse_unk):
    """With byte tokens for only some bytes, an <unk> comes after the byte-fallback characters that follow
    it, and fuse_unk joins unknown characters across them, as in the reference."""
    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "<0xC3>": 4, "<0xA9>": 5, "<0x41>": 6}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": fuse_unk, "byte_fallback": True, "ignore_merges": False,
                      "vocab": vocab, "merges": [["a", "b"]]}}
    check(spec, tmp_path, ["xé", "xéy", "xxéa", "axéxb", "😀é😀", "xAx", "ab"])


def test_byte_fallback_reads_byte_tokens_as_the_reference_does(bases, tmp_path):
    """ByteFallback takes any six-character <0xNN> with hex digits of either case ('<0xc3>') as a byte."""
    spec = variant(bases["llama"], decoder=llama_decoder(), added=[added(t) for t in ("<0xc3>", "<0xa9>", "<0x+A>", "<0xG1>")])
    tok = Tokenizer(spec)
    ids = [tok.token_to_id[t] for t in ("<0xc3>", "<0xa9>", "<0x+A>", "<0xG1>", "<0xC3>", "<0xA9>", "a")]
    reference = tokenizers.Tokenizer.from_str(json.dumps(spec))
    for skip in (False, True):
        assert tok.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)
        assert streamed(tok, ids, skip) == reference.decode(ids, skip_special_tokens=skip)


def test_token_bytes_agree_with_decode_in_mid_sequence(bases, tmp_path):
    """token_bytes(i) is exactly what token i adds between two others, under every decoder that rewrites
    single tokens (added tokens included: '<mask>' under a Prepend normalizer adds b'__<mask>')."""
    word_piece = variant(bases["prefixed"], decoder={"type": "WordPiece", "prefix": "##", "cleanup": True})
    for spec in (build_case(bases, "byte_level"), build_case(bases, "llama"), build_case(bases, "normalizer_prepend"),
                 build_case(bases, "prefix_suffix_bpe_decoder"), word_piece):
        tok = Tokenizer(spec)
        a = tok.token_to_id["a"]
        for i in range(tok.vocab_size):
            piece = tok.token_bytes(i)
            if i in tok.skipped_ids or i in tok.byte_fallback_ids or not valid_utf8(piece):
                continue  # left out of decode, or decoded together with their neighbours
            assert tok.decode([a, i, a]) == tok.decode([a]) + piece.decode() + tok.token_bytes(a).decode(), tok.id_to_piece(i)


def valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# ---- components tinyinfer does not implement are named in a clear error ------------------------------

UNSUPPORTED = {
    "Unigram model": {"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]], "byte_fallback": False}},
    "WordPiece model": {"model": {"type": "WordPiece", "unk_token": "<unk>", "continuing_subword_prefix": "##",
                                  "max_input_chars_per_word": 100, "vocab": {"<unk>": 0}}},
    "WordLevel model": {"model": {"type": "WordLevel", "vocab": {"<unk>": 0}, "unk_token": "<unk>"}},
    "Precompiled normalizer": {"normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}},
    "UnicodeScripts pre-tokenizer": {"pre_tokenizer": {"type": "UnicodeScripts"}},
    "CTC decoder": {"decoder": {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True}},
}


@pytest.mark.parametrize("case", list(UNSUPPORTED))
def test_unsupported_component_is_named(bases, case):
    spec = copy.deepcopy(bases["byte_level"])
    spec.update(UNSUPPORTED[case])
    kind = case.split()[0]
    with pytest.raises(TinyInferError, match=f"{kind}.*(supported|implements only)"):
        Tokenizer(spec)


@pytest.mark.parametrize("pattern, problem", [(r"[a-z&&[^aeiou]]", "nests a negated character class"),
                                              (r"(\p{L}+", "does not compile")])
def test_regex_beyond_translation_is_named(bases, pattern, problem):
    spec = variant(bases["byte_level"], pre_tokenizer=then_bytes(split({"Regex": pattern}, "Isolated")))
    with pytest.raises(TinyInferError, match=problem):
        Tokenizer(spec)
