"""Reading a GGUF file: llama.cpp's one-file model format, read here directly (memory-mapped).

A GGUF file is four parts, every number little-endian:

    header        "GGUF" (4 bytes), version (u32: 2 or 3), tensor count (u64), metadata count (u64)
    metadata      key (string), value type (u32), value                 x metadata count
    tensor infos  name (string), n_dims (u32), dims (u64 x n_dims), type (u32), offset (u64)   x tensor count
    data          padding to `general.alignment` (32 unless the metadata says), then the tensors' bytes,
                  each at its `offset` from the start of the data (a multiple of the alignment)

A string is its byte length (u64) and UTF-8 bytes; an array is its element type (u32), length (u64) and
elements. `dims` list the fastest-varying dimension first (ggml's ne[0]: a row's length), so NumPy's shape is
them reversed: a Llama q projection [out, in] in PyTorch is dims (in, out) here, shape (out, in) in NumPy,
and quantised blocks run along each row. A tensor's bytes are (elements / weights per block) x bytes per block
(tinyinfer/gguf/quants.py): nothing in the file states it, so the reader checks that every tensor fits before
the next one and inside the file.

    >>> f = GGUFFile("model.gguf")                                   # doctest: +SKIP
    >>> f.metadata["general.architecture"], f.tensors["blk.0.attn_q.weight"].type_name   # doctest: +SKIP
    ('llama', 'Q4_1')
    >>> f.dequantize("blk.0.attn_q.weight").shape                    # doctest: +SKIP
    (576, 576)

v1 (2023's first files, 32-bit counts) and big-endian files are refused by name.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyinfer.errors import TinyInferError
from tinyinfer.gguf.quants import GGML_TYPES, check_supported, dequantize

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# value type -> struct format of a scalar (8: string, 9: array are read by hand)
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lies: `shape` in NumPy's order (GGUF's dims reversed), `start` from the file's start."""

    name: str
    shape: tuple[int, ...]
    type_name: str
    start: int
    nbytes: int


class GGUFFile:
    """One memory-mapped GGUF file: `version`, `metadata` {key: Python value}, `tensors` {name: TensorInfo},
    `raw(name)` (its bytes, a view into the file) and `dequantize(name)` (float32)."""

    def __init__(self, path):
        self.path = Path(path)
        try:
            self._data = np.memmap(self.path, dtype=np.uint8, mode="r")
        except FileNotFoundError:
            raise TinyInferError(f"GGUF file not found: {self.path}") from None
        except ValueError:  # an empty file cannot be mapped
            raise TinyInferError(f"{self.path} is empty: not a GGUF file") from None
        except OSError as e:
            raise TinyInferError(f"cannot read {self.path} ({e.strerror}): give a readable .gguf file") from None
        self._pos = 0
        self.version, n_tensors, n_metadata = self._read_header()
        self.metadata = dict(self._read_key_value() for _ in range(n_metadata))
        infos = [self._read_tensor_info() for _ in range(n_tensors)]
        self.alignment = self._alignment()
        data_start = -(-self._pos // self.alignment) * self.alignment  # the data begins at the next multiple
        self.tensors = self._place(infos, data_start)

    # -- the header ----------------------------------------------------------------------------------------

    def _error(self, problem: str) -> TinyInferError:
        return TinyInferError(f"{self.path}: {problem}")

    def _take(self, n: int) -> memoryview:
        if self._pos + n > len(self._data):
            raise self._error(f"is truncated: its header needs byte {self._pos + n:,} but the file has "
                              f"{len(self._data):,}; download it again")
        view = memoryview(self._data)[self._pos:self._pos + n]
        self._pos += n
        return view

    def _scalar(self, fmt: str):
        return struct.unpack("<" + fmt, self._take(struct.calcsize(fmt)))[0]

    def _read_header(self) -> tuple[int, int, int]:
        magic = bytes(self._take(4)) if len(self._data) >= 4 else b""
        if magic != MAGIC:
            raise self._error(f"is not a GGUF file: it starts with {magic!r}, not {MAGIC!r}")
        version = self._scalar("I")
        if version not in VERSIONS:
            endian = " (it reads as a big-endian file, which tinyinfer does not read)" if version >= 1 << 16 else ""
            raise self._error(f"is GGUF version {version}{endian}; tinyinfer reads versions 2 and 3: convert it "
                              "again with a current llama.cpp (convert_hf_to_gguf.py)")
        return version, self._scalar("Q"), self._scalar("Q")

    def _string(self) -> str:
        n = self._scalar("Q")
        raw = bytes(self._take(n))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._error(f"has a string that is not UTF-8 at byte {self._pos - n:,}: the file is damaged") from None

    def _value(self, value_type: int, key: str):
        if value_type in SCALARS:
            return self._scalar(SCALARS[value_type])
        if value_type == STRING:
            return self._string()
        if value_type == ARRAY:
            element_type, n = self._scalar("I"), self._scalar("Q")
            if element_type in SCALARS:  # numbers: read in one go
                fmt = SCALARS[element_type]
                return np.frombuffer(self._take(n * struct.calcsize(fmt)), dtype="<" + fmt).tolist()
            return [self._value(element_type, key) for _ in range(n)]
        raise self._error(f"metadata {key!r} has unknown value type {value_type} (GGUF defines 0-12): "
                          "the file is damaged or newer than tinyinfer")

    def _read_key_value(self) -> tuple[str, object]:
        key = self._string()
        return key, self._value(self._scalar("I"), key)

    def _read_tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self._string()
        n_dims = self._scalar("I")
        if n_dims > 4:
            raise self._error(f"tensor {name!r} has {n_dims} dimensions; ggml tensors have at most 4")
        dims = [self._scalar("Q") for _ in range(n_dims)]
        type_id, offset = self._scalar("I"), self._scalar("Q")
        if type_id not in GGML_TYPES:
            raise self._error(f"tensor {name!r} has unknown type id {type_id} (known: {', '.join(t[0] for t in GGML_TYPES.values())}): "
                              "the file is damaged or needs a newer tinyinfer")
        return name, tuple(reversed(dims)), type_id, offset

    def _alignment(self) -> int:
        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1 or alignment & (alignment - 1):
            raise self._error(f"general.alignment is {alignment!r}: it must be a power of two")
        return alignment

    def _place(self, infos, data_start: int) -> dict[str, TensorInfo]:
        """TensorInfos with their byte spans, checked: block-aligned rows, aligned offsets, no overlap, in the file."""
        tensors = {}
        for name, shape, type_id, offset in infos:
            type_name, block_weights, block_bytes = GGML_TYPES[type_id]
            row = shape[-1] if shape else 1
            if row % block_weights:
                raise self._error(f"tensor {name!r} has rows of {row} numbers, not a multiple of {type_name}'s "
                                  f"{block_weights}-number blocks: the file is damaged")
            if offset % self.alignment:
                raise self._error(f"tensor {name!r} starts at offset {offset}, not a multiple of the alignment "
                                  f"{self.alignment}: the file is damaged")
            nbytes = math.prod(shape) // block_weights * block_bytes
            tensors[name] = TensorInfo(name, shape, type_name, data_start + offset, nbytes)
        spans = sorted(tensors.values(), key=lambda t: t.start)
        for info, following in zip(spans, spans[1:] + [None]):
            limit = following.start if following is not None else len(self._data)
            if info.start + info.nbytes > limit:
                what = f"tensor {following.name!r} begins" if following is not None else "the file ends"
                raise self._error(f"tensor {info.name!r} ({info.type_name} {list(info.shape)}) needs {info.nbytes:,} "
                                  f"bytes from byte {info.start:,}, but {what} at byte {limit:,}: "
                                  f"{'the file is truncated: download it again' if following is None else 'its size disagrees with its type and shape: the file is damaged'}")
        if len(tensors) != len(infos):
            raise self._error("names two tensors alike: the file is damaged")
        return tensors

    # -- the tensors ---------------------------------------------------------------------------------------

    def raw(self, name: str) -> np.ndarray:
        """The bytes of tensor `name` as stored, a read-only view into the mapped file.  -> [nbytes] (uint8)"""
        info = self.tensors[name]
        return self._data[info.start:info.start + info.nbytes]

    def rows(self, name: str) -> np.ndarray:
        """The bytes by row: every row of a tensor (its last NumPy axis) is whole blocks.
        -> [rows, bytes per row] (uint8), rows = the product of all but the last axis"""
        info = self.tensors[name]
        n_rows = math.prod(info.shape[:-1]) if len(info.shape) > 1 else 1
        return self.raw(name).reshape(n_rows, -1)

    def dequantize(self, name: str) -> np.ndarray:
        """Tensor `name` as float32, in NumPy's shape (an F32 tensor: a read-only view into the file)."""
        info = self.tensors[name]
        check_supported(info.type_name, f"{self.path}: tensor {name!r}")
        return dequantize(self.raw(name), info.type_name, info.shape)
