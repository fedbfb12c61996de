"""The block allocator: which fixed-size KV blocks are free, who holds each one, and which are cached.

A paged KV cache cuts every sequence's keys and values into blocks of `block_size` tokens taken from one
shared pool. This module only deals in block *ids* (0..n_blocks-1); `paged_cache.py` holds the numbers.

Three ideas, each a few lines:

- **Free list and reference counts.** A block is free when no sequence holds it (refcount 0). Two sequences
  may hold the same block (a shared prompt prefix): its refcount is 2, and it returns to the free list only
  when both let go.
- **Prefix hashing.** A *full* block is named by SHA-256 over (the previous block's name, its own token ids),
  so a block's name stands for the whole prefix up to its end: two prompts share block i only if they agree
  on every token of blocks 0..i. The first block's "previous" is the *root*: the sequence's LoRA adapter and
  its `cache_salt`, so tenants who salt their requests never share blocks. A new request looks its blocks up
  by name, and a hit also compares the block's token ids, so even a collision cannot serve one client another
  client's keys and values. Why not Python's `hash`: it is unkeyed and easy to invert (a collision of two
  16-token blocks takes a minute to find), and a collision here leaks one tenant's prompt into another's answer.
- **LRU eviction.** A freed block keeps its contents and its name: it stays reusable until the pool needs
  room. The free list is ordered by time of release, and allocation takes the least recently released block
  first, erasing its name (eviction). Never-used blocks sit at the front, so they go before any cached one.

    >>> a = BlockAllocator(4)
    >>> b = a.allocate(); a.register(b, block_hash(None, [5, 6]), [5, 6]); a.free([b])
    >>> a.num_free, a.lookup(block_hash(None, [5, 6]), [5, 6]) == b, a.num_free
    (4, True, 3)
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict

from tinyinfer.errors import TinyInferError


def prefix_root(adapter: str | None = None, cache_salt: str | None = None) -> bytes | None:
    """The "previous name" of a sequence's first block: None for the base model unsalted, else a digest of
    the LoRA adapter (other weights, other keys and values) and the request's cache_salt (no sharing
    across salts). Each part is length-prefixed, so ("ab", None) and ("a", "b") differ.

    >>> prefix_root() is None, prefix_root("shout") == prefix_root("shout"), prefix_root("a", "b") == prefix_root("ab")
    (True, True, False)
    """
    if adapter is None and cache_salt is None:
        return None
    digest = hashlib.sha256(b"tinyinfer prefix root")
    for part in (adapter, cache_salt):
        data = b"" if part is None else part.encode()
        digest.update(struct.pack("<?Q", part is not None, len(data)) + data)
    return digest.digest()


def block_hash(previous: bytes | None, token_ids) -> bytes:
    """The name of a full block: SHA-256 over the previous block's name (for a first block: its root,
    `prefix_root`) and this block's token ids, each as 8 little-endian bytes.

    Chaining makes the name depend on the whole prefix, not only on this block's tokens:

    >>> block_hash(None, [1, 2]) == block_hash(block_hash(None, [9, 9]), [1, 2])
    False
    >>> len(block_hash(None, [1, 2]))  # 32 bytes: finding two blocks with one name is out of reach
    32
    """
    previous = previous or b""
    data = bytes([len(previous)]) + previous + struct.pack(f"<{len(token_ids)}q", *token_ids)
    return hashlib.sha256(data).digest()


def prefix_hashes(token_ids: list[int], block_size: int, root: bytes | None = None) -> list[bytes]:
    """The names of the full blocks of a token sequence (a trailing partial block has none). The first block's
    "previous" is the sequence's `prefix_root` (its LoRA adapter and cache_salt), None without: under another
    adapter the same tokens have other keys and values, so their blocks must have other names.

    >>> len(prefix_hashes(list(range(10)), 4))  # blocks [0..3], [4..7]; [8, 9] is not full
    2
    """
    # BEGIN EXERCISE 9.1: chained hashes of the full blocks of a sequence
    hashes, previous = [], root
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        previous = block_hash(previous, token_ids[start:start + block_size])
        hashes.append(previous)
    return hashes
    # END EXERCISE 9.1


class BlockAllocator:
    """Block ids 0..n_blocks-1 with reference counts, an LRU free list and a prefix-cache index."""

    def __init__(self, n_blocks: int):
        if n_blocks < 1:
            raise TinyInferError(f"the KV pool needs at least one block, got n_blocks={n_blocks}")
        self.n_blocks = n_blocks
        self.refcount = [0] * n_blocks
        self.free_blocks: OrderedDict[int, None] = OrderedDict.fromkeys(range(n_blocks))  # least recent first
        self.cached: dict[bytes, int] = {}  # block name -> block id, for full blocks whose contents are kept
        self.name_of: dict[int, bytes] = {}  # block id -> its name (the inverse of `cached`)
        self.tokens_of: dict[int, tuple[int, ...]] = {}  # block id -> the token ids it holds, checked on a hit

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now: never used, or released (cached ones are evicted on demand)."""
        return len(self.free_blocks)

    @property
    def num_used(self) -> int:
        return self.n_blocks - self.num_free

    def allocate(self) -> int:
        """A free block, refcount 1. Takes the least recently released one, evicting its cached name."""
        if not self.free_blocks:
            raise TinyInferError("the KV pool is out of blocks: the scheduler must preempt before allocating")
        block, _ = self.free_blocks.popitem(last=False)
        name = self.name_of.pop(block, None)
        if name is not None:
            del self.cached[name], self.tokens_of[block]  # eviction: its old contents will be overwritten
        self.refcount[block] = 1
        return block

    def free(self, blocks: list[int]) -> None:
        """Let go of blocks. Those nobody holds any more join the free list, last block of a sequence first,
        so a shared prefix (the front blocks) is the last to be evicted."""
        for block in reversed(blocks):
            if self.refcount[block] <= 0:
                raise TinyInferError(f"block {block} freed more often than it was held: a scheduler bug")
            self.refcount[block] -= 1
            if self.refcount[block] == 0:
                self.free_blocks[block] = None

    def register(self, block: int, name: bytes, token_ids) -> None:
        """Record that `block` now holds the full block called `name`, with these token ids, so later requests
        can reuse it."""
        if name in self.cached or block in self.name_of:
            return  # the same prefix computed twice (e.g. by two requests admitted together): keep the first
        self.cached[name] = block
        self.name_of[block] = name
        self.tokens_of[block] = tuple(token_ids)

    def find(self, name: bytes, token_ids) -> int | None:
        """The cached block called `name` if it holds exactly these token ids, else None. Comparing the ids
        makes a hit certain: a name collision is a miss, never another prompt's keys and values."""
        block = self.cached.get(name)
        return block if block is not None and self.tokens_of[block] == tuple(token_ids) else None

    def lookup(self, name: bytes, token_ids) -> int | None:
        """The cached block called `name` holding `token_ids`, now held once more (refcount + 1), or None."""
        # BEGIN EXERCISE 9.2: reuse a cached block (revive it from the free list if nobody holds it)
        block = self.find(name, token_ids)
        if block is None:
            return None
        if self.refcount[block] == 0:
            del self.free_blocks[block]  # a released block comes back to life, its contents intact
        self.refcount[block] += 1
        return block
        # END EXERCISE 9.2

    def is_free_cached(self, name: bytes) -> bool:
        """True when the block called `name` is cached but held by nobody (reusing it takes a free block)."""
        block = self.cached.get(name)
        return block is not None and self.refcount[block] == 0
