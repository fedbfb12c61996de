"""Qwen3: Qwen2's window rule, `attention_bias` on q, k, v and o, and an RMSNorm over each head of q and k (one
gain for all heads) before RoPE."""

from __future__ import annotations

from tinyinfer.families.common import ATTENTION_BIASES
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.families.qwen2 import QWEN_WINDOW, WINDOW_FROM_MAX_WINDOW_LAYERS
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config

DEFAULTS = dict(LLAMA_LIKE | QWEN_WINDOW, max_position_embeddings=32768, num_key_value_heads=32, head_dim=128,
                attention_bias=False)


def read_config(c: dict) -> dict:
    return read_body(c, ATTENTION_BIASES, WINDOW_FROM_MAX_WINDOW_LAYERS, qk_norm=True)


def gguf_config(m, names: set) -> dict:
    return llama_like_config(m, names, "qwen3") | {"use_sliding_window": False}


FAMILY = Family("qwen3", DEFAULTS, read_config, load_body, gguf=GGUFLayout("qwen3", gguf_config, LLAMA_TENSORS))
