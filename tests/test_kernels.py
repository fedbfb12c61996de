"""The fused kernels (tinyinfer/kernels.py) compute what the plain array code computes.

On NumPy and on the strict stand-in a fused kernel is the plain expression itself: equal to the last bit. On
CuPy it is one compiled kernel: equal within a few float32 roundings (a multiply-add may be contracted)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import REAL_GPU
from tinyinfer.backend import get_xp, to_numpy
from tinyinfer.kernels import fused_kernels
from tinyinfer.mlp import silu
from tinyinfer.norms import rms_norm
from tinyinfer.rope import apply_rope, inv_frequencies, rope_angles

EPS32 = float(np.finfo(np.float32).eps)


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((7, 4, 16)).astype(np.float32)  # [T, H, hd]
    cos, sin = rope_angles(np.arange(3, 10), inv_frequencies(16, 10000.0))  # 2 x [T, hd/2]
    return x, cos, sin, rng.standard_normal(16).astype(np.float32)


def _compare(fused, plain):
    """Bit-equal on NumPy and the stand-in; within 4 float32 epsilons of the value's scale on a GPU."""
    fused, plain = to_numpy(fused), to_numpy(plain)
    if REAL_GPU:
        np.testing.assert_allclose(fused, plain, rtol=0, atol=4 * EPS32 * float(np.abs(plain).max()))
    else:
        np.testing.assert_array_equal(fused, plain)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_fused_kernels_equal_the_plain_code(device):
    xp = get_xp(device)
    k = fused_kernels(xp)
    x, cos, sin, weight = (xp.asarray(a) for a in _inputs())
    gate, up = x[..., :8], x[..., 8:]
    _compare(k.silu_mul(gate, up), silu(gate) * up)
    rows = x.reshape(7, 64)
    mean_square = (rows * rows).mean(axis=-1, keepdims=True)
    _compare(k.rms_scale(rows, mean_square, xp.asarray(np.tile(to_numpy(weight), 4)), 1e-6),
             rms_norm(rows, xp.asarray(np.tile(to_numpy(weight), 4)), 1e-6))
    a, b = k.rotate(x[..., :8], x[..., 8:], cos[:, None, :], sin[:, None, :])
    _compare(xp.concatenate([a, b], axis=-1), apply_rope(x, cos, sin))


def test_a_wrong_kernel_is_caught():
    """The comparison can fail: a rotation with the sign of one term flipped differs from apply_rope."""
    x, cos, sin, _ = _inputs(1)
    c, s = cos[:, None, :], sin[:, None, :]
    wrong = np.concatenate([x[..., :8] * c + x[..., 8:] * s, x[..., 8:] * c + x[..., :8] * s], axis=-1)
    with pytest.raises(AssertionError):
        _compare(wrong, apply_rope(x, cos, sin))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_fused_ops_equal_the_plain_ops(device):
    """choose_ops("fused") against the plain functions, step by step: each norm kind, SwiGLU and GELU MLPs, full
    and partial RoPE."""
    from tinyinfer.kernels import PLAIN_OPS, choose_ops  # noqa: PLC0415

    xp = get_xp(device)
    fused = choose_ops("fused", xp)
    rng = np.random.default_rng(3)
    x = xp.asarray(rng.standard_normal((5, 32)).astype(np.float32))
    for kind in ("rmsnorm", "rmsnorm_plus_one", "layernorm"):
        weights = {"weight": xp.asarray(rng.standard_normal(32).astype(np.float32)),
                   "bias": xp.asarray(rng.standard_normal(32).astype(np.float32))}
        _compare(fused.norm(x, weights, kind, 1e-5), PLAIN_OPS.norm(x, weights, kind, 1e-5))
    mlp = {name: xp.asarray(rng.standard_normal(shape).astype(np.float32))
           for name, shape in (("gate", (32, 48)), ("up", (32, 48)), ("down", (48, 32)))}
    for activation in ("silu", "gelu_tanh"):
        _compare(fused.swiglu(x, mlp, activation), PLAIN_OPS.swiglu(x, mlp, activation))
    heads = xp.asarray(rng.standard_normal((5, 3, 16)).astype(np.float32))
    for rotated in (16, 8):  # full RoPE, then Phi-3's partial
        cos, sin = (xp.asarray(a) for a in rope_angles(np.arange(5), inv_frequencies(rotated, 10000.0)))
        _compare(fused.rope(heads, cos, sin), PLAIN_OPS.rope(heads, cos, sin))


def test_unknown_kernels_are_a_clear_error():
    from tinyinfer.errors import TinyInferError  # noqa: PLC0415
    from tinyinfer.kernels import choose_ops  # noqa: PLC0415

    with pytest.raises(TinyInferError, match="unknown kernels 'triton': use one of plain, fused"):
        choose_ops("triton", np)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", ["shakespeare", "shakespeare-moe"])
def test_a_model_with_fused_kernels_gives_the_plain_logits_and_tokens(device, name):
    """The switch end to end: `kernels="fused"` through `tinyinfer.load`, prefill logits and greedy decode."""
    import tinyinfer  # noqa: PLC0415

    plain, fused = (tinyinfer.load(name, device=device, kernels=k) for k in ("plain", "fused"))
    ids = plain.tokenizer.encode("ROMEO:\nWhat light through yonder window breaks?")
    _compare(fused.logits(ids), plain.logits(ids))
    assert fused.generate(ids, max_tokens=16, temperature=0).token_ids == \
        plain.generate(ids, max_tokens=16, temperature=0).token_ids


def test_the_forward_pass_runs_the_models_chosen_ops():
    """Each of the three steps is taken from `model.ops` (so the switch reaches the forward pass): an op that
    computes something else changes the logits."""
    import dataclasses  # noqa: PLC0415

    import tinyinfer  # noqa: PLC0415
    from tinyinfer.kernels import PLAIN_OPS  # noqa: PLC0415

    model = tinyinfer.load("shakespeare", kernels="fused")
    ids = model.tokenizer.encode("ROMEO:")
    reference = model.logits(ids)
    wrong = {"norm": lambda x, w, kind, eps: 2 * PLAIN_OPS.norm(x, w, kind, eps),
             "swiglu": lambda x, mlp, act: 2 * PLAIN_OPS.swiglu(x, mlp, act),
             "rope": lambda x, cos, sin: PLAIN_OPS.rope(x, sin, cos)}
    for step, op in wrong.items():
        model.ops = dataclasses.replace(PLAIN_OPS, **{step: op})
        assert np.abs(model.logits(ids) - reference).max() > 1e-3, step
