"""Qwen2: a Llama that always biases q, k and v (never o), with `use_sliding_window` a window on the layers from
`max_window_layers` on (or those an explicit `layer_types` names)."""

from __future__ import annotations

from tinyinfer.families.common import switched_window_from
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config

QWEN_WINDOW = dict(use_sliding_window=False, sliding_window=4096, max_window_layers=28)  # Qwen's config classes
DEFAULTS = dict(LLAMA_LIKE | QWEN_WINDOW, max_position_embeddings=32768, num_key_value_heads=32)
WINDOW_FROM_MAX_WINDOW_LAYERS = switched_window_from(lambda i, first: i >= first)


def read_config(c: dict) -> dict:
    return read_body(c, (True, False, False), WINDOW_FROM_MAX_WINDOW_LAYERS)


def gguf_config(m, names: set) -> dict:
    return llama_like_config(m, names, "qwen2") | {"use_sliding_window": False}


FAMILY = Family("qwen2", DEFAULTS, read_config, load_body, gguf=GGUFLayout("qwen2", gguf_config, LLAMA_TENSORS))
