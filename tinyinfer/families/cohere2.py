"""Cohere 2 (Command R7B, Command A): Cohere's block without q/k norms, head_dim always hidden_size / heads, and
two kinds of layer: those `layer_types` names sliding (by default three of four) attend through a window and
rotate q and k; the others see the whole context and rotate nothing (NoPE, as SmolLM3's layers)."""

from __future__ import annotations

from tinyinfer.families.cohere import LORA_ROWS, load_params, read_cohere_body
from tinyinfer.families.common import check_window, every_but_the_nth
from tinyinfer.families.family import Family

DEFAULTS = dict(max_position_embeddings=8192, layer_norm_eps=1e-5, hidden_act="silu", rope_theta=10000.0,
                tie_word_embeddings=True, num_key_value_heads=None, attention_bias=False, logit_scale=0.0625,
                sliding_window=4096, layer_types=None)


def read_config(c: dict) -> dict:
    fields = read_cohere_body({**c, "use_qk_norm": False, "head_dim": None}, every_but_the_nth(4, configurable=True))
    fields["nope_layers"] = [i for i, kind in enumerate(fields["layer_types"]) if kind == "full_attention"]
    return check_window(c, fields)


FAMILY = Family("cohere2", DEFAULTS, read_config, load_params, lora_rows=LORA_ROWS)
