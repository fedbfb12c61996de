"""OLMo 2: the norms moved from each sublayer's input to its output, x = x + norm(attention(x)) and
x = x + norm(mlp(x)), and q and k each normed over the whole projection (all heads as one, as OLMoE) before RoPE.
`attention_bias` puts biases on q, k, v and o; the MLP has none."""

from __future__ import annotations

from tinyinfer.families.common import ATTENTION_BIASES
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body

DEFAULTS = dict(LLAMA_LIKE, rms_norm_eps=1e-5, attention_bias=False, num_key_value_heads=None)


def read_config(c: dict) -> dict:
    return dict(read_body(c, ATTENTION_BIASES), pre_norms=False, post_norms=True, qk_norm=True, qk_norm_span="full")


FAMILY = Family("olmo2", DEFAULTS, read_config, load_body)
