"""Streaming detokenization: print generated text token by token, never half a character.

A token is a run of bytes, not of characters: '😀' is four bytes that GPT-2 spreads over several
tokens, so decoding each token alone would print U+FFFD garbage. And a tokenizer's decoder looks at
neighbours (SentencePiece drops the space at the very start of the text), so token texts do not
simply concatenate either. The method (as in Hugging Face text-generation-inference):

- keep a small window of ids: ids[prefix:read] were already printed, ids[read:] are new;
- decode the window with and without the new ids; the new text is the difference,
- but hold it back while it ends in U+FFFD (a character still incomplete) or inside a run of
  <0xNN> byte tokens (ByteFallback decodes a run as a whole, so the run must end first).

Concatenating everything push() and flush() return gives exactly tokenizer.decode(ids). (This needs the
decoder's edits at the ends of a text to be ones a window's first token absorbs, as Llama's
Strip(' ', start=1, stop=0) is; a Strip decoder with start > 1 or stop > 0, seen in no real tokenizer,
can lose a space at a window's edge.)

    stream = StreamingDetokenizer(tok)
    "".join(stream.push(i) for i in ids) + stream.flush() == tok.decode(ids)
"""

from __future__ import annotations


class StreamingDetokenizer:
    def __init__(self, tokenizer, skip_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.prefix = 0  # ids[prefix:read] give the context for decoding the new ids
        self.read = 0  # ids[:read] are printed

    def push(self, token_id: int) -> str:
        """Add one id; return the text it completes (often '', sometimes several characters)."""
        self.ids.append(token_id)
        skipped = self.skip_special_tokens and token_id in self.tokenizer.skipped_ids
        if skipped or token_id in self.tokenizer.byte_fallback_ids:  # a byte run may go on after either
            self.tokenizer.token_bytes(token_id)  # still reject an id outside the vocabulary now
            return ""
        printed = self._decode(self.ids[self.prefix:self.read])
        text = self._decode(self.ids[self.prefix:])
        if len(text) <= len(printed) or text.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(printed):]

    def flush(self) -> str:
        """The text still held back at the end of the stream (e.g. an incomplete character as U+FFFD)."""
        printed = self._decode(self.ids[self.prefix:self.read])
        text = self._decode(self.ids[self.prefix:])
        self.prefix = self.read = len(self.ids)
        return text[len(printed):]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)
