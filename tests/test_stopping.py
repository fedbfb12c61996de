"""Stop strings: matches across token boundaries, the returned text excludes the stop, nothing emitted is cut."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_data
from tinyinfer.stopping import StopMatcher, held_back_length


def run(pieces: list[str], stops: list[str]) -> tuple[list[str], StopMatcher]:
    """Push every piece; return what was emitted after each push (plus the flush when no stop matched)."""
    matcher = StopMatcher(stops)
    emitted = [matcher.push(piece) for piece in pieces]
    if not matcher.stopped:
        emitted.append(matcher.flush())
    return emitted, matcher


def reference(text: str, stops: list[str]) -> str:
    """The text before the first stop string to be complete, reading left to right (ties: the longer)."""
    for end in range(1, len(text) + 1):
        starts = [end - len(s) for s in stops if text[:end].endswith(s)]
        if starts:
            return text[: min(starts)]
    return text


@pytest.mark.exercise("6.3")
def test_stop_spanning_two_tokens():
    emitted, matcher = run(["The answer", " is 4.", "\n", "\nMore text"], ["\n\n"])
    assert "".join(emitted) == "The answer is 4." and matcher.stopped
    assert emitted[2] == ""  # the lone "\n" is held back: it may start "\n\n"


@pytest.mark.exercise("6.3")
def test_stop_spanning_three_tokens():
    emitted, matcher = run(["x = 1", " <", "|e", "nd|>", " junk"], ["<|end|>"])
    assert emitted == ["x = 1", " ", "", "", ""]  # "<", "|e", "nd|>" are held back, then cut with the stop
    assert "".join(emitted) == "x = 1 " and matcher.stopped and matcher.stop_string == "<|end|>"


@pytest.mark.exercise("6.3")
def test_stop_inside_a_longer_word():
    emitted, matcher = run(["Unst", "oppable force"], ["stop"])
    assert "".join(emitted) == "Un" and matcher.stopped


@pytest.mark.exercise("6.3")
def test_held_back_text_is_released_when_it_cannot_match():
    emitted, matcher = run(["Hello wor", "m"], ["world"])
    assert emitted == ["Hello ", "worm", ""] and not matcher.stopped


@pytest.mark.exercise("6.3")
def test_held_back_length_is_the_longest_suffix_that_starts_a_stop():
    assert held_back_length("abcab", ["abcabd"]) == 5
    assert held_back_length("xaab", ["aab!", "b!"]) == 3
    assert held_back_length("stop", ["stop"]) == 0  # a whole stop is a match, not a prefix
    assert held_back_length("", ["a"]) == 0


def test_earliest_match_wins_among_several_stops():
    emitted, matcher = run(["alpha beta gamma"], ["gamma", "beta"])
    assert "".join(emitted) == "alpha " and matcher.stop_string == "beta"


@pytest.mark.parametrize("pieces", [["xab", "c"], ["xabc"], ["x", "a", "b", "c"]])
def test_the_first_stop_to_complete_wins_however_the_text_is_split(pieces):
    """"b" is complete before "abc" is, so generation stops there, whether or not "c" arrived in the same piece."""
    emitted, matcher = run(pieces, ["abc", "b"])
    assert "".join(emitted) == "xa" and matcher.stop_string == "b"
    emitted, matcher = run(pieces, ["abc", "bc"])  # both complete at "c": the longer one wins
    assert "".join(emitted) == "x" and matcher.stop_string == "abc"


def test_text_before_the_stop_ends_in_a_partial_utf8_character():
    """Bytes arrive one token at a time (byte-fallback tokens); the detokenizer only emits whole characters,
    so the piece with the first half of "é" is empty and the stop is found after the character completes."""
    data = "caf\u00e9<END>rest".encode()
    tokens = [data[:3], data[3:4], data[4:6], data[6:9], data[9:]]  # "é" is split between tokens 2 and 3
    decoder = codecs.getincrementaldecoder("utf-8")()
    pieces = [decoder.decode(token) for token in tokens]
    assert pieces[1] == ""  # half a character: nothing yet
    emitted, matcher = run(pieces, ["<END>"])
    assert "".join(emitted) == "caf\u00e9" and matcher.stopped


@pytest.mark.parametrize("stop", ["🦙", "###", "\u00e9t\u00e9"])
def test_with_a_real_streaming_detokenizer(stop):
    """Phi-3's tokenizer spells rare characters (🦙) with byte tokens, so the text before the stop ends, token
    by token, in partial UTF-8; its streaming decoder emits whole characters only."""
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(shared_data("tokenizers/phi-3-mini/tokenizer.json")))
    text = "Un \u00e9t\u00e9 🦙 ### \u00e9t\u00e9 🦙 fin"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    stream = tokenizers.decoders.DecodeStream(skip_special_tokens=False)
    pieces = [stream.step(tokenizer, token_id) or "" for token_id in ids]
    assert "".join(pieces) == text
    emitted, matcher = run(pieces, [stop])
    assert "".join(emitted) == reference(text, [stop]) and matcher.stopped


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab#\n\u00e9", max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=12),
    stops=st.lists(st.text(alphabet="ab#\n\u00e9", min_size=1, max_size=4), min_size=1, max_size=3),
)
def test_any_split_gives_the_reference_and_holds_back_only_what_could_still_match(text, cuts, stops):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    matcher, emitted, received = StopMatcher(stops), "", ""
    for piece in pieces:
        received += piece
        emitted += matcher.push(piece)
        if matcher.stopped:
            break
        # the held-back tail is exactly the longest suffix that is a proper prefix of a stop (brute force)
        longest = max((n for n in range(len(received) + 1) for s in stops if n < len(s) and received.endswith(s[:n])))
        assert matcher.pending == received[len(received) - longest :]
        assert emitted + matcher.pending == received
    if not matcher.stopped:
        emitted += matcher.flush()
    assert emitted == reference(text, stops)
