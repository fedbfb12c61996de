"""The paged KV cache: keys and values in fixed-size blocks from one preallocated pool, found by block table.

A contiguous cache gives every sequence a slab of `max_len` positions up front, used or not. A paged cache
gives out memory `block_size` tokens at a time, as the sequence grows, from a pool shared by all sequences:

    pool (per layer, K and V):   [n_kv_heads, n_blocks, block_size, head_dim]
    block table of a sequence:   [7, 2, 9]  ->  positions 0..15 live in block 7, 16..31 in 2, 32..47 in 9

(Heads come first so that the blocks gathered for a sequence, [KV, n, bs, hd], are already its keys in
attention's layout [KV, n*bs, hd]: a reshape, not a second copy.)

Position p of a sequence is slot p % block_size of block table[p // block_size]. The waste is at most one
partly filled block per sequence, instead of (max_len - length) positions.

It has the same two methods as `ContiguousKVCache`, so `Model.forward` runs on it unchanged:

    cache.write(layer, seq_id, start, k, v)   k, v: [n, n_kv_heads, hd] -> positions start..start+n-1
    cache.read(layer, seq_id, end) -> (k, v)   each [n_kv_heads, end, hd], gathered from the blocks

Both index whole arrays of positions at once (fancy indexing): there is no Python loop over tokens.
Which block ids a sequence holds is decided by the scheduler with a `BlockAllocator`; this class only
stores the tables it is given (`tables[seq_id]`) and the numbers.
"""

from __future__ import annotations

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError


class PagedKVCache:
    """A pool of `n_blocks` blocks of `block_size` tokens per layer, and one block table per sequence."""

    def __init__(self, config: Config, n_blocks: int, block_size: int = 16, dtype=np.float32, xp=np):
        self.block_size = block_size
        self.n_blocks = n_blocks
        shape = (config.n_kv_heads, n_blocks, block_size, config.head_dim)
        self.k = [xp.zeros(shape, dtype=dtype) for _ in range(config.n_layers)]  # per layer [KV, N, bs, hd]
        self.v = [xp.zeros(shape, dtype=dtype) for _ in range(config.n_layers)]
        self.tables: dict[int, list[int]] = {}  # seq_id -> block ids, in position order
        self.xp = xp

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool (all layers, K and V)."""
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    @property
    def bytes_per_block(self) -> int:
        return self.nbytes // self.n_blocks

    def slots(self, seq_id: int, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(block id, offset in block) of positions start..end-1 of a sequence.

        >>> cache = PagedKVCache.__new__(PagedKVCache); cache.block_size = 4; cache.tables = {0: [7, 2]}
        >>> [a.tolist() for a in cache.slots(0, 2, 6)]
        [[7, 7, 2, 2], [2, 3, 0, 1]]
        """
        table = self.tables.get(seq_id)
        n_blocks_needed = -(-end // self.block_size)
        if table is None or len(table) < n_blocks_needed:
            held = 0 if table is None else len(table)
            raise TinyInferError(
                f"sequence {seq_id} needs {n_blocks_needed} blocks for {end} positions but holds {held}: "
                "allocate its blocks before running the model"
            )
        positions = np.arange(start, end)  # [n]
        return np.asarray(table, dtype=np.int64)[positions // self.block_size], positions % self.block_size

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
        return self._gather(self.k[layer], table)[..., :end, :], self._gather(self.v[layer], table)[..., :end, :]

    # -- a batch of sequences at once (the decode step of many sequences; see Model.decode_block) ----------

    def write_batch(self, layer: int, seq_ids: list[int], positions: list[int], k, v) -> None:
        """One new token for each sequence: k, v [B, KV, hd] stored at positions[b] of sequence seq_ids[b]."""
        bs = self.block_size
        blocks = self._on_device(np.array([self.tables[s][p // bs] for s, p in zip(seq_ids, positions)]))  # [B]
        offsets = self._on_device(np.asarray(positions) % bs)  # [B]
        self.k[layer][:, blocks, offsets] = k.transpose(1, 0, 2)  # [B, KV, hd] -> [KV, B, hd]
        self.v[layer][:, blocks, offsets] = v.transpose(1, 0, 2)

    def read_batch(self, layer: int, seq_ids: list[int], lengths) -> tuple:
        """Keys and values of many sequences, padded to the longest: 2 x [KV, B, L, hd], L a whole number of
        blocks. Sequence b's positions 0..lengths[b]-1 are real; the rest is padding for the mask to hide."""
        n = -(-int(max(lengths)) // self.block_size)  # blocks of the longest sequence
        tables = np.zeros((len(seq_ids), n), dtype=np.int64)  # [B, n]; padding points at block 0, masked later
        for row, seq_id in enumerate(seq_ids):
            table = self.tables[seq_id][:n]
            tables[row, :len(table)] = table
        tables = self._on_device(tables)
        return self._gather(self.k[layer], tables), self._gather(self.v[layer], tables)

    def _gather(self, pool, table):
        """The blocks listed in `table` (any shape [...]), each sequence's run of blocks joined into positions.

        [KV, N, bs, hd] -> [KV, ..., n, bs, hd] -> [KV, ..., n*bs, hd]
        """
        blocks = self.xp.take(pool, table, axis=1)  # [KV, ..., n, bs, hd], one copy
        return blocks.reshape(*blocks.shape[:-3], blocks.shape[-3] * blocks.shape[-2], blocks.shape[-1])

    def _on_device(self, index: np.ndarray):
        return index if self.xp is np else self.xp.asarray(index)
