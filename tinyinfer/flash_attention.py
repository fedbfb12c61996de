"""Tiled attention with the online softmax (the idea of FlashAttention): the same result as `attention`,
without ever holding the whole n x L score matrix.

`attention` (tinyinfer/attention.py) forms every score of n queries against L keys at once: H x n x L
numbers per layer. For an 8,000-token prompt on a model with 32 heads that is 32 x 8,000 x 8,000 x 4 bytes
= 8 GB, for one temporary array. Attention does not need them all at once. Split the keys into tiles and
keep, for every query, three running numbers over the tiles seen so far:

    m  the largest score                       (so exp never overflows)
    l  the sum of exp(score - m)               (the softmax's denominator)
    o  the sum of exp(score - m) * value       (its numerator, a vector of head_dim)

A new tile with scores s and values v updates them (the *online softmax*):

    m' = max(m, max(s))
    l' = l * exp(m - m') + sum(exp(s - m'))            # what was summed under the old max, rescaled
    o' = o * exp(m - m') + exp(s - m') @ v

and after the last tile softmax(scores) @ values = o / l, exactly (up to float rounding). An attention sink
(gpt-oss: a logit s per head in the denominator, with no value) is a tile of one score that comes first:
the running numbers start at m = s, l = exp(s - s) = 1, o = 0 instead of -inf, 0, 0. Memory is now
n x tile scores per head instead of n x L. Queries are tiled too, and a causal mask makes every key tile that
starts after a query tile's last position invisible to all of it: those tiles are skipped, which halves the
arithmetic of a prefill. (On a GPU the point is that a tile lives in on-chip memory, so the scores never
travel to the GPU's main memory; on a CPU the tile stays in the cache.)

Query tiles are shorter than key tiles (QUERY_TILE = 64 queries against 256 keys): the key tiles skipped are
those past a query tile's last position, so a shorter query tile skips more of the future (a 256-token
prefill in one tile of each computes all 256 x 256 scores; in query tiles of 64, 62.5% of them), and the
scores of one step, H x 64 x 256, are a quarter of a square tile's. Measured on one CPU thread, a fresh
prefill of 256-2,048 tokens (9 heads of 64, SmolLM2-135M's shape) took 1.1-2.4x less time than with
tiles of 256 x 256, and a chunk after a long cached context about the same.

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((5, 2, 4)), rng.standard_normal((1, 5, 4)), rng.standard_normal((1, 5, 4))
    >>> from tinyinfer.attention import attention, causal_mask
    >>> bool(np.allclose(tiled_attention(q, k, v, start=0, tile=2), attention(q, k, v, causal_mask(5, 0))))
    True
"""

from __future__ import annotations

import numpy as np  # noqa: F401 - the docstring examples use it

from tinyinfer.attention import causal_mask, soft_cap
from tinyinfer.backend import xp_of


def online_softmax_step(m, l, o, scores, values):
    """Fold one tile of scores [..., n, t] and its values [..., t, hd] into the running (m, l, o) of n queries:
    m, l [..., n, 1], o [..., n, hd]. Returns the new (m, l, o). A query that has seen only masked keys
    (-inf scores) so far keeps m = -inf, l = 0, o = 0.

    >>> m, l, o = np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, 1))
    >>> m, l, o = online_softmax_step(m, l, o, np.array([[0.0]]), np.array([[1.0]]))          # one key, value 1
    >>> m, l, o = online_softmax_step(m, l, o, np.array([[np.log(3.0)]]), np.array([[5.0]]))  # weight 3, value 5
    >>> float(o[0, 0] / l[0, 0])  # (1*1 + 3*5) / (1 + 3)
    4.0
    """
    xp = xp_of(scores)
    # BEGIN EXERCISE 3.3: one step of the online softmax
    m_new = xp.maximum(m, scores.max(axis=-1, keepdims=True))  # [..., n, 1]
    shift = xp.where(m_new == -xp.inf, 0.0, m_new)  # all keys masked so far: exp(-inf - 0) = 0, not nan
    weights = xp.exp(scores - shift)  # [..., n, t]
    rescale = xp.exp(m - shift)  # [..., n, 1]: what was summed under the old max, now under the new one
    l = l * rescale + weights.sum(axis=-1, keepdims=True)
    o = o * rescale + weights @ values  # [..., n, t] @ [..., t, hd] -> [..., n, hd]
    return m_new, l, o
    # END EXERCISE 3.3


QUERY_TILE = 64  # queries per tile (a key tile is `tile` keys): see the module's docstring


def tiled_attention(q, k, v, start: int, window: int | None = None, scale: float | None = None, tile: int = 256,
                    softcap: float | None = None, sinks=None, query_tile: int | None = None):
    """Causal grouped-query attention of n queries at positions start..start+n-1 over keys 0..L-1, in tiles
    of `query_tile` queries (None: QUERY_TILE, or `tile` if smaller) and `tile` keys; equal to
    `attention(q, k, v, causal_mask(n, start, window), scale, softcap, sinks)`. A soft cap acts on each score
    alone, so it caps each tile's scores before their mask; the sinks [n_heads] (None: no sink) start each
    query's running max and denominator.

    The mask is made one query tile at a time ([query_tile, L] instead of [n, L]), by exercise 3.1's
    `causal_mask`.

    q: [n, n_heads, hd], k and v: [n_kv_heads, L, hd] -> [n, n_heads * hd]
    """
    xp = xp_of(q)
    query_tile = min(QUERY_TILE, tile) if query_tile is None else query_tile
    n, n_heads, hd = q.shape
    n_kv, L = k.shape[0], k.shape[1]
    group = n_heads // n_kv
    scale = hd**-0.5 if scale is None else scale
    q = q.reshape(n, n_kv, group, hd).transpose(1, 2, 0, 3)  # [n, H, hd] -> [KV, G, n, hd]: head h reads h // G
    out = xp.empty((n_kv, group, n, hd), dtype=q.dtype)  # [KV, G, n, hd]
    for q0 in range(0, n, query_tile):
        q1 = min(q0 + query_tile, n)
        first, last = start + q0, start + q1 - 1  # positions of this query tile
        lowest = 0 if window is None else max(0, first - window + 1)  # no key before this is visible to any
        mask = xp.asarray(causal_mask(q1 - q0, first, window))  # [nq, last + 1]
        if sinks is None:
            m = xp.full((n_kv, group, q1 - q0, 1), -xp.inf, dtype=q.dtype)  # [KV, G, nq, 1]
            l = xp.zeros_like(m)  # [KV, G, nq, 1]
        else:  # the sink, folded in first: its score is the max so far, its weight exp(0) = 1, its value nothing
            m = xp.broadcast_to(sinks.reshape(n_kv, group, 1, 1), (n_kv, group, q1 - q0, 1)).astype(q.dtype)
            l = xp.ones_like(m)  # [KV, G, nq, 1]
        o = xp.zeros((n_kv, group, q1 - q0, hd), dtype=q.dtype)  # [KV, G, nq, hd]
        end = min(last + 1, L)  # keys after `last` are in the future of every query of the tile: skipped
        for k0 in range(lowest - lowest % tile, end, tile):
            k1 = min(k0 + tile, end)
            keys = k[:, None, k0:k1].transpose(0, 1, 3, 2)  # [KV, 1, hd, t], shared by the G heads of a group
            scores = q[:, :, q0:q1] @ keys * scale  # [KV, G, nq, hd] @ [KV, 1, hd, t] -> [KV, G, nq, t]
            scores = soft_cap(scores, softcap)  # Gemma 2 (None: unchanged)
            scores += mask[:, k0:k1]  # [nq, t], broadcast over heads
            m, l, o = online_softmax_step(m, l, o, scores, v[:, None, k0:k1])  # values [KV, 1, t, hd]
        out[:, :, q0:q1] = o / l
    return out.transpose(2, 0, 1, 3).reshape(n, n_heads * hd)  # [KV, G, n, hd] -> [n, H*hd]

