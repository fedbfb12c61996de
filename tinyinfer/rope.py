"""Rotary position embeddings (RoPE): position enters attention by rotating q and k.

Each head vector is cut into pairs of coordinates; pair i is rotated by the angle `position * inv_freq[i]`,
with frequencies falling geometrically from 1 to 1/theta. The dot product of a rotated q and k then depends
only on their distance. tinyinfer uses the Hugging Face layout, where pair i is (x[i], x[i + head_dim/2])
("rotate half"); llama2.c files pair neighbours (x[2i], x[2i+1]) and are permuted into this layout at load.
Some models (Phi-3 with `partial_rotary_factor`) rotate only the first coordinates of each head and let the
rest through unrotated: `apply_partial_rope`, with frequencies computed for the rotated width.

Scaled variants stretch the frequencies so a model reaches past its training length:
`linear` divides every frequency by `factor`; `llama3` divides only the low frequencies and blends between;
`yarn` does the same with a ramp over pair indices, and also scales q and k (`rope_attention_factor`);
`longrope` (Phi-3) divides each pair's frequency by its own factor from the file, and scales q and k too;
`frequency_factors` (a GGUF file's rope_freqs, llama3's scaling as llama.cpp stores it) divides by its own factors.

Everything is computed in float32, the way transformers computes it and so the way every checkpoint was
trained: float64 angles would be "more exact" but drift from the model's own by ~position x 2^-24 radians,
which at a thousand tokens moves logits by ~1e-3.

    >>> inv_frequencies(4, 10000.0)  # head_dim 4: two pairs
    array([1.  , 0.01], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np


def inv_frequencies(head_dim: int, theta: float, scaling: dict | None = None) -> np.ndarray:
    """The rotation speed of each coordinate pair, theta^(-2i/head_dim).  -> [head_dim / 2] float32"""
    exponents = np.arange(0, head_dim, 2).astype(np.float32) / np.float32(head_dim)  # [hd/2]
    periods = (theta ** exponents.astype(np.float64)).astype(np.float32)  # [hd/2]: theta^(2i/hd)
    inv_freq = np.float32(1.0) / periods  # [hd/2]
    if scaling is None:
        return inv_freq
    if scaling["rope_type"] == "linear":
        return inv_freq / scaling["factor"]
    if scaling["rope_type"] == "yarn":
        return _yarn_scaled(inv_freq, periods, scaling, head_dim, theta)
    own_factors = {"longrope": "short_factor", "frequency_factors": "factors"}.get(scaling["rope_type"])
    if own_factors:  # longrope: the factors of sequences within the original context
        return np.float32(1.0) / (np.asarray(scaling[own_factors], dtype=np.float32) * periods)
    return _llama3_scaled(inv_freq, scaling)


def _llama3_scaled(inv_freq: np.ndarray, s: dict) -> np.ndarray:
    """Llama 3.1: keep high frequencies, divide low ones by `factor`, interpolate smoothly in between."""
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_context = s["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv_freq
    smooth = (old_context / wavelength - low) / (high - low)  # 0 at the low-frequency edge, 1 at the high one
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = np.where(wavelength > old_context / low, inv_freq / factor, inv_freq)
    is_medium = (wavelength >= old_context / high) & (wavelength <= old_context / low)
    return np.where(is_medium, blended, scaled)


def _yarn_scaled(inv_freq: np.ndarray, periods: np.ndarray, s: dict, head_dim: int, theta: float) -> np.ndarray:
    """YaRN: like llama3, keep the fast pairs, divide the slow ones by `factor` and ramp in between, but the
    ramp runs linearly over pair indices: from the pair turning `beta_fast` times over the original context
    (kept) to the one turning `beta_slow` times (divided)."""
    def pair_turning(rotations: float) -> float:  # the (fractional) pair index that turns `rotations` times
        turns = s["original_max_position_embeddings"] / (rotations * 2 * math.pi)
        return head_dim * math.log(turns) / (2 * math.log(theta))

    low, high = pair_turning(s.get("beta_fast") or 32), pair_turning(s.get("beta_slow") or 1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    ramp = (np.arange(head_dim // 2, dtype=np.float32) - low) / ((high - low) or 0.001)  # [hd/2]
    kept = 1 - np.clip(ramp, 0, 1)  # 1: kept as is, 0: divided by factor (and 1 - kept, as transformers rounds it)
    return np.float32(1.0) / (s["factor"] * periods) * (1 - kept) + inv_freq * kept


def rope_attention_factor(scaling: dict | None) -> float:
    """How much YaRN scales the rotated q and k (1.0 for every other kind but longrope, whose factor the config
    reader worked out): the file's `attention_factor`, or 0.1 ln(factor) + 1, or DeepSeek's ratio of two such
    terms when `mscale` and `mscale_all_dim` are given.

    >>> round(rope_attention_factor({"rope_type": "yarn", "factor": 4.0}), 4)
    1.1386
    """
    if scaling is not None and scaling["rope_type"] == "longrope":
        return scaling["attention_factor"]
    if scaling is None or scaling["rope_type"] != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return scaling["attention_factor"]

    def mscale(factor: float, m: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    factor = scaling["factor"]
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return mscale(factor, scaling["mscale"]) / mscale(factor, scaling["mscale_all_dim"])
    return mscale(factor)


def rope_angles(positions: np.ndarray, inv_freq: np.ndarray, dtype=np.float32,
                attention_factor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of every (position, pair) angle, times `attention_factor` (YaRN, longrope): scaling them
    scales what `apply_rope` rotates, so q.k grows by its square, as in transformers; with partial RoPE only
    the rotated coordinates are scaled.  [T], [hd/2] -> 2 x [T, hd/2]"""
    angles = positions.astype(np.float32)[:, None] * inv_freq[None, :]  # [T, 1] * [1, hd/2] -> [T, hd/2]
    cos, sin = np.cos(angles), np.sin(angles)
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos.astype(dtype), sin.astype(dtype)


def apply_rope(x, cos, sin):
    """Rotate each (x[i], x[i + hd/2]) pair of every head.  [T, n_heads, hd] -> [T, n_heads, hd]"""
    # BEGIN EXERCISE 4.2: rotate query/key pairs by their position's angle
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]  # [T, H, hd] -> 2 x [T, H, hd/2]
    cos, sin = cos[:, None, :], sin[:, None, :]  # [T, hd/2] -> [T, 1, hd/2], broadcast over heads
    rotated = x.copy()  # same shape and array module as x
    rotated[..., :half] = x1 * cos - x2 * sin
    rotated[..., half:] = x2 * cos + x1 * sin
    return rotated
    # END EXERCISE 4.2


def apply_partial_rope(x, cos, sin):
    """`apply_rope` on the first 2 x cos.shape[-1] coordinates of each head; the rest pass unrotated (Phi-3's
    partial_rotary_factor). When the angles cover the whole head it is `apply_rope` itself.
    [T, n_heads, hd] -> [T, n_heads, hd]

    >>> x = np.ones((1, 1, 4), dtype=np.float32)
    >>> apply_partial_rope(x, *rope_angles(np.array([1]), inv_frequencies(2, 10000.0))).round(4)  # 2 of 4 rotated
    array([[[-0.3012,  1.3818,  1.    ,  1.    ]]], dtype=float32)
    """
    rotary = 2 * cos.shape[-1]
    if rotary == x.shape[-1]:
        return apply_rope(x, cos, sin)
    out = x.copy()
    out[..., :rotary] = apply_rope(x[..., :rotary], cos, sin)  # [T, H, rotary]
    return out
