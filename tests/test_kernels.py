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


# --- the paged-attention kernel -------------------------------------------------------------------------------------

@pytest.mark.parametrize("q_dtype, kv_dtype", [("float32", "float32"), ("float32", "float16"), ("float16", "float16")])
def test_the_paged_attention_kernel_compiles(q_dtype, kv_dtype, tmp_path):
    """The CUDA source for each dtype pair compiles with nvcc (where the CUDA toolkit is installed: it runs on a
    real GPU only, in test_gpu_paged_attention_kernel_equals_the_array_code)."""
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    from tinyinfer.kernels import paged_attention_source  # noqa: PLC0415

    nvcc = shutil.which("nvcc") or shutil.which("/usr/local/cuda/bin/nvcc")
    if nvcc is None:
        pytest.skip("nvcc (the CUDA toolkit) is not installed")
    source = tmp_path / "paged.cu"
    source.write_text(paged_attention_source(q_dtype, kv_dtype))
    run = subprocess.run([nvcc, "-c", "-o", str(tmp_path / "paged.o"), str(source)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("name, kv_cache_dtype", [("shakespeare", "auto"), ("shakespeare", "float16")])
def test_gpu_paged_attention_kernel_equals_the_array_code(name, kv_cache_dtype):
    """The engine with kernels="fused" (the paged-attention kernel on a GPU) against the plain engine: the same
    greedy tokens."""
    if not REAL_GPU:
        pytest.skip("the kernel is CUDA C: it runs on a real GPU only (the stand-in keeps the array code)")
    import tinyinfer  # noqa: PLC0415
    from tinyinfer.engine import LLM  # noqa: PLC0415

    prompts = ["ROMEO:", "JULIET:\nO Romeo, Romeo", "KING:\n" * 20]
    params = tinyinfer.SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    plain, fused = (tinyinfer.load(name, device="cuda", kv_cache_dtype=kv_cache_dtype, kernels=k)
                    for k in ("plain", "fused"))
    assert fused.ops.paged_attention is not None
    assert [o.token_ids for o in LLM(fused).generate(prompts, params)] == \
        [o.token_ids for o in LLM(plain).generate(prompts, params)]


@pytest.mark.gpu
@pytest.mark.parametrize("window, softcap, with_sinks", [(None, None, False), (5, None, False), (None, 30.0, True)])
def test_gpu_paged_attention_kernel_equals_decode_attention(window, softcap, with_sinks):
    """The kernel against attention.decode_attention on the gathered blocks: random pools, block tables in
    shuffled order, sequences of different lengths, GQA; within the float32 bound of a sum over max(L, hd) terms."""
    if not REAL_GPU:
        pytest.skip("the kernel is CUDA C: it runs on a real GPU only (the stand-in keeps the array code)")
    import types  # noqa: PLC0415

    from tinyinfer.attention import decode_attention, decode_mask  # noqa: PLC0415
    from tinyinfer.config import AttentionSpec  # noqa: PLC0415
    from tinyinfer.kernels import paged_decode_attention  # noqa: PLC0415
    from tolerances import rounding_bound  # noqa: PLC0415

    cp, rng = get_xp("cuda"), np.random.default_rng(5)
    B, H, KV, hd, N, bs = 3, 8, 2, 64, 12, 4
    lengths = np.array([1, 9, 15])
    n = -(-int(lengths.max()) // bs)
    tables = np.stack([rng.permutation(N)[:n] for _ in range(B)])  # [B, n]
    k_pool, v_pool = (rng.standard_normal((KV, N, bs, hd)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((B, H, hd)).astype(np.float32)
    sinks = rng.standard_normal(H).astype(np.float32) if with_sinks else None
    spec = AttentionSpec(scale=hd**-0.5, softcap=softcap, window=window)
    slots = types.SimpleNamespace(tables=cp.asarray(tables), lengths_on_device=lambda: cp.asarray(lengths))
    ours = paged_decode_attention(cp, cp.asarray(q), cp.asarray(k_pool), cp.asarray(v_pool), slots, spec,
                                  None if sinks is None else cp.asarray(sinks))
    gather = lambda pool: pool[:, tables].reshape(KV, B, n * bs, hd)  # [KV, B, n*bs, hd]
    theirs = decode_attention(q, gather(k_pool), gather(v_pool), decode_mask(lengths, n * bs, window),
                              spec.scale, softcap, sinks)
    bound = rounding_bound(np.float32, float(np.abs(v_pool).max()), max(n * bs, hd), depth=2)
    np.testing.assert_allclose(to_numpy(ours), theirs, rtol=0, atol=bound)
