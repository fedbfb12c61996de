"""Rotary position embeddings (RoPE): position enters attention by rotating q and k.

Each head vector is cut into pairs of coordinates; pair i is rotated by the angle `position * inv_freq[i]`,
with frequencies falling geometrically from 1 to 1/theta. The dot product of a rotated q and k then depends
only on their distance. tinyinfer uses the Hugging Face layout, where pair i is (x[i], x[i + head_dim/2])
("rotate half"); llama2.c files pair neighbours (x[2i], x[2i+1]) and are permuted into this layout at load.

Scaled variants stretch the frequencies so a model reaches past its training length:
`linear` divides every frequency by `factor`; `llama3` divides only the low frequencies and blends between.

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
    inv_freq = np.float32(1.0) / (theta ** exponents.astype(np.float64)).astype(np.float32)  # [hd/2]
    if scaling is None:
        return inv_freq
    if scaling["rope_type"] == "linear":
        return inv_freq / scaling["factor"]
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


def rope_angles(positions: np.ndarray, inv_freq: np.ndarray, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of every (position, pair) angle.  [T], [hd/2] -> 2 x [T, hd/2]"""
    angles = positions.astype(np.float32)[:, None] * inv_freq[None, :]  # [T, 1] * [1, hd/2] -> [T, hd/2]
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


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

