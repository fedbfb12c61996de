"""OLMoE: a Mixture-of-Experts (tinyinfer/families/mixtral.py) whose q and k each pass one RMSNorm spanning the
whole projection (all heads), before RoPE."""

from __future__ import annotations

from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import ATTENTION_BIASES, no_window
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE
from tinyinfer.families.mixtral import load_moe_params, read_moe

DEFAULTS = dict(LLAMA_LIKE, max_position_embeddings=4096, rms_norm_eps=1e-5, attention_bias=False,
                norm_topk_prob=False, clip_qkv=None)


def read_config(c: dict) -> dict:
    if c.get("clip_qkv") is not None:
        raise TinyInferError(f"config.json (olmoe): clip_qkv={c['clip_qkv']} is not supported; only clip_qkv null is")
    return read_moe(c, ATTENTION_BIASES, no_window, moe_d_ff=c["intermediate_size"],
                    norm_topk_prob=c["norm_topk_prob"], qk_norm=True, qk_norm_span="full")


FAMILY = Family("olmoe", DEFAULTS, read_config, load_moe_params)
