"""Added tokens: strings such as "<|endoftext|>" or "<|user|>" that are cut out of the text *before* BPE.

A chat template writes "<|user|>" as text; it must become its one reserved id, never the BPE pieces of
"<", "|", "user"... So the text is first split at every added token (leftmost, longest match), and only
the pieces between them are normalized, pre-tokenized and merged. Each token's flags, from tokenizer.json:

- lstrip / rstrip: the match also swallows the whitespace on its left / right;
- single_word: match only when not glued to a word character on either side;
- normalized: match against the normalized text (otherwise against the raw text, before normalizing);
- special: skipped by decode(..., skip_special_tokens=True).

    split_added("Hi<|endoftext|>there") -> ['Hi', 50256, 'there']   (a str is text, an int an added id)

As in the reference, matches are found first and stripped after: a match that begins inside the
whitespace a previous token's rstrip took still gives its id, but its own lstrip never reaches back past
the previous match, and a match left with no text at all gives no id.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex


@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool = True
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool = False


WORD_AT_END, WORD_AT_START = regex.compile(r"\w\Z"), regex.compile(r"\w")  # used with .match(text, pos)
SPACE_AT_END, SPACE_AT_START = regex.compile(r"\s*\Z"), regex.compile(r"\s*")


class AddedTokenMatcher:
    """Finds a set of added tokens in text and splits the text around them."""

    def __init__(self, tokens: dict[str, AddedToken]):
        self.tokens = tokens  # the text to match -> its token
        # Longest first: regex alternation takes the first alternative that matches, so this gives the
        # leftmost-longest match of the Aho-Corasick automaton the Hugging Face library uses.
        alternatives = sorted(tokens, key=len, reverse=True)
        self.pattern = regex.compile("|".join(map(regex.escape, alternatives))) if alternatives else None

    def split(self, text: str) -> list[str | int]:
        """Text pieces (str) and added token ids (int), in order; empty pieces are dropped."""
        if self.pattern is None or not text:
            return [text] if text else []
        out: list[str | int] = []
        done = 0  # text before this offset is already emitted
        for m in self.pattern.finditer(text):
            token = self.tokens[m.group()]
            start, stop = m.start(), m.end()
            if token.single_word and (WORD_AT_END.search(text, 0, start) or WORD_AT_START.match(text, stop)):
                continue
            if token.lstrip:  # never into what the previous match took
                start = max(done, SPACE_AT_END.search(text, min(done, start), start).start())
            if token.rstrip:
                stop = SPACE_AT_START.match(text, stop).end()
            if done < start:
                out.append(text[done:start])
            if start < stop:  # an lstrip match whose whitespace the previous token's rstrip took
                out.append(token.id)
            done = stop
        if done < len(text):
            out.append(text[done:])
        return out
