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
(The Hub's original files hold the experts in MXFP4 instead: refused, with the conversion to use.)
"""

from __future__ import annotations

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import ATTENTION_BIASES, check_window, every_but_the_nth, expert_count
from tinyinfer.families.family import Family
from tinyinfer.families.llama import attention as llama_attention
from tinyinfer.families.llama import load_body, read_body
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
    """Layer i's router and experts, the interleaved gate/up columns split apart: gate the even ones, up the odd."""
    p, d, E, ff = f"model.layers.{i}.mlp", cfg.d_model, cfg.n_experts, cfg.moe_d_ff
    gate_up = get(f"{p}.experts.gate_up_proj", (E, d, 2 * ff))  # [E, d, 2 ff], already [in, out]
    gate_up_bias = get(f"{p}.experts.gate_up_proj_bias", (E, 2 * ff))  # [E, 2 ff]
    down, down_bias = get(f"{p}.experts.down_proj", (E, ff, d)), get(f"{p}.experts.down_proj_bias", (E, d))
    experts = [{"gate": np.ascontiguousarray(gate_up[e, :, 0::2]), "up": np.ascontiguousarray(gate_up[e, :, 1::2]),
                "down": down[e], "gate_bias": gate_up_bias[e, 0::2], "up_bias": gate_up_bias[e, 1::2],
                "down_bias": down_bias[e]} for e in range(E)]  # [d, ff], [d, ff], [ff, d], [ff], [ff], [d]
    return {"router": linear(get, f"{p}.router.weight", d, E), "router_bias": get(f"{p}.router.bias", (E,)),
            "experts": experts}


def load_params(get: Getter, cfg: Config) -> dict:
    return load_body(get, cfg, mlp, attention)


FAMILY = Family("gpt_oss", DEFAULTS, read_config, load_params)
