"""Qwen3-MoE: Qwen2-MoE's routing without a shared expert, Qwen3's q/k norm per head and `attention_bias`, and
with `use_sliding_window` a window on every layer."""

from __future__ import annotations

from tinyinfer.families.common import ATTENTION_BIASES, switched_window_on_every_layer
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE
from tinyinfer.families.mixtral import load_moe_params, read_moe
from tinyinfer.families.qwen2_moe import moe_layers

DEFAULTS = dict(LLAMA_LIKE, max_position_embeddings=32768, num_key_value_heads=4, attention_bias=False,
                use_sliding_window=False, sliding_window=4096, norm_topk_prob=False, decoder_sparse_step=1,
                mlp_only_layers=None)


def read_config(c: dict) -> dict:
    return read_moe(c, ATTENTION_BIASES, switched_window_on_every_layer, qk_norm=True,
                    moe_d_ff=c["moe_intermediate_size"], norm_topk_prob=c["norm_topk_prob"],
                    shared_expert_d_ff=c.get("shared_expert_intermediate_size") or 0, moe_layers=moe_layers(c))


FAMILY = Family("qwen3_moe", DEFAULTS, read_config, load_moe_params)
