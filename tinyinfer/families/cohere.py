"""Cohere (Command-R, Command-R+): Phi-2's parallel block through one norm, x = x + attention(norm(x)) +
mlp(norm(x)), with a LayerNorm that learns no bias, a SwiGLU MLP, the logits multiplied by `logit_scale`
(tinyinfer divides by its inverse), a tied head by default, and with `use_qk_norm` a LayerNorm (no bias) on each
head of q and k, each head with its own gain. Its RoPE rotates neighbouring pairs (x[2i], x[2i+1]): the loader
permutes q's and k's coordinates into tinyinfer's halves (`attention`), which leaves q.k unchanged.

GGUF (llama.cpp's "command-r"): Llama's names, q and k as the checkpoint has them (llama.cpp rotates neighbouring
pairs too), logit_scale (absent: none, as llama.cpp reads it); the q/k norms and biases told by the tensors."""

from __future__ import annotations

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import ATTENTION_BIASES, Sliding, no_window
from tinyinfer.families.family import Family
from tinyinfer.families.llama import attention as llama_attention
from tinyinfer.families.llama import load_body, read_body
from tinyinfer.weights import Getter, halves_order
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config

DEFAULTS = dict(max_position_embeddings=8192, layer_norm_eps=1e-5, hidden_act="silu", rope_theta=500000.0,
                tie_word_embeddings=True, num_key_value_heads=None, attention_bias=False, use_qk_norm=False,
                logit_scale=0.0625)


def read_cohere_body(c: dict, sliding: Sliding = no_window) -> dict:
    """What Cohere and Cohere 2 share (`sliding`: which layers slide)."""
    scale = c["logit_scale"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < float("inf"):
        raise TinyInferError(f"config.json ({c['model_type']}): logit_scale={scale!r} must be a positive number (the "
                             "logits are multiplied by it); fix config.json")
    fields = read_body({**c, "rms_norm_eps": c["layer_norm_eps"]}, ATTENTION_BIASES, sliding)  # LayerNorm's epsilon
    return dict(fields, norm="layernorm_no_bias", parallel_residual=True, shared_input_norm=True,
                qk_norm=c["use_qk_norm"], qk_norm_span="each_head", logits_divisor=1 / scale)


def attention(get: Getter, cfg: Config, p: str) -> dict:
    """Cohere rotates neighbouring pairs (x[2i], x[2i+1]) where tinyinfer pairs x[i] with x[i + hd/2]: q's and k's
    coordinates (columns of qkv, their biases, their norms' gains) are reordered per head into tinyinfer's layout,
    as llama2.c's are. Reordering q and k alike leaves every q.k, so the model, unchanged, and a LayerNorm over a
    head does not mind the order of its coordinates."""
    attn = llama_attention(get, cfg, p)
    hd, q_dim, kv_dim = cfg.head_dim, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    q_order, k_order = halves_order(cfg.n_heads, hd), halves_order(cfg.n_kv_heads, hd)
    columns = np.concatenate([q_order, q_dim + k_order, q_dim + kv_dim + np.arange(kv_dim)])  # v stays
    attn["qkv"] = np.ascontiguousarray(attn["qkv"][:, columns])
    if cfg.qkv_bias:
        attn["qkv_bias"] = attn["qkv_bias"][columns]
    if cfg.qk_norm:  # gains [heads, hd]
        attn["q_norm"] = attn["q_norm"].reshape(-1)[q_order].reshape(cfg.n_heads, hd)
        attn["k_norm"] = attn["k_norm"].reshape(-1)[k_order].reshape(cfg.n_kv_heads, hd)
    return attn


def load_params(get: Getter, cfg: Config) -> dict:
    return load_body(get, cfg, attention_params=attention)


# a LoRA adapter's q_proj and k_proj rows follow the loader's reordering of their coordinates
LORA_ROWS = {"q": lambda cfg: halves_order(cfg.n_heads, cfg.head_dim),
             "k": lambda cfg: halves_order(cfg.n_kv_heads, cfg.head_dim)}


def gguf_config(m, names: set) -> dict:
    return llama_like_config(m, names, "cohere") | {
        "layer_norm_eps": m["attention.layer_norm_epsilon"], "logit_scale": m.get("logit_scale") or 1.0,
        "attention_bias": "blk.0.attn_q.bias" in names, "use_qk_norm": "blk.0.attn_q_norm.weight" in names}


FAMILY = Family("cohere", DEFAULTS, read_cohere_body, load_params, lora_rows=LORA_ROWS,
                gguf=GGUFLayout("command-r", gguf_config, LLAMA_TENSORS))
