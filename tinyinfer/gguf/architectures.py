"""Each GGUF architecture as the Hugging Face family tinyinfer already reads: its config.json and its tensor names.

llama.cpp's converter (convert_hf_to_gguf.py) turns a Hugging Face checkpoint into one GGUF file: config.json
becomes metadata keys under the architecture's name (`llama.embedding_length` = hidden_size), and the tensors
get llama.cpp's names (`blk.3.attn_q.weight` = model.layers.3.self_attn.q_proj.weight). Some it re-lays out on
the way; this module says, per architecture, how to go back:

    config      GGUF metadata -> the fields of config.json (then tinyinfer/config.py reads them as usual)
    names       GGUF tensor name (without .weight/.bias) -> the family's name ({i}: layer, {e}: expert)
    re-layouts  undone on each tensor as it is read:
        llama (Llama, Mistral, Mixtral): q and k rows permuted per head, from rotate-half pairs (i, i + hd/2)
                 to neighbouring pairs (2i, 2i+1), llama.cpp's rotary convention: `unpermute_rows`
        gemma, gemma2, gemma3: 1 added to every norm's weight (Gemma scales by 1 + weight): subtracted
        gpt2:    Conv1D weights [in, out] transposed to [out, in]: transposed back
        MoE:     the experts of a layer merged into one [E, out, in] tensor (ffn_gate_exps): cut per expert

    >>> unpermute_rows(1, 4).tolist()  # GGUF's rows (q0, q2, q1, q3) of one head -> the file's (q0, q1, q2, q3)
    [0, 2, 1, 3]

Supported: llama (and mistral, Mixtral as llama with experts), qwen2, qwen3, qwen2moe, qwen3moe, gemma, gemma2,
gemma3, phi3, gpt2. Any other `general.architecture` is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tinyinfer.errors import TinyInferError

LLAMA_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LLAMA_LAYER = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
MIXTRAL_LAYER = LLAMA_LAYER | {
    "ffn_gate_inp": "block_sparse_moe.gate", "ffn_gate_exps": "block_sparse_moe.experts.{e}.w1",
    "ffn_up_exps": "block_sparse_moe.experts.{e}.w3", "ffn_down_exps": "block_sparse_moe.experts.{e}.w2",
}
QWEN_MOE_LAYER = LLAMA_LAYER | {
    "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.experts.{e}.gate_proj", "ffn_up_exps": "mlp.experts.{e}.up_proj",
    "ffn_down_exps": "mlp.experts.{e}.down_proj", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
GEMMA2_LAYER = LLAMA_LAYER | {  # four norms: each sublayer's input and output
    "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
PHI3_LAYER = LLAMA_LAYER | {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}  # fused in both
GPT2_TOP = {"token_embd": "wte", "position_embd": "wpe", "output_norm": "ln_f", "output": "lm_head"}
GPT2_LAYER = {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_norm": "ln_2",
              "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}


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


@dataclass(frozen=True)
class Architecture:
    """One GGUF architecture: its config.json fields (`config(metadata, tensor names)`), its tensor names (`top`,
    `layer` under `layer_prefix`), `relayout(gguf_base_name, array, config fields)` undoing the converter's
    re-layouts, and `reshaped(gguf_base_name, shape)`: the shape a re-layout gives (most keep it)."""

    config: Callable[[Metadata, set], dict]
    layer: dict
    top: dict = field(default_factory=lambda: LLAMA_TOP)
    layer_prefix: str = "model.layers.{i}."
    relayout: Callable | None = None
    reshaped: Callable = lambda name, shape: shape


# -- config.json from metadata -------------------------------------------------------------------------------------

def llama_like_config(m: Metadata, names: set, model_type: str) -> dict:
    """The fields every Llama-like architecture writes the same way."""
    heads = m["attention.head_count"]
    kv_heads = m.get("attention.head_count_kv", heads)
    if isinstance(heads, list) or isinstance(kv_heads, list):
        raise TinyInferError(f"{m.path}: head counts that vary per layer are not supported")
    d = m["embedding_length"]
    c = {"model_type": model_type, "hidden_size": d, "num_hidden_layers": m["block_count"],
         "intermediate_size": m.get("feed_forward_length", 0), "num_attention_heads": heads,
         "num_key_value_heads": kv_heads, "head_dim": m.get("attention.key_length", d // heads),
         "max_position_embeddings": m["context_length"], "rope_theta": m.get("rope.freq_base", 10000.0),
         "rms_norm_eps": m.get("attention.layer_norm_rms_epsilon", 1e-6),
         "tie_word_embeddings": "output.weight" not in names}
    if m.get("attention.value_length", c["head_dim"]) != c["head_dim"]:
        raise TinyInferError(f"{m.path}: keys and values of different widths are not supported")
    if "rope_freqs.weight" in names or "rope_factors_long.weight" in names:
        raise TinyInferError(f"{m.path}: per-frequency RoPE factors (rope_freqs / rope_factors_long: Llama 3.1's or "
                             "Phi-3-128k's scaled RoPE) are not supported; use the model's Hugging Face folder")
    scaling = m.get("rope.scaling.type", "none")
    if scaling == "linear":
        c["rope_scaling"] = {"rope_type": "linear", "factor": m["rope.scaling.factor"]}
    elif scaling != "none":
        raise TinyInferError(f"{m.path}: RoPE scaling {scaling!r} in a GGUF file is not supported (only linear)")
    return c


def experts(m: Metadata) -> dict:
    return {"num_experts": m["expert_count"], "num_experts_per_tok": m["expert_used_count"]}


def llama_config(m: Metadata, names: set) -> dict:
    """Llama and Mistral; with experts (`expert_count`), Mixtral."""
    if m.get("expert_count", 0):
        return llama_like_config(m, names, "mixtral") | {"num_local_experts": m["expert_count"],
                                                         "num_experts_per_tok": m["expert_used_count"],
                                                         "sliding_window": None}
    model_type = "mistral" if m.arch == "mistral" else "llama"
    c = llama_like_config(m, names, model_type) | {"attention_bias": "blk.0.attn_q.bias" in names}
    return c | ({"sliding_window": m.get("attention.sliding_window")} if model_type == "mistral" else {})


def qwen_config(model_type: str) -> Callable:
    def config(m: Metadata, names: set) -> dict:
        return llama_like_config(m, names, model_type) | {"use_sliding_window": False}
    return config


def qwen2moe_config(m: Metadata, names: set) -> dict:
    return llama_like_config(m, names, "qwen2_moe") | experts(m) | {
        "moe_intermediate_size": m["expert_feed_forward_length"], "use_sliding_window": False,
        "shared_expert_intermediate_size": m.get("expert_shared_feed_forward_length", 0), "mlp_only_layers": []}


def qwen3moe_config(m: Metadata, names: set) -> dict:
    """Qwen3-MoE: llama.cpp always renormalises the chosen experts' weights (norm_topk_prob), as the models do."""
    return llama_like_config(m, names, "qwen3_moe") | experts(m) | {
        "moe_intermediate_size": m["expert_feed_forward_length"], "norm_topk_prob": True, "mlp_only_layers": []}


def gemma_config(m: Metadata, names: set) -> dict:
    return llama_like_config(m, names, "gemma") | {"hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": True}


def gemma2_config(m: Metadata, names: set) -> dict:
    """Gemma 2: llama.cpp scales scores by head_dim^-1/2 (query_pre_attn_scalar = head_dim) and soft-caps both."""
    c = llama_like_config(m, names, "gemma2")
    return c | {"hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                "query_pre_attn_scalar": c["head_dim"], "sliding_window": m.get("attention.sliding_window", 4096),
                "attn_logit_softcapping": m.get("attn_logit_softcapping", 50.0),
                "final_logit_softcapping": m.get("final_logit_softcapping", 30.0)}


GEMMA3_LOCAL_THETA = 10_000.0  # llama.cpp's Gemma 3: the sliding layers' RoPE base is fixed, not in the file
GEMMA3_PATTERN = 6  # and every sixth layer attends globally


def gemma3_config(m: Metadata, names: set) -> dict:
    c = llama_like_config(m, names, "gemma3_text")
    n = c["num_hidden_layers"]
    layer_types = ["full_attention" if (i + 1) % GEMMA3_PATTERN == 0 else "sliding_attention" for i in range(n)]
    return c | {"hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                "query_pre_attn_scalar": c["head_dim"], "sliding_window": m["attention.sliding_window"],
                "layer_types": layer_types, "rope_local_base_freq": GEMMA3_LOCAL_THETA}


def phi3_config(m: Metadata, names: set) -> dict:
    c = llama_like_config(m, names, "phi3")
    return c | {"partial_rotary_factor": m.get("rope.dimension_count", c["head_dim"]) / c["head_dim"],
                "rms_norm_eps": m.get("attention.layer_norm_rms_epsilon", 1e-5),
                "sliding_window": m.get("attention.sliding_window"),
                "original_max_position_embeddings": m.get("rope.scaling.original_context_length",
                                                          c["max_position_embeddings"])}


def gpt2_config(m: Metadata, names: set) -> dict:
    return {"model_type": "gpt2", "n_embd": m["embedding_length"], "n_layer": m["block_count"],
            "n_head": m["attention.head_count"], "n_positions": m["context_length"],
            "n_inner": m.get("feed_forward_length"), "layer_norm_epsilon": m["attention.layer_norm_epsilon"],
            "tie_word_embeddings": True}  # the converter writes the embedding again as output.weight


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


def gpt2_relayout(name: str, w: np.ndarray, c: dict) -> np.ndarray:
    """GPT-2's Conv1D weights [in, out]: the converter transposed them to [out, in]."""
    return np.ascontiguousarray(w.T) if w.ndim == 2 and name in GPT2_LAYER else w


def qwen2moe_relayout(name: str, w: np.ndarray, c: dict) -> np.ndarray:
    """The shared expert's gate [d] is an nn.Linear(d, 1) weight [1, d] in the family's files."""
    return w.reshape(1, -1) if name == "ffn_gate_inp_shexp" else w


def gpt2_reshaped(name: str, shape: tuple) -> tuple:
    return shape[::-1] if len(shape) == 2 and name in GPT2_LAYER else shape


def qwen2moe_reshaped(name: str, shape: tuple) -> tuple:
    return (1, *shape) if name == "ffn_gate_inp_shexp" else shape


ARCHITECTURES = {
    "llama": Architecture(llama_config, LLAMA_LAYER, relayout=llama_relayout),
    "mistral": Architecture(llama_config, LLAMA_LAYER, relayout=llama_relayout),
    "qwen2": Architecture(qwen_config("qwen2"), LLAMA_LAYER),
    "qwen3": Architecture(qwen_config("qwen3"), LLAMA_LAYER),
    "qwen2moe": Architecture(qwen2moe_config, QWEN_MOE_LAYER, relayout=qwen2moe_relayout, reshaped=qwen2moe_reshaped),
    "qwen3moe": Architecture(qwen3moe_config, QWEN_MOE_LAYER),
    "gemma": Architecture(gemma_config, LLAMA_LAYER, relayout=gemma_relayout),
    "gemma2": Architecture(gemma2_config, GEMMA2_LAYER, relayout=gemma_relayout),
    "gemma3": Architecture(gemma3_config, GEMMA2_LAYER, relayout=gemma_relayout),
    "phi3": Architecture(phi3_config, PHI3_LAYER),
    "gpt2": Architecture(gpt2_config, GPT2_LAYER, top=GPT2_TOP, layer_prefix="h.{i}.", relayout=gpt2_relayout,
                         reshaped=gpt2_reshaped),
}
MIXTRAL = Architecture(llama_config, MIXTRAL_LAYER, relayout=llama_relayout)  # llama with expert_count > 0


def architecture(metadata: dict, path) -> tuple[Architecture, Metadata]:
    """The Architecture of a file and its metadata view; an architecture tinyinfer cannot run is refused by name."""
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise TinyInferError(f"{path}: GGUF architecture {arch!r} is not supported; tinyinfer runs "
                             f"{', '.join(ARCHITECTURES)} (and Mixtral, as llama with experts)")
    m = Metadata(metadata, arch, path)
    return (MIXTRAL if arch == "llama" and m.get("expert_count", 0) else ARCHITECTURES[arch]), m
