"""The paged KV cache and its block allocator: same numbers as the contiguous cache, no leaked block."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import stories  # noqa: F401 - a fixture

from tinyinfer.attention import attention, causal_mask, decode_attention, decode_mask
from tinyinfer.engine.block_manager import BlockAllocator, block_hash, prefix_hashes, prefix_root
from tinyinfer.engine.paged_cache import PagedKVCache
from tinyinfer.errors import TinyInferError
from tinyinfer.kv_cache import ContiguousKVCache
from tinyinfer.model import SeqChunk

# -- prefix hashing ---------------------------------------------------------------------------------------------


@pytest.mark.exercise("9.1")
def test_prefix_hashes_chain_over_full_blocks_only():
    tokens = list(range(100, 111))  # 11 tokens, block size 4: two full blocks and a partial one
    hashes = prefix_hashes(tokens, 4)
    assert hashes == [block_hash(None, tokens[0:4]), block_hash(hashes[0], tokens[4:8])]
    assert prefix_hashes(tokens[:8], 4) == hashes  # a partial block adds nothing
    assert prefix_hashes(tokens[:3], 4) == []


@pytest.mark.exercise("9.1")
def test_prefix_hashes_name_the_whole_prefix():
    a = [1, 2, 3, 4, 5, 6, 7, 8]
    b = [9, 2, 3, 4, 5, 6, 7, 8]  # differs only in the first block
    c = [1, 2, 3, 4, 5, 6, 7, 9]  # differs only in the second block
    ha, hb, hc = (prefix_hashes(x, 4) for x in (a, b, c))
    assert ha[1] != hb[1]  # same tokens in block 1, different history: different names
    assert ha[0] == hc[0] and ha[1] != hc[1]


def test_block_names_are_sha256_of_the_token_bytes_chained_with_the_root():
    """The names are SHA-256 digests (hashlib), not Python's hash: the two 16-token blocks that collided under
    hash((None, tuple(ids))) have different names; the adapter and the cache salt change every name."""
    import hashlib
    import struct

    first = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1442, 1770, 1764, 259, 670, 63]
    second = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1485, 1008, 1478, 431, 355, 190]
    assert block_hash(None, first) == hashlib.sha256(b"\x00" + struct.pack("<16q", *first)).digest()
    assert block_hash(None, first) != block_hash(None, second)
    roots = [None, prefix_root("shout"), prefix_root(None, "tenant-a"), prefix_root(None, "tenant-b"),
             prefix_root("shout", "tenant-a")]
    assert len({prefix_hashes(first, 16, root)[0] for root in roots}) == len(roots)


def test_a_name_collision_is_a_miss_because_token_ids_are_compared():
    alloc = BlockAllocator(2)
    block = alloc.allocate()
    alloc.register(block, b"same name", [1, 2])
    assert alloc.find(b"same name", [1, 2]) == block
    assert alloc.find(b"same name", [3, 4]) is None and alloc.lookup(b"same name", [3, 4]) is None
    assert alloc.refcount[block] == 1  # the miss took nothing


# -- the allocator ----------------------------------------------------------------------------------------------


def test_allocator_refcounts_and_free_count():
    alloc = BlockAllocator(3)
    blocks = [alloc.allocate() for _ in range(3)]
    assert sorted(blocks) == [0, 1, 2] and alloc.num_free == 0
    with pytest.raises(TinyInferError, match="out of blocks"):
        alloc.allocate()
    alloc.refcount[blocks[0]] += 1  # a second holder
    alloc.free([blocks[0]])
    assert alloc.num_free == 0  # still held once
    alloc.free(blocks)
    assert alloc.num_free == 3
    with pytest.raises(TinyInferError, match="freed more often"):
        alloc.free([blocks[1]])


@pytest.mark.exercise("9.2")
def test_lookup_shares_a_held_block_and_revives_a_freed_one():
    alloc = BlockAllocator(4)
    block = alloc.allocate()
    name = block_hash(None, [7, 7])
    alloc.register(block, name, [7, 7])
    assert alloc.lookup(name, [7, 7]) == block and alloc.refcount[block] == 2  # shared by two sequences
    alloc.free([block, block])
    assert alloc.num_free == 4 and alloc.is_free_cached(name)  # freed, but its contents are still cached
    assert alloc.lookup(name, [7, 7]) == block  # a hit takes it off the free list again
    assert alloc.refcount[block] == 1 and alloc.num_free == 3
    assert alloc.lookup(block_hash(None, [8, 8]), [8, 8]) is None


@pytest.mark.exercise("9.2")
def test_eviction_is_least_recently_freed_and_spares_cached_blocks_while_others_are_free():
    alloc = BlockAllocator(3)
    a, b, c = (alloc.allocate() for _ in range(3))
    names = {block: block_hash(None, [block]) for block in (a, b, c)}
    for block, name in names.items():
        alloc.register(block, name, [block])
    alloc.free([a])
    alloc.free([c])
    alloc.free([b])  # release order a, c, b: a is the least recently used
    assert alloc.allocate() == a and not alloc.is_free_cached(names[a])  # evicted: its name is forgotten
    assert alloc.lookup(names[a], [a]) is None
    assert alloc.lookup(names[b], [b]) == b  # the recent ones are still there
    assert alloc.allocate() == c


def test_free_order_puts_a_sequences_last_block_first_in_line_for_eviction():
    alloc = BlockAllocator(3)
    table = [alloc.allocate() for _ in range(3)]
    alloc.free(table)
    assert [alloc.allocate() for _ in range(3)] == table[::-1]  # the shared-prefix front block goes last


# -- the paged cache ----------------------------------------------------------------------------------------


@pytest.mark.exercise("9.3")
def test_paged_cache_reads_back_what_a_contiguous_cache_holds(stories):
    cfg = stories.config
    rng = np.random.default_rng(0)
    paged = PagedKVCache(cfg, n_blocks=12, block_size=4)
    contiguous = ContiguousKVCache(cfg, max_seqs=2, max_len=20)
    paged.tables = {0: [5, 0, 9, 2, 7], 1: [3, 11, 1, 4, 8]}  # scattered on purpose
    for seq_id in (0, 1):
        start = 0
        for n in (3, 6, 1, 1, 7):  # chunks that straddle block boundaries
            k = rng.standard_normal((n, cfg.n_kv_heads, cfg.head_dim)).astype(np.float32)
            v = rng.standard_normal((n, cfg.n_kv_heads, cfg.head_dim)).astype(np.float32)
            for cache in (paged, contiguous):
                cache.write(2, seq_id, start, k, v)
            start += n
            for got, want in zip(paged.read(2, seq_id, start), contiguous.read(2, seq_id, start)):
                assert got.shape == (cfg.n_kv_heads, start, cfg.head_dim)
                np.testing.assert_array_equal(got, want)
    assert not paged.k[0].any() and not paged.k[2][:, 6].any()  # other layers and unlisted blocks untouched


@pytest.mark.exercise("9.3")
def test_paged_cache_refuses_positions_beyond_the_block_table(stories):
    cache = PagedKVCache(stories.config, n_blocks=4, block_size=4)
    cache.tables[0] = [1]
    k = np.zeros((5, stories.config.n_kv_heads, stories.config.head_dim), dtype=np.float32)
    with pytest.raises(TinyInferError, match="needs 2 blocks"):
        cache.write(0, 0, 0, k, k)


@pytest.mark.exercise("9.3")
def test_model_on_paged_cache_matches_contiguous_cache(stories):
    """The same model code, two caches: prefill chunks of two sequences and mixed decode steps."""
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 512, size=n).tolist() for n in (13, 22)]
    paged = PagedKVCache(stories.config, n_blocks=16, block_size=4)
    paged.tables = {0: [15, 3, 8, 0, 11, 6], 1: [1, 14, 2, 9, 4, 13, 7]}
    contiguous = stories.new_cache(max_seqs=2, max_len=28)
    steps = [
        [SeqChunk(0, 0, prompts[0][:9]), SeqChunk(1, 0, prompts[1][:5])],
        [SeqChunk(0, 9, prompts[0][9:]), SeqChunk(1, 5, prompts[1][5:])],
        [SeqChunk(1, 22, [40]), SeqChunk(0, 13, [41])],
        [SeqChunk(0, 14, [42, 43]), SeqChunk(1, 23, [44])],
    ]
    for chunks in steps:
        np.testing.assert_allclose(stories.forward(chunks, paged, all_logits=True),
                                   stories.forward(chunks, contiguous, all_logits=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [None, 5])
def test_batched_decode_attention_equals_attention_per_sequence(window):
    """Many sequences of different lengths, one query each, padded together: the same as one at a time."""
    rng = np.random.default_rng(2)
    n_heads, n_kv, hd, lengths = 6, 2, 4, np.array([3, 9, 1, 7])
    L = 12  # padded length, past every sequence's end
    q = rng.standard_normal((len(lengths), n_heads, hd)).astype(np.float32)
    k = rng.standard_normal((n_kv, len(lengths), L, hd)).astype(np.float32)
    v = rng.standard_normal((n_kv, len(lengths), L, hd)).astype(np.float32)
    batched = decode_attention(q, k, v, decode_mask(lengths, L, window))
    for b, n in enumerate(lengths):
        alone = attention(q[b:b + 1], k[:, b, :n], v[:, b, :n], causal_mask(1, n - 1, window))
        np.testing.assert_allclose(batched[b:b + 1], alone, rtol=1e-6, atol=1e-6)
