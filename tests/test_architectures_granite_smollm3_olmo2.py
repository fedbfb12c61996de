"""Granite, SmolLM3, OLMo 2, GPT-NeoX and Phi against transformers, on tiny random checkpoints built here.

What each adds to the Llama body, and where the variants below make it matter:
- granite: four multipliers from config.json: the embeddings times `embedding_multiplier`, each sublayer's output
  times `residual_multiplier` before the residual add, attention scores times `attention_multiplier` (in place of
  head_dim^-1/2), logits divided by `logits_scaling`; `attention_bias` on q, k, v and o, `mlp_bias` on the MLP;
- smollm3: layers without RoPE (a 0 in `no_rope_layers`, or every `no_rope_layer_interval`-th layer), and a window
  on the layers `layer_types` names (by default the NoPE layers, with `use_sliding_window`);
- olmo2: norms on each sublayer's output only (x = x + norm(attention(x))), q and k each normed over the whole
  projection (all heads as one) before RoPE; `attention_bias` on q, k, v and o;
- gpt_neox (Pythia): LayerNorm with biases, q/k/v fused head by head in the file, RoPE on a leading part of each
  head (`rotary_pct`, here 3 of 12 coordinates: an odd count, rounded up to 2 pairs as transformers does), a biased
  GELU MLP, and a parallel residual (`use_parallel_residual`): x = x + attention(norm(x)) + mlp(norm'(x));
- phi (Phi-1.5, Phi-2): the parallel residual through one LayerNorm, x = x + attention(norm(x)) + mlp(norm(x)),
  biases on every linear layer (the LM head's too), RoPE on the first `partial_rotary_factor` of each head.

Every parameter is re-randomised with a wide spread (weights_scripts/make_tiny_models.py says why), every
multiplier is far from 1 (the attention one far from head_dim^-1/2), and windows are far shorter than the
prompts. MISTAKES shows that undoing any switch moves the logits by more than MISTAKE_MIN, far past the
tolerance, so the parity below is not luck.

Checked: logits against transformers (float32, eager attention) within 1e-4 at every position; cached decode
against tinyinfer's own full recompute within 1e-9 (in float64); greedy tokens equal to transformers' generate;
the serving engine (paged cache, batched decode) equal to model.generate.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import safetensors.torch
import torch
import transformers
from tiny_models import (
    MISTAKE_MIN,
    TINY_CONFIG,
    WINDOW,
    assert_logits_equal_transformers,
    assert_logits_match_transformers,
    build_with_transformers,
    built_once,
    generation_tests,
    hf_logits,
    make_tiny_models,
    memory_test,
    mistake_distance,
    mistake_test,
    parity_tests,
    prompt_ids,
    tiled_attention_calls,
)

import tinyinfer
import tinyinfer.model
from tinyinfer.families import config_from_hf
from tinyinfer.errors import TinyInferError

# head_dim 12: head_dim^-1/2 = 0.29, far from the attention multiplier
GRANITE = dict(embedding_multiplier=6.0, residual_multiplier=0.4, attention_multiplier=0.7, logits_scaling=3.0)

# name -> (transformers config class, fields, stored dtype)
VARIANTS = {
    "granite": ("GraniteConfig", GRANITE, "float32"),
    "granite_bias_tied": ("GraniteConfig", {**GRANITE, "attention_bias": True, "mlp_bias": True,
                                            "tie_word_embeddings": True}, "float32"),
    "granite_bf16": ("GraniteConfig", GRANITE, "bfloat16"),
    # 4 layers: the default interval, 4, would leave only the last one without RoPE; 2 takes layers 1 and 3
    "smollm3": ("SmolLM3Config", {"num_hidden_layers": 4, "no_rope_layer_interval": 2}, "float32"),
    "smollm3_window_bias": ("SmolLM3Config", {"num_hidden_layers": 4, "no_rope_layers": [0, 1, 1, 0],
                                              "use_sliding_window": True, "sliding_window": WINDOW,
                                              "attention_bias": True, "mlp_bias": True}, "float32"),
    # an explicit list: its sliding layers slide even without use_sliding_window (transformers' masks follow it)
    "smollm3_layer_types_untied": ("SmolLM3Config", {"num_hidden_layers": 4, "sliding_window": WINDOW,
                                                     "layer_types": ["full_attention", "sliding_attention"] * 2,
                                                     "tie_word_embeddings": False}, "float32"),
    "smollm3_bf16": ("SmolLM3Config", {"num_hidden_layers": 4, "no_rope_layer_interval": 2}, "bfloat16"),
    "olmo2": ("Olmo2Config", {}, "float32"),
    "olmo2_bias_tied_mha": ("Olmo2Config", {"attention_bias": True, "tie_word_embeddings": True,
                                            "num_key_value_heads": 4}, "float32"),
    "olmo2_bf16": ("Olmo2Config", {}, "bfloat16"),
    "gpt_neox": ("GPTNeoXConfig", {}, "float32"),
    "gpt_neox_sequential_tied_no_bias": ("GPTNeoXConfig", {"use_parallel_residual": False, "tie_word_embeddings": True,
                                                           "attention_bias": False, "rotary_pct": 0.5}, "float32"),
    "gpt_neox_bf16": ("GPTNeoXConfig", {}, "bfloat16"),
    "gpt_neox_hub_config": ("GPTNeoXConfig", {}, "float32"),  # config.json rewritten as Pythia's: CONFIG_EDITS
    "phi": ("PhiConfig", {}, "float32"),  # partial_rotary_factor: 0.5 when the file gives none
    "phi2_gqa_tied": ("PhiConfig", {"partial_rotary_factor": 0.4, "num_key_value_heads": 2,  # Phi-2's 0.4
                                    "tie_word_embeddings": True}, "float32"),
    "phi_bf16": ("PhiConfig", {}, "bfloat16"),
}
ONE_PER_FAMILY = ["granite_bias_tied", "smollm3_window_bias", "olmo2", "gpt_neox", "phi2_gqa_tied"]
# name -> what its config.json becomes after transformers wrote it (None: the key removed). Pythia's files name
# their RoPE settings rotary_pct and rotary_emb_base, with no rope_parameters.
CONFIG_EDITS = {"gpt_neox_hub_config": {"rope_parameters": None, "rotary_pct": 0.5, "rotary_emb_base": 500}}


def build(folder, config_class: str, fields: dict, dtype: str = "float32", config_edits: dict | None = None):
    """TINY_CONFIG + `fields`, every parameter re-randomised, its config.json then edited (`CONFIG_EDITS`)."""
    build_with_transformers(folder, config_class, {**TINY_CONFIG, **fields}, dtype)
    if config_edits:
        config = {**json.loads((folder / "config.json").read_text()), **config_edits}
        kept = {key: value for key, value in config.items() if value is not None}
        (folder / "config.json").write_text(json.dumps(kept))
    return folder


def build_variant(name: str, folder):
    """The checkpoint of VARIANTS[name], written to `folder`."""
    return build(folder, *VARIANTS[name], CONFIG_EDITS.get(name))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(name) -> Path`, each variant built once for this module."""
    return built_once(tmp_path_factory.mktemp("architectures_granite"), build_variant)


test_logits_match_transformers_at_every_position, test_cached_decode_equals_full_recompute = parity_tests(VARIANTS)

test_greedy_tokens_equal_transformers_generate, test_serving_engine_gives_the_greedy_tokens_of_generate = \
    generation_tests(ONE_PER_FAMILY)

@pytest.mark.parametrize("name", ["granite", "smollm3_window_bias"])
def test_tiled_prefill_matches_transformers(name, checkpoint, monkeypatch):
    """The long-prompt path (`tiled_attention`), forced on a 40-token prompt with 8-position tiles: Granite's score
    scale and SmolLM3's window over unrotated keys reach it too."""
    calls = tiled_attention_calls(monkeypatch)
    assert_logits_match_transformers(checkpoint(name), n=40)
    cfg = tinyinfer.load(checkpoint(name)).config
    assert [c["scale"] for c in calls] == [cfg.attention_scale(i) for i in range(cfg.n_layers)]  # every layer, tiled


# Each switch undone (a Config change) must move some logit by MISTAKE_MIN, or the variant would not catch a
# loader that forgot it.
MISTAKES = {
    "granite": [{"embed_scale": 1.0}, {"residual_scale": 1.0}, {"logits_divisor": 1.0},
                {"attn_multiplier": None}],  # head_dim^-1/2, as in Llama
    "smollm3": [{"nope_layers": []},  # RoPE everywhere
                {"nope_layers": [0, 2]}],  # the other layers without it
    "smollm3_window_bias": [{"layer_types": ["full_attention"] * 4},  # no window
                            {"nope_layers": [0]}],  # the last layer rotates
    "olmo2": [{"qk_norm": False}],
    "gpt_neox": [{"parallel_residual": False}, {"partial_rotary_factor": 1.0}],
    "gpt_neox_sequential_tied_no_bias": [{"parallel_residual": True}],
    "gpt_neox_hub_config": [{"partial_rotary_factor": 0.25}, {"rope_theta": 10000.0}],  # transformers' defaults
    "phi": [{"partial_rotary_factor": 1.0}],
    "phi2_gqa_tied": [{"partial_rotary_factor": 0.5}],
}


@pytest.mark.parametrize("name, change", [(name, change) for name, changes in MISTAKES.items() for change in changes],
                         ids=lambda x: x if isinstance(x, str) else "-".join(x))
def test_each_switch_matters(name, change, checkpoint):
    assert mistake_distance(checkpoint(name), change) > MISTAKE_MIN


def _layers(params: dict, change) -> dict:
    return dict(params, layers=[change(layer) for layer in params["layers"]])


def _neox_qkv_in_file_order(params: dict, cfg) -> dict:
    """q, k, v columns in the file's row order (head by head) instead of tinyinfer's [all q | all k | all v]."""
    file_rows = np.arange(3 * cfg.d_model).reshape(cfg.n_heads, 3, cfg.head_dim).swapaxes(0, 1).reshape(-1)
    to_file_order = np.argsort(file_rows)  # tinyinfer's column j holds file row file_rows[j]

    def reorder(layer):
        wrong = dict(layer, qkv=layer["qkv"][:, to_file_order])
        return wrong if "qkv_bias" not in layer else dict(wrong, qkv_bias=layer["qkv_bias"][to_file_order])

    return _layers(params, reorder)


# A loader mistake each file layout invites: (variant, Config change, what it does to the loaded parameters)
LOADER_MISTAKES = {
    # OLMo 2 read as a Llama: its two norms taken as the sublayers' input norms
    "olmo2-norms_at_the_inputs": ("olmo2", {"pre_norms": True, "post_norms": False}, lambda params, cfg: _layers(
        params, lambda layer: dict(layer, attn_norm=layer["post_attn_norm"], mlp_norm=layer["post_mlp_norm"]))),
    # GPT-NeoX's query_key_value rows taken as [q; k; v] blocks (Phi-3's layout)
    "gpt_neox-qkv_in_file_order": ("gpt_neox", {}, _neox_qkv_in_file_order),
    "gpt_neox_sequential-qkv_in_file_order": ("gpt_neox_sequential_tied_no_bias", {}, _neox_qkv_in_file_order),
    # Phi read as a sequential block through its one norm, or without the LM head's bias
    "phi-sequential": ("phi", {"parallel_residual": False, "shared_input_norm": False}, lambda params, cfg: _layers(
        params, lambda layer: dict(layer, mlp_norm=layer["attn_norm"]))),
    "phi-no_lm_head_bias": ("phi", {"lm_head_bias": False},
                            lambda params, cfg: {key: value for key, value in params.items() if key != "lm_head_bias"}),
}


test_each_loader_mistake_moves_the_logits_far = mistake_test(LOADER_MISTAKES)


test_memory_arithmetic_counts_every_parameter = memory_test(VARIANTS)


SIZES = {"vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 96}


def test_granite_config_file_reads_its_multipliers():
    """The fields of granite-3.1-2b-instruct's config.json (sizes shrunk)."""
    config = config_from_hf({**SIZES, "model_type": "granite", "attention_multiplier": 0.015625,
                             "embedding_multiplier": 12.0, "logits_scaling": 8.0, "residual_multiplier": 0.22,
                             "rope_theta": 5000000.0, "tie_word_embeddings": True, "attention_bias": False,
                             "mlp_bias": False, "attention_dropout": 0.1})
    assert (config.embed_scale, config.residual_scale, config.attention_scale(1), config.logits_divisor) == (
        12.0, 0.22, 0.015625, 8.0)
    assert (config.rope_theta, config.tie_word_embeddings, config.window_of(0)) == (5000000.0, True, None)
    bare = config_from_hf({**SIZES, "model_type": "granite"})  # transformers' defaults: every multiplier 1.0
    assert (bare.embed_scale, bare.residual_scale, bare.attention_scale(0), bare.logits_divisor) == (1.0, 1.0, 1.0, 1.0)


def test_smollm3_config_reads_its_layers_as_transformers_does(checkpoint):
    nope = {name: tinyinfer.load(checkpoint(name)).config.nope_layers
            for name in ("smollm3", "smollm3_window_bias", "smollm3_layer_types_untied")}
    assert nope == {"smollm3": [1, 3], "smollm3_window_bias": [0, 3], "smollm3_layer_types_untied": [3]}
    windowed = tinyinfer.load(checkpoint("smollm3_window_bias")).config
    assert [windowed.window_of(i) for i in range(4)] == [WINDOW, None, None, WINDOW]  # the NoPE layers
    listed = tinyinfer.load(checkpoint("smollm3_layer_types_untied")).config
    assert [listed.window_of(i) for i in range(4)] == [None, WINDOW, None, WINDOW]


def test_smollm3_config_file_reads():
    """The fields of SmolLM3-3B's config.json (sizes shrunk to 8 layers): every 4th layer without RoPE."""
    config = config_from_hf({**SIZES, "model_type": "smollm3", "num_hidden_layers": 8, "rope_theta": 5000000.0,
                             "no_rope_layers": [1, 1, 1, 0, 1, 1, 1, 0], "no_rope_layer_interval": 4,
                             "use_sliding_window": False, "sliding_window": None, "max_position_embeddings": 65536,
                             "layer_types": ["full_attention"] * 8, "rope_scaling": None})
    assert (config.nope_layers, config.rope_theta, config.tie_word_embeddings) == ([3, 7], 5000000.0, True)
    assert [config.window_of(i) for i in range(8)] == [None] * 8
    bare = config_from_hf({**SIZES, "model_type": "smollm3", "num_hidden_layers": 8})
    theirs = transformers.SmolLM3Config(**{**SIZES, "num_hidden_layers": 8})  # its defaults: interval 4, theta 2e6
    assert bare.nope_layers == [i for i, rotates in enumerate(theirs.no_rope_layers) if not rotates] == [3, 7]
    assert bare.rope_theta == theirs.rope_parameters["rope_theta"]


@pytest.mark.parametrize("fields, message", [
    ({"no_rope_layers": [1, 0]}, r"no_rope_layers=\[1, 0\] must be a list of 4 flags"),
    ({"no_rope_layers": [1, 2, 1, 1]}, "must be a list of 4 flags, 1 .RoPE. or 0"),
    ({"no_rope_layer_interval": 0}, "no_rope_layer_interval=0 must be an integer >= 1"),
    ({"use_sliding_window": True, "sliding_window": None, "layer_types": ["sliding_attention"] * 4},
     "sliding_window is null"),
])
def test_smollm3_options_tinyinfer_cannot_honour_are_refused_by_name(fields, message):
    with pytest.raises(TinyInferError, match=message):
        config_from_hf({**SIZES, "model_type": "smollm3", "num_hidden_layers": 4, **fields})


def test_olmo2_config_file_reads():
    """The fields of OLMo-2-1124-7B's config.json (sizes shrunk)."""
    config = config_from_hf({**SIZES, "model_type": "olmo2", "attention_bias": False, "rms_norm_eps": 1e-6,
                             "rope_scaling": None, "rope_theta": 500000, "tie_word_embeddings": False,
                             "max_position_embeddings": 4096, "pad_token_id": 100277, "eos_token_id": 100257})
    assert (config.pre_norms, config.post_norms, config.qk_norm, config.qk_norm_span) == (False, True, True, "full")
    assert (config.rope_theta, config.norm_eps, config.window_of(0), config.eos_token_ids) == (500000, 1e-6, None,
                                                                                             [100257])


def test_gpt_neox_config_file_reads():
    """The fields of pythia-70m's config.json (sizes shrunk), and a transformers 5 config without any RoPE field."""
    sizes = {k: v for k, v in SIZES.items() if k != "num_key_value_heads"}
    pythia = config_from_hf({**sizes, "model_type": "gpt_neox", "rotary_pct": 0.25, "rotary_emb_base": 10000,
                             "use_parallel_residual": True, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
                             "tie_word_embeddings": False, "rope_scaling": None, "bos_token_id": 0,
                             "eos_token_id": 0, "use_cache": True, "initializer_range": 0.02})
    assert (pythia.rotary_dim, pythia.rope_theta, pythia.parallel_residual, pythia.norm, pythia.activation) == (
        3, 10000, True, "layernorm", "gelu")
    assert (pythia.qkv_bias, pythia.o_bias, pythia.mlp_bias, pythia.n_kv_heads) == (True, True, True, 4)
    bare = config_from_hf({**sizes, "model_type": "gpt_neox"})
    theirs = transformers.GPTNeoXConfig(**sizes)
    assert (bare.partial_rotary_factor, bare.rope_theta) == (theirs.rope_parameters["partial_rotary_factor"],
                                                             theirs.rope_parameters["rope_theta"])
    assert (bare.norm_eps, bare.max_seq_len, bare.tie_word_embeddings, bare.parallel_residual) == (
        theirs.layer_norm_eps, theirs.max_position_embeddings, theirs.tie_word_embeddings, theirs.use_parallel_residual)


def test_phi2_config_file_reads():
    """The fields of Phi-2's config.json (sizes shrunk)."""
    sizes = {k: v for k, v in SIZES.items() if k != "num_key_value_heads"}
    phi2 = config_from_hf({**sizes, "model_type": "phi", "hidden_act": "gelu_new", "partial_rotary_factor": 0.4,
                           "qk_layernorm": False, "rope_scaling": None, "rope_theta": 10000.0, "resid_pdrop": 0.1,
                           "embd_pdrop": 0.0, "attention_dropout": 0.0, "layer_norm_eps": 1e-05,
                           "tie_word_embeddings": False, "num_key_value_heads": None})
    assert (phi2.rotary_dim, phi2.activation, phi2.norm, phi2.norm_eps, phi2.n_kv_heads) == (
        4, "gelu_tanh", "layernorm", 1e-05, 4)
    assert (phi2.parallel_residual, phi2.shared_input_norm, phi2.lm_head_bias, phi2.qkv_bias, phi2.o_bias) == (
        True, True, True, True, True)
    bare = config_from_hf({**sizes, "model_type": "phi"})
    theirs = transformers.PhiConfig(**sizes)
    assert (bare.partial_rotary_factor, bare.rope_theta, bare.norm_eps, bare.tie_word_embeddings) == (
        theirs.rope_parameters["partial_rotary_factor"], theirs.rope_parameters["rope_theta"], theirs.layer_norm_eps,
        theirs.tie_word_embeddings)


def test_phi_qk_layernorm_is_refused_by_name():
    with pytest.raises(TinyInferError, match="qk_layernorm=true .LayerNorms on q and k. is not supported"):
        config_from_hf({**SIZES, "model_type": "phi", "qk_layernorm": True})


def test_gpt_neox_hub_file_layout_loads(checkpoint, tmp_path):
    """Pythia's Hub files hold each layer's causal-mask buffers (attention.bias, attention.masked_bias) and
    rotary_emb.inv_freq beside the weights, which are skipped; and an output layer `embed_out.weight` of its own
    under tie_word_embeddings=true is kept apart from the embedding table, as transformers 5 does."""
    folder = shutil.copytree(checkpoint("gpt_neox_sequential_tied_no_bias"), tmp_path / "pythia")
    tensors = safetensors.torch.load_file(folder / "model.safetensors")
    assert "embed_out.weight" not in tensors  # saved tied: the table only
    tensors["embed_out.weight"] = torch.randn(tensors["gpt_neox.embed_in.weight"].shape) * make_tiny_models.INIT_STD
    for i in range(TINY_CONFIG["num_hidden_layers"]):
        n = TINY_CONFIG["max_position_embeddings"]
        tensors[f"gpt_neox.layers.{i}.attention.bias"] = torch.ones(1, 1, n, n, dtype=torch.bool).tril()
        tensors[f"gpt_neox.layers.{i}.attention.masked_bias"] = torch.tensor(-1e9)
        tensors[f"gpt_neox.layers.{i}.attention.rotary_emb.inv_freq"] = torch.ones(3)
    safetensors.torch.save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    model = tinyinfer.load(folder)
    ids = prompt_ids(24)
    assert not model.config.tie_word_embeddings
    assert_logits_equal_transformers(model, folder, ids)
