"""Parity on checkpoints spread over the config space found in the wild: one tiny random model per option.

test_parity_hf.py and test_moe_parity.py hold a fixed set of checkpoints to transformers; this file sweeps the
options real config.json files carry, so that a checkpoint never seen before loads exactly too: head_dim other
than hidden/heads, MQA to MHA, biases where an architecture has (or ignores) them, every RoPE scaling kind
transformers implements and both spellings of its config, sliding windows per family (Mistral slides every
layer, Qwen2/Qwen3 from `max_window_layers` on, Qwen2-MoE on even layers below it, Qwen3-MoE on all), GPT-2's
activations and attention-scale flags, untied heads, fp16/bf16 and sharded files, and fields left out of
config.json (transformers then takes its config class's default, which differs between families).

Each variant is built by weights_scripts/ (every parameter re-randomised with a large spread, so a wrong
mapping moves the logits far past the tolerance), then loaded by tinyinfer and by transformers (float32,
eager attention) and must agree at every position within 1e-4 (see test_parity_hf.py for that bound). The
cached paths (prefill, a chunk, single tokens through the contiguous cache; three sequences decoding as one
batch through the paged cache) must equal tinyinfer's own recompute within 1e-9 in float64 (test_moe_parity.py
says why float64: routing and one-row products round differently in float32). MISTAKES shows each variant's
power: reproducing the error it guards against moves the logits well past the tolerance.

Options tinyinfer cannot honour exactly (longrope RoPE, per-layer RoPE, other activations, unknown layer
types) must be refused with a TinyInferError that names them; the defaults tinyinfer assumes for fields a
file leaves out are checked against transformers' config classes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file
from tolerances import assert_close, logits_bound
from tiny_models import (
    CAUGHT,
    ROOT,
    _import_script,
    assert_logits_equal_transformers,
    built_once,
    float64_model,
    hf_greedy,
    hf_logits,
    make_tiny_models,
    parity_bound,
    parity_tests,
    prompt_ids,
)

import tinyinfer
from tinyinfer.families import FAMILIES, config_from_hf, load_hf_config
from tinyinfer.families.common import HF_ACTIVATIONS
from tinyinfer.engine.paged_cache import PagedKVCache
from tinyinfer.errors import TinyInferError
from tinyinfer.mlp import ACTIVATIONS
from tinyinfer.model import Model, SeqChunk

HF_DEFAULTS = {model_type: family.defaults for model_type, family in FAMILIES.items()}

make_tiny_moe_models = _import_script(ROOT / "weights_scripts" / "make_tiny_moe_models.py")
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")

# With head_dim 12 (6 frequencies) and theta 10000, an original context of 32 puts YaRN's ramp (beta 32 -> 1
# rotations) across the middle frequencies, so all three of its bands are used.
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32}
LINEAR = {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.5}
WINDOW = 6  # keys; far shorter than the 20-token prompt

# name -> (architecture, HF config fields, options). Options are those of the weights_scripts builders (dtype,
# dialect, rope_kind_key, max_shard_size) plus, applied to config.json after saving: "edits" (fields set) and
# "drops" (fields removed, so transformers falls back to its config class's default).
VARIANTS: dict[str, tuple[str, dict, dict]] = {
    # GPT-2
    "gpt2": ("gpt2", {}, {}),
    "gpt2_untied": ("gpt2", {"tie_word_embeddings": False}, {}),
    "gpt2_untied_old": ("gpt2", {"tie_word_embeddings": False}, {"dialect": "old"}),  # no field, yet its own lm_head
    "gpt2_gelu_erf": ("gpt2", {"activation_function": "gelu"}, {}),
    "gpt2_relu_n_inner": ("gpt2", {"activation_function": "relu", "n_inner": 72}, {}),
    "gpt2_quick_gelu": ("gpt2", {"activation_function": "quick_gelu"}, {"dialect": "old"}),
    "gpt2_pytorch_tanh": ("gpt2", {"activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-2}, {}),
    "gpt2_unscaled_by_layer": ("gpt2", {"scale_attn_weights": False, "scale_attn_by_inverse_layer_idx": True}, {}),
    "gpt2_reorder_upcast": ("gpt2", {"reorder_and_upcast_attn": True, "scale_attn_by_inverse_layer_idx": True}, {}),
    "gpt2_bf16_sharded": ("gpt2", {"n_head": 6}, {"dtype": "bfloat16", "max_shard_size": "40KB"}),
    # Llama: head shapes, biases, norms, activations, every RoPE kind in both config spellings
    "llama_mqa_head_dim": ("llama", {"num_key_value_heads": 1, "head_dim": 20}, {}),
    "llama_mha_small_heads": ("llama", {"num_attention_heads": 6, "num_key_value_heads": 6, "head_dim": 6}, {}),
    "llama_attention_bias": ("llama", {"attention_bias": True, "num_key_value_heads": 2}, {"dialect": "old"}),
    "llama_mlp_bias": ("llama", {"mlp_bias": True, "tie_word_embeddings": True}, {}),
    "llama_eps_theta": ("llama", {"rms_norm_eps": 1e-2, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}},
                        {"dialect": "old"}),
    "llama_gelu": ("llama", {"hidden_act": "gelu"}, {}),
    "llama_rope_linear_type_key": ("llama", {"rope_parameters": LINEAR}, {"dialect": "old", "rope_kind_key": "type"}),
    "llama_rope_llama3_type_key": ("llama", {"rope_parameters": make_tiny_models.LLAMA3_ROPE},
                                   {"dialect": "old", "rope_kind_key": "type"}),
    "llama_rope_yarn": ("llama", {"rope_parameters": YARN}, {}),
    "llama_rope_yarn_type_key": ("llama", {"rope_parameters": YARN}, {"dialect": "old", "rope_kind_key": "type"}),
    "llama_rope_yarn_mscale": ("llama", {"rope_parameters": {**YARN, "mscale": 0.9, "mscale_all_dim": 0.5,
                                                             "beta_fast": 16.0, "beta_slow": 2.0}}, {}),
    "llama_rope_yarn_attention_factor": ("llama", {"rope_parameters": {**YARN, "attention_factor": 1.3, "truncate": False}}, {}),
    "llama_rope_dynamic": ("llama", {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}},
                           {"dialect": "old", "rope_kind_key": "type"}),
    "llama_rope_yarn_phi3_style": ("llama", {"rope_parameters": {**YARN, "original_max_position_embeddings": 64}},
                                   {"edits": {"original_max_position_embeddings": 32}}),  # the top-level one wins
    "llama_rope_yarn_no_original": ("llama", {"rope_parameters": YARN},  # then it is max_position_embeddings
                                    {"dialect": "old", "edits": {"rope_scaling": {"type": "yarn", "factor": 2.0}}}),
    "llama_rope_yarn_factor_null": ("llama", {"rope_parameters": YARN},  # then max_position_embeddings / original
                                    {"dialect": "old", "edits": {"rope_scaling": {"type": "yarn", "factor": None,
                                                                                  "original_max_position_embeddings": 32}}}),
    "llama_three_heads_wide": ("llama", {"num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 24}, {}),
    "llama_rope_llama3_no_original": ("llama", {}, {"dialect": "old", "edits": {"rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}}}),
    "llama_partial_rotary_field_ignored": ("llama", {}, {"edits": {"partial_rotary_factor": 0.5}}),  # Llama rotates all
    "llama_window_field_ignored": ("llama", {}, {"edits": {"sliding_window": WINDOW}}),  # Llama has no window
    "llama_says_tied_but_holds_a_head": ("llama", {}, {"edits": {"tie_word_embeddings": True}}),  # the file wins
    "llama_fp16_sharded_tied": ("llama", {"num_key_value_heads": 2, "tie_word_embeddings": True},
                                {"dtype": "float16", "max_shard_size": "40KB"}),
    # Mistral
    "mistral_window_mqa_head_dim": ("mistral", {"sliding_window": WINDOW, "num_key_value_heads": 1, "head_dim": 16}, {}),
    "mistral_window_longer_than_prompt": ("mistral", {"sliding_window": 64}, {"dialect": "old"}),
    "mistral_bias_fields_ignored": ("mistral", {"sliding_window": WINDOW},
                                    {"edits": {"attention_bias": True, "mlp_bias": True}}),
    "mistral_rope_yarn": ("mistral", {"rope_parameters": YARN, "head_dim": 12}, {"dialect": "old"}),
    # Qwen2: q/k/v always biased, o never, whatever `attention_bias` says
    "qwen2_all_layers_slide": ("qwen2", {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 0}, {}),
    "qwen2_explicit_layer_types": ("qwen2", {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1,
                                             "layer_types": ["sliding_attention", "full_attention"]}, {}),
    "qwen2_bias_fields_ignored": ("qwen2", {"num_key_value_heads": 1},
                                  {"edits": {"attention_bias": False, "mlp_bias": True}}),
    "qwen2_rope_linear_bf16": ("qwen2", {"rope_parameters": LINEAR, "tie_word_embeddings": True}, {"dtype": "bfloat16"}),
    "qwen2_rope_yarn_type_key": ("qwen2", {"rope_parameters": YARN}, {"dialect": "old", "rope_kind_key": "type"}),
    # Qwen3
    "qwen3_attention_bias": ("qwen3", {"attention_bias": True, "head_dim": 8, "num_key_value_heads": 1}, {}),
    "qwen3_window_layers": ("qwen3", {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
                            {"dialect": "old"}),
    "qwen3_rope_yarn_tied": ("qwen3", {"rope_parameters": YARN, "tie_word_embeddings": True, "head_dim": 12}, {}),
    # Mixture-of-Experts
    "mixtral_mqa_head_dim_linear": ("mixtral", {"num_key_value_heads": 1, "head_dim": 16, "rope_parameters": LINEAR}, {}),
    "mixtral_theta_left_out": ("mixtral", {}, {"dialect": "old", "drops": ["rope_theta", "rms_norm_eps"]}),
    "qwen2_moe_window_old": ("qwen2_moe", {"num_hidden_layers": 3, "use_sliding_window": True, "sliding_window": WINDOW,
                                           "max_window_layers": 2}, {"dialect": "old"}),
    "qwen2_moe_window": ("qwen2_moe", {"num_hidden_layers": 3, "use_sliding_window": True, "sliding_window": WINDOW,
                                       "max_window_layers": 3}, {}),
    "qwen2_moe_no_qkv_bias": ("qwen2_moe", {"qkv_bias": False}, {"edits": {"attention_bias": True}}),
    "qwen3_moe_window": ("qwen3_moe", {"use_sliding_window": True, "sliding_window": WINDOW},
                         {"edits": {"max_window_layers": 1}}),
    "qwen3_moe_attention_bias_yarn": ("qwen3_moe", {"attention_bias": True, "rope_parameters": YARN}, {}),
    "olmoe_attention_bias_mqa": ("olmoe", {"attention_bias": True, "num_key_value_heads": 1}, {}),
}


def build(name: str, folder):
    """Write VARIANTS[name] into `folder` with the weights_scripts builders, then apply its config.json edits."""
    arch, fields, options = VARIANTS[name]
    options = dict(options)
    edits, drops = options.pop("edits", {}), options.pop("drops", [])
    if arch in MOE_FAMILIES:
        make_tiny_moe_models.build_tiny_moe_checkpoint(arch, folder, **options, **fields)
    else:
        make_tiny_models.build_tiny_checkpoint(arch, folder, **options, **fields)
    path = folder / "config.json"
    config = {key: value for key, value in json.loads(path.read_text()).items() if key not in drops}
    path.write_text(json.dumps({**config, **edits}, indent=2))
    return folder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(name) -> Path`, each variant built once for this module."""
    return built_once(tmp_path_factory.mktemp("config_variants"), build)


test_logits_match_transformers_at_every_position, test_cached_decode_equals_full_recompute = parity_tests(VARIANTS, n=20)


@pytest.mark.parametrize("name", VARIANTS)
def test_batched_decode_through_the_paged_cache_equals_full_recompute(name, checkpoint):
    """The serving engine's path: three sequences of different lengths in a paged cache, prefilled together,
    then decoding one token each per step, attended as one padded batch (`Model.decode_block`)."""
    wide = float64_model(checkpoint(name))
    prompts = [prompt_ids(n, seed=seed) for n, seed in ((20, 2), (13, 3), (9, 4))]
    cache = PagedKVCache(wide.config, n_blocks=18, block_size=4, dtype=np.float64)
    cache.tables = {i: list(range(6 * i, 6 * i + 6)) for i in range(3)}  # 6 blocks of 4 positions each
    prefilled = [len(p) - 5 for p in prompts]
    wide.forward([SeqChunk(i, 0, p[:n]) for i, (p, n) in enumerate(zip(prompts, prefilled))], cache)
    steps = [wide.forward([SeqChunk(i, n + step, [p[n + step]]) for i, (p, n) in enumerate(zip(prompts, prefilled))],
                          cache) for step in range(5)]  # 5 x [3, V]
    for i, prompt in enumerate(prompts):
        decoded = np.stack([step[i] for step in steps])  # [5, V]
        full = wide.logits(prompt)  # [n, V]
        assert_close(decoded, full[-5:], logits_bound(wide.config, full, dtype=np.float64, own_angles=False))


@pytest.mark.parametrize("arch, fields", [
    pytest.param("llama", {"rope_parameters": {**YARN, "original_max_position_embeddings": 64}}, id="llama_yarn"),
    pytest.param("qwen3", {"rope_parameters": {**YARN, "attention_factor": 0.8}, "head_dim": 12, "use_sliding_window": True,
                           "sliding_window": 100, "max_window_layers": 1}, id="qwen3_yarn_window"),
])
def test_logits_match_transformers_on_a_long_prompt(arch, fields, tmp_path):
    """YaRN's frequencies and the window far from position 0 (test_parity_hf.py explains the float32 angles)."""
    folder = make_tiny_models.build_tiny_checkpoint(arch, tmp_path / arch, max_position_embeddings=512, **fields)
    ids = prompt_ids(300, seed=7)
    assert_logits_equal_transformers(tinyinfer.load(folder), folder, ids)


# What each variant guards against: a Config change that reproduces a mistake (the one tinyinfer made before,
# where it made one). Each must move the logits well past the rounding bound (CAUGHT x; the exact and the tanh GELU
# differ least, by ~1e-3), or the variant would not catch it.
MISTAKES = {
    "gpt2_gelu_erf": {"activation": "gelu_tanh"},  # the tanh approximation instead of the exact GELU
    "llama_rope_yarn": {"rope_scaling": None},  # plain RoPE
    "llama_rope_yarn_attention_factor": {"attention_factor": 1.0},  # YaRN frequencies without q/k scaling
    "llama_rope_yarn_mscale": {"mscale": None},  # 0.1 ln(factor) + 1 instead of DeepSeek's ratio
    "llama_window_field_ignored": {"sliding_window": WINDOW, "layer_types": ["sliding_attention"] * 2},
    "qwen2_explicit_layer_types": {"layer_types": ["full_attention", "sliding_attention"]},  # derived, not explicit
    "qwen2_moe_window_old": {"layer_types": ["full_attention", "full_attention", "sliding_attention"]},  # Qwen2's rule
    "qwen3_moe_window": {"layer_types": ["full_attention", "sliding_attention"]},  # from max_window_layers on
    "mixtral_theta_left_out": {"rope_theta": 10000.0},  # Llama's default theta instead of Mixtral's 1e6
}


@pytest.mark.parametrize("name", MISTAKES)
def test_each_variant_catches_its_mistake(name, checkpoint):
    folder = checkpoint(name)
    model = tinyinfer.load(folder)
    change = dict(MISTAKES[name])
    rope_change = {key: change.pop(key) for key in ("attention_factor", "mscale") if key in change}
    if rope_change:
        change["rope_scaling"] = {**model.config.rope_scaling, **rope_change}
    mistaken = Model(dataclasses.replace(model.config, **change), model.params)
    ids = prompt_ids(20)
    assert np.abs(mistaken.logits(ids) - hf_logits(folder, ids)).max() > CAUGHT * parity_bound(folder, ids)


@pytest.mark.parametrize("model_type", HF_DEFAULTS)
def test_defaults_are_those_of_the_transformers_config_classes(model_type):
    config_class = transformers.CONFIG_MAPPING[model_type]
    class_defaults = {field.name: field.default for field in dataclasses.fields(config_class)}
    class_defaults["rope_theta"] = getattr(config_class, "default_theta", None)
    for key, value in HF_DEFAULTS[model_type].items():
        assert class_defaults[key] == value, key


# gemma3_text (RoPE per layer type) is checked the same way by tests/test_gemma3.py, gpt_neox and phi (LayerNorm)
# by tests/test_architectures_granite_smollm3_olmo2.py, the other LayerNorm families by
# tests/test_architectures_stablelm_starcoder2_cohere.py, deepseek_v2 and deepseek_v3 (one latent key/value head)
# by tests/test_deepseek.py, gpt_oss (its layers slide by default) by tests/test_gpt_oss.py
LAYERNORM_FAMILIES = ("gpt2", "gpt_neox", "phi", "stablelm", "starcoder2", "cohere", "cohere2", "olmo",
                      "falcon")


@pytest.mark.parametrize("model_type", [t for t in HF_DEFAULTS
                                        if t not in ("gemma3_text", "deepseek_v2", "deepseek_v3", "gpt_oss",
                                                     *LAYERNORM_FAMILIES)])
def test_fields_left_out_of_config_json_are_read_as_transformers_reads_them(model_type, tmp_path):
    """A config.json with only the sizes: tinyinfer's Config agrees with transformers' config object."""
    # 32 heads: the default kv-head counts (up to 32) must divide them
    sizes = dict(model_type=model_type, vocab_size=300, hidden_size=128, num_hidden_layers=2, num_attention_heads=32,
                 intermediate_size=96, num_experts=4, num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    if model_type not in MOE_FAMILIES:
        sizes = {k: v for k, v in sizes.items() if "expert" not in k and k != "moe_intermediate_size"}
    (tmp_path / "config.json").write_text(json.dumps(sizes))
    theirs, ours = transformers.AutoConfig.from_pretrained(tmp_path), load_hf_config(tmp_path)
    window = getattr(theirs, "sliding_window", None) if model_type in ("mistral", "mixtral", "gemma2") else None  # layer 0 slides
    assert (ours.n_kv_heads, ours.head_dim, ours.norm_eps, ours.rope_theta, ours.max_seq_len, ours.window_of(0)) == (
        theirs.num_key_value_heads, getattr(theirs, "head_dim", None) or 128 // 32, theirs.rms_norm_eps,
        theirs.rope_parameters["rope_theta"], theirs.max_position_embeddings, window)
    assert ours.tie_word_embeddings == theirs.tie_word_embeddings
    if model_type in MOE_FAMILIES and model_type != "mixtral":
        assert ours.norm_topk_prob == theirs.norm_topk_prob
    if model_type == "qwen2_moe":
        assert (ours.qkv_bias, ours.shared_expert_d_ff) == (theirs.qkv_bias, theirs.shared_expert_intermediate_size)


@pytest.mark.parametrize("kind", ["longrope", "proportional", "su"])
def test_unsupported_rope_kinds_are_refused_by_name(kind):
    config = {"model_type": "llama", "vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 96,
              "rope_scaling": {"type": kind, "factor": 2.0, "short_factor": [1.0] * 6, "long_factor": [2.0] * 6}}
    with pytest.raises(TinyInferError, match=f"rope scaling type '{kind}' is not supported .*yarn"):
        config_from_hf(config)


@pytest.mark.parametrize("rope, missing", [
    ({"type": "linear"}, "factor"),
    ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}, "low_freq_factor"),
])
def test_rope_scaling_without_its_fields_is_refused_by_name(rope, missing):
    config = {"model_type": "llama", "vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 96, "rope_scaling": rope}
    with pytest.raises(TinyInferError, match=f"needs {missing}"):
        config_from_hf(config)


def test_rope_parameters_per_layer_type_are_refused():
    """transformers 5 nests rope_parameters by layer type for some families; none of those read here."""
    per_layer = {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                 "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    config = {"model_type": "qwen2", "vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 96, "rope_parameters": per_layer}
    with pytest.raises(TinyInferError, match="RoPE parameters per layer type are not supported"):
        config_from_hf(config)


@pytest.mark.parametrize("layer_types, message", [
    (["full_attention"], "layer_types has 1 entries for 2 layers"),
    (["full_attention", "chunked_attention"], "layer type 'chunked_attention' is not supported"),
])
def test_bad_layer_types_are_refused(layer_types, message):
    config = {"model_type": "qwen2", "vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 96, "use_sliding_window": True, "sliding_window": 8,
              "layer_types": layer_types}
    with pytest.raises(TinyInferError, match=message):
        config_from_hf(config)


@pytest.mark.parametrize("name", ["mish", "relu6", "gelu_10", "tanh"])
def test_unsupported_activations_are_refused_by_name(name):
    config = {"model_type": "gpt2", "vocab_size": 300, "n_embd": 48, "n_layer": 2, "n_head": 4,
              "activation_function": name}
    with pytest.raises(TinyInferError, match=f"activation '{name}' is not supported .*gelu_new"):
        config_from_hf(config)


@pytest.mark.parametrize("hf_name", sorted(HF_ACTIVATIONS))
def test_activations_match_transformers(hf_name):
    """Every accepted activation name against transformers' own function, over GELU's whole useful range."""
    x = np.linspace(-12, 12, 4801, dtype=np.float32)
    ours = ACTIVATIONS[HF_ACTIVATIONS[hf_name]](x)
    theirs = transformers.activations.ACT2FN[hf_name](torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-6)  # float32 rounding of values up to 12


def test_a_tied_file_holding_an_equal_head_stays_tied(checkpoint, tmp_path):
    """Converted PyTorch files hold lm_head.weight beside the embedding table, equal to it: still one table."""
    folder = tmp_path / "model"
    shutil.copytree(checkpoint("llama_mlp_bias"), folder)  # tied
    tensors = load_file(folder / "model.safetensors")
    save_file({**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"].copy()}, folder / "model.safetensors",
              metadata={"format": "pt"})
    model = tinyinfer.load(folder)
    assert model.config.tie_word_embeddings
    ids = prompt_ids(20)
    assert_logits_equal_transformers(model, folder, ids)


@pytest.mark.parametrize("name, embed", [("llama_mlp_bias", "model.embed_tokens.weight"), ("gpt2", "transformer.wte.weight")])
def test_a_tied_file_holding_the_table_only_as_its_head_loads(name, embed, checkpoint, tmp_path):
    """Some tools keep the shared table under lm_head.weight alone; transformers ties it the other way round."""
    folder = tmp_path / "model"
    shutil.copytree(checkpoint(name), folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["lm_head.weight"] = tensors.pop(embed)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    ids = prompt_ids(20)
    assert_logits_equal_transformers(tinyinfer.load(folder), folder, ids)


@pytest.mark.parametrize("file", ["config.json", "model.safetensors.index.json"])
def test_a_json_file_of_a_sharded_folder_loads_the_folder(file, checkpoint):
    folder = checkpoint("llama_fp16_sharded_tied")
    ids = prompt_ids(20)
    np.testing.assert_array_equal(tinyinfer.load(folder / file).logits(ids), tinyinfer.load(folder).logits(ids))


def test_generation_stops_at_any_eos_of_a_list(checkpoint, tmp_path):
    """generation_config.json's eos_token_id as a list: greedy decoding ends at the first of them it meets."""
    folder = tmp_path / "model"
    shutil.copytree(checkpoint("llama_mqa_head_dim"), folder)
    ids = prompt_ids(20, seed=6)
    greedy = hf_greedy(folder, ids, 12)
    stop = next(i for i, token in enumerate(greedy) if token not in greedy[:i] and i >= 3)  # a first occurrence
    unused = next(token for token in range(3, 300) if token not in greedy)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [unused, greedy[stop]]}))
    tokens = list(tinyinfer.load(folder).generate(ids, max_tokens=12, temperature=0.0).token_ids)
    assert tokens in (greedy[:stop], greedy[:stop + 1])  # with or without the EOS token itself


def test_eos_ids_from_generation_config_int_or_list(tmp_path):
    config = {"model_type": "llama", "vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 96, "eos_token_id": 2, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert (load_hf_config(tmp_path).eos_token_ids, load_hf_config(tmp_path).torch_dtype) == ([2], "bfloat16")
    for eos in ([2, 7, 9], 5):
        (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
        assert load_hf_config(tmp_path).eos_token_ids == (eos if isinstance(eos, list) else [eos])
