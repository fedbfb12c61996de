"""StableLM (StableLM-3B-4E1T, StableLM 2): a Llama body with LayerNorms (with bias), RoPE on the first
`partial_rotary_factor` of each head (0.25 when the file says nothing), q/k/v biases with `use_qkv_bias`, and
head_dim always hidden_size / heads. Two options of StableLM 2 12B: `qk_layernorm`, a LayerNorm (no bias) on each
head of q and k, every head with its own weight, before RoPE (stored as one LayerNorm per head,
q_layernorm.norms.{h}); and `use_parallel_residual`, Phi-2's block (one norm whose output attention and MLP both
read, x = x + attention(norm(x)) + mlp(norm(x))).

GGUF (llama.cpp's "stablelm"): Llama's tensor names, RoPE's width as rope.dimension_count, and no RoPE base
(llama.cpp's 10000). What is optional is told by the tensors, as llama.cpp does: q/k/v biases, the per-head norms
(the converter stacked each layer's into one [heads, hd] tensor, attn_q_norm: cut per head here) and, without
ffn_norm, the parallel block."""

from __future__ import annotations

import numpy as np

from tinyinfer.config import Config
from tinyinfer.families.common import no_window
from tinyinfer.families.family import Family
from tinyinfer.families.llama import attention, load_body, read_body
from tinyinfer.weights import Getter
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config, named, rotary_factor

DEFAULTS = dict(max_position_embeddings=4096, layer_norm_eps=1e-5, hidden_act="silu", rope_theta=10000.0,
                tie_word_embeddings=False, num_key_value_heads=32, use_qkv_bias=False, qk_layernorm=False,
                use_parallel_residual=False)
STABLELM_PARTIAL_ROTARY_FACTOR = 0.25  # StableLmConfig's default (not a field of the class)


def read_config(c: dict) -> dict:
    params = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})  # as StableLmConfig reads the dialects
    factor = params.get("partial_rotary_factor", c.get("partial_rotary_factor", STABLELM_PARTIAL_ROTARY_FACTOR))
    fields = read_body({**c, "rms_norm_eps": c["layer_norm_eps"], "head_dim": None}, ("use_qkv_bias", False, False),
                       no_window)  # LayerNorm's epsilon
    parallel = c["use_parallel_residual"]
    return dict(fields, norm="layernorm", partial_rotary_factor=factor, qk_norm=c["qk_layernorm"],
                qk_norm_span="each_head", qk_norm_kind="layernorm_no_bias", parallel_residual=parallel,
                shared_input_norm=parallel)


def qk_norms(get: Getter, cfg: Config, p: str, name: str, n_heads: int) -> np.ndarray:
    """The per-head LayerNorms of q or k (`name`), {name}_layernorm.norms.{h}, stacked.  -> [heads, hd]"""
    return np.stack([get(f"{p}.{name}_layernorm.norms.{h}.weight", (cfg.head_dim,)) for h in range(n_heads)])


def load_params(get: Getter, cfg: Config) -> dict:
    return load_body(get, cfg, attention_params=lambda g, c, p: attention(g, c, p, qk_norms=qk_norms))


def gguf_config(m, names: set) -> dict:
    c = llama_like_config(m, names, "stablelm")
    return c | {"layer_norm_eps": m["attention.layer_norm_epsilon"],
                "partial_rotary_factor": rotary_factor(m, c["head_dim"]),
                "use_qkv_bias": "blk.0.attn_q.bias" in names, "qk_layernorm": "blk.0.attn_q_norm.weight" in names,
                "use_parallel_residual": "blk.0.ffn_norm.weight" not in names}


GGUF_TENSORS = LLAMA_TENSORS | named({}, {"attn_q_norm": "self_attn.q_layernorm.norms.{e}",
                                          "attn_k_norm": "self_attn.k_layernorm.norms.{e}"})  # [heads, hd]: per head


FAMILY = Family("stablelm", DEFAULTS, read_config, load_params, gguf=GGUFLayout("stablelm", gguf_config, GGUF_TENSORS))
