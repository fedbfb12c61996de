"""Bad GGUF files: each gets one error naming the file and the problem (and the fix where there is one), from
`tinyinfer.load` and, in one line without a traceback, from the CLI. The files are a tiny valid one, then damaged
byte by byte where the format puts each field (tinyinfer/gguf/reader.py's docstring)."""

from __future__ import annotations

import struct
import subprocess
import sys

import gguf
import numpy as np
import pytest
from gguf_files import write_gguf
from tiny_models import build_with_transformers

import tinyinfer
from tinyinfer.cli import main
from tinyinfer.gguf.reader import GGUFFile

SHAPE = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=1, head_dim=32, max_position_embeddings=32, rms_norm_eps=1e-5)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A valid tiny llama file, matrices in Q8_0, and its bytes."""
    root = tmp_path_factory.mktemp("gguf_errors")
    path = write_gguf(build_with_transformers(root / "hf", "LlamaConfig", SHAPE), root / "good.gguf", "Q8_0")
    return path, path.read_bytes()


def damaged(tmp_path, data: bytes):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    return path


def type_field(data: bytes, name: str) -> int:
    """Byte offset of tensor `name`'s type (u32) in its tensor info: after the name, n_dims and the dims."""
    at = data.index(name.encode()) + len(name)
    (n_dims,) = struct.unpack_from("<I", data, at)
    return at + 4 + 8 * n_dims


def with_type(data: bytes, name: str, type_id: int) -> bytes:
    at = type_field(data, name)
    return data[:at] + struct.pack("<I", type_id) + data[at + 4:]


def assert_refused(path, *patterns: str) -> None:
    with pytest.raises(tinyinfer.TinyInferError) as error:
        tinyinfer.load(path)
    message = str(error.value)
    assert "\n" not in message and str(path) in message
    for pattern in patterns:
        assert pattern in message, message


def test_the_good_file_loads(good):
    path, _ = good
    f = GGUFFile(path)
    assert f.version == 3 and f.alignment == 32 and f.metadata["general.architecture"] == "llama"
    assert tinyinfer.load(path).config.n_layers == 1


def test_truncated_data(good, tmp_path):
    path, data = good
    assert_refused(damaged(tmp_path, data[:-100]), "the file is truncated", "but the file ends at byte")


def test_truncated_header(good, tmp_path):
    path, data = good
    assert_refused(damaged(tmp_path, data[:200]), "is truncated: its header needs byte")


def test_wrong_magic(good, tmp_path):
    _, data = good
    assert_refused(damaged(tmp_path, b"GGUX" + data[4:]), "is not a GGUF file: it starts with b'GGUX'")


@pytest.mark.parametrize("version", [1, 4, 3 << 24])
def test_unknown_version(good, tmp_path, version):
    _, data = good
    assert_refused(damaged(tmp_path, data[:4] + struct.pack("<I", version) + data[8:]), f"is GGUF version {version}",
                   "versions 2 and 3")


def test_version_2_is_read(good, tmp_path):
    _, data = good
    assert GGUFFile(damaged(tmp_path, data[:4] + struct.pack("<I", 2) + data[8:])).version == 2


def test_unknown_tensor_type(good, tmp_path):
    _, data = good
    assert_refused(damaged(tmp_path, with_type(data, "blk.0.attn_q.weight", 99)), "'blk.0.attn_q.weight'",
                   "unknown type id 99")


def test_unknown_metadata_value_type(good, tmp_path):
    _, data = good
    at = data.index(b"general.architecture") + len(b"general.architecture")  # the value type (u32) follows the key
    bad = data[:at] + struct.pack("<I", 13) + data[at + 4:]
    assert_refused(damaged(tmp_path, bad), "metadata 'general.architecture' has unknown value type 13")


def test_size_disagreeing_with_type_and_shape(good, tmp_path):
    _, data = good
    bad = with_type(data, "blk.0.attn_q.weight", int(gguf.GGMLQuantizationType.F32))  # needs 4 bytes a weight
    assert_refused(damaged(tmp_path, bad), "'blk.0.attn_q.weight' (F32 [64, 64]) needs 16,384 bytes",
                   "its size disagrees with its type and shape")


def test_unsupported_type_is_refused_by_name_with_the_fix(good, tmp_path):
    _, data = good  # I8 (1 byte a weight) fits in the space of Q8_0 blocks (34 bytes for 32 weights)
    bad = with_type(data, "blk.0.ffn_down.weight", int(gguf.GGMLQuantizationType.I8))
    assert_refused(damaged(tmp_path, bad), "'blk.0.ffn_down.weight' is stored as I8", "K-quant", "Q8_0")


def test_unknown_architecture(tmp_path):
    writer = gguf.GGUFWriter(tmp_path / "mamba.gguf", "mamba")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    assert_refused(tmp_path / "mamba.gguf", "GGUF architecture 'mamba' is not supported", "command-r, falcon, gemma",
                   "gemma3, gpt-oss, gpt2, gptneox, granite, llama", "olmo2, phi2",
                   "qwen3moe, smollm3, stablelm, starcoder2")


@pytest.mark.parametrize("arch, key, value, tensor, message", [
    ("falcon", "tensor_data_layout", "bloom", None, "falcon tensor_data_layout 'bloom' is not supported"),
    ("olmo2", "attention.sliding_window", 4096, None, "(OLMo 3's windowed layers) is not supported"),
    ("phi2", None, None, "blk.0.attn_qkv.weight", "q, k and v fused (attn_qkv"),
])
def test_what_an_architecture_cannot_honour_is_refused_by_name(tmp_path, arch, key, value, tensor, message):
    path = tmp_path / f"{arch}.gguf"
    writer = gguf.GGUFWriter(path, arch)
    if key is not None:
        writer.add_key_value(f"{arch}.{key}", value, gguf.GGUFValueType.STRING if isinstance(value, str) else
                             gguf.GGUFValueType.UINT32)
    for name in ("token_embd.weight", tensor):
        if name is not None:
            writer.add_tensor(name, np.zeros((4, 8), np.float32))
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    assert_refused(path, message)


GPT_OSS_BODY = {"embedding_length": 64, "block_count": 1, "context_length": 32, "attention.head_count": 2,
                "rope.freq_base": 150000.0}
YARN = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 8}


@pytest.mark.parametrize("keys, message", [
    ({"rope.scaling.type": "longrope"}, "RoPE scaling 'longrope' in a GGUF file is not supported here (only linear, "
                                        "yarn)"),
    (YARN | {"rope.scaling.yarn_ext_factor": 0.5}, "rope.scaling.yarn_ext_factor 0.5 is not supported"),
    (YARN | {"rope.scaling.yarn_log_multiplier": 0.1}, "rope.scaling.yarn_log_multiplier (DeepSeek's mscale)"),
    ({"rope.freq_base_swa": 10000.0}, "rope.freq_base_swa 10000.0 differs from rope.freq_base 150000.0"),
    ({"rope.dimension_count": 16}, "RoPE on 16 of 32 coordinates per head (rope.dimension_count)"),
])
def test_what_a_gpt_oss_file_states_and_tinyinfer_cannot_honour_is_refused_by_name(tmp_path, keys, message):
    path = tmp_path / "gpt-oss.gguf"
    writer = gguf.GGUFWriter(path, "gpt-oss")
    for key, value in (GPT_OSS_BODY | keys).items():
        kind = {str: gguf.GGUFValueType.STRING, float: gguf.GGUFValueType.FLOAT32}.get(type(value),
                                                                                     gguf.GGUFValueType.UINT32)
        writer.add_key_value(f"gpt-oss.{key}", value, kind)
    writer.add_tensor("token_embd.weight", np.zeros((4, 64), np.float32))
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    assert_refused(path, message)


def test_empty_file(tmp_path):
    assert_refused(damaged(tmp_path, b""), "is empty: not a GGUF file")


def test_cli_prints_one_line_and_exits_non_zero(good, tmp_path, capsys):
    _, data = good
    bad = damaged(tmp_path, data[:-100])
    assert main(["generate", "--model", str(bad), "--max-tokens", "1", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {bad}: tensor") and "truncated" in err


def test_cli_process_has_no_traceback(good, tmp_path):
    _, data = good
    bad = damaged(tmp_path, b"GGUX" + data[4:])
    run = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", "--model", str(bad), "hi"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip() == f"error: {bad}: is not a GGUF file: it starts with b'GGUX', not b'GGUF'"
