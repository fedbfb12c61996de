"""Gemma 2: Gemma plus four norms per layer (each sublayer's output normed before the residual add), the scores
scaled by query_pre_attn_scalar^-1/2 and soft-capped (attn_logit_softcapping), the logits soft-capped
(final_logit_softcapping), and a sliding window on the layers `layer_types` names (by default the even ones,
0, 2, 4...). Its activation is `hidden_activation` ("gelu" is the exact GELU here); `hidden_act` is not read."""

from __future__ import annotations

from tinyinfer.families.common import check_window, every_but_the_nth
from tinyinfer.families.family import Family
from tinyinfer.families.gemma import GEMMA_LIKE, read_gemma_body
from tinyinfer.families.llama import load_body
from tinyinfer.gguf.architectures import GEMMA2_TENSORS, GGUFLayout, gemma_relayout, llama_like_config

DEFAULTS = dict(GEMMA_LIKE, hidden_activation="gelu_pytorch_tanh", num_key_value_heads=4, query_pre_attn_scalar=256,
                sliding_window=4096, layer_types=None, final_logit_softcapping=30.0, attn_logit_softcapping=50.0)


def read_config(c: dict) -> dict:
    fields = dict(read_gemma_body(c, "hidden_activation", "hidden_act", every_but_the_nth(2, configurable=False)),
                  post_norms=True, query_pre_attn_scalar=c["query_pre_attn_scalar"],
                  attn_softcap=c["attn_logit_softcapping"], final_softcap=c["final_logit_softcapping"])
    return check_window(c, fields)


def gguf_config(m, names: set) -> dict:
    """llama.cpp scales Gemma 2's scores by head_dim^-1/2 (query_pre_attn_scalar = head_dim) and soft-caps both."""
    c = llama_like_config(m, names, "gemma2")
    return c | {"hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                "query_pre_attn_scalar": c["head_dim"], "sliding_window": m.get("attention.sliding_window", 4096),
                "attn_logit_softcapping": m.get("attn_logit_softcapping", 50.0),
                "final_logit_softcapping": m.get("final_logit_softcapping", 30.0)}


FAMILY = Family("gemma2", DEFAULTS, read_config, load_body,
                gguf=GGUFLayout("gemma2", gguf_config, GEMMA2_TENSORS, relayout=gemma_relayout))
