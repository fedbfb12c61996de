"""Tensor parallelism (tinyinfer/parallel.py): the split model against the whole one."""

from __future__ import annotations

import numpy as np
import pytest

import tinyinfer
from tinyinfer.errors import TinyInferError
from tinyinfer.parallel import TensorParallelModel, ring_all_reduce_bytes

from tolerances import assert_close, logits_bound
from tiny_models import TINY_CONFIG, build_with_transformers, prompt_ids, tiny_checkpoint  # noqa: F401 - a fixture


@pytest.mark.exercise("14.1")
@pytest.mark.parametrize("n", [1, 2])
def test_split_builtin_model_gives_the_same_logits_and_tokens(n):
    model = tinyinfer.load("shakespeare")
    split = TensorParallelModel(model, n)
    ids = np.random.default_rng(0).integers(0, 2000, 40).tolist()
    whole = model.logits(ids)  # [40, V]
    assert_close(split.logits(ids), whole, logits_bound(model.config, whole, own_angles=False))
    params = dict(max_tokens=24, temperature=0, ignore_eos=True)
    assert split.generate(ids, **params).token_ids == model.generate(ids, **params).token_ids


@pytest.mark.exercise("14.1")
@pytest.mark.parametrize("variant", ["gpt2", "llama_bias", "qwen3", "mistral_window", "llama_mqa"])
def test_split_every_architecture(tiny_checkpoint, variant):
    """Biases, per-head q/k norms, sliding windows, GPT-2's stacked c_attn; MQA only splits over 1 device."""
    model = tinyinfer.load(tiny_checkpoint(variant))
    n = 1 if model.config.n_kv_heads == 1 else 2
    ids = prompt_ids(20)
    whole = model.logits(ids)  # [20, V]
    assert_close(TensorParallelModel(model, n).logits(ids), whole, logits_bound(model.config, whole, own_angles=False))


# transformers config class -> fields over tests/tiny_models.TINY_CONFIG: the blocks and norms of newer families
SPLIT_FAMILIES = {
    "StableLmConfig": {"qk_layernorm": True, "use_parallel_residual": True, "hidden_size": 64},  # a gain per head
    "CohereConfig": {"use_qk_norm": True, "logit_scale": 0.8},  # per-head gains, RoPE pairs reordered at load
    "FalconConfig": {"new_decoder_architecture": True, "num_kv_heads": 2, "bias": True},
    "GPTNeoXConfig": {"rotary_pct": 0.5},
    "PhiConfig": {"partial_rotary_factor": 0.5},
    "GraniteConfig": {"embedding_multiplier": 2.0, "residual_multiplier": 0.5, "attention_multiplier": 0.2,
                      "logits_scaling": 2.0},
}


@pytest.mark.parametrize("config_class", SPLIT_FAMILIES)
def test_split_newer_families(config_class, tmp_path):
    """Parallel blocks, multipliers, fused rows reordered at load and per-head q/k norm gains (which go with
    their heads) split like the rest."""
    folder = build_with_transformers(tmp_path / "m", config_class, {**TINY_CONFIG, **SPLIT_FAMILIES[config_class]})
    model = tinyinfer.load(folder)
    ids = prompt_ids(20)
    whole = model.logits(ids)  # [20, V]
    assert_close(TensorParallelModel(model, 2).logits(ids), whole, logits_bound(model.config, whole, own_angles=False))


def test_two_all_reduces_per_layer_are_counted():
    model = tinyinfer.load("shakespeare")
    split = TensorParallelModel(model, 2)
    split.logits(list(range(10)))
    activation = 10 * model.config.d_model * 4  # [T, d] in float32
    assert split.bytes_per_device == model.config.n_layers * 2 * ring_all_reduce_bytes(activation, 2)


def test_what_cannot_be_split_is_a_clear_error():
    model = tinyinfer.load("shakespeare")  # 2 KV heads, 512 hidden units
    with pytest.raises(TinyInferError, match="num_key_value_heads=2 does not split over 4 devices"):
        TensorParallelModel(model, 4)
    with pytest.raises(TinyInferError, match="integer >= 1"):
        TensorParallelModel(model, 0)
    with pytest.raises(TinyInferError, match="Mixture-of-Experts"):
        TensorParallelModel(tinyinfer.load("shakespeare-moe"), 2)
