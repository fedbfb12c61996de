"""llama2.c's tokenizer.bin: SentencePiece's Llama vocabulary with a score per token, merged as run.c does.

The file is `int32 max_token_length`, then for every token `float32 score, int32 length, bytes`. Ids 0..2
are <unk>, <s> (BOS), </s> (EOS); ids 3..258 are the byte tokens <0x00>..<0xFF>; a space is stored as ' '
(SentencePiece writes '▁'). run.c's encode, which this reproduces exactly:

1. BOS (when add_special_tokens), then a "dummy prefix": the id of the piece " " (only for non-empty text);
2. one id per character (its UTF-8 bytes looked up as a piece), or its bytes as <0xNN> tokens (byte fallback);
3. repeatedly merge the adjacent pair whose concatenation is a token with the *highest score*, leftmost
   among equals, until no pair forms a token. (tokenizer.json files store the same idea as ranked merges.)

    tok.encode("Hello") -> [1, 15043] with the Llama-2 tokenizer.bin (' Hello' is token 15043)

Decoding glues the pieces' bytes, drops the space right after BOS (run.c's rule), and turns byte tokens
into their byte; invalid UTF-8 becomes U+FFFD.
"""

from __future__ import annotations

import struct
from pathlib import Path

import regex

from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.bpe import Pair, apply_merges
from tinyinfer.tokenizer.byte_level import without_surrogates
from tinyinfer.tokenizer.base import TokenizerBase

BYTE_PIECE = regex.compile(rb"<0x([0-9A-Fa-f]{2})>")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2


def read_tokenizer_bin(path: Path) -> tuple[list[bytes], list[float]]:
    """The pieces and scores of a llama2.c tokenizer.bin, in id order."""
    data = path.read_bytes()
    pieces, scores, offset = [], [], 4  # skip max_token_length
    try:
        while offset < len(data):
            score, length = struct.unpack_from("<fi", data, offset)
            offset += 8
            if length < 0 or offset + length > len(data):
                raise struct.error("token length runs past the end of the file")
            pieces.append(data[offset:offset + length])
            scores.append(score)
            offset += length
    except struct.error as e:
        raise TinyInferError(f"{path} is not a llama2.c tokenizer.bin ({e}); if it is a model checkpoint, pass the "
                             "tokenizer.bin beside it, else export one with llama2.c's tokenizer.py") from e
    if len(pieces) < 3:
        raise TinyInferError(f"{path} holds {len(pieces)} tokens; a llama2.c tokenizer.bin starts with <unk>, <s>, </s>")
    return pieces, scores


class Llama2cTokenizer(TokenizerBase):
    """The tokenizer of a llama2.c tokenizer.bin: SentencePiece-style BPE by scores (no tokenizer.json pipeline)."""

    def __init__(self, pieces: list[bytes], scores: list[float]):
        self.spec = None
        self.pieces, self.scores = pieces, scores
        self.piece_to_id: dict[bytes, int] = {}
        for i, piece in enumerate(pieces):
            self.piece_to_id.setdefault(piece, i)
        id_to_token = [p.decode("utf-8", errors="replace") for p in pieces]
        special = frozenset((UNK_ID, BOS_ID, EOS_ID))
        super().__init__(
            id_to_token, [bytes([int(m.group(1), 16)]) if (m := BYTE_PIECE.fullmatch(p)) else p for p in pieces],
            {t: i for i, t in reversed(list(enumerate(id_to_token)))}, BOS_ID, EOS_ID, special,
            skipped_ids=special,  # skipped by skip_special_tokens
            byte_fallback_ids=frozenset())  # decode reads all bytes at once, so nothing waits
        self.dummy_prefix = self.piece_to_id.get(b" ")
        # a token's rank: 0 for the highest score; equal scores share a rank (then the leftmost pair wins)
        rank_of_score = {score: rank for rank, score in enumerate(sorted(set(scores), reverse=True))}
        self.rank = [rank_of_score[score] for score in scores]
        self._merges: dict[Pair, tuple[int, int] | None] = {}

    @classmethod
    def from_file(cls, path: Path) -> Llama2cTokenizer:
        return cls(*read_tokenizer_bin(Path(path)))

    def save(self, path) -> None:
        raise TinyInferError("a llama2.c tokenizer.bin has scores, not the ranked merges a tokenizer.json needs; "
                             "keep using the .bin file (or load the model's tokenizer.json instead)")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TinyInferError(f"encode takes a str, got {type(text).__name__}; decode bytes to str first")
        text = without_surrogates(text)
        symbols = [] if not text or self.dummy_prefix is None else [self.dummy_prefix]
        for char in text:
            piece = char.encode("utf-8")
            if piece in self.piece_to_id:
                symbols.append(self.piece_to_id[piece])
            else:  # byte fallback: <0xNN> is id NN + 3
                symbols.extend(b + 3 for b in piece)
        ids = apply_merges(symbols, self.merge_of)
        return [BOS_ID, *ids] if add_special_tokens else ids

    def merge_of(self, pair: Pair) -> tuple[int, int] | None:
        """(rank, id) of the token the pair's pieces concatenate to, or None."""
        if pair not in self._merges:
            merged = self.piece_to_id.get(self.pieces[pair[0]] + self.pieces[pair[1]])
            self._merges[pair] = None if merged is None else (self.rank[merged], merged)
        return self._merges[pair]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        out, prev = bytearray(), None
        for i in self._checked(ids):
            if not (skip_special_tokens and i in self.skipped_ids):
                piece = self._bytes[i]
                out += piece[1:] if prev == BOS_ID and piece.startswith(b" ") else piece
            prev = i
        return out.decode("utf-8", errors="replace")
