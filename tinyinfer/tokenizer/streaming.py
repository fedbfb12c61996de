"""Streaming detokenization: print generated text token by token, never half a character.

A token is a run of bytes, not of characters: '😀' is four bytes that GPT-2 spreads over several
tokens, so decoding each token alone would print U+FFFD garbage. And a tokenizer's decoder looks at
neighbours (SentencePiece drops the space at the very start of the text), so token texts do not
simply concatenate either. The method (as in Hugging Face text-generation-inference):

- keep a small window of ids: ids[prefix:read] were already printed, ids[read:] are new;
- decode the window with and without the new ids; the new text is the difference,
- but hold it back while it ends in U+FFFD (a character still incomplete) or inside a run of
  <0xNN> byte tokens (ByteFallback decodes a run as a whole, so the run must end first).

A generated text continues its prompt, and how its first token decodes depends on what precedes it:
llama2.c (run.c) drops the space of the token right after BOS, SentencePiece's Strip decoder drops the one at
the very start of the text, and neither must drop the space of " world" after the prompt "Hello". So the
window starts with the prompt's last ids as `context`, already printed; while special tokens of the prompt
(BOS) are in the window it is decoded as decode(..., skip_special_tokens=True) reads it. What is printed is
then the text the generated ids add to the prompt's: decode(prompt + generated) minus decode(prompt), with
the prompt's special tokens skipped.

Concatenating everything push() and flush() return gives exactly tokenizer.decode(ids) (with no context). (This needs the
decoder's edits at the ends of a text to be ones a window's first token absorbs, as Llama's
Strip(' ', start=1, stop=0) is; a Strip decoder with start > 1 or stop > 0, seen in no real tokenizer,
can lose a space at a window's edge.)

    stream = StreamingDetokenizer(tok)
    "".join(stream.push(i) for i in ids) + stream.flush() == tok.decode(ids)
    stream = StreamingDetokenizer(tok, context=prompt_ids)   # what generate prints after the prompt
"""

from __future__ import annotations

CONTEXT = 4  # prompt ids kept in the window: enough for any decoder's look-back at its first token


class StreamingDetokenizer:
    def __init__(self, tokenizer, skip_special_tokens: bool = False, context=()):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = [int(i) for i in context][-CONTEXT:]  # the prompt's tail counts as printed
        self.n_context = len(self.ids)
        self.prefix = 0  # ids[prefix:read] give the context for decoding the new ids
        self.read = len(self.ids)  # ids[:read] are printed

    def push(self, token_id: int) -> str:
        """Add one id; return the text it completes (often '', sometimes several characters)."""
        self.ids.append(token_id)
        skipped = self.skip_special_tokens and token_id in self.tokenizer.skipped_ids
        if skipped or token_id in self.tokenizer.byte_fallback_ids:  # a byte run may go on after either
            self.tokenizer.token_bytes(token_id)  # still reject an id outside the vocabulary now
            return ""
        printed, text = self._decode_window()
        if len(text) <= len(printed) or text.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(printed):]

    def flush(self) -> str:
        """The text still held back at the end of the stream (e.g. an incomplete character as U+FFFD)."""
        printed, text = self._decode_window()
        self.prefix = self.read = len(self.ids)
        return text[len(printed):]

    def _decode_window(self) -> tuple[str, str]:
        """The window's text without and with the ids not printed yet, both decoded alike."""
        skipped = self.tokenizer.skipped_ids
        generated = self.ids[max(self.prefix, self.n_context):]
        context_specials = any(i in skipped for i in self.ids[self.prefix:self.n_context])
        skip = self.skip_special_tokens or (context_specials and not any(i in skipped for i in generated))
        decode = self.tokenizer.decode
        return decode(self.ids[self.prefix:self.read], skip_special_tokens=skip), decode(self.ids[self.prefix:], skip_special_tokens=skip)
