"""FP8 checkpoints: 8-bit float weights with a scale per block, dequantised to float32 at load.

Many Hub checkpoints (Qwen3-*-FP8, DeepSeek-V3/R1) ship their Linear weights in transformers' "fp8" format
(its FineGrainedFP8Config; config.json says so):

    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}

Each quantised weight `x.weight` [out, in] is stored as F8_E4M3 codes beside `x.weight_scale_inv`, float32
[ceil(out/128), ceil(in/128)]: one scale per 128 x 128 block, the last row and column of blocks cut short when
out or in is not a multiple of 128 (DeepSeek-V3's kv_a_proj_with_mqa has 576 rows: 4.5 blocks).

    w[i, j] = e4m3(code[i, j]) * scale_inv[i // 128, j // 128]

Fused expert tensors ([E, out, in], named `...experts.gate_up_proj`) carry `...experts.gate_up_proj_scale_inv`
[E, ., .]: the scale's name is always the weight's plus "_scale_inv". The modules the config leaves
unquantised (modules_to_not_convert, the norms, the embeddings) are stored as plain floats and read as such.
"weight_block_size": null means one scale per tensor (a scalar, or [E, 1, 1] for fused experts).

Every E4M3 number is exact in float32, and each weight is one float32 product with its scale, rounded once (exact
for power-of-two scales, scale_fmt "ue8m0"): to the bit what `w_fp8.float() * scale_inv` gives in PyTorch.
(transformers 5's CPU `dequantize=True` path takes a block to be the weight's size over the number of scales:
the same numbers where the sizes are whole blocks; at short edge blocks, 200 rows over 2 scales, it reads blocks
of 100 rows where the kernels and FP8Linear's ceil-sized scales mean 128 and 72. tinyinfer reads them as the
kernels do.) An FP8 kernel would also round the activations to FP8 (per block, "dynamic", or with a stored
per-tensor `activation_scale`, "static"); tinyinfer computes in float32 and never reads those scales, as
transformers' dequantised models do.

E4M3 ("fn": finite, no infinities): 1 sign bit, 4 exponent bits biased by 7, 3 mantissa bits.

    normal (e > 0):  (-1)^s * (1 + m/8) * 2^(e - 7)      0x7E = 1.75 * 2^8 = 448, the largest
    subnormal (e 0): (-1)^s * (m/8) * 2^-6               0x01 = 2^-9, the smallest
    0x7F, 0xFF:      NaN (the one code with every exponent and mantissa bit set)

    >>> e4m3_to_f32(np.array([0x38, 0xC0, 0x7E, 0x01, 0x80, 0x7F], dtype=np.uint8)).tolist()
    [1.0, -2.0, 448.0, 0.001953125, -0.0, nan]
"""

from __future__ import annotations

import numpy as np

from tinyinfer.errors import TinyInferError, is_integer_at_least

SCALE_SUFFIX = "_scale_inv"  # the scale of tensor `name` is `name + SCALE_SUFFIX`
DEFAULT_BLOCK = [128, 128]  # FineGrainedFP8Config's weight_block_size when config.json leaves it out
CONVERT = "use a bf16 or fp32 checkpoint of the model (on the Hub: the repo without -FP8)"


def e4m3_table() -> np.ndarray:
    """The float32 value of each of the 256 E4M3 codes (see the module docstring).  -> [256]"""
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    e, m = (bits >> 3) & 0x0F, bits & 0x07
    magnitude = np.where(e > 0, (8 + m) * 2.0 ** (e - 10), m * 2.0 ** -9)  # (1 + m/8) 2^(e-7); subnormal (m/8) 2^-6
    values = sign * magnitude  # sign * 0.0 keeps 0x80 a negative zero
    values[(bits & 0x7F) == 0x7F] = np.nan
    return values.astype(np.float32)  # exact: at most 4 significant bits


E4M3 = e4m3_table()


def e4m3_to_f32(codes: np.ndarray) -> np.ndarray:
    """FP8 E4M3 codes (uint8) to their float32 values, exactly.  [...] -> [...]"""
    return E4M3[codes]


def e8m0_to_f32(codes: np.ndarray) -> np.ndarray:
    """UE8M0 scales (a bare exponent: byte b means 2^(b - 127); 255 is NaN), exactly.  [...] -> [...]"""
    scales = np.ldexp(np.float32(1), np.minimum(codes, 254).astype(np.int32) - 127)  # 2^-127 .. 2^127
    return np.where(codes == 255, np.float32(np.nan), scales).astype(np.float32)


def check_config(qc: dict) -> dict:
    """config.json's fp8 quantization_config, checked, with weight_block_size filled in ([rows, cols], or None
    for one scale per tensor). What the weights cannot be read from is refused by name."""
    def refuse(problem: str) -> TinyInferError:
        return TinyInferError(f"config.json: quantization_config {problem}; {CONVERT}")

    if str(qc.get("fmt", "e4m3")).lower() != "e4m3":
        raise refuse(f"has fmt {qc['fmt']!r}: transformers' fp8 format stores E4M3 weights (float8_e4m3fn) only")
    if str(qc.get("activation_scheme", "dynamic")).lower() not in ("dynamic", "static"):
        raise refuse(f"has activation_scheme {qc['activation_scheme']!r}, not 'dynamic' or 'static'")
    if qc.get("scale_fmt", "float") not in ("float", "ue8m0"):
        raise refuse(f"has scale_fmt {qc['scale_fmt']!r}, not 'float' or 'ue8m0'")
    if qc.get("expert_dtype", "fp8") != "fp8":
        raise refuse(f"has expert_dtype {qc['expert_dtype']!r}: only FP8 experts are supported")
    if qc.get("modules_to_convert"):
        raise refuse("has modules_to_convert (FP8 embedding tables with a per-tensor weight_scale): not supported")
    block = qc.get("weight_block_size", DEFAULT_BLOCK)
    if block is not None and not (isinstance(block, list) and len(block) == 2
                                  and all(is_integer_at_least(b) for b in block)):
        raise refuse(f"has weight_block_size {block!r}, not [rows, cols] of positive integers (or null)")
    return {**qc, "weight_block_size": block}


def read_weight(checkpoint, name: str, block: list[int] | None) -> np.ndarray:
    """The FP8 tensor `name` times its scales, as float32.  [..., out, in] -> [..., out, in]"""
    stored = checkpoint.dtype(name)
    if stored != "F8_E4M3":
        raise TinyInferError(f"tensor {name!r} is stored as {stored}: transformers' fp8 format (config.json's "
                             f"quantization_config) stores FP8 weights as F8_E4M3 only; {CONVERT}")
    if name + SCALE_SUFFIX not in checkpoint:
        raise TinyInferError(f"tensor {name!r} is FP8 but the checkpoint has no scales {name + SCALE_SUFFIX!r}: "
                             "the file is damaged or incomplete; re-download it")
    codes = e4m3_to_f32(checkpoint.raw(name))  # [..., out, in]
    return dequantize(codes, read_scales(checkpoint, name + SCALE_SUFFIX), block, name)


def read_scales(checkpoint, name: str) -> np.ndarray:
    """A scale tensor as float32: stored as floats, or as UE8M0 exponents (F8_E8M0 or U8, scale_fmt "ue8m0")."""
    if checkpoint.dtype(name) in ("F8_E8M0", "U8"):
        return e8m0_to_f32(checkpoint.raw(name))
    return checkpoint.get(name)


def dequantize(codes: np.ndarray, scale_inv: np.ndarray, block: list[int] | None, name: str) -> np.ndarray:
    """Each [rows, cols] block of `codes` times its scale; the last blocks cut short at the edges.
    [..., out, in], [..., ceil(out/rows), ceil(in/cols)] -> [..., out, in]"""
    out, d_in = codes.shape[-2:]
    rows, cols = block or (out, d_in)  # None: one block, one scale per tensor
    grid = (*codes.shape[:-2], -(-out // rows), -(-d_in // cols))
    if block is None and codes.ndim == 2 and scale_inv.shape in ((), (1,)):
        scale_inv = scale_inv.reshape(1, 1)  # FP8Linear's per-tensor scale is a scalar
    if scale_inv.shape != grid:
        raise TinyInferError(f"tensor {name + SCALE_SUFFIX!r} has shape {list(scale_inv.shape)}, but {name!r} "
                             f"{list(codes.shape)} in blocks of {[rows, cols]} needs {list(grid)}: the scales do not "
                             "match the weight or config.json's weight_block_size; fix weight_block_size or "
                             "re-download the checkpoint")
    expanded = np.repeat(np.repeat(scale_inv, rows, axis=-2), cols, axis=-1)  # [..., grid rows*rows, grid cols*cols]
    return codes * expanded[..., :out, :d_in]  # the edge blocks cut to the weight: [..., out, in]
