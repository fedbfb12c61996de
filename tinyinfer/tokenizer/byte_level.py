"""Byte-level BPE's alphabet: every one of the 256 bytes gets its own printable character.

GPT-2 runs BPE over the UTF-8 *bytes* of the text, so any string, in any script, encodes with no unknown
token. Vocabulary files store tokens as text, though, and bytes such as a space (0x20) or a newline (0x0A)
would be invisible there. So each byte is shown as a printable character: printable ASCII and Latin-1 bytes
stand for themselves, and the others are moved to U+0100 and up (a space becomes 'Ġ', a newline 'Ċ').

    to_byte_level("Hi there") -> 'HiĠthere'
    from_byte_level("HiĠthere") -> b'Hi there'
"""

from __future__ import annotations

import regex

# GPT-2's pre-tokenizer: contractions, words, numbers, other symbols, each with one optional leading space,
# then runs of whitespace (a space before a word stays with the word: " world" is one chunk).
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode() -> dict[int, str]:
    """The byte -> character table of GPT-2: bytes_to_unicode()[ord(' ')] -> 'Ġ', [ord('a')] -> 'a'."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    moved = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + moved)  # the next unused code point above Latin-1
            moved += 1
    return table


BYTE_TO_CHAR = bytes_to_unicode()
_SURROGATE = regex.compile(r"[\ud800-\udfff]")
# Decoding UTF-8 bytes as Latin-1 gives one character per byte; this table then renames each one.
_LATIN1_TO_BYTE_LEVEL = str.maketrans({chr(b): c for b, c in BYTE_TO_CHAR.items()})
# ...and back. Latin-1 characters that are not in the table (' ', '\n') become U+FFFF, which makes
# .encode("latin-1") fail, like every other character outside the table.
_BYTE_LEVEL_TO_LATIN1 = str.maketrans({**{chr(b): "\uffff" for b in range(256)}, **{c: chr(b) for b, c in BYTE_TO_CHAR.items()}})


def without_surrogates(text: str) -> str:
    """A Python str may hold lone surrogates (U+D800..U+DFFF): not text, and with no UTF-8 form. The
    Hugging Face library refuses such a str; tinyinfer reads each as U+FFFD, the replacement character."""
    return _SURROGATE.sub("\ufffd", text)


def spell_bytes(data: bytes) -> str:
    """The byte-level spelling of some bytes: spell_bytes(b" \xc3\xa9") -> 'ĠÃ©'."""
    return data.decode("latin-1").translate(_LATIN1_TO_BYTE_LEVEL)


def to_byte_level(text: str) -> str:
    """The byte-level spelling of `text`'s UTF-8 bytes: to_byte_level(" é") -> 'ĠÃ©'."""
    return spell_bytes(text.encode("utf-8"))


def from_byte_level(token: str) -> bytes:
    """The bytes a byte-level token stands for: from_byte_level('ĠÃ©') -> b' \\xc3\\xa9'.

    A token with characters outside the table (an added token such as '<|endoftext|>' is plain text)
    stands for its own UTF-8 bytes, as in the Hugging Face ByteLevel decoder.
    """
    try:
        return token.translate(_BYTE_LEVEL_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:  # a character outside the table
        return token.encode("utf-8")
