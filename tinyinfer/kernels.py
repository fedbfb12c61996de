"""Fused element-wise kernels: on a GPU, one kernel where array code launches several.

Written with arrays, SwiGLU's `silu(gate) * up` is four GPU kernels (negate, exp, add-and-divide, multiply):
each reads its inputs from the GPU's memory and writes a [T, d_ff] temporary back. A decode step is bound by
memory traffic, so those temporaries cost as much as the work. `cupy.fuse` compiles the same Python expression
into one kernel that reads each input once and writes the output once. Three such kernels cover what a Llama
block does element by element between its matrix products:

    silu_mul(gate, up)                      SwiGLU's gate:  gate * sigmoid(gate) * up
    rms_scale(x, mean_square, weight, eps)  RMSNorm after its one reduction: x / sqrt(ms + eps) * weight
    rotate(x1, x2, cos, sin)                RoPE's pair rotation: (x1 cos - x2 sin, x2 cos + x1 sin)

A decode step's attention over the paged KV cache is the fourth (`paged_decode_attention`, a CUDA RawKernel
below): it reads keys and values straight from the pool's blocks instead of gathering a padded copy first.

A decode step captured as a CUDA graph (tinyinfer/engine/cuda_graphs.py) needs one more kind: matrix products
that are not cuBLAS, which CuPy refuses to call while a stream captures (CuPy 13 and 14: "calling cuBLAS API during
stream capture is currently unsupported"). `choose_ops(..., capturable=True)` gives the ops such a step runs:
its linear layers through `decode_matmul` (a RawKernel for the few rows of a decode step), its attention through
the paged kernel; where there is no RawKernel (the tests' strict stand-in), both products as a broadcast multiply
and a sum (`broadcast_matmul`), which a graph captures. They sum the same products in another order than `@`:
the logits move within float32 rounding (tests/tolerances.py's `logits_bound`).

Each element-wise kernel is the plain expression, so on NumPy (no fuse) or on the tests' strict stand-in it is
exactly what the unfused code computes; on CuPy it is one compiled kernel computing the same expression, equal to
the plain one within float32 rounding of a few operations (|difference| <= 4 eps |value|: the compiler may contract a
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

import numpy as np

from tinyinfer.attention import decode_attention
from tinyinfer.errors import TinyInferError
from tinyinfer.mlp import ACTIVATIONS, linear, swiglu
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
    """The steps of a forward pass that kernels replace: a norm, a gated MLP, a rotation, a decode step's attention
    and (for a CUDA graph) the linear layers."""

    norm: callable  # (x, weights, kind, eps) -> normed x, as norms.apply_norm
    swiglu: callable  # (x, mlp, activation) -> [T, d], as mlp.swiglu
    rope: callable  # (x, cos, sin) -> rotated x, as rope.apply_partial_rope
    # (q, k_pool, v_pool, slots, spec, sinks) -> [B, H*hd]: a decode step's attention read from the paged pool
    # (None: the model gathers the blocks and calls `decode_attention`)
    paged_attention: callable = None
    linear: callable = linear  # (x, params, name) -> x @ w (+ bias), as mlp.linear
    decode_attention: callable = decode_attention  # (q, k, v, mask, scale, softcap, sinks), as attention's


PLAIN_OPS = ElementwiseOps(apply_norm, swiglu, apply_partial_rope)


def choose_ops(kernels: str, xp, capturable: bool = False) -> ElementwiseOps:
    """The plain array code, or the same steps through the fused kernels of `xp` ("plain" or "fused");
    `capturable`: with matrix products a CUDA graph can capture (no cuBLAS: see the module docstring)."""
    if kernels not in KERNELS:
        raise TinyInferError(f"unknown kernels {kernels!r}: use one of {', '.join(KERNELS)}")
    if kernels == "plain" and not capturable:
        return PLAIN_OPS
    raw_kernels = hasattr(xp, "RawKernel")  # CuPy compiles CUDA C; NumPy (and the tests' stand-in) keep array code
    project = functools.partial(linear, product=decode_matmul(xp) if raw_kernels else broadcast_matmul) \
        if capturable else linear
    norm, rope, silu_mul = apply_norm, apply_partial_rope, None
    if kernels == "fused":
        norm, rope, silu_mul = _fused_steps(fused_kernels(xp))

    def gated_mlp(x, mlp: dict, activation: str = "silu"):  # [T, d] -> [T, d_ff] -> [T, d], as mlp.swiglu
        gate, up = project(x, mlp, "gate"), project(x, mlp, "up")  # 2 x [T, d_ff]
        hidden = silu_mul(gate, up) if silu_mul and activation == "silu" else ACTIVATIONS[activation](gate) * up
        return project(hidden, mlp, "down")

    paged = functools.partial(paged_decode_attention, xp) if raw_kernels else None
    attend = functools.partial(decode_attention, matmul=broadcast_matmul) if capturable else decode_attention
    return ElementwiseOps(norm, gated_mlp, rope, paged, project, attend)


def _fused_steps(k: Kernels):
    """RMSNorm and RoPE through the fused kernels `k`, and SwiGLU's gate: (norm, rope, silu_mul)."""

    def norm(x, weights: dict, kind: str, eps: float):  # [..., d] -> [..., d]
        if kind not in ("rmsnorm", "rmsnorm_plus_one"):
            return apply_norm(x, weights, kind, eps)  # LayerNorms keep the plain code
        weight = weights["weight"] if kind == "rmsnorm" else 1.0 + weights["weight"]
        mean_square = (x * x).mean(axis=-1, keepdims=True)  # [..., d] -> [..., 1]: the one reduction
        return k.rms_scale(x, mean_square, weight, eps)

    def rope(x, cos, sin):  # [T, H, hd] -> [T, H, hd], the first 2 x cos.shape[-1] coordinates rotated
        half = cos.shape[-1]
        out = x.copy()
        out[..., :half], out[..., half:2 * half] = k.rotate(x[..., :half], x[..., half:2 * half],
                                                             cos[:, None, :], sin[:, None, :])
        return out

    return norm, rope, k.silu_mul


def broadcast_matmul(a, b):
    """a @ b as an element-wise product and a sum over the shared axis: no cuBLAS, so a CUDA graph captures it
    (it stands for `decode_matmul` where there is no RawKernel, and serves the graph's attention).
    [..., M, K] @ [..., K, N] -> [..., M, N]"""
    return (a[..., :, :, None] * b[..., None, :, :]).sum(axis=-2)  # [..., M, K, 1] * [..., 1, K, N] -> sum over K


# ---------------------------------------------------------------------------------------------------------------------
# Paged attention for a decode step, as one CUDA kernel (RawKernel)
# ---------------------------------------------------------------------------------------------------------------------
#
# The array code gathers every sequence's blocks into a padded [KV, B, L, hd] copy, then multiplies. On a GPU that
# copy is as large as the keys and values themselves: the kernel instead reads each key and value straight from
# the pool through the block table. One thread block per (sequence, head); its threads share the positions for
# the scores, then the head's coordinates for the weighted sum of the values. Scores, softmax and sum are float32
# whatever the storage (float32 or float16), as the array code computes them.

PAGED_ATTENTION_SOURCE = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half(x); }

#define THREADS 128
__device__ float block_reduce(float x, float* shared, bool take_max) {
    shared[threadIdx.x] = x;
    __syncthreads();
    for (int stride = THREADS / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            float other = shared[threadIdx.x + stride];
            shared[threadIdx.x] = take_max ? fmaxf(shared[threadIdx.x], other) : shared[threadIdx.x] + other;
        }
        __syncthreads();
    }
    float result = shared[0];
    __syncthreads();
    return result;
}

extern "C" __global__ void paged_decode_attention(
        const Q_T* q,              // [B, H, hd]: each sequence's one query
        const KV_T* k_pool,        // [KV, N, bs, hd]
        const KV_T* v_pool,        // [KV, N, bs, hd]
        const long long* tables,   // [B, n]: each sequence's blocks
        const long long* lengths,  // [B]: its tokens, the new one included
        const float* sinks,        // [H]: gpt-oss's sink logits (read when has_sinks)
        float* scores,             // [B, H, n * bs]: scratch
        Q_T* out,                  // [B, H, hd]
        int H, int KV, int N, int bs, int hd, int n, int window, float scale, float softcap, int has_sinks) {
    __shared__ float shared[THREADS];
    const int b = blockIdx.x, h = blockIdx.y, kv = h / (H / KV);
    const int len = (int)lengths[b];
    const int lo = (window > 0 && len > window) ? len - window : 0;  // a sliding window's first visible key
    const Q_T* qh = q + ((long long)b * H + h) * hd;
    float* s = scores + ((long long)b * H + h) * (long long)n * bs;

    // 1. each visible position's score (positions shared out over the threads), and their maximum
    float m = -INFINITY;
    for (int t = lo + threadIdx.x; t < len; t += THREADS) {
        const long long block = tables[(long long)b * n + t / bs];
        const KV_T* key = k_pool + (((long long)kv * N + block) * bs + t % bs) * hd;
        float dot = 0.f;
        for (int d = 0; d < hd; ++d) dot += to_float(qh[d]) * to_float(key[d]);
        float score = dot * scale;
        if (softcap > 0.f) score = softcap * tanhf(score / softcap);
        s[t] = score;
        m = fmaxf(m, score);
    }
    m = block_reduce(m, shared, true);
    if (has_sinks) m = fmaxf(m, sinks[h]);

    // 2. the softmax's numerators exp(score - max) and their sum (a sink adds to the sum only)
    float sum = 0.f;
    for (int t = lo + threadIdx.x; t < len; t += THREADS) {
        const float w = expf(s[t] - m);
        s[t] = w;
        sum += w;
    }
    sum = block_reduce(sum, shared, false);  // its barriers also publish every s[t] to every thread
    if (has_sinks) sum += expf(sinks[h] - m);

    // 3. the weighted sum of the values (coordinates shared out over the threads)
    for (int d = threadIdx.x; d < hd; d += THREADS) {
        float acc = 0.f;
        for (int t = lo; t < len; ++t) {
            const long long block = tables[(long long)b * n + t / bs];
            acc += s[t] * to_float(v_pool[(((long long)kv * N + block) * bs + t % bs) * hd + d]);
        }
        store(out + ((long long)b * H + h) * hd + d, acc / sum);
    }
}
"""
PAGED_ATTENTION_THREADS = 128
C_TYPES = {"float32": "float", "float16": "__half"}


def paged_attention_source(q_dtype, kv_dtype) -> str:
    """The kernel's CUDA source for queries and pool of these dtypes (float32 or float16)."""
    return f"#define Q_T {C_TYPES[str(q_dtype)]}\n#define KV_T {C_TYPES[str(kv_dtype)]}\n" + PAGED_ATTENTION_SOURCE


@functools.cache
def _paged_attention_kernel(xp, q_dtype: str, kv_dtype: str):
    return xp.RawKernel(paged_attention_source(q_dtype, kv_dtype), "paged_decode_attention")


def paged_decode_attention(xp, q, k_pool, v_pool, slots, spec, sinks=None):
    """`attention.decode_attention` of B one-token sequences, read straight from the paged pool (no gather).

    q [B, H, hd], pools [KV, N, bs, hd], slots: the cache's DecodeSlots, spec: the layer's AttentionSpec
    -> [B, H * hd]"""
    B, H, hd = q.shape
    KV, N, bs, _ = k_pool.shape
    n = slots.tables.shape[1]
    q = xp.ascontiguousarray(q)
    out = xp.empty_like(q)  # [B, H, hd]
    scores = xp.empty((B, H, n * bs), dtype=np.float32)  # scratch for the weights
    has_sinks = sinks is not None
    sinks = xp.asarray(sinks if has_sinks else xp.zeros(1), dtype=np.float32)
    kernel = _paged_attention_kernel(xp, str(q.dtype), str(k_pool.dtype))
    tables = xp.ascontiguousarray(slots.tables, dtype=np.int64)  # [B, n]
    kernel((B, H), (PAGED_ATTENTION_THREADS,),
           (q, k_pool, v_pool, tables, slots.lengths_on_device(), sinks, scores, out,
            np.int32(H), np.int32(KV), np.int32(N), np.int32(bs), np.int32(hd), np.int32(n),
            np.int32(spec.window or 0), np.float32(spec.scale),
            np.float32(spec.softcap or 0.0), np.int32(has_sinks)))
    return out.reshape(B, H * hd)


# ---------------------------------------------------------------------------------------------------------------------
# The linear layers of a decode step, without cuBLAS (a CUDA graph captures them): out = x @ w for a few rows x
# ---------------------------------------------------------------------------------------------------------------------
#
# A decode step multiplies a few rows (its B sequences) by each weight: the weight is read once for ROWS rows at a
# time, so the time is the weight's bytes over the memory bandwidth. Two layouts, as `arrange_for_matvec` leaves
# them: a column-major weight ([K, N] stored column by column) gives each output column to one warp, whose 32
# threads read the column's K numbers side by side and add up their products with a warp shuffle; a row-major one
# gives each output column to one thread, the 32 threads of a warp reading 32 neighbouring columns of a row, and
# splits K into SPLITS slices whose partial sums a fixed-order sum adds (a deterministic split-K). Products are
# float32, whatever the storage (float32 or float16), as cuBLAS computes them.

DECODE_MATMUL_SOURCE = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
#define ROWS 8

extern "C" __global__ void matmul_columns(  // w column-major: column n is w[n * K .. n * K + K)
        const X_T* x, const W_T* w, float* out, int M, int K, int N) {
    const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // one warp per output column
    const int m0 = blockIdx.y * ROWS;
    if (n >= N) return;  // the whole warp leaves together
    float acc[ROWS] = {0.f};
    const W_T* column = w + (long long)n * K;
    for (int k = lane; k < K; k += 32) {
        const float wk = to_float(column[k]);
        for (int r = 0; r < ROWS; ++r)
            if (m0 + r < M) acc[r] += to_float(x[(long long)(m0 + r) * K + k]) * wk;
    }
    for (int r = 0; r < ROWS; ++r) {
        float sum = acc[r];
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffff, sum, offset);
        if (lane == 0 && m0 + r < M) out[(long long)(m0 + r) * N + n] = sum;
    }
}

extern "C" __global__ void matmul_rows(  // w row-major: row k is w[k * N .. k * N + N); out: [SPLITS, M, N]
        const X_T* x, const W_T* w, float* out, int M, int K, int N, int slice) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;  // one thread per output column
    const int m0 = blockIdx.y * ROWS, k0 = blockIdx.z * slice;
    if (n >= N) return;
    float acc[ROWS] = {0.f};
    for (int k = k0; k < min(K, k0 + slice); ++k) {
        const float wk = to_float(w[(long long)k * N + n]);
        for (int r = 0; r < ROWS; ++r)
            if (m0 + r < M) acc[r] += to_float(x[(long long)(m0 + r) * K + k]) * wk;
    }
    for (int r = 0; r < ROWS; ++r)
        if (m0 + r < M) out[((long long)blockIdx.z * M + m0 + r) * N + n] = acc[r];
}
"""
DECODE_MATMUL_ROWS, DECODE_MATMUL_THREADS, DECODE_MATMUL_SPLITS = 8, 128, 16


@functools.cache
def _decode_matmul_kernels(xp, x_dtype: str, w_dtype: str):
    source = f"#define X_T {C_TYPES[x_dtype]}\n#define W_T {C_TYPES[w_dtype]}\n" + DECODE_MATMUL_SOURCE
    return xp.RawKernel(source, "matmul_columns"), xp.RawKernel(source, "matmul_rows")


def decode_matmul(xp):
    """x @ w by the kernels above, for the array module `xp` (CuPy).  x [M, K], w [K, N] -> [M, N]"""

    def matmul(x, w):
        M, K = x.shape
        N = w.shape[1]
        if str(x.dtype) not in C_TYPES or str(w.dtype) not in C_TYPES:
            raise TinyInferError(f"decode_matmul takes float32 or float16, not {x.dtype} @ {w.dtype}")
        columns, rows = _decode_matmul_kernels(xp, str(x.dtype), str(w.dtype))
        x = xp.ascontiguousarray(x)
        row_blocks = -(-M // DECODE_MATMUL_ROWS)
        if w.flags.f_contiguous:
            out = xp.empty((M, N), dtype=np.float32)
            warps = DECODE_MATMUL_THREADS // 32
            columns((-(-N // warps), row_blocks), (DECODE_MATMUL_THREADS,), (x, w, out, np.int32(M), np.int32(K), np.int32(N)))
        else:
            w = xp.ascontiguousarray(w)
            slice_ = -(-K // DECODE_MATMUL_SPLITS)
            partial = xp.empty((DECODE_MATMUL_SPLITS, M, N), dtype=np.float32)
            rows((-(-N // DECODE_MATMUL_THREADS), row_blocks, DECODE_MATMUL_SPLITS), (DECODE_MATMUL_THREADS,),
                 (x, w, partial, np.int32(M), np.int32(K), np.int32(N), np.int32(slice_)))
            out = partial.sum(axis=0)  # [SPLITS, M, N] -> [M, N], in a fixed order
        return out.astype(xp.result_type(x.dtype, w.dtype), copy=False)

    return matmul
