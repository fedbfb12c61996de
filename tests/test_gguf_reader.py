"""The GGUF reader (tinyinfer/gguf/reader.py) against llama.cpp's writer: metadata of every value type, both
versions, a custom alignment, tensors of every shape rank; and the real file against gguf's own reader."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGUFValueType as V
from gguf_files import real_model_or_skip

from tinyinfer.gguf.reader import GGUFFile

VALUES = {  # key: (value, type)
    "t.u8": (200, V.UINT8), "t.i8": (-100, V.INT8), "t.u16": (60000, V.UINT16), "t.i16": (-30000, V.INT16),
    "t.u32": (4_000_000_000, V.UINT32), "t.i32": (-2_000_000_000, V.INT32), "t.f32": (0.5, V.FLOAT32),
    "t.bool": (True, V.BOOL), "t.str": ("héllo ✓", V.STRING), "t.u64": (2**63 + 5, V.UINT64),
    "t.i64": (-(2**62), V.INT64), "t.f64": (1 / 3, V.FLOAT64),
}


def write(path, alignment: int | None = None):
    writer = gguf.GGUFWriter(path, "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, (value, kind) in VALUES.items():
        writer.add_key_value(key, value, kind)
    writer.add_array("t.strings", ["a", "", "ünï"])
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.25, -1.5])
    writer.add_array("t.nested", [[1, 2], [3]])
    rng = np.random.default_rng(0)
    tensors = {"one": rng.standard_normal(7).astype(np.float32), "two": rng.standard_normal((3, 5)).astype(np.float16),
               "three": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    q8 = rng.standard_normal((4, 64)).astype(np.float32)
    writer.add_tensor("q8", gguf.quants.quantize(q8, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    return tensors


@pytest.mark.parametrize("alignment", [None, 64, 256])
def test_metadata_of_every_type_and_tensors_read_back(tmp_path, alignment):
    tensors = write(tmp_path / "all.gguf", alignment)
    f = GGUFFile(tmp_path / "all.gguf")
    assert f.version == 3 and f.alignment == (alignment or 32)
    for key, (value, _) in VALUES.items():
        assert f.metadata[key] == (np.float32(value) if key == "t.f32" else value), key
    assert f.metadata["t.strings"] == ["a", "", "ünï"] and f.metadata["t.ints"] == [1, -2, 3]
    assert f.metadata["t.floats"] == [0.25, -1.5] and f.metadata["t.nested"] == [[1, 2], [3]]
    assert f.metadata["general.architecture"] == "llama"
    for name, array in tensors.items():
        assert f.tensors[name].shape == array.shape and f.tensors[name].start % f.alignment == 0
        np.testing.assert_array_equal(f.dequantize(name), array.astype(np.float32))
    reference = {t.name: t for t in gguf.GGUFReader(tmp_path / "all.gguf").tensors}
    np.testing.assert_array_equal(f.dequantize("q8"), gguf.quants.dequantize(reference["q8"].data,
                                                                             gguf.GGMLQuantizationType.Q8_0))
    assert isinstance(f.raw("q8"), np.memmap)  # the data is mapped, not read


def test_the_real_file_reads_as_gguf_reads_it():
    path = real_model_or_skip()
    f, reference = GGUFFile(path), gguf.GGUFReader(path)
    assert f.version == 3 and len(f.tensors) == 272 and len(f.metadata) == 33
    for tensor in reference.tensors:
        info = f.tensors[tensor.name]
        assert info.shape == tuple(int(d) for d in reversed(tensor.shape)) and info.nbytes == tensor.n_bytes
        assert info.start == tensor.data_offset
    for key, field in reference.fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        assert f.metadata[key] == (pytest.approx(value) if isinstance(value, float) else value), key
