"""Normalizers: rewrite the text before it is split (tokenizer.json "normalizer").

SentencePiece-style tokenizers (Llama-2, Mistral, Phi-3) store spaces as '▁' and start every text with
one, which recent tokenizer.json files spell as a normalizer sequence:

    build_normalizer({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})("Hello world") -> '▁Hello▁world'

Character classes come from Python's Unicode tables (unicodedata, the regex module); the reference's Rust
crates carry other Unicode versions (older ones for marks and controls, a newer one for case), so a
character assigned in the last few versions (U+0897, U+11A47, U+A7CB) may be normalized differently.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

import regex

from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.byte_level import to_byte_level
from tinyinfer.tokenizer.pre_tokenizers import compile_pattern

Normalizer = Callable[[str], str]


def sequence(steps: list[Normalizer]) -> Normalizer:
    def normalize(text: str) -> str:
        for step in steps:
            text = step(text)
        return text
    return normalize


def lowercase(text: str) -> str:
    """Each character lowered on its own, as Rust's char::to_lowercase does: lowercase("ΟΔΟΣ") -> 'οδοσ'
    (str.lower would see the word's end and write a final sigma: 'οδος')."""
    return "".join(char.lower() for char in text)


def strip(left: bool, right: bool) -> Normalizer:
    """Remove Unicode White_Space (Rust's char::is_whitespace) from the ends: strip(True, True)(" a\t") -> 'a'.
    str.strip would also remove the separators U+001C..U+001F, which are not White_Space."""
    leading, trailing = regex.compile(r"^\p{White_Space}+"), regex.compile(r"\p{White_Space}+\Z")

    def normalize(text: str) -> str:
        text = leading.sub("", text) if left else text
        return trailing.sub("", text) if right else text
    return normalize


def without_marks(categories: tuple[str, ...]) -> Normalizer:
    """Drop the combining marks of the given categories; after NFD that removes accents:
    without_marks(("Mn",))("e\u0301") -> 'e'. StripAccents drops every mark (Mn, Mc, Me), BERT only Mn."""
    return lambda text: "".join(char for char in text if unicodedata.category(char) not in categories)


strip_accents = without_marks(("Mn", "Mc", "Me"))


# BERT's CJK ideograph blocks: each such character becomes a word of its own.
CJK = regex.compile("([\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
                    "\U0002b740-\U0002b81f\U0002b920-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f])")
BERT_CONTROL = regex.compile(r"[\x00\ufffd\p{Cc}\p{Cf}\p{Co}\p{Cs}--[\t\n\r]]", regex.V1)  # dropped by clean_text


def bert(spec: dict) -> Normalizer:
    """BertNormalizer: clean_text (drop controls, whitespace -> ' '), CJK characters set apart with spaces,
    accents stripped (by default when lowercasing), lowercase:
    bert({})("Héllo\t中文") -> 'hello  中  文 '."""
    lower = spec.get("lowercase", True)
    accents = spec.get("strip_accents")
    steps: list[Normalizer] = []
    if spec.get("clean_text", True):
        steps.append(lambda text: regex.sub(r"\p{White_Space}", " ", BERT_CONTROL.sub("", text)))
    if spec.get("handle_chinese_chars", True):
        steps.append(lambda text: CJK.sub(r" \1 ", text))
    if lower if accents is None else accents:
        steps += [lambda text: unicodedata.normalize("NFD", text), without_marks(("Mn",))]
    if lower:
        steps.append(lowercase)
    return sequence(steps)


def nmt(text: str) -> str:
    """SentencePiece's NMT rules: drop most ASCII controls, map other invisible separators to ' '.
    nmt("a\u200bb\x01c") -> 'a bc'."""
    return NMT_SPACES.sub(" ", NMT_DROPPED.sub("", text))


NMT_DROPPED = regex.compile("[\x01-\x08\x0b\x0e-\x1f\x7f\x8f\x9f]")
NMT_SPACES = regex.compile("[\t\n\x0c\r\u1680\u200b-\u200f\u2028\u2029\u2581\ufeff\ufffd]")


def build_normalizer(spec: dict | None) -> Normalizer | None:
    """The function a tokenizer.json "normalizer" entry describes (None: text is used as it is)."""
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        return sequence([build_normalizer(s) for s in spec["normalizers"]])
    if kind == "Prepend":
        prefix = spec["prepend"]
        return lambda text: prefix + text if text else text  # an empty text stays empty
    if kind == "Replace":
        pattern, content = compile_pattern(spec["pattern"]), spec["content"]
        return lambda text: pattern.sub(lambda _: content, text)
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return lambda text: unicodedata.normalize(kind, text)
    if kind == "Lowercase":
        return lowercase
    if kind == "Strip":
        return strip(spec.get("strip_left", True), spec.get("strip_right", True))
    if kind == "StripAccents":
        return strip_accents
    if kind == "BertNormalizer":
        return bert(spec)
    if kind == "Nmt":
        return nmt
    if kind == "ByteLevel":  # GPT-2's byte alphabet as a normalizer: "Hi there" -> 'HiĠthere'
        return to_byte_level
    raise TinyInferError(f"tokenizer.json uses the normalizer {kind!r}, which tinyinfer does not implement "
                         "(supported: Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, "
                         "BertNormalizer, Nmt, ByteLevel, Sequence)")
