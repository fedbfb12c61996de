"""Tiny random-weight Hugging Face checkpoints for tests, and the transformers reference run on them.

The checkpoints come from `weights_scripts/make_tiny_models.py` (see its docstring for why every parameter
is re-randomised); each variant is built once per test session into pytest's temporary folder:

    from tiny_models import VARIANTS, tiny_checkpoint  # the fixture, imported into the test module

    def test_something(tiny_checkpoint):
        folder = tiny_checkpoint("llama_gqa")  # a Path, built on first use
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import tinyinfer
from tinyinfer.model import Model, SeqChunk, map_arrays

ROOT = Path(__file__).resolve().parents[1]


def _import_script(path: Path):
    """weights_scripts/ is a folder of scripts, not a package: import one by its path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


make_tiny_models = _import_script(ROOT / "weights_scripts" / "make_tiny_models.py")
VARIANTS = make_tiny_models.VARIANTS
transformers.utils.logging.disable_progress_bar()
# These models are tiny: thread start-up and contention cost more than the products (~10x on 2 busy cores).
torch.set_num_threads(1)


def built_once(root: Path, build):
    """`get(name) -> Path`: `build(name, root / name)` the first time a name is asked for, its folder after."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build(name, root / name)
        return built[name]

    return get


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """`tiny_checkpoint(name) -> Path`: the folder of VARIANTS[name], built once per session."""
    return built_once(tmp_path_factory.mktemp("tiny_models"), make_tiny_models.build_variant)


def variant_dtype(name: str) -> str:
    """The stored weight dtype of a variant: "float32", "float16" or "bfloat16"."""
    return VARIANTS[name][2].get("dtype", "float32")


def prompt_ids(n: int = 20, seed: int = 0, vocab_size: int = make_tiny_models.VOCAB_SIZE) -> list[int]:
    """`n` random token ids, avoiding the special ids 0..2 (pad, BOS, EOS)."""
    return np.random.default_rng(seed).integers(3, vocab_size, size=n).tolist()


@cache
def hf_model(folder: Path) -> transformers.PreTrainedModel:
    """The transformers model of `folder`, in float32 whatever the stored dtype, with eager attention.
    Cached and shared by every test: never modify it in place (deep-copy it first)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


def hf_logits(folder: Path, ids: list[int]) -> np.ndarray:
    """transformers' logits at every position of `ids`.  [T] -> [T, V]"""
    with torch.no_grad():
        return hf_model(folder)(torch.tensor([ids])).logits[0].numpy()


def hf_greedy(folder: Path, ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' greedy continuation of `ids`, `max_new_tokens` long (EOS does not stop it)."""
    with torch.no_grad():
        out = hf_model(folder).generate(
            torch.tensor([ids]), do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(ids):].tolist()


CACHE_ATOL = 1e-9  # tinyinfer's cached paths against its own full recompute, in float64 (float32 rounding alone
# moves some logits by ~1e-5)


def float64_model(folder) -> Model:
    """The checkpoint at `folder` loaded by tinyinfer and widened to float64: rounding out of the way."""
    model = tinyinfer.load(folder)
    return Model(model.config, map_arrays(model.params, lambda a: a.astype(np.float64)), dtype=np.float64)


def assert_cached_decode_equals_full_recompute(folder, n: int = 20) -> None:
    """Prefill 6 tokens, a 5-token chunk at position 6, then one token at a time: the full pass's logits."""
    wide = float64_model(folder)
    ids = prompt_ids(n, seed=1)
    cache = wide.new_cache()
    prefill = wide.forward([SeqChunk(0, 0, ids[:6])], cache, all_logits=True)  # [6, V]
    chunk = wide.forward([SeqChunk(0, 6, ids[6:11])], cache, all_logits=True)  # [5, V]
    steps = [wide.forward([SeqChunk(0, pos, ids[pos:pos + 1])], cache) for pos in range(11, n)]  # (n - 11) x [1, V]
    np.testing.assert_allclose(np.concatenate([prefill, chunk, *steps]), wide.logits(ids), rtol=0, atol=CACHE_ATOL)
