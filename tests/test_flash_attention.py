"""Tiled attention with the online softmax (tinyinfer/flash_attention.py) against plain attention."""

from __future__ import annotations

import numpy as np
import pytest

import tinyinfer
import tinyinfer.flash_attention as flash
import tinyinfer.model as model_module
from tinyinfer.attention import attention, causal_mask, softmax
from tinyinfer.flash_attention import online_softmax_step, tiled_attention
from tinyinfer.model import SeqChunk

from tolerances import assert_close, logits_bound


def random_qkv(n: int, L: int, n_heads: int, n_kv: int, hd: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, n_heads, hd)).astype(np.float32) * 3  # large scores: an unshifted exp would overflow
    k, v = rng.normal(size=(2, n_kv, L, hd)).astype(np.float32)
    return q, k, v


@pytest.mark.exercise("3.3")
def test_online_softmax_folds_tiles_into_the_softmax():
    """Folding the scores in tiles gives softmax(scores) @ values, also when a query's first tile is all masked."""
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(3, 10)) * 20  # [n, L]: exp(scores) alone would overflow float32 ranges
    scores[0, :4] = -np.inf  # query 0 sees nothing in the first tile
    scores[2, 7:] = -np.inf
    values = rng.normal(size=(10, 5))  # [L, hd]
    m, l, o = np.full((3, 1), -np.inf), np.zeros((3, 1)), np.zeros((3, 5))
    for k0, k1 in [(0, 4), (4, 7), (7, 10)]:
        m, l, o = online_softmax_step(m, l, o, scores[:, k0:k1], values[k0:k1])
        if k1 == 4:  # after the masked tile, query 0 has nothing yet: no nan
            assert m[0, 0] == -np.inf and l[0, 0] == 0 and not np.isnan(o).any()
    np.testing.assert_allclose(o / l, softmax(scores) @ values, rtol=1e-12)
    np.testing.assert_array_equal(m[:, 0], scores.max(axis=1))


@pytest.mark.parametrize("n, start, n_heads, n_kv, window, tile", [
    (300, 0, 6, 2, None, 128),    # a prefill: grouped-query heads, n not a multiple of the tile
    (100, 250, 4, 4, None, 64),   # a chunk after 250 cached tokens, multi-head
    (1, 500, 4, 1, None, 128),    # one decode query, multi-query
    (257, 40, 6, 3, 100, 64),     # a sliding window shorter than the tile count reaches
    (90, 0, 2, 1, 200, 32),       # a window longer than the text: no effect
])
def test_tiled_attention_equals_attention(n, start, n_heads, n_kv, window, tile):
    q, k, v = random_qkv(n, start + n, n_heads, n_kv)
    want = attention(q, k, v, causal_mask(n, start, window), scale=0.3)
    np.testing.assert_allclose(tiled_attention(q, k, v, start, window, scale=0.3, tile=tile), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("window, query_tile, steps", [
    (None, 128, 1 + 2 + 3 + 4),                   # square tiles: 4 query tiles see 1, 2, 3, 4 key tiles
    (128, 128, 1 + 2 + 2 + 2),
    (None, None, 1 + 1 + 2 + 2 + 3 + 3 + 4 + 4),  # the default: query tiles of QUERY_TILE (64) positions
    (128, None, 1 + 1 + 2 + 2 + 2 + 2 + 2 + 2),
])
def test_key_tiles_no_query_of_a_tile_can_see_are_skipped(monkeypatch, window, query_tile, steps):
    """Causal: a query tile never visits key tiles after its last position (half the work of a prefill);
    with a window, nor those before its first position minus the window."""
    calls = []
    monkeypatch.setattr(flash, "online_softmax_step", lambda *args: calls.append(1) or online_softmax_step(*args))
    monkeypatch.setattr(flash, "QUERY_TILE", 64)
    q, k, v = random_qkv(512, 512, 2, 1)
    tiled_attention(q, k, v, 0, window, tile=128, query_tile=query_tile)
    assert len(calls) == steps


def test_query_tiles_shorter_than_key_tiles_give_the_same_attention():
    """Query tiles of 24 positions against key tiles of 64, past a cached context and under a window (so
    query tiles start inside key tiles), equal plain attention."""
    q, k, v = random_qkv(150, 170, 4, 2)
    for window in (None, 50):
        want = attention(q, k, v, causal_mask(150, 20, window))
        got = tiled_attention(q, k, v, 20, window, tile=64, query_tile=24)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_model_long_prefill_is_the_same_tiled_or_not(monkeypatch):
    """The model tiles a chunk's attention once its scores outgrow a cache; the logits do not change."""
    model = tinyinfer.load("shakespeare")
    ids = np.random.default_rng(0).integers(0, 2000, 128).tolist()  # a whole context window
    monkeypatch.setattr(model_module, "TILED_ATTENTION_MIN_QUERIES", 0)  # every chunk tiled
    tiled = model.logits(ids)
    monkeypatch.setattr(model_module, "TILED_ATTENTION_MIN_QUERIES", float("inf"))  # none
    monkeypatch.setattr(model_module, "TILED_ATTENTION_MAX_SCORES", float("inf"))
    untiled = model.logits(ids)  # [400, V]
    assert_close(tiled, untiled, logits_bound(model.config, untiled, own_angles=False))


def test_model_tiles_chunks_of_two_query_tiles_and_chunks_of_many_scores(monkeypatch):
    """Which prompt chunks the model tiles: those of TILED_ATTENTION_MIN_QUERIES queries or more (the causal
    skip pays), and shorter ones only past TILED_ATTENTION_MAX_SCORES scores; the others attend untiled."""
    model = tinyinfer.load("shakespeare")
    H = model.config.n_heads
    tiled = []  # (queries, start) of each tiled call

    def spy(q, k, v, start, *args, **kwargs):
        tiled.append((q.shape[0], start))
        return tiled_attention(q, k, v, start, *args, **kwargs)

    monkeypatch.setattr(model_module, "tiled_attention", spy)
    monkeypatch.setattr(model_module, "TILED_ATTENTION_MIN_QUERIES", 32)
    monkeypatch.setattr(model_module, "TILED_ATTENTION_MAX_SCORES", H * 8 * 100)  # 8 queries over 100 keys
    cache = model.new_cache(1, 128)
    ids = np.random.default_rng(0).integers(0, 2000, 108).tolist()
    for start, end in [(0, 40), (40, 48), (48, 100), (100, 108)]:
        model.forward([SeqChunk(0, start, ids[start:end])], cache)
    assert sorted(set(tiled)) == [(8, 100), (40, 0), (52, 48)]  # the 8 queries after 40 tokens untiled
    assert len(tiled) == 3 * model.config.n_layers
