"""The engine on other architectures: learned positions (GPT-2), sliding windows (Mistral, Qwen2 per
layer), q/k norms (Qwen3). The batched decode path must honour each, so outputs equal the solo runs."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import tiny_checkpoint  # noqa: F401 - a fixture

import tinyinfer
from tinyinfer.engine import LLM
from tinyinfer.sampling import SamplingParams


@pytest.mark.parametrize("variant", ["gpt2", "mistral_window", "qwen2_window_layers", "qwen3"])
def test_engine_equals_solo_runs(tiny_checkpoint, variant):
    model = tinyinfer.load(tiny_checkpoint(variant))
    rng = np.random.default_rng(0)
    limit = min(model.config.max_seq_len, 64)
    prompts = [rng.integers(3, model.config.vocab_size, size=int(n)).tolist() for n in rng.integers(2, limit - 20, size=6)]
    params = [SamplingParams(temperature=0 if i % 2 else 0.9, seed=i, max_tokens=int(rng.integers(4, 16)), ignore_eos=True)
              for i in range(len(prompts))]
    results = LLM(model, block_size=4, max_num_batched_tokens=16).generate(prompts, params)
    for prompt, p, out in zip(prompts, params, results):
        assert out.token_ids == model.generate(prompt, p).token_ids
