"""StableLM, StarCoder2, Cohere, OLMo 1 and Falcon against transformers, on tiny random checkpoints built here.

What each adds to the Llama body, and where the variants below make it matter:
- stablelm (StableLM-3B-4E1T, StableLM 2): LayerNorm with biases, RoPE on a leading part of each head
  (`partial_rotary_factor`, 0.25 by default), q/k/v biases (`use_qkv_bias`); StableLM 2 12B's options: a LayerNorm
  without bias on each head of q and k, each head with its own gain (`qk_layernorm`), and Phi-2's parallel block
  through one norm (`use_parallel_residual`);
- starcoder2: LayerNorm with biases (`norm_epsilon`), a tanh-GELU MLP (c_fc, c_proj), biases on q, k, v, o and
  the MLP (`use_bias`), a window over every layer (`sliding_window`), a tied head by default;
- cohere (Command-R): Phi-2's parallel block through one LayerNorm that learns no bias, the logits times
  `logit_scale` (0.8 here: not a power of two, and not shrinking the logits 16-fold as the default 0.0625 would,
  which would loosen the tolerance as much), RoPE on neighbouring pairs (reordered at load), and with
  `use_qk_norm` a LayerNorm (no bias) on each head of q and k, each with its own gain;
- cohere2 (Command R7B): Cohere's block with three layers of four sliding through a window and rotating, the
  fourth attending to the whole context without RoPE;
- olmo (OLMo 1): LayerNorms that learn nothing (no gain, no bias), q, k and v clamped to +-`clip_qkv` (2 here, which
  most of their coordinates exceed), `attention_bias` on q, k, v and o;
- falcon: LayerNorm with biases, a GELU MLP, `bias` on every linear layer but the head, q/k/v fused in groups (one
  per key/value head: its query heads, its key, its value), and its three blocks: Falcon-7B's (parallel through one
  norm, one key/value head with `multi_query`), the new architecture of Falcon-40B (parallel with two norms,
  `num_kv_heads` groups; one norm with num_ln_in_parallel_attn 1, Falcon-11B) and the sequential one.

Every parameter is re-randomised with a wide spread (weights_scripts/make_tiny_models.py says why). MISTAKES shows
that undoing any switch moves the logits by more than MISTAKE_MIN, far past the tolerance, so the parity below is
not luck.

Checked: logits against transformers (float32, eager attention) within 1e-4 at every position; cached decode
against tinyinfer's own full recompute within 1e-9 (in float64); greedy tokens equal to transformers' generate;
the serving engine (paged cache, batched decode) equal to model.generate; the parameter count from the config.
"""

from __future__ import annotations

import numpy as np
import pytest
import transformers
from tiny_models import (
    TINY_CONFIG,
    WINDOW,
    build_with_transformers,
    built_once,
    generation_tests,
    memory_test,
    mistake_test,
    parity_tests,
)

from tinyinfer.families import config_from_hf
from tinyinfer.errors import TinyInferError
from tinyinfer.families.falcon import qkv_rows as _falcon_qkv_rows
from tinyinfer.weights import halves_order as _halves_order

# head_dim 16: StableLM's default factor, 0.25, rotates 4 coordinates (transformers fails on an odd count)
STABLELM2_12B = dict(hidden_size=64, use_qkv_bias=True, qk_layernorm=True, use_parallel_residual=True)
FALCON_40B = dict(new_decoder_architecture=True, num_kv_heads=2, bias=True)
COMMAND_R_QK_NORM = dict(logit_scale=0.8, use_qk_norm=True, attention_bias=True, tie_word_embeddings=False)

# name -> (transformers config class, fields, stored dtype)
VARIANTS = {
    "stablelm": ("StableLmConfig", {"partial_rotary_factor": 0.5}, "float32"),
    "stablelm_bias_tied_mha": ("StableLmConfig", {"partial_rotary_factor": 0.5, "use_qkv_bias": True,
                                                  "tie_word_embeddings": True, "num_key_value_heads": 4}, "float32"),
    "stablelm2_qk_norm_parallel": ("StableLmConfig", STABLELM2_12B, "float32"),
    "stablelm_bf16": ("StableLmConfig", STABLELM2_12B, "bfloat16"),
    "starcoder2": ("Starcoder2Config", {}, "float32"),  # use_bias, tied
    "starcoder2_window_no_bias_untied": ("Starcoder2Config", {"sliding_window": WINDOW, "use_bias": False,
                                                              "tie_word_embeddings": False}, "float32"),
    "starcoder2_bf16": ("Starcoder2Config", {"sliding_window": WINDOW}, "bfloat16"),
    "cohere": ("CohereConfig", {"logit_scale": 0.8}, "float32"),  # tied
    "cohere_qk_norm_bias_untied": ("CohereConfig", COMMAND_R_QK_NORM, "float32"),
    "cohere_bf16": ("CohereConfig", COMMAND_R_QK_NORM, "bfloat16"),
    "cohere2": ("Cohere2Config", {"num_hidden_layers": 4, "sliding_window": WINDOW, "logit_scale": 0.8}, "float32"),
    "olmo_clip": ("OlmoConfig", {"clip_qkv": 2.0}, "float32"),
    "olmo_bias_tied_no_clip": ("OlmoConfig", {"attention_bias": True, "tie_word_embeddings": True}, "float32"),
    "olmo_bf16": ("OlmoConfig", {"clip_qkv": 2.0}, "bfloat16"),
    "falcon7b_multi_query": ("FalconConfig", {}, "float32"),
    "falcon40b_grouped_bias": ("FalconConfig", FALCON_40B, "float32"),
    "falcon11b_one_norm_untied": ("FalconConfig", {**FALCON_40B, "bias": False, "num_ln_in_parallel_attn": 1,
                                                   "tie_word_embeddings": False}, "float32"),
    "falcon_sequential_mha_bias": ("FalconConfig", {"parallel_attn": False, "multi_query": False, "bias": True},
                                   "float32"),
    "falcon_bf16": ("FalconConfig", FALCON_40B, "bfloat16"),
}
ONE_PER_FAMILY = ["stablelm2_qk_norm_parallel", "starcoder2_window_no_bias_untied", "cohere_qk_norm_bias_untied",
                  "cohere2", "olmo_clip", "falcon40b_grouped_bias"]


def build_variant(name: str, folder):
    """The checkpoint of VARIANTS[name], written to `folder`."""
    config_class, fields, dtype = VARIANTS[name]
    return build_with_transformers(folder, config_class, {**TINY_CONFIG, **fields}, dtype)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(name) -> Path`, each variant built once for this module."""
    return built_once(tmp_path_factory.mktemp("architectures_stablelm"), build_variant)


test_logits_match_transformers_at_every_position, test_cached_decode_equals_full_recompute = parity_tests(VARIANTS)
test_greedy_tokens_equal_transformers_generate, test_serving_engine_gives_the_greedy_tokens_of_generate = \
    generation_tests(ONE_PER_FAMILY)


def _layers(params: dict, change) -> dict:
    return dict(params, layers=[change(layer) for layer in params["layers"]])


def _cohere_columns(cfg) -> np.ndarray:
    """The file's qkv column behind each of tinyinfer's (the loader's reordering of q and k, per head)."""
    q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    q_order, k_order = _halves_order(cfg.n_heads, cfg.head_dim), _halves_order(cfg.n_kv_heads, cfg.head_dim)
    return np.concatenate([q_order, q_dim + k_order, q_dim + kv_dim + np.arange(kv_dim)])


def _falcon_qkv_in_file_order(params: dict, cfg) -> dict:
    """q, k, v columns in the file's row order (group by group) instead of tinyinfer's [all q | all k | all v]."""
    to_file_order = np.argsort(_falcon_qkv_rows(cfg))

    def reorder(layer):
        wrong = dict(layer, qkv=layer["qkv"][:, to_file_order])
        return wrong if "qkv_bias" not in layer else dict(wrong, qkv_bias=layer["qkv_bias"][to_file_order])

    return _layers(params, reorder)


def _the_one_norm_twice(params: dict, cfg) -> dict:
    """A parallel block's one norm read as a sequential block's two (what a Llama-style reading would do)."""
    return _layers(params, lambda layer: dict(layer, mlp_norm=layer["attn_norm"]))


def _unit_gain(cfg) -> dict:
    return {"weight": np.ones(cfg.d_model, dtype=np.float32)}


def _unbiased(mlp: dict) -> dict:
    return {key: value for key, value in mlp.items() if not key.endswith("_bias")}


# Each switch undone (a Config change, and what it does to the loaded parameters, if anything) must move some
# logit by MISTAKE_MIN, or the variants would not catch a loader that forgot it.
MISTAKES = {
    "stablelm-rope_everywhere": ("stablelm", {"partial_rotary_factor": 1.0}, None),
    "stablelm-rms_norm": ("stablelm", {"norm": "rmsnorm"}, None),  # read as a Llama
    "stablelm2-rope_half": ("stablelm2_qk_norm_parallel", {"partial_rotary_factor": 0.5}, None),
    "stablelm2-no_qk_norm": ("stablelm2_qk_norm_parallel", {"qk_norm": False}, None),
    "stablelm2-qk_rms_norm": ("stablelm2_qk_norm_parallel", {"qk_norm_kind": "rmsnorm"}, None),
    # every head normed with head 0's gain, as Qwen3's one shared gain
    "stablelm2-one_gain_for_all_heads": ("stablelm2_qk_norm_parallel", {"qk_norm_span": "head"}, lambda params, cfg: (
        _layers(params, lambda layer: dict(layer, q_norm=layer["q_norm"][0], k_norm=layer["k_norm"][0])))),
    # a sequential block through the one norm
    "stablelm2-sequential": ("stablelm2_qk_norm_parallel", {"parallel_residual": False, "shared_input_norm": False},
                             _the_one_norm_twice),
    "starcoder2-rms_norm": ("starcoder2", {"norm": "rmsnorm"}, None),
    "starcoder2-no_biases": ("starcoder2", {}, lambda params, cfg: _layers(params, lambda layer: {
        key: value for key, value in dict(layer, mlp=_unbiased(layer["mlp"])).items() if not key.endswith("_bias")})),
    "starcoder2-no_window": ("starcoder2_window_no_bias_untied", {"layer_types": ["full_attention"] * 2}, None),
    "cohere-rms_norm": ("cohere", {"norm": "rmsnorm"}, None),
    "cohere-no_logit_scale": ("cohere", {"logits_divisor": 1.0}, None),
    "cohere-rope_pairs_as_in_the_file": ("cohere", {}, lambda params, cfg: _layers(params, lambda layer: dict(
        layer, qkv=layer["qkv"][:, np.argsort(_cohere_columns(cfg))]))),
    "cohere-sequential": ("cohere", {"parallel_residual": False, "shared_input_norm": False},
                          _the_one_norm_twice),
    "cohere-no_qk_norm": ("cohere_qk_norm_bias_untied", {"qk_norm": False}, None),
    "cohere2-rope_everywhere": ("cohere2", {"nope_layers": []}, None),
    "cohere2-no_window": ("cohere2", {"layer_types": ["full_attention"] * 4}, None),
    "olmo-no_clip": ("olmo_clip", {"clip_qkv": None}, None),
    # read as a Llama whose RMSNorms have unit gains: no centring
    "olmo-rms_norm": ("olmo_bias_tied_no_clip", {"norm": "rmsnorm"}, lambda params, cfg: dict(
        _layers(params, lambda layer: dict(layer, attn_norm=_unit_gain(cfg), mlp_norm=_unit_gain(cfg))),
        final_norm=_unit_gain(cfg))),
    "falcon40b-qkv_in_file_order": ("falcon40b_grouped_bias", {}, _falcon_qkv_in_file_order),
    "falcon_mha-qkv_in_file_order": ("falcon_sequential_mha_bias", {}, _falcon_qkv_in_file_order),
    "falcon7b-sequential": ("falcon7b_multi_query", {"parallel_residual": False, "shared_input_norm": False},
                            _the_one_norm_twice),
    "falcon40b-one_norm": ("falcon40b_grouped_bias", {"shared_input_norm": True}, None),
    "falcon_mha-parallel": ("falcon_sequential_mha_bias", {"parallel_residual": True}, None),
}


test_each_switch_matters = mistake_test(MISTAKES)


test_memory_arithmetic_counts_every_parameter = memory_test(VARIANTS)


SIZES = {"vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 4, "intermediate_size": 96}


def test_stablelm2_config_file_reads():
    """The fields of stablelm-2-1_6b's config.json (sizes shrunk), and a bare one read with StableLmConfig's
    defaults."""
    config = config_from_hf({**SIZES, "model_type": "stablelm", "hidden_act": "silu", "layer_norm_eps": 1e-05,
                             "partial_rotary_factor": 0.25, "rope_theta": 10000, "use_qkv_bias": True,
                             "tie_word_embeddings": False, "max_position_embeddings": 4096, "bos_token_id": 100257,
                             "eos_token_id": 100257, "torch_dtype": "float16"})
    assert (config.norm, config.norm_eps, config.rotary_dim, config.qkv_bias, config.o_bias, config.qk_norm) == (
        "layernorm", 1e-05, 4, True, False, False)
    assert (config.parallel_residual, config.shared_input_norm, config.window_of(0)) == (False, False, None)
    bare = config_from_hf({**SIZES, "model_type": "stablelm"})
    theirs = transformers.StableLmConfig(**SIZES)
    assert (bare.partial_rotary_factor, bare.rope_theta, bare.norm_eps, bare.max_seq_len) == (
        theirs.rope_parameters["partial_rotary_factor"], theirs.rope_parameters["rope_theta"], theirs.layer_norm_eps,
        theirs.max_position_embeddings)
    assert (bare.qkv_bias, bare.qk_norm, bare.parallel_residual, bare.tie_word_embeddings) == (
        theirs.use_qkv_bias, theirs.qk_layernorm, theirs.use_parallel_residual, theirs.tie_word_embeddings)


def test_starcoder2_config_file_reads():
    """The fields of starcoder2-3b's config.json (sizes shrunk), and a bare one read with Starcoder2Config's
    defaults."""
    config = config_from_hf({**SIZES, "model_type": "starcoder2", "num_key_value_heads": 2, "norm_epsilon": 1e-05,
                             "hidden_act": "gelu_pytorch_tanh", "rope_theta": 999999.4420358813, "sliding_window": 4096,
                             "use_bias": True, "max_position_embeddings": 16384, "residual_dropout": 0.1,
                             "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0})
    assert (config.norm, config.norm_eps, config.mlp, config.activation, config.window_of(1)) == (
        "layernorm", 1e-05, "gelu_mlp", "gelu_tanh", 4096)
    assert (config.qkv_bias, config.o_bias, config.mlp_bias, config.tie_word_embeddings, config.rope_theta) == (
        True, True, True, True, 999999.4420358813)
    sizes = {key: value for key, value in SIZES.items() if key != "num_key_value_heads"}
    bare = config_from_hf({**sizes, "model_type": "starcoder2"})
    theirs = transformers.Starcoder2Config(**sizes)
    assert (bare.n_kv_heads, bare.norm_eps, bare.rope_theta, bare.max_seq_len, bare.window_of(0)) == (
        theirs.num_key_value_heads, theirs.norm_epsilon, theirs.rope_parameters["rope_theta"],
        theirs.max_position_embeddings, theirs.sliding_window)
    assert (bare.mlp_bias, bare.tie_word_embeddings) == (theirs.use_bias, theirs.tie_word_embeddings)


def test_command_r_config_file_reads():
    """The fields of c4ai-command-r-v01's config.json (sizes shrunk), and a bare one read with CohereConfig's
    defaults."""
    config = config_from_hf({**SIZES, "model_type": "cohere", "logit_scale": 0.0625, "layer_norm_eps": 1e-05,
                             "rope_theta": 8000000.0, "use_qk_norm": False, "attention_bias": False,
                             "max_position_embeddings": 8192, "bos_token_id": 5, "eos_token_id": 255001,
                             "pad_token_id": 0, "hidden_act": "silu"})
    assert (config.norm, config.norm_eps, config.logits_divisor, config.rope_theta, config.tie_word_embeddings) == (
        "layernorm_no_bias", 1e-05, 16.0, 8000000.0, True)
    assert (config.parallel_residual, config.shared_input_norm, config.qk_norm, config.mlp, config.qkv_bias) == (
        True, True, False, "swiglu", False)
    sizes = {key: value for key, value in SIZES.items() if key != "num_key_value_heads"}
    bare = config_from_hf({**sizes, "model_type": "cohere"})
    theirs = transformers.CohereConfig(**sizes)
    assert (bare.n_kv_heads, bare.rope_theta, bare.norm_eps, bare.max_seq_len, bare.logits_divisor) == (
        theirs.num_key_value_heads, theirs.rope_parameters["rope_theta"], theirs.layer_norm_eps,
        theirs.max_position_embeddings, 1 / theirs.logit_scale)
    assert (bare.qk_norm, bare.tie_word_embeddings) == (theirs.use_qk_norm, theirs.tie_word_embeddings)


def test_command_r7b_config_file_reads():
    """The fields of c4ai-command-r7b-12-2024's config.json (sizes shrunk to 8 layers): the old
    `sliding_window_pattern` names every 4th layer full, and those rotate nothing."""
    config = config_from_hf({**SIZES, "model_type": "cohere2", "num_hidden_layers": 8, "logit_scale": 0.25,
                             "sliding_window": 4096, "sliding_window_pattern": 4, "rope_theta": 50000,
                             "layer_norm_eps": 1e-05, "max_position_embeddings": 8192, "head_dim": 128})
    assert config.nope_layers == [3, 7]
    assert [config.window_of(i) for i in range(4)] == [4096, 4096, 4096, None]
    assert (config.head_dim, config.logits_divisor, config.rope_theta, config.qk_norm) == (16, 4.0, 50000, False)
    bare = config_from_hf({**SIZES, "model_type": "cohere2", "num_hidden_layers": 8})
    theirs = transformers.Cohere2Config(**{**SIZES, "num_hidden_layers": 8})
    assert [bare.window_of(i) for i in range(8)] == [theirs.sliding_window if kind == "sliding_attention" else None
                                                     for kind in theirs.layer_types]
    assert (bare.rope_theta, bare.logits_divisor) == (theirs.rope_parameters["rope_theta"], 1 / theirs.logit_scale)


def test_olmo_config_file_reads():
    """The fields of OLMo-1B-hf's config.json (sizes shrunk), and a bare one read with OlmoConfig's defaults."""
    config = config_from_hf({**SIZES, "model_type": "olmo", "attention_bias": False, "clip_qkv": None,
                             "hidden_act": "silu", "max_position_embeddings": 2048, "rope_theta": 10000.0,
                             "tie_word_embeddings": True, "eos_token_id": 50279, "pad_token_id": 1})
    assert (config.norm, config.norm_eps, config.clip_qkv, config.tie_word_embeddings, config.qkv_bias) == (
        "layernorm_no_params", 1e-5, None, True, False)
    assert config_from_hf({**SIZES, "model_type": "olmo", "clip_qkv": 8.0}).clip_qkv == 8.0  # OLMo-7B-0424
    sizes = {key: value for key, value in SIZES.items() if key != "num_key_value_heads"}
    bare = config_from_hf({**sizes, "model_type": "olmo"})
    theirs = transformers.OlmoConfig(**sizes)
    assert (bare.n_kv_heads, bare.rope_theta, bare.max_seq_len, bare.clip_qkv, bare.tie_word_embeddings) == (
        theirs.num_key_value_heads, theirs.rope_parameters["rope_theta"], theirs.max_position_embeddings,
        theirs.clip_qkv, theirs.tie_word_embeddings)


@pytest.mark.parametrize("clip", [0, -1.0, "8"])
def test_olmo_clip_qkv_must_be_a_positive_number(clip):
    with pytest.raises(TinyInferError, match=f"clip_qkv={clip!r} must be a positive number"):
        config_from_hf({**SIZES, "model_type": "olmo", "clip_qkv": clip})


def test_falcon_config_files_read():
    """The fields of falcon-7b's and falcon-40b's config.json (sizes shrunk), and a bare one read with
    FalconConfig's defaults."""
    falcon = {"vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "model_type": "falcon", "alibi": False, "apply_residual_connection_post_layernorm": False, "bias": False,
              "hidden_dropout": 0.0, "layer_norm_epsilon": 1e-05, "bos_token_id": 11, "eos_token_id": 11}
    falcon_7b = config_from_hf({**falcon, "multi_query": True, "new_decoder_architecture": False,
                                "parallel_attn": True})
    assert (falcon_7b.n_kv_heads, falcon_7b.parallel_residual, falcon_7b.shared_input_norm, falcon_7b.d_ff) == (
        1, True, True, 256)
    assert (falcon_7b.norm, falcon_7b.activation, falcon_7b.qkv_bias, falcon_7b.tie_word_embeddings) == (
        "layernorm", "gelu", False, True)
    falcon_40b = config_from_hf({**falcon, "new_decoder_architecture": True, "num_kv_heads": 2, "parallel_attn": True})
    assert (falcon_40b.n_kv_heads, falcon_40b.parallel_residual, falcon_40b.shared_input_norm) == (2, True, False)
    bare = config_from_hf({key: value for key, value in falcon.items() if key in SIZES or key == "model_type"})
    theirs = transformers.FalconConfig(**{key: value for key, value in falcon.items() if key in SIZES})
    assert (bare.rope_theta, bare.max_seq_len, bare.norm_eps, bare.d_ff, bare.tie_word_embeddings) == (
        theirs.rope_parameters["rope_theta"], theirs.max_position_embeddings, theirs.layer_norm_epsilon,
        theirs.ffn_hidden_size, theirs.tie_word_embeddings)
    assert (bare.n_kv_heads, bare.parallel_residual, bare.qkv_bias) == (1, theirs.parallel_attn, theirs.bias)


@pytest.mark.parametrize("fields, message", [
    ({"alibi": True}, "alibi=true .ALiBi position biases"),
    ({"new_decoder_architecture": True, "parallel_attn": False}, "new_decoder_architecture=true needs parallel_attn"),
    ({"num_ln_in_parallel_attn": 2}, "num_ln_in_parallel_attn=2 is not supported"),
    ({"new_decoder_architecture": True, "num_ln_in_parallel_attn": 3}, "num_ln_in_parallel_attn=3 is not supported"),
    ({"multi_query": False, "num_kv_heads": 2}, "num_kv_heads=2 needs new_decoder_architecture=true"),
])
def test_falcon_variants_tinyinfer_cannot_honour_are_refused_by_name(fields, message):
    with pytest.raises(TinyInferError, match=message):
        config_from_hf({**SIZES, "model_type": "falcon", **fields})


@pytest.mark.parametrize("scale", [None, 0, -0.5, "big"])
def test_cohere_logit_scale_must_be_a_positive_number(scale):
    with pytest.raises(TinyInferError, match=f"logit_scale={scale!r} must be a positive number"):
        config_from_hf({**SIZES, "model_type": "cohere", "logit_scale": scale})


def test_stablelm_head_dim_is_hidden_size_over_heads():
    """StableLmAttention ignores a head_dim field (it has none); so does tinyinfer."""
    assert config_from_hf({**SIZES, "model_type": "stablelm", "head_dim": 32}).head_dim == 16
