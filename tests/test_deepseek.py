"""DeepSeek-V3 and DeepSeek-V2 against transformers, on tiny random checkpoints built here.

What DeepSeek-V3 adds to the Llama body, and where the variants below make it matter:
- multi-head latent attention (tinyinfer/mla.py), run in the absorbed form over one cached latent key/value head
  of kv_lora_rank + qk_rope_head_dim numbers: queries through a low-rank bottleneck (`q_lora_rank` 24) or one
  q_proj (null); the rotary coordinates pairing neighbours (`rope_interleave`, reordered at load) or halves;
  YaRN with `mscale_all_dim` (0.8: the score scale is (qk_nope + qk_rope)^-1/2 x mscale^2, and cos and sin carry
  mscale(mscale) / mscale(mscale_all_dim)) or plain RoPE;
- the group-limited sigmoid router (tinyinfer/moe.py): 8 experts in 4 groups of which the best 2 are kept (or 2
  groups, 1 kept), a nonzero e_score_correction_bias (random here: transformers initialises it to zero) steering
  the choice only, `norm_topk_prob` both ways, `routed_scaling_factor`; shared experts (n_shared_experts x
  moe_intermediate_size wide, ungated); the first `first_k_dense_replace` layers dense;
- DeepSeek-V2 (the same attention, its RoPE always on neighbouring pairs): softmax routing, `topk_method`
  "group_limited_greedy" (groups ranked by their best expert) or "greedy" (V2-Lite, with one q_proj), never
  normalised, times `routed_scaling_factor`.

Every parameter is re-randomised with a wide spread (weights_scripts/make_tiny_models.py says why). MISTAKES shows
that undoing any switch moves the logits by more than MISTAKE_MIN, far past the tolerance, so the parity is not luck.

Checked: logits against transformers (float32, eager attention) within 1e-4 at every position; cached decode
against tinyinfer's own full recompute within 1e-9 (in float64); greedy tokens equal to transformers' generate;
the serving engine (paged cache, batched decode) equal to model.generate; the parameter count from the config;
what the KV cache holds per token.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
import transformers
from tiny_models import (
    TINY_CONFIG,
    build_with_transformers,
    built_once,
    generation_tests,
    hf_model,
    memory_test,
    mistake_test,
    parity_tests,
    prompt_ids,
)

import tinyinfer
import tinyinfer.families
import tinyinfer.model
from tinyinfer.families import config_from_hf
from tinyinfer.engine.paged_cache import PagedKVCache
from tinyinfer.errors import TinyInferError
from tinyinfer.cli import main
from tinyinfer.memory import kv_bytes_per_token
from tinyinfer.model import SeqChunk
from tinyinfer.families.deepseek_v2 import rope_columns as _mla_rope_columns

YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
        "mscale": 1.0, "mscale_all_dim": 0.8, "beta_fast": 32, "beta_slow": 1}
DEEPSEEK_V3 = dict(TINY_CONFIG, num_hidden_layers=3, num_key_value_heads=4, n_routed_experts=8, n_group=4,
                   topk_group=2, num_experts_per_tok=3, moe_intermediate_size=20, first_k_dense_replace=1,
                   n_shared_experts=2, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=12,
                   v_head_dim=10, routed_scaling_factor=2.5, rope_parameters=YARN)
NO_Q_LORA = dict(DEEPSEEK_V3, q_lora_rank=None, rope_interleave=False, norm_topk_prob=False, n_group=2, topk_group=1,
                 num_experts_per_tok=2, first_k_dense_replace=2, n_shared_experts=1, routed_scaling_factor=1.5,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

DEEPSEEK_V2 = dict({k: v for k, v in DEEPSEEK_V3.items() if k != "rope_interleave"},
                   topk_method="group_limited_greedy", routed_scaling_factor=2.0)
V2_LITE = dict(DEEPSEEK_V2, q_lora_rank=None, topk_method="greedy", n_group=None, topk_group=None,
               routed_scaling_factor=1.5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

# name -> (transformers config class, fields, stored dtype)
VARIANTS = {
    "v3_q_lora_yarn_interleaved": ("DeepseekV3Config", DEEPSEEK_V3, "float32"),
    "v3_q_proj_plain_rope_halves": ("DeepseekV3Config", NO_Q_LORA, "float32"),
    "v3_bf16": ("DeepseekV3Config", DEEPSEEK_V3, "bfloat16"),
    "v2_group_limited_yarn": ("DeepseekV2Config", DEEPSEEK_V2, "float32"),
    "v2_lite_greedy": ("DeepseekV2Config", V2_LITE, "float32"),
}


def build_variant(name: str, folder):
    """The checkpoint of VARIANTS[name], written to `folder` (the routing bias random too, or it could not matter)."""
    return build_with_transformers(folder, *VARIANTS[name], random_buffers=("e_score_correction_bias",))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(name) -> Path`, each variant built once for this module."""
    return built_once(tmp_path_factory.mktemp("deepseek"), build_variant)


test_logits_match_transformers_at_every_position, test_cached_decode_equals_full_recompute = parity_tests(VARIANTS)
test_greedy_tokens_equal_transformers_generate, test_serving_engine_gives_the_greedy_tokens_of_generate = \
    generation_tests(["v3_q_lora_yarn_interleaved", "v3_q_proj_plain_rope_halves", "v2_group_limited_yarn",
                      "v2_lite_greedy"])
test_memory_arithmetic_counts_every_parameter = memory_test(VARIANTS)


def _layers(params: dict, change) -> dict:
    return dict(params, layers=[change(layer) for layer in params["layers"]])


def _without_correction_bias(params: dict, cfg) -> dict:
    return _layers(params, lambda layer: dict(layer, mlp=dict(layer["mlp"], router_bias=np.zeros_like(
        layer["mlp"]["router_bias"]))) if "router_bias" in layer["mlp"] else layer)


def _rope_left_in_pairs(params: dict, cfg) -> dict:
    """The rotary columns of q_b and kv_a left in the file's neighbouring-pair order (no reordering at load)."""
    q_back, kv_back = (np.argsort(columns) for columns in _mla_rope_columns(cfg))
    q = "q_b" if cfg.q_lora_rank else "q"
    return _layers(params, lambda layer: dict(layer, **{q: layer[q][:, q_back]}, kv_a=layer["kv_a"][:, kv_back]))


def _expanded_scale(cfg) -> dict:
    """The score scale of the absorbed head's width, (kv_lora_rank + qk_rope_head_dim)^-1/2, not the expanded one's."""
    return {"attn_multiplier": cfg.head_dim ** -0.5}


V3 = "v3_q_lora_yarn_interleaved"
V3_CONFIG = config_from_hf({"model_type": "deepseek_v3", **DEEPSEEK_V3})
# Each switch undone (a Config change, and what it does to the loaded parameters, if anything) must move some
# logit by MISTAKE_MIN, or the variants would not catch a loader that forgot it.
MISTAKES = {
    "no_correction_bias": (V3, {}, _without_correction_bias),
    "no_group_limit": (V3, {"topk_groups": 4}, None),
    "no_routed_scaling": (V3, {"routed_scaling": 1.0}, None),
    "not_normalised": (V3, {"norm_topk_prob": False}, None),
    "shared_expert_gated": (V3, {"shared_expert_gated": True}, lambda params, cfg: _layers(params, lambda layer: dict(
        layer, mlp=dict(layer["mlp"], shared_gate=np.zeros((cfg.d_model, 1), np.float32)))
        if "shared" in layer["mlp"] else layer)),
    "rope_not_reordered": (V3, {}, _rope_left_in_pairs),
    "scale_of_the_latent_width": (V3, _expanded_scale(V3_CONFIG), None),
    "scale_without_mscale": (V3, {"attn_multiplier": (12 + 8) ** -0.5}, None),
    "v2-no_group_limit": ("v2_group_limited_yarn", {"topk_groups": 4}, None),
    "v2-no_routed_scaling": ("v2_group_limited_yarn", {"routed_scaling": 1.0}, None),
    "v2-normalised": ("v2_group_limited_yarn", {"norm_topk_prob": True}, None),  # transformers' V2 never is
    "v2-rope_not_reordered": ("v2_group_limited_yarn", {}, _rope_left_in_pairs),
    "v2_lite-rope_not_reordered": ("v2_lite_greedy", {}, _rope_left_in_pairs),
    "v2_lite-no_routed_scaling": ("v2_lite_greedy", {"routed_scaling": 1.0}, None),
}
test_each_mistake_moves_the_logits_far = mistake_test(MISTAKES)


def test_kv_cache_holds_one_latent_head_per_token_and_layer(checkpoint, capsys):
    """Per token and layer the cache holds K = [normed latent | rotated shared key], kv_lora_rank + qk_rope_head_dim
    = 24 numbers, and V is the same array (the values are the keys: one array, contiguous and paged alike);
    transformers' cache of the same model holds those 24 as its key (the 16-number latent) and value (the
    8-number rotary key)."""
    folder = checkpoint(V3)
    model = tinyinfer.load(folder)
    cfg, per_token = model.config, 16 + 8
    assert (cfg.n_kv_heads, cfg.head_dim) == (1, per_token)
    cache = model.new_cache(1, 32)
    assert cache.k.shape == (3, 1, 1, 32, per_token) and cache.v is cache.k  # [layers, seqs, KV, max_len, hd]
    assert cache.nbytes == 3 * 32 * per_token * 4
    paged = PagedKVCache(cfg, n_blocks=4, block_size=8)
    assert paged.k[0].shape[0] * paged.k[0].shape[-1] == per_token and paged.v is paged.k
    assert paged.nbytes == 3 * 4 * 8 * per_token * 4
    assert cfg.kv_bytes_per_token == kv_bytes_per_token(3, 1, per_token, 4) // 2 == 3 * per_token * 4
    assert main(["memory", "--model", str(folder), "--dtype", "fp32"]) == 0
    assert f"1 x 3 layers x 1 kv_heads x {per_token} head_dim x 4 B = {3 * per_token * 4:,} B" in capsys.readouterr().out
    ids = prompt_ids(5)
    with torch.no_grad():
        hf_cache = hf_model(folder)(torch.tensor([ids]), use_cache=True).past_key_values
    layer = hf_cache.layers[0]
    assert layer.keys.shape[-1] + layer.values.shape[-1] == per_token  # [1, 1, 5, 16] and [1, 1, 5, 8]
    model.forward([SeqChunk(0, 0, ids)], cache)
    np.testing.assert_allclose(cache.k[0, 0, 0, :5, :16], layer.keys[0, 0].numpy(), rtol=0, atol=1e-5)


def test_router_keeps_the_best_groups_and_weighs_unbiased_scores():
    """Four experts in two groups: expert 0 scores best, but group 2's two best biased scores sum higher, so the
    token goes to experts 2 and 3, weighted by their unbiased sigmoid scores, normalised, times the scaling."""
    from tinyinfer.moe import route_grouped

    cfg = dataclasses.replace(V3_CONFIG, n_experts=4, n_experts_per_tok=2, n_groups=2, topk_groups=1,
                              routed_scaling=2.0, norm_topk_prob=True)
    scores = np.array([0.9, 0.1, 0.6, 0.5])
    h = np.log(scores / (1 - scores))[None, :].astype(np.float32)  # logits whose sigmoids are the scores
    bias = np.array([0.0, 0.0, 0.0, 0.1], dtype=np.float32)  # expert 3 chosen before expert 2 thanks to it
    weights, chosen, _ = route_grouped(h, {"router": np.eye(4, dtype=np.float32), "router_bias": bias}, cfg)
    assert chosen.tolist() == [[3, 2]]
    np.testing.assert_allclose(weights, [[2 * 0.5 / 1.1, 2 * 0.6 / 1.1]], rtol=1e-6)


def _edited(folder, tmp_path, **edits):
    config = json.loads((folder / "config.json").read_text()) | edits
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("model_type, edit, message", [
    ("deepseek_v2", {"topk_method": "noaux_tc"}, "topk_method='noaux_tc' is not supported"),
    ("deepseek_v2", {"mlp_bias": True}, "mlp_bias=true"),
    ("deepseek_v2", {"attention_bias": True}, "attention_bias=true"),
    ("deepseek_v2", {"num_experts_per_tok": None}, "num_experts_per_tok=None"),
    ("deepseek_v2", {"norm_topk_prob": True}, "norm_topk_prob=True is not supported: transformers' deepseek_v2 "
                                              "ignores it"),
    ("deepseek_v2", {"moe_layer_freq": 2}, "moe_layer_freq=2"),
    ("deepseek_v3", {"scoring_func": "softmax"}, "scoring_func='softmax'"),
    ("deepseek_v3", {"topk_method": "greedy"}, "topk_method='greedy'"),
] + [("deepseek_v3", edit, message) for edit, message in [
    ({"attention_bias": True}, "attention_bias=true"),
    ({"n_group": 3}, "n_routed_experts=8 in n_group=3 groups"),
    ({"topk_group": 5}, "topk_group=5"),
    ({"num_experts_per_tok": 5, "topk_group": 1}, "num_experts_per_tok=5"),
    ({"qk_rope_head_dim": 7}, "qk_rope_head_dim=7 must be an integer >= 1 and even"),
    ({"kv_lora_rank": None}, "kv_lora_rank=None"),
]])
def test_unsupported_or_inconsistent_options_are_refused_by_name(model_type, edit, message):
    fields = DEEPSEEK_V3 if model_type == "deepseek_v3" else DEEPSEEK_V2
    with pytest.raises(TinyInferError, match=message):
        config_from_hf({"model_type": model_type, **fields, **edit})


@pytest.mark.parametrize("model_type", ["deepseek_v2", "deepseek_v3"])
def test_fields_left_out_of_config_json_are_read_as_transformers_reads_them(model_type, tmp_path):
    """A config.json with only the sizes (and V2's top-k, null by default): tinyinfer's Config agrees with
    transformers' config object (the defaults of the rest, each family's DEFAULTS, are those of the config classes:
    tests/test_config_variants.py)."""
    sizes = dict(model_type=model_type, vocab_size=300, hidden_size=128, num_hidden_layers=5, num_attention_heads=32,
                 intermediate_size=96, moe_intermediate_size=32, num_experts_per_tok=4)
    (tmp_path / "config.json").write_text(json.dumps(sizes))
    theirs, ours = transformers.AutoConfig.from_pretrained(tmp_path), tinyinfer.families.load_hf_config(tmp_path)
    assert (ours.n_kv_heads, ours.head_dim) == (1, theirs.kv_lora_rank + theirs.qk_rope_head_dim)
    assert ours.rotary_dim == theirs.head_dim  # transformers' rope width: qk_rope_head_dim
    assert (ours.norm_eps, ours.rope_theta, ours.max_seq_len, ours.tie_word_embeddings) == (
        theirs.rms_norm_eps, theirs.rope_parameters["rope_theta"], theirs.max_position_embeddings,
        theirs.tie_word_embeddings)
    assert (ours.q_lora_rank, ours.qk_nope_head_dim, ours.v_head_dim, ours.interleaved_rope) == (
        theirs.q_lora_rank, theirs.qk_nope_head_dim, theirs.v_head_dim, getattr(theirs, "rope_interleave", True))
    assert ours.attention_scale(0) == theirs.qk_head_dim ** -0.5
    assert (ours.n_experts, ours.n_experts_per_tok, ours.routed_scaling, ours.norm_topk_prob) == (
        theirs.n_routed_experts, theirs.num_experts_per_tok, theirs.routed_scaling_factor, theirs.norm_topk_prob)
    if model_type == "deepseek_v3":
        assert (ours.router, ours.n_groups, ours.topk_groups) == ("sigmoid_grouped", theirs.n_group, theirs.topk_group)
    else:  # greedy: one group holding every expert
        assert (theirs.topk_method, ours.router, ours.n_groups, ours.topk_groups) == ("greedy", "softmax_grouped", 1, 1)
    assert [ours.is_moe_layer(i) for i in range(5)] == [i >= theirs.first_k_dense_replace for i in range(5)]
    assert ours.shared_expert_d_ff == theirs.moe_intermediate_size * theirs.n_shared_experts


def test_rope_and_score_scale_of_a_hub_config_are_transformers():
    """DeepSeek-V3's own config.json (older dialect: rope_scaling with "type": "yarn", factor 40, mscale and
    mscale_all_dim 1, over 4096 original positions; 128 + 64 query/key coordinates), at a tiny width: the rotary
    frequencies, the factor on cos and sin, and the score scale are those of transformers' modules."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf

    hub = dict(model_type="deepseek_v3", vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
               num_attention_heads=2, num_key_value_heads=2, moe_intermediate_size=32, kv_lora_rank=32,
               q_lora_rank=48, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
               max_position_embeddings=163840, rope_theta=10000, topk_method="noaux_tc", scoring_func="sigmoid",
               rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                             "original_max_position_embeddings": 4096, "type": "yarn"})
    theirs = transformers.DeepseekV3Config(**{k: v for k, v in hub.items() if k != "model_type"})
    rotary, attention = hf.DeepseekV3RotaryEmbedding(theirs), hf.DeepseekV3Attention(theirs, 0)
    model = tinyinfer.model.Model(config_from_hf(hub), {"layers": [], "lm_head": np.zeros((64, 300), np.float32)})
    np.testing.assert_array_equal(model.inv_freq, rotary.inv_freq.numpy())
    assert model.rope_factor == pytest.approx(rotary.attention_scaling, rel=1e-12)
    assert model.config.attention_scale(0) == pytest.approx(attention.scaling, rel=1e-12)
    assert attention.scaling > 1.8 * 192 ** -0.5  # mscale(40)^2 = 1.87: a scale without it would be far off
