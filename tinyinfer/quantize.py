"""Weight-only quantisation: hold each linear weight as small integers and a few scales, compute in float.

A decode step reads every weight once (chapter 02), so its speed is bytes moved; fewer bits per weight means
fewer bytes. Symmetric quantisation stores a weight matrix w [in, out] as integer codes and one float scale per
*group* of `G` consecutive inputs of one output column:

    qmax  = 2^(bits-1) - 1                      127 for int8, 7 for int4
    scale = max |w| over the group / qmax       the largest weight of the group maps to +-qmax
    code  = round(w / scale)                    an integer in -qmax..qmax (-qmax-1 is never used: symmetric)
    dequantise(w) = code * scale                so |w - dequantise(w)| <= scale / 2, element by element

Two schemes (`SCHEMES`):

- int8, per output channel: one group is a whole column (G = in), so one scale per output; ~1 byte per weight.
- int4, group-wise (G = 32): a whole column's range is too coarse for 15 levels, so every 32 inputs get their
  own scale. Two codes share one byte (`pack_int4`): 0.5 byte per weight, plus a 4-byte scale per 32 weights,
  0.625 bytes in all. When `in` is not a multiple of G, the last group is padded with zeros (code 0).

Scales are kept in the model's compute dtype (float32 by default), so the bound above holds exactly as written;
llama.cpp's Q4_0 stores them in float16 (0.5625 bytes per weight). A `QuantizedWeight` stands wherever the
model code reads a weight matrix: `x @ w` calls `w.__rmatmul__(x)`, which computes x @ dequantise(w) (dequantised
on the fly, every call: the bytes saved are the ones *stored*; see chapters/12-quantisation.md for what that
costs on a CPU). It also answers `.shape`, `.size` and `.nbytes`, so `Model.n_params` counts it unchanged.

`quantize_model(model, "int8")` replaces every weight matrix inside `params["layers"]` after loading. Left in
float: the embedding table and (unless `lm_head=True`) the LM head, every vector (norms, biases), and the tiny
Mixture-of-Experts gates (the router and Qwen2-MoE's shared-expert gate), whose small errors would flip which
experts a token is sent to. A tied LM head, when quantised, stays one table: the embedding then reads its rows
from the quantised head (`QuantizedEmbedding`).

    >>> w = np.array([[0.5, -1.0], [-0.2, 0.3]], dtype=np.float32)  # [in=2, out=2]
    >>> codes, scales = quantize_groups(w, bits=8, group_size=None)
    >>> codes.tolist(), (scales * 127).round(4).tolist()  # per column: max |w| is 0.5, then 1.0
    ([[127, -127], [-51, 38]], [[0.5, 1.0]])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from tinyinfer.backend import xp_of
from tinyinfer.errors import TinyInferError
from tinyinfer.mlp import matmul
from tinyinfer.param_tree import leaves


@dataclass(frozen=True)
class Scheme:
    """How to quantise: `bits` per code, one scale per `group_size` inputs (None: per output channel)."""

    name: str
    bits: int
    group_size: int | None


SCHEMES = {"int8": Scheme("int8", 8, None), "int4": Scheme("int4", 4, 32)}
FLOAT_KEEP = ("router", "shared_gate")  # MoE gates: tiny, and their errors change routing decisions


def get_scheme(name: str, group_size: int | None = None) -> Scheme:
    """SCHEMES[name], with another group size if given; bad values are TinyInferErrors."""
    if name not in SCHEMES:
        raise TinyInferError(f"unknown quantisation scheme {name!r}: use one of {', '.join(SCHEMES)}")
    scheme = SCHEMES[name]
    group_size = scheme.group_size if group_size is None else group_size
    if group_size is not None and (group_size < 1 or (scheme.bits == 4 and group_size % 2)):
        raise TinyInferError(f"group size {group_size} does not work for {name}: give a positive "
                             f"{'even ' if scheme.bits == 4 else ''}number of inputs per scale (e.g. 32)")
    if scheme.bits == 4 and group_size is None:
        raise TinyInferError("int4 needs a group size (e.g. 32): 15 levels across a whole column are too coarse")
    return Scheme(name, scheme.bits, group_size)


# -- the arithmetic ---------------------------------------------------------------------------------------------

def quantize_groups(w, bits: int, group_size: int | None):
    """Symmetric quantisation of w [in, out], one scale per group of `group_size` rows of each column.

    Returns codes [n_groups * G, out] (int8, in -qmax..qmax) and scales [n_groups, out] (w's dtype), where
    G = group_size (None: G = in, one group per column) and n_groups = ceil(in / G). Rows past `in` pad the
    last group and hold code 0.  See the module docstring for a worked example.
    """
    # BEGIN EXERCISE 12.1: symmetric quantisation, one scale per group
    xp = xp_of(w)
    n_in, n_out = w.shape
    group = group_size or n_in
    n_groups = -(-n_in // group)  # ceil: a last, shorter group is padded with zeros
    padded = xp.zeros((n_groups * group, n_out), dtype=w.dtype)  # [n_groups*G, out]
    padded[:n_in] = w
    groups = padded.reshape(n_groups, group, n_out)  # -> [n_groups, G, out]
    qmax = 2 ** (bits - 1) - 1
    scales = xp.abs(groups).max(axis=1) / qmax  # [n_groups, G, out] -> [n_groups, out]
    nonzero = xp.where(scales == 0, xp.ones_like(scales), scales)  # an all-zero group: code 0 with any scale
    codes = xp.rint(groups / nonzero[:, None, :])  # [n_groups, G, out]; |w| / scale <= qmax, no clipping needed
    return codes.astype(np.int8).reshape(n_groups * group, n_out), scales  # -> [n_groups*G, out]
    # END EXERCISE 12.1


def dequantize_groups(codes, scales, n_rows: int):
    """code x its group's scale, in the scales' dtype, without the padding rows.

    codes [n_groups * G, out] (int8), scales [n_groups, out] -> [n_rows, out]

    >>> dequantize_groups(np.array([[2], [-1], [7], [0]], dtype=np.int8), np.array([[0.5], [0.25]]), 3).tolist()
    [[1.0], [-0.5], [1.75]]
    """
    # BEGIN EXERCISE 12.2: dequantise: each code times its group's scale
    n_groups, n_out = scales.shape
    groups = codes.reshape(n_groups, -1, n_out) * scales[:, None, :]  # [n_groups*G, out] -> [n_groups, G, out]
    return groups.reshape(-1, n_out)[:n_rows]  # -> [n_groups*G, out] -> [n_rows, out]
    # END EXERCISE 12.2


def pack_int4(codes):
    """Two 4-bit codes per byte: rows 2i and 2i+1 of codes [rows, out] (values -7..7) become byte row i,
    row 2i in the low nibble, each code stored as code + 8 (0..15: an unsigned nibble needs no sign
    extension to read back). This is PyTorch's quint4x2 layout with zero point 8.

    codes [rows, out] (int8, rows even) -> [rows / 2, out] (uint8)

    >>> pack_int4(np.array([[-7], [7]], dtype=np.int8)).tolist()  # low nibble 1, high nibble 15: 0xF1
    [[241]]
    """
    # BEGIN EXERCISE 12.3: two 4-bit codes in one byte
    nibbles = (codes + 8).astype(np.uint8)  # -7..7 -> 1..15
    return nibbles[0::2] | (nibbles[1::2] << 4)  # [rows, out] -> [rows/2, out]
    # END EXERCISE 12.3


def unpack_int4(packed):
    """The inverse of `pack_int4`.  [rows / 2, out] (uint8) -> [rows, out] (int8)

    >>> unpack_int4(np.array([[241]], dtype=np.uint8)).tolist()
    [[-7], [7]]
    """
    xp = xp_of(packed)
    low = (packed & 0x0F).astype(np.int8) - 8  # [rows/2, out]: the even rows
    high = (packed >> 4).astype(np.int8) - 8  # [rows/2, out]: the odd rows
    return xp.stack([low, high], axis=1).reshape(-1, packed.shape[1])  # -> [rows/2, 2, out] -> [rows, out]


# -- a weight that multiplies like a matrix --------------------------------------------------------------------

class QuantizedWeight:
    """A weight matrix [in, out] held as codes (`data`, packed two per byte for int4) and `scales` [n_groups, out].

    `x @ w` computes x @ w.dequantize(), exactly: the same product on the dequantised matrix.
    """

    __array_ufunc__ = None  # NumPy and CuPy: `x @ w` must not turn w into an array; it calls w.__rmatmul__(x)
    ndim = 2

    def __init__(self, data, scales, bits: int, shape: tuple[int, int]):
        self.data, self.scales, self.bits, self.shape = data, scales, bits, tuple(shape)

    @classmethod
    def quantize(cls, w, scheme: Scheme) -> QuantizedWeight:
        codes, scales = quantize_groups(w, scheme.bits, scheme.group_size)
        return cls(pack_int4(codes) if scheme.bits == 4 else codes, scales, scheme.bits, w.shape)

    def codes(self):
        """The integer codes, unpacked.  -> [n_groups * G, out] (int8)"""
        return unpack_int4(self.data) if self.bits == 4 else self.data

    def dequantize(self):
        """code x scale for every weight.  -> [in, out], in the scales' dtype"""
        return dequantize_groups(self.codes(), self.scales, self.shape[0])

    def __rmatmul__(self, x):
        return matmul(x, self.dequantize())  # [T, in] @ [in, out] -> [T, out], as an unquantised weight is

    def columns(self, ids) -> QuantizedWeight:
        """The output columns `ids` (the packing runs down the rows, so columns are cut without unpacking)."""
        return QuantizedWeight(self.data[:, ids], self.scales[:, ids], self.bits, (self.shape[0], len(ids)))

    @property
    def group_size(self) -> int:
        return self.codes_rows // self.scales.shape[0]

    @property
    def codes_rows(self) -> int:
        """Rows of codes: `in` rounded up to whole groups."""
        return self.data.shape[0] * (2 if self.bits == 4 else 1)

    @property
    def size(self) -> int:
        """Number of weights it stands for (as an array of this shape would have): `Model.n_params` counts these."""
        return self.shape[0] * self.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes really held: codes (padding included) and scales."""
        return self.data.nbytes + self.scales.nbytes

    @property
    def dtype(self):
        """The dtype it computes in (that of its scales)."""
        return self.scales.dtype

    def __repr__(self) -> str:
        return f"QuantizedWeight(int{self.bits}, shape={list(self.shape)}, group_size={self.group_size})"


class QuantizedEmbedding:
    """The embedding table of a model whose tied LM head [d, V] is quantised: row t is the head's column t,
    dequantised when looked up, so the two stay one table.  table[ids] -> [len(ids), d]"""

    ndim = 2

    def __init__(self, head: QuantizedWeight):
        self.head = head
        self.shape = (head.shape[1], head.shape[0])

    def __getitem__(self, ids):
        return self.head.columns(ids).dequantize().T  # [ids] -> [d, n] -> [n, d]

    @property
    def size(self) -> int:
        return self.head.size

    @property
    def nbytes(self) -> int:
        """The head's bytes: one table, which `weight_nbytes` counts once."""
        return self.head.nbytes


# -- a whole model ---------------------------------------------------------------------------------------------

def quantize_model(model, scheme: str = "int8", group_size: int | None = None, lm_head: bool = False):
    """Quantise `model`'s weight matrices in place (see the module docstring for which) and return it.

    `scheme`: "int8" (per output channel) or "int4" (group-wise, `group_size` inputs per scale, 32 by default).
    `lm_head=True` quantises the output layer too (and, when tied, the embedding table with it).
    """
    chosen = get_scheme(scheme, group_size)
    if model.quantization is not None:
        raise TinyInferError(f"this model is already quantised ({model.quantization.name}): load it again to "
                             "quantise it another way")
    if model.adapters is not None:
        raise TinyInferError("this model has LoRA adapters loaded: quantise it first, then load the adapters "
                             "(they stay in floating point on top of the quantised weights)")
    params = model.params

    def quantize(w):
        return QuantizedWeight.quantize(w, chosen)

    params["layers"] = [_quantize_matrices(layer, quantize)
                        for layer in tqdm(params["layers"], desc=f"quantising to {chosen.name}", disable=None, leave=False)]
    if lm_head:
        params["lm_head"] = quantize(params["lm_head"])
        if model.config.tie_word_embeddings:
            params["embed"] = QuantizedEmbedding(params["lm_head"])
    model.quantization = chosen
    return model


def _quantize_matrices(tree, quantize):
    """A copy of a layer's parameter tree with every 2-D weight quantised, but for the gates in FLOAT_KEEP."""
    if isinstance(tree, dict):
        return {key: value if key in FLOAT_KEEP else _quantize_matrices(value, quantize) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_quantize_matrices(value, quantize) for value in tree]
    return quantize(tree) if tree.ndim == 2 else tree  # inside a layer every matrix is a linear weight


def weight_nbytes(model) -> int:
    """Bytes of all parameters as held, a tied embedding table counted once (it is the LM head)."""
    params = dict(model.params)
    if model.config.tie_word_embeddings:
        params.pop("embed")
    return sum(leaf.nbytes for leaf in leaves(params))

