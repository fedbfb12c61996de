"""Fused element-wise kernels: on a GPU, one kernel where array code launches several.

Written with arrays, SwiGLU's `silu(gate) * up` is four GPU kernels (negate, exp, add-and-divide, multiply):
each reads its inputs from the GPU's memory and writes a [T, d_ff] temporary back. A decode step is bound by
memory traffic, so those temporaries cost as much as the work. `cupy.fuse` compiles the same Python expression
into one kernel that reads each input once and writes the output once. Three such kernels cover what a Llama
block does element by element between its matrix products:

    silu_mul(gate, up)                      SwiGLU's gate:  gate * sigmoid(gate) * up
    rms_scale(x, mean_square, weight, eps)  RMSNorm after its one reduction: x / sqrt(ms + eps) * weight
    rotate(x1, x2, cos, sin)                RoPE's pair rotation: (x1 cos - x2 sin, x2 cos + x1 sin)

Each is the plain expression, so on NumPy (no fuse) or on the tests' strict stand-in it is exactly what the
unfused code computes; on CuPy it is one compiled kernel computing the same expression, equal to the plain one
within float32 rounding of a few operations (|difference| <= 4 eps |value|: the compiler may contract a
multiply and an add into one fused multiply-add, which rounds once instead of twice).

The switch is the model's `kernels` ("plain", the default, or "fused"): `tinyinfer.load(..., kernels="fused")`.

    >>> import numpy as np
    >>> k = fused_kernels(np)
    >>> float(k.silu_mul(np.float32(1.0), np.float32(2.0)))  # 1 * sigmoid(1) * 2
    1.4621171951293945
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tinyinfer.errors import TinyInferError
from tinyinfer.mlp import linear, swiglu
from tinyinfer.norms import apply_norm
from tinyinfer.rope import apply_partial_rope

KERNELS = ("plain", "fused")


@dataclass(frozen=True)
class Kernels:
    silu_mul: callable
    rms_scale: callable
    rotate: callable


def _fuse(xp, fn):
    """fn compiled into one kernel where the array module can (CuPy), fn itself where it cannot (NumPy)."""
    return xp.fuse(kernel_name=fn.__name__)(fn) if hasattr(xp, "fuse") else fn


@functools.cache
def fused_kernels(xp) -> Kernels:
    """The three kernels for array module `xp` (compiled once per module)."""

    def silu_mul(gate, up):  # [T, d_ff], [T, d_ff] -> [T, d_ff]
        return gate / (1.0 + xp.exp(-gate)) * up

    def rms_scale(x, mean_square, weight, eps):  # [T, d], [T, 1], [d] -> [T, d]
        return x * (mean_square + eps) ** -0.5 * weight

    def rotate(x1, x2, cos, sin):  # 2 x [T, H, hd/2], 2 x [T, 1, hd/2] -> 2 x [T, H, hd/2]
        return x1 * cos - x2 * sin, x2 * cos + x1 * sin

    return Kernels(*(_fuse(xp, fn) for fn in (silu_mul, rms_scale, rotate)))


# ---------------------------------------------------------------------------------------------------------------------
# The model's element-wise steps, plain or fused: chosen once per model (`choose_ops`), like its block
# ---------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ElementwiseOps:
    """The three steps of a forward pass that the fused kernels replace: a norm, a gated MLP, a rotation."""

    norm: callable  # (x, weights, kind, eps) -> normed x, as norms.apply_norm
    swiglu: callable  # (x, mlp, activation) -> [T, d], as mlp.swiglu
    rope: callable  # (x, cos, sin) -> rotated x, as rope.apply_partial_rope


PLAIN_OPS = ElementwiseOps(apply_norm, swiglu, apply_partial_rope)


def choose_ops(kernels: str, xp) -> ElementwiseOps:
    """The plain array code, or the same steps through the fused kernels of `xp` ("plain" or "fused")."""
    if kernels not in KERNELS:
        raise TinyInferError(f"unknown kernels {kernels!r}: use one of {', '.join(KERNELS)}")
    if kernels == "plain":
        return PLAIN_OPS
    k = fused_kernels(xp)

    def norm(x, weights: dict, kind: str, eps: float):  # [..., d] -> [..., d]
        if kind not in ("rmsnorm", "rmsnorm_plus_one"):
            return apply_norm(x, weights, kind, eps)  # LayerNorms keep the plain code
        weight = weights["weight"] if kind == "rmsnorm" else 1.0 + weights["weight"]
        mean_square = (x * x).mean(axis=-1, keepdims=True)  # [..., d] -> [..., 1]: the one reduction
        return k.rms_scale(x, mean_square, weight, eps)

    def fused_swiglu(x, mlp: dict, activation: str = "silu"):  # [T, d] -> [T, d_ff] -> [T, d]
        if activation != "silu":
            return swiglu(x, mlp, activation)
        return linear(k.silu_mul(linear(x, mlp, "gate"), linear(x, mlp, "up")), mlp, "down")

    def rope(x, cos, sin):  # [T, H, hd] -> [T, H, hd], the first 2 x cos.shape[-1] coordinates rotated
        half = cos.shape[-1]
        out = x.copy()
        out[..., :half], out[..., half:2 * half] = k.rotate(x[..., :half], x[..., half:2 * half],
                                                             cos[:, None, :], sin[:, None, :])
        return out

    return ElementwiseOps(norm, fused_swiglu, rope)
