"""Phi-3, Gemma and Gemma 2 against transformers, on tiny random checkpoints built here.

What each adds to the Llama body, and where the variants below make it matter:
- phi3: q/k/v and gate/up fused in the file (split at load), RoPE on a leading part of each head
  (`partial_rotary_factor`), a sliding window over every layer when `sliding_window` is set, tied or untied head,
  longrope (the 128k models) up to the length where transformers switches from its short to its long factors;
- gemma: embeddings times sqrt(hidden_size), RMSNorm scaling by (1 + weight), a tanh-GELU gated MLP (config.json's
  "gelu" read as the tanh approximation, as transformers 5 does), head_dim independent of hidden_size / heads;
- gemma2: four norms per layer (sublayer outputs normed before the residual add), attention scores scaled by
  query_pre_attn_scalar^-1/2 and soft-capped before the mask, soft-capped logits, a window on the even layers.

Every parameter is re-randomised with a wide spread (weights_scripts/make_tiny_models.py says why; Gemma's norm
weights, stored as offsets from 1, are drawn from U(-0.5, 0.5) so that its gains spread as the others'), the soft
caps are set low enough to bite, and windows are far shorter than the prompts. MISTAKES shows that undoing any
of these switches moves the logits far past the tolerance, so the parity below is not luck.

Checked: logits against transformers (float32, eager attention) within 1e-4 at every position, also through the
tiled long-prompt path; cached decode against tinyinfer's own full recompute within 1e-9 (in float64); greedy
tokens equal to transformers' generate; the serving engine (paged cache, batched decode) equal to model.generate.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tokenizers
import transformers
from conftest import shared_data
from tiny_models import (
    CAUGHT,
    TINY_CONFIG,
    WINDOW,
    assert_logits_equal_transformers,
    assert_logits_match_transformers,
    build_with_transformers,
    built_once,
    generation_tests,
    hf_greedy,
    hf_logits,
    memory_test,
    mistake_distance,
    parity_bound,
    parity_tests,
    prompt_ids,
    tiled_attention_calls,
)

import tinyinfer
import tinyinfer.model
from tinyinfer.families import config_from_hf
from tinyinfer.errors import TinyInferError

GEMMA2 = dict(num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=24, attn_logit_softcapping=8.0,
              final_logit_softcapping=5.0, sliding_window=WINDOW)

# Phi-3-128k's RoPE on a 32-token original context, 3 rotated pairs (head_dim 12 x 0.5)
ORIGINAL_CONTEXT = 32
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 2.1, 4.0],
            "long_factor": [1.5, 7.0, 20.0]}

# name -> (transformers config class, fields, stored dtype)
VARIANTS = {
    "phi3": ("Phi3Config", {"tie_word_embeddings": False}, "float32"),
    "phi3_partial_rotary_window_tied": ("Phi3Config", {"partial_rotary_factor": 0.5, "sliding_window": WINDOW,
                                                       "tie_word_embeddings": True, "num_key_value_heads": 1},
                                        "float32"),
    "phi3_longrope": ("Phi3Config", {"rope_parameters": LONGROPE, "original_max_position_embeddings": ORIGINAL_CONTEXT,
                                     "partial_rotary_factor": 0.5}, "float32"),
    "gemma": ("GemmaConfig", {"head_dim": 16, "hidden_act": "gelu"}, "float32"),  # "gelu": the tanh GELU
    "gemma_mha_bias": ("GemmaConfig", {"head_dim": 8, "num_key_value_heads": 4, "attention_bias": True}, "float32"),
    "gemma2": ("Gemma2Config", GEMMA2, "float32"),
    "gemma2_no_softcap_exact_gelu": ("Gemma2Config", {**GEMMA2, "attn_logit_softcapping": None,
                                                      "final_logit_softcapping": None, "hidden_activation": "gelu"},
                                     "float32"),
    "gemma2_bf16": ("Gemma2Config", GEMMA2, "bfloat16"),
}


def build(folder, config_class: str, fields: dict, dtype: str = "float32"):
    """TINY_CONFIG + `fields`, every parameter re-randomised; Gemma's gains (1 + weight) spread as the others'."""
    norm_offset = 1.0 if config_class.startswith("Gemma") else 0.0
    return build_with_transformers(folder, config_class, {**TINY_CONFIG, **fields}, dtype, norm_offset)


def build_variant(name: str, folder):
    """The checkpoint of VARIANTS[name], written to `folder`."""
    return build(folder, *VARIANTS[name])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(name) -> Path`, each variant built once for this module."""
    return built_once(tmp_path_factory.mktemp("architectures_more"), build_variant)


test_logits_match_transformers_at_every_position, test_cached_decode_equals_full_recompute = parity_tests(VARIANTS)

test_greedy_tokens_equal_transformers_generate, test_serving_engine_gives_the_greedy_tokens_of_generate = \
    generation_tests(["phi3_partial_rotary_window_tied", "gemma", "gemma2"])  # the engine: windows, soft caps

@pytest.mark.parametrize("name", ["phi3_partial_rotary_window_tied", "gemma2", "gemma2_no_softcap_exact_gelu"])
def test_tiled_prefill_matches_transformers(name, checkpoint, monkeypatch):
    """The long-prompt path (`tiled_attention`), forced on a 40-token prompt with 8-position tiles, so that key
    tiles before the window are skipped and the soft cap is applied tile by tile."""
    calls = tiled_attention_calls(monkeypatch)
    assert_logits_match_transformers(checkpoint(name), n=40)
    assert calls and {c["softcap"] for c in calls} == {VARIANTS[name][1].get("attn_logit_softcapping")}  # every layer


# Each switch undone (a Config change) must move the logits at least 10x the tolerance, or the variant would not
# catch a loader that forgot it.
MISTAKES = {
    "phi3_partial_rotary_window_tied": [{"partial_rotary_factor": 1.0},
                                        {"layer_types": ["full_attention"] * 2}],  # no window
    "gemma": [{"norm": "rmsnorm"},  # weight instead of 1 + weight
              {"embed_scale": 1.0},
              {"activation": "gelu"}],  # the exact GELU, as "gelu" would mean elsewhere
    "gemma2": [{"attn_softcap": None}, {"final_softcap": None},
               {"query_pre_attn_scalar": None},  # 1/sqrt(head_dim)
               {"layer_types": ["full_attention"] * 3},
               {"layer_types": ["full_attention", "sliding_attention", "full_attention"]}],  # the odd layers slide
    "gemma2_no_softcap_exact_gelu": [{"activation": "gelu_tanh"}],
}


@pytest.mark.parametrize("name, change", [(name, change) for name, changes in MISTAKES.items() for change in changes],
                         ids=lambda x: x if isinstance(x, str) else "-".join(x))
def test_each_switch_matters(name, change, checkpoint):
    assert mistake_distance(checkpoint(name), change) > CAUGHT * parity_bound(checkpoint(name), prompt_ids(24))


# A loader mistake each file layout invites, reproduced on the loaded parameters of one layer dict
SWAPS = {
    # Gemma 2's post_attention_layernorm normalises the attention's output (Llama's feeds the MLP)
    "gemma2": lambda layer: dict(layer, post_attn_norm=layer["mlp_norm"], mlp_norm=layer["post_attn_norm"]),
    # Phi-3's gate_up_proj holds the gate first, then up
    "phi3": lambda layer: dict(layer, mlp=dict(layer["mlp"], gate=layer["mlp"]["up"], up=layer["mlp"]["gate"])),
}


@pytest.mark.parametrize("name", SWAPS)
def test_tensors_read_under_the_wrong_names_move_the_logits_far(name, checkpoint):
    swapped = lambda params, cfg: dict(params, layers=[SWAPS[name](layer) for layer in params["layers"]])
    assert mistake_distance(checkpoint(name), {}, swapped) > CAUGHT * parity_bound(checkpoint(name), prompt_ids(24))


test_memory_arithmetic_counts_every_parameter = memory_test(VARIANTS)


def test_config_fields_are_read_as_transformers_reads_them(checkpoint):
    phi3 = tinyinfer.load(checkpoint("phi3_partial_rotary_window_tied")).config
    assert (phi3.rotary_dim, phi3.window_of(0), phi3.window_of(1), phi3.tie_word_embeddings) == (6, WINDOW, WINDOW,
                                                                                                 True)
    gemma = tinyinfer.load(checkpoint("gemma")).config
    assert (gemma.activation, gemma.head_dim, gemma.embed_scale, gemma.norm) == ("gelu_tanh", 16, 48**0.5,
                                                                                  "rmsnorm_plus_one")
    gemma2 = tinyinfer.load(checkpoint("gemma2")).config
    assert [gemma2.window_of(i) for i in range(3)] == [WINDOW, None, WINDOW]
    assert (gemma2.attention_scale(0), gemma2.attn_softcap, gemma2.final_softcap) == (24**-0.5, 8.0, 5.0)


SIZES = {"vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 96}


def test_phi3_longrope_holds_up_to_its_switch_and_refuses_beyond(checkpoint):
    """Up to original_max_position_embeddings transformers rotates with the short factors (checked by the tests
    above); one token more and it recomputes everything with the long ones, which tinyinfer refuses."""
    folder = checkpoint("phi3_longrope")
    model = tinyinfer.load(folder)
    ids = prompt_ids(ORIGINAL_CONTEXT + 1, seed=9)
    assert model.config.max_seq_len == ORIGINAL_CONTEXT
    assert_logits_equal_transformers(model, folder, ids[:-1])
    switched = hf_logits(folder, ids)[:-1]  # the same positions, now with the long factors
    assert np.abs(switched - hf_logits(folder, ids[:-1])).max() > CAUGHT * parity_bound(folder, ids[:-1])
    with pytest.raises(TinyInferError, match=f"beyond the context window of {ORIGINAL_CONTEXT} tokens .longrope runs "
                       "here in its short-sequence regime only"):
        model.logits(ids)
    with pytest.raises(TinyInferError, match="short-sequence regime only.*config.json allows"):  # before any work
        model.generate(ids[:8], max_tokens=ORIGINAL_CONTEXT)


@pytest.mark.parametrize("kind", ["su", "yarn"])
def test_phi3_old_longrope_names_read_as_longrope(kind):
    """transformers reads Phi-3's "su" and "yarn" as "longrope" (its Phi-3 knows no other YaRN)."""
    rope = {"type": kind, "short_factor": [1.0] * 6, "long_factor": [2.0] * 6}
    config = config_from_hf({"model_type": "phi3", **SIZES, "rope_scaling": rope, "max_position_embeddings": 4096,
                             "original_max_position_embeddings": 64})
    assert (config.rope_scaling["rope_type"], config.max_seq_len) == ("longrope", 64)
    assert config.rope_scaling["attention_factor"] == (1 + np.log(4096 / 64) / np.log(64)) ** 0.5


@pytest.mark.parametrize("rope, message", [
    ({"type": "linear", "factor": 2.0}, "rope scaling type 'linear' is not supported; Phi-3 models use default"),
    ({"type": "longrope", "short_factor": [1.0] * 5, "long_factor": [2.0] * 6}, "short_factor, a list of 6 numbers"),
    ({"type": "longrope", "short_factor": [1.0] * 6}, "long_factor, a list of 6 numbers"),
])
def test_phi3_rope_it_cannot_honour_is_refused_by_name(rope, message):
    with pytest.raises(TinyInferError, match=message):
        config_from_hf({"model_type": "phi3", **SIZES, "rope_scaling": rope})


@pytest.mark.parametrize("fields, message", [
    ({"model_type": "gemma", "use_bidirectional_attention": True}, "use_bidirectional_attention is not supported"),
    ({"model_type": "gemma2", "use_bidirectional_attention": True}, "use_bidirectional_attention is not supported"),
    ({"model_type": "gemma", "hidden_act": "gelu", "hidden_activation": "gelu"},  # tanh (transformers 5) or exact?
     "hidden_act='gelu_pytorch_tanh' and hidden_activation='gelu' disagree"),
    ({"model_type": "gemma2", "hidden_act": "silu"},
     "hidden_activation='gelu_pytorch_tanh' and hidden_act='silu' disagree"),
    ({"model_type": "gemma2", "sliding_window": None}, "sliding_window is null"),
])
def test_gemma_options_tinyinfer_cannot_honour_are_refused_by_name(fields, message):
    with pytest.raises(TinyInferError, match=message):
        config_from_hf({**SIZES, "head_dim": 12, **fields})


def test_real_config_files_read(tmp_path):
    """The fields Phi-3-mini-4k, Gemma-2B and Gemma-2-2B config.json files carry (sizes shrunk): their switches."""
    phi3 = config_from_hf({**SIZES, "model_type": "phi3", "rope_scaling": None, "sliding_window": 2047,
                           "original_max_position_embeddings": 4096, "resid_pdrop": 0.0, "embd_pdrop": 0.0})
    gemma = config_from_hf({**SIZES, "model_type": "gemma", "head_dim": 256, "hidden_act": "gelu",
                            "hidden_activation": "gelu_pytorch_tanh"})
    gemma2 = config_from_hf({**SIZES, "model_type": "gemma2", "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
                             "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
                             "cache_implementation": "hybrid", "sliding_window": 4096})
    assert (phi3.window_of(0), phi3.rotary_dim) == (2047, 12)
    assert (gemma.activation, gemma.window_of(0)) == ("gelu_tanh", None)
    assert (gemma2.window_of(0), gemma2.window_of(1), gemma2.attn_softcap, gemma2.final_softcap) == (4096, None, 50.0,
                                                                                                      30.0)
    (tmp_path / "config.json").write_text(json.dumps({**SIZES, "model_type": "gemma2", "head_dim": 256}))
    theirs = transformers.AutoConfig.from_pretrained(tmp_path)
    assert gemma2.layer_types == theirs.layer_types


def test_phi3_with_the_real_phi3_mini_tokenizer(tmp_path):
    """A text prompt end to end: Phi-3-mini's tokenizer (32,011 ids) over a tiny Phi-3 of the real vocabulary size
    (32,064: the output layer has padding rows), greedy tokens equal to transformers' generate on the same ids."""
    tokenizer = shared_data("tokenizers/phi-3-mini/tokenizer.json")
    folder = build(tmp_path / "phi3", "Phi3Config", {"vocab_size": 32064, "sliding_window": WINDOW})
    model = tinyinfer.load(folder, tokenizer=tokenizer)
    text = "The capital of France is"
    ids = model.tokenizer.encode(text)
    assert ids == tokenizers.Tokenizer.from_file(str(tokenizer)).encode(text).ids
    result = model.generate(text, max_tokens=16, temperature=0.0, ignore_eos=True)
    assert list(result.token_ids) == hf_greedy(folder, ids, 16)
