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

Newer types change what a code means rather than how blocks are laid out: IQ4_NL and IQ4_XS index a fixed
non-linear grid of 16 levels; TQ1_0 and TQ2_0 store ternary weights (-d, 0, d), TQ1_0 five base-3 digits to a
byte; MXFP4 and NVFP4 store each weight as a 4-bit float (FP4 E2M1) under a power-of-two or an FP8 scale.
The IQ1, IQ2 and IQ3 types quantise 8 (or 4) weights at once: one code picks an entry of a fixed codebook of
256 to 2048 patterns of levels (gguf/iq_grids.py), the signs stored apart (IQ1's levels are -1, 0, 1 shifted
by +-1/8):

    IQ2_XXS (256 weights, 66 bytes):  struct { f16 d; u16 qs[32]; }
          8 sub-blocks of 32: w = d * (0.5 + s) * 0.25 * iq2xxs_grid[q][j] * sign[j],   4 codes of 8 bits,
          4 sign indices of 7 bits and the 4-bit scale s in each sub-block's 8 bytes

Bits per weight (bytes per block x 8 / weights per block): F32 32, F16 and BF16 16, Q8_0 8.5, Q6_K 6.5625,
Q5_1 6, Q5_0 5.5, Q5_K 5.5, Q4_1 5, Q4_0 4.5, Q4_K 4.5, IQ4_NL 4.5, NVFP4 4.5, IQ4_XS 4.25, MXFP4 4.25,
Q3_K 3.4375, IQ3_S 3.4375, IQ3_XXS 3.0625, Q2_K 2.625, IQ2_S 2.5625, IQ2_XS 2.3125, TQ2_0 2.0625,
IQ2_XXS 2.0625, IQ1_M 1.75, TQ1_0 1.6875, IQ1_S 1.5625.

    >>> block = np.array([[0x00, 0x3C] + [2, 0xFF] + [0] * 30], dtype=np.uint8)  # d = 1.0 (f16 0x3C00); q = 2, -1, 0...
    >>> dequantize_q8_0(block)[0, :3].tolist()
    [2.0, -1.0, 0.0]
"""

from __future__ import annotations

import numpy as np

from tinyinfer.errors import TinyInferError
from tinyinfer.gguf.iq_grids import IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS
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
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}


def _f16(blocks, start: int):
    """The float16 at byte `start` of every block, widened.  [n, bytes] -> [n, 1] (float32)"""
    return blocks[:, start:start + 2].view(np.float16).astype(np.float32)


def _nibbles(qs, chunk: int):
    """Split bytes into 4-bit codes, in chunks of `chunk` bytes: a chunk's low nibbles are `chunk` weights, then
    its high nibbles the next `chunk` (ggml's order: chunks of 16 in 32-weight blocks, of 32 in the K-quants,
    of 8 in NVFP4's sub-blocks).
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


# -- a non-linear 4-bit grid (IQ4_NL, IQ4_XS) ---------------------------------------------------------------------

# IQ4's 16 levels, ggml's kvalues_iq4nl: closer together near 0, where most weights are, than Q4_0's even grid
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


def dequantize_iq4_nl(blocks):
    """IQ4_NL, 32 weights in 18 bytes: Q4_0's layout, but a code picks one of the 16 levels of KVALUES_IQ4NL:

        struct block_iq4_nl { f16 d; u8 qs[16]; };         w[i] = d * kvalues_iq4nl[q[i]],   q as in Q4_0

    [n, 18] -> [n, 32]
    """
    d = _f16(blocks, 0)  # [n, 1]
    return d * KVALUES_IQ4NL[_nibbles(blocks[:, 2:18], 16)]  # [n, 16] -> [n, 32] codes -> levels


def dequantize_iq4_xs(blocks):
    """IQ4_XS, 256 weights in 136 bytes: 8 sub-blocks of 32 in IQ4_NL's codes, each a 6-bit scale offset by 32:

        struct block_iq4_xs { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; };
        w = (d * (ls[j] - 32)) * kvalues_iq4nl[q],   q: sub-block j's 16 bytes of nibbles, as in IQ4_NL
        ls[j] (6 bits): low 4 from scales_l[j // 2] (low nibble for even j), high 2 from bits 2j, 2j+1 of scales_h

    [n, 136] -> [n, 256]
    """
    n = blocks.shape[0]
    d = _f16(blocks, 0)  # [n, 1]
    high = (blocks[:, 2:4].view(np.uint16) >> np.arange(0, 16, 2, dtype=np.uint16)) & 0x03  # [n, 1] -> [n, 8]
    ls = _nibbles(blocks[:, 4:8], 1) | (high.astype(np.uint8) << 4)  # [n, 4] -> [n, 8], 0..63
    step = (d * (ls.astype(np.int8) - np.int8(32)).astype(np.float32)).reshape(n, 8, 1)  # [n, 8, 1]
    levels = KVALUES_IQ4NL[_nibbles(blocks[:, 8:136], 16)].reshape(n, 8, 32)  # [n, 128] -> [n, 256] -> [n, 8, 32]
    return (step * levels).reshape(n, QK_K)


# -- ternary weights (TQ1_0, TQ2_0): every weight -d, 0 or d -------------------------------------------------------

POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)


def _trits(packed, per_byte: int):
    """Base-3 digits, `per_byte` (5 or 4) to a byte. A byte b holds digits t0 t1 t2 t3 t4 (t0 first) as the fraction
    b / 256 ~ (t0 t1 t2 t3 t4 in base 3) / 243, rounded up: multiplying by 3^k (mod 256) drops the first k digits,
    and (b 3^k mod 256) * 3 // 256 reads the next one. Digit k of a run of c bytes is weight k c + j, as ggml orders.
    [n, c] (uint8) -> [n, per_byte * c] (uint8, 0..2)"""
    n = packed.shape[0]
    shifted = packed.reshape(n, 1, -1) * POW3[:per_byte].reshape(1, -1, 1)  # [n, k, c]: uint8 products wrap mod 256
    return ((shifted.astype(np.uint16) * 3) >> 8).astype(np.uint8).reshape(n, -1)  # -> [n, k c]


def dequantize_tq1_0(blocks):
    """TQ1_0, 256 weights in 54 bytes: 1.6875 bits a weight, 5 trits to a byte (_trits), in three runs:

        struct block_tq1_0 { u8 qs[48]; u8 qh[4]; f16 d; };       w = (t - 1) * d,   t in 0..2
        weights 0..159: 5 trits of qs[0:32];  160..239: 5 of qs[32:48];  240..255: 4 of qh

    [n, 54] -> [n, 256]
    """
    d = _f16(blocks, 52)  # [n, 1]
    t = np.concatenate([_trits(blocks[:, 0:32], 5), _trits(blocks[:, 32:48], 5), _trits(blocks[:, 48:52], 4)],
                       axis=-1)  # [n, 160 + 80 + 16 = 256]
    return (t.astype(np.int8) - np.int8(1)).astype(np.float32) * d


def dequantize_tq2_0(blocks):
    """TQ2_0, 256 weights in 66 bytes: a 2-bit code per weight, ordered as Q2_K's (_crumbs):

        struct block_tq2_0 { u8 qs[64]; f16 d; };                 w = (q - 1) * d,   q in 0..3

    [n, 66] -> [n, 256]
    """
    d = _f16(blocks, 64)  # [n, 1]
    q = _crumbs(blocks[:, 0:64]).astype(np.int8) - np.int8(1)  # [n, 64] -> [n, 256], -1..2
    return q.astype(np.float32) * d


# -- 4-bit floats (MXFP4, NVFP4): each code an FP4 E2M1 number, the scale a power of two or an FP8 -----------------

# FP4 E2M1's 16 values (sign, 2 exponent bits, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives),
# doubled to be integers as ggml's kvalues_mxfp4 are: the scales below are halved to make up for it
KVALUES_FP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _e8m0_half(e):
    """E8M0 scales (a bare exponent: byte e means 2^(e - 127)), halved: 2^(e - 128), exact even where it is
    subnormal (e < 2). Byte 255, NaN in the OCP MX spec, reads as 2^127, as in ggml.  [n, k] (uint8) -> [n, k]"""
    return np.ldexp(np.float32(1), e.astype(np.int32) - 128)


def _ue4m3_half(x):
    """Unsigned FP8 E4M3 scales (bits 6-3 an exponent biased by 7, bits 2-0 the mantissa in eighths; bit 7 ignored),
    halved: (8 + m) / 8 * 2^(e - 7) / 2, or for e = 0 (subnormal) m / 8 * 2^-6 / 2; 0x7F (NaN) reads as 0, as
    in ggml.  [n, k] (uint8) -> [n, k] (float32, exact)"""
    e, m = (x >> 3) & 0x0F, x & 0x07  # [n, k] each
    mantissa = np.where(e > 0, m + 8, m).astype(np.float32)  # eighths, with a normal number's leading 1
    half = np.ldexp(mantissa, np.maximum(e, 1).astype(np.int32) - 11)  # 2^-3 for the eighths, -7 bias, -1 halving
    return np.where(x == 0x7F, np.float32(0), half)


def dequantize_mxfp4(blocks):
    """MXFP4 (OCP microscaling), 32 weights in 17 bytes: FP4 codes, ordered as Q4_0's, and a power-of-two scale:

        struct block_mxfp4 { u8 e; u8 qs[16]; };           w[i] = kvalues_mxfp4[q[i]] * 2^(e - 128)

    [n, 17] -> [n, 32]
    """
    d = _e8m0_half(blocks[:, 0:1])  # [n, 1]
    return KVALUES_FP4[_nibbles(blocks[:, 1:17], 16)] * d  # [n, 16] -> [n, 32] codes -> values


def dequantize_nvfp4(blocks):
    """NVFP4, 64 weights in 36 bytes: 4 sub-blocks of 16 FP4 codes, each an FP8 (UE4M3) scale:

        struct block_nvfp4 { u8 d[4]; u8 qs[32]; };        w = kvalues_mxfp4[q] * ue4m3(d[j]) / 2
        sub-block j: qs[8j:8j+8], low nibbles its weights 0..7, high nibbles 8..15

    [n, 36] -> [n, 64]
    """
    n = blocks.shape[0]
    d = _ue4m3_half(blocks[:, 0:4]).reshape(n, 4, 1)  # [n, 4] -> [n, 4, 1]
    values = KVALUES_FP4[_nibbles(blocks[:, 4:36], 8)].reshape(n, 4, 16)  # [n, 32] -> [n, 64] -> [n, 4, 16]
    return (values * d).reshape(n, 64)


# -- codebooks (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M): one code stands for 8 or 4 weights ----------

IQ1S_DELTA = np.float32(0.125)  # IQ1's shift of its levels -1, 0, 1, up or down by a sign bit


def _signs(bytes_):
    """One sign bit per weight, bit j of byte b for weight 8 b + j (ggml's kmask_iq2xs), set meaning minus.
    [n, k] (uint8) -> [n, 8 k] (float32, +-1)"""
    bits = np.unpackbits(bytes_, axis=-1, bitorder="little")  # [n, k] -> [n, 8 k]
    return np.where(bits == 1, np.float32(-1), np.float32(1))


def _ksigns(words):
    """The 8 signs of each of the four 7-bit indices (bits 0-6, 7-13, 14-20, 21-27) of u32 words, read through
    ksigns_iq2xs (the 8th sign their parity).  [n, k] (uint32) -> [n, 32 k] (float32, +-1)"""
    n = words.shape[0]
    index = (words[..., None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 127  # [n, k] -> [n, k, 4]
    return _signs(KSIGNS_IQ2XS[index].reshape(n, -1))  # [n, 4 k] sign bytes -> [n, 32 k]


def _iq2_steps(d, s):
    """The IQ2 types' step d * (0.5 + s) * 0.25 from 4-bit scales s, the products in ggml's order.
    d [n, 1], s [n, k] (unsigned) -> [n, k, 1]"""
    return (d * (np.float32(0.5) + s.astype(np.float32)) * np.float32(0.25))[..., None]


def dequantize_iq2_xxs(blocks):
    """IQ2_XXS, 256 weights in 66 bytes (2.0625 bits each): 8 sub-blocks of 32, each two u32 words: the bytes of
    the first index 4 entries of iq2xxs_grid (8 magnitudes each); the second holds 4 sign indices of 7 bits
    (_ksigns) and, in bits 28-31, the sub-block's scale s:

        struct block_iq2_xxs { f16 d; u16 qs[32]; };
        w = d * (0.5 + s) * 0.25 * grid[q][j] * sign[j]

    [n, 66] -> [n, 256]
    """
    n = blocks.shape[0]
    words = blocks[:, 2:66].view(np.uint32).reshape(n, 8, 2)  # [n, 64] -> [n, 8 sub-blocks, 2]
    step = _iq2_steps(_f16(blocks, 0), words[..., 1] >> 28)  # [n, 8] -> [n, 8, 1]
    codes = blocks[:, 2:66].reshape(n, 8, 8)[:, :, 0:4]  # [n, 8, 4]: the first word's bytes
    levels = IQ2XXS_GRID[codes].reshape(n, 8, 32)  # [n, 8, 4] -> [n, 8, 4, 8] -> [n, 8, 32]
    signs = _ksigns(words[..., 1]).reshape(n, 8, 32)  # [n, 8] -> [n, 256] -> [n, 8, 32]
    return (step * levels * signs).reshape(n, QK_K)


def dequantize_iq2_xs(blocks):
    """IQ2_XS, 256 weights in 74 bytes (2.3125 bits): a u16 per 8 weights, its low 9 bits an entry of iq2xs_grid,
    its high 7 a sign index (ksigns_iq2xs); a 4-bit scale s per 16 weights (scales[i]: low nibble first):

        struct block_iq2_xs { f16 d; u16 qs[32]; u8 scales[8]; };
        w = d * (0.5 + s) * 0.25 * grid[q & 511][j] * sign[j]

    [n, 74] -> [n, 256]
    """
    n = blocks.shape[0]
    step = _iq2_steps(_f16(blocks, 0), _nibbles(blocks[:, 66:74], 1))  # [n, 8] -> [n, 16] -> [n, 16, 1]
    qs = blocks[:, 2:66].view(np.uint16)  # [n, 64] -> [n, 32]
    levels = IQ2XS_GRID[qs & 511].reshape(n, 16, 16)  # [n, 32] -> [n, 32, 8] -> [n, 16, 16]
    signs = _signs(KSIGNS_IQ2XS[qs >> 9]).reshape(n, 16, 16)  # [n, 32] -> [n, 256] -> [n, 16, 16]
    return (step * levels * signs).reshape(n, QK_K)


def dequantize_iq2_s(blocks):
    """IQ2_S, 256 weights in 82 bytes (2.5625 bits): IQ2_XS with 10-bit indices into iq2s_grid and a sign bit
    per weight, no parity. Index k (of 32, 8 weights each) is qs[k] | ((qh[k // 4] >> 2 (k % 4)) & 3) << 8; the
    sign bits are qs[32:64] (_signs); the scales as IQ2_XS's:

        struct block_iq2_s { f16 d; u8 qs[64]; u8 qh[8]; u8 scales[8]; };
        w = d * (0.5 + s) * 0.25 * grid[index][j] * sign

    [n, 82] -> [n, 256]
    """
    n = blocks.shape[0]
    step = _iq2_steps(_f16(blocks, 0), _nibbles(blocks[:, 74:82], 1))  # [n, 8] -> [n, 16] -> [n, 16, 1]
    high = (blocks[:, 66:74, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3  # [n, 8] -> [n, 8, 4]
    index = blocks[:, 2:34].astype(np.uint16) | (high.reshape(n, 32).astype(np.uint16) << 8)  # [n, 32], 0..1023
    levels = IQ2S_GRID[index].reshape(n, 16, 16)  # [n, 32] -> [n, 32, 8] -> [n, 16, 16]
    signs = _signs(blocks[:, 34:66]).reshape(n, 16, 16)  # [n, 32] -> [n, 256] -> [n, 16, 16]
    return (step * levels * signs).reshape(n, QK_K)


def dequantize_iq3_xxs(blocks):
    """IQ3_XXS, 256 weights in 98 bytes (3.0625 bits): a byte per 4 weights, an entry of iq3xxs_grid; per
    sub-block of 32 a u32 of 4 sign indices (_ksigns) and a 4-bit scale s in bits 28-31:

        struct block_iq3_xxs { f16 d; u8 qs[3 * 256 / 8]; };   qs[0:64] the indices, qs[64:96] the 8 u32
        w = d * (0.5 + s) * 0.5 * grid[q][j] * sign[j]

    [n, 98] -> [n, 256]
    """
    n = blocks.shape[0]
    d = _f16(blocks, 0)  # [n, 1]
    words = blocks[:, 66:98].view(np.uint32)  # [n, 32] -> [n, 8]
    s = (words >> 28).astype(np.float32)  # [n, 8]
    step = (d * (np.float32(0.5) + s) * np.float32(0.5)).reshape(n, 8, 1)  # [n, 8, 1]
    levels = IQ3XXS_GRID[blocks[:, 2:66]].reshape(n, 8, 32)  # [n, 64] -> [n, 64, 4] -> [n, 8, 32]
    signs = _ksigns(words).reshape(n, 8, 32)  # [n, 8] -> [n, 256] -> [n, 8, 32]
    return (step * levels * signs).reshape(n, QK_K)


def dequantize_iq3_s(blocks):
    """IQ3_S, 256 weights in 110 bytes (3.4375 bits): 9-bit indices into iq3s_grid, one per 4 weights (index k is
    qs[k] | bit k of qh, as np.unpackbits reads it, << 8), a sign bit per weight, a 4-bit scale s per 32:

        struct block_iq3_s { f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]; };
        w = d * (1 + 2 s) * grid[index][j] * sign

    [n, 110] -> [n, 256]
    """
    n = blocks.shape[0]
    d = _f16(blocks, 0)  # [n, 1]
    s = _nibbles(blocks[:, 106:110], 1)  # [n, 4] -> [n, 8]
    step = (d * (1 + 2 * s).astype(np.float32)).reshape(n, 8, 1)  # [n, 8, 1]: odd multiples of d
    high = np.unpackbits(blocks[:, 66:74], axis=-1, bitorder="little").astype(np.uint16) << 8  # [n, 8] -> [n, 64]
    levels = IQ3S_GRID[blocks[:, 2:66].astype(np.uint16) | high].reshape(n, 8, 32)  # [n, 64, 4] -> [n, 8, 32]
    signs = _signs(blocks[:, 74:106]).reshape(n, 8, 32)  # [n, 32] -> [n, 256] -> [n, 8, 32]
    return (step * levels * signs).reshape(n, QK_K)


def dequantize_iq1_s(blocks):
    """IQ1_S, 256 weights in 50 bytes (1.5625 bits): 11-bit indices into iq1s_grid (8 weights of -1, 0, 1 each),
    shifted by +-IQ1S_DELTA. Per sub-block of 32, a u16 qh holds the high 3 bits of its 4 indices (bits 3l..3l+2
    for qs[4 ib + l]), a 3-bit scale s (bits 12-14) and the shift's sign (bit 15, set: minus):

        struct block_iq1_s { f16 d; u8 qs[32]; u16 qh[8]; };
        w = d * (2 s + 1) * (grid[index][j] + delta)

    [n, 50] -> [n, 256]
    """
    n = blocks.shape[0]
    d = _f16(blocks, 0)  # [n, 1]
    qh = blocks[:, 34:50].view(np.uint16)  # [n, 16] -> [n, 8]
    step = (d * (2 * ((qh >> 12) & 7) + 1).astype(np.float32)).reshape(n, 8, 1)  # [n, 8, 1]
    delta = np.where(qh & 0x8000, -IQ1S_DELTA, IQ1S_DELTA).reshape(n, 8, 1)  # [n, 8, 1]
    high = (qh[..., None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7  # [n, 8] -> [n, 8, 4]
    index = blocks[:, 2:34].astype(np.uint16) | (high.reshape(n, 32) << 8)  # [n, 32], 0..2047
    levels = IQ1S_GRID[index].reshape(n, 8, 32)  # [n, 32] -> [n, 32, 8] -> [n, 8, 32]
    return (step * (levels + delta)).reshape(n, QK_K)


def dequantize_iq1_m(blocks):
    """IQ1_M, 256 weights in 56 bytes (1.75 bits): IQ1_S's codebook, a 3-bit scale s per 16 weights, a shift sign
    per 8. The four u16 of `scales` hold the scales in bits 0-11 (3 each) and d's 16 bits in their top nibbles
    (scales[k] bits 12-15 are d's bits 4k..4k+3); a nibble of qh per index (low nibble first): bits 0-2 the
    index's high bits, bit 3 the shift's sign:

        struct block_iq1_m { u8 qs[32]; u8 qh[16]; u8 scales[8]; };
        w = d * (2 s + 1) * (grid[index][j] + delta)

    [n, 56] -> [n, 256]
    """
    n = blocks.shape[0]
    sc = blocks[:, 48:56].view(np.uint16)  # [n, 8] -> [n, 4]
    nibbles = (sc >> 12) << np.array([0, 4, 8, 12], dtype=np.uint16)  # [n, 4]: d's bits, in place
    d = np.bitwise_or.reduce(nibbles, axis=-1, keepdims=True).view(np.float16).astype(np.float32)  # [n, 1]
    s = (sc[..., None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7  # [n, 4] -> [n, 4, 4]
    step = (d * (2 * s.reshape(n, 16) + 1).astype(np.float32)).reshape(n, 16, 1, 1)  # [n, 16, 1, 1]
    qh = _nibbles(blocks[:, 32:48], 1)  # [n, 16] -> [n, 32]
    index = blocks[:, 0:32].astype(np.uint16) | ((qh & 7).astype(np.uint16) << 8)  # [n, 32], 0..2047
    delta = np.where(qh & 8, -IQ1S_DELTA, IQ1S_DELTA).reshape(n, 16, 2, 1)  # [n, 32] -> [n, 16, 2, 1]
    levels = IQ1S_GRID[index].reshape(n, 16, 2, 8)  # [n, 32] -> [n, 32, 8] -> [n, 16, 2, 8]
    return (step * (levels + delta)).reshape(n, QK_K)


DEQUANTIZERS = {
    "F32": dequantize_f32, "F16": dequantize_f16, "BF16": dequantize_bf16,
    "Q8_0": dequantize_q8_0, "Q4_0": dequantize_q4_0, "Q4_1": dequantize_q4_1, "Q5_0": dequantize_q5_0,
    "Q5_1": dequantize_q5_1, "Q2_K": dequantize_q2_k, "Q3_K": dequantize_q3_k, "Q4_K": dequantize_q4_k,
    "Q5_K": dequantize_q5_k, "Q6_K": dequantize_q6_k, "IQ4_NL": dequantize_iq4_nl, "IQ4_XS": dequantize_iq4_xs,
    "TQ1_0": dequantize_tq1_0, "TQ2_0": dequantize_tq2_0, "MXFP4": dequantize_mxfp4, "NVFP4": dequantize_nvfp4,
    "IQ2_XXS": dequantize_iq2_xxs, "IQ2_XS": dequantize_iq2_xs, "IQ2_S": dequantize_iq2_s,
    "IQ3_XXS": dequantize_iq3_xxs, "IQ3_S": dequantize_iq3_s, "IQ1_S": dequantize_iq1_s, "IQ1_M": dequantize_iq1_m,
}
REFUSAL_FIX = "use a GGUF file in a K-quant (Q4_K_M, Q5_K_M, Q6_K), in IQ4_XS, or in Q8_0, F16 or F32"


def type_by_name(name: str) -> tuple[str, int, int]:
    """(name, weights per block, bytes per block) of the type called `name`."""
    return next(t for t in GGML_TYPES.values() if t[0] == name)


def check_supported(type_name: str, what: str) -> None:
    """Refuse, by name, a type tinyinfer cannot dequantise (Q1_0; Q8_1/Q8_K, which only hold llama.cpp's
    activations; integers)."""
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
