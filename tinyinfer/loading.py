"""`tinyinfer.load`: from a name or a path to a ready Model.

What `model` may be:
- a Hugging Face model folder (config.json + safetensors [+ tokenizer.json, generation_config.json]): fp32, fp16
  or bf16 weights, or FP8 ones with block scales (transformers' "fp8" format, dequantised: tinyinfer/fp8.py);
- a llama2.c checkpoint file (`.bin` with a llama2.c header), its tokenizer.bin found beside it;
- a GGUF file (llama.cpp's format: weights, tokenizer and chat template in one file; tinyinfer/gguf/);
- a built-in model name or a Hugging Face repo id (resolved by tinyinfer/resolve.py, when present).
PyTorch pickles (.bin/.pt files inside an HF folder) are never unpickled: convert them to safetensors.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tinyinfer.config import Config, read_json
from tinyinfer.errors import TinyInferError
from tinyinfer.families import load_hf_config, load_params, untie_if_the_file_disagrees
from tinyinfer.kv_quant import check_kv_cache_dtype
from tinyinfer.memory import release_freed_memory
from tinyinfer.model import Model
from tinyinfer.param_tree import map_arrays
from tinyinfer.resolve import DEFAULT_MODEL, resolve_path
from tinyinfer.safetensors_io import Checkpoint

DTYPES = {None: np.float32, "float32": np.float32, "fp32": np.float32, "float16": np.float16, "fp16": np.float16}


def read_config(model) -> Config:
    """Only the Config of a model (folder, config.json, llama2.c file or name): no weights are read."""
    path = resolve_path(model)
    if path.is_dir() or path.suffix in (".json", ".safetensors"):
        return load_hf_config(path if path.is_dir() else path.parent)
    if is_gguf(path):
        from tinyinfer.gguf.model_file import read_gguf_config  # noqa: PLC0415

        return read_gguf_config(path)
    from tinyinfer.llama2c import llama2c_config  # noqa: PLC0415

    return llama2c_config(path)


def load(model=None, device: str = "cpu", dtype=None, tokenizer=None, kv_cache_dtype: str = "auto",
         keep_quantized: bool = False, kernels: str = "plain") -> Model:
    """Load a model (folder, llama2.c file, GGUF file, built-in name or repo id) onto `device` ("cpu" or "cuda").

    `dtype`: the compute dtype, "float32" (default; exact parity) or "float16" (halves memory; for GPUs).
    `tokenizer`: a path to use instead of the tokenizer found with the model.
    `kv_cache_dtype`: how its KV caches store keys and values: "auto" (the compute dtype), "float16" or "int8"
    (tinyinfer/kv_quant.py).
    `keep_quantized`: a GGUF file's quantised weights stay in its blocks, dequantised on every product, instead
    of once at load (less memory, slower decode: tinyinfer/gguf/model_file.py).
    `kernels`: "plain" (the array code) or "fused" (RMSNorm, SwiGLU and RoPE as fused kernels on a GPU:
    tinyinfer/kernels.py).
    """
    check_kv_cache_dtype(kv_cache_dtype)
    if not (dtype is None or isinstance(dtype, str)) or dtype not in DTYPES:
        raise TinyInferError(f"dtype {dtype!r} is not supported; use one of float32, float16")
    for name, value in (("model", model), ("tokenizer", tokenizer)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise TinyInferError(f"{name} must be a name or a path (str or os.PathLike), not {type(value).__name__}")
    if model is None:
        model = DEFAULT_MODEL
    path = resolve_path(model)
    if path.is_file() and path.suffix == ".json":  # config.json or the shard index: load the folder they describe
        path = path.parent
    compute_dtype = DTYPES[dtype]
    if path.is_file() and _is_pytorch_pickle(path):
        raise TinyInferError(f"{path} is a PyTorch pickle, which tinyinfer never unpickles: convert it to safetensors "
                             "(load it with transformers and call save_pretrained(folder, safe_serialization=True))")
    if keep_quantized and not is_gguf(path):
        raise TinyInferError(f"keep_quantized applies to GGUF files only; {path} is not one")
    if path.is_file() and is_gguf(path):
        return _load_gguf(path, device, compute_dtype, tokenizer, kv_cache_dtype, keep_quantized, kernels)
    if path.is_file() and path.suffix != ".safetensors":
        config, params, generation_config = *_load_llama2c(path, compute_dtype), {}
        tokenizer_path = tokenizer or _find_llama2c_tokenizer(path)
    else:
        folder = path.parent if path.is_file() else path
        config = load_hf_config(folder)
        checkpoint = Checkpoint(path)
        config = untie_if_the_file_disagrees(checkpoint, config)
        with tqdm(total=1, desc=f"loading {folder.name}", unit="model", disable=None, leave=False) as bar:
            params = load_params(checkpoint, config, compute_dtype)
            bar.update(1)
        gen_path = folder / "generation_config.json"
        generation_config = read_json(gen_path, "generation_config.json") if gen_path.exists() else {}
        tokenizer_path = tokenizer or (folder if (folder / "tokenizer.json").exists() else None)
    return Model(config, params, load_tokenizer(tokenizer_path), device, generation_config, compute_dtype,
                 kv_cache_dtype, kernels)


def is_gguf(path: Path) -> bool:
    """A .gguf file, or any file that starts with GGUF's magic."""
    if path.suffix == ".gguf":
        return True
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


def _load_gguf(path: Path, device: str, dtype, tokenizer, kv_cache_dtype: str, keep_quantized: bool,
               kernels: str) -> Model:
    from tinyinfer.gguf.model_file import gguf_tokenizer, keep_quantized as keep, load_gguf  # noqa: PLC0415

    if keep_quantized and device != "cpu":
        raise TinyInferError("keep_quantized runs on the CPU only: load the GGUF file dequantised on a GPU")
    with tqdm(total=1, desc=f"loading {path.name}", unit="model", disable=None, leave=False) as bar:
        config, params, gguf = load_gguf(path, dtype)
        bar.update(1)
    # a tokenizer given instead of the file's own: the file's is not even built (it may be one tinyinfer refuses)
    model = Model(config, params, load_tokenizer(tokenizer) if tokenizer else gguf_tokenizer(gguf), device, {},
                  dtype, kv_cache_dtype, kernels)
    del params  # the model holds them now: kept quantised, they are freed below
    if keep_quantized:
        keep(model, gguf)
    release_freed_memory()  # what dequantising and re-laying out left behind (and the float32 weights replaced)
    return model


def _is_pytorch_pickle(path: Path) -> bool:
    """torch.save writes a zip archive ("PK..."), older versions a raw pickle (protocol byte 0x80)."""
    with open(path, "rb") as f:
        head = f.read(4)
    return path.suffix in (".pt", ".pth", ".pkl", ".ckpt") or head == b"PK\x03\x04" or head[:1] == b"\x80"


def _load_llama2c(path: Path, dtype):
    from tinyinfer.llama2c import load_llama2c  # noqa: PLC0415

    config, params = load_llama2c(path)
    if dtype != np.float32:
        params = map_arrays(params, lambda a: a.astype(dtype))
    return config, params


def _find_llama2c_tokenizer(path: Path) -> Path | None:
    """llama2.c keeps `tokenizer.bin` (or a `tok*.bin` for custom vocabularies) beside the model."""
    candidates = [path.parent / "tokenizer.bin", *sorted(path.parent.glob("tok*.bin"))]
    return next((c for c in candidates if c.exists() and c != path), None)


def load_tokenizer(path):
    """The tokenizer at `path`: a tokenizer.json, a model folder holding one, a llama2.c tokenizer.bin, or a GGUF
    file's own, built from its metadata (no tensor is read). None for None."""
    if path is None:
        return None
    path = Path(path)
    if path.is_file() and is_gguf(path):
        from tinyinfer.gguf.model_file import gguf_tokenizer  # noqa: PLC0415 - only GGUF files need it
        from tinyinfer.gguf.reader import GGUFFile  # noqa: PLC0415

        tokenizer = gguf_tokenizer(GGUFFile(path))
        if tokenizer is None:
            raise TinyInferError(f"{path} describes no tokenizer (no tokenizer.ggml.model in its metadata): give a "
                                 "tokenizer.json or a folder holding one")
        return tokenizer
    from tinyinfer.tokenizer import Tokenizer  # noqa: PLC0415

    return Tokenizer.from_file(path)
