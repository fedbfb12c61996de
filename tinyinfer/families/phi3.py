"""Phi-3: a Llama with q/k/v and gate/up fused in the file (split at load), RoPE on the first
`partial_rotary_factor` of each head, and a window over every layer when `sliding_window` is set.

The long-context models (Phi-3-128k, Phi-3.5, Phi-4-mini) use "longrope" ("su" and "yarn" are its old names
for Phi-3): transformers rotates with `short_factor`-stretched frequencies while a sequence fits in
`original_max_position_embeddings`, and past that recomputes everything with `long_factor` (both times an
attention factor). tinyinfer implements the first regime only, so the context window of such a model is
`original_max_position_embeddings` (4096 for Phi-3-mini-128k): longer sequences are refused.
"""

from __future__ import annotations

import math

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families.common import NO_BIASES, window_on_every_layer
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE, load_body, read_body
from tinyinfer.weights import Getter, linear
from tinyinfer.gguf.architectures import LLAMA_TENSORS, GGUFLayout, llama_like_config, named, rotary_factor

DEFAULTS = dict(LLAMA_LIKE, max_position_embeddings=4096, rms_norm_eps=1e-5, num_key_value_heads=None,
                sliding_window=None, original_max_position_embeddings=4096)


def read_config(c: dict) -> dict:
    params = c.get("rope_scaling") or c.get("rope_parameters") or {}
    params = params if isinstance(params, dict) else {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ("default", "longrope", "su", "yarn"):  # what transformers' Phi3Config accepts
        raise TinyInferError(f"config.json (phi3): rope scaling type {kind!r} is not supported; Phi-3 models use "
                             "default RoPE or longrope")
    plain_rope = {key: value for key, value in params.items() if key not in ("type", "rope_type")}
    fields = read_body({**c, "rope_scaling": None, "rope_parameters": plain_rope}, NO_BIASES,
                       window_on_every_layer)  # (theta, no scaling)
    fields["partial_rotary_factor"] = params.get("partial_rotary_factor") or c.get("partial_rotary_factor") or 1.0
    if kind != "default":
        rotary_dim = int(fields["head_dim"] * fields["partial_rotary_factor"])  # as Config.rotary_dim
        n_pairs = (rotary_dim + 1) // 2  # frequencies (as inv_frequencies)
        fields |= longrope(c, params, n_pairs)
    return fields


def longrope(c: dict, params: dict, n_pairs: int) -> dict:
    """The short-sequence regime of longrope: `short_factor` (one per rotated pair) divides the frequencies,
    and q and k are scaled by the attention factor, sqrt(1 + ln(stretch) / ln(original length)), where the
    stretch is `factor` or max_position_embeddings / original_max_position_embeddings (as transformers does)."""
    original = c["original_max_position_embeddings"]
    for key in ("short_factor", "long_factor"):
        if not isinstance(params.get(key), list) or len(params[key]) != n_pairs:
            raise TinyInferError(f"config.json (phi3): longrope needs {key}, a list of {n_pairs} numbers (one per "
                                 f"rotated pair of a head); it has {params.get(key)!r}")
    stretch = params.get("factor") or c["max_position_embeddings"] / original
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if stretch <= 1 else math.sqrt(1 + math.log(stretch) / math.log(original))
    scaling = {"rope_type": "longrope", "short_factor": params["short_factor"], "attention_factor": attention_factor,
               "max_position_embeddings": c["max_position_embeddings"]}  # what the file allows, for error messages
    return {"rope_scaling": scaling, "max_seq_len": min(c["max_position_embeddings"], original)}


def attention(get: Getter, cfg: Config, p: str) -> dict:
    """Phi-3 stores q, k and v as one matrix already, in tinyinfer's order: q rows, then k rows, then v rows."""
    q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {"qkv": linear(get, f"{p}.qkv_proj.weight", cfg.d_model, q_dim + 2 * kv_dim),
            "o": linear(get, f"{p}.o_proj.weight", q_dim, cfg.d_model)}


def mlp(get: Getter, cfg: Config, i: int) -> dict:
    """Phi-3's gate_up_proj [2 d_ff, d]: the gate's rows, then up's (transformers splits it with chunk(2))."""
    p, ff = f"model.layers.{i}.mlp", cfg.d_ff
    gate_up = linear(get, f"{p}.gate_up_proj.weight", cfg.d_model, 2 * ff)  # [d, 2 ff]
    return {"gate": np.ascontiguousarray(gate_up[:, :ff]), "up": np.ascontiguousarray(gate_up[:, ff:]),
            "down": linear(get, f"{p}.down_proj.weight", ff, cfg.d_model)}


def load_params(get: Getter, cfg: Config) -> dict:
    return load_body(get, cfg, mlp, attention)


def gguf_config(m, names: set) -> dict:
    c = llama_like_config(m, names, "phi3")
    return c | {"partial_rotary_factor": rotary_factor(m, c["head_dim"]),
                "rms_norm_eps": m.get("attention.layer_norm_rms_epsilon", 1e-5),
                "sliding_window": m.get("attention.sliding_window"),
                "original_max_position_embeddings": m.get("rope.scaling.original_context_length",
                                                          c["max_position_embeddings"])}


GGUF_TENSORS = LLAMA_TENSORS | named({}, {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"})  # fused


FAMILY = Family("phi3", DEFAULTS, read_config, load_params, gguf=GGUFLayout("phi3", gguf_config, GGUF_TENSORS))
