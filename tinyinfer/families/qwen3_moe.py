"""Qwen3-MoE: Qwen2-MoE's routing without a shared expert, Qwen3's q/k norm per head and `attention_bias`, and
with `use_sliding_window` a window on every layer."""

from __future__ import annotations

from tinyinfer.families.common import ATTENTION_BIASES, switched_window_on_every_layer
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE
from tinyinfer.families.mixtral import load_moe_params, read_moe
from tinyinfer.families.qwen2_moe import moe_layers
from tinyinfer.gguf.architectures import EXPERT_TENSORS, LLAMA_TENSORS, GGUFLayout, expert_config, llama_like_config

DEFAULTS = dict(LLAMA_LIKE, max_position_embeddings=32768, num_key_value_heads=4, attention_bias=False,
                use_sliding_window=False, sliding_window=4096, norm_topk_prob=False, decoder_sparse_step=1,
                mlp_only_layers=None)


def read_config(c: dict) -> dict:
    return read_moe(c, ATTENTION_BIASES, switched_window_on_every_layer, qk_norm=True,
                    moe_d_ff=c["moe_intermediate_size"], norm_topk_prob=c["norm_topk_prob"],
                    shared_expert_d_ff=c.get("shared_expert_intermediate_size") or 0, moe_layers=moe_layers(c))


def gguf_config(m, names: set) -> dict:
    """llama.cpp always renormalises Qwen3-MoE's chosen experts' weights (norm_topk_prob), as the models do."""
    return llama_like_config(m, names, "qwen3_moe") | expert_config(m) | {"norm_topk_prob": True, "mlp_only_layers": []}


FAMILY = Family("qwen3_moe", DEFAULTS, read_config, load_moe_params,
                gguf=GGUFLayout("qwen3moe", gguf_config, LLAMA_TENSORS | EXPERT_TENSORS, experts=True))
