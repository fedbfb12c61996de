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
the parameter count from the config.

The Hub's files store the experts in MXFP4 (families/gpt_oss.py): `mxfp4_folder` writes a tiny checkpoint that way,
quantised by `mxfp4_encode` (the OCP MX recipe). Checked: the decoding equals transformers' bit for bit on every
byte and exponent (and is not GGUF's nibble order); the loaded experts equal the ones transformers dequantises
(Mxfp4Config(dequantize=True)) exactly, the logits within the float32 bound; the experts are dequantised one at a
time (tracemalloc's peak); a wrong block layout is refused naming the tensor; `generate` runs on the folder from the
command line.
"""

from __future__ import annotations

import json
import shutil
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers
from tiny_models import (
    TINY_CONFIG,
    WINDOW,
    assert_logits_match_transformers,
    build_with_transformers,
    built_once,
    generation_tests,
    make_tiny_models,
    memory_test,
    mistake_test,
    parity_tests,
    prompt_ids,
    tiled_attention_calls,
)
from tolerances import assert_close, logits_bound
from transformers.integrations.mxfp4 import FP4_VALUES, convert_moe_packed_tensors
from transformers.models.gpt_oss import modeling_gpt_oss as hf

import tinyinfer
import tinyinfer.model
from tinyinfer.attention import attention, causal_mask, decode_attention, decode_mask
from tinyinfer.cli import main
from tinyinfer.errors import TinyInferError
from tinyinfer.families import config_from_hf, load_hf_config
from tinyinfer.families.gpt_oss import expert_weights, hub_mxfp4_rows, mlp
from tinyinfer.flash_attention import tiled_attention
from tinyinfer.gguf.quants import dequantize_mxfp4
from tinyinfer.moe import route_topk_softmax
from tinyinfer.safetensors_io import Checkpoint
from tinyinfer.weights import tensor_getter

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


def test_mxfp4_is_read_for_gpt_oss_only_and_other_methods_stay_refused():
    hub = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    assert config_from_hf({"model_type": "gpt_oss", **GPT_OSS, "quantization_config": hub}).n_experts == 4
    llama = {"model_type": "llama", **TINY_CONFIG}
    with pytest.raises(TinyInferError, match=r"'mxfp4' are not supported by llama \(supported: .*mxfp4 \(gpt_oss\)"):
        config_from_hf({**llama, "quantization_config": hub})
    with pytest.raises(TinyInferError, match=r"'gptq' are not supported by gpt_oss .*use an fp32, fp16 or bf16"):
        config_from_hf({"model_type": "gpt_oss", **GPT_OSS, "quantization_config": {"quant_method": "gptq"}})


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


# -- the Hub's MXFP4 files ---------------------------------------------------------------------------------------

MXFP4_FIELDS = dict(GPT_OSS, hidden_size=64, intermediate_size=32)  # rows of 64 and 32: whole blocks of 32 weights
HUB_QUANTIZATION = {"quant_method": "mxfp4", "modules_to_not_convert": [  # openai/gpt-oss-20b's config.json
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
FP4_MAGNITUDES = np.array(FP4_VALUES[:8], dtype=np.float32)  # 0, 0.5, 1, 1.5, 2, 3, 4, 6: codes 0..7; 8 + m is -m's


def mxfp4_encode(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """w [E, in, out] in MXFP4 as the Hub's files store it: each row of w.T [out, in] in blocks of 32 under the
    OCP MX spec's shared exponent, floor(log2(max |w|)) - 2 (the block's largest weight lands in [4, 8), clamped
    to 6), every weight the nearest FP4 value (sign bit 8), two codes to a byte, the even weight's in the low nibble.
    -> blocks [E, out, in/32, 16], scales [E, out, in/32] (E8M0: the exponent + 127), both uint8"""
    E, n, R = w.shape
    x = np.swapaxes(w, 1, 2).reshape(E, R, n // 32, 32)  # [E, in, out] -> [E, out, in] -> [E, out, G, 32]
    exponent = np.floor(np.log2(np.abs(x).max(axis=-1))) - 2  # [E, out, G]
    y = x / np.exp2(exponent)[..., None]  # [E, out, G, 32], |y| < 8
    codes = np.abs(np.abs(y)[..., None] - FP4_MAGNITUDES).argmin(axis=-1) | np.signbit(y) << 3  # [E, out, G, 32]
    blocks = codes[..., 0::2] | codes[..., 1::2] << 4  # [E, out, G, 16]
    # contiguous: safetensors.numpy.save_file writes an array's memory, whatever its strides
    return np.ascontiguousarray(blocks, dtype=np.uint8), np.ascontiguousarray(exponent + 127, dtype=np.uint8)


def write_mxfp4_experts(folder):
    """`folder`'s experts' weights (gate_up_proj, down_proj) replaced by their MXFP4 blocks and scales, and config.json
    given the Hub's quantization_config."""
    path = folder / "model.safetensors"
    tensors = safetensors.numpy.load_file(path)
    for name in [name for name in tensors if name.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        tensors[f"{name}_blocks"], tensors[f"{name}_scales"] = mxfp4_encode(tensors.pop(name))
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": HUB_QUANTIZATION}))


@pytest.fixture(scope="module")
def mxfp4_folder(tmp_path_factory):
    """A tiny gpt-oss checkpoint whose experts are stored in MXFP4, as the Hub's files store them, with a tokenizer."""
    folder = build_with_transformers(tmp_path_factory.mktemp("mxfp4") / "gpt_oss_mxfp4", "GptOssConfig",
                                     MXFP4_FIELDS, wide_params=SINKS)
    write_mxfp4_experts(folder)
    make_tiny_models.make_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def hf_mxfp4_model(folder):
    """transformers' model of an MXFP4 folder, dequantised to float32 (its CPU path), eager attention."""
    return transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager",
        quantization_config=transformers.Mxfp4Config(dequantize=True)).eval()


def test_hub_mxfp4_rows_equal_transformers_dequantisation_bit_for_bit():
    """Every byte value in every position, under exponents from 2^-127 (subnormal) to 2^125 (the largest whose
    products stay finite in float32): equal to transformers' convert_moe_packed_tensors, which also lays the rows
    out [in, out]; GGUF's order read into the same bytes (weights i and i + 16 in byte i) gives other numbers."""
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, size=(2, 48, 3, 16), dtype=np.uint8)  # [E, out, G, 16]
    blocks[0, :16, 0] = np.arange(256, dtype=np.uint8).reshape(16, 16)
    scales = rng.integers(0, 253, size=(2, 48, 3), dtype=np.uint8)  # [E, out, G]
    scales[0, :5, 0] = [0, 1, 126, 127, 252]
    theirs = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32)
    for e in range(2):
        ours = hub_mxfp4_rows(blocks[e], scales[e]).T  # [out, 96] -> [96, out]
        assert ours.dtype == np.float32 and np.array_equal(ours, theirs[e].numpy())
    ggml_order = dequantize_mxfp4(np.concatenate([scales[0].reshape(-1, 1), blocks[0].reshape(-1, 16)], axis=1))
    assert not np.array_equal(ggml_order.reshape(48, 96).T, theirs[0].numpy())


def test_hub_mxfp4_files_load_as_transformers_dequantises_them(mxfp4_folder):
    """The file holds no float expert weights; tinyinfer's experts are the ones transformers dequantises, to the
    bit, and its logits at every position are transformers' within the float32 rounding bound."""
    stored = Checkpoint(mxfp4_folder)
    assert not any(name.endswith(("gate_up_proj", "down_proj")) for name in stored.names())
    assert stored.dtype("model.layers.0.mlp.experts.gate_up_proj_blocks") == "U8"
    theirs, model = hf_mxfp4_model(mxfp4_folder), tinyinfer.load(mxfp4_folder)
    for i, layer in enumerate(model.params["layers"]):
        experts = theirs.model.layers[i].mlp.experts
        gate_up = experts.gate_up_proj.detach().numpy()  # [E, d, 2 ff]
        down = experts.down_proj.detach().numpy()  # [E, ff, d]
        for e, expert in enumerate(layer["mlp"]["experts"]):
            assert np.array_equal(expert["gate"], gate_up[e][:, 0::2])
            assert np.array_equal(expert["up"], gate_up[e][:, 1::2])
            assert np.array_equal(expert["down"], down[e])
    ids = prompt_ids(24)
    with torch.no_grad():
        expected = theirs(torch.tensor([ids])).logits[0].numpy()  # [T, V]
    assert_close(model.logits(ids), expected, logits_bound(model.config, expected))


def _write_blocks(folder, name: str, array: np.ndarray) -> None:
    path = folder / "model.safetensors"
    tensors = safetensors.numpy.load_file(path)
    tensors[name] = np.ascontiguousarray(array)
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})


@pytest.mark.parametrize("damage, found", [
    # down_proj's blocks cut along its output instead of its input: the same bytes in [E, in, out/32, 16]
    (lambda a: a.reshape(4, 32, 2, 16), "U8 [4, 32, 2, 16]"),
    (lambda a: a.reshape(4, 64, 2, 8), "U8 [4, 64, 2, 8]"),  # blocks of 8 bytes: 16 weights
    (lambda a: a.astype(np.float32), "F32 [4, 64, 1, 16]"),  # codes widened to numbers
])
def test_a_wrong_mxfp4_block_layout_is_refused_naming_the_tensor(mxfp4_folder, tmp_path, capsys, damage, found):
    folder = shutil.copytree(mxfp4_folder, tmp_path / "damaged")
    name = "model.layers.1.mlp.experts.down_proj_blocks"
    _write_blocks(folder, name, damage(Checkpoint(mxfp4_folder).raw(name)))
    words = (repr(name), f"is {found}, expected U8 [4, 64, 1, 16]", "MXFP4", "re-download")
    with pytest.raises(TinyInferError) as info:
        tinyinfer.load(folder)
    assert all(word in str(info.value) for word in words), str(info.value)
    assert main(["generate", "--model", str(folder), "hi"]) == 1
    assert capsys.readouterr().err.strip() == f"error: {info.value}"  # one line, no traceback


def test_mxfp4_rows_must_be_whole_blocks(tmp_path):
    """A config.json whose rows (hidden_size 48) are not whole blocks of 32 weights is refused by name."""
    safetensors.numpy.save_file({"x_blocks": np.zeros((1, 16, 2, 16), np.uint8)}, tmp_path / "model.safetensors")
    with pytest.raises(TinyInferError, match=r"x_blocks: MXFP4 stores rows in blocks of 32 weights, but config.json "
                                             r"gives its rows 48"):
        expert_weights(tensor_getter(Checkpoint(tmp_path), np.float32), "x", 1, 48, 16)


def test_mxfp4_experts_are_dequantised_one_at_a_time(tmp_path):
    """Loading a layer of 16 MXFP4 experts allocates, beyond the float32 experts it returns, less than 4 experts'
    worth of float32 (one expert's temporaries): never the whole layer's dequantised tensor at once."""
    E, d, ff, rng = 16, 128, 128, np.random.default_rng(0)
    p = "model.layers.0.mlp"
    tensors = {f"{p}.router.weight": np.zeros((E, d), np.float32), f"{p}.router.bias": np.zeros(E, np.float32),
               f"{p}.experts.gate_up_proj_bias": np.zeros((E, 2 * ff), np.float32),
               f"{p}.experts.down_proj_bias": np.zeros((E, d), np.float32)}
    for name, rows, cols in (("gate_up_proj", 2 * ff, d), ("down_proj", d, ff)):
        tensors[f"{p}.experts.{name}_blocks"] = rng.integers(0, 256, (E, rows, cols // 32, 16), dtype=np.uint8)
        tensors[f"{p}.experts.{name}_scales"] = rng.integers(120, 130, (E, rows, cols // 32), dtype=np.uint8)
    safetensors.numpy.save_file(tensors, tmp_path / "model.safetensors")
    get, cfg = tensor_getter(Checkpoint(tmp_path), np.float32), SimpleNamespace(d_model=d, n_experts=E, moe_d_ff=ff)
    tracemalloc.start()
    layer = mlp(get, cfg, 0)
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    one_expert = 3 * d * ff * 4  # bytes of gate, up and down in float32
    assert kept >= E * one_expert and len(layer["experts"]) == E
    assert peak - kept < 4 * one_expert, (peak - kept) / one_expert


def test_generate_runs_on_hub_mxfp4_files_from_the_command_line(mxfp4_folder, capsys):
    """`python -m tinyinfer generate --model <folder>` prints the greedy text the API gives on the same folder."""
    prompt = "Once upon a time"
    assert main(["generate", "--model", str(mxfp4_folder), prompt, "--max-tokens", "8", "--ignore-eos"]) == 0
    printed = capsys.readouterr().out
    result = tinyinfer.load(mxfp4_folder).generate(prompt, max_tokens=8, ignore_eos=True)
    assert len(result.token_ids) == 8 and printed == result.text + "\n"
