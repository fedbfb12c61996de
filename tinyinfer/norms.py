"""Normalisation layers: keep each token's activations at a steady scale before every sublayer.

LayerNorm (GPT-2) centres and scales each row, then applies a learned gain and bias. RMSNorm (Llama and
descendants) skips the centring and the bias: it divides by the root-mean-square only, one reduction fewer.
Gemma's RMSNorm stores its gain as an offset from 1 and scales by (1 + weight): a weight of zero is the
identity gain (transformers adds the 1 in float32 at every call, and so does `apply_norm`).

    >>> import numpy as np
    >>> rms_norm(np.array([[3.0, 4.0]]), np.ones(2), eps=0.0)  # rms of (3, 4) is sqrt(12.5)
    array([[0.84852814, 1.13137085]])
"""

from __future__ import annotations


def rms_norm(x, weight, eps: float):
    """x / sqrt(mean(x^2) + eps) * weight, over the last axis.  [..., d] -> [..., d]"""
    # BEGIN EXERCISE 4.1: RMSNorm
    mean_square = (x * x).mean(axis=-1, keepdims=True)  # [..., d] -> [..., 1]
    return x * (mean_square + eps) ** -0.5 * weight
    # END EXERCISE 4.1


def layer_norm(x, weight, bias, eps: float):
    """(x - mean) / sqrt(var + eps) * weight + bias, over the last axis.  [..., d] -> [..., d]"""
    mean = x.mean(axis=-1, keepdims=True)  # [..., d] -> [..., 1]
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)  # [..., d] -> [..., 1]
    return centred / (variance + eps) ** 0.5 * weight + bias


def apply_norm(x, weights: dict, kind: str, eps: float):
    """The model's configured norm: `kind` is "rmsnorm", "rmsnorm_plus_one" (Gemma) or "layernorm"."""
    if kind == "rmsnorm":
        return rms_norm(x, weights["weight"], eps)
    if kind == "rmsnorm_plus_one":
        return rms_norm(x, 1.0 + weights["weight"], eps)
    return layer_norm(x, weights["weight"], weights["bias"], eps)
