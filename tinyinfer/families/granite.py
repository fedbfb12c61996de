"""Granite (IBM Granite 3.x dense): a Llama with four multipliers, so that a model trained at one width transfers
to others (muP-style): the embeddings times `embedding_multiplier`, each sublayer's output times
`residual_multiplier` before the residual add, the attention scores times `attention_multiplier` (instead of
head_dim^-1/2: its default is 1.0) and the logits divided by `logits_scaling`. `attention_bias` puts biases on q,
k, v and o alike, `mlp_bias` on the MLP.

GGUF (llama.cpp's "granite"): Llama's file (q/k permuted alike) with the multipliers as embedding_scale,
residual_scale, attention.scale and logit_scale. The converter writes a multiplier only when it is not 0, and
llama.cpp reads an absent one as none (1), the attention's as head_dim^-1/2; logit_scale it requires."""

from __future__ import annotations

from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.families.llama import gguf_config as llama_gguf_config  # the converters are LlamaModel's
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_relayout

DEFAULTS = dict(LLAMA_LIKE, attention_bias=False, mlp_bias=False, num_key_value_heads=None, embedding_multiplier=1.0,
                residual_multiplier=1.0, attention_multiplier=1.0, logits_scaling=1.0)


def read_config(c: dict) -> dict:
    return dict(read_body(c), embed_scale=c["embedding_multiplier"], residual_scale=c["residual_multiplier"],
                attn_multiplier=c["attention_multiplier"], logits_divisor=c["logits_scaling"])


def gguf_config(m, names: set) -> dict:
    c = llama_gguf_config(m, names)
    return c | {"model_type": "granite", "mlp_bias": "blk.0.ffn_up.bias" in names,
                "embedding_multiplier": m.get("embedding_scale") or 1.0,
                "residual_multiplier": m.get("residual_scale") or 1.0,
                "attention_multiplier": m.get("attention.scale") or c["head_dim"] ** -0.5,
                "logits_scaling": m["logit_scale"]}


FAMILY = Family("granite", DEFAULTS, read_config, load_body,
                gguf=GGUFLayout("granite", gguf_config, LLAMA_TENSORS, relayout=llama_relayout))
