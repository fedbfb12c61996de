"""From a checkpoint's tensor names to tinyinfer's parameters.

Every architecture names its tensors its own way: its module in tinyinfer/families/ translates them into one
plain structure the model code reads, with the helpers here, which check every shape on the way:

    params = {
        "embed": [vocab, d],  "pos_embed": [max_len, d] (GPT-2 only),
        "layers": [{"attn_norm"?: {"weight"?, "bias"?} (what its kind learns: NORM_PARAMS; OLMo 1's nothing),
                    "qkv": [d, (H + 2*KV)*hd], "o": [H*hd, d], "qkv_bias"?, "o_bias"?,
                    "q_norm"?, "k_norm"?: [hd], [heads*hd] or [heads, hd] (see families/llama.py `qk_norm_weight`),
                    "mlp_norm"? (all but OLMo 2 and the one-norm parallel blocks): {...},
                    "mlp": {"gate"?, "up", "down", "up_bias"?, "down_bias"?},
                    "post_attn_norm"?, "post_mlp_norm"? (Gemma 2, OLMo 2: on each sublayer's output)}, ...],
        a Mixture-of-Experts layer's "mlp": {"router": [d, E], "experts": [{"gate", "up", "down"} x E],
                                             "shared"?: {"gate", "up", "down"}, "shared_gate"?: [d, 1],
                                             "router_bias"?: [E] (DeepSeek-V3, gpt-oss)},
        a gpt-oss layer also has "sinks": [H] (one attention-sink logit per head), and its experts "gate_bias",
        "up_bias" [ff] and "down_bias" [d],
        a latent-attention layer (DeepSeek) has "q" or "q_a", "q_a_norm", "q_b", and "kv_a", "kv_a_norm",
        "kv_b_key", "kv_b_value", "o" instead of "qkv" and "o" (see families/deepseek_v2.py),
        "final_norm": {"weight", "bias"?},  "lm_head": [d, vocab],  "lm_head_bias"?: [vocab] (Phi),
    }

Linear weights are stored as [in, out] so every projection reads `x @ w` (PyTorch's nn.Linear stores
[out, in]: those are transposed once, at load). The q, k and v projections read the same input, so they
are stacked side by side into one "qkv" matrix (GPT-2's c_attn and Phi-3's qkv_proj already are): one
matrix-vector product instead of three, which streams faster. Phi-3's fused gate_up_proj is split into
gate and up (its first and second halves). Files that fuse q, k and v in another order (GPT-NeoX and Falcon
by head or group, Cohere's q and k rotating neighbouring pairs) are reordered into this one at load, so the model
code knows one layout. DeepSeek-V3's latent attention has projections of its own (families/deepseek_v2.py), its
rotary columns reordered the same way. Tied embeddings share the embedding table, no copy.
`arrange_for_matvec` then picks each weight's memory order (not its shape) for the fastest decode step.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tinyinfer import fp8
from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.llama2c import interleaved_to_half
from tinyinfer.norms import NORM_PARAMS
from tinyinfer.safetensors_io import Checkpoint

Getter = Callable[..., np.ndarray]


def tensor_getter(checkpoint: Checkpoint, dtype, strip_prefixes: tuple[str, ...] = (),
                  quantization: dict | None = None) -> Getter:
    """`get(name, shape)`: the tensor `name` as `dtype`, after checking it exists and has `shape`.
    `get.has(name)`: whether the file holds it. `get.codes(name, shape, layout)`: a tensor of bytes as stored (a
    view of the file: quantised codes or scales, laid out as `layout` says), for a loader that decodes it itself,
    into `get.dtype` (`dtype`): gpt-oss's MXFP4 experts (families/gpt_oss.py).

    `quantization`: config.json's quantization_config as checked at load (Config.quantization_config). Under
    "fp8" each FP8 tensor is read times its block scales (tinyinfer/fp8.py); the scales themselves (`name` +
    "_scale_inv") and activation scales are never asked for by name, and the unquantised tensors read as usual.
    """
    names = set(checkpoint.names())
    is_fp8 = quantization is not None and quantization["quant_method"] == "fp8"

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
        if is_fp8 and checkpoint.dtype(full).startswith("F8_"):
            return fp8.read_weight(checkpoint, full, quantization["weight_block_size"]).astype(dtype, copy=False)
        return checkpoint.get(full, dtype)

    def codes(name: str, shape: tuple[int, ...], layout: str) -> np.ndarray:
        full = find(name)
        found, stored = checkpoint.shape(full), checkpoint.dtype(full)
        if found != tuple(shape) or stored != "U8":
            raise TinyInferError(f"tensor {full!r} is {stored} {list(found)}, expected U8 {list(shape)} from "
                                 f"config.json ({layout}); the file does not match its config.json: re-download it, "
                                 "or re-export it from the original checkpoint")
        return checkpoint.raw(full)

    get.has = lambda name: any(prefix + name in names for prefix in ("",) + strip_prefixes)  # layout probes
    get.dtype, get.codes = dtype, codes
    return get


def linear(get: Getter, name: str, d_in: int, d_out: int) -> np.ndarray:
    """An nn.Linear weight ([out, in] on disk) as a contiguous [in, out] array."""
    return np.ascontiguousarray(get(name, (d_out, d_in)).T)  # [out, in] -> [in, out]


def norm(get: Getter, prefix: str, cfg: Config) -> dict:
    """The parameters of the norm `prefix` (.weight, .bias), those its kind learns (NORM_PARAMS): maybe none."""
    return {name: get(f"{prefix}.{name}", (cfg.d_model,)) for name in NORM_PARAMS[cfg.norm]}


def first_present(get: Getter, names: tuple[str, ...]) -> str:
    """The first of `names` the file has (the last when it has none, for the error that names it)."""
    return next((name for name in names if get.has(name)), names[-1])


def embedding_table(get: Getter, cfg: Config, name: str = "model.embed_tokens.weight",
                    head_names: tuple[str, ...] = ("lm_head.weight",)) -> np.ndarray:
    """The input embedding [V, d]. A tied file may hold the one table under the output layer's name only
    (lm_head.weight): transformers ties them either way round, and so does tinyinfer."""
    head = first_present(get, head_names)
    if cfg.tie_word_embeddings and not get.has(name) and get.has(head):
        name = head
    return get(name, (cfg.vocab_size, cfg.d_model))


def output_layer(get: Getter, cfg: Config, embed: np.ndarray, head_names: tuple[str, ...] = ("lm_head.weight",)):
    """The LM head [d, V]; tied: the embedding table doubles as the output layer, [V, d] -> [d, V] as a view."""
    return embed.T if cfg.tie_word_embeddings else linear(get, first_present(get, head_names), cfg.d_model,
                                                          cfg.vocab_size)


def biased_mlp(get: Getter, up: str, down: str, d: int, d_ff: int, with_bias: bool = True) -> dict:
    """An ungated MLP of two nn.Linear layers, with biases (GPT-NeoX, Phi; StarCoder2's `use_bias`), named `up`
    and `down` in the file."""
    mlp = {"up": linear(get, f"{up}.weight", d, d_ff), "down": linear(get, f"{down}.weight", d_ff, d)}
    if with_bias:
        mlp |= {"up_bias": get(f"{up}.bias", (d_ff,)), "down_bias": get(f"{down}.bias", (d,))}
    return mlp


def swiglu_mlp(get: Getter, p: str, d: int, d_ff: int, with_bias: bool = False,
               names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> dict:
    """A gated MLP of three nn.Linear layers under `p`, named `names` (gate, up, down) in the file."""
    gate, up, down = (f"{p}.{name}" for name in names)
    mlp = {"gate": linear(get, f"{gate}.weight", d, d_ff), "up": linear(get, f"{up}.weight", d, d_ff),
           "down": linear(get, f"{down}.weight", d_ff, d)}
    if with_bias:
        mlp |= {"gate_bias": get(f"{gate}.bias", (d_ff,)), "up_bias": get(f"{up}.bias", (d_ff,)),
                "down_bias": get(f"{down}.bias", (d,))}
    return mlp


# Mixture-of-Experts files store one tensor set per expert (what save_pretrained writes):
#     Mixtral:      model.layers.{i}.block_sparse_moe.gate.weight, ...experts.{e}.w1 (gate) / w3 (up) / w2 (down)
#     Qwen, OLMoE:  model.layers.{i}.mlp.gate.weight, ...mlp.experts.{e}.gate_proj / up_proj / down_proj
# transformers 5 holds all experts of a layer fused in memory; a file saved from that state reads
#     model.layers.{i}.mlp.experts.gate_up_proj [E, 2*ff, d]  and  ...experts.down_proj [E, d, ff]
# and is accepted too.

def experts(get: Getter, cfg: Config, p: str, names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
            ) -> list[dict]:
    """The SwiGLU experts of the MoE layer `p`, fused or one tensor set per expert (named `names`)."""
    d, E, ff = cfg.d_model, cfg.n_experts, cfg.moe_d_ff
    if get.has(f"{p}.experts.gate_up_proj"):  # fused: [E, 2*ff, d] (gate rows, then up rows) and [E, d, ff]
        gate_up = get(f"{p}.experts.gate_up_proj", (E, 2 * ff, d)).transpose(0, 2, 1)  # -> [E, d, 2*ff]
        down = get(f"{p}.experts.down_proj", (E, d, ff)).transpose(0, 2, 1)  # -> [E, ff, d]
        return [{"gate": np.ascontiguousarray(gate_up[e, :, :ff]), "up": np.ascontiguousarray(gate_up[e, :, ff:]),
                 "down": np.ascontiguousarray(down[e])} for e in range(E)]
    return [swiglu_mlp(get, f"{p}.experts.{e}", d, ff, names=names) for e in range(E)]


def halves_order(n_heads: int, head_dim: int) -> np.ndarray:
    """Where each of tinyinfer's coordinates comes from in an interleaved-RoPE projection of `n_heads` heads.

    >>> halves_order(1, 4)  # pairs (x0, x1), (x2, x3) -> (x0, x2), (x1, x3)
    array([0, 2, 1, 3])
    """
    return interleaved_to_half(np.arange(n_heads * head_dim)[:, None], n_heads).ravel()


def arrange_for_matvec(params: dict, tied: bool) -> dict:
    """Give every linear weight the memory order its matrix-vector product streams fastest, and rows that do
    not alias in the CPU's caches (`padded_rows`); shapes and values stay.

    A decode step is a chain of matrix-vector products, each reading a whole weight matrix once: its speed
    is how fast memory streams. `x @ w` works for either memory order of w (NumPy hands BLAS a transpose
    flag, no copy), but the BLAS kernels differ: with OpenBLAS a wide matrix (out >= in: qkv, up, the LM
    head) streams fastest row-major, a tall one (in > out: the MLP's down) column-major. On a GPT-2-124M
    shape this took the weight products of a decode step from about 27 to 22 ms (2 threads).

    A tied LM head is made row-major [d, V] once and the embedding table becomes its transposed view, so
    the two still share one copy. Results move only by float32 summation order (~1e-6).
    """
    def walk(tree):
        if isinstance(tree, dict):
            return {key: walk(value) for key, value in tree.items()}
        if isinstance(tree, list):
            return [walk(value) for value in tree]
        return matvec_layout(tree) if tree.ndim == 2 else tree  # inside a layer every matrix is a linear weight

    arranged = dict(params, layers=walk(params["layers"]), lm_head=padded_rows(params["lm_head"]))
    if tied:
        arranged["embed"] = arranged["lm_head"].T  # [d, V] -> [V, d], a view: still one table
    return arranged


def matvec_layout(w: np.ndarray) -> np.ndarray:
    """w [in, out] in the memory order `arrange_for_matvec` gives a layer's weight: row-major when wide,
    column-major when tall, rows padded (`padded_rows`). Same shape and values."""
    return padded_rows(w.T).T if w.shape[0] > w.shape[1] else padded_rows(w)  # tall: column-major


CACHE_SET_SPAN = 4096  # bytes: addresses this far apart fall in the same set of an L1 cache (64 sets x 64 B)
CACHE_LINE = 64  # bytes


def padded_rows(w: np.ndarray) -> np.ndarray:
    """w [r, c] row-major; when its rows are a multiple of 4 KiB long, stored with one cache line of padding
    after each (a view of the first c columns: same shape, same values, same products to the bit).

    A matrix product with several rows of x (a batched decode step) cannot stream w like a vector can: BLAS
    copies w panel by panel into a compact buffer, reading a short run of every row of w in turn. Rows a
    multiple of 4 KiB apart put all those runs in one set of each cache level, which holds only a few lines:
    every read evicts one the panel still needs. SmolLM2's LM head, [576, 49152] in float32, has rows of
    192 KiB; padded, its product with 32 rows took 31 ms instead of 42 (with 4 rows, 15 ms instead of 26),
    and GPT-2's [768, 3072] MLP matrices with 32 rows about 10% less. A matrix-vector product reads each
    row whole and does not care.

    >>> w = np.ones((2, 1024), dtype=np.float32)  # rows of 4 KiB
    >>> v = padded_rows(w); v.shape, v.strides
    ((2, 1024), (4160, 4))
    """
    row_bytes = w.shape[1] * w.itemsize
    if row_bytes % CACHE_SET_SPAN or not row_bytes:
        return np.ascontiguousarray(w)
    padded = np.empty((w.shape[0], w.shape[1] + CACHE_LINE // w.itemsize), dtype=w.dtype)  # [r, c + pad]
    padded[:, :w.shape[1]] = w
    return padded[:, :w.shape[1]]  # [r, c], rows (row_bytes + 64) apart: an odd number of cache lines
