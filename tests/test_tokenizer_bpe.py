"""BPE's two core steps (course exercises 1.1 and 1.2), checked against independent slow references."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyinfer.tokenizer.bpe import apply_merges, merge


def reference_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """str.replace is a non-overlapping, left-to-right replacement: the same contract as merge."""
    as_text = "".join(map(chr, ids))
    return [ord(c) for c in as_text.replace(chr(pair[0]) + chr(pair[1]), chr(new_id))]


def reference_apply_merges(symbols: list[int], ranks: dict) -> list[int]:
    """The textbook O(n^2) loop: find the lowest-rank pair (leftmost on ties), merge it there, repeat."""
    symbols = list(symbols)
    while True:
        candidates = [(ranks[p][0], i) for i, p in enumerate(zip(symbols, symbols[1:])) if p in ranks]
        if not candidates:
            return symbols
        _, i = min(candidates)
        symbols[i:i + 2] = [ranks[(symbols[i], symbols[i + 1])][1]]


small_ids = st.lists(st.integers(0, 3), max_size=40)


@pytest.mark.exercise("1.1")
@settings(max_examples=300, deadline=None)
@given(small_ids, st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_merge_matches_reference(ids, pair):
    assert merge(ids, pair, 99) == reference_merge(ids, pair, 99)


@pytest.mark.exercise("1.1")
def test_merge_overlapping_run_takes_leftmost_pairs():
    assert merge([5, 5, 5], (5, 5), 6) == reference_merge([5, 5, 5], (5, 5), 6)
    assert merge([1], (1, 2), 3) == [1]


@st.composite
def word_and_ranks(draw):
    """A random word over 4 symbols and a random merge table whose merged ids are fresh (>= 10)."""
    word = draw(st.lists(st.integers(0, 3), max_size=60))
    pairs = draw(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), unique=True, max_size=30))
    ranks = {pair: (rank, 10 + rank) for rank, pair in enumerate(pairs)}
    return word, ranks


@pytest.mark.exercise("1.2")
@settings(max_examples=300, deadline=None)
@given(word_and_ranks())
def test_apply_merges_matches_textbook_loop(case):
    word, ranks = case
    assert apply_merges(word, ranks.get) == reference_apply_merges(word, ranks)


@pytest.mark.exercise("1.2")
def test_apply_merges_equal_ranks_go_leftmost():
    ranks = {(1, 1): (0, 2)}
    assert apply_merges([1, 1, 1], ranks.get) == reference_apply_merges([1, 1, 1], ranks) == [2, 1]


def test_a_repeated_merge_pair_takes_its_last_rank_as_hf_tokenizers_does():
    """A merges list may hold one pair twice (hand-edited or concatenated files): the later rank wins. Here "a b"
    comes first and again after "b c", so on "abc" the later rank lets "b c" merge first."""
    from tokenizers import models  # noqa: PLC0415 - the reference

    from tinyinfer.tokenizer.bpe import BPE  # noqa: PLC0415

    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4}
    merges = [("a", "b"), ("b", "c"), ("a", "b")]
    theirs = [t.id for t in models.BPE(vocab, merges).tokenize("abc")]
    assert theirs == [0, 4]  # a, bc: the last rank of "a b" (2) comes after "b c" (1)
    assert BPE(vocab, merges).encode_word("abc") == theirs
    assert BPE(vocab, merges[:2]).encode_word("abc") == [3, 2]  # without the repeat "a b" merges first


def test_a_stale_heap_entry_is_skipped_not_merged_early():
    """a b c d with merges b+c (rank 0), a+b (1), bc+d (2), a+bc (3): merging b+c leaves the entry for a+b at
    position 0 in the heap, now standing for a+bc; taken at rank 1 it would merge a+bc before bc+d (rank 2)."""
    a, b, c, d, bc, ab, bcd, abc = range(8)
    ranks = {(b, c): (0, bc), (a, b): (1, ab), (bc, d): (2, bcd), (a, bc): (3, abc)}
    assert reference_apply_merges([a, b, c, d], ranks) == [a, bcd]
    assert apply_merges([a, b, c, d], ranks.get) == [a, bcd]
