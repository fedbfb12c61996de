"""`tinyinfer models`: list the built-in models and adapters, and the checkpoints in the local Hugging Face cache.

    $ python -m tinyinfer models
    built-in (.../tinyinfer/models):
      shakespeare        LlamaForCausalLM            2.0M params     4.0 MB
      shakespeare-draft  LlamaForCausalLM            0.2M params   522.8 KB
      shakespeare-moe    MixtralForCausalLM          2.2M params     4.5 MB
    built-in LoRA adapters, for --lora (.../tinyinfer/models):
      shakespeare-shout  LoRA r=8 on shakespeare      0.1M params   443.3 KB
    pulled (~/.cache/tinyinfer/models):
      smollm2-135m-instruct  GGUF llama                134.5M params    98.4 MB
    Hugging Face cache (~/.cache/huggingface/hub):
      HuggingFaceTB/SmolLM2-135M-Instruct  LlamaForCausalLM  134.5M params  269.1 MB

Catalogue models not pulled yet are listed with the command that fetches them.
Every model name printed here works as `--model NAME`, every adapter name as `--lora NAME`. Parameter counts come
from the safetensors and GGUF headers (no weights are read), sizes from the files on disk (cache snapshots are
links to blobs: the blobs are counted).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tinyinfer.catalogue import CATALOGUE, model_cache_dir, pulled_path
from tinyinfer.errors import TinyInferError
from tinyinfer.gguf.reader import GGUFFile
from tinyinfer.lora import builtin_adapters
from tinyinfer.resolve import BUILTIN_DIR, builtin_models, cached_models, hf_cache_dir
from tinyinfer.safetensors_io import Checkpoint


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object per model instead of a table")


def run(args) -> int:
    sections = [("built-in", BUILTIN_DIR, builtin_models()),
                ("built-in LoRA adapters, for --lora", BUILTIN_DIR, builtin_adapters()),
                ("pulled", model_cache_dir(), pulled_models()),
                ("Hugging Face cache", hf_cache_dir(), cached_models())]
    for source, where, models in sections:
        rows = [describe(name, folder) for name, folder in models.items()]
        if args.json:
            for row in rows:
                print(json.dumps({**row, "source": source}))
            continue
        print(f"{source} ({where}):" + ("" if rows else " none"))
        width = max((len(row["name"]) for row in rows), default=0)
        for row in rows:
            params = f"{row['params'] / 1e6:.1f}M params" if row["params"] is not None else "? params"
            print(f"  {row['name']:{width}s}  {row['architecture']:24s} {params:>14s} {format_size(row['bytes']):>10s}")
    missing = [name for name in CATALOGUE if pulled_path(name) is None]
    if missing and not args.json:
        print(f"not pulled yet (`python -m tinyinfer pull NAME`): {', '.join(missing)}")
    return 0


def pulled_models() -> dict[str, Path]:
    """Catalogue name -> its file in tinyinfer's model cache, for the models pulled."""
    return {name: path for name in CATALOGUE if (path := pulled_path(name)) is not None}


def describe(name: str, folder: Path) -> dict:
    """Name, architecture, parameter count and size on disk of one model folder (or one pulled file)."""
    if folder.is_file():  # a pulled GGUF file: its header says the architecture and the tensors' shapes
        architecture, params = gguf_summary(folder)
        return {"name": name, "architecture": architecture, "params": params, "bytes": folder.stat().st_size,
                "path": str(folder)}
    adapter = (folder / "adapter_config.json").is_file()
    try:
        config = json.loads((folder / ("adapter_config.json" if adapter else "config.json")).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        config = {}
    if adapter:
        architecture = f"LoRA r={config.get('r', '?')} on {config.get('base_model_name_or_path', '?')}"
    else:
        architecture = (config.get("architectures") or [config.get("model_type", "unknown")])[0]
    weights = folder / "adapter_model.safetensors" if adapter else folder
    return {"name": name, "architecture": architecture, "params": count_params(weights),
            "bytes": sum(p.stat().st_size for p in folder.iterdir() if p.is_file()), "path": str(folder)}


def count_params(path: Path) -> int | None:
    """Sum of the tensor sizes listed in the safetensors headers (a folder's, or one file's); None when the
    files cannot be read."""
    try:
        checkpoint = Checkpoint(path)
    except (TinyInferError, OSError, ValueError):
        return None
    return sum(math.prod(checkpoint.shape(name)) for name in checkpoint.names())


def gguf_summary(path: Path) -> tuple[str, int | None]:
    """("GGUF <its general.architecture>", the sum of its tensors' sizes) from a GGUF file's header (no tensor is
    read); ("GGUF", None) when the header cannot be read."""
    try:
        gguf = GGUFFile(path)
    except (TinyInferError, OSError, ValueError):
        return "GGUF", None
    return f"GGUF {gguf.metadata.get('general.architecture', '?')}", sum(
        math.prod(info.shape) for info in gguf.tensors.values())


def format_size(n_bytes: int) -> str:
    """format_size(3_500_000) -> '3.5 MB'; format_size(512) -> '512.0 B'"""
    units = ["B", "KB", "MB", "GB", "TB"]
    power = min(int(math.log10(max(n_bytes, 1))) // 3, len(units) - 1)
    return f"{n_bytes / 1000 ** power:.1f} {units[power]}"
