"""The paged KV cache: keys and values in fixed-size blocks from one preallocated pool, found by block table.

A contiguous cache gives every sequence a slab of `max_len` positions up front, used or not. A paged cache
gives out memory `block_size` tokens at a time, as the sequence grows, from a pool shared by all sequences:

    pool (per layer, K and V):   [n_kv_heads, n_blocks + 1, block_size, head_dim]  (the last: padding rows')
    block table of a sequence:   [7, 2, 9]  ->  positions 0..15 live in block 7, 16..31 in 2, 32..47 in 9

(Heads come first so that the blocks gathered for a sequence, [KV, n, bs, hd], are already its keys in
attention's layout [KV, n*bs, hd]: a reshape, not a second copy.)

Position p of a sequence is slot p % block_size of block table[p // block_size]. The waste is at most one
partly filled block per sequence, instead of (max_len - length) positions.

It has the same two methods as `ContiguousKVCache`, so `Model.forward` runs on it unchanged:

    cache.write(layer, seq_id, start, k, v)   k, v: [n, n_kv_heads, hd] -> positions start..start+n-1
    cache.read(layer, seq_id, end) -> (k, v)   each [n_kv_heads, end, hd], gathered from the blocks

Both index whole arrays of positions at once (fancy indexing): there is no Python loop over tokens.
A decode step of many sequences (one new token each, `Model.decode_block`) takes three more: `decode_slots`
works out once per forward pass where each new token goes and which blocks each sequence reads, then every layer
stores all the new tokens with one scatter (`write_batch`) and reads all the sequences with one gather
(`read_batch`).

Which block ids a sequence holds is decided by the scheduler with a `BlockAllocator`; this class only
stores the tables it is given (`tables[seq_id]`) and the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tinyinfer.attention import decode_mask
from tinyinfer.backend import is_array
from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.kv_quant import check_kv_cache_dtype, kv_storage


@dataclass
class DecodeSlots:
    """Where a decode step of B sequences writes its new keys and values, and where it reads all of theirs."""

    blocks: object  # [B] the block of each new token (arrays on the cache's device)
    offsets: object  # [B] its place in that block
    tables: object  # [B, n] each sequence's first n blocks, padded with block 0 (which the mask hides)
    lengths: np.ndarray  # [B] tokens of each sequence, the new one included
    padded_len: int  # L = n * block_size: the keys read for every sequence
    xp: object = np
    masks: dict = field(default_factory=dict)  # window -> mask (and the lengths on the device), made when first asked

    def mask(self, window: int | None):
        """The additive attention mask [B, L] of these sequences: made once per step for each window size,
        and reused by every layer with that window."""
        if window not in self.masks:
            self.masks[window] = self.xp.asarray(decode_mask(self.lengths, self.padded_len, window))  # [B, L]
        return self.masks[window]

    def lengths_on_device(self):
        """`lengths` on the device, for the paged-attention kernel: copied once per step, when first asked."""
        if "lengths" not in self.masks:
            self.masks["lengths"] = self.xp.asarray(self.lengths, dtype=np.int64)  # [B]
        return self.masks["lengths"]


class PagedKVCache:
    """A pool of `n_blocks` blocks of `block_size` tokens per layer, and one block table per sequence."""

    reads_batches = True  # decode_slots, write_batch, read_batch (tinyinfer/kv_cache.py KVCache)

    def __init__(self, config: Config, n_blocks: int, block_size: int = 16, dtype=np.float32, xp=np,
                 kv_cache_dtype: str = "auto"):
        self.block_size = block_size
        self.n_blocks = n_blocks
        self.pad_block = n_blocks  # one block more than the allocator hands out: where padding rows write (CUDA graphs)
        shape = (config.n_kv_heads, n_blocks + 1, block_size, config.head_dim)
        kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)  # stored as the model's dtype, float16 or int8
        self.k = [kv_storage(shape, kv_cache_dtype, dtype, xp) for _ in range(config.n_layers)]  # per layer [KV, N, bs, hd]
        self.v = self.k if config.values_are_keys else [  # latent attention: the values are the keys, one pool
            kv_storage(shape, kv_cache_dtype, dtype, xp) for _ in range(config.n_layers)]
        self.tables: dict[int, list[int]] = {}  # seq_id -> block ids, in position order
        self.xp = xp

    @property
    def nbytes(self) -> int:
        """Bytes of the n_blocks blocks the allocator hands out (all layers, K and V; the padding block not counted)."""
        return self.bytes_per_block * self.n_blocks

    @property
    def bytes_per_block(self) -> int:
        pool = sum(a.nbytes for a in self.k) + (0 if self.v is self.k else sum(a.nbytes for a in self.v))
        return pool // (self.n_blocks + 1)

    def slots(self, seq_id: int, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(block id, offset in block) of positions start..end-1 of a sequence.

        >>> cache = PagedKVCache.__new__(PagedKVCache); cache.block_size = 4; cache.tables = {0: [7, 2]}
        >>> [a.tolist() for a in cache.slots(0, 2, 6)]
        [[7, 7, 2, 2], [2, 3, 0, 1]]
        """
        positions = np.arange(start, end)  # [n]
        table = np.asarray(self._table(seq_id, end), dtype=np.int64)
        return table[positions // self.block_size], positions % self.block_size

    def write(self, layer: int, seq_id: int, start: int, k, v) -> None:
        """Store k, v [n, KV, hd] at positions start..start+n-1 of the sequence, in the blocks of its table."""
        # BEGIN EXERCISE 9.3: scatter new keys and values into their blocks
        blocks, offsets = self.slots(seq_id, start, start + k.shape[0])  # 2 x [n]
        blocks, offsets = self._on_device(blocks), self._on_device(offsets)
        # pool[:, blocks, offsets] is [KV, n, hd]: the two index arrays pair up token by token
        self.k[layer][:, blocks, offsets] = k.transpose(1, 0, 2)  # [n, KV, hd] -> [KV, n, hd]
        self.v[layer][:, blocks, offsets] = v.transpose(1, 0, 2)
        # END EXERCISE 9.3

    def read(self, layer: int, seq_id: int, end: int):
        """Keys and values of positions 0..end-1, gathered from the sequence's blocks.  -> 2 x [KV, end, hd]"""
        n = -(-end // self.block_size)
        table = self._on_device(np.asarray(self.tables[seq_id][:n], dtype=np.int64))  # [n]
        keys = self._gather(self.k[layer], table)[..., :end, :]
        return keys, keys if self.v is self.k else self._gather(self.v[layer], table)[..., :end, :]

    # -- a batch of sequences at once (the decode step of many sequences; see Model.decode_block) ----------

    def decode_slots(self, seq_ids: list[int], positions: list[int]) -> DecodeSlots:
        """Where a decode step of many sequences writes and reads: the new token of sequence seq_ids[b] is at
        positions[b]. Block tables never change in the middle of a forward pass, so `Model.forward` asks once
        and every layer uses the answer.

        >>> cache = PagedKVCache.__new__(PagedKVCache); cache.block_size = 4; cache.xp = np
        >>> cache.tables = {0: [7, 2], 1: [5]}
        >>> slots = cache.decode_slots([0, 1], [5, 2])
        >>> slots.blocks.tolist(), slots.offsets.tolist(), slots.tables.tolist()
        ([2, 5], [1, 2], [[7, 2], [5, 0]])
        """
        positions = np.asarray(positions, dtype=np.int64)  # [B]
        lengths = positions + 1  # [B] each sequence's tokens, the new one included
        n = -(-int(lengths.max()) // self.block_size)  # blocks of the longest sequence
        tables = np.zeros((len(seq_ids), n), dtype=np.int64)  # [B, n]; padding points at block 0, masked later
        for row, (seq_id, end) in enumerate(zip(seq_ids, lengths.tolist())):
            table = self._table(seq_id, end)
            tables[row, :len(table)] = table[:n]
        blocks = tables[np.arange(len(seq_ids)), positions // self.block_size]  # [B, n] -> [B]: each new token's block
        return DecodeSlots(self._on_device(blocks), self._on_device(positions % self.block_size),
                           self._on_device(tables), lengths, n * self.block_size, self.xp)

    def write_batch(self, layer: int, slots: DecodeSlots, k, v) -> None:
        """One new token for each sequence of `slots`: k, v [B, KV, hd] stored at their slots."""
        self.k[layer][:, slots.blocks, slots.offsets] = k.transpose(1, 0, 2)  # [B, KV, hd] -> [KV, B, hd]
        if self.v is not self.k:
            self.v[layer][:, slots.blocks, slots.offsets] = v.transpose(1, 0, 2)

    def read_batch(self, layer: int, slots: DecodeSlots) -> tuple:
        """Keys and values of the sequences of `slots`, padded to the longest: 2 x [KV, B, L, hd], L a whole
        number of blocks. Sequence b's positions 0..lengths[b]-1 are real; the rest is padding for the mask."""
        keys = self._gather(self.k[layer], slots.tables)
        return keys, keys if self.v is self.k else self._gather(self.v[layer], slots.tables)

    def pools(self, layer: int):
        """The layer's key and value pools [KV, N, bs, hd] as plain arrays, for a kernel that reads the blocks in
        place (tinyinfer/kernels.py); None when they are stored quantised (int8 codes and scales)."""
        k, v = self.k[layer], self.v[layer]
        return (k, v) if is_array(k) and is_array(v) else None

    def _table(self, seq_id: int, end: int) -> list[int]:
        """The block table of a sequence, checked to cover positions 0..end-1."""
        table = self.tables.get(seq_id)
        n_blocks_needed = -(-end // self.block_size)
        if table is None or len(table) < n_blocks_needed:
            held = 0 if table is None else len(table)
            raise TinyInferError(
                f"sequence {seq_id} needs {n_blocks_needed} blocks for {end} positions but holds {held}: "
                "allocate its blocks before running the model"
            )
        return table

    def _gather(self, pool, table):
        """The blocks listed in `table` (any shape [...]), each sequence's run of blocks joined into positions.

        [KV, N, bs, hd] -> [KV, ..., n, bs, hd] -> [KV, ..., n*bs, hd]
        """
        blocks = pool.take(table, axis=1)  # [KV, ..., n, bs, hd], one copy (dequantised, for an int8 pool)
        return blocks.reshape(*blocks.shape[:-3], blocks.shape[-3] * blocks.shape[-2], blocks.shape[-1])

    def _on_device(self, index: np.ndarray):
        return index if self.xp is np else self.xp.asarray(index)
