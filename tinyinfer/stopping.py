"""Stop strings: end generation when the text contains one, without ever streaming text that gets cut.

Stop strings are matched on *text*, not tokens, because a stop string rarely lines up with token
boundaries: "###" may arrive as "#" + "##", or inside a token such as "end###". The matcher therefore
works on the strings the streaming detokenizer emits (already whole characters, never half a UTF-8
sequence) and keeps a small buffer.

The streaming rule: text may be emitted as soon as it can no longer be part of a stop string. After each
push, the matcher holds back only the longest suffix of its buffer that is a prefix of some stop string
("Hello wor" is held back as "wor" while "world" is a stop string); everything before it is safe. A match
can only begin inside that suffix, so nothing emitted is ever taken back.

    >>> m = StopMatcher(["world"])
    >>> m.push("Hello wor"), m.push("ld and more"), m.stopped
    ('Hello ', '', True)
"""

from __future__ import annotations


def held_back_length(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `stops`.

    >>> held_back_length("Hello wor", ["world", "!!"])
    3
    >>> held_back_length("Hello", ["world"])
    0
    """
    # BEGIN EXERCISE 6.3: how much text a stop string could still claim
    longest = 0
    for stop in stops:
        for length in range(min(len(stop) - 1, len(text)), longest, -1):  # longest first, only if it beats the best
            if text.endswith(stop[:length]):
                longest = length
                break
    return longest
    # END EXERCISE 6.3


class StopMatcher:
    """Feed it the detokenizer's text pieces; it returns what is safe to show and says when a stop matched.

    `push(text)` returns the text that can be emitted now. Once a stop string is found, `stopped` is True and
    the text before it has been returned; everything after it is dropped. Generation stops as soon as the text
    contains a stop string, so the match that *ends* first wins (on a tie, the longer one): that way the
    result does not depend on how the text was split into tokens.
    At the end of generation for another reason (EOS, length), `flush()` returns the held-back tail.

    >>> m = StopMatcher(["\\n\\n", "END"])
    >>> [m.push(piece) for piece in ["one", "\\n", "two", "E", "N", "D", "three"]]
    ['one', '', '\\ntwo', '', '', '', '']
    >>> m.stopped, m.stop_string
    (True, 'END')
    """

    def __init__(self, stops: list[str]):
        self.stops = list(stops)
        self.pending = ""  # text received but not yet emitted: always a possible start of a stop string
        self.stopped = False
        self.stop_string: str | None = None

    def push(self, text: str) -> str:
        if self.stopped:
            return ""
        self.pending += text
        match = self._first_completed_match()
        if match is not None:
            start, stop = match
            self.stopped, self.stop_string = True, stop
            emit, self.pending = self.pending[:start], ""
            return emit
        keep = held_back_length(self.pending, self.stops)
        emit, self.pending = self.pending[: len(self.pending) - keep], self.pending[len(self.pending) - keep :]
        return emit

    def flush(self) -> str:
        """The held-back text, released because generation ended without a stop match."""
        emit, self.pending = self.pending, ""
        return emit

    def _first_completed_match(self) -> tuple[int, str] | None:
        """(start, stop string) of the match that ends first in the pending text (ties: longest), or None."""
        found = [(self.pending.find(stop), stop) for stop in self.stops]
        found = [(start, stop) for start, stop in found if start >= 0]
        return min(found, key=lambda m: (m[0] + len(m[1]), m[0])) if found else None
