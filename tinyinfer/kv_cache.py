"""The KV cache: keys and values of past tokens, kept so each decode step computes only the new token's.

Without it, generating token t would recompute attention inputs for all t earlier tokens: quadratic work
for every new token. With it, a decode step projects one token and reads the cache. The price is memory:

    bytes per token = 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes per number

(once, not twice, for latent attention, whose cached values are its keys: tinyinfer/mla.py).

`ContiguousKVCache` preallocates one slab per sequence slot for `max_len` tokens and writes new entries in
place (no concatenation per step). The numbers are stored in the model's dtype, or with fewer bytes
(`kv_cache_dtype`: float16 or int8, see tinyinfer/kv_quant.py). The interface (`KVCache`) is two methods, so a paged cache can replace it:

    cache.write(layer, seq_id, start, k, v)   k, v: [n, n_kv_heads, hd] stored at positions start..start+n-1
    cache.read(layer, seq_id, end) -> (k, v)   each [n_kv_heads, end, hd]: positions 0..end-1

and one fact, `reads_batches`: whether it also serves the one-token steps of many sequences at once
(`decode_slots`, `write_batch`, `read_batch`, and `pools` for a GPU kernel that reads the blocks in place: the
paged cache of the serving engine, tinyinfer/engine/paged_cache.py).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.kv_quant import check_kv_cache_dtype, kv_storage


class KVCache(Protocol):
    """What the model's forward pass asks of a cache (see the module docstring)."""

    reads_batches: bool  # True: decode_slots, write_batch, read_batch (and pools) serve many sequences' steps at once

    def write(self, layer: int, seq_id: int, start: int, k, v) -> None: ...

    def read(self, layer: int, seq_id: int, end: int) -> tuple: ...


class ContiguousKVCache:
    """Slots 0..max_seqs-1, each holding up to max_len tokens of keys and values for every layer."""

    reads_batches = False  # one sequence at a time (the loop of Model.attention_block)

    def __init__(self, config: Config, max_seqs: int = 1, max_len: int | None = None, dtype=np.float32, xp=np,
                 kv_cache_dtype: str = "auto"):
        for name, value in (("max_seqs", max_seqs), ("max_len", max_len if max_len is not None else 1)):
            if not is_integer_at_least(value):
                raise TinyInferError(f"{name}={value!r}: a KV cache needs an integer >= 1 (max_len=None: the context)")
        self.max_len = max_len or config.max_seq_len
        self.max_seqs = max_seqs
        shape = (config.n_layers, max_seqs, config.n_kv_heads, self.max_len, config.head_dim)
        kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)
        self.k = kv_storage(shape, kv_cache_dtype, dtype, xp)  # [layers, seqs, KV, max_len, hd]
        # latent attention's values are its keys (Config.values_are_keys): one array, written twice with the same numbers
        self.v = self.k if config.values_are_keys else kv_storage(shape, kv_cache_dtype, dtype, xp)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + (0 if self.v is self.k else self.v.nbytes)

    def write(self, layer: int, seq_id: int, start: int, k, v) -> None:
        # BEGIN EXERCISE 5.1: write new keys and values into the cache in place
        end = start + k.shape[0]
        if end > self.max_len:
            raise TinyInferError(f"KV cache overflow: sequence {seq_id} needs {end} positions, the cache holds {self.max_len}")
        self.k[layer, seq_id, :, start:end] = k.transpose(1, 0, 2)  # [n, KV, hd] -> [KV, n, hd]
        self.v[layer, seq_id, :, start:end] = v.transpose(1, 0, 2)
        # END EXERCISE 5.1

    def read(self, layer: int, seq_id: int, end: int):
        return self.k[layer, seq_id, :, :end], self.v[layer, seq_id, :, :end]  # 2 x [KV, end, hd] (views; int8: copies)
