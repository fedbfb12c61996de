"""GPT-NeoX (Pythia): LayerNorm with biases, q/k/v fused per head in the file (reordered at load), RoPE on the
first `partial_rotary_factor` (`rotary_pct`, 0.25) of each head with theta `rotary_emb_base`, a biased GELU MLP,
and by default a parallel residual (`use_parallel_residual`): attention and MLP both read the layer's input, each
through its own norm, and both outputs join the stream at once. The Hub's files name the output layer
embed_out.weight (transformers 5 renames it to lm_head.weight when it loads them, and back when it saves).

GGUF (llama.cpp's "gptneox"): RoPE's width as rope.dimension_count, no RoPE base (llama.cpp's 10000), the block
by use_parallel_residual; the converter regrouped query_key_value's rows as all q, all k, all v (GPT-2's order):
`gguf_relayout` puts them back head by head, which the loader then reorders as usual (`by_part`)."""

from __future__ import annotations

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import activation, rope
from tinyinfer.families.family import Family
from tinyinfer.weights import Getter, biased_mlp, embedding_table, linear, norm, output_layer
from tinyinfer.gguf.architectures import GGUFLayout, Metadata, named, rope_config, rotary_factor

# rotary_emb_base and rotary_pct: GPT_NEOX_ROPE
DEFAULTS = dict(max_position_embeddings=2048, layer_norm_eps=1e-5, hidden_act="gelu", tie_word_embeddings=False,
                use_parallel_residual=True, attention_bias=True)
GPT_NEOX_ROPE = {"rope_theta": 10000.0, "partial_rotary_factor": 0.25}  # GPTNeoXConfig: default_theta, rotary_pct


def read_config(c: dict) -> dict:
    params = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})  # as GPTNeoXConfig reads the dialects
    params.setdefault("rope_theta", c.get("rotary_emb_base", GPT_NEOX_ROPE["rope_theta"]))
    params.setdefault("partial_rotary_factor", c.get("rotary_pct", GPT_NEOX_ROPE["partial_rotary_factor"]))
    theta, scaling = rope({**c, "rope_scaling": None, "rope_parameters": params})
    d, n_heads = c["hidden_size"], c["num_attention_heads"]
    if d % n_heads:
        raise TinyInferError(f"config.json (gpt_neox): hidden_size={d} is not a multiple of "
                             f"num_attention_heads={n_heads}")
    return dict(
        vocab_size=c["vocab_size"], d_model=d, n_layers=c["num_hidden_layers"], n_heads=n_heads, n_kv_heads=n_heads,
        head_dim=d // n_heads, d_ff=c["intermediate_size"], max_seq_len=c["max_position_embeddings"],
        norm="layernorm", norm_eps=c["layer_norm_eps"], activation=activation(c["hidden_act"]), mlp="gelu_mlp",
        rope_theta=theta, rope_scaling=scaling, partial_rotary_factor=params["partial_rotary_factor"],
        qkv_bias=c["attention_bias"], o_bias=c["attention_bias"], mlp_bias=True,
        parallel_residual=c["use_parallel_residual"], tie_word_embeddings=c["tie_word_embeddings"],
    )


EMBEDDING, HEADS = "gpt_neox.embed_in.weight", ("embed_out.weight", "lm_head.weight")


def load_params(get: Getter, cfg: Config) -> dict:
    d, ff = cfg.d_model, cfg.d_ff
    layers = []
    for i in range(cfg.n_layers):
        p = f"gpt_neox.layers.{i}"
        layer = {
            "attn_norm": norm(get, f"{p}.input_layernorm", cfg),
            "qkv": np.ascontiguousarray(by_part(get(f"{p}.attention.query_key_value.weight", (3 * d, d)), cfg).T),
            "o": linear(get, f"{p}.attention.dense.weight", d, d),
            "mlp_norm": norm(get, f"{p}.post_attention_layernorm", cfg),
            "mlp": biased_mlp(get, f"{p}.mlp.dense_h_to_4h", f"{p}.mlp.dense_4h_to_h", d, ff),
        }
        if cfg.qkv_bias:  # with o's: attention_bias
            layer["qkv_bias"] = by_part(get(f"{p}.attention.query_key_value.bias", (3 * d,)), cfg)
            layer["o_bias"] = get(f"{p}.attention.dense.bias", (d,))
        layers.append(layer)
    embed = embedding_table(get, cfg, EMBEDDING, HEADS)
    return {"embed": embed, "layers": layers, "final_norm": norm(get, "gpt_neox.final_layer_norm", cfg),
            "lm_head": output_layer(get, cfg, embed, HEADS)}


def by_part(w: np.ndarray, cfg: Config) -> np.ndarray:
    """GPT-NeoX's query_key_value rows (or bias) head by head, [q k v of head 0, q k v of head 1, ...], reordered
    to tinyinfer's [q of every head, k of every head, v of every head].  [3d, ...] -> [3d, ...]"""
    H, hd = cfg.n_heads, cfg.head_dim
    per_head = w.reshape(H, 3, hd, *w.shape[1:])  # [3d, ...] -> [H, 3, hd, ...]
    return per_head.swapaxes(0, 1).reshape(w.shape)  # -> [3, H, hd, ...] -> [3d, ...]


def gguf_config(m: Metadata, names: set) -> dict:
    d, heads = m["embedding_length"], m["attention.head_count"]
    rope_fields = rope_config(m)
    return {"model_type": "gpt_neox", "hidden_size": d, "num_hidden_layers": m["block_count"],
            "num_attention_heads": heads, "intermediate_size": m["feed_forward_length"],
            "max_position_embeddings": m["context_length"], "layer_norm_eps": m["attention.layer_norm_epsilon"],
            "use_parallel_residual": m["use_parallel_residual"], "rotary_pct": rotary_factor(m, d // heads),
            "rotary_emb_base": rope_fields.pop("rope_theta"), **rope_fields,
            "attention_bias": "blk.0.attn_qkv.bias" in names, "tie_word_embeddings": "output.weight" not in names}


GGUF_TENSORS = named({"token_embd": "gpt_neox.embed_in", "output_norm": "gpt_neox.final_layer_norm",
                      "output": "embed_out"},
                     {"attn_norm": "input_layernorm", "attn_qkv": "attention.query_key_value",
                      "attn_output": "attention.dense", "ffn_norm": "post_attention_layernorm",
                      "ffn_up": "mlp.dense_h_to_4h", "ffn_down": "mlp.dense_4h_to_h"}, prefix="gpt_neox.layers.{i}.")


def gguf_relayout(name: str, w: np.ndarray, c: dict) -> np.ndarray:
    """query_key_value's rows (or bias) from [all q | all k | all v] back to head by head.  [3d, ...] -> [3d, ...]"""
    if name != "attn_qkv":
        return w
    parts = w.reshape(3, c["num_attention_heads"], -1, *w.shape[1:])  # [3d, ...] -> [3, H, hd, ...]
    return parts.swapaxes(0, 1).reshape(w.shape)  # -> [H, 3, hd, ...] -> [3d, ...]


FAMILY = Family("gpt_neox", DEFAULTS, read_config, load_params, embedding_name=EMBEDDING, head_names=HEADS,
                lora_rows={"qkv": lambda cfg: by_part(np.arange(3 * cfg.d_model), cfg)},
                gguf=GGUFLayout("gptneox", gguf_config, GGUF_TENSORS, gguf_relayout))
