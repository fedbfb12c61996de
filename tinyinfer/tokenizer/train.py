"""Training a byte-level BPE tokenizer: learn which byte pairs to merge, most frequent first.

The textbook loop (minbpe) recounts every adjacent pair of the whole corpus before each merge: fine
for a page, far too slow for a megabyte. Two observations make it fast:

1. Merges never cross a pre-tokenizer boundary, so the corpus is just a bag of chunks: count each
   distinct chunk once ("the" x 27,000) and work on the few thousand distinct ones.
2. A merge only changes the chunks that contain its pair. An index pair -> chunks finds them, their
   old pairs are subtracted from the counts and their new pairs added, and a heap of (-count, pair)
   entries (stale ones skipped when popped) yields the next most frequent pair without a full scan.

Ties go to the smallest pair (by ids), so training is deterministic. Ids 0..255 are the bytes, merges
take 256, 257, ... in the order learned:

    learn_merges({b"aaab": 1, b"ab": 2}, 2) -> [(97, 98), (97, 97)]
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict

import regex
from tqdm import tqdm

from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.bpe import Pair, merge
from tinyinfer.tokenizer.byte_level import GPT2_SPLIT_PATTERN, spell_bytes, without_surrogates


def learn_merges(chunk_counts: dict[bytes, int], num_merges: int) -> list[Pair]:
    """The first `num_merges` merges (fewer if the chunks run out of pairs); merge k makes id 256 + k."""
    words = [list(chunk) for chunk in chunk_counts]
    counts = list(chunk_counts.values())
    pair_counts: Counter[Pair] = Counter()
    where: defaultdict[Pair, set[int]] = defaultdict(set)  # pair -> the words that (may) contain it
    for w, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += counts[w]
            where[pair].add(w)
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[Pair] = []
    for new_id in tqdm(range(256, 256 + num_merges), desc="BPE merges", disable=None, leave=False):
        pair = pop_most_frequent(heap, pair_counts)
        if pair is None:
            break  # every chunk is a single token already
        merges.append(pair)
        changed = set()
        for w in where.pop(pair):
            old, new = words[w], merge(words[w], pair, new_id)
            for p in zip(old, old[1:]):
                pair_counts[p] -= counts[w]
                changed.add(p)
            for p in zip(new, new[1:]):
                pair_counts[p] += counts[w]
                where[p].add(w)
                changed.add(p)
            words[w] = new
        for p in changed:
            if pair_counts[p] > 0:
                heapq.heappush(heap, (-pair_counts[p], p))
            else:
                del pair_counts[p]
    return merges


def pop_most_frequent(heap: list[tuple[int, Pair]], pair_counts: Counter[Pair]) -> Pair | None:
    """Pop heap entries until one still matches its pair's current count."""
    while heap:
        neg_count, pair = heapq.heappop(heap)
        if pair_counts.get(pair) == -neg_count:
            return pair
    return None


def token_bytes_of(merges: list[Pair]) -> list[bytes]:
    """The bytes of every id: 0..255 the bytes themselves, then each merge glues its pair's bytes."""
    table = [bytes([b]) for b in range(256)]
    for a, b in merges:
        table.append(table[a] + table[b])
    return table


def chunk_counts(text: str, special_tokens: list[str]) -> Counter[bytes]:
    """How often each pre-tokenized chunk occurs, as UTF-8 bytes; special tokens are cut out first so
    no merge ever learns a piece of "<|endoftext|>"."""
    text = without_surrogates(text)
    pieces = regex.split("|".join(map(regex.escape, special_tokens)), text) if special_tokens else [text]
    pattern = regex.compile(GPT2_SPLIT_PATTERN)
    counts: Counter[str] = Counter()
    for piece in pieces:
        counts.update(pattern.findall(piece))
    return Counter({chunk.encode("utf-8"): n for chunk, n in counts.items()})


def byte_level_bpe_spec(text: str, vocab_size: int, special_tokens: list[str]) -> dict:
    """Train on `text` and return the tokenizer.json (as a dict) of a GPT-2-style byte-level BPE tokenizer:
    ids 0..255 are the bytes, then the merges, then the special tokens (as GPT-2 puts <|endoftext|> last).
    A text too small to fill `vocab_size` gives a smaller vocabulary (training stops when no pair is left)."""
    num_merges = vocab_size - 256 - len(special_tokens)
    if num_merges < 0:
        raise TinyInferError(f"vocab_size {vocab_size} is too small: byte-level BPE needs 256 byte tokens plus "
                             f"{len(special_tokens)} special tokens; ask for at least {256 + len(special_tokens)}")
    if len(set(special_tokens)) != len(special_tokens) or "" in special_tokens:
        raise TinyInferError(f"special tokens {special_tokens!r} must be distinct, non-empty strings")
    merges = learn_merges(chunk_counts(text, special_tokens), num_merges)
    spelled = [spell_bytes(b) for b in token_bytes_of(merges)]
    vocab = {token: i for i, token in enumerate(spelled)}
    added = [{"id": len(spelled) + k, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for k, s in enumerate(special_tokens)]
    vocab.update({t["content"]: t["id"] for t in added})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": {**byte_level, "trim_offsets": False}, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  # "a b" strings: byte-level tokens never contain a space, and every tokenizers version reads them
                  "merges": [f"{spelled[a]} {spelled[b]}" for a, b in merges]},
    }
