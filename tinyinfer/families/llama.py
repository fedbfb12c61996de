"""Llama: RMSNorm, RoPE, a SwiGLU MLP, grouped-query attention; `attention_bias` puts biases on q, k, v and o,
`mlp_bias` on the MLP. Most families are a Llama body with a twist, so the readers here are theirs too:
`read_body` reads the shared fields of config.json, `load_body` the tensors under Llama's names,
model.layers.{i}.self_attn.{q,k,v,o}_proj, .mlp.{gate,up,down}_proj, .input_layernorm, .post_attention_layernorm,
model.norm, lm_head (its attention and MLP readers replaceable: MoE, fused or latent projections).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tinyinfer.config import Config
from tinyinfer.families.common import LLAMA_BIASES, Biases, Sliding, activation, biases, no_window, rope
from tinyinfer.families.family import Family
from tinyinfer.weights import Getter, embedding_table, linear, norm, output_layer, swiglu_mlp
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config, llama_relayout

# transformers' LlamaConfig defaults, shared by the families derived from it
LLAMA_LIKE = dict(max_position_embeddings=2048, rms_norm_eps=1e-6, hidden_act="silu", rope_theta=10000.0,
                  tie_word_embeddings=False)


def read_body(c: dict, which_biases: Biases = LLAMA_BIASES, sliding: Sliding = no_window, qk_norm: bool = False,
              ) -> dict:
    """The fields of a Llama-family config.json: they differ in biases (`which_biases`), q/k norm and windows
    (`sliding`)."""
    n_heads = c["num_attention_heads"]
    n_kv = c.get("num_key_value_heads") or n_heads  # null: as many as the query heads
    theta, scaling = rope(c)
    qkv_bias, o_bias, mlp_bias = biases(c, which_biases)
    fields = dict(
        vocab_size=c["vocab_size"], d_model=c["hidden_size"], n_layers=c["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=n_kv, head_dim=c.get("head_dim") or c["hidden_size"] // n_heads, d_ff=c["intermediate_size"],
        max_seq_len=c["max_position_embeddings"], norm="rmsnorm", norm_eps=c["rms_norm_eps"],
        activation=activation(c["hidden_act"]), mlp="swiglu", position="rope", rope_theta=theta, rope_scaling=scaling,
        qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias, qk_norm=qk_norm,
        tie_word_embeddings=c["tie_word_embeddings"],
    )
    fields["sliding_window"], fields["layer_types"] = sliding(c)
    return fields


def attention(get: Getter, cfg: Config, p: str, o_name: str = "o_proj", qk_norms: Callable | None = None) -> dict:
    """q/k/v/o projections of one layer (`p` = "model.layers.{i}.self_attn"), biases and q/k norms as configured;
    the output projection is `o_name` (Phi calls it "dense"), the q/k norms' gains read by `qk_norms(get, cfg, p,
    "q" or "k", heads)` (StableLM passes its own)."""
    d, q_dim, kv_dim = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    widths = {"q": q_dim, "k": kv_dim, "v": kv_dim}
    attn = {"qkv": np.concatenate([linear(get, f"{p}.{n}_proj.weight", d, w) for n, w in widths.items()], axis=1),
            "o": linear(get, f"{p}.{o_name}.weight", q_dim, d)}  # qkv: 3 x [d, width] -> [d, q_dim + 2 kv_dim]
    if cfg.qkv_bias:
        attn["qkv_bias"] = np.concatenate([get(f"{p}.{n}_proj.bias", (w,)) for n, w in widths.items()])
    if cfg.o_bias:
        attn["o_bias"] = get(f"{p}.{o_name}.bias", (d,))
    if cfg.qk_norm:
        qk_norms = qk_norms or qk_norm_weight
        attn |= {"q_norm": qk_norms(get, cfg, p, "q", cfg.n_heads), "k_norm": qk_norms(get, cfg, p, "k", cfg.n_kv_heads)}
    return attn


def qk_norm_weight(get: Getter, cfg: Config, p: str, name: str, n_heads: int) -> np.ndarray:
    """The gain of q's or k's norm (`name`): one head wide, shared by all heads (Qwen3, Gemma 3); as wide as the
    whole projection (OLMoE, OLMo 2); or one row per head [heads, hd] ("each_head": Cohere stores it so; StableLM
    as one LayerNorm per head, see tinyinfer/families/stablelm.py)."""
    width = {"head": (cfg.head_dim,), "full": (n_heads * cfg.head_dim,), "each_head": (n_heads, cfg.head_dim)}
    return get(f"{p}.{name}_norm.weight", width[cfg.qk_norm_span])


def dense_mlp(get: Getter, cfg: Config, i: int) -> dict:
    """Layer i's SwiGLU MLP, biased with `mlp_bias`."""
    return swiglu_mlp(get, f"model.layers.{i}.mlp", cfg.d_model, cfg.d_ff, cfg.mlp_bias)


# tinyinfer's norm name -> the checkpoint's. Gemma 2 norms each sublayer's input and output, and its
# `post_attention_layernorm` is the attention's output norm, not (as in Llama) the MLP's input norm; OLMo 2
# has the two output norms alone.
NORM_NAMES = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"}
POST_NORM_NAMES = {"attn_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
                   "mlp_norm": "pre_feedforward_layernorm", "post_mlp_norm": "post_feedforward_layernorm"}


def norm_names(cfg: Config) -> dict:
    """The norms of one layer, tinyinfer's name -> the checkpoint's, as the block's wiring needs them."""
    names = POST_NORM_NAMES if cfg.post_norms else NORM_NAMES
    if cfg.shared_input_norm:  # StableLM's parallel blocks: one norm per layer
        names = {"attn_norm": NORM_NAMES["attn_norm"]}
    if not cfg.pre_norms:  # OLMo 2: the sublayers' outputs only, under Gemma 2's names
        names = {key: name for key, name in names.items() if key.startswith("post_")}
    return names


def load_body(get: Getter, cfg: Config, mlp_params: Callable = dense_mlp,
              attention_params: Callable = attention) -> dict:
    """The tensors of a Llama body. `mlp_params(get, cfg, i)` builds layer i's MLP (MoE architectures pass their
    own), `attention_params(get, cfg, prefix)` its attention (Phi-3 passes its fused one)."""
    layers = []
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}"
        layers.append({
            **{key: norm(get, f"{p}.{name}", cfg) for key, name in norm_names(cfg).items()},
            **attention_params(get, cfg, f"{p}.self_attn"),
            "mlp": mlp_params(get, cfg, i),
        })
    embed = embedding_table(get, cfg)
    return {"embed": embed, "layers": layers, "final_norm": norm(get, "model.norm", cfg),
            "lm_head": output_layer(get, cfg, embed)}


def gguf_config(m, names: set) -> dict:
    """A GGUF llama file's config.json (Mistral's too: the converter writes it as llama)."""
    return llama_like_config(m, names, "llama") | {"attention_bias": "blk.0.attn_q.bias" in names}


FAMILY = Family(
    "llama", dict(LLAMA_LIKE, attention_bias=False, mlp_bias=False), read_body, load_body,
    gguf=GGUFLayout("llama", gguf_config, LLAMA_TENSORS, relayout=llama_relayout))
