"""Gemma: a Llama body with embeddings times sqrt(hidden_size), RMSNorm scaling by (1 + weight), a GELU-gated MLP
(GeGLU), a tied head. Its activation is `hidden_act`, where transformers 5 reads "gelu" (what the Gemma releases
say) as the tanh approximation "gelu_pytorch_tanh"; `hidden_activation` is not read."""

from __future__ import annotations

from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import ATTENTION_BIASES, Sliding, activation, no_window
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, gemma_relayout, llama_like_config

# transformers' Gemma config classes' defaults, shared by Gemma 2 and 3
GEMMA_LIKE = dict(max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=256,
                  tie_word_embeddings=True, attention_bias=False, use_bidirectional_attention=None)
DEFAULTS = dict(GEMMA_LIKE, hidden_act="gelu_pytorch_tanh", num_key_value_heads=16)


def read_gemma_body(c: dict, activation_field: str, other: str, sliding: Sliding = no_window) -> dict:
    """What Gemma, Gemma 2 and Gemma 3 share, the activation read from `activation_field`. `other` is the activation
    field the family ignores; a file whose two fields disagree is ambiguous (transformers 4 and 5 differ) and
    refused."""
    if c.get("use_bidirectional_attention"):
        raise TinyInferError(f"config.json ({c['model_type']}): use_bidirectional_attention is not supported; "
                             "tinyinfer attends causally only")
    name = c[activation_field]
    if c.get(other) is not None and activation(c[other]) != activation(name):
        raise TinyInferError(f"config.json ({c['model_type']}): {activation_field}={name!r} and {other}={c[other]!r} "
                             f"disagree; transformers 5 uses {activation_field}: make the two the same")
    return dict(read_body({**c, "hidden_act": name}, ATTENTION_BIASES, sliding), norm="rmsnorm_plus_one",
                embed_scale=c["hidden_size"] ** 0.5)


def read_config(c: dict) -> dict:
    hidden_act = "gelu_pytorch_tanh" if c["hidden_act"] == "gelu" else c["hidden_act"]
    return read_gemma_body({**c, "hidden_act": hidden_act}, "hidden_act", "hidden_activation")


def gguf_config(m, names: set) -> dict:
    return llama_like_config(m, names, "gemma") | {"hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": True}


FAMILY = Family("gemma", DEFAULTS, read_config, load_body,
                gguf=GGUFLayout("gemma", gguf_config, LLAMA_TENSORS, relayout=gemma_relayout))
