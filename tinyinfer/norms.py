"""Normalisation layers: keep each token's activations at a steady scale before every sublayer.

LayerNorm (GPT-2) centres and scales each row, then applies a learned gain and bias. RMSNorm (Llama and
descendants) skips the centring and the bias: it divides by the root-mean-square only, one reduction fewer.
Some LayerNorms learn less: a gain without a bias (Cohere; the per-head q and k norms of StableLM and Cohere), or
nothing at all (OLMo 1: centre and scale, no parameters). `NORM_PARAMS` says what each kind holds.
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
    """(x - mean) / sqrt(var + eps) * weight + bias, over the last axis; a None weight or bias is left out.
    [..., d] -> [..., d]"""
    mean = x.mean(axis=-1, keepdims=True)  # [..., d] -> [..., 1]
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)  # [..., d] -> [..., 1]
    normed = centred / (variance + eps) ** 0.5
    normed = normed if weight is None else normed * weight
    return normed if bias is None else normed + bias


# each kind of norm -> the parameters it learns (each as wide as what it norms)
NORM_PARAMS = {"rmsnorm": ("weight",), "rmsnorm_plus_one": ("weight",), "layernorm": ("weight", "bias"),
               "layernorm_no_bias": ("weight",), "layernorm_no_params": ()}


def apply_norm(x, weights: dict, kind: str, eps: float):
    """The model's configured norm, `kind` a key of NORM_PARAMS: "rmsnorm", "rmsnorm_plus_one" (Gemma),
    "layernorm", "layernorm_no_bias" (Cohere) or "layernorm_no_params" (OLMo 1)."""
    if kind == "rmsnorm":
        return rms_norm(x, weights["weight"], eps)
    if kind == "rmsnorm_plus_one":
        return rms_norm(x, 1.0 + weights["weight"], eps)
    learned = {name: weights[name] for name in NORM_PARAMS[kind]}  # what this kind learns, no more
    return layer_norm(x, learned.get("weight"), learned.get("bias"), eps)
