"""The GGUF dequantisers (tinyinfer/gguf/quants.py), bit for bit against llama.cpp's own (gguf.quants.dequantize).

Every type on blocks made by gguf.quants.quantize where it can quantise (F32 to Q5_1, TQ1_0, TQ2_0, MXFP4), and
on random valid blocks for every type (the others it cannot quantise; random bytes reach codes and scales a
quantiser rarely writes); every value of the one-byte scales (FP4's E8M0 and UE4M3); weights the ternary and FP4
types hold exactly; the codebooks of the IQ1/IQ2/IQ3 types entry by entry; then every tensor of the real model. "Bit for bit" compares the float32 bit patterns, so even -0.0 and NaNs count.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf_files import ALL_TYPES, CODEBOOK, K_QUANTS, NEWER, QUANTISABLE, random_blocks, real_model_or_skip

from tinyinfer.errors import TinyInferError
from tinyinfer.gguf import iq_grids
from tinyinfer.gguf.quants import DEQUANTIZERS, GGML_TYPES, dequantize, dequantize_q4_k, dequantize_q8_0, k_scales_mins
from tinyinfer.gguf.reader import GGUFFile


def assert_bits_equal(mine: np.ndarray, reference: np.ndarray) -> None:
    assert mine.dtype == np.float32 and mine.shape == reference.shape
    np.testing.assert_array_equal(mine.view(np.uint32), reference.astype(np.float32).view(np.uint32))


def test_every_supported_type_and_only_those():
    assert set(DEQUANTIZERS) == set(ALL_TYPES)
    for type_id, (name, block_weights, block_bytes) in GGML_TYPES.items():  # the sizes are ggml's
        assert (type_id, (block_weights, block_bytes)) == (T[name].value, gguf.GGML_QUANT_SIZES[T[name]])


@pytest.mark.parametrize("type_name", QUANTISABLE)
def test_quantised_blocks_dequantise_as_gguf(type_name):
    w = np.random.default_rng(0).standard_normal((8, 512)).astype(np.float32) * 0.2
    w[0, :32] = 0  # an all-zero block
    raw = gguf.quants.quantize(w, T[type_name])
    assert_bits_equal(dequantize(raw.reshape(-1).view(np.uint8), type_name, w.shape),
                      gguf.quants.dequantize(raw, T[type_name]))


@pytest.mark.parametrize("type_name", [t for t in ALL_TYPES if t not in ("F32", "F16", "BF16")])
def test_random_blocks_dequantise_as_gguf(type_name):
    blocks = random_blocks(type_name, 300, seed=1)
    block_weights, _ = gguf.GGML_QUANT_SIZES[T[type_name]]
    reference = gguf.quants.dequantize(blocks.reshape(4, -1), T[type_name])  # [4, 75 blocks x weights]
    assert_bits_equal(dequantize(blocks.reshape(-1), type_name, reference.shape), reference)


@pytest.mark.parametrize("type_name", ["F16", "BF16"])
def test_random_half_floats_dequantise_as_gguf(type_name):
    raw = np.random.default_rng(2).integers(0, 256, size=(16, 64), dtype=np.uint8)  # every bit pattern, NaNs too
    assert_bits_equal(dequantize(raw.reshape(-1), type_name, (16, 32)), gguf.quants.dequantize(raw, T[type_name]))


@pytest.mark.parametrize("type_name, scale_bytes", [("MXFP4", 1), ("NVFP4", 4)])
def test_every_scale_byte_dequantises_as_gguf(type_name, scale_bytes):
    # subnormal scales (E8M0 0 and 1, UE4M3 exponent 0), UE4M3's NaN 0x7F and its ignored top bit, E8M0's 255
    blocks = random_blocks(type_name, 256, seed=6)
    blocks[:, :scale_bytes] = np.arange(256, dtype=np.uint8)[:, None]  # block b: every scale byte b
    with np.errstate(over="ignore"):  # E8M0 255 is 2^127: its larger codes overflow to inf, as in ggml
        assert_bits_equal(dequantize(blocks.reshape(-1), type_name, (256, -1)),
                          gguf.quants.dequantize(blocks, T[type_name]))


@pytest.mark.parametrize("type_name, levels", [("TQ1_0", [-1, 0, 1]), ("TQ2_0", [-1, 0, 1]),
                                               ("MXFP4", [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -1.5, -2, -3, -4, -6])])
def test_weights_on_the_grid_come_back_exactly(type_name, levels):
    # a scale times the type's levels is what its blocks hold exactly: ternary weights, FP4 values (E2M1)
    rng = np.random.default_rng(7)
    w = np.float32(0.25) * rng.choice(np.array(levels, np.float32), size=(4, 512))
    w[:, ::32] = 0.25 * max(levels)  # each block's largest |w| sets its scale: make it the grid's largest level
    raw = gguf.quants.quantize(w, T[type_name])
    np.testing.assert_array_equal(dequantize(raw.reshape(-1).view(np.uint8), type_name, w.shape), w)


@pytest.mark.parametrize("grid, reference", [("IQ2XXS_GRID", "IQ2_XXS"), ("IQ2XS_GRID", "IQ2_XS"),
                                             ("IQ2S_GRID", "IQ2_S"), ("IQ3XXS_GRID", "IQ3_XXS"),
                                             ("IQ3S_GRID", "IQ3_S"), ("IQ1S_GRID", "IQ1_S")])
def test_stored_codebooks_are_ggmls(grid, reference):
    quant = getattr(gguf.quants, reference)
    quant.init_grid()  # gguf's copy of ggml-common.h's table, decoded to float32
    np.testing.assert_array_equal(getattr(iq_grids, grid), quant.grid.reshape(quant.grid_shape))


def test_derived_sign_table_is_ksigns_iq2xs():
    assert iq_grids.KSIGNS_IQ2XS.tobytes() == gguf.quants.IQ2_XXS.ksigns


def test_other_types_are_refused_by_name_with_the_fix():
    for name in ("Q1_0", "Q8_K", "Q8_1", "I32"):
        with pytest.raises(TinyInferError, match=f"{name}, which tinyinfer cannot dequantise.*K-quant.*Q8_0"):
            dequantize(np.zeros(1024, np.uint8), name, (1, 256))


def test_every_tensor_of_the_real_model_dequantises_as_gguf():
    path = real_model_or_skip()
    mine, reference = GGUFFile(path), gguf.GGUFReader(path)
    assert {t.type_name for t in mine.tensors.values()} == {"F32", "Q4_1", "Q8_0"}
    for tensor in reference.tensors:
        assert_bits_equal(mine.dequantize(tensor.name), gguf.quants.dequantize(tensor.data, tensor.tensor_type))


# -- exercises 12.4 (Q8_0) and 12.5 (Q4_K's scales) ----------------------------------------------------------

def q8_0_block(d: float, codes) -> np.ndarray:
    return np.concatenate([np.array([d], np.float16).view(np.uint8), np.asarray(codes, np.int8).view(np.uint8)])[None]


@pytest.mark.exercise("12.4")
def test_q8_0_is_scale_times_signed_code():
    codes = np.arange(-16, 16)  # negative codes must read as signed bytes, not 240..255
    out = dequantize_q8_0(q8_0_block(0.5, codes))
    assert out.dtype == np.float32 and out.shape == (1, 32)
    np.testing.assert_array_equal(out[0], codes * 0.5)


@pytest.mark.exercise("12.4")
def test_q8_0_reads_the_scale_as_float16():
    d = np.float16(0.0123)  # not a float32's bytes: the first two bytes of the block are an IEEE half
    out = dequantize_q8_0(q8_0_block(d, [127] + [-128] + [0] * 30))
    assert out[0, 0] == np.float32(d) * 127 and out[0, 1] == np.float32(d) * -128 and (out[0, 2:] == 0).all()


@pytest.mark.exercise("12.4")
def test_q8_0_matches_gguf_bit_for_bit():
    blocks = random_blocks("Q8_0", 64, seed=3)
    assert_bits_equal(dequantize_q8_0(blocks), gguf.quants.dequantize(blocks, T.Q8_0))


def packed_scales(sc, m) -> np.ndarray:
    """ggml's packing of 8 six-bit scales and mins into 12 bytes (the quantiser's side, from ggml-quants.c)."""
    out = np.zeros(12, np.uint8)
    for j in range(8):
        if j < 4:
            out[j], out[j + 4] = sc[j], m[j]
        else:
            out[j + 4] = (sc[j] & 0xF) | ((m[j] & 0xF) << 4)
            out[j - 4] |= (sc[j] >> 4) << 6
            out[j] |= (m[j] >> 4) << 6
    return out


@pytest.mark.exercise("12.5")
def test_k_scales_mins_unpack_what_ggml_packs():
    rng = np.random.default_rng(4)
    for _ in range(20):
        sc, m = rng.integers(0, 64, 8), rng.integers(0, 64, 8)
        got_sc, got_m = k_scales_mins(packed_scales(sc, m)[None])
        np.testing.assert_array_equal(got_sc[0], sc)
        np.testing.assert_array_equal(got_m[0], m)


@pytest.mark.exercise("12.5")
def test_k_scales_use_their_top_bits():
    # scales and mins of 32 and more need the top two bits stored apart (a plausible mistake keeps 6 bits of the
    # first four bytes only, or the low nibbles of the last four): 63 and 48 catch both
    sc, m = np.array([63, 1, 2, 3, 48, 63, 32, 17]), np.array([0, 63, 40, 5, 63, 33, 16, 48])
    got_sc, got_m = k_scales_mins(packed_scales(sc, m)[None])
    assert got_sc[0].tolist() == sc.tolist() and got_m[0].tolist() == m.tolist()


@pytest.mark.exercise("12.5")
def test_q4_k_matches_gguf_bit_for_bit():
    blocks = random_blocks("Q4_K", 64, seed=5)
    assert_bits_equal(dequantize_q4_k(blocks), gguf.quants.dequantize(blocks, T.Q4_K))


def test_random_blocks_are_finite_and_varied():
    for type_name in K_QUANTS + NEWER + CODEBOOK:  # the test blocks exercise real values, not NaNs
        block_weights, _ = gguf.GGML_QUANT_SIZES[T[type_name]]
        w = dequantize(random_blocks(type_name, 8).reshape(-1), type_name, (8, block_weights))
        assert np.isfinite(w).all() and 0.05 < w.std() < 1, (type_name, w.std())
