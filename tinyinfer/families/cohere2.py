"""Cohere 2 (Command R7B, Command A): Cohere's block without q/k norms, head_dim always hidden_size / heads, and
two kinds of layer: those `layer_types` names sliding (by default three of four) attend through a window and
rotate q and k; the others see the whole context and rotate nothing (NoPE, as SmolLM3's layers).

GGUF (llama.cpp's "cohere2"): Cohere's file with attention.sliding_window, the sliding layers as llama.cpp reads
them (three of four without attention.sliding_window_pattern), RoPE's base that of the sliding layers, the only
ones that rotate (rope.freq_base_swa where the file has one). RoPE on part of each head is refused by name."""

from __future__ import annotations

from tinyinfer.errors import TinyInferError
from tinyinfer.families.cohere import LORA_ROWS, load_params, read_cohere_body
from tinyinfer.families.cohere import gguf_config as cohere_gguf_config
from tinyinfer.families.common import check_window, every_but_the_nth
from tinyinfer.families.family import Family
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, sliding_layer_types

DEFAULTS = dict(max_position_embeddings=8192, layer_norm_eps=1e-5, hidden_act="silu", rope_theta=10000.0,
                tie_word_embeddings=True, num_key_value_heads=None, attention_bias=False, logit_scale=0.0625,
                sliding_window=4096, layer_types=None)


def read_config(c: dict) -> dict:
    fields = read_cohere_body({**c, "use_qk_norm": False, "head_dim": None}, every_but_the_nth(4, configurable=True))
    fields["nope_layers"] = [i for i, kind in enumerate(fields["layer_types"]) if kind == "full_attention"]
    return check_window(c, fields)


def gguf_config(m, names: set) -> dict:
    c = cohere_gguf_config(m, names)
    if m.get("rope.dimension_count", c["head_dim"]) != c["head_dim"]:
        raise TinyInferError(f"{m.path}: RoPE on {m['rope.dimension_count']} of {c['head_dim']} coordinates per head "
                             "(rope.dimension_count) is not supported for cohere2; only whole heads rotate")
    return c | {"model_type": "cohere2", "sliding_window": m["attention.sliding_window"],
                "layer_types": sliding_layer_types(m, c["num_hidden_layers"], 4),
                "rope_theta": m.get("rope.freq_base_swa", c["rope_theta"])}


FAMILY = Family("cohere2", DEFAULTS, read_config, load_params, lora_rows=LORA_ROWS,
                gguf=GGUFLayout("cohere2", gguf_config, LLAMA_TENSORS))
