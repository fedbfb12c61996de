"""Fewer bytes per cached number: the KV cache in float16 or int8.

Chapter 05 counts what a token adds to the KV cache: 2 x layers x kv_heads x head_dim x bytes per number. The
weights are read once per step whatever the batch; the cache grows with every token of every sequence, so at
long contexts and large batches it is the cache, not the weights, that decides how many conversations fit
(chapter 09). Storing it with fewer bytes per number is the same trade as weight quantisation (chapter 12):
memory for a small, bounded error.

Three formats (`KV_CACHE_DTYPES`), chosen per model (`tinyinfer.load(..., kv_cache_dtype="int8")`) or per
engine (`LLM(model, kv_cache_dtype="int8")`):

- "auto": the model's compute dtype (float32 on a CPU): exact, the default.
- "float16": half the bytes of float32; each number rounded to 11 significant bits (relative error <= 2^-11).
- "int8": one byte per number plus one scale per token and KV head, by the symmetric quantisation of
  chapter 12 (`quantize_groups`, exercise 12.1) with one group per head vector of head_dim numbers:

      scale = max |x| over the head_dim numbers / 127,   code = round(x / scale),   x ~ code * scale

  so each number is off by at most half its vector's scale. A scale per *token* (not per channel, as weights
  have) because a cache is written one token at a time: a token's scale is fixed when it is written, and an
  old token is never re-quantised when a later one is larger.
  Bytes per token and head: head_dim + 4 (the scale, kept in the compute dtype, float32) instead of 4 x head_dim:
  3.6x fewer at head_dim 32, 3.8x at 64, 3.9x at 128.

An int8 cache keeps its numbers in a `QuantizedKV`: an array-like that quantises what is written into it and
dequantises what is read, indexed exactly like the float array it replaces. The caches (tinyinfer/kv_cache.py,
tinyinfer/engine/paged_cache.py) index their storage the same way whatever it is, so neither changes.
"""

from __future__ import annotations

import numpy as np

from tinyinfer.backend import zeros_in_small_pages
from tinyinfer.errors import TinyInferError
from tinyinfer.quantize import quantize_groups

KV_CACHE_DTYPES = ("auto", "float16", "int8")


def check_kv_cache_dtype(kv_cache_dtype) -> str:
    """The format name, or a TinyInferError naming the choices."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise TinyInferError(f"kv_cache_dtype {kv_cache_dtype!r} is not supported: use one of {', '.join(KV_CACHE_DTYPES)}")
    return kv_cache_dtype


def kv_bytes_per_number(kv_cache_dtype: str, compute_dtype, head_dim: int) -> float:
    """Bytes one cached number costs in this format, scales included.

    >>> kv_bytes_per_number("int8", np.float32, 32)   # (32 codes + a float32 scale) / 32 numbers
    1.125
    """
    if kv_cache_dtype == "int8":
        return 1 + np.dtype(compute_dtype).itemsize / head_dim  # the scale is kept in the compute dtype
    return np.dtype(np.float16 if kv_cache_dtype == "float16" else compute_dtype).itemsize


def kv_storage(shape: tuple[int, ...], kv_cache_dtype: str, compute_dtype, xp=np):
    """Zeroed storage for cached keys or values of `shape` [..., head_dim] in the given format."""
    if kv_cache_dtype == "int8":
        return QuantizedKV(zeros_in_small_pages(shape, np.int8, xp),
                           zeros_in_small_pages((*shape[:-1], 1), compute_dtype, xp))
    return zeros_in_small_pages(shape, np.float16 if kv_cache_dtype == "float16" else compute_dtype, xp)


def quantize_vectors(x):
    """Symmetric int8 quantisation of each vector along the last axis: x [..., hd] -> codes [..., hd] (int8),
    scales [..., 1]. Exercise 12.1's `quantize_groups` does the arithmetic, one group per vector.

    >>> codes, scales = quantize_vectors(np.array([[0.5, -1.0, 0.25]], dtype=np.float32))
    >>> codes.tolist(), (scales * 127).tolist()
    ([[64, -127, 32]], [[1.0]])
    """
    flat = x.reshape(-1, x.shape[-1])  # [..., hd] -> [N, hd]
    codes, scales = quantize_groups(flat.T, bits=8, group_size=None)  # [hd, N] -> codes [hd, N], scales [1, N]
    return codes.T.reshape(x.shape), scales.T.reshape(*x.shape[:-1], 1)  # -> [..., hd], [..., 1]


def dequantize_vectors(codes, scales):
    """code x its vector's scale (exercise 12.2's rule, one group per vector): codes [..., hd], scales [..., 1]
    -> [..., hd] in the scales' dtype."""
    return codes * scales  # [..., hd] x [..., 1] -> [..., hd]


class QuantizedKV:
    """Cached keys or values as int8 codes [..., hd] and one scale per vector [..., 1].

    Indexed like the float array it stands for, with any index that leaves the last axis (head_dim) whole:
    `store[index] = x` quantises x, `store[index]` dequantises, `store.take(ids, axis)` gathers.
    """

    def __init__(self, codes, scales):
        self.codes = codes  # [..., hd] int8
        self.scales = scales  # [..., 1] in the compute dtype

    def __setitem__(self, index, x) -> None:
        self.codes[index], self.scales[index] = quantize_vectors(x)

    def __getitem__(self, index):
        return dequantize_vectors(self.codes[index], self.scales[index])

    def take(self, indices, axis: int):
        return dequantize_vectors(self.codes.take(indices, axis=axis), self.scales.take(indices, axis=axis))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.codes.shape

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scales.nbytes
