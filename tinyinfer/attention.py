"""Causal self-attention for one sequence, with grouped-query heads.

Every new token asks a question (its query) of every earlier token (their keys) and mixes their values by
how well they answer:  softmax(q k^T / sqrt(hd) + mask) v.  The mask is what makes it causal: token t never
sees tokens after t. With a sliding window it also stops seeing tokens more than `window` behind.

Grouped-query attention (GQA) lets G = n_heads / n_kv_heads query heads share one key/value head, which
shrinks the KV cache G times; multi-query attention (MQA) is the extreme n_kv_heads = 1, plain multi-head
attention the other extreme G = 1. The shared heads are never copied: queries are grouped instead, so one
matrix product per KV head serves its whole group.

Gemma 2 soft-caps the scaled scores before the mask, `cap * tanh(score / cap)`: every score stays inside
(-cap, cap), so no single key can take a softmax over entirely. `soft_cap` is that one formula, passed as
the `softcap` argument (None for models without it) to `attention`, `decode_attention` and (in
tinyinfer/flash_attention.py) `tiled_attention`.

gpt-oss gives every head an attention sink: a learned logit s_h that joins the softmax's denominator and
brings no value,  weights = exp(score) / (sum exp(scores) + exp(s_h)).  The weights then sum to less than 1:
a head with nothing worth reading can attend to "nothing" instead of spreading its attention over whatever
is there. `sink_softmax` is that softmax, and `sinks` (the [n_heads] logits, None for models without them)
reaches the three paths as the soft cap does.

Cost: a chunk of n new tokens against L cached ones does n x L dot products per head: prefill of a T-token
prompt is quadratic (T^2), each decode step linear in the context.
"""

from __future__ import annotations

import operator

import numpy as np

from tinyinfer.backend import xp_of


def causal_mask(n_new: int, start: int, window: int | None = None) -> np.ndarray:
    """Additive mask for queries at positions start..start+n_new-1 over keys 0..start+n_new-1.

    0 where a query may look, -inf where it may not.  -> [n_new, start + n_new]

    >>> causal_mask(2, 1)  # two new tokens after one cached token
    array([[  0.,   0., -inf],
           [  0.,   0.,   0.]], dtype=float32)
    """
    # BEGIN EXERCISE 3.1: the causal (and sliding-window) mask
    query_pos = np.arange(start, start + n_new)[:, None]  # [n, 1]
    key_pos = np.arange(start + n_new)[None, :]  # [1, L]
    visible = key_pos <= query_pos  # [n, L]: no peeking at the future
    if window is not None:
        visible &= key_pos > query_pos - window  # forget what is `window` or more tokens behind
    return np.where(visible, 0.0, -np.inf).astype(np.float32)
    # END EXERCISE 3.1


def soft_cap(scores, cap: float | None):
    """cap * tanh(scores / cap): close to the scores while they are small, never beyond +-cap. None: unchanged.

    >>> soft_cap(np.array([10.0, 100.0]), 50.0).round(3)
    array([ 9.869, 48.201])
    """
    return scores if cap is None else cap * np.tanh(scores / cap)  # np.tanh runs on CuPy arrays too


def softmax(x, axis: int = -1):
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max so large scores do not overflow; -inf entries (a mask,
    a token sampling excludes) get probability 0. The one softmax: attention, routing and sampling use it.

    >>> softmax(np.array([0.0, 0.0, -np.inf])).tolist()
    [0.5, 0.5, 0.0]
    """
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted)  # a NumPy ufunc: runs on CuPy arrays too, through __array_ufunc__
    return e / e.sum(axis=axis, keepdims=True)


def sink_softmax(x, sinks):
    """softmax over the last axis with one more logit, `sinks` (broadcast against x's rows), in the denominator
    only: exp(x) / (sum(exp(x)) + exp(sink)), shifted by the max of both so nothing overflows.

    >>> sink_softmax(np.array([[0.0, 0.0]]), np.array([[0.0]]))  # the sink takes a third: 1 / (1 + 1 + 1)
    array([[0.33333333, 0.33333333]])
    """
    top = np.maximum(x.max(axis=-1, keepdims=True), sinks)  # [..., 1]
    e = np.exp(x - top)
    return e / (e.sum(axis=-1, keepdims=True) + np.exp(sinks - top))


def attention(q, k, v, mask, scale: float | None = None, softcap: float | None = None, sinks=None):
    """Grouped-query attention of n new queries over L keys/values; scores are scaled by `scale`
    (default 1/sqrt(hd), which keeps their variance near 1 whatever the head size), soft-capped by
    `softcap` when given, and softmaxed with one sink logit per head, `sinks` [n_heads], when given.

    q: [n, n_heads, hd], k and v: [n_kv_heads, L, hd], mask: [n, L] -> [n, n_heads * hd]
    """
    if softcap is not None or sinks is not None:  # Gemma 2, gpt-oss: the n queries as n one-query sequences of
        n, (n_kv, L, hd) = q.shape[0], k.shape  # `decode_attention`, which caps and sinks (exercise 3.2 below
        keys, values = (xp_of(x).broadcast_to(x[:, None], (n_kv, n, L, hd)) for x in (k, v))  # stays the plain
        return decode_attention(q, keys, values, mask, scale, softcap, sinks)  # kernel); views [KV, n, L, hd]
    # BEGIN EXERCISE 3.2: grouped-query attention
    n, n_heads, hd = q.shape
    n_kv = k.shape[0]
    group = n_heads // n_kv  # query heads per KV head; head h reads KV head h // group
    q = q.transpose(1, 0, 2).reshape(n_kv, group * n, hd)  # [n, H, hd] -> [KV, G*n, hd]
    scale = hd**-0.5 if scale is None else scale
    scores = q @ k.transpose(0, 2, 1) * scale  # [KV, G*n, hd] @ [KV, hd, L] -> [KV, G*n, L]
    scores = scores.reshape(n_kv, group, n, -1) + mask  # [KV, G, n, L], mask broadcast over heads
    weights = softmax(scores).reshape(n_kv, group * n, -1)  # -> [KV, G*n, L]
    out = weights @ v  # [KV, G*n, L] @ [KV, L, hd] -> [KV, G*n, hd]
    return out.reshape(n_kv, group, n, hd).transpose(2, 0, 1, 3).reshape(n, n_heads * hd)  # -> [n, H*hd]
    # END EXERCISE 3.2


# -- batched decode: one new token for each of many sequences (the serving engine's steady state) -----------


def decode_mask(lengths, L: int, window: int | None = None):
    """Additive mask for B sequences of `lengths` tokens, each querying with its last token, padded to L keys.
    Made where `lengths` lives: on the host, or on the device (inside a CUDA graph, from its static lengths).

    >>> decode_mask(np.array([1, 3]), 3)
    array([[  0., -inf, -inf],
           [  0.,   0.,   0.]], dtype=float32)
    """
    xp = xp_of(lengths)
    key_pos = xp.arange(L)[None, :]  # [1, L]
    query_pos = lengths[:, None] - 1  # [B, 1]
    visible = key_pos <= query_pos  # [B, L]: also hides the padding after each sequence's end
    if window is not None:
        visible &= key_pos > query_pos - window
    return xp.where(visible, 0.0, -np.inf).astype(np.float32)


def decode_attention(q, k, v, mask, scale: float | None = None, softcap: float | None = None, sinks=None,
                     matmul=operator.matmul):
    """`attention` for B sequences at once, one query each, over keys padded to a common length L.

    One batched matrix product per KV head replaces B small ones: the Python loop over sequences disappears,
    which is what makes a decode step of many sequences cost little more than a step of one.

    q: [B, n_heads, hd], k and v: [n_kv_heads, B, L, hd], mask: [B, L], sinks: [n_heads] or None -> [B, n_heads * hd]
    matmul: the batched matrix product (`@`; a CUDA graph's capturable one, tinyinfer/kernels.py)
    """
    B, n_heads, hd = q.shape
    n_kv = k.shape[0]
    group = n_heads // n_kv
    scale = hd**-0.5 if scale is None else scale
    q = q * scale  # scaling the B*H*hd query numbers instead of the B*H*L scores: one pass less over the big array
    q = q.reshape(B, n_kv, group, hd).transpose(1, 0, 2, 3)  # [B, H, hd] -> [KV, B, G, hd]: head h reads h // G
    scores = soft_cap(matmul(q, k.transpose(0, 1, 3, 2)), softcap)  # [KV, B, G, hd] @ [KV, B, hd, L] -> [KV, B, G, L]
    scores += mask[None, :, None, :]  # in place (the scores are a fresh array); padding gets weight exactly 0
    if sinks is None:
        weights = softmax(scores)  # [KV, B, G, L]
    else:  # gpt-oss: head h = (kv, g) has the sink sinks[h]
        weights = sink_softmax(scores, sinks.reshape(n_kv, 1, group, 1))  # [KV, B, G, L]
    out = matmul(weights, v)  # [KV, B, G, L] @ [KV, B, L, hd] -> [KV, B, G, hd]
    return out.transpose(1, 0, 2, 3).reshape(B, n_heads * hd)  # -> [B, KV, G, hd] -> [B, H*hd]
