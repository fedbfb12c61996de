"""Decoders: turn a list of token strings back into text (tokenizer.json "decoder").

Each step maps a list of token strings to a new list; the result is joined. Byte-level tokenizers map
their characters back to bytes; SentencePiece-style ones turn '▁' into spaces, collect <0xNN> byte
tokens into UTF-8, and strip the space the encoder prepended:

    ByteFallback: ['<0xE2>', '<0x96>', '<0x81>', 'a'] -> ['▁', 'a']
    Strip(" ", start=1): [' Hello world'] -> ['Hello world']

Invalid UTF-8 becomes U+FFFD exactly where the Hugging Face library puts it: ByteLevel decodes the
whole byte string with the standard "maximal subpart" rule, ByteFallback gives one U+FFFD per byte of
a run of byte tokens that is not valid UTF-8.
"""

from __future__ import annotations

from collections.abc import Callable

import regex

from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.byte_level import from_byte_level
from tinyinfer.tokenizer.pre_tokenizers import compile_pattern, prepend_scheme

Decoder = Callable[[list[str]], list[str]]
# A byte token as the reference reads one: six characters, two hex digits of any case (or Rust's '+A').
BYTE_TOKEN = regex.compile(r"<0x([0-9A-Fa-f]{2}|\+[0-9A-Fa-f])>")


def byte_level(tokens: list[str]) -> list[str]:
    return [b"".join(from_byte_level(t) for t in tokens).decode("utf-8", errors="replace")]


def byte_fallback(tokens: list[str]) -> list[str]:
    out, pending = [], bytearray()  # pending: the bytes of the current run of <0xNN> tokens
    for token in [*tokens, None]:
        match = BYTE_TOKEN.fullmatch(token) if token is not None else None
        if match:
            pending.append(int(match.group(1), 16))
            continue
        if pending:
            try:
                out.append(pending.decode("utf-8"))
            except UnicodeDecodeError:
                out.extend("\ufffd" * len(pending))
            pending = bytearray()
        if token is not None:
            out.append(token)
    return out


def fuse(tokens: list[str]) -> list[str]:
    return ["".join(tokens)]


def strip(content: str, start: int, stop: int) -> Decoder:
    """Remove up to `start` leading and `stop` trailing `content` characters from every token."""
    def decode(tokens: list[str]) -> list[str]:
        out = []
        for token in tokens:
            head = 0
            while head < min(start, len(token)) and token[head] == content:
                head += 1
            tail = len(token)
            while tail > head and len(token) - tail < stop and token[tail - 1] == content:
                tail -= 1
            out.append(token[head:tail])
        return out
    return decode


def replace(spec: dict) -> Decoder:
    pattern, content = compile_pattern(spec["pattern"]), spec["content"]
    return lambda tokens: [pattern.sub(lambda _: content, t) for t in tokens]


def metaspace(replacement: str, drop_in_first: bool) -> Decoder:
    """'▁' -> ' '; in the first token every '▁' is dropped (the library does so, not only the leading one)."""
    def decode(tokens: list[str]) -> list[str]:
        return [t.replace(replacement, "" if i == 0 and drop_in_first else " ") for i, t in enumerate(tokens)]
    return decode


def word_piece(prefix: str, cleanup: bool) -> Decoder:
    """'##ing' glues onto the token before it, any other token starts a new word:
    word_piece("##", True)(['play', '##ing', 'now', '.']) -> ['play', 'ing', ' now', '.']."""
    def decode(tokens: list[str]) -> list[str]:
        out = []
        for i, token in enumerate(tokens):
            if i > 0:
                token = token[len(prefix):] if token.startswith(prefix) else " " + token
            out.append(clean_up(token) if cleanup else token)
        return out
    return decode


# English detokenization rules of the reference's WordPiece decoder, applied in this order.
CLEANUP = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
           (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]


def clean_up(text: str) -> str:
    for dirty, clean in CLEANUP:
        text = text.replace(dirty, clean)
    return text


def end_of_word(suffix: str) -> Decoder:
    """BPEDecoder: a word-final suffix becomes a space, except on the last token:
    end_of_word("</w>")(['hel', 'lo</w>', 'you</w>']) -> ['hel', 'lo ', 'you']."""
    return lambda tokens: [t.replace(suffix, "" if i == len(tokens) - 1 else " ") for i, t in enumerate(tokens)]


def sequence(steps: list[Decoder]) -> Decoder:
    def decode(tokens: list[str]) -> list[str]:
        for step in steps:
            tokens = step(tokens)
        return tokens
    return decode


def build_decoder(spec: dict | None) -> Decoder | None:
    """The function a tokenizer.json "decoder" entry describes (None: tokens are joined with spaces)."""
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        return sequence([build_decoder(s) for s in spec["decoders"]])
    if kind == "ByteLevel":
        return byte_level
    if kind == "ByteFallback":
        return byte_fallback
    if kind == "Fuse":
        return fuse
    if kind == "Strip":
        return strip(spec["content"], spec.get("start", 0), spec.get("stop", 0))
    if kind == "Replace":
        return replace(spec)
    if kind == "Metaspace":
        return metaspace(spec.get("replacement", "▁"), prepend_scheme(spec) != "never")
    if kind == "WordPiece":
        return word_piece(spec.get("prefix", "##"), spec.get("cleanup", True))
    if kind == "BPEDecoder":
        return end_of_word(spec.get("suffix", "</w>"))
    raise TinyInferError(f"tokenizer.json uses the decoder {kind!r}, which tinyinfer does not implement "
                         "(supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, WordPiece, BPEDecoder, Sequence)")


def decoder_steps(spec: dict | None) -> list[dict]:
    """The decoder's steps in order, with nested Sequences flattened."""
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        return [step for inner in spec["decoders"] for step in decoder_steps(inner)]
    return [spec]


def build_token_bytes(spec: dict | None) -> Callable[[str], bytes]:
    """The bytes one vocabulary token stands for in the middle of a text, under the decoder `spec`.

    Only the steps that rewrite one token on its own matter here (ByteLevel, ByteFallback, Replace,
    Metaspace, WordPiece, BPEDecoder); Strip and Fuse act on the text's ends and on how tokens are
    grouped. GPT-2: 'Ġworld' -> b' world'; Llama-2: '▁world' -> b' world', '<0x0A>' -> b'\\n';
    WordPiece: '##ing' -> b'ing', 'now' -> b' now', '.' -> b'.' (its cleanup); BPEDecoder: 'lo</w>' -> b'lo '.
    """
    steps = decoder_steps(spec)
    kinds = {s.get("type") for s in steps}
    rewrites = [mid_sequence_rewrite(s) for s in steps]

    def token_bytes(token: str) -> bytes:
        if "ByteLevel" in kinds:
            return from_byte_level(token)
        if "ByteFallback" in kinds and (match := BYTE_TOKEN.fullmatch(token)):
            return bytes([int(match.group(1), 16)])
        for rewrite in rewrites:
            token = rewrite(token)
        return token.encode("utf-8")
    return token_bytes


def mid_sequence_rewrite(step: dict) -> Callable[[str], str]:
    """What one decoder step does to a token that is neither first nor last (identity for most steps)."""
    kind = step.get("type")
    if kind == "Replace":
        pattern, content = compile_pattern(step["pattern"]), step["content"]
        return lambda token: pattern.sub(lambda _: content, token)
    if kind == "Metaspace":
        return lambda token: token.replace(step.get("replacement", "▁"), " ")
    if kind == "WordPiece":
        decode = word_piece(step.get("prefix", "##"), step.get("cleanup", True))
        return lambda token: decode(["", token])[1]  # as the second token of a text
    if kind == "BPEDecoder":
        return lambda token: token.replace(step.get("suffix", "</w>"), " ")
    return lambda token: token
