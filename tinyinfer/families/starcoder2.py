"""StarCoder2: a Mistral-like attention (GQA, RoPE on whole heads, a window over every layer when `sliding_window`
is set) in a GPT-2-like body: LayerNorms with biases (epsilon `norm_epsilon`), an ungated MLP (c_fc, then c_proj)
with the tanh GELU, and with `use_bias` biases on q, k, v, o and both MLP layers.

GGUF (llama.cpp's "starcoder2"): Llama's tensor names, the MLP's as ffn_up and ffn_down. The converter does not
write `sliding_window` (StarCoder2-3B's 4096), and llama.cpp attends to the whole context; so does tinyinfer, unless
the file states attention.sliding_window: past the window such a file gives other logits than the Hugging Face
checkpoint it came from, as in llama.cpp."""

from __future__ import annotations

from tinyinfer.config import Config
from tinyinfer.families.common import check_window, window_on_every_layer
from tinyinfer.families.family import Family
from tinyinfer.families.llama import load_body, read_body
from tinyinfer.weights import Getter, biased_mlp
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config, named

DEFAULTS = dict(max_position_embeddings=4096, norm_epsilon=1e-5, hidden_act="gelu_pytorch_tanh", rope_theta=10000.0,
                tie_word_embeddings=True, num_key_value_heads=2, sliding_window=None, use_bias=True)


def read_config(c: dict) -> dict:
    fields = read_body({**c, "rms_norm_eps": c["norm_epsilon"]}, ("use_bias",) * 3, window_on_every_layer)
    return check_window(c, dict(fields, norm="layernorm", mlp="gelu_mlp"))


def mlp(get: Getter, cfg: Config, i: int) -> dict:
    """StarCoder2's GELU MLP: c_fc (up), c_proj (down), biased with `use_bias`."""
    p = f"model.layers.{i}.mlp"
    return biased_mlp(get, f"{p}.c_fc", f"{p}.c_proj", cfg.d_model, cfg.d_ff, cfg.mlp_bias)


def load_params(get: Getter, cfg: Config) -> dict:
    return load_body(get, cfg, mlp)


def gguf_config(m, names: set) -> dict:
    return llama_like_config(m, names, "starcoder2") | {
        "norm_epsilon": m["attention.layer_norm_epsilon"], "use_bias": "blk.0.attn_q.bias" in names,
        "sliding_window": m.get("attention.sliding_window")}


GGUF_TENSORS = LLAMA_TENSORS | named({}, {"ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"})


FAMILY = Family("starcoder2", DEFAULTS, read_config, load_params,
                gguf=GGUFLayout("starcoder2", gguf_config, GGUF_TENSORS))
