"""Where the numbers live in memory, chosen for speed, never changes what they are.

- `padded_rows`: a weight whose rows are a multiple of 4 KiB long is stored with a cache line of padding after
  each row. The view has the same shape and values, and a product with it is the same product to the bit
  (BLAS sums in the same order whatever the distance between rows), for one row of x or many.
- `zeros_in_small_pages`: the KV caches' zeroed storage, mapped by the operating system in small pages; it
  is an ordinary writable array of zeros.
"""

from __future__ import annotations

import numpy as np
import pytest
import tiny_models

import tinyinfer
from tinyinfer.backend import zeros_in_small_pages
from tinyinfer.engine import LLM
from tinyinfer.sampling import SamplingParams
from tinyinfer.weights import CACHE_LINE, CACHE_SET_SPAN, arrange_for_matvec, padded_rows


def test_rows_a_multiple_of_4_kib_apart_are_padded_by_an_odd_number_of_cache_lines():
    w = np.random.default_rng(0).standard_normal((64, 2048)).astype(np.float32)  # rows of 8 KiB
    v = padded_rows(w)
    assert v.shape == w.shape and np.array_equal(v, w)
    assert v.strides[1] == 4 and v.strides[0] % CACHE_SET_SPAN != 0 and (v.strides[0] // CACHE_LINE) % 2 == 1
    narrow = np.ones((3, 1000), dtype=np.float32)  # 4,000-byte rows do not alias: left as they are
    assert padded_rows(narrow).flags.c_contiguous and padded_rows(narrow).strides == narrow.strides


@pytest.mark.parametrize("rows", [1, 4, 32])
def test_a_product_with_padded_rows_is_the_same_to_the_bit(rows):
    rng = np.random.default_rng(rows)
    w = rng.standard_normal((96, 1024)).astype(np.float32)  # [in, out], rows of 4 KiB
    x = rng.standard_normal((rows, 96)).astype(np.float32)
    np.testing.assert_array_equal(x @ padded_rows(w), x @ w)
    tall = rng.standard_normal((1024, 96)).astype(np.float32)  # a column-major tall weight, as arranged
    x_tall = rng.standard_normal((rows, 1024)).astype(np.float32)
    np.testing.assert_array_equal(x_tall @ padded_rows(tall.T).T, x_tall @ np.asfortranarray(tall))


def test_a_tied_lm_head_stays_one_table_when_padded():
    d, vocab = 8, 1024  # LM head [d, V]: rows of 4 KiB
    params = {"layers": [], "lm_head": np.random.default_rng(0).standard_normal((d, vocab)).astype(np.float32)}
    arranged = arrange_for_matvec(params, tied=True)
    head, embed = arranged["lm_head"], arranged["embed"]
    assert head.shape == (d, vocab) and head.strides[0] == (vocab * 4 + CACHE_LINE)
    assert embed.shape == (vocab, d) and np.shares_memory(head, embed)  # the embedding is the head's transpose
    np.testing.assert_array_equal(embed[[5, 700]], params["lm_head"][:, [5, 700]].T)


@pytest.fixture(scope="module")
def padded_checkpoint(tmp_path_factory):
    """A tiny Llama whose vocabulary (1,024 ids: LM head rows of 4 KiB) and MLP (1,024 wide) get padded rows."""
    fields = dict(vocab_size=1024, hidden_size=48, intermediate_size=1024, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return tiny_models.build_with_transformers(tmp_path_factory.mktemp("padded") / "llama", "LlamaConfig", fields)


def test_a_model_with_padded_weights_matches_transformers_and_batches_like_generate(padded_checkpoint):
    model = tinyinfer.load(padded_checkpoint)
    assert model.params["lm_head"].strides[0] == 1024 * 4 + CACHE_LINE  # the padding is really there
    assert model.params["layers"][0]["mlp"]["gate"].strides[0] == 1024 * 4 + CACHE_LINE
    ids = tiny_models.prompt_ids(20, vocab_size=1024)
    tiny_models.assert_logits_equal_transformers(model, padded_checkpoint, ids)
    prompts = [tiny_models.prompt_ids(n, seed=seed, vocab_size=1024) for n, seed in ((12, 1), (5, 2), (9, 3))]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    for prompt, result in zip(prompts, LLM(model, block_size=4).generate(prompts, params)):
        assert result.token_ids == list(model.generate(prompt, params).token_ids)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
def test_zeros_in_small_pages_are_writable_zeros(dtype):
    a = zeros_in_small_pages((3, 5, 7), dtype)
    assert a.shape == (3, 5, 7) and a.dtype == dtype and not a.any()
    a[1, 2] = 1
    assert a.sum() == 7 and a[1, 2].all() and not a[0].any()
    assert zeros_in_small_pages((0, 4), np.float32).shape == (0, 4)
