"""From a checkpoint's tensor names to tinyinfer's parameters.

Every architecture names its tensors its own way; this module translates them into one plain structure the
model code reads, checking every shape on the way:

    params = {
        "embed": [vocab, d],  "pos_embed": [max_len, d] (GPT-2 only),
        "layers": [{"attn_norm"?: {"weight"?, "bias"?} (what its kind learns: NORM_PARAMS; OLMo 1's nothing),
                    "qkv": [d, (H + 2*KV)*hd], "o": [H*hd, d], "qkv_bias"?, "o_bias"?,
                    "q_norm"?, "k_norm"?: [hd], [heads*hd] or [heads, hd] (see `qk_norm_weight`),
                    "mlp_norm"? (all but OLMo 2 and the one-norm parallel blocks): {...},
                    "mlp": {"gate"?, "up", "down", "up_bias"?, "down_bias"?},
                    "post_attn_norm"?, "post_mlp_norm"? (Gemma 2, OLMo 2: on each sublayer's output)}, ...],
        a Mixture-of-Experts layer's "mlp": {"router": [d, E], "experts": [{"gate", "up", "down"} x E],
                                             "shared"?: {"gate", "up", "down"}, "shared_gate"?: [d, 1],
                                             "router_bias"?: [E] (DeepSeek-V3, gpt-oss)},
        a gpt-oss layer also has "sinks": [H] (one attention-sink logit per head), and its experts "gate_bias",
        "up_bias" [ff] and "down_bias" [d],
        a latent-attention layer (DeepSeek) has "q" or "q_a", "q_a_norm", "q_b", and "kv_a", "kv_a_norm",
        "kv_b_key", "kv_b_value", "o" instead of "qkv" and "o" (see `mla_attention`),
        "final_norm": {"weight", "bias"?},  "lm_head": [d, vocab],  "lm_head_bias"?: [vocab] (Phi),
    }

Linear weights are stored as [in, out] so every projection reads `x @ w` (PyTorch's nn.Linear stores
[out, in]: those are transposed once, at load). The q, k and v projections read the same input, so they
are stacked side by side into one "qkv" matrix (GPT-2's c_attn and Phi-3's qkv_proj already are): one
matrix-vector product instead of three, which streams faster. Phi-3's fused gate_up_proj is split into
gate and up (its first and second halves). Files that fuse q, k and v in another order (GPT-NeoX and Falcon
by head or group, Cohere's q and k rotating neighbouring pairs) are reordered into this one at load, so the model
code knows one layout. DeepSeek-V3's latent attention has projections of its own (`mla_attention`), its
rotary columns reordered the same way. Tied embeddings share the embedding table, no copy.
`arrange_for_matvec` then picks each weight's memory order (not its shape) for the fastest decode step.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.llama2c import interleaved_to_half
from tinyinfer.norms import NORM_PARAMS
from tinyinfer.safetensors_io import Checkpoint

Getter = Callable[..., np.ndarray]


def tensor_getter(checkpoint: Checkpoint, dtype, strip_prefixes: tuple[str, ...] = ()) -> Getter:
    """`get(name, shape)`: the tensor `name` as `dtype`, after checking it exists and has `shape`."""
    names = set(checkpoint.names())

    def find(name: str) -> str:
        for prefix in ("",) + strip_prefixes:
            if prefix + name in names:
                return prefix + name
        raise TinyInferError(f"checkpoint is missing tensor {name!r}; the file does not match its config.json")

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        full = find(name)
        found = checkpoint.shape(full)
        if found != tuple(shape):
            raise TinyInferError(f"tensor {full!r} has shape {list(found)}, expected {list(shape)} from config.json")
        return checkpoint.get(full, dtype)

    get.has = lambda name: any(prefix + name in names for prefix in ("",) + strip_prefixes)  # layout probes
    return get


def linear(get: Getter, name: str, d_in: int, d_out: int) -> np.ndarray:
    """An nn.Linear weight ([out, in] on disk) as a contiguous [in, out] array."""
    return np.ascontiguousarray(get(name, (d_out, d_in)).T)  # [out, in] -> [in, out]


EMBEDDING_NAMES = {"gpt2": "wte.weight", "gpt_neox": "gpt_neox.embed_in.weight",
                   "falcon": "transformer.word_embeddings.weight"}  # the others: Llama's


def embedding_name(cfg: Config) -> str:
    return EMBEDDING_NAMES.get(cfg.model_type, "model.embed_tokens.weight")


def embedding_table(get: Getter, cfg: Config) -> np.ndarray:
    """The input embedding [V, d]. A tied file may hold the one table under the output layer's name only
    (lm_head.weight): transformers ties them either way round, and so does tinyinfer."""
    name = embedding_name(cfg)
    if cfg.tie_word_embeddings and not get.has(name) and get.has(head_name(get, cfg)):
        name = head_name(get, cfg)
    return get(name, (cfg.vocab_size, cfg.d_model))


def head_name(get: Getter, cfg: Config) -> str:
    """The output layer's tensor: lm_head.weight, or embed_out.weight in GPT-NeoX's Hub files (transformers 5
    renames it to lm_head.weight when it loads them, and back when it saves)."""
    return "embed_out.weight" if cfg.model_type == "gpt_neox" and get.has("embed_out.weight") else "lm_head.weight"


def norm(get: Getter, prefix: str, cfg: Config) -> dict:
    """The parameters of the norm `prefix` (.weight, .bias), those its kind learns (NORM_PARAMS): maybe none."""
    return {name: get(f"{prefix}.{name}", (cfg.d_model,)) for name in NORM_PARAMS[cfg.norm]}


# ---------------------------------------------------------------------------------------------------------------
# GPT-2: Conv1D layers already store [in, out]; q, k and v come stacked in one c_attn matrix.
# ---------------------------------------------------------------------------------------------------------------

def gpt2_params(get: Getter, cfg: Config) -> dict:
    d, V = cfg.d_model, cfg.vocab_size
    layers = []
    for i in range(cfg.n_layers):
        p = f"h.{i}"
        layers.append({
            "attn_norm": norm(get, f"{p}.ln_1", cfg),
            "qkv": get(f"{p}.attn.c_attn.weight", (d, 3 * d)), "qkv_bias": get(f"{p}.attn.c_attn.bias", (3 * d,)),
            "o": get(f"{p}.attn.c_proj.weight", (d, d)), "o_bias": get(f"{p}.attn.c_proj.bias", (d,)),
            "mlp_norm": norm(get, f"{p}.ln_2", cfg),
            "mlp": {"up": get(f"{p}.mlp.c_fc.weight", (d, cfg.d_ff)), "up_bias": get(f"{p}.mlp.c_fc.bias", (cfg.d_ff,)),
                    "down": get(f"{p}.mlp.c_proj.weight", (cfg.d_ff, d)), "down_bias": get(f"{p}.mlp.c_proj.bias", (d,))},
        })
    embed = embedding_table(get, cfg)
    lm_head = embed.T if cfg.tie_word_embeddings else linear(get, "lm_head.weight", d, V)  # tied: a [d, V] view
    return {"embed": embed, "pos_embed": get("wpe.weight", (cfg.max_seq_len, d)), "layers": layers,
            "final_norm": norm(get, "ln_f", cfg), "lm_head": lm_head}


# ---------------------------------------------------------------------------------------------------------------
# GPT-NeoX (Pythia): nn.Linear layers with biases, LayerNorm; q, k and v fused per head.
# ---------------------------------------------------------------------------------------------------------------

def gpt_neox_params(get: Getter, cfg: Config) -> dict:
    d, V, ff = cfg.d_model, cfg.vocab_size, cfg.d_ff
    layers = []
    for i in range(cfg.n_layers):
        p = f"gpt_neox.layers.{i}"
        layer = {
            "attn_norm": norm(get, f"{p}.input_layernorm", cfg),
            "qkv": np.ascontiguousarray(_neox_qkv(get(f"{p}.attention.query_key_value.weight", (3 * d, d)), cfg).T),
            "o": linear(get, f"{p}.attention.dense.weight", d, d),
            "mlp_norm": norm(get, f"{p}.post_attention_layernorm", cfg),
            "mlp": biased_mlp(get, f"{p}.mlp.dense_h_to_4h", f"{p}.mlp.dense_4h_to_h", d, ff),
        }
        if cfg.qkv_bias:  # with o's: attention_bias
            layer["qkv_bias"] = _neox_qkv(get(f"{p}.attention.query_key_value.bias", (3 * d,)), cfg)
            layer["o_bias"] = get(f"{p}.attention.dense.bias", (d,))
        layers.append(layer)
    embed = embedding_table(get, cfg)
    lm_head = embed.T if cfg.tie_word_embeddings else linear(get, head_name(get, cfg), d, V)
    return {"embed": embed, "layers": layers, "final_norm": norm(get, "gpt_neox.final_layer_norm", cfg),
            "lm_head": lm_head}


def biased_mlp(get: Getter, up: str, down: str, d: int, d_ff: int, with_bias: bool = True) -> dict:
    """An ungated MLP of two nn.Linear layers, with biases (GPT-NeoX, Phi; StarCoder2's `use_bias`), named `up`
    and `down` in the file."""
    mlp = {"up": linear(get, f"{up}.weight", d, d_ff), "down": linear(get, f"{down}.weight", d_ff, d)}
    if with_bias:
        mlp |= {"up_bias": get(f"{up}.bias", (d_ff,)), "down_bias": get(f"{down}.bias", (d,))}
    return mlp


def _neox_qkv(w: np.ndarray, cfg: Config) -> np.ndarray:
    """GPT-NeoX's query_key_value rows (or bias) head by head, [q k v of head 0, q k v of head 1, ...], reordered
    to tinyinfer's [q of every head, k of every head, v of every head].  [3d, ...] -> [3d, ...]"""
    H, hd = cfg.n_heads, cfg.head_dim
    per_head = w.reshape(H, 3, hd, *w.shape[1:])  # [3d, ...] -> [H, 3, hd, ...]
    return per_head.swapaxes(0, 1).reshape(w.shape)  # -> [3, H, hd, ...] -> [3d, ...]


# ---------------------------------------------------------------------------------------------------------------
# Falcon: LayerNorm, nn.Linear layers (biases with `bias`); q, k and v fused in groups.
# ---------------------------------------------------------------------------------------------------------------

def falcon_params(get: Getter, cfg: Config) -> dict:
    d, V, ff = cfg.d_model, cfg.vocab_size, cfg.d_ff
    rows = _falcon_qkv_rows(cfg)
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
    embed = embedding_table(get, cfg)
    lm_head = embed.T if cfg.tie_word_embeddings else linear(get, "lm_head.weight", d, V)
    return {"embed": embed, "layers": layers, "final_norm": norm(get, "transformer.ln_f", cfg), "lm_head": lm_head}


def _falcon_qkv_rows(cfg: Config) -> np.ndarray:
    """Falcon's query_key_value rows come in groups, one per key/value head: the group's query heads, then its key,
    then its value (Falcon-40B: 8 groups of 16 + 2 heads; Falcon-7B's multi-query: one group of 71 + 2; without
    multi_query, one group per head, [q, k, v]). The file's row behind each of tinyinfer's [all q | all k | all v].

    >>> from tinyinfer.config import Config
    >>> _falcon_qkv_rows(Config("falcon", 10, 4, 1, 2, 1, 1, 4, 8)).tolist()  # 2 query heads, 1 group, head_dim 1
    [0, 1, 2, 3]
    >>> _falcon_qkv_rows(Config("falcon", 10, 4, 1, 2, 2, 1, 4, 8)).tolist()  # a group per head: q0 k0 v0 q1 k1 v1
    [0, 3, 1, 4, 2, 5]
    """
    per_group = cfg.n_heads // cfg.n_kv_heads
    heads = np.arange(cfg.n_kv_heads * (per_group + 2)).reshape(cfg.n_kv_heads, per_group + 2)  # the file's, by group
    order = np.concatenate([heads[:, :per_group].ravel(), heads[:, per_group], heads[:, per_group + 1]])  # q, k, v
    return (order[:, None] * cfg.head_dim + np.arange(cfg.head_dim)).ravel()  # heads -> rows


# ---------------------------------------------------------------------------------------------------------------
# Llama family (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, granite, smollm3, olmo, olmo2,
# stablelm; phi3 with fused weights, starcoder2 with an ungated MLP, cohere and cohere2 with interleaved RoPE):
# nn.Linear layers, RMSNorm (StableLM, StarCoder2, Cohere, OLMo: LayerNorm), a gated MLP.
# ---------------------------------------------------------------------------------------------------------------

def llama_attention(get: Getter, cfg: Config, p: str, o_name: str = "o_proj") -> dict:
    """q/k/v/o projections of one layer (`p` = "model.layers.{i}.self_attn"), biases and q/k norms as configured;
    the output projection is `o_name` (Phi calls it "dense")."""
    d, q_dim, kv_dim = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    widths = {"q": q_dim, "k": kv_dim, "v": kv_dim}
    attn = {"qkv": np.concatenate([linear(get, f"{p}.{n}_proj.weight", d, w) for n, w in widths.items()], axis=1),
            "o": linear(get, f"{p}.{o_name}.weight", q_dim, d)}  # qkv: 3 x [d, width] -> [d, q_dim + 2 kv_dim]
    if cfg.qkv_bias:
        attn["qkv_bias"] = np.concatenate([get(f"{p}.{n}_proj.bias", (w,)) for n, w in widths.items()])
    if cfg.o_bias:
        attn["o_bias"] = get(f"{p}.{o_name}.bias", (d,))
    if cfg.qk_norm:
        attn |= {"q_norm": qk_norm_weight(get, cfg, p, "q", cfg.n_heads), "k_norm": qk_norm_weight(get, cfg, p, "k",
                                                                                                  cfg.n_kv_heads)}
    return attn


def qk_norm_weight(get: Getter, cfg: Config, p: str, name: str, n_heads: int) -> np.ndarray:
    """The gain of q's or k's norm (`name`): one head wide, shared by all heads (Qwen3, Gemma 3); as wide as the
    whole projection (OLMoE, OLMo 2); or one row per head [heads, hd] ("each_head": Cohere stores it so, StableLM
    as one LayerNorm per head, q_layernorm.norms.{h}, stacked here)."""
    hd = cfg.head_dim
    if cfg.qk_norm_span == "head":
        return get(f"{p}.{name}_norm.weight", (hd,))
    if cfg.qk_norm_span == "full":
        return get(f"{p}.{name}_norm.weight", (n_heads * hd,))
    if cfg.model_type == "stablelm":
        return np.stack([get(f"{p}.{name}_layernorm.norms.{h}.weight", (hd,)) for h in range(n_heads)])  # [heads, hd]
    return get(f"{p}.{name}_norm.weight", (n_heads, hd))


def swiglu_mlp(get: Getter, p: str, d: int, d_ff: int, with_bias: bool = False) -> dict:
    mlp = {"gate": linear(get, f"{p}.gate_proj.weight", d, d_ff), "up": linear(get, f"{p}.up_proj.weight", d, d_ff),
           "down": linear(get, f"{p}.down_proj.weight", d_ff, d)}
    if with_bias:
        mlp |= {"gate_bias": get(f"{p}.gate_proj.bias", (d_ff,)), "up_bias": get(f"{p}.up_proj.bias", (d_ff,)),
                "down_bias": get(f"{p}.down_proj.bias", (d,))}
    return mlp


# tinyinfer's norm name -> the checkpoint's. Gemma 2 norms each sublayer's input and output, and its
# `post_attention_layernorm` is the attention's output norm, not (as in Llama) the MLP's input norm; OLMo 2
# has the two output norms alone.
NORM_NAMES = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"}
POST_NORM_NAMES = {"attn_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
                   "mlp_norm": "pre_feedforward_layernorm", "post_mlp_norm": "post_feedforward_layernorm"}


def llama_params(get: Getter, cfg: Config, mlp_params: Callable | None = None,
                 attention_params: Callable = llama_attention) -> dict:
    """`mlp_params(get, cfg, i)` builds layer i's MLP (MoE architectures pass their own), `attention_params(get,
    cfg, prefix)` its attention (Phi-3 passes its fused one)."""
    d, V = cfg.d_model, cfg.vocab_size
    mlp_params = mlp_params or (lambda g, c, i: swiglu_mlp(g, f"model.layers.{i}.mlp", c.d_model, c.d_ff, c.mlp_bias))
    norm_names = POST_NORM_NAMES if cfg.post_norms else NORM_NAMES
    if cfg.shared_input_norm:  # StableLM's parallel blocks: one norm per layer
        norm_names = {"attn_norm": NORM_NAMES["attn_norm"]}
    if not cfg.pre_norms:  # OLMo 2: the sublayers' outputs only, under Gemma 2's names
        norm_names = {key: name for key, name in norm_names.items() if key.startswith("post_")}
    layers = []
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}"
        layers.append({
            **{key: norm(get, f"{p}.{name}", cfg) for key, name in norm_names.items()},
            **attention_params(get, cfg, f"{p}.self_attn"),
            "mlp": mlp_params(get, cfg, i),
        })
    embed = embedding_table(get, cfg)
    # tied: the embedding table doubles as the output layer, [V, d] -> [d, V] as a view, no copy
    lm_head = embed.T if cfg.tie_word_embeddings else linear(get, "lm_head.weight", d, V)
    return {"embed": embed, "layers": layers, "final_norm": norm(get, "model.norm", cfg), "lm_head": lm_head}


def phi3_attention(get: Getter, cfg: Config, p: str) -> dict:
    """Phi-3 stores q, k and v as one matrix already, in tinyinfer's order: q rows, then k rows, then v rows."""
    q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {"qkv": linear(get, f"{p}.qkv_proj.weight", cfg.d_model, q_dim + 2 * kv_dim),
            "o": linear(get, f"{p}.o_proj.weight", q_dim, cfg.d_model)}


def phi3_mlp(get: Getter, cfg: Config, i: int) -> dict:
    """Phi-3's gate_up_proj [2 d_ff, d]: the gate's rows, then up's (transformers splits it with chunk(2))."""
    p, ff = f"model.layers.{i}.mlp", cfg.d_ff
    gate_up = linear(get, f"{p}.gate_up_proj.weight", cfg.d_model, 2 * ff)  # [d, 2 ff]
    return {"gate": np.ascontiguousarray(gate_up[:, :ff]), "up": np.ascontiguousarray(gate_up[:, ff:]),
            "down": linear(get, f"{p}.down_proj.weight", ff, cfg.d_model)}


def phi3_params(get: Getter, cfg: Config) -> dict:
    return llama_params(get, cfg, phi3_mlp, phi3_attention)


def cohere_attention(get: Getter, cfg: Config, p: str) -> dict:
    """Cohere rotates neighbouring pairs (x[2i], x[2i+1]) where tinyinfer pairs x[i] with x[i + hd/2]: q's and k's
    coordinates (columns of qkv, their biases, their norms' gains) are reordered per head into tinyinfer's layout,
    as llama2.c's are. Reordering q and k alike leaves every q.k, so the model, unchanged, and a LayerNorm over a
    head does not mind the order of its coordinates."""
    attn = llama_attention(get, cfg, p)
    hd, q_dim, kv_dim = cfg.head_dim, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    q_order, k_order = _halves_order(cfg.n_heads, hd), _halves_order(cfg.n_kv_heads, hd)
    columns = np.concatenate([q_order, q_dim + k_order, q_dim + kv_dim + np.arange(kv_dim)])  # v stays
    attn["qkv"] = np.ascontiguousarray(attn["qkv"][:, columns])
    if cfg.qkv_bias:
        attn["qkv_bias"] = attn["qkv_bias"][columns]
    if cfg.qk_norm:  # gains [heads, hd]
        attn["q_norm"] = attn["q_norm"].reshape(-1)[q_order].reshape(cfg.n_heads, hd)
        attn["k_norm"] = attn["k_norm"].reshape(-1)[k_order].reshape(cfg.n_kv_heads, hd)
    return attn


def _halves_order(n_heads: int, head_dim: int) -> np.ndarray:
    """Where each of tinyinfer's coordinates comes from in an interleaved-RoPE projection of `n_heads` heads.

    >>> _halves_order(1, 4)  # pairs (x0, x1), (x2, x3) -> (x0, x2), (x1, x3)
    array([0, 2, 1, 3])
    """
    return interleaved_to_half(np.arange(n_heads * head_dim)[:, None], n_heads).ravel()


def cohere_params(get: Getter, cfg: Config) -> dict:
    return llama_params(get, cfg, attention_params=cohere_attention)


def starcoder2_mlp(get: Getter, cfg: Config, i: int) -> dict:
    """StarCoder2's GELU MLP: c_fc (up), c_proj (down), biased with `use_bias`."""
    p = f"model.layers.{i}.mlp"
    return biased_mlp(get, f"{p}.c_fc", f"{p}.c_proj", cfg.d_model, cfg.d_ff, cfg.mlp_bias)


def starcoder2_params(get: Getter, cfg: Config) -> dict:
    return llama_params(get, cfg, starcoder2_mlp)


def phi_params(get: Getter, cfg: Config) -> dict:
    """Phi: one LayerNorm per layer (`shared_input_norm`), biases everywhere, the LM head's too."""
    d, V = cfg.d_model, cfg.vocab_size
    layers = [{"attn_norm": norm(get, f"model.layers.{i}.input_layernorm", cfg),
               **llama_attention(get, cfg, f"model.layers.{i}.self_attn", o_name="dense"),
               "mlp": biased_mlp(get, f"model.layers.{i}.mlp.fc1", f"model.layers.{i}.mlp.fc2", d, cfg.d_ff)}
              for i in range(cfg.n_layers)]
    embed = embedding_table(get, cfg)
    lm_head = embed.T if cfg.tie_word_embeddings else linear(get, "lm_head.weight", d, V)
    return {"embed": embed, "layers": layers, "final_norm": norm(get, "model.final_layernorm", cfg),
            "lm_head": lm_head, "lm_head_bias": get("lm_head.bias", (V,))}


# ---------------------------------------------------------------------------------------------------------------
# Mixture-of-Experts (mixtral, qwen2_moe, qwen3_moe, olmoe): a router and one SwiGLU MLP per expert.
# Files store one tensor set per expert (what save_pretrained writes):
#     Mixtral:      model.layers.{i}.block_sparse_moe.gate.weight, ...experts.{e}.w1 (gate) / w3 (up) / w2 (down)
#     Qwen, OLMoE:  model.layers.{i}.mlp.gate.weight, ...mlp.experts.{e}.gate_proj / up_proj / down_proj
# transformers 5 holds all experts of a layer fused in memory; a file saved from that state reads
#     model.layers.{i}.mlp.experts.gate_up_proj [E, 2*ff, d]  and  ...experts.down_proj [E, d, ff]
# and is accepted too.
# ---------------------------------------------------------------------------------------------------------------

def moe_mlp_params(get: Getter, cfg: Config, i: int) -> dict:
    """Layer i's feed-forward: a dense SwiGLU on non-MoE layers, else router + experts (+ shared expert)."""
    p = f"model.layers.{i}.mlp"
    if not cfg.is_moe_layer(i):
        return swiglu_mlp(get, p, cfg.d_model, cfg.d_ff, cfg.mlp_bias)
    if cfg.model_type == "mixtral" and not get.has(f"{p}.experts.gate_up_proj"):
        p = f"model.layers.{i}.block_sparse_moe"
    d, E, ff, shared_ff = cfg.d_model, cfg.n_experts, cfg.moe_d_ff, cfg.shared_expert_d_ff
    try:
        mlp = {"router": linear(get, f"{p}.gate.weight", d, E), "experts": _experts(get, cfg, p)}
        if shared_ff:
            mlp["shared"] = swiglu_mlp(get, f"{p}.shared_expert", d, shared_ff)
            mlp["shared_gate"] = linear(get, f"{p}.shared_expert_gate.weight", d, 1)
    except TinyInferError as e:  # name the config fields the expected shape came from
        raise TinyInferError(f"{e}; config.json says num_experts={E}, hidden_size={d}, expert width {ff} "
                             f"(intermediate_size or moe_intermediate_size), shared_expert_intermediate_size={shared_ff}") from None
    return mlp


def _experts(get: Getter, cfg: Config, p: str) -> list[dict]:
    d, E, ff = cfg.d_model, cfg.n_experts, cfg.moe_d_ff
    if get.has(f"{p}.experts.gate_up_proj"):  # fused: [E, 2*ff, d] (gate rows, then up rows) and [E, d, ff]
        gate_up = get(f"{p}.experts.gate_up_proj", (E, 2 * ff, d)).transpose(0, 2, 1)  # -> [E, d, 2*ff]
        down = get(f"{p}.experts.down_proj", (E, d, ff)).transpose(0, 2, 1)  # -> [E, ff, d]
        return [{"gate": np.ascontiguousarray(gate_up[e, :, :ff]), "up": np.ascontiguousarray(gate_up[e, :, ff:]),
                 "down": np.ascontiguousarray(down[e])} for e in range(E)]
    if cfg.model_type == "mixtral":  # w1 = gate, w3 = up, w2 = down
        return [{"gate": linear(get, f"{p}.experts.{e}.w1.weight", d, ff), "up": linear(get, f"{p}.experts.{e}.w3.weight", d, ff),
                 "down": linear(get, f"{p}.experts.{e}.w2.weight", ff, d)} for e in range(E)]
    return [swiglu_mlp(get, f"{p}.experts.{e}", d, ff) for e in range(E)]


def moe_params(get: Getter, cfg: Config) -> dict:
    return llama_params(get, cfg, moe_mlp_params)


# ---------------------------------------------------------------------------------------------------------------
# DeepSeek-V2 and V3: latent attention (tinyinfer/mla.py) and experts behind a group-limited router (tinyinfer/moe.py)
#     model.layers.{i}.self_attn.q_proj | q_a_proj, q_a_layernorm, q_b_proj;  kv_a_proj_with_mqa, kv_a_layernorm,
#         kv_b_proj, o_proj
#     model.layers.{i}.mlp.gate.weight, .gate.e_score_correction_bias, .experts..., .shared_experts.{gate,up,down}_proj
# ---------------------------------------------------------------------------------------------------------------

def mla_attention(get: Getter, cfg: Config, p: str) -> dict:
    """One layer's latent attention: {"q" | "q_a", "q_a_norm", "q_b"; "kv_a", "kv_a_norm", "kv_b_key" [H, dn, r],
    "kv_b_value" [H, r, dv], "o"}. kv_b_proj [H*(dn + dv), r] holds per head the key half (dn rows) then the value
    half (dv rows). With `interleaved_rope` (V3's rope_interleave; V2's complex numbers) the rotary coordinates of
    the queries and of the shared key (the last dr of each) pair neighbours in the file; they are reordered into
    tinyinfer's halves, as Cohere's are: moving q's and k's coordinates alike changes no dot product."""
    d, H, r, dr = cfg.d_model, cfg.n_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    dn, dv, ql = cfg.qk_nope_head_dim, cfg.v_head_dim, cfg.q_lora_rank
    q_columns, kv_columns = _mla_rope_columns(cfg)
    if ql:
        attn = {"q_a": linear(get, f"{p}.q_a_proj.weight", d, ql), "q_a_norm": get(f"{p}.q_a_layernorm.weight", (ql,)),
                "q_b": linear(get, f"{p}.q_b_proj.weight", ql, H * (dn + dr))[:, q_columns]}
    else:
        attn = {"q": linear(get, f"{p}.q_proj.weight", d, H * (dn + dr))[:, q_columns]}
    kv_b = get(f"{p}.kv_b_proj.weight", (H * (dn + dv), r)).reshape(H, dn + dv, r)  # [H*(dn + dv), r] -> [H, dn + dv, r]
    return attn | {"kv_a": linear(get, f"{p}.kv_a_proj_with_mqa.weight", d, r + dr)[:, kv_columns],
                   "kv_a_norm": get(f"{p}.kv_a_layernorm.weight", (r,)),
                   "kv_b_key": np.ascontiguousarray(kv_b[:, :dn]),  # [H, dn, r]
                   "kv_b_value": np.ascontiguousarray(kv_b[:, dn:].transpose(0, 2, 1)),  # [H, dv, r] -> [H, r, dv]
                   "o": linear(get, f"{p}.o_proj.weight", H * dv, d)}


def _mla_rope_columns(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """The file's column behind each of tinyinfer's in q (H heads of dn + dr) and in kv_a (r + dr): the rotary
    part of each reordered from neighbouring pairs to halves with `interleaved_rope`, the rest in place.

    >>> from tinyinfer.config import Config
    >>> cfg = Config("deepseek_v3", 10, 4, 1, 1, 1, 6, 4, 8, kv_lora_rank=2, qk_nope_head_dim=1, qk_rope_head_dim=4,
    ...              interleaved_rope=True)
    >>> [columns.tolist() for columns in _mla_rope_columns(cfg)]
    [[0, 1, 3, 2, 4], [0, 1, 2, 4, 3, 5]]
    """
    dn, dr, r = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.kv_lora_rank
    rope = _halves_order(1, dr) if cfg.interleaved_rope else np.arange(dr)  # [dr]
    head = np.concatenate([np.arange(dn), dn + rope])  # [dn + dr]
    q_columns = (np.arange(cfg.n_heads)[:, None] * (dn + dr) + head).ravel()  # [H*(dn + dr)]
    return q_columns, np.concatenate([np.arange(r), r + rope])


def deepseek_mlp(get: Getter, cfg: Config, i: int) -> dict:
    """Layer i's feed-forward: dense below first_k_dense_replace, else router (+ the V3 bias), experts and the
    shared experts, one SwiGLU n_shared_experts x moe_intermediate_size wide (V2's router has no bias)."""
    p, d, E = f"model.layers.{i}.mlp", cfg.d_model, cfg.n_experts
    if not cfg.is_moe_layer(i):
        return swiglu_mlp(get, p, d, cfg.d_ff)
    mlp = {"router": linear(get, f"{p}.gate.weight", d, E), "experts": _experts(get, cfg, p)}
    if cfg.router == "sigmoid_grouped":
        mlp["router_bias"] = get(f"{p}.gate.e_score_correction_bias", (E,))
    if cfg.shared_expert_d_ff:
        mlp["shared"] = swiglu_mlp(get, f"{p}.shared_experts", d, cfg.shared_expert_d_ff)
    return mlp


def deepseek_params(get: Getter, cfg: Config) -> dict:
    return llama_params(get, cfg, deepseek_mlp, mla_attention)


# ---------------------------------------------------------------------------------------------------------------
# gpt-oss: a Llama attention with biases and one sink logit per head (self_attn.sinks [H]); in every layer a router
# with a bias (mlp.router.weight [E, d], .bias [E]) and all experts of a layer fused, stored [in, out]:
#     mlp.experts.gate_up_proj [E, d, 2*ff]: gate and up columns interleaved (gate, up, gate, up, ...), and its
#     bias [E, 2*ff] the same way;  mlp.experts.down_proj [E, ff, d], its bias [E, d]
# (The Hub's original files hold the experts in MXFP4 instead: refused by config.py, with the conversion to use.)
# ---------------------------------------------------------------------------------------------------------------

def gpt_oss_attention(get: Getter, cfg: Config, p: str) -> dict:
    return dict(llama_attention(get, cfg, p), sinks=get(f"{p}.sinks", (cfg.n_heads,)))


def gpt_oss_mlp(get: Getter, cfg: Config, i: int) -> dict:
    """Layer i's router and experts, the interleaved gate/up columns split apart: gate the even ones, up the odd."""
    p, d, E, ff = f"model.layers.{i}.mlp", cfg.d_model, cfg.n_experts, cfg.moe_d_ff
    gate_up = get(f"{p}.experts.gate_up_proj", (E, d, 2 * ff))  # [E, d, 2 ff], already [in, out]
    gate_up_bias = get(f"{p}.experts.gate_up_proj_bias", (E, 2 * ff))  # [E, 2 ff]
    down, down_bias = get(f"{p}.experts.down_proj", (E, ff, d)), get(f"{p}.experts.down_proj_bias", (E, d))
    experts = [{"gate": np.ascontiguousarray(gate_up[e, :, 0::2]), "up": np.ascontiguousarray(gate_up[e, :, 1::2]),
                "down": down[e], "gate_bias": gate_up_bias[e, 0::2], "up_bias": gate_up_bias[e, 1::2],
                "down_bias": down_bias[e]} for e in range(E)]  # [d, ff], [d, ff], [ff, d], [ff], [ff], [d]
    return {"router": linear(get, f"{p}.router.weight", d, E), "router_bias": get(f"{p}.router.bias", (E,)),
            "experts": experts}


def gpt_oss_params(get: Getter, cfg: Config) -> dict:
    return llama_params(get, cfg, gpt_oss_mlp, gpt_oss_attention)


# model_type -> (function building params, name prefixes some checkpoints add)
PARAM_BUILDERS = {
    "gpt2": (gpt2_params, ("transformer.",)),
    "llama": (llama_params, ()),
    "mistral": (llama_params, ()),
    "qwen2": (llama_params, ()),
    "qwen3": (llama_params, ()),
    "mixtral": (moe_params, ()),
    "qwen2_moe": (moe_params, ()),
    "qwen3_moe": (moe_params, ()),
    "olmoe": (moe_params, ()),
    "phi3": (phi3_params, ()),
    "gemma": (llama_params, ()),
    "gemma2": (llama_params, ()),
    "gemma3_text": (llama_params, ("language_model.",)),  # a multimodal Gemma 3 keeps its text model there
    "granite": (llama_params, ()),
    "smollm3": (llama_params, ()),
    "olmo": (llama_params, ()),
    "olmo2": (llama_params, ()),
    "gpt_neox": (gpt_neox_params, ()),
    "phi": (phi_params, ()),
    "stablelm": (llama_params, ()),
    "starcoder2": (starcoder2_params, ()),
    "falcon": (falcon_params, ()),
    "cohere": (cohere_params, ()),
    "cohere2": (cohere_params, ()),
    "deepseek_v2": (deepseek_params, ()),
    "deepseek_v3": (deepseek_params, ()),
    "gpt_oss": (gpt_oss_params, ()),
}


def load_params(checkpoint: Checkpoint, cfg: Config, dtype=np.float32) -> dict:
    """Read every parameter of `cfg`'s architecture from `checkpoint`, as `dtype` arrays on the host."""
    if cfg.model_type not in PARAM_BUILDERS:
        raise TinyInferError(f"no weight mapping for model_type {cfg.model_type!r}; supported: {', '.join(sorted(PARAM_BUILDERS))}")
    build, prefixes = PARAM_BUILDERS[cfg.model_type]
    return build(tensor_getter(checkpoint, dtype, prefixes), cfg)


def untie_if_the_file_disagrees(checkpoint: Checkpoint, cfg: Config) -> Config:
    """`cfg`, untied when config.json says tie_word_embeddings but the file holds its own, different lm_head.weight.

    transformers 5 trusts the file then: it keeps the two tensors apart (and warns that the config is wrong);
    older versions tied them regardless. tinyinfer follows transformers 5. A file saved tied holds one of the two
    (save_pretrained drops the duplicate), or both equal (converted PyTorch files): those stay tied.
    """
    get = tensor_getter(checkpoint, np.float32, PARAM_BUILDERS[cfg.model_type][1])
    head = head_name(get, cfg)
    if not (cfg.tie_word_embeddings and get.has(head) and get.has(embedding_name(cfg))):
        return cfg
    shape = (cfg.vocab_size, cfg.d_model)
    same = np.array_equal(get(head, shape), get(embedding_name(cfg), shape))
    return cfg if same else dataclasses.replace(cfg, tie_word_embeddings=False)


def arrange_for_matvec(params: dict, tied: bool) -> dict:
    """Give every linear weight the memory order its matrix-vector product streams fastest; shapes stay.

    A decode step is a chain of matrix-vector products, each reading a whole weight matrix once: its speed
    is how fast memory streams. `x @ w` works for either memory order of w (NumPy hands BLAS a transpose
    flag, no copy), but the BLAS kernels differ: with OpenBLAS a wide matrix (out >= in: qkv, up, the LM
    head) streams fastest row-major, a tall one (in > out: the MLP's down) column-major. On a GPT-2-124M
    shape this took the weight products of a decode step from about 27 to 22 ms (2 threads).

    A tied LM head is made row-major [d, V] once and the embedding table becomes its transposed view, so
    the two still share one copy. Results move only by float32 summation order (~1e-6).
    """
    def arrange(w):
        return np.asfortranarray(w) if w.shape[0] > w.shape[1] else np.ascontiguousarray(w)

    def walk(tree):
        if isinstance(tree, dict):
            return {key: walk(value) for key, value in tree.items()}
        if isinstance(tree, list):
            return [walk(value) for value in tree]
        return arrange(tree) if tree.ndim == 2 else tree  # inside a layer every matrix is a linear weight

    arranged = dict(params, layers=walk(params["layers"]), lm_head=np.ascontiguousarray(params["lm_head"]))
    if tied:
        arranged["embed"] = arranged["lm_head"].T  # [d, V] -> [V, d], a view: still one table
    return arranged
