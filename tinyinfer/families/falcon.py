"""Falcon: LayerNorms with biases, RoPE on whole heads, an ungated MLP (dense_h_to_4h, GELU, dense_4h_to_h), with
`bias` biases on every linear layer but the head, q/k/v fused in groups (reordered at load, `qkv_rows`), and three
blocks:

    new_decoder_architecture  (Falcon-40B, 180B)  parallel; `num_kv_heads` groups; two norms per layer
                              (ln_attn, ln_mlp), or one when num_ln_in_parallel_attn is 1 (Falcon-11B)
    parallel_attn             (Falcon-7B)         parallel through one norm; one key/value head when
                                                  `multi_query`, else one per query head
    neither                                       sequential, two norms per layer

What transformers itself cannot run (a new-architecture block that is not parallel, two parallel norms in the old
one, grouped heads without the new architecture) and ALiBi are refused by name.

GGUF (llama.cpp's "falcon"): llama.cpp runs every Falcon as the parallel block, attention reading attn_norm_2
where the file has it (Falcon-40B's ln_attn) and the MLP attn_norm (ln_mlp; Falcon-7B's one input_layernorm). A
file is read as the new architecture with `head_count_kv` groups and one or two norms: Falcon-7B's multi-query
block is that block with one group, the same computation. The converter regrouped query_key_value's rows as all
queries, all keys, all values; `gguf_relayout` puts them back in groups, which the loader then reorders as usual.
"""

from __future__ import annotations

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import activation, rope
from tinyinfer.families.family import Family
from tinyinfer.families.llama import NORM_NAMES
from tinyinfer.weights import Getter, biased_mlp, embedding_table, linear, norm, output_layer
from tinyinfer.gguf.architectures import GGUFLayout, Metadata, named, rope_config

DEFAULTS = dict(max_position_embeddings=2048, layer_norm_epsilon=1e-5, rope_theta=10000.0, num_kv_heads=None,
                alibi=False, new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False,
                ffn_hidden_size=None, activation="gelu", tie_word_embeddings=True, num_ln_in_parallel_attn=None)


def read_config(c: dict) -> dict:
    if c["alibi"]:
        raise TinyInferError("config.json (falcon): alibi=true (ALiBi position biases instead of RoPE, as in "
                             "Falcon-RW) is not supported; only the rotary Falcon models are")
    new, parallel, n_norms = c["new_decoder_architecture"], c["parallel_attn"], c["num_ln_in_parallel_attn"]
    n_norms = 2 if n_norms is None and new else n_norms
    if new and not parallel:
        raise TinyInferError("config.json (falcon): new_decoder_architecture=true needs parallel_attn=true "
                             "(transformers cannot run the other combination); fix config.json")
    if n_norms not in ((1, 2) if new else (None, 1)):
        raise TinyInferError(f"config.json (falcon): num_ln_in_parallel_attn={c['num_ln_in_parallel_attn']!r} is not "
                             "supported; use 1 or 2 with new_decoder_architecture, null (or 1) without")
    d, n_heads = c["hidden_size"], c["num_attention_heads"]
    n_kv = (c["num_kv_heads"] or n_heads) if new else (1 if c["multi_query"] else n_heads)
    if not new and not c["multi_query"] and c["num_kv_heads"] not in (None, n_heads):
        raise TinyInferError(f"config.json (falcon): num_kv_heads={c['num_kv_heads']} needs "
                             "new_decoder_architecture=true (the old block has one key/value head per query head, "
                             "or one in all with multi_query)")
    if d % n_heads:
        raise TinyInferError(f"config.json (falcon): hidden_size={d} is not a multiple of "
                             f"num_attention_heads={n_heads}")
    theta, scaling = rope(c)
    return dict(
        vocab_size=c["vocab_size"], d_model=d, n_layers=c["num_hidden_layers"], n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=d // n_heads, d_ff=c["ffn_hidden_size"] or 4 * d, max_seq_len=c["max_position_embeddings"],
        norm="layernorm", norm_eps=c["layer_norm_epsilon"], activation=activation(c["activation"]), mlp="gelu_mlp",
        rope_theta=theta, rope_scaling=scaling, qkv_bias=c["bias"], o_bias=c["bias"], mlp_bias=c["bias"],
        parallel_residual=parallel, shared_input_norm=parallel and n_norms != 2,
        tie_word_embeddings=c["tie_word_embeddings"],
    )


EMBEDDING = "transformer.word_embeddings.weight"


def load_params(get: Getter, cfg: Config) -> dict:
    d, ff = cfg.d_model, cfg.d_ff
    rows = qkv_rows(cfg)
    width = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    norm_names = ({"attn_norm": "input_layernorm"} if cfg.shared_input_norm else
                  {"attn_norm": "ln_attn", "mlp_norm": "ln_mlp"} if cfg.parallel_residual else NORM_NAMES)
    layers = []
    for i in range(cfg.n_layers):
        p = f"transformer.h.{i}"
        layer = {key: norm(get, f"{p}.{name}", cfg) for key, name in norm_names.items()}
        layer |= {"qkv": np.ascontiguousarray(get(f"{p}.self_attention.query_key_value.weight", (width, d))[rows].T),
                  "o": linear(get, f"{p}.self_attention.dense.weight", d, d),
                  "mlp": biased_mlp(get, f"{p}.mlp.dense_h_to_4h", f"{p}.mlp.dense_4h_to_h", d, ff, cfg.mlp_bias)}
        if cfg.qkv_bias:  # with o's: `bias`
            layer["qkv_bias"] = get(f"{p}.self_attention.query_key_value.bias", (width,))[rows]
            layer["o_bias"] = get(f"{p}.self_attention.dense.bias", (d,))
        layers.append(layer)
    embed = embedding_table(get, cfg, EMBEDDING)
    return {"embed": embed, "layers": layers, "final_norm": norm(get, "transformer.ln_f", cfg),
            "lm_head": output_layer(get, cfg, embed)}


def qkv_rows(cfg: Config) -> np.ndarray:
    """Falcon's query_key_value rows come in groups, one per key/value head: the group's query heads, then its key,
    then its value (Falcon-40B: 8 groups of 16 + 2 heads; Falcon-7B's multi-query: one group of 71 + 2; without
    multi_query, one group per head, [q, k, v]). The file's row behind each of tinyinfer's [all q | all k | all v].

    >>> qkv_rows(Config("falcon", 10, 4, 1, 2, 1, 1, 4, 8)).tolist()  # 2 query heads, 1 group, head_dim 1
    [0, 1, 2, 3]
    >>> qkv_rows(Config("falcon", 10, 4, 1, 2, 2, 1, 4, 8)).tolist()  # a group per head: q0 k0 v0 q1 k1 v1
    [0, 3, 1, 4, 2, 5]
    """
    return grouped_qkv_rows(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)


def grouped_qkv_rows(n_heads: int, n_kv_heads: int, head_dim: int) -> np.ndarray:
    """`qkv_rows` from the head counts and width.  -> [(n_heads + 2 n_kv_heads) head_dim]"""
    per_group = n_heads // n_kv_heads
    heads = np.arange(n_kv_heads * (per_group + 2)).reshape(n_kv_heads, per_group + 2)  # the file's, by group
    order = np.concatenate([heads[:, :per_group].ravel(), heads[:, per_group], heads[:, per_group + 1]])  # q, k, v
    return (order[:, None] * head_dim + np.arange(head_dim)).ravel()  # heads -> rows


# -- GGUF ------------------------------------------------------------------------------------------------------

def gguf_config(m: Metadata, names: set) -> dict:
    """A GGUF falcon file's config.json: the new architecture, `head_count_kv` groups, two norms where the file
    has attn_norm_2 (see the module docstring). The converter writes context_length 2048 and 4 x hidden_size as
    the MLP's width whatever config.json said; the tensors' shapes are checked against them at load."""
    layout = m.get("tensor_data_layout", "jploski")
    if layout != "jploski":
        raise TinyInferError(f"{m.path}: falcon tensor_data_layout {layout!r} is not supported: only llama.cpp's "
                             "'jploski' (q, k, v rows each together); convert the model again with "
                             "convert_hf_to_gguf.py")
    heads = m["attention.head_count"]
    return {"model_type": "falcon", "hidden_size": m["embedding_length"], "num_hidden_layers": m["block_count"],
            "num_attention_heads": heads, "num_kv_heads": m.get("attention.head_count_kv", 1),
            "new_decoder_architecture": True, "parallel_attn": True,
            "num_ln_in_parallel_attn": 2 if "blk.0.attn_norm_2.weight" in names else 1,
            "ffn_hidden_size": m["feed_forward_length"], "max_position_embeddings": m["context_length"],
            "layer_norm_epsilon": m["attention.layer_norm_epsilon"], "bias": "blk.0.attn_qkv.bias" in names,
            "tie_word_embeddings": "output.weight" not in names} | rope_config(m)


GGUF_LAYER = {"attn_qkv": "self_attention.query_key_value", "attn_output": "self_attention.dense",
              "ffn_up": "mlp.dense_h_to_4h", "ffn_down": "mlp.dense_4h_to_h"}
GGUF_TOP = {"token_embd": "transformer.word_embeddings", "output_norm": "transformer.ln_f", "output": "lm_head"}


def gguf_tensors(c: dict) -> dict:
    """attn_norm feeds the MLP: Falcon-40B's ln_mlp (attn_norm_2, its ln_attn, feeding attention), or the layer's
    one norm."""
    norms = ({"attn_norm": "ln_mlp", "attn_norm_2": "ln_attn"} if c["num_ln_in_parallel_attn"] == 2 else
             {"attn_norm": "input_layernorm"})
    return named(GGUF_TOP, GGUF_LAYER | norms, prefix="transformer.h.{i}.")


def gguf_relayout(name: str, w: np.ndarray, c: dict) -> np.ndarray:
    """query_key_value's rows (or bias) back in groups: GGUF row r is the grouped file's row qkv_rows[r]."""
    if name != "attn_qkv":
        return w
    heads = c["num_attention_heads"]
    rows = grouped_qkv_rows(heads, c["num_kv_heads"], c["hidden_size"] // heads)
    grouped = np.empty_like(w)
    grouped[rows] = w
    return grouped


FAMILY = Family("falcon", DEFAULTS, read_config, load_params, embedding_name=EMBEDDING, lora_rows={"qkv": qkv_rows},
                gguf=GGUFLayout("falcon", gguf_config, gguf_tensors, gguf_relayout))
