"""Granite (IBM Granite 3.x dense): a Llama with four multipliers, so that a model trained at one width transfers
to others (muP-style): the embeddings times `embedding_multiplier`, each sublayer's output times
`residual_multiplier` before the residual add, the attention scores times `attention_multiplier` (instead of
head_dim^-1/2: its default is 1.0) and the logits divided by `logits_scaling`. `attention_bias` puts biases on q,
k, v and o alike, `mlp_bias` on the MLP."""

from __future__ import annotations

from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body

DEFAULTS = dict(LLAMA_LIKE, attention_bias=False, mlp_bias=False, num_key_value_heads=None, embedding_multiplier=1.0,
                residual_multiplier=1.0, attention_multiplier=1.0, logits_scaling=1.0)


def read_config(c: dict) -> dict:
    return dict(read_body(c), embed_scale=c["embedding_multiplier"], residual_scale=c["residual_multiplier"],
                attn_multiplier=c["attention_multiplier"], logits_divisor=c["logits_scaling"])


FAMILY = Family("granite", DEFAULTS, read_config, load_body)
