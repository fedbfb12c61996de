"""The feed-forward sublayer: each token alone, through a wide hidden layer and back.

GPT-2:  down(gelu(up(x)))                       d -> 4d -> d
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


# NumPy's ufuncs (np.exp, np.tanh) also run on CuPy arrays: CuPy implements __array_ufunc__.
ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh}


def linear(x, params: dict, name: str):
    """The linear layer `name` of a parameter dict: x @ w, plus its bias where the checkpoint has one.
    Attention's projections (tinyinfer/model.py) use it too."""
    y = x @ params[name]  # [T, d_in] -> [T, d_out]
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
