"""Normalizers: rewrite the text before it is split (tokenizer.json "normalizer").

SentencePiece-style tokenizers (Llama-2, Mistral, Phi-3) store spaces as '▁' and start every text with
one, which recent tokenizer.json files spell as a normalizer sequence:

    build_normalizer({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})("Hello world") -> '▁Hello▁world'
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.pre_tokenizers import compile_pattern

Normalizer = Callable[[str], str]


def sequence(steps: list[Normalizer]) -> Normalizer:
    def normalize(text: str) -> str:
        for step in steps:
            text = step(text)
        return text
    return normalize


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
        return str.lower
    if kind == "Strip":
        left, right = spec.get("strip_left", True), spec.get("strip_right", True)

        def strip(text: str) -> str:
            text = text.lstrip() if left else text
            return text.rstrip() if right else text
        return strip
    raise TinyInferError(f"tokenizer.json uses the normalizer {kind!r}, which tinyinfer does not implement "
                         "(supported: Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Sequence)")
