"""Reading safetensors files: the format every modern checkpoint ships in.

A safetensors file is three parts, so it is read here directly (memory-mapped, nothing unpickled):

    [8 bytes: N, little-endian u64] [N bytes: JSON header] [raw tensor bytes]

    header = {"model.norm.weight": {"dtype": "BF16", "shape": [64], "data_offsets": [0, 128]}, ...,
              "__metadata__": {...}}

Offsets count from the first byte after the header. NumPy has no bfloat16, but a bf16 number is just the top
16 bits of a float32, so `bf16_to_f32` widens it exactly by shifting the bits left by 16.
FP8 tensors (F8_E4M3 weights, their scales) are read as raw bytes: they mean something only with the scales
config.json's quantization_config describes, which tinyinfer/fp8.py applies.
A sharded checkpoint adds `model.safetensors.index.json`, whose `weight_map` says which file holds which name.
"""

from __future__ import annotations

import json
import math
import mmap
import struct
from pathlib import Path

import numpy as np

from tinyinfer.errors import TinyInferError

DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,  # BF16 read as raw bits
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
    "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "F8_E8M0": np.uint8,  # FP8 codes read as raw bytes (tinyinfer/fp8.py)
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")  # what a parameter may be stored as (integers: buffers, quantised codes)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 (stored as uint16 bit patterns) to float32 exactly.

    >>> bf16_to_f32(np.array([0x3F80, 0xC000], dtype=np.uint16))  # 1.0 and -2.0
    array([ 1., -2.], dtype=float32)
    """
    # BEGIN EXERCISE 2.1: widen bfloat16 bits to float32
    return (bits.astype(np.uint32) << 16).view(np.float32)
    # END EXERCISE 2.1


class SafetensorsFile:
    """One memory-mapped .safetensors file: `names()`, `shape(name)`, `dtype(name)`, `raw(name)` (as stored),
    `get(name) -> float32`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError as e:
            raise TinyInferError(f"safetensors file not found: {path}") from e
        except ValueError as e:  # mmap of an empty file
            raise TinyInferError(f"{path} is empty: not a safetensors file") from e
        except OSError as e:  # a folder, no permission...
            raise TinyInferError(f"cannot read {path} ({e.strerror}): give a readable .safetensors file") from e
        self.header, self._data_start = self._read_header()

    def _read_header(self) -> tuple[dict, int]:
        size = len(self._buf)
        if size < 8:
            raise TinyInferError(f"{self.path} is truncated: too short for a safetensors header")
        (n,) = struct.unpack("<Q", self._buf[:8])
        if 8 + n > size:
            raise TinyInferError(f"{self.path} is truncated or not safetensors: header of {n} bytes, file of {size}")
        try:
            header = json.loads(self._buf[8 : 8 + n], object_pairs_hook=_unique_keys)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TinyInferError(f"{self.path} is not a safetensors file: its header is not JSON ({e})") from e
        except DuplicateKey as e:  # the last one would win silently: a crafted file could load other weights
            raise TinyInferError(f"{self.path} is not a valid safetensors file: its header names {e} twice") from None
        except RecursionError:
            raise TinyInferError(f"{self.path} is not a safetensors file: its header nests too deeply") from None
        if not isinstance(header, dict):
            raise TinyInferError(f"{self.path} is not a safetensors file: its header is not a JSON object")
        header.pop("__metadata__", None)
        for name, info in header.items():
            self._check_entry(name, info, size - 8 - n)
        return header, 8 + n

    def _check_entry(self, name: str, info, data_size: int) -> None:
        """One header entry must say where a tensor of its dtype and shape lies inside the data, exactly:
        {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]} holds 2 x 3 x 4 bytes."""
        def bad(problem: str) -> TinyInferError:
            return TinyInferError(f"{self.path}: tensor {name!r} {problem}; the file is damaged or was not written "
                                  "by a safetensors library: re-download or re-export it")

        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise bad(f"has header entry {info!r:.80}, not {{dtype, shape, data_offsets}}")
        if not isinstance(info["dtype"], str) or info["dtype"] not in DTYPES:
            raise bad(f"has unsupported dtype {info['dtype']!r} (supported: {', '.join(DTYPES)})")
        shape, offsets = info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise bad(f"has shape {shape!r:.80}, not a list of sizes >= 0")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise bad(f"has data_offsets {offsets!r:.80}, not [start, end] with 0 <= start <= end")
        start, end = offsets
        if end > data_size:
            raise TinyInferError(f"{self.path} is truncated: tensor {name!r} ends at byte {end} of {data_size}")
        expected = math.prod(shape) * np.dtype(DTYPES[info["dtype"]]).itemsize
        if end - start != expected:
            raise bad(f"spans {end - start} bytes but {info['dtype']} {shape} needs {expected}")

    def names(self) -> list[str]:
        return list(self.header)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.header[name]["shape"])

    def dtype(self, name: str) -> str:
        """The dtype as the header names it: "BF16", "F8_E4M3", "U8"..."""
        return self.header[name]["dtype"]

    def raw(self, name: str) -> np.ndarray:
        """The tensor as stored (BF16 as uint16 bits), a read-only view into the mapped file."""
        info = self.header[name]
        start, end = info["data_offsets"]
        array = np.frombuffer(self._buf, dtype=DTYPES[info["dtype"]], count=(end - start) // np.dtype(DTYPES[info["dtype"]]).itemsize,
                              offset=self._data_start + start)
        return array.reshape(info["shape"])

    def get(self, name: str, dtype=np.float32) -> np.ndarray:
        """The tensor converted to `dtype` (a fresh array in memory). Parameters are floating point: an integer
        or boolean tensor read as one is refused (quantised codes, or a damaged file), never converted."""
        stored = self.header[name]["dtype"]
        if stored.startswith("F8_"):
            raise TinyInferError(f"tensor {name!r} is stored as {stored}: FP8 codes, which need the scales that "
                                 "config.json's quantization_config describes, and this config.json has none (or "
                                 "another method); restore the checkpoint's original config.json or use a bf16 one")
        if stored not in FLOAT_DTYPES:
            raise TinyInferError(f"tensor {name!r} is stored as {stored}, not as floating-point numbers: the checkpoint "
                                 "is quantised or damaged; use an fp32, fp16 or bf16 checkpoint")
        array = self.raw(name)
        if self.header[name]["dtype"] == "BF16":
            array = bf16_to_f32(array)
        return array.astype(dtype)


class DuplicateKey(ValueError):
    """A JSON object that gives one key twice."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json's object_pairs_hook: the object, refusing a key given twice (json.loads keeps the last)."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen = set()
        raise DuplicateKey(next(repr(k) for k, _ in pairs if k in seen or seen.add(k)))
    return obj


def read_weight_map(index_path: Path) -> dict[str, str]:
    """The `weight_map` (tensor name -> shard file name) of a sharded checkpoint's index."""
    try:
        weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise TinyInferError(f"{index_path} is not a safetensors index: it must be a JSON object whose "
                             f'"weight_map" maps tensor names to shard files ({type(e).__name__}: {e}); '
                             "re-download it") from None
    if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
        raise TinyInferError(f'{index_path}: "weight_map" must map tensor names to shard file names; re-download it')
    return weight_map


class Checkpoint:
    """All tensors of a model folder or file, single-file or sharded, looked up by name."""

    def __init__(self, path: Path):
        path = Path(path)
        if path.is_file():
            files = [path]
        elif (path / "model.safetensors.index.json").exists():
            files = [path / f for f in sorted(set(read_weight_map(path / "model.safetensors.index.json").values()))]
        elif (path / "model.safetensors").exists():
            files = [path / "model.safetensors"]
        else:
            pickled = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt")]
            hint = (f" It has PyTorch pickle files ({', '.join(pickled)}), which tinyinfer never unpickles: convert "
                    "them to safetensors first (e.g. load with transformers and call save_pretrained(folder, "
                    "safe_serialization=True)).") if pickled else ""
            raise TinyInferError(f"no model.safetensors or model.safetensors.index.json in {path}.{hint}")
        self.files = [SafetensorsFile(f) for f in files]
        self._where = {}
        for f in self.files:
            for name in f.names():
                if name in self._where:
                    raise TinyInferError(f"tensor {name!r} is in two shards, {self._where[name].path.name} and "
                                         f"{f.path.name}: the checkpoint is damaged; re-download it")
                self._where[name] = f

    def names(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return self._file(name).shape(name)

    def dtype(self, name: str) -> str:
        return self._file(name).dtype(name)

    def raw(self, name: str) -> np.ndarray:
        return self._file(name).raw(name)

    def get(self, name: str, dtype=np.float32) -> np.ndarray:
        return self._file(name).get(name, dtype)

    def _file(self, name: str) -> SafetensorsFile:
        if name not in self._where:
            raise TinyInferError(f"checkpoint is missing tensor {name!r}")
        return self._where[name]
