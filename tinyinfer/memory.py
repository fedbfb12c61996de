"""Memory arithmetic: what a model costs to hold, and how fast it can possibly decode.

    weights bytes          = parameters x bytes per parameter
    quantised, per weight  = bits / 8 + scale bytes / group size     (one scale per group of weights)
    KV bytes per token     = 2 (K and V) x layers x kv_heads x head_dim x bytes per number
                             (DeepSeek's latent attention: kv_heads 1, head_dim kv_lora_rank + qk_rope_head_dim)
    KV bytes per sequence  = KV bytes per token x context length;  x batch for the whole batch
    decode bound (tok/s)   = memory bandwidth / bytes read per token   (every step re-reads all weights)

The chapter's worked example, a 70B model with grouped-query attention (80 layers, 8 KV heads, head_dim 128)
in fp16:

    >>> kv_bytes_per_token(80, 8, 128, BYTES_PER_PARAM["fp16"])   # ~0.31 MiB
    327680
    >>> kv_bytes_per_token(80, 8, 128, 2) * 8000 / 2**30           # one 8,000-token conversation, GiB
    2.44140625
"""

from __future__ import annotations

import os
import time

import numpy as np

from tinyinfer.backend import synchronize
from tinyinfer.config import Config
from tinyinfer.mla import mla_param_count
from tinyinfer.moe import moe_param_counts
from tinyinfer.norms import NORM_PARAMS

BYTES_PER_PARAM = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, bytes_per_number: float) -> int:
    """2 x layers x kv_heads x head_dim x bytes: what one token adds to the KV cache."""
    # BEGIN EXERCISE 2.2: KV-cache bytes per token
    return int(2 * n_layers * n_kv_heads * head_dim * bytes_per_number)
    # END EXERCISE 2.2


def param_count(cfg: Config, active: bool = False) -> int:
    """Parameters of a model, from its config alone (a tied LM head counted once).

    `active=True` counts only what one token uses: a Mixture-of-Experts layer its top-k experts, not all.
    """
    d, hd = cfg.d_model, cfg.head_dim
    q_dim, kv_dim = cfg.n_heads * hd, cfg.n_kv_heads * hd
    norm = d * len(NORM_PARAMS[cfg.norm])  # LayerNorm: gain and bias; OLMo 1's: nothing
    attention = d * q_dim + 2 * d * kv_dim + q_dim * d
    qk_norm = (2 * hd if cfg.qk_norm_span == "head" else q_dim + kv_dim) * cfg.qk_norm  # "head": one gain for all
    attention += (q_dim + 2 * kv_dim) * cfg.qkv_bias + d * cfg.o_bias + qk_norm + cfg.n_heads * cfg.attention_sinks
    if cfg.kv_lora_rank:  # DeepSeek's latent attention: other projections (tinyinfer/mla.py)
        attention = mla_param_count(cfg)
    n_mats = 3 if cfg.mlp == "swiglu" else 2
    dense_mlp = n_mats * d * cfg.d_ff + (cfg.d_ff * (n_mats - 1) + d) * cfg.mlp_bias
    mlps = sum(moe_param_counts(cfg)[active] if cfg.is_moe_layer(i) else dense_mlp for i in range(cfg.n_layers))
    norms_per_layer = 2 * (cfg.pre_norms + cfg.post_norms) - cfg.shared_input_norm  # Gemma 2: 4, Phi-2: 1
    layers = cfg.n_layers * (norms_per_layer * norm + attention) + mlps
    embed = cfg.vocab_size * d + (cfg.max_seq_len * d if cfg.position == "learned" else 0)
    lm_head = (0 if cfg.tie_word_embeddings else cfg.vocab_size * d) + cfg.vocab_size * cfg.lm_head_bias
    return embed + layers + norm + lm_head


def weight_bytes(n_params: int, dtype: str) -> float:
    return n_params * BYTES_PER_PARAM[dtype]


def quantized_bytes_per_weight(bits: int, group_size: int, scale_bytes: float) -> float:
    """Bytes per weight of group-wise quantisation (tinyinfer/quantize.py): the code, plus its share of the
    scale of its group of `group_size` weights. llama.cpp's Q4_0 (4 bits, a float16 scale per 32) is 4.5 bits:

    >>> quantized_bytes_per_weight(4, 32, 2)
    0.5625
    """
    return bits / 8 + scale_bytes / group_size


def decode_bound_tokens_per_s(bytes_per_token: float, bandwidth_bytes_per_s: float) -> float:
    """Upper bound on decode tokens/s of one stream: every weight (and the cache) is read once per token."""
    return bandwidth_bytes_per_s / bytes_per_token


def measure_copy_bandwidth(n_bytes: int = 256 * 2**20, repeats: int = 5, xp=np) -> float:
    """Memory bandwidth in bytes/s, from the best of a few large array copies (read + write counted), in host
    memory (xp = numpy) or in the GPU's (xp = cupy: its HBM, the bound of a decode step there)."""
    src = xp.ones(n_bytes // 4, dtype=np.float32)
    dst = xp.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        synchronize(xp)
        start = time.perf_counter()
        xp.copyto(dst, src)
        synchronize(xp)  # a GPU copy returns before it has run
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def resident_bytes() -> int:
    """This process's resident memory now (Linux: /proc/self/statm), or 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_freed_memory() -> None:
    """Hand memory Python has freed back to the system, where the C library keeps it (glibc's malloc_trim).

    glibc serves a large array from its heap once a few have been freed, and a heap gives back only its top:
    after a load that builds float32 weights and drops them (`keep_quantized`), the process would stay as
    large as at its peak. Elsewhere a no-op."""
    import ctypes  # noqa: PLC0415
    import ctypes.util  # noqa: PLC0415
    import gc  # noqa: PLC0415

    gc.collect()  # arrays held only by reference cycles are freed first
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl, Windows)
        pass


def measure_read_bandwidth(n_bytes: int = 256 * 2**20, repeats: int = 5, xp=np) -> float:
    """Memory bandwidth in bytes/s as a decode step meets it: the best of a few matrix-vector products over an
    n_bytes float32 matrix (bytes read / time), in host memory (xp = numpy) or the GPU's (xp = cupy). On the CPU
    the product runs in the matrix library's thread pool, the one decode's products run in, so the bound has
    decode's threads; a copy (`measure_copy_bandwidth`) runs on one thread, and a multi-threaded decode could
    read faster than it ("119% of the bound")."""
    matrix = xp.ones((n_bytes // 4 // 4096, 4096), dtype=np.float32)  # [rows, 4096]
    vector = xp.ones(4096, dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        synchronize(xp)
        start = time.perf_counter()
        matrix @ vector  # [rows, 4096] @ [4096] -> [rows]: reads the matrix once
        synchronize(xp)
        best = min(best, time.perf_counter() - start)
    return matrix.nbytes / best
