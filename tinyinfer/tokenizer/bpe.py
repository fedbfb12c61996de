"""Byte-pair encoding: a word's symbols are merged pair by pair, in the order the merges were learned.

Training (train.py) learns an ordered list of merges, each "the pair (a, b) becomes the new token n".
Encoding replays them: start from the word's smallest symbols (bytes, or characters) and, while some
adjacent pair has a learned merge, merge the pair that was learned *first* (lowest rank), leftmost first.

    merge([1, 2, 3, 1, 2], (1, 2), 4) -> [4, 3, 4]
    apply_merges([1, 2, 3], {(1, 2): (0, 4), (4, 3): (1, 5)}.get) -> [5]

`BPE` is the model stage of a tokenizer.json: it turns one pre-tokenized piece (a word) into ids, with
byte fallback (`<0x41>` tokens for characters missing from the vocabulary), an unknown token, and a cache
so a word seen before costs one dictionary lookup.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from tinyinfer.errors import TinyInferError

Pair = tuple[int, int]
# pair -> (rank, merged id), or None when the pair has no merge. A dict's .get fits; llama2.c computes it.
MergeLookup = Callable[[Pair], "tuple[int, int] | None"]
CACHE_SIZE = 200_000  # distinct words remembered (English text has a few tens of thousands)


def merge(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of `pair` in `ids`, left to right, by `new_id`.

    merge([1, 2, 3, 1, 2], (1, 2), 4) -> [4, 3, 4];  merge([7, 7, 7], (7, 7), 8) -> [8, 7]
    """
    # BEGIN EXERCISE 1.1: the BPE merge step
    merged = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged
    # END EXERCISE 1.1


def apply_merges(symbols: list[int], lookup: MergeLookup) -> list[int]:
    """Merge adjacent symbols, lowest rank first (leftmost among equal ranks), until no pair has a merge.

    apply_merges([1, 2, 3], {(1, 2): (0, 4), (4, 3): (1, 5)}.get) -> [5]

    A word of n symbols takes O(n log n): a heap holds rank * n + position of every adjacent pair (one
    int sorts like the tuple (rank, position), and faster), and a linked list of positions lets a merge
    remove the right symbol in O(1). Heap entries left behind by a merge are recognised as stale when
    popped (their pair changed) and skipped. A SentencePiece-style tokenizer treats a whole paragraph
    as one word, so the textbook loop (find the best pair, merge, rescan: O(n^2)) would be too slow.
    """
    # BEGIN EXERCISE 1.2: encode one word by replaying merges in rank order
    symbols = list(symbols)
    n = len(symbols)
    nxt = list(range(1, n + 1))  # position of the next live symbol (n: none)
    prev = list(range(-1, n - 1))  # position of the previous live symbol (-1: none)
    heap = []
    for i in range(n - 1):
        found = lookup((symbols[i], symbols[i + 1]))
        if found is not None:
            heap.append(found[0] * n + i)
    heapq.heapify(heap)
    while heap:
        rank, i = divmod(heapq.heappop(heap), n)
        j = nxt[i]
        if symbols[i] is None or j >= n:
            continue  # the left symbol was merged away, or it is now the last one
        found = lookup((symbols[i], symbols[j]))
        if found is None or found[0] != rank:
            continue  # stale: the pair at i changed since this entry was pushed
        symbols[i], symbols[j] = found[1], None
        nxt[i] = nxt[j]
        if nxt[i] < n:
            prev[nxt[i]] = i
        for left in (prev[i], i):  # the two new pairs around the merged symbol
            right = nxt[left] if left >= 0 else n
            if left >= 0 and right < n:
                found = lookup((symbols[left], symbols[right]))
                if found is not None:
                    heapq.heappush(heap, found[0] * n + left)
    return [s for s in symbols if s is not None]
    # END EXERCISE 1.2


class BPE:
    """The BPE model of a tokenizer.json: vocabulary, ranked merges, byte fallback, unknown token.

    vocab maps token text -> id; merges is a list of (left text, right text) in rank order.
    """

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], *, unk_token: str | None = None,
                 byte_fallback: bool = False, fuse_unk: bool = False, continuing_subword_prefix: str | None = None,
                 end_of_word_suffix: str | None = None, ignore_merges: bool = False):
        self.vocab = vocab
        self.merges = merges
        self.unk_token = unk_token
        self.byte_fallback = byte_fallback
        self.fuse_unk = fuse_unk
        self.continuing_subword_prefix = continuing_subword_prefix or ""
        self.end_of_word_suffix = end_of_word_suffix or ""
        self.ignore_merges = ignore_merges
        self.ranks: dict[Pair, tuple[int, int]] = {}
        for rank, (left, right) in enumerate(merges):
            merged = left + right.removeprefix(self.continuing_subword_prefix)  # "##" pieces glue on bare
            if left not in vocab or right not in vocab or merged not in vocab:
                raise TinyInferError(f"BPE merge {left!r} + {right!r} (rank {rank}) uses a token missing from the vocabulary; the tokenizer.json file is corrupt: re-export it")
            self.ranks[vocab[left], vocab[right]] = (rank, vocab[merged])  # a repeated pair: the last wins, as in HF
        self.cache: dict[str, list[int]] = {}

    def encode_word(self, word: str) -> list[int]:
        """Ids of one pre-tokenized piece: encode_word('Ġhello') -> [23748] with GPT-2's vocabulary."""
        ids = self.cache.get(word)
        if ids is None:
            if self.ignore_merges and word in self.vocab:
                ids = [self.vocab[word]]
            else:
                ids = apply_merges(self._symbols(word), self.ranks.get)
            if len(word) < 256:  # long SentencePiece paragraphs are rarely seen twice
                if len(self.cache) >= CACHE_SIZE:
                    self.cache.clear()  # a long-running server must not grow without bound
                self.cache[word] = ids
        return ids

    def _symbols(self, word: str) -> list[int]:
        """One id per character before any merge; a character missing from the vocabulary becomes its
        UTF-8 bytes as <0xNN> tokens (byte fallback), else the unknown token, else it is dropped.

        As in the reference, an unknown token waits until the next character found in the vocabulary (or
        the word's end): byte-fallback characters in between come before it, and with fuse_unk they do
        not end its run. With only 'a' and '<0xC3>', '<0xA9>' known: 'xéa' -> [<0xC3>, <0xA9>, <unk>, a].
        """
        symbols: list[int] = []
        unk_pending = False
        for i, char in enumerate(word):
            piece = (self.continuing_subword_prefix if i > 0 else "") + char
            if i == len(word) - 1:
                piece += self.end_of_word_suffix
            if piece in self.vocab:
                if unk_pending:
                    symbols.append(self._unk_id())
                    unk_pending = False
                symbols.append(self.vocab[piece])
            elif self.byte_fallback and all(f"<0x{b:02X}>" in self.vocab for b in piece.encode("utf-8")):
                symbols.extend(self.vocab[f"<0x{b:02X}>"] for b in piece.encode("utf-8"))
            elif self.unk_token is not None:
                if unk_pending and not self.fuse_unk:  # fuse_unk: a run of unknown characters is one <unk>
                    symbols.append(self._unk_id())
                unk_pending = True
        return symbols + [self._unk_id()] if unk_pending else symbols

    def _unk_id(self) -> int:
        if self.unk_token not in self.vocab:
            raise TinyInferError(f"the unknown token {self.unk_token!r} is not in the vocabulary; fix model.unk_token in tokenizer.json")
        return self.vocab[self.unk_token]
