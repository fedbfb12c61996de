"""What every tokenizer answers, whatever file it came from: the token of each id, as text and as bytes, and
which ids are special. tokenizer.py (a tokenizer.json pipeline) and llama2c.py (a llama2.c tokenizer.bin) each
build these from their file and add their own encode and decode.
"""

from __future__ import annotations

from tinyinfer.errors import TinyInferError


class TokenizerBase:
    """The vocabulary side of a tokenizer; subclasses encode and decode."""

    def __init__(self, id_to_token: list[str | None], token_bytes: list[bytes], token_to_id: dict[str, int],
                 bos_token_id: int | None, eos_token_id: int | None, special_ids: frozenset[int],
                 skipped_ids: frozenset[int], byte_fallback_ids: frozenset[int]):
        self.id_to_token = id_to_token  # the string each id hands to the decoder (None: a hole in the ids)
        self._bytes = token_bytes  # the raw bytes each id adds mid-sequence
        self.token_to_id = token_to_id
        self.bos_token_id, self.eos_token_id = bos_token_id, eos_token_id
        self.special_ids = special_ids
        self.skipped_ids = skipped_ids  # what skip_special_tokens drops
        self.byte_fallback_ids = byte_fallback_ids  # ids read as raw bytes (<0x41>): a streaming decoder waits

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        raise NotImplementedError

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        raise NotImplementedError

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes `token_id` adds when decoded mid-sequence: token_bytes(GPT-2's 995) -> b' world'."""
        return self._bytes[self._checked([token_id])[0]]

    def _checked(self, ids) -> list[int]:
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < len(self.id_to_token) or self.id_to_token[i] is None:
                raise TinyInferError(f"token id {i} is outside this tokenizer's vocabulary (ids 0..{len(self.id_to_token) - 1}); "
                                     "the ids come from a different model or tokenizer")
        return ids

    # ---- facts about the vocabulary -----------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_token)

    def id_to_piece(self, token_id: int) -> str:
        """The token's text as stored in the vocabulary ('Ġworld', '▁world', '<0x0A>', '<|user|>')."""
        return self.id_to_token[self._checked([token_id])[0]]

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, bos={self.bos_token_id}, eos={self.eos_token_id})"
