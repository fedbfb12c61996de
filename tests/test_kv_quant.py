"""The KV cache in float16 or int8 (tinyinfer/kv_quant.py): fewer bytes, a bounded error, the same engine."""

from __future__ import annotations

import numpy as np
import pytest

import tinyinfer
from tinyinfer.engine import LLM
from tinyinfer.engine.paged_cache import PagedKVCache
from tinyinfer.errors import TinyInferError
from tinyinfer.kv_cache import ContiguousKVCache
from tinyinfer.kv_quant import QuantizedKV, dequantize_vectors, kv_bytes_per_number, quantize_vectors
from tinyinfer.model import Model, map_arrays
from tinyinfer.distributed import run_ranks
from tinyinfer.parallel import TensorParallelModel
from tinyinfer.sampling import SamplingParams

from tolerances import assert_close, logits_bound

PASSAGE = """ROMEO:
But, soft! what light through yonder window breaks?
It is the east, and Juliet is the sun.
Arise, fair sun, and kill the envious moon,
Who is already sick and pale with grief,
That thou her maid art far more fair than she:
Be not her maid, since she is envious;
Her vestal livery is but sick and green
And none but fools do wear it; cast it off.
It is my lady, O, it is my love!
O, that she knew she were!
She speaks yet she says nothing: what of that?
Her eye discourses; I will answer it.
I am too bold, 'tis not to me she speaks:
Two of the fairest stars in all the heaven,
Having some business, do entreat her eyes
To twinkle in their spheres till they return.
"""


@pytest.fixture(scope="module")
def models():
    """The built-in model three times, one per cache format (the weights are the same)."""
    return {kind: tinyinfer.load("shakespeare", kv_cache_dtype=kind) for kind in ("auto", "float16", "int8")}


def _loss(logits: np.ndarray, ids: list[int]) -> float:
    """Mean next-token negative log-likelihood (nats) of ids under logits [T, V]."""
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(ids) - 1), ids[1:]].mean())


# -- the arithmetic --------------------------------------------------------------------------------------------


def test_each_number_is_off_by_at_most_half_its_vectors_scale():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 16)).astype(np.float32) * rng.uniform(1e-3, 1e3, size=(3, 5, 1)).astype(np.float32)
    x[1, 2] = 0.0  # an all-zero vector: code 0, and it dequantises to exactly 0
    codes, scales = quantize_vectors(x)
    assert codes.dtype == np.int8 and codes.shape == x.shape and scales.shape == (3, 5, 1)
    assert np.abs(codes).max() == 127 and (np.abs(codes).max(axis=-1) == 127).sum() == 14  # each nonzero vector's largest
    back = dequantize_vectors(codes, scales)
    assert np.all(np.abs(back - x) <= scales / 2 * (1 + 1e-6))
    assert np.all(back[1, 2] == 0)


def test_a_token_keeps_its_scale_when_a_larger_one_is_written_after_it():
    store = QuantizedKV(np.zeros((2, 4, 8), dtype=np.int8), np.zeros((2, 4, 1), dtype=np.float32))
    small = np.linspace(-0.01, 0.01, 16, dtype=np.float32).reshape(2, 1, 8)
    store[:, 0:1] = small
    before = store[:, 0:1]
    store[:, 1:2] = small * 1e4  # a per-tensor scale would now crush the first token to zeros
    np.testing.assert_array_equal(store[:, 0:1], before)
    assert np.abs(before - small).max() <= 0.01 / 127 / 2 * (1 + 1e-6)


def test_bytes_per_number():
    assert kv_bytes_per_number("auto", np.float32, 64) == 4
    assert kv_bytes_per_number("float16", np.float32, 64) == 2
    assert kv_bytes_per_number("int8", np.float32, 64) == 1 + 4 / 64


# -- the caches ------------------------------------------------------------------------------------------------


def test_the_caches_hold_the_bytes_the_formula_gives(models):
    cfg = models["auto"].config
    for kind, compute in (("auto", np.float32), ("float16", np.float32), ("int8", np.float32), ("int8", np.float16)):
        contiguous = ContiguousKVCache(cfg, max_seqs=2, max_len=64, dtype=compute, kv_cache_dtype=kind)
        paged = PagedKVCache(cfg, n_blocks=8, block_size=16, dtype=compute, kv_cache_dtype=kind)
        per_number = kv_bytes_per_number(kind, compute, cfg.head_dim)  # int8: its scales are in the compute dtype
        numbers = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 128  # K and V of 128 positions
        assert contiguous.nbytes == paged.nbytes == numbers * per_number


def test_paged_and_contiguous_int8_caches_read_the_same_numbers(models):
    cfg = models["auto"].config
    rng = np.random.default_rng(1)
    contiguous = ContiguousKVCache(cfg, max_seqs=1, max_len=48, kv_cache_dtype="int8")
    paged = PagedKVCache(cfg, n_blocks=6, block_size=16, kv_cache_dtype="int8")
    paged.tables[0] = [4, 1, 3]  # out of order on purpose
    k, v = (rng.standard_normal((40, cfg.n_kv_heads, cfg.head_dim)).astype(np.float32) for _ in range(2))
    for start, end in ((0, 17), (17, 40)):  # a prefill in two chunks
        contiguous.write(2, 0, start, k[start:end], v[start:end])
        paged.write(2, 0, start, k[start:end], v[start:end])
    for a, b in zip(contiguous.read(2, 0, 40), paged.read(2, 0, 40)):
        np.testing.assert_array_equal(a, b)
    assert np.abs(contiguous.read(2, 0, 40)[0] - k.transpose(1, 0, 2)).max() < np.abs(k).max() / 127


# -- the model and the engine ----------------------------------------------------------------------------------


def test_fewer_bytes_per_number_cost_little_accuracy(models):
    ids = models["auto"].tokenizer.encode(PASSAGE)[:128]  # the context window
    exact = models["auto"].logits(ids)
    loss = _loss(exact, ids)
    for kind, max_logit_error in (("float16", 0.05), ("int8", 0.5)):
        logits = models[kind].logits(ids)
        error = np.abs(logits - exact).max()
        assert 0 < error < max_logit_error, kind  # the keys and values really are stored rounded
        assert np.mean(logits.argmax(axis=1) == exact.argmax(axis=1)) >= 0.97
        assert abs(_loss(logits, ids) - loss) < 0.01 * loss


def test_the_engine_on_an_int8_pool_equals_solo_runs_on_an_int8_cache(models):
    """Equal on these requests; in general a draw within ~1e-3 of a decision boundary may differ, when batching's
    float rounding moves a cached number across an int8 rounding boundary (bench serve reports such ties)."""
    model = models["int8"]
    rng = np.random.default_rng(2)
    shared = rng.integers(3, 2000, size=40).tolist()  # two prompts share 2 full blocks: a prefix-cache hit
    prompts = [shared + [5, 6], shared + [7], rng.integers(3, 2000, size=23).tolist(), [9]]
    params = [SamplingParams(temperature=0, max_tokens=24), SamplingParams(temperature=0.9, seed=3, max_tokens=24)] * 2
    llm = LLM(model, block_size=16, max_num_seqs=4)
    assert isinstance(llm.cache.k[0], QuantizedKV)
    results = llm.generate(prompts[:1], params[:1]) + llm.generate(prompts[1:], params[1:])  # the 2nd reuses the 1st's blocks
    for prompt, p, out in zip(prompts, params, results):
        assert out.token_ids == model.generate(prompt, p).token_ids
    assert llm.stats().prefix_cache_hit_rate > 0
    assert llm.scheduler.allocator.num_free == llm.cache.n_blocks


def test_the_engine_takes_its_own_kv_cache_dtype(models):
    assert not isinstance(LLM(models["auto"]).cache.k[0], QuantizedKV)
    assert isinstance(LLM(models["auto"], kv_cache_dtype="int8").cache.k[0], QuantizedKV)
    assert LLM(models["auto"], kv_cache_dtype="float16").cache.k[0].dtype == np.float16


def test_tensor_parallel_shards_keep_the_models_kv_cache_dtype(models):
    ids = models["int8"].tokenizer.encode(PASSAGE)[:64]
    kinds = run_ranks(2, lambda comm: type(TensorParallelModel(models["int8"], comm).new_cache().k))
    assert kinds == [QuantizedKV, QuantizedKV]
    # Each head vector has its own scale, so splitting the heads over ranks quantises the same numbers. In float32
    # the split products' rounding puts a few hundred of the 131k cached numbers across a code boundary (a step of
    # max|v| / 127 each); in float64 none is that close, so the logits differ by float64 rounding alone.
    model = models["int8"]
    wide = Model(model.config, map_arrays(model.params, lambda a: a.astype(np.float64)), dtype=np.float64,
                 kv_cache_dtype="int8")
    whole = wide.logits(ids)  # [64, V]
    for logits in run_ranks(2, lambda comm: TensorParallelModel(wide, comm).logits(ids)):
        assert_close(logits, whole, logits_bound(wide.config, whole, dtype=np.float64, own_angles=False))
    assert np.abs(model.logits(ids) - models["auto"].logits(ids)).max() > 0.02  # while int8 itself moves more


@pytest.mark.parametrize("make", [lambda: tinyinfer.load("shakespeare", kv_cache_dtype="fp8"),
                                  lambda: LLM(tinyinfer.load("shakespeare"), kv_cache_dtype="int4")])
def test_an_unknown_kv_cache_dtype_is_a_clear_error(make):
    with pytest.raises(TinyInferError, match="kv_cache_dtype .* use one of auto, float16, int8"):
        make()
