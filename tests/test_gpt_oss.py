"""gpt-oss against transformers, on tiny random checkpoints built here; attention sinks against their formula.

What gpt-oss adds to the Llama body, and where the variants below make it matter:
- attention sinks: each head's learned logit joins its softmax's denominator and brings no value (drawn from
  U(-2, 6) here, so that some heads give the sink most of their attention and others almost none), exact in the
  three attention paths (the plain one through `decode_attention`, batched decode, the tiled online softmax);
- biases on q, k, v and o (`attention_bias`), a window on the layers `layer_types` names (the even ones by default;
  WINDOW is far shorter than the prompts), YaRN RoPE (`truncate` false, as the releases; in transformers 5's words
  and in the Hub files') or plain RoPE, a tied head;
- a Mixture-of-Experts in every layer: a router with a bias whose top-k logits are softmaxed among themselves;
  experts with biases whose gate and up columns are interleaved in the stored gate_up_proj; the clamped SwiGLU,
  (clip(up, +-limit) + 1) * g sigmoid(alpha g), g = min(gate, limit), at the releases' alpha and limit (1.702, 7)
  and at a limit of 1.5 which most gates and ups exceed.

Every parameter is re-randomised with a wide spread (weights_scripts/make_tiny_models.py says why). MISTAKES shows
that undoing any switch moves the logits by more than MISTAKE_MIN, far past the tolerance, so the parity is not luck.

Checked: logits against transformers (float32, eager attention) within 1e-4 at every position, also through the
tiled long-prompt path; cached decode against tinyinfer's own full recompute within 1e-9 (in float64); greedy
tokens equal to transformers' generate; the serving engine (paged cache, batched decode) equal to model.generate;
the parameter count from the config; the Hub's MXFP4 files refused with the conversion to run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from tiny_models import (
    TINY_CONFIG,
    WINDOW,
    assert_logits_match_transformers,
    build_with_transformers,
    built_once,
    generation_tests,
    memory_test,
    mistake_test,
    parity_tests,
    tiled_attention_calls,
)
from transformers.models.gpt_oss import modeling_gpt_oss as hf

import tinyinfer
import tinyinfer.model
from tinyinfer.attention import attention, causal_mask, decode_attention, decode_mask
from tinyinfer.families import config_from_hf, load_hf_config
from tinyinfer.errors import TinyInferError
from tinyinfer.flash_attention import tiled_attention
from tinyinfer.moe import route_topk_softmax

YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "original_max_position_embeddings": 32,
        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
GPT_OSS = dict(TINY_CONFIG, head_dim=12, intermediate_size=16, num_local_experts=4, num_experts_per_tok=2,
               sliding_window=WINDOW, rope_parameters=YARN)
# plain RoPE, no attention biases, the window on the second of three layers, top-3, a limit most values exceed
NO_BIAS_TIGHT_CLAMP = dict(GPT_OSS, num_hidden_layers=3, attention_bias=False, num_experts_per_tok=3,
                           layer_types=["full_attention", "sliding_attention", "full_attention"], swiglu_limit=1.5,
                           swiglu_alpha=1.2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
# a tied head, as many key/value heads as query heads, the window on every layer (and config.json rewritten the way
# the Hub's gpt-oss files spell YaRN: `build_variant`)
TIED_MHA = dict(GPT_OSS, tie_word_embeddings=True, num_key_value_heads=4, layer_types=["sliding_attention"] * 2)
SINKS = {"sinks": (-2.0, 6.0)}  # U(-2, 6): randomise_ would draw them as norm gains, U(0.5, 1.5)

# name -> (transformers config class, fields, stored dtype)
VARIANTS = {
    "gpt_oss_yarn_window": ("GptOssConfig", GPT_OSS, "float32"),
    "gpt_oss_no_bias_tight_clamp": ("GptOssConfig", NO_BIAS_TIGHT_CLAMP, "float32"),
    "gpt_oss_tied_mha_old_rope_dialect": ("GptOssConfig", TIED_MHA, "float32"),
    "gpt_oss_bf16": ("GptOssConfig", GPT_OSS, "bfloat16"),
}
MAIN = "gpt_oss_yarn_window"


def build_variant(name: str, folder):
    """The checkpoint of VARIANTS[name], written to `folder`, its sinks widely spread; "old_rope_dialect" variants
    with config.json's RoPE in the Hub files' words ("rope_theta": 150000, "rope_scaling": {"rope_type": "yarn",
    ...}) instead of transformers 5's "rope_parameters"."""
    folder = build_with_transformers(folder, *VARIANTS[name], wide_params=SINKS)
    if name.endswith("old_rope_dialect"):
        config = json.loads((folder / "config.json").read_text())
        rope = config.pop("rope_parameters")
        config |= {"rope_theta": rope.pop("rope_theta"), "rope_scaling": rope}
        (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(name) -> Path`, each variant built once for this module."""
    return built_once(tmp_path_factory.mktemp("gpt_oss"), build_variant)


test_logits_match_transformers_at_every_position, test_cached_decode_equals_full_recompute = parity_tests(VARIANTS)
test_greedy_tokens_equal_transformers_generate, test_serving_engine_gives_the_greedy_tokens_of_generate = \
    generation_tests([MAIN, "gpt_oss_no_bias_tight_clamp"])
test_memory_arithmetic_counts_every_parameter = memory_test(VARIANTS)


def test_tiled_prefill_matches_transformers(checkpoint, monkeypatch):
    """The long-prompt path (`tiled_attention`), forced on a 40-token prompt with 8-position tiles: key tiles
    before the window are skipped, and the sinks start every query's online softmax."""
    calls = tiled_attention_calls(monkeypatch)
    assert_logits_match_transformers(checkpoint(MAIN), n=40)
    assert len(calls) == 2 and all(c["sinks"] is not None and c["sinks"].shape == (4,) for c in calls)  # both layers


def _layers(params: dict, change) -> dict:
    return dict(params, layers=[change(layer) for layer in params["layers"]])


def _without(*keys):
    """The layers' parameters `keys` dropped (what a loader that never read them would run without)."""
    return lambda params, cfg: _layers(params, lambda layer: {k: v for k, v in layer.items() if k not in keys})


def _experts(change):
    return lambda params, cfg: _layers(params, lambda layer: dict(layer, mlp=dict(
        layer["mlp"], experts=[change(expert) for expert in layer["mlp"]["experts"]])))


def _gate_up_halves(expert: dict) -> dict:
    """gate_up_proj split into halves, as Phi-3's and Mixtral's fused files are, not into even and odd columns."""
    ff = expert["gate"].shape[1]
    weight = np.stack([expert["gate"], expert["up"]], axis=-1).reshape(-1, 2 * ff)  # the file's interleaved columns
    bias = np.stack([expert["gate_bias"], expert["up_bias"]], axis=-1).reshape(2 * ff)
    return dict(expert, gate=weight[:, :ff], up=weight[:, ff:], gate_bias=bias[:ff], up_bias=bias[ff:])


TIGHT = "gpt_oss_no_bias_tight_clamp"
# Each switch undone (a Config change, and what it does to the loaded parameters, if anything) must move some
# logit by MISTAKE_MIN, or the variants would not catch a loader that forgot it.
MISTAKES = {
    "no_sinks": (MAIN, {}, _without("sinks")),
    "no_sinks-tight": (TIGHT, {}, _without("sinks")),
    "gate_up_not_deinterleaved": (MAIN, {}, _experts(_gate_up_halves)),
    "plain_swiglu": (MAIN, {"swiglu_limit": None}, None),
    "not_clamped": (TIGHT, {"swiglu_limit": 1e9}, None),
    "alpha_1": (TIGHT, {"swiglu_alpha": 1.0}, None),
    "no_expert_biases": (MAIN, {}, _experts(lambda e: {k: v for k, v in e.items() if not k.endswith("_bias")})),
    "no_router_bias": (MAIN, {}, lambda params, cfg: _layers(params, lambda layer: dict(layer, mlp=dict(
        layer["mlp"], router_bias=np.zeros_like(layer["mlp"]["router_bias"]))))),
    # Mixtral's router: the softmax over all experts, their top-k probabilities unnormalised (and no bias)
    "softmax_over_all_experts_before_top_k": (MAIN, {"router": "softmax", "norm_topk_prob": False}, None),
    "no_attention_biases": (MAIN, {}, _without("qkv_bias", "o_bias")),
    "no_window": (MAIN, {"layer_types": ["full_attention"] * 2}, None),
    "no_yarn": (MAIN, {"rope_scaling": None}, None),
    "no_yarn-old_rope_dialect": ("gpt_oss_tied_mha_old_rope_dialect", {"rope_scaling": None}, None),
}
test_each_mistake_moves_the_logits_far = mistake_test(MISTAKES)


def _sink_attention_by_the_formula(q, k, v, sinks, start: int, window: int | None):
    """Each head of each query alone: w = exp(s) / (sum exp(s) + exp(sink)) over its visible keys, out = w @ v."""
    n, H, hd = q.shape
    group = H // k.shape[0]
    out = np.zeros((n, H, hd))
    for t in range(n):
        pos = start + t
        first = 0 if window is None else max(0, pos - window + 1)
        for h in range(H):
            keys, values = k[h // group, first:pos + 1], v[h // group, first:pos + 1]
            scores = keys @ q[t, h] / np.sqrt(hd)
            out[t, h] = np.exp(scores) @ values / (np.exp(scores).sum() + np.exp(sinks[h]))
    return out.reshape(n, H * hd)


@pytest.mark.parametrize("window", [None, 3])
def test_the_three_attention_paths_with_sinks_follow_the_formula(window):
    """attention (through decode_attention), decode_attention (a batch of last tokens) and tiled_attention (tiles
    of 2, the sink starting each query's online softmax) against the formula, 9 queries after 4 cached keys,
    two query heads per key/value head; sinks from very negative (an ordinary softmax) to very positive."""
    rng = np.random.default_rng(0)
    n, start, H, KV, hd = 9, 4, 4, 2, 3
    q = rng.standard_normal((n, H, hd))
    k, v = rng.standard_normal((KV, start + n, hd)), rng.standard_normal((KV, start + n, hd))
    sinks = np.array([-30.0, 0.0, 1.5, 4.0])
    expected = _sink_attention_by_the_formula(q, k, v, sinks, start, window)
    plain = attention(q, k, v, causal_mask(n, start, window), sinks=sinks)
    tiled = tiled_attention(q, k, v, start, window, tile=2, sinks=sinks)
    lengths = np.arange(start + 1, start + n + 1)  # sequence t: the first start + t + 1 keys, queried by its last
    batch = decode_attention(q, np.broadcast_to(k[:, None], (KV, n, start + n, hd)),
                             np.broadcast_to(v[:, None], (KV, n, start + n, hd)), decode_mask(lengths, start + n, window),
                             sinks=sinks)
    for out in (plain, tiled, batch):
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)
    without = attention(q, k, v, causal_mask(n, start, window))
    assert np.abs(without - expected).max() > 0.1  # the sinks matter here
    np.testing.assert_allclose(tiled_attention(q, k, v, start, window, tile=2, sinks=np.full(H, -np.inf)), without,
                               rtol=0, atol=1e-12)  # a sink of -inf takes nothing: the plain softmax


def test_the_hubs_mxfp4_files_are_refused_with_the_conversion():
    config = {"model_type": "gpt_oss", **GPT_OSS,
              "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}}
    with pytest.raises(TinyInferError, match=r"'mxfp4' are not supported.*MXFP4.*bf16.*Mxfp4Config\(dequantize=True\)"):
        config_from_hf(config)


@pytest.mark.parametrize("edit, message", [
    ({"sliding_window": None}, "sliding_window is null"),
    ({"swiglu_limit": None}, "swiglu_limit=null is not supported"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "rope scaling type 'longrope' is not supported"),
    ({"layer_types": ["full_attention", "chunked_attention"]}, "layer type 'chunked_attention' is not supported"),
])
def test_what_tinyinfer_cannot_run_as_transformers_does_is_refused_by_name(edit, message):
    with pytest.raises(TinyInferError, match=message):
        config_from_hf({"model_type": "gpt_oss", **GPT_OSS, **edit})


def test_fields_left_out_of_config_json_are_read_as_transformers_reads_them(tmp_path):
    """A config.json with only the sizes: tinyinfer's Config agrees with transformers' config object, and its
    default YaRN (factor 32 over 4096 positions, truncate false, theta 150000) gives transformers' rotary
    frequencies and cos/sin factor."""
    sizes = dict(model_type="gpt_oss", vocab_size=300, hidden_size=64, num_hidden_layers=4, num_attention_heads=16,
                 intermediate_size=32, num_local_experts=8)
    (tmp_path / "config.json").write_text(json.dumps(sizes))
    theirs, ours = transformers.AutoConfig.from_pretrained(tmp_path), load_hf_config(tmp_path)
    assert (ours.n_kv_heads, ours.head_dim, ours.norm_eps, ours.max_seq_len, ours.tie_word_embeddings) == (
        theirs.num_key_value_heads, theirs.head_dim, theirs.rms_norm_eps, theirs.max_position_embeddings,
        theirs.tie_word_embeddings)
    assert ours.layer_types == theirs.layer_types and ours.window_of(0) == theirs.sliding_window == 128
    assert (ours.n_experts, ours.n_experts_per_tok, ours.moe_d_ff) == (
        theirs.num_local_experts, theirs.num_experts_per_tok, theirs.intermediate_size)
    assert (ours.swiglu_alpha, ours.swiglu_limit, ours.qkv_bias, ours.o_bias) == (
        theirs.swiglu_alpha, theirs.swiglu_limit, theirs.attention_bias, theirs.attention_bias)
    rotary = hf.GptOssRotaryEmbedding(theirs)
    model = tinyinfer.model.Model(ours, {"layers": [], "lm_head": np.zeros((64, 300), np.float32)})
    np.testing.assert_allclose(model.inv_freq, rotary.inv_freq.numpy(), rtol=1e-6, atol=0)
    assert model.rope_factor == pytest.approx(rotary.attention_scaling, rel=1e-6)
    assert ours.attention_scale(0) == hf.GptOssAttention(theirs, 0).scaling


def test_router_softmaxes_the_top_k_logits_only():
    """gpt-oss's router against transformers' GptOssTopKRouter on random tokens: the same experts, the same weights."""
    config = transformers.GptOssConfig(hidden_size=8, num_local_experts=6, num_experts_per_tok=3)
    router = hf.GptOssTopKRouter(config)
    torch.manual_seed(0)
    with torch.no_grad():
        router.weight.normal_(), router.bias.normal_()
        h = torch.randn(5, 8)
        _, scores, indices = router(h)
    mlp = {"router": router.weight.detach().numpy().T, "router_bias": router.bias.detach().numpy()}
    weights, chosen, _ = route_topk_softmax(h.numpy(), mlp, 3)
    assert chosen.tolist() == indices.tolist()
    np.testing.assert_allclose(weights, scores.numpy(), rtol=0, atol=1e-6)
