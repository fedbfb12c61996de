"""Gemma 3 (text) against transformers, on tiny random checkpoints built here.

What Gemma 3 adds to Gemma 2's body (1 + w norms, four per layer, embeddings times sqrt(d), GeGLU,
query_pre_attn_scalar): q and k each normed per head (by 1 + w) before RoPE; no attention soft cap (logits are
capped only when final_logit_softcapping is set); a window on all layers but every `sliding_window_pattern`-th;
and two RoPEs, one per kind of layer: global layers rotate with rope_theta (1e6) and its scaling (linear x8 on
the 4B and larger), sliding ones with rope_local_base_freq (1e4), unscaled. transformers 5 writes the two as
`rope_parameters` per layer type; older files (the Hub's) as rope_theta, rope_local_base_freq, rope_scaling and
sliding_window_pattern: both are read ("gemma3_old_config").

Five layers with a window of 6 under 24- and 40-token prompts, pattern 3 (layers 2 and 5 global): both kinds of
layer and both RoPEs act. Every parameter is re-randomised with a wide spread (Gemma's norm weights, offsets from
1, from U(-0.5, 0.5)); MISTAKES shows that undoing each switch, the local RoPE's own theta among them, moves the
logits far past the tolerance, so the parity below is not luck.

The multimodal "gemma3" (4B and up) is read as its text model: config.json's text_config, tensors under
`language_model.`, the vision tower ignored; a tiny Gemma3ForConditionalGeneration shows it gives transformers'
logits on text.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
import transformers
from tiny_models import (CAUGHT, assert_cached_decode_equals_full_recompute, assert_logits_equal_transformers,
                         built_once, hf_greedy, hf_logits, make_tiny_models, parity_bound, prompt_ids,
                         tiled_attention_calls)

import tinyinfer
import tinyinfer.model
from tinyinfer.families import config_from_hf, load_hf_config
from tinyinfer.engine import LLM
from tinyinfer.errors import TinyInferError
from tinyinfer.memory import param_count
from tinyinfer.model import Model
from tinyinfer.sampling import SamplingParams

WINDOW = 6  # keys; far shorter than the prompts

TEXT = dict(vocab_size=make_tiny_models.VOCAB_SIZE, hidden_size=48, intermediate_size=96, num_hidden_layers=5,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
            max_position_embeddings=128, rms_norm_eps=1e-5, sliding_window=WINDOW, sliding_window_pattern=3,
            bos_token_id=1, eos_token_id=2, pad_token_id=0)
LINEAR = {"rope_scaling": {"rope_type": "linear", "factor": 8.0}}  # the 4B and larger: global layers only
OLD_CONFIG = {"rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0, "sliding_window_pattern": 3,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0}}  # the Hub's files, written by transformers 4

# name -> (Gemma3TextConfig fields, stored dtype, config.json rewritten in the old dialect)
VARIANTS = {
    "gemma3": ({}, "float32", False),
    "gemma3_linear": (LINEAR, "float32", False),
    "gemma3_old_config": (LINEAR, "float32", True),
    "gemma3_yarn": ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}},
                    "float32", False),  # the global layers' RoPE goes through tinyinfer/rope.py like any other
    "gemma3_softcap_bias": ({"final_logit_softcapping": 5.0, "attention_bias": True}, "float32", False),
    "gemma3_bf16": ({}, "bfloat16", False),
    "gemma3_multimodal": ({}, "float32", False),  # Gemma3ForConditionalGeneration
}


def build(folder, fields: dict, dtype: str = "float32", old_config: bool = False, multimodal: bool = False):
    """A checkpoint written by transformers itself (TEXT + `fields`), every parameter re-randomised."""
    text = transformers.Gemma3TextConfig(**{**TEXT, **fields})
    if multimodal:
        vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                 num_attention_heads=2, image_size=28, patch_size=14)
        config = transformers.Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                           mm_tokens_per_image=4, image_token_index=3, boi_token_index=4,
                                           eoi_token_index=5)
        model = transformers.Gemma3ForConditionalGeneration(config)
    else:
        model = transformers.AutoModelForCausalLM.from_config(text)
    make_tiny_models.randomise_(model, seed=0)  # norm weights ~ U(0.5, 1.5)
    with torch.no_grad():  # gains 1 + weight: the same U(0.5, 1.5) as the other families' tests
        for param_name, param in model.named_parameters():
            if param_name.endswith("norm.weight"):
                param -= 1.0
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    transformers.GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False).save_pretrained(folder)
    if old_config:
        path = folder / "config.json"
        written = json.loads(path.read_text())
        for key in ("rope_parameters", "layer_types"):
            del written[key]
        path.write_text(json.dumps({**written, **OLD_CONFIG}))
    return folder


def build_variant(name: str, folder):
    """The checkpoint of VARIANTS[name], written to `folder`."""
    fields, dtype, old_config = VARIANTS[name]
    return build(folder, fields, dtype, old_config, multimodal=name == "gemma3_multimodal")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(name) -> Path`, each variant built once for this module."""
    return built_once(tmp_path_factory.mktemp("gemma3"), build_variant)




@pytest.mark.parametrize("name", VARIANTS)
def test_logits_match_transformers_at_every_position(name, checkpoint):
    """A bf16 file is read exactly (bf16 widens to float32 without rounding), so it meets the float32 bound too."""
    assert_logits_equal_transformers(tinyinfer.load(checkpoint(name)), checkpoint(name), prompt_ids(24))


def test_transformers_reads_the_layers_and_ropes_as_tinyinfer_does(checkpoint):
    """Both dialects and the multimodal file: the same layer kinds and RoPE settings in transformers' config."""
    for name in ("gemma3_linear", "gemma3_old_config", "gemma3_multimodal"):
        ours, theirs = load_hf_config(checkpoint(name)), transformers.AutoConfig.from_pretrained(checkpoint(name))
        theirs = theirs.get_text_config()
        assert ours.layer_types == theirs.layer_types == ["sliding_attention"] * 2 + ["full_attention"] + [
            "sliding_attention"] * 2
        full, local = theirs.rope_parameters["full_attention"], theirs.rope_parameters["sliding_attention"]
        assert (ours.rope_theta, ours.local_rope_theta, local["rope_type"]) == (full["rope_theta"],
                                                                               local["rope_theta"], "default")
        assert (ours.rope_scaling or {}).get("factor") == full.get("factor")


@pytest.mark.parametrize("name", ["gemma3", "gemma3_linear", "gemma3_softcap_bias"])
def test_cached_decode_equals_full_recompute(name, checkpoint):
    assert_cached_decode_equals_full_recompute(checkpoint(name), n=24)


@pytest.mark.parametrize("name", ["gemma3_linear", "gemma3_multimodal"])
def test_greedy_tokens_equal_transformers_generate(name, checkpoint):
    folder = checkpoint(name)
    ids = prompt_ids(16, seed=2)
    result = tinyinfer.load(folder).generate(ids, max_tokens=24, temperature=0.0, ignore_eos=True)
    assert list(result.token_ids) == hf_greedy(folder, ids, 24)


def test_serving_engine_gives_the_greedy_tokens_of_generate(checkpoint):
    """Several sequences batched through the paged cache (one-token steps attended as one batch, each layer
    with its window and its RoPE): each gets the tokens model.generate gives it alone."""
    model = tinyinfer.load(checkpoint("gemma3_linear"))
    prompts = [prompt_ids(n, seed=seed) for n, seed in ((20, 3), (9, 4), (14, 5), (3, 6))]
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    results = LLM(model, block_size=4, max_num_batched_tokens=32).generate(prompts, params)
    for prompt, result in zip(prompts, results):
        assert result.token_ids == list(model.generate(prompt, params).token_ids)


def test_tiled_prefill_matches_transformers(checkpoint, monkeypatch):
    """The long-prompt path (`tiled_attention`), forced on a 40-token prompt with 8-position tiles, so that key
    tiles before the window are skipped on the sliding layers."""
    calls = tiled_attention_calls(monkeypatch)
    folder = checkpoint("gemma3_linear")
    assert_logits_equal_transformers(tinyinfer.load(folder), folder, prompt_ids(40, seed=8))
    assert [c["window"] for c in calls] == [WINDOW, WINDOW, None, WINDOW, WINDOW]  # every layer, its own window


def with_qk_gains_read_as_plain_weights(params: dict) -> dict:
    """A loader that forgot q/k norms scale by 1 + w: the same logits as these parameters under the right one."""
    def mistaken(layer):
        return dict(layer, q_norm=layer["q_norm"] - 1.0, k_norm=layer["k_norm"] - 1.0)

    return dict(params, layers=[mistaken(layer) for layer in params["layers"]])


# Each switch undone must move the logits at least CAUGHT x the rounding bound, or the variant would not catch a loader
# that forgot it: (variant, a Config change, a change of the loaded parameters)
MISTAKES = {
    "local_theta_is_the_global_one": ("gemma3", {"local_rope_theta": None}, None),
    "local_layers_scaled_too": ("gemma3_linear", {"local_rope_theta": None, "rope_theta": 10_000.0}, None),
    "global_theta_is_the_local_one": ("gemma3", {"rope_theta": 10_000.0}, None),
    "no_linear_scaling": ("gemma3_linear", {"rope_scaling": None}, None),
    "every_layer_global": ("gemma3", {"layer_types": ["full_attention"] * 5}, None),
    "every_layer_sliding": ("gemma3", {"layer_types": ["sliding_attention"] * 5}, None),
    "no_qk_norm": ("gemma3", {"qk_norm": False}, None),
    "qk_norm_plain_weight": ("gemma3", {}, with_qk_gains_read_as_plain_weights),
    "head_dim_scale": ("gemma3", {"query_pre_attn_scalar": None}, None),
    "no_final_softcap": ("gemma3_softcap_bias", {"final_softcap": None}, None),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_switch_matters(mistake, checkpoint):
    name, change, change_params = MISTAKES[mistake]
    folder = checkpoint(name)
    model = tinyinfer.load(folder)
    params = change_params(model.params) if change_params else model.params
    mistaken = Model(dataclasses.replace(model.config, **change), params)
    ids = prompt_ids(24)
    assert np.abs(mistaken.logits(ids) - hf_logits(folder, ids)).max() > CAUGHT * parity_bound(folder, ids)


def test_the_tiny_checkpoint_has_both_ropes_and_both_kinds_of_layer(checkpoint):
    """What the variants above rely on: transformers' default thetas, and pattern 3 over five layers."""
    config = tinyinfer.load(checkpoint("gemma3")).config
    assert (config.rope_theta, config.local_rope_theta) == (1_000_000.0, 10_000.0)
    assert [config.window_of(i) for i in range(5)] == [WINDOW, WINDOW, None, WINDOW, WINDOW]


@pytest.mark.parametrize("name", ["gemma3", "gemma3_softcap_bias", "gemma3_multimodal"])
def test_memory_arithmetic_counts_every_parameter(name, checkpoint):
    """`tinyinfer memory` counts from the config alone: four norms and two q/k norms per layer included."""
    model = tinyinfer.load(checkpoint(name))
    assert param_count(model.config) == model.n_params


SIZES = {"vocab_size": 300, "hidden_size": 128, "num_hidden_layers": 7, "num_attention_heads": 32,
         "intermediate_size": 96}


@pytest.mark.parametrize("fields", [
    {},  # sizes only: every other field is transformers' default
    {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5}}},
    {"rope_theta": 2e5, "rope_local_base_freq": 500.0, "sliding_window_pattern": 2, "sliding_window": 64},
    {"layer_types": ["full_attention", "sliding_attention"] * 3 + ["full_attention"], "sliding_window_pattern": 2},
])
def test_fields_are_read_as_transformers_reads_them(fields, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3_text", **SIZES, **fields}))
    theirs, ours = transformers.AutoConfig.from_pretrained(tmp_path), load_hf_config(tmp_path)
    full, local = theirs.rope_parameters["full_attention"], theirs.rope_parameters["sliding_attention"]
    assert ours.layer_types == theirs.layer_types
    assert (ours.rope_theta, ours.local_rope_theta, (ours.rope_scaling or {}).get("factor")) == (
        full["rope_theta"], local["rope_theta"], full.get("factor"))
    assert (ours.n_kv_heads, ours.head_dim, ours.norm_eps, ours.max_seq_len, ours.tie_word_embeddings) == (
        theirs.num_key_value_heads, theirs.head_dim, theirs.rms_norm_eps, theirs.max_position_embeddings,
        theirs.tie_word_embeddings)
    sliding = ours.layer_types.index("sliding_attention")
    assert (ours.window_of(sliding), ours.attention_scale(0), ours.final_softcap, ours.activation) == (
        theirs.sliding_window, theirs.query_pre_attn_scalar ** -0.5, theirs.final_logit_softcapping, "gelu_tanh")


def test_real_config_files_read():
    """The fields of Gemma-3-1B's and Gemma-3-4B's config.json files (sizes shrunk): their switches."""
    one_b = config_from_hf({**SIZES, "model_type": "gemma3_text", "num_hidden_layers": 26, "num_attention_heads": 4,
                            "num_key_value_heads": 1, "head_dim": 256, "attn_logit_softcapping": None,
                            "final_logit_softcapping": None, "cache_implementation": "hybrid",
                            "eos_token_id": [1, 106], "hidden_activation": "gelu_pytorch_tanh", "rope_scaling": None,
                            "rope_local_base_freq": 10000, "rope_theta": 1000000, "sliding_window": 512,
                            "sliding_window_pattern": 6, "query_pre_attn_scalar": 256, "torch_dtype": "bfloat16"})
    assert [i for i in range(26) if one_b.window_of(i) is None] == [5, 11, 17, 23]
    assert (one_b.rope_theta, one_b.local_rope_theta, one_b.rope_scaling, one_b.eos_token_ids) == (1e6, 1e4, None,
                                                                                                    [1, 106])
    four_b = config_from_hf({"model_type": "gemma3", "eos_token_id": [1, 106], "image_token_index": 262144,
                             "mm_tokens_per_image": 256, "torch_dtype": "bfloat16", "vision_config": {"hidden_size": 8},
                             "text_config": {**SIZES, "model_type": "gemma3_text", "num_hidden_layers": 34,
                                             "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                                             "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                                             "sliding_window": 1024}})
    assert (four_b.model_type, four_b.rope_scaling["factor"], four_b.local_rope_theta) == ("gemma3_text", 8.0, 1e4)
    assert (four_b.eos_token_ids, four_b.torch_dtype, four_b.window_of(0), four_b.window_of(5)) == ([1, 106],
                                                                                                    "bfloat16", 1024,
                                                                                                    None)


@pytest.mark.parametrize("fields, message", [
    ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping=50.0 is not supported: transformers' Gemma 3 ignores"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention is not supported"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, "must be given per layer type"),
    ({"rope_scaling": {"type": "linear", "factor": 8.0}}, "names its kind by 'type'.*write it as 'rope_type'"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}},
     "scaled RoPE on the sliding layers .'linear'. is not supported"),
    ({"rope_parameters": {"full_attention": {"rope_type": "longrope", "rope_theta": 1e4}}},
     "rope scaling type 'longrope' is not supported"),
    ({"sliding_window": None}, "layers slide .layer_types. but sliding_window is null"),
    ({"hidden_act": "silu"}, "hidden_activation='gelu_pytorch_tanh' and hidden_act='silu' disagree"),
])
def test_options_tinyinfer_cannot_honour_are_refused_by_name(fields, message):
    with pytest.raises(TinyInferError, match=message):
        config_from_hf({"model_type": "gemma3_text", **SIZES, **fields})


@pytest.mark.parametrize("config, message", [
    ({"model_type": "gemma3", "vision_config": {}}, "no Gemma 3 text_config; only the text-only Gemma 3 .gemma3_text."),
    ({"model_type": "gemma3", "text_config": {**SIZES, "model_type": "gemma2"}}, "no Gemma 3 text_config"),
    ({"model_type": "gemma3", "tie_word_embeddings": False, "text_config": SIZES}, "tie_word_embeddings differs"),
])
def test_multimodal_configs_without_a_clean_text_model_are_refused(config, message):
    with pytest.raises(TinyInferError, match=message):
        config_from_hf(config)
