"""gpt-oss (OpenAI's 20b and 120b): a Llama body whose every attention head has a learned sink logit
(tinyinfer/attention.py), biases on q, k, v and o (`attention_bias`), a window on the layers `layer_types` names
(by default the even ones, 0, 2, 4...), YaRN RoPE (by default factor 32 over 4096 positions, theta 150000), and in
every layer a Mixture-of-Experts (tinyinfer/moe.py): a router with a bias whose top-k logits are softmaxed among
themselves, experts `intermediate_size` wide with biases, their SwiGLU clamped by `swiglu_limit` and sharpened by
`swiglu_alpha`. `hidden_act` is not read (transformers' experts ignore it).

Tensors: a Llama attention with biases and one sink logit per head (self_attn.sinks [H]); in every layer a router
with a bias (mlp.router.weight [E, d], .bias [E]) and all experts of a layer fused, stored [in, out]:
    mlp.experts.gate_up_proj [E, d, 2*ff]: gate and up columns interleaved (gate, up, gate, up, ...), and its
    bias [E, 2*ff] the same way;  mlp.experts.down_proj [E, ff, d], its bias [E, d]
The Hub's original files (openai/gpt-oss-20b, -120b; config.json's quantization_config {"quant_method": "mxfp4"})
store those two weights in MXFP4, as transformers reads them: for each, [out, in] rows in blocks of 32 weights,
    mlp.experts.gate_up_proj_blocks [E, 2*ff, d/32, 16] (uint8: 32 FP4 E2M1 codes, two to a byte, low nibble first)
    mlp.experts.gate_up_proj_scales [E, 2*ff, d/32]     (uint8: the block's E8M0 exponent, w = fp4[q] * 2^(e - 127))
and down_proj_blocks [E, d, ff/32, 16], down_proj_scales [E, d, ff/32]; everything else in bf16. tinyinfer
dequantises them to float32 at load, one expert at a time (`expert_weights`): exactly, since every FP4 value
times a power of two is a float32 (MXFP4 is 4.25 bits a weight: gpt-oss-20b is 13 GB on disk, 84 GB in float32).

GGUF (llama.cpp's "gpt-oss"): the converter (conversion/gpt_oss.py GptOssModel) splits the fused experts: the even
columns of gate_up_proj become ffn_gate_exps [E, ff, d], the odd ones ffn_up_exps, down_proj is stored transposed
as ffn_down_exps [E, d, ff], each with its bias (ffn_gate_exps.bias [E, ff], ...); the Hub's MXFP4 blocks are
repacked as GGUF's MXFP4 rather than dequantised. So a GGUF file's experts arrive one by one, [out, in] and gate
apart from up, as Mixtral's do (`split_expert`). The sinks are attn_sinks.weight, the router ffn_gate_inp.
llama.cpp runs every file with the releases' clamp (alpha 1.702, limit 7) and, without
attention.sliding_window_pattern, the window on the even layers; `gguf_config` says what else it reads.

    >>> blocks = np.array([[[0x21] + [0] * 15]], dtype=np.uint8)  # byte 0: weight 0 is code 1, weight 1 code 2
    >>> hub_mxfp4_rows(blocks, np.array([[128]], dtype=np.uint8))[0, :3].tolist()  # fp4 0.5, 1.0, 0.0 times 2
    [1.0, 2.0, 0.0]
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import ATTENTION_BIASES, check_window, every_but_the_nth, expert_count
from tinyinfer.families.family import Family
from tinyinfer.families.llama import attention as llama_attention
from tinyinfer.families.llama import load_body, read_body
from tinyinfer.gguf.architectures import (
    LLAMA_LAYER,
    LLAMA_TOP,
    GGUFLayout,
    Metadata,
    expert_config,
    llama_like_config,
    named,
    sliding_layer_types,
)
from tinyinfer.gguf.quants import dequantize_mxfp4, type_by_name
from tinyinfer.weights import Getter, linear

# rope_parameters: GPT_OSS_ROPE
DEFAULTS = dict(max_position_embeddings=131072, rms_norm_eps=1e-5, hidden_act="silu", rope_theta=150000.0,
                tie_word_embeddings=False, head_dim=64, num_key_value_heads=8, sliding_window=128, layer_types=None,
                attention_bias=True, num_local_experts=128, num_experts_per_tok=4, swiglu_alpha=1.702,
                swiglu_limit=7.0)
GPT_OSS_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 4096}  # GptOssConfig's rope_parameters when the file has none


def read_config(c: dict) -> dict:
    if c["swiglu_limit"] is None:  # GptOssExperts clamps by it whatever it is (and fails on None)
        raise TinyInferError("config.json (gpt_oss): swiglu_limit=null is not supported: the experts clamp their gate "
                             "and up projections by it; give the number (7.0 in the gpt-oss releases)")
    params = c.get("rope_scaling") or c.get("rope_parameters") or GPT_OSS_ROPE  # GptOssConfig's default
    fields = read_body({**c, "rope_parameters": params, "rope_scaling": None, "hidden_act": "silu"},
                       ATTENTION_BIASES, every_but_the_nth(2, configurable=False))
    return dict(check_window(c, fields), n_experts=expert_count(c), n_experts_per_tok=c["num_experts_per_tok"],
                moe_d_ff=c["intermediate_size"], router="topk_softmax", expert_bias=True, attention_sinks=True,
                swiglu_limit=c["swiglu_limit"], swiglu_alpha=c["swiglu_alpha"])


def attention(get: Getter, cfg: Config, p: str) -> dict:
    return dict(llama_attention(get, cfg, p), sinks=get(f"{p}.sinks", (cfg.n_heads,)))


def mlp(get: Getter, cfg: Config, i: int) -> dict:
    """Layer i's router and experts, the interleaved gate/up columns split apart: gate the even ones, up the odd
    (or, from a GGUF file, each expert's gate, up and down apart: `split_expert`)."""
    p, d, E, ff = f"model.layers.{i}.mlp", cfg.d_model, cfg.n_experts, cfg.moe_d_ff
    router = {"router": linear(get, f"{p}.router.weight", d, E), "router_bias": get(f"{p}.router.bias", (E,))}
    if get.has(f"{p}.experts.0.gate_proj.weight"):
        return router | {"experts": [split_expert(get, f"{p}.experts.{e}", d, ff) for e in range(E)]}
    gate_up = expert_weights(get, f"{p}.experts.gate_up_proj", E, d, 2 * ff)  # e -> [d, 2 ff]
    down = expert_weights(get, f"{p}.experts.down_proj", E, ff, d)  # e -> [ff, d]
    gate_up_bias = get(f"{p}.experts.gate_up_proj_bias", (E, 2 * ff))  # [E, 2 ff]
    down_bias = get(f"{p}.experts.down_proj_bias", (E, d))  # [E, d]
    return router | {"experts": [expert(gate_up(e), gate_up_bias[e], down(e), down_bias[e]) for e in range(E)]}


def expert(gate_up: np.ndarray, gate_up_bias: np.ndarray, down: np.ndarray, down_bias: np.ndarray) -> dict:
    """One expert's parameters: gate_up [d, 2 ff] and its bias [2 ff] split into even and odd columns,
    -> gate, up [d, ff], down [ff, d], gate_bias, up_bias [ff], down_bias [d]."""
    return {"gate": np.ascontiguousarray(gate_up[:, 0::2]), "up": np.ascontiguousarray(gate_up[:, 1::2]),
            "down": down, "gate_bias": gate_up_bias[0::2], "up_bias": gate_up_bias[1::2], "down_bias": down_bias}


def split_expert(get: Getter, p: str, d: int, ff: int) -> dict:
    """One expert stored apart as nn.Linear layers (`p`.gate_proj, .up_proj [ff, d], .down_proj [d, ff], with
    biases): the parameters `expert` gives."""
    return {"gate": linear(get, f"{p}.gate_proj.weight", d, ff), "up": linear(get, f"{p}.up_proj.weight", d, ff),
            "down": linear(get, f"{p}.down_proj.weight", ff, d), "gate_bias": get(f"{p}.gate_proj.bias", (ff,)),
            "up_bias": get(f"{p}.up_proj.bias", (ff,)), "down_bias": get(f"{p}.down_proj.bias", (d,))}


MXFP4_BLOCK = type_by_name("MXFP4")[1]  # weights per block: 32


def expert_weights(get: Getter, name: str, E: int, d_in: int, d_out: int) -> Callable[[int], np.ndarray]:
    """`weight(e)`: expert e's [d_in, d_out] of the fused weight `name`, stored [E, d_in, d_out] in floats, or in
    MXFP4 as `name`_blocks and `name`_scales (rows [out, in]: module docstring), dequantised when asked for."""
    if not get.has(f"{name}_blocks"):
        stacked = get(name, (E, d_in, d_out))  # [E, d_in, d_out]
        return lambda e: stacked[e]
    if d_in % MXFP4_BLOCK:
        raise TinyInferError(f"{name}_blocks: MXFP4 stores rows in blocks of {MXFP4_BLOCK} weights, but config.json "
                             f"gives its rows {d_in}; the file does not match its config.json")
    G, B = d_in // MXFP4_BLOCK, MXFP4_BLOCK // 2  # blocks a row, bytes a block (two codes to a byte)
    layout = f"MXFP4: [experts, out, in/{MXFP4_BLOCK}] blocks of {B} bytes, one exponent byte each"
    blocks = get.codes(f"{name}_blocks", (E, d_out, G, B), layout)  # [E, d_out, G, 16], a view of the file
    scales = get.codes(f"{name}_scales", (E, d_out, G), layout)  # [E, d_out, G]
    return lambda e: hub_mxfp4_rows(blocks[e], scales[e]).T.astype(get.dtype, copy=False)  # -> [d_in, d_out]


def hub_mxfp4_rows(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Rows of weights from the Hub's MXFP4. Its codes and exponents mean what those of GGUF's MXFP4 blocks do,
    w = fp4[q] * 2^(e - 127); only the order of the nibbles differs: byte i of a Hub block holds weights 2i (low
    nibble) and 2i + 1 (high), byte i of a ggml block weights i and i + 16. So the codes are repacked into GGUF's
    blocks, {u8 e; u8 qs[16]}, and decoded by gguf.quants' `dequantize_mxfp4`.
    blocks [R, G, 16], scales [R, G] (uint8) -> [R, 32 G] (float32)"""
    R, G, _ = blocks.shape
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(R * G, 32)  # [R, G, 16, 2] -> [R G, 32]
    ggml = np.concatenate([scales.reshape(R * G, 1), codes[:, :16] | codes[:, 16:] << 4], axis=1)  # [R G, 1 + 16]
    return dequantize_mxfp4(ggml).reshape(R, G * MXFP4_BLOCK)  # [R G, 32] -> [R, 32 G]


def load_params(get: Getter, cfg: Config) -> dict:
    return load_body(get, cfg, mlp, attention)


# -- GGUF ------------------------------------------------------------------------------------------------------

SWIGLU = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}  # llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constants


def gguf_config(m: Metadata, names: set) -> dict:
    """A gpt-oss file's config.json: Llama's fields, the experts (expert_feed_forward_length wide), the window
    and the layers it slides on (`sliding_layer_types`, period 2), the attention biases where the file has
    them, llama.cpp's clamp constants, and plain RoPE or YaRN (`yarn_scaling`) with the ramp's ends kept
    fractional ("truncate": false) as in every gpt-oss release: the converter drops the flag (llama.cpp's ggml
    rounds them outwards). One RoPE base for all layers and RoPE on whole heads, or the file is refused."""
    c = llama_like_config(m, names, "gpt_oss", yarn=True)
    if m.get("rope.freq_base_swa", c["rope_theta"]) != c["rope_theta"]:
        raise TinyInferError(f"{m.path}: rope.freq_base_swa {m['rope.freq_base_swa']} differs from rope.freq_base "
                             f"{c['rope_theta']}: gpt-oss runs with one RoPE base for its sliding and full layers")
    if m.get("rope.dimension_count", c["head_dim"]) != c["head_dim"]:
        raise TinyInferError(f"{m.path}: RoPE on {m['rope.dimension_count']} of {c['head_dim']} coordinates per head "
                             "(rope.dimension_count) is not supported for gpt-oss; only whole heads rotate")
    rope = c.get("rope_scaling") or {"rope_type": "default"}  # GptOssConfig's default is YaRN: say plain RoPE
    if rope["rope_type"] == "yarn":
        rope |= {"truncate": False}
    n, experts = c["num_hidden_layers"], expert_config(m)
    return c | SWIGLU | {
        "num_local_experts": experts["num_experts"], "num_experts_per_tok": experts["num_experts_per_tok"],
        "intermediate_size": m["expert_feed_forward_length"], "sliding_window": m["attention.sliding_window"],
        "layer_types": sliding_layer_types(m, n, 2), "attention_bias": "blk.0.attn_q.bias" in names,
        "rope_scaling": rope | {"rope_theta": c["rope_theta"]}}


GGUF_TENSORS = named(LLAMA_TOP, {name: LLAMA_LAYER[name] for name in ("attn_norm", "attn_q", "attn_k", "attn_v",
                                                                       "attn_output")} | {
    "attn_sinks.weight": "self_attn.sinks", "post_attention_norm": "post_attention_layernorm",
    "ffn_gate_inp": "mlp.router", "ffn_gate_exps": "mlp.experts.{e}.gate_proj",
    "ffn_up_exps": "mlp.experts.{e}.up_proj", "ffn_down_exps": "mlp.experts.{e}.down_proj"})

FAMILY = Family("gpt_oss", DEFAULTS, read_config, load_params, quantizations=("mxfp4",),
                gguf=GGUFLayout("gpt-oss", gguf_config, GGUF_TENSORS, experts=True))
