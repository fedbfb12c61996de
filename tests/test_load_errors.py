"""Broken checkpoints get a TinyInferError that names the problem, and the CLI turns it into one line.

Each test damages a copy of a tiny valid checkpoint (weights_scripts/make_tiny_models.py) in one way.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import tiny_models
import torch
from safetensors.numpy import load_file, save_file
from tiny_models import ROOT

import tinyinfer
from tinyinfer.errors import TinyInferError

tiny_checkpoint = tiny_models.tiny_checkpoint  # the session fixture, made usable in this module
SUPPORTED = ("gpt2", "llama", "mistral", "qwen2", "qwen3")


@pytest.fixture
def checkpoint(tiny_checkpoint, tmp_path):
    """A private copy of the tiny llama checkpoint, free to damage."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_checkpoint("llama"), folder)
    return folder


def edit_config(folder, **fields):
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def edit_tensors(folder, edit):
    path = folder / "model.safetensors"
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def load_error(path) -> str:
    with pytest.raises(TinyInferError) as info:
        tinyinfer.load(path)
    return str(info.value)


def test_unknown_model_type_lists_the_supported_ones(checkpoint):
    edit_config(checkpoint, model_type="mamba")
    message = load_error(checkpoint)
    assert "mamba" in message
    assert all(name in message for name in SUPPORTED)


def test_missing_tensor_is_named(checkpoint):
    edit_tensors(checkpoint, lambda t: t.pop("model.layers.1.mlp.down_proj.weight"))
    assert "model.layers.1.mlp.down_proj.weight" in load_error(checkpoint)


def test_misshapen_tensor_names_expected_and_found_shape(checkpoint):
    name = "model.layers.0.self_attn.k_proj.weight"  # [kv_heads * head_dim, d_model] = [48, 48]

    def cut(tensors):
        tensors[name] = tensors[name][:24].copy()  # [48, 48] -> [24, 48]

    edit_tensors(checkpoint, cut)
    message = load_error(checkpoint)
    assert name in message
    assert "24, 48" in message and "48, 48" in message  # found and expected, as a list or a tuple


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.bool_])
def test_a_parameter_stored_as_integers_is_refused_not_converted(checkpoint, dtype):
    """Integer codes of a quantised file whose config.json does not say so (or a damaged file) would load as
    garbage numbers if converted: refused, naming the tensor and its stored type."""
    name = "model.layers.1.mlp.down_proj.weight"

    def to_integers(tensors):
        tensors[name] = tensors[name].astype(dtype)

    edit_tensors(checkpoint, to_integers)
    message = load_error(checkpoint)
    assert name in message and "not as floating-point numbers" in message


@pytest.mark.parametrize("keep", [0.5, 100, 5])
def test_truncated_safetensors_file(checkpoint, keep):
    """Cut in the tensor data, in the JSON header, and inside the 8-byte header length."""
    path = checkpoint / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep) if keep < 1 else keep])
    message = load_error(checkpoint)
    assert "model.safetensors" in message and "truncated" in message


def write_header(path, header_text: str) -> None:
    """Replace a safetensors file's JSON header by `header_text`, keeping its tensor data."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    text = header_text.encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])


def test_a_tensor_named_twice_in_a_header_is_refused(checkpoint):
    """json.loads keeps the last of two equal keys: a crafted header could name the embedding twice and have
    the second entry point at other bytes. Refused, naming the tensor."""
    path = checkpoint / "model.safetensors"
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    header = json.loads(path.read_bytes()[8:8 + n])
    name = "model.norm.weight"
    other = next(k for k, v in header.items() if k != name and k != "__metadata__" and v["shape"] == header[name]["shape"])
    entries = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in header.items()] + [
        f"{json.dumps(name)}: {json.dumps(header[other])}"]
    write_header(path, "{" + ", ".join(entries) + "}")
    message = load_error(checkpoint)
    assert "model.safetensors" in message and f"names {name!r} twice" in message


@pytest.mark.parametrize("header", ["[" * 100_000, '{"a": ' + "[" * 100_000])
def test_a_header_nested_too_deeply_is_a_clean_error(checkpoint, header):
    write_header(checkpoint / "model.safetensors", header)
    message = load_error(checkpoint)  # it was a RecursionError, reported as an internal error
    assert "model.safetensors" in message and "nests too deeply" in message


def test_a_tensor_in_two_shards_is_refused(checkpoint):
    tensors = load_file(checkpoint / "model.safetensors")
    (checkpoint / "model.safetensors").unlink()
    names = sorted(tensors)
    save_file(tensors, checkpoint / "model-00001-of-00002.safetensors")
    save_file({names[0]: tensors[names[0]]}, checkpoint / "model-00002-of-00002.safetensors")
    weight_map = {name: "model-00001-of-00002.safetensors" for name in names}
    weight_map[names[0]] = "model-00002-of-00002.safetensors"
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert f"tensor {names[0]!r} is in two shards" in load_error(checkpoint)


@pytest.mark.parametrize("name, zip_format", [("pytorch_model.bin", True), ("pytorch_model.bin", False),
                                              ("model.pt", True)])
def test_pytorch_pickle_file_is_refused(checkpoint, name, zip_format):
    """Never unpickled: both the folder and the file itself get an error that says to convert.
    torch.save writes a zip archive; before PyTorch 1.6 it wrote a bare pickle stream."""
    (checkpoint / "model.safetensors").unlink()
    tensors = {"model.embed_tokens.weight": torch.zeros(4, 4)}
    torch.save(tensors, checkpoint / name, _use_new_zipfile_serialization=zip_format)
    for path in (checkpoint, checkpoint / name):
        message = load_error(path)
        assert "safetensors" in message and "convert" in message.lower(), (path, message)


def test_missing_config_json(checkpoint):
    (checkpoint / "config.json").unlink()
    assert "config.json" in load_error(checkpoint)


@pytest.mark.parametrize("damage", ["no such folder", "unknown model_type"])
def test_cli_prints_one_line_and_fails_without_traceback(checkpoint, tmp_path, damage):
    if damage == "unknown model_type":
        edit_config(checkpoint, model_type="mamba")
    model = checkpoint if damage == "unknown model_type" else tmp_path / "missing"
    run = subprocess.run(
        [sys.executable, "-m", "tinyinfer", "generate", "--model", str(model), "x"],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert run.returncode != 0
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), run.stderr
    assert ("mamba" if damage == "unknown model_type" else "missing") in lines[0]


# model_type -> its transformers config class (and fields over tiny_models.TINY_CONFIG its defaults need)
CONFIG_CLASSES = {
    "gpt2": "GPT2Config", "llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config",
    "mixtral": "MixtralConfig", "qwen2_moe": "Qwen2MoeConfig", "qwen3_moe": "Qwen3MoeConfig", "olmoe": "OlmoeConfig",
    "phi3": "Phi3Config", "gemma": "GemmaConfig", "gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig",
    "granite": "GraniteConfig", "smollm3": "SmolLM3Config", "olmo": "OlmoConfig", "olmo2": "Olmo2Config",
    "gpt_neox": "GPTNeoXConfig", "phi": "PhiConfig", "stablelm": "StableLmConfig", "starcoder2": "Starcoder2Config",
    "cohere": "CohereConfig", "cohere2": "Cohere2Config", "falcon": "FalconConfig", "deepseek_v3": "DeepseekV3Config",
    "deepseek_v2": "DeepseekV2Config", "gpt_oss": "GptOssConfig",
}
CONFIG_FIELDS = {"deepseek_v2": {"num_experts_per_tok": 2}}  # its class leaves the count to the file
WRONG_VALUES = ["x", -1, 0, None, 1.5, [], {}, True, 10**12, float("nan")]


def test_the_config_sweep_covers_every_supported_family():
    from tinyinfer.families import FAMILIES  # noqa: PLC0415

    assert set(CONFIG_CLASSES) == set(FAMILIES)


@pytest.mark.parametrize("model_type", CONFIG_CLASSES)
def test_any_field_with_a_wrong_value_or_left_out_is_read_or_refused_by_name(model_type):
    """A config.json of each family (its transformers class's defaults, at a tiny size) with one field set to a
    wrong value, or removed: tinyinfer reads it or raises a TinyInferError, never another exception (such as a
    TypeError deep in a reader, a division by a zero step, or a MemoryError from a trillion layers)."""
    import transformers  # noqa: PLC0415

    from tinyinfer.families import config_from_hf  # noqa: PLC0415

    fields = {**tiny_models.TINY_CONFIG, **CONFIG_FIELDS.get(model_type, {})}
    base = {**getattr(transformers, CONFIG_CLASSES[model_type])(**fields).to_dict(), "model_type": model_type}
    config_from_hf(dict(base))  # the untouched file loads
    for key in set(base) - {"model_type"}:
        for changed in [{**base, key: wrong} for wrong in WRONG_VALUES] + [{k: v for k, v in base.items() if k != key}]:
            try:
                config_from_hf(changed)
            except TinyInferError:
                pass
