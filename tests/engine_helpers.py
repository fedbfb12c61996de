"""Shared by the engine tests: the real stories260K model, and the solo reference run of a request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import shared_data

from tinyinfer.llama2c import load_llama2c
from tinyinfer.model import Model
from tinyinfer.sampling import SamplingParams

VOCAB = 512  # stories260K


@pytest.fixture(scope="module")
def stories():
    """The real stories260K checkpoint (llama2.c), without a tokenizer: the tests work on token ids."""
    return Model(*load_llama2c(Path(shared_data("models/stories260K/stories260K.bin"))))


def random_prompt(rng: np.random.Generator, n: int) -> list[int]:
    """BOS then n - 1 random ordinary tokens."""
    return [1] + rng.integers(3, VOCAB, size=n - 1).tolist()


def solo(model, prompt: list[int], params: SamplingParams) -> tuple[list[int], str]:
    """The request run alone through `model.generate`: the reference every engine output must equal."""
    result = model.generate(prompt, params)
    return result.token_ids, result.finish_reason


def assert_same_as_solo(model, prompts, params, results) -> None:
    for i, (prompt, p, out) in enumerate(zip(prompts, params, results)):
        assert out.finished
        assert (out.token_ids, out.finish_reason) == solo(model, prompt, p), f"request {i} differs from its solo run"
