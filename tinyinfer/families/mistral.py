"""Mistral: a Llama without biases whose every layer attends through a window when `sliding_window` is set."""

from __future__ import annotations

from tinyinfer.families.common import NO_BIASES, window_on_every_layer
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config, llama_relayout

DEFAULTS = dict(LLAMA_LIKE, max_position_embeddings=131072, num_key_value_heads=8, sliding_window=4096)


def read_config(c: dict) -> dict:
    return read_body(c, NO_BIASES, window_on_every_layer)


def gguf_config(m, names: set) -> dict:
    return llama_like_config(m, names, "mistral") | {"sliding_window": m.get("attention.sliding_window")}


FAMILY = Family("mistral", DEFAULTS, read_config, load_body,
                gguf=GGUFLayout("mistral", gguf_config, LLAMA_TENSORS, relayout=llama_relayout))
