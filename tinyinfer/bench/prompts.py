"""Random prompts for the benchmarks: token ids drawn from the vocabulary, so no tokenizer or text is needed."""

from __future__ import annotations

import numpy as np


def ordinary_tokens(model) -> np.ndarray:
    """Token ids a random prompt may use: the vocabulary minus BOS and EOS."""
    special = set(model.config.eos_token_ids) | {model.config.bos_token_id}
    return np.array([i for i in range(model.config.vocab_size) if i not in special])


def random_prompt(model, rng: np.random.Generator, n: int) -> list[int]:
    """n token ids: BOS (when the model has one), then ordinary tokens drawn at random."""
    bos = [] if model.config.bos_token_id is None else [model.config.bos_token_id]
    return bos + rng.choice(ordinary_tokens(model), size=n - len(bos)).tolist()
