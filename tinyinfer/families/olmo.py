"""OLMo (OLMo 1, AI2): a Llama whose LayerNorms learn nothing, no gain and no bias (their epsilon is 1e-5 whatever
the file says: transformers' OlmoLayerNorm hard-wires it), and whose q, k and v are clamped to [-clip_qkv,
clip_qkv] right after their projections when `clip_qkv` is set (a guard against loss spikes in training, kept at
inference since the model learned with it). `attention_bias` puts biases on q, k, v and o."""

from __future__ import annotations

from tinyinfer.families.common import ATTENTION_BIASES
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body

DEFAULTS = dict({k: v for k, v in LLAMA_LIKE.items() if k != "rms_norm_eps"}, attention_bias=False,
                num_key_value_heads=None, clip_qkv=None)
OLMO_NORM_EPS = 1e-5  # OlmoLayerNorm's epsilon, not a config field


def read_config(c: dict) -> dict:
    fields = read_body({**c, "rms_norm_eps": OLMO_NORM_EPS}, ATTENTION_BIASES)
    return dict(fields, norm="layernorm_no_params", clip_qkv=c["clip_qkv"])


FAMILY = Family("olmo", DEFAULTS, read_config, load_body)
