"""The feed-forward sublayer: each token alone, through a wide hidden layer and back.

GPT-2:  down(gelu(up(x)))                       d -> 4d -> d   (some configs: exact GELU, quick GELU or ReLU)
Llama:  down(silu(gate(x)) * up(x))  (SwiGLU)   d -> d_ff -> d, the gate decides what of `up` passes

    >>> import numpy as np
    >>> round(float(silu(np.float32(1.0))), 4)  # 1 * sigmoid(1)
    0.7311
"""

from __future__ import annotations

import math

import numpy as np


def silu(x):
    """x * sigmoid(x), a.k.a. swish."""
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """GPT-2's tanh approximation of GELU."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))  # x*x*x: faster than x**3


def gelu(x):
    """The exact GELU, x * P(N(0, 1) < x) = x/2 * erfc(-x / sqrt 2) (transformers' "gelu").

    >>> round(float(gelu(np.float32(1.0))), 5)
    0.84134
    """
    return 0.5 * x * erfc(-x * (1 / math.sqrt(2.0)))  # a Python float keeps x's dtype (float16 stays float16)


def erfc(x):
    """1 - erf(x), to a relative error below 1.2e-7 (float32's own rounding): the Chebyshev fit `erfcc` of
    Numerical Recipes for x >= 0, and 2 - erfc(-x) below zero, so GELU's far negative tail (x/2 times a tiny
    erfc) keeps its digits where 1 + erf(x) would cancel them away. NumPy has no erf of its own.

    >>> [round(float(erfc(np.float32(v))), 6) for v in (-1.0, 0.0, 0.5, 3.0)]
    [1.842701, 1.0, 0.4795, 2.2e-05]
    """
    coefficients = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    polynomial = coefficients[-1]
    for c in coefficients[-2::-1]:  # Horner's rule, highest power first
        polynomial = c + t * polynomial
    tail = t * np.exp(polynomial - z * z)  # erfc(|x|)
    return np.where(x >= 0, tail, 2.0 - tail)


def quick_gelu(x):
    """x * sigmoid(1.702 x): a cheaper GELU (transformers' "quick_gelu", from CLIP)."""
    return x / (1.0 + np.exp(-1.702 * x))


def relu(x):
    """max(x, 0)."""
    return np.maximum(x, 0)


# NumPy's ufuncs (np.exp, np.tanh) also run on CuPy arrays: CuPy implements __array_ufunc__.
# tinyinfer/families/common.py maps transformers' names (ACT2FN) onto these.
ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh, "gelu": gelu, "quick_gelu": quick_gelu, "relu": relu}


# Up to this many rows, a product with a NumPy weight matrix runs row by row (see `matmul`).
ROW_BY_ROW_MAX = 6


def matmul(x, w):
    """x @ w, where a few rows (2..ROW_BY_ROW_MAX) of x on the CPU go as that many matrix-vector products.
    [T, d_in] @ [d_in, d_out] -> [T, d_out]

    Why: for every matrix-matrix product OpenBLAS first copies all of w into its own blocked layout, and for a
    handful of rows that copy costs far more than the arithmetic (SmolLM2-135M, one thread: 2 rows through
    the whole model 2.3-3.1x the time of 1 row). A matrix-vector product reads w as it lies, and the next row
    finds much of it still in the CPU cache (2 rows 1.3-1.8x, 4 rows 2.1-2.5x). At about 6 rows both cost
    ~3x; past that the copy pays for itself. Each row is then computed exactly as a one-row step computes it:
    speculative decoding's verify pass (tinyinfer/speculative.py) scores its rows as plain decoding would.

    More rows with a column-major w (a tall matrix, the MLP's down: `arrange_for_matvec` stores it so for the
    matrix-vector products of decoding) go as w.T @ x.T, the same sums with w row-major in the other operand:
    OpenBLAS's matrix product is about 1.5x faster reading a weight that way (SmolLM2's down, [1536, 576], one
    thread: 32 rows 0.94 -> 0.64 ms, 8 rows 0.56 -> 0.29 ms). Results move only by float32 summation order.
    """
    if type(x) is np.ndarray and type(w) is np.ndarray and x.ndim == w.ndim == 2:
        if 2 <= x.shape[0] <= ROW_BY_ROW_MAX:
            return np.matmul(x[:, None, :], w)[:, 0]  # [T, 1, d_in] @ [d_in, d_out] -> [T, 1, d_out] -> [T, d_out]
        if x.shape[0] > ROW_BY_ROW_MAX and w.strides[0] == w.itemsize:  # column-major w (a tall weight)
            return np.ascontiguousarray((w.T @ x.T).T)  # [d_out, d_in] @ [d_in, T] -> [d_out, T] -> [T, d_out]
    return x @ w  # [T, d_in] -> [T, d_out]


def linear(x, params: dict, name: str, product=matmul):
    """The linear layer `name` of a parameter dict: x @ w, plus its bias where the checkpoint has one.
    Attention's projections (tinyinfer/model.py) use it too. `product`: the matrix product (a CUDA graph's
    capturable one: tinyinfer/kernels.py)."""
    y = product(x, params[name])  # [T, d_in] -> [T, d_out]
    bias = params.get(f"{name}_bias")
    return y if bias is None else y + bias


def swiglu(x, mlp: dict, activation: str = "silu"):
    """[T, d] -> [T, d_ff] -> [T, d], gated."""
    # BEGIN EXERCISE 4.3: the SwiGLU feed-forward
    hidden = ACTIVATIONS[activation](linear(x, mlp, "gate")) * linear(x, mlp, "up")  # [T, d] -> [T, d_ff]
    return linear(hidden, mlp, "down")  # [T, d_ff] -> [T, d]
    # END EXERCISE 4.3


def gelu_mlp(x, mlp: dict, activation: str = "gelu_tanh"):
    """GPT-2's MLP: [T, d] -> [T, 4d] -> [T, d]."""
    return linear(ACTIVATIONS[activation](linear(x, mlp, "up")), mlp, "down")
