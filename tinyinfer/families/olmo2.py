"""OLMo 2: the norms moved from each sublayer's input to its output, x = x + norm(attention(x)) and
x = x + norm(mlp(x)), and q and k each normed over the whole projection (all heads as one, as OLMoE) before RoPE.
`attention_bias` puts biases on q, k, v and o; the MLP has none.

GGUF (llama.cpp's "olmo2"): Llama's names, with Gemma 2's names for the two output norms (post_attention_norm,
post_ffw_norm). OLMo 3 is written as olmo2 with attention.sliding_window: refused by name."""

from __future__ import annotations

from tinyinfer.families.common import ATTENTION_BIASES
from tinyinfer.families.family import Family
from tinyinfer.errors import TinyInferError
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.gguf.architectures import GEMMA2_TENSORS, GGUFLayout, llama_like_config

DEFAULTS = dict(LLAMA_LIKE, rms_norm_eps=1e-5, attention_bias=False, num_key_value_heads=None)


def read_config(c: dict) -> dict:
    return dict(read_body(c, ATTENTION_BIASES), pre_norms=False, post_norms=True, qk_norm=True, qk_norm_span="full")


def gguf_config(m, names: set) -> dict:
    if m.get("attention.sliding_window"):
        raise TinyInferError(f"{m.path}: an olmo2 file with attention.sliding_window (OLMo 3's windowed layers) is "
                             "not supported; tinyinfer runs OLMo 2, whose layers all attend to the whole context")
    return llama_like_config(m, names, "olmo2") | {"attention_bias": "blk.0.attn_q.bias" in names}


FAMILY = Family("olmo2", DEFAULTS, read_config, load_body, gguf=GGUFLayout("olmo2", gguf_config, GEMMA2_TENSORS))
