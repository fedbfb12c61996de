"""Code point ranges as UTF-8 byte ranges, so a grammar over characters can run over bytes.

A range of code points becomes a few *sequences of byte ranges*: every byte sequence that matches one of
them, byte range by byte range, is the UTF-8 encoding of a code point in the range, and only those. The
trick (the one Rust's regex crate uses) is to split the range until each piece shares its leading bytes:

    utf8_sequences(0x61, 0x7A)  -> [[(0x61, 0x7A)]]                       # a-z: one byte
    utf8_sequences(0xE9, 0xE9)  -> [[(0xC3, 0xC3), (0xA9, 0xA9)]]         # é
    utf8_sequences(0x80, 0x7FF) -> [[(0xC2, 0xDF), (0x80, 0xBF)]]         # every 2-byte character

Surrogates (U+D800..U+DFFF) are not characters and have no UTF-8 encoding; they are left out.
"""

from __future__ import annotations

# Code points encoded with 1, 2, 3, 3 and 4 bytes; the 3-byte block is cut around the surrogates.
_ENCODED_BLOCKS = ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF))


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences matching exactly the UTF-8 encodings of code points lo..hi."""
    out: list[list[tuple[int, int]]] = []
    for block_lo, block_hi in _ENCODED_BLOCKS:
        a, b = max(lo, block_lo), min(hi, block_hi)
        if a <= b:
            _split(a, b, out)
    return out


def _split(lo: int, hi: int, out: list) -> None:
    """Split lo..hi (same encoded length) until the trailing 6-bit groups of both ends span fully."""
    n_bytes = len(chr(lo).encode("utf-8"))
    for trailing in range(1, n_bytes):
        mask = (1 << (6 * trailing)) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask != 0:  # lo does not start a full block of `trailing` continuation bytes
                _split(lo, lo | mask, out)
                _split((lo | mask) + 1, hi, out)
                return
            if hi & mask != mask:  # hi does not end one
                _split(lo, (hi & ~mask) - 1, out)
                _split(hi & ~mask, hi, out)
                return
    out.append(list(zip(chr(lo).encode("utf-8"), chr(hi).encode("utf-8"))))
