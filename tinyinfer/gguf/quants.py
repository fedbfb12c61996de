"""GGUF's block-quantised types, and how to turn each back into float32 numbers.

A quantised GGUF tensor is a run of *blocks*. A block holds a fixed number of consecutive weights of one row
(32, or 256 for the K-quants) as small integer codes plus the float16 scale(s) that say what the codes mean:

    Q8_0  (32 weights, 34 bytes):  struct { f16 d; int8 qs[32]; }           w = d * q
    Q4_1  (32 weights, 20 bytes):  struct { f16 d; f16 m; u8 qs[16]; }       w = d * q + m,   q in 0..15

The K-quants group 256 weights in a *super-block* of 8 or 16 sub-blocks; each sub-block has its own scale
(and min), stored as a small integer (4 or 6 bits) that the super-block's float16 `d` (and `dmin`) scales in
turn: two levels of scales, so a scale costs 6 bits, not 16. Q4_K, the type of most weights of a Q4_K_M file:

    Q4_K  (256 weights, 144 bytes):  struct { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }
          8 sub-blocks of 32: w = (d * sc[j]) * q - (dmin * m[j]),   sc, m: 6 bits each, packed in `scales`

One function per type below, each `blocks [n, bytes per block] (uint8) -> [n, weights per block] (float32)`,
with the block's C struct (llama.cpp's ggml-common.h) in its docstring. Each computes the same float32
products, in the same order, as llama.cpp's reference `dequantize_row_*`: the results are bit-identical to
`gguf.quants.dequantize` (tests/test_gguf_quants.py), on random blocks and on real files.

Bits per weight (bytes per block x 8 / weights per block): F32 32, F16 and BF16 16, Q8_0 8.5, Q5_1 6,
Q5_0 5.5, Q6_K 6.5625, Q5_K 5.5, Q4_1 5, Q4_0 4.5, Q4_K 4.5, Q3_K 3.4375, Q2_K 2.625.

    >>> block = np.array([[0x00, 0x3C] + [2, 0xFF] + [0] * 30], dtype=np.uint8)  # d = 1.0 (f16 0x3C00); q = 2, -1, 0...
    >>> dequantize_q8_0(block)[0, :3].tolist()
    [2.0, -1.0, 0.0]
"""

from __future__ import annotations

import numpy as np

from tinyinfer.errors import TinyInferError
from tinyinfer.safetensors_io import bf16_to_f32

QK_K = 256  # weights per K-quant super-block

# Every type ggml defines: id -> (name, weights per block, bytes per block). The sizes let a reader check any
# file's layout, even of types tinyinfer refuses to dequantise.
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}


def _f16(blocks, start: int):
    """The float16 at byte `start` of every block, widened.  [n, bytes] -> [n, 1] (float32)"""
    return blocks[:, start:start + 2].view(np.float16).astype(np.float32)


def _nibbles(qs, chunk: int):
    """Split bytes into 4-bit codes, in chunks of `chunk` bytes: a chunk's low nibbles are `chunk` weights, then
    its high nibbles the next `chunk` (ggml's order: chunks of 16 in 32-weight blocks, of 32 in the K-quants).
    [n, chunk * c] (uint8) -> [n, 2 * chunk * c] (uint8, 0..15)"""
    n = qs.shape[0]
    chunks = qs.reshape(n, -1, 1, chunk) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)  # [n, c, 2, chunk]
    return (chunks & 0x0F).reshape(n, -1)  # -> [n, 2 chunk c]


def _crumbs(qs):
    """Split bytes into 2-bit codes, in chunks of 32 bytes: bits 0-1 of a chunk's bytes are 32 weights, bits 2-3
    the next 32, and so on.  [n, 32 * c] (uint8) -> [n, 128 * c] (uint8, 0..3)"""
    n = qs.shape[0]
    chunks = qs.reshape(n, -1, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)  # [n, c, 4, 32]
    return (chunks & 0x03).reshape(n, -1)  # -> [n, 128 c]


def _bits(bytes_, n_weights: int):
    """One bit per weight: bit b of byte l is weight 32 b + l (the K-quants' high bits, 32 bytes wide).
    [n, 32] (uint8) -> [n, n_weights] (uint8, 0..1)"""
    n = bytes_.shape[0]
    planes = bytes_.reshape(n, 1, 32) >> np.arange(n_weights // 32, dtype=np.uint8).reshape(1, -1, 1)  # [n, b, 32]
    return (planes & 1).reshape(n, n_weights)


# -- plain floats ------------------------------------------------------------------------------------------------

def dequantize_f32(blocks):
    """F32: the numbers themselves.  [n, 4] -> [n, 1]"""
    return blocks.view(np.float32)


def dequantize_f16(blocks):
    """F16: IEEE half precision, widened exactly.  [n, 2] -> [n, 1]"""
    return blocks.view(np.float16).astype(np.float32)


def dequantize_bf16(blocks):
    """BF16: the top 16 bits of a float32 (safetensors_io.bf16_to_f32).  [n, 2] -> [n, 1]"""
    return bf16_to_f32(blocks.view(np.uint16))


# -- 32-weight blocks ----------------------------------------------------------------------------------------

def dequantize_q8_0(blocks):
    """Q8_0, 32 weights in 34 bytes:

        struct block_q8_0 { f16 d; int8 qs[32]; };        w[i] = d * qs[i]

    [n, 34] (uint8) -> [n, 32] (float32)
    """
    # BEGIN EXERCISE 12.4: dequantise Q8_0
    d = _f16(blocks, 0)  # [n, 34] -> [n, 1]
    q = blocks[:, 2:34].view(np.int8).astype(np.float32)  # [n, 32]: signed codes
    return q * d  # [n, 32]
    # END EXERCISE 12.4


def dequantize_q4_0(blocks):
    """Q4_0, 32 weights in 18 bytes: 4-bit codes, offset by 8 (so 0..15 means -8..7):

        struct block_q4_0 { f16 d; u8 qs[16]; };           w[i] = d * (q[i] - 8)
        q[i] = qs[i] & 0xF (i < 16), qs[i - 16] >> 4 (i >= 16)

    [n, 18] -> [n, 32]
    """
    d = _f16(blocks, 0)  # [n, 1]
    q = _nibbles(blocks[:, 2:18], 16).astype(np.int8) - np.int8(8)  # [n, 16] -> [n, 32], -8..7
    return d * q.astype(np.float32)


def dequantize_q4_1(blocks):
    """Q4_1, 32 weights in 20 bytes: 4-bit codes with a scale and a minimum (the block's smallest weight):

        struct block_q4_1 { f16 d; f16 m; u8 qs[16]; };    w[i] = d * q[i] + m,   q as in Q4_0, 0..15

    [n, 20] -> [n, 32]
    """
    d, m = _f16(blocks, 0), _f16(blocks, 2)  # [n, 1] each
    q = _nibbles(blocks[:, 4:20], 16).astype(np.float32)  # [n, 16] -> [n, 32]
    return d * q + m


def _q5_codes(qh, qs):
    """Q5_0/Q5_1's 5-bit codes: the low 4 bits as in Q4_0, the fifth is bit i of the little-endian u32 `qh`.
    qh [n, 4], qs [n, 16] -> [n, 32] (uint8, 0..31)"""
    high = np.unpackbits(qh, axis=-1, bitorder="little")  # [n, 4] -> [n, 32]: bit i of the u32 = weight i
    return _nibbles(qs, 16) | (high << 4)


def dequantize_q5_0(blocks):
    """Q5_0, 32 weights in 22 bytes: 5-bit codes, offset by 16:

        struct block_q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }; w[i] = d * (q[i] - 16)

    [n, 22] -> [n, 32]
    """
    d = _f16(blocks, 0)  # [n, 1]
    q = _q5_codes(blocks[:, 2:6], blocks[:, 6:22]).astype(np.int8) - np.int8(16)  # [n, 32], -16..15
    return d * q.astype(np.float32)


def dequantize_q5_1(blocks):
    """Q5_1, 32 weights in 24 bytes: 5-bit codes with a scale and a minimum:

        struct block_q5_1 { f16 d; f16 m; u8 qh[4]; u8 qs[16]; };   w[i] = d * q[i] + m

    [n, 24] -> [n, 32]
    """
    d, m = _f16(blocks, 0), _f16(blocks, 2)  # [n, 1] each
    q = _q5_codes(blocks[:, 4:8], blocks[:, 8:24]).astype(np.float32)  # [n, 32], 0..31
    return d * q + m


# -- K-quants: 256-weight super-blocks ---------------------------------------------------------------------------

def dequantize_q2_k(blocks):
    """Q2_K, 256 weights in 84 bytes: 16 sub-blocks of 16, each a 4-bit scale and a 4-bit min (one byte):

        struct block_q2_K { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; };
        w = (d * (scales[j] & 0xF)) * q - (dmin * (scales[j] >> 4)),   q: 2 bits (_crumbs), j = sub-block

    [n, 84] -> [n, 256]
    """
    n = blocks.shape[0]
    scales = blocks[:, 0:16]  # [n, 16]
    d, dmin = _f16(blocks, 80), _f16(blocks, 82)  # [n, 1] each
    dl = (d * (scales & 0xF).astype(np.float32)).reshape(n, 16, 1)  # [n, 16, 1]: each sub-block's step
    ml = (dmin * (scales >> 4).astype(np.float32)).reshape(n, 16, 1)  # [n, 16, 1]: and its minimum
    q = _crumbs(blocks[:, 16:80]).reshape(n, 16, 16).astype(np.float32)  # [n, 64] -> [n, 256] -> [n, 16, 16]
    return (dl * q - ml).reshape(n, QK_K)


def dequantize_q3_k(blocks):
    """Q3_K, 256 weights in 110 bytes: 16 sub-blocks of 16, each a signed 6-bit scale; 3-bit codes, the low two
    bits in `qs` (as Q2_K's), the third in `hmask` (_bits), a *clear* bit meaning "subtract 4":

        struct block_q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; };
        w = (d * (sc[j] - 32)) * q,   q = low2 - (hbit ? 0 : 4) in -4..3
        sc[j] (6 bits): low 4 from scales[j % 8] (low nibble for j < 8, high for j >= 8),
                        high 2 from scales[8 + j % 4], bits 2 (j // 4)..

    [n, 110] -> [n, 256]
    """
    n = blocks.shape[0]
    d = _f16(blocks, 108)  # [n, 1]
    packed = blocks[:, 96:108]  # [n, 12]
    low = (packed[:, 0:8].reshape(n, 1, 8) >> np.array([0, 4], dtype=np.uint8).reshape(1, 2, 1)) & 0x0F  # [n, 2, 8]
    high = (packed[:, 8:12].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)) & 0x03  # [n, 4, 4]
    sc = (low.reshape(n, 16) | (high.reshape(n, 16) << 4)).astype(np.int8) - np.int8(32)  # [n, 16], -32..31
    dl = (d * sc.astype(np.float32)).reshape(n, 16, 1)  # [n, 16, 1]
    low2 = _crumbs(blocks[:, 32:96]).astype(np.int8)  # [n, 256]
    minus4 = ((_bits(blocks[:, 0:32], QK_K) ^ 1) << 2).astype(np.int8)  # [n, 256]: 4 where the bit is clear
    q = (low2 - minus4).reshape(n, 16, 16).astype(np.float32)  # [n, 16, 16]
    return (dl * q).reshape(n, QK_K)


def k_scales_mins(packed):
    """The 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K super-block, packed in 12 bytes:

        bytes 0-3:  sc[0..3] in bits 0-5, the top 2 bits of sc[4..7] in bits 6-7
        bytes 4-7:  m[0..3]  in bits 0-5, the top 2 bits of m[4..7]  in bits 6-7
        bytes 8-11: the low 4 bits of sc[4..7] (low nibble) and of m[4..7] (high nibble)

    [n, 12] (uint8) -> (sc [n, 8], m [n, 8]) (uint8, 0..63)
    """
    # BEGIN EXERCISE 12.5: unpack Q4_K's 6-bit scales and mins
    a, b, c = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]  # [n, 4] each
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 6) << 4)], axis=-1)  # [n, 8]
    m = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 6) << 4)], axis=-1)  # [n, 8]
    return sc, m
    # END EXERCISE 12.5


def _k_steps(blocks):
    """Q4_K/Q5_K's per-sub-block step d * sc[j] and minimum dmin * m[j].  [n, bytes] -> 2 x [n, 8, 1]"""
    n = blocks.shape[0]
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)  # [n, 1] each
    sc, m = k_scales_mins(blocks[:, 4:16])  # [n, 8] each
    return (d * sc.astype(np.float32)).reshape(n, 8, 1), (dmin * m.astype(np.float32)).reshape(n, 8, 1)


def dequantize_q4_k(blocks):
    """Q4_K, 256 weights in 144 bytes: 8 sub-blocks of 32, each a 6-bit scale and a 6-bit min (k_scales_mins):

        struct block_q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; };
        w = (d * sc[j]) * q - (dmin * m[j]),   q: 4 bits (_nibbles), j = sub-block

    [n, 144] -> [n, 256]
    """
    n = blocks.shape[0]
    step, minimum = _k_steps(blocks)  # [n, 8, 1] each
    q = _nibbles(blocks[:, 16:144], 32).reshape(n, 8, 32).astype(np.float32)  # [n, 128] -> [n, 256] -> [n, 8, 32]
    return (step * q - minimum).reshape(n, QK_K)


def dequantize_q5_k(blocks):
    """Q5_K, 256 weights in 176 bytes: Q4_K with a fifth bit per weight in `qh` (_bits):

        struct block_q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; };
        w = (d * sc[j]) * q - (dmin * m[j]),   q = low4 | hbit << 4 in 0..31

    [n, 176] -> [n, 256]
    """
    n = blocks.shape[0]
    step, minimum = _k_steps(blocks)  # [n, 8, 1] each
    q = _nibbles(blocks[:, 48:176], 32) | (_bits(blocks[:, 16:48], QK_K) << 4)  # [n, 256], 0..31
    return (step * q.reshape(n, 8, 32).astype(np.float32) - minimum).reshape(n, QK_K)


def dequantize_q6_k(blocks):
    """Q6_K, 256 weights in 210 bytes: 16 sub-blocks of 16, each a signed 8-bit scale; 6-bit codes offset by 32,
    the low 4 bits in `ql`, the high 2 in `qh`, each half of the super-block (128 weights) laid out as

        struct block_q6_K { u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d; };
        w = (d * scales[j]) * (q - 32),   half h, weight l + 32 k (l < 32, k < 4):
            low  = ql[64 h + l + 32 (k % 2)] >> 4 (k // 2)   (low nibble for k < 2)
            high = qh[32 h + l] >> 2 k & 3

    [n, 210] -> [n, 256]
    """
    n = blocks.shape[0]
    d = _f16(blocks, 208)  # [n, 1]
    step = (d * blocks[:, 192:208].view(np.int8).astype(np.float32)).reshape(n, 16, 1)  # [n, 16, 1]
    ql = blocks[:, 0:128].reshape(n, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)  # [n, 2, 2, 64]
    low = (ql & 0x0F).reshape(n, 2, 128)  # [n, 2 halves, 128]
    high = _crumbs(blocks[:, 128:192]).reshape(n, 2, 128)  # [n, 64] -> [n, 2 halves, 128]
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)  # [n, 2, 128], -32..31
    return (step * q.reshape(n, 16, 16).astype(np.float32)).reshape(n, QK_K)


DEQUANTIZERS = {
    "F32": dequantize_f32, "F16": dequantize_f16, "BF16": dequantize_bf16,
    "Q8_0": dequantize_q8_0, "Q4_0": dequantize_q4_0, "Q4_1": dequantize_q4_1, "Q5_0": dequantize_q5_0,
    "Q5_1": dequantize_q5_1, "Q2_K": dequantize_q2_k, "Q3_K": dequantize_q3_k, "Q4_K": dequantize_q4_k,
    "Q5_K": dequantize_q5_k, "Q6_K": dequantize_q6_k,
}
REFUSAL_FIX = "use a GGUF file in a K-quant (Q4_K_M, Q5_K_M, Q6_K) or in Q8_0, F16 or F32"


def type_by_name(name: str) -> tuple[str, int, int]:
    """(name, weights per block, bytes per block) of the type called `name`."""
    return next(t for t in GGML_TYPES.values() if t[0] == name)


def check_supported(type_name: str, what: str) -> None:
    """Refuse, by name, a type tinyinfer cannot dequantise (IQ*, TQ*, MXFP4, Q8_1/Q8_K, integers)."""
    if type_name not in DEQUANTIZERS:
        raise TinyInferError(f"{what} is stored as {type_name}, which tinyinfer cannot dequantise "
                             f"(it reads {', '.join(DEQUANTIZERS)}): {REFUSAL_FIX}")


def dequantize(raw, type_name: str, shape: tuple[int, ...]):
    """The float32 array of `shape` that `raw` (a tensor's bytes, uint8) holds in `type_name`.

    The last axis of `shape` runs along the blocks (GGUF's first dimension, ne[0]), so the bytes are
    [rows, blocks per row, bytes per block] and every row dequantises on its own.
    """
    check_supported(type_name, "a tensor")
    _, block_weights, block_bytes = type_by_name(type_name)
    blocks = np.ascontiguousarray(raw).reshape(-1, block_bytes)  # [n_blocks, bytes per block]
    return DEQUANTIZERS[type_name](blocks).reshape(shape)  # [n_blocks, weights per block] -> shape
