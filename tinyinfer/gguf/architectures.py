"""A GGUF architecture as the Hugging Face family tinyinfer already reads: its config.json and its tensor names.

llama.cpp's converter (convert_hf_to_gguf.py) turns a Hugging Face checkpoint into one GGUF file: config.json
becomes metadata keys under the architecture's name (`llama.embedding_length` = hidden_size), and the tensors
get llama.cpp's names (`blk.3.attn_q.weight` = model.layers.3.self_attn.q_proj.weight). Some it re-lays out on
the way. Each family module (tinyinfer/families/) says how to go back, in a `GGUFLayout`:

    architecture  the file's general.architecture
    config        GGUF metadata -> the fields of config.json (which the family's reader then reads as usual)
    tensors       GGUF tensor name (without .weight/.bias) -> the family's name ({i}: layer, {e}: one slice of a
                  stacked tensor: an expert, or StableLM's per-head norm); or a function of the file's config.json
                  giving that table (Falcon's attn_norm is its MLP's norm, or its layer's only one); a key
                  with its .weight/.bias maps to the family's whole name (gpt-oss's attn_sinks.weight is
                  self_attn.sinks)
    relayout      undoes the converter's re-layouts on each tensor read:
        llama, mistral, mixtral: q and k rows permuted per head, from rotate-half pairs (i, i + hd/2) to
                 neighbouring pairs (2i, 2i+1), llama.cpp's rotary convention: undone by `unpermute_rows`
        gemma, gemma2, gemma3: 1 added to every norm's weight (Gemma scales by 1 + weight): subtracted
        gpt2:    Conv1D weights [in, out] transposed to [out, in]: transposed back
        falcon:  query_key_value's rows regrouped from (per key/value head: its queries, its key, its value) to
                 all queries, all keys, all values ("jploski" layout): put back in groups
        stablelm: StableLM 2's per-head q/k norms stacked into one [heads, hd] tensor: cut per head (reader)
        gptneox: query_key_value's rows regrouped from per head (q, k, v of head 0, ...) to all q, all k, all v:
                 put back per head
        granite, smollm3: Llama's q/k permutation (their converters are LlamaModel's)
        MoE:     a layer's experts merged into one [E, out, in] tensor (ffn_gate_exps): cut per expert (reader)
        gpt-oss: its fused gate_up_proj split into ffn_gate_exps and ffn_up_exps: read apart (its loader)

This module holds what the families share: the metadata view, the config fields every Llama-like file writes
alike, the Llama tensor names, and the re-layouts.

    >>> unpermute_rows(1, 4).tolist()  # GGUF's rows (q0, q2, q1, q3) of one head -> the file's (q0, q1, q2, q3)
    [0, 2, 1, 3]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from tinyinfer.errors import TinyInferError


class Metadata:
    """The metadata keys of one architecture: `m["embedding_length"]` reads `{arch}.embedding_length`."""

    def __init__(self, metadata: dict, arch: str, path):
        self.all, self.arch, self.path = metadata, arch, path

    def __getitem__(self, key: str):
        full = f"{self.arch}.{key}"
        if full not in self.all:
            raise TinyInferError(f"{self.path}: metadata key {full!r} is missing; the file was not written by "
                                 "llama.cpp's converter or is damaged")
        return self.all[full]

    def get(self, key: str, default=None):
        return self.all.get(f"{self.arch}.{key}", default)


def keep_shape(name: str, shape: tuple) -> tuple:
    return shape


@dataclass(frozen=True)
class GGUFLayout:
    """How one family is stored in GGUF (see the module docstring). `reshaped(name, shape)` is the shape
    `relayout` gives a tensor of GGUF base name `name` (most keep it); `experts`: the layout of files whose
    metadata has an expert_count (Mixtral is written as llama with experts)."""

    architecture: str
    config: Callable[[Metadata, set], dict]
    tensors: Mapping[str, str] | Callable[[dict], Mapping[str, str]]
    relayout: Callable[[str, np.ndarray, dict], np.ndarray] | None = None
    reshaped: Callable[[str, tuple], tuple] = keep_shape
    experts: bool = False

    def tensor_table(self, hf_config: dict) -> Mapping[str, str]:
        """The `tensors` table of one file, whose config.json is `hf_config`."""
        return self.tensors(hf_config) if callable(self.tensors) else self.tensors


def named(top: dict, layer: dict, prefix: str = "model.layers.{i}.") -> dict:
    """One `tensors` table from GGUF's top-level names and its per-layer names (blk.{i}.NAME -> prefix + ...)."""
    return top | {f"blk.{{i}}.{gguf}": prefix + family for gguf, family in layer.items()}


LLAMA_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LLAMA_LAYER = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
LLAMA_TENSORS = named(LLAMA_TOP, LLAMA_LAYER)
EXPERT_TENSORS = named({}, {"ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.experts.{e}.gate_proj",
                            "ffn_up_exps": "mlp.experts.{e}.up_proj", "ffn_down_exps": "mlp.experts.{e}.down_proj"})
GEMMA2_TENSORS = LLAMA_TENSORS | named({}, {  # four norms: each sublayer's input and output
    "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm"})


# -- config.json from metadata -------------------------------------------------------------------------------------

def llama_like_config(m: Metadata, names: set, model_type: str, yarn: bool = False) -> dict:
    """The config.json fields every Llama-like architecture writes the same way (`yarn`: `rope_config`'s)."""
    heads = m["attention.head_count"]
    kv_heads = m.get("attention.head_count_kv", heads)
    if isinstance(heads, list) or isinstance(kv_heads, list):
        raise TinyInferError(f"{m.path}: head counts that vary per layer are not supported")
    d = m["embedding_length"]
    c = {"model_type": model_type, "hidden_size": d, "num_hidden_layers": m["block_count"],
         "intermediate_size": m.get("feed_forward_length", 0), "num_attention_heads": heads,
         "num_key_value_heads": kv_heads, "head_dim": m.get("attention.key_length", d // heads),
         "max_position_embeddings": m["context_length"],
         "rms_norm_eps": m.get("attention.layer_norm_rms_epsilon", 1e-6),
         "tie_word_embeddings": "output.weight" not in names}
    if m.get("attention.value_length", c["head_dim"]) != c["head_dim"]:
        raise TinyInferError(f"{m.path}: keys and values of different widths are not supported")
    return c | rope_config(m, yarn)


def rope_config(m: Metadata, yarn: bool = False) -> dict:
    """RoPE's base (10000 where the file states none, as llama.cpp takes it) and its linear scaling, and YaRN's
    where the family reads it (`yarn`, `yarn_scaling`); the other scalings of the metadata are refused by name
    (the factors stored as tensors: `rope_from_tensors`)."""
    c = {"rope_theta": m.get("rope.freq_base", 10000.0)}
    scaling = m.get("rope.scaling.type", "none")
    if scaling == "linear":
        c["rope_scaling"] = {"rope_type": "linear", "factor": m["rope.scaling.factor"]}
    elif scaling == "yarn" and yarn:
        c["rope_scaling"] = yarn_scaling(m)
    elif scaling != "none":
        supported = "linear, yarn" if yarn else "linear"
        raise TinyInferError(f"{m.path}: RoPE scaling {scaling!r} in a GGUF file is not supported here (only "
                             f"{supported})")
    return c


YARN_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0}  # llama.cpp's (llama_context_params) without the keys


def yarn_scaling(m: Metadata) -> dict:
    """YaRN's parameters as llama.cpp reads them: rope.scaling.factor and .original_context_length, and the
    optional .yarn_beta_fast, .yarn_beta_slow (YARN_DEFAULTS), .yarn_attn_factor (else 0.1 ln(factor) + 1, as
    ggml's rope computes it). A file whose extrapolation mix (.yarn_ext_factor) is not 1, or which sets
    .yarn_log_multiplier, is refused by name: tinyinfer's YaRN is transformers'."""
    if m.get("rope.scaling.yarn_ext_factor", 1.0) != 1.0:
        raise TinyInferError(f"{m.path}: rope.scaling.yarn_ext_factor {m['rope.scaling.yarn_ext_factor']} is not "
                             "supported: only YaRN's full extrapolation mix, 1.0")
    if m.get("rope.scaling.yarn_log_multiplier") is not None:
        raise TinyInferError(f"{m.path}: rope.scaling.yarn_log_multiplier (DeepSeek's mscale) is not supported")
    yarn = {"rope_type": "yarn", "factor": m["rope.scaling.factor"],
            "original_max_position_embeddings": m["rope.scaling.original_context_length"]}
    yarn |= {field: m.get(f"rope.scaling.yarn_{field}", default) for field, default in YARN_DEFAULTS.items()}
    if m.get("rope.scaling.yarn_attn_factor") is not None:
        yarn["attention_factor"] = m["rope.scaling.yarn_attn_factor"]
    return yarn


ROPE_TENSORS = ("rope_freqs", "rope_factors_short", "rope_factors_long")  # RoPE factors stored as tensors


def rope_from_tensors(m: Metadata, c: dict, factors: dict[str, np.ndarray]) -> dict:
    """config.json's RoPE fields for the per-pair factors the converter stores as tensors (`factors`: GGUF base
    name -> [pairs] float32; none: nothing changes):

        rope_freqs                 Llama 3.1's "llama3" scaling, which the converter turns into one factor per
                                   pair (1 for the fast pairs, `factor` for the slow ones, a blend between):
                                   each pair's frequency is divided by its factor, at every length
        rope_factors_short/_long   Phi-3's longrope: the two lists of factors, with the attention factor and
                                   the original context in the metadata (rope.scaling.attn_factor,
                                   rope.scaling.original_context_length)
    """
    if "rope_freqs" in factors:
        if c.get("rope_scaling"):
            raise TinyInferError(f"{m.path}: both rope_freqs and rope.scaling.type {m.get('rope.scaling.type')!r}; "
                                 "a file scales RoPE one way: reconvert it from the Hugging Face folder")
        return {"rope_scaling": {"rope_type": "frequency_factors", "factors": factors["rope_freqs"].tolist()}}
    if "rope_factors_short" in factors or "rope_factors_long" in factors:
        missing = [f"{name}.weight" for name in ROPE_TENSORS[1:] if name not in factors]
        if missing:
            raise TinyInferError(f"{m.path}: longrope needs rope_factors_short and rope_factors_long; {missing[0]} is "
                                 "missing: the file is incomplete")
        return {"rope_scaling": {"rope_type": "longrope", "short_factor": factors["rope_factors_short"].tolist(),
                                 "long_factor": factors["rope_factors_long"].tolist(),
                                 "attention_factor": m.get("rope.scaling.attn_factor")},
                "original_max_position_embeddings": m["rope.scaling.original_context_length"]}
    return {}


def rotary_factor(m: Metadata, head_dim: int) -> float:
    """config.json's partial_rotary_factor from rope.dimension_count (how many coordinates of each head RoPE
    rotates; all without the key): n / head_dim, one float step up where rounding would put head_dim x factor
    under n (57 / 100 * 100 = 56.99...), so that every reader's int(head_dim * factor) is n again.

        >>> int(100 * rotary_factor(Metadata({"phi2.rope.dimension_count": 57}, "phi2", "x.gguf"), 100))
        57
    """
    n = m.get("rope.dimension_count", head_dim)
    factor = n / head_dim
    return factor if int(head_dim * factor) == n else float(np.nextafter(factor, 2 * factor))


def sliding_layer_types(m: Metadata, n_layers: int, period: int) -> list[str]:
    """config.json's layer_types, as llama.cpp's load_swa_pattern reads attention.sliding_window_pattern: one flag
    per layer (true: it slides), or a period n (layer i slides unless i % n == n - 1; 0: every layer slides);
    without the key, the architecture's `period`.

        >>> sliding_layer_types(Metadata({}, "cohere2", "x.gguf"), 4, 4)
        ['sliding_attention', 'sliding_attention', 'sliding_attention', 'full_attention']
    """
    pattern = m.get("attention.sliding_window_pattern", period)
    if not isinstance(pattern, list):
        pattern = [pattern == 0 or i % pattern < pattern - 1 for i in range(n_layers)]  # a period -> flags
    if len(pattern) != n_layers:
        raise TinyInferError(f"{m.path}: attention.sliding_window_pattern has {len(pattern)} flags for {n_layers} "
                             "layers; the file is damaged")
    return ["sliding_attention" if flag else "full_attention" for flag in pattern]


def expert_config(m: Metadata) -> dict:
    """A Mixture-of-Experts' counts and expert width."""
    return {"num_experts": m["expert_count"], "num_experts_per_tok": m["expert_used_count"],
            "moe_intermediate_size": m.get("expert_feed_forward_length")}


# -- re-layouts ----------------------------------------------------------------------------------------------

def unpermute_rows(n_heads: int, head_dim: int) -> np.ndarray:
    """The GGUF row behind each row of the original q (or k) projection of `n_heads` heads.

    llama.cpp rotates neighbouring pairs, Hugging Face's Llama pairs coordinate i with i + hd/2, so the converter
    moves row i + hd/2 of each head next to row i (`permute` in convert_hf_to_gguf.py): GGUF row 2i + j is the
    file's row i + j hd/2. Reading rows in this order undoes it.
    """
    half = head_dim // 2
    within = (np.arange(head_dim) % half) * 2 + np.arange(head_dim) // half  # original row r <- GGUF row within[r]
    return (np.arange(n_heads)[:, None] * head_dim + within).ravel()  # [n_heads * head_dim]


def llama_relayout(name: str, w: np.ndarray, c: dict) -> np.ndarray:
    """Undo the q/k row permutation (weights and biases alike)."""
    heads = {"attn_q": c["num_attention_heads"], "attn_k": c["num_key_value_heads"]}.get(name)
    return w if heads is None else w[unpermute_rows(heads, c["head_dim"])]


def gemma_relayout(name: str, w: np.ndarray, c: dict) -> np.ndarray:
    """Gemma's norms scale by 1 + weight; the converter stored 1 + weight (transformers subtracts 1 too)."""
    return w - np.float32(1) if name.endswith("norm") else w
