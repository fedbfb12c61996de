"""Sampling a batch of rows at once (`sample_batch`, what the engine runs each step) picks, row for row, the
very tokens each row's sampler picks alone, and reports the same logprobs: every row keeps its controls and
its own seeded generator."""

from __future__ import annotations

import numpy as np
import pytest

from tinyinfer.sampling import Sampler, SamplingParams, sample_batch, sequence_rngs


class EvenTokensOnly:
    """A constraint allowing the even token ids (any grammar state would do: it belongs to its row)."""

    def __init__(self, vocab: int):
        self.mask = np.arange(vocab) % 2 == 0

    def allowed_mask(self):
        return self.mask

    def advance(self, token_id: int) -> None:
        assert token_id % 2 == 0


CONTROLS = [
    dict(temperature=0),
    dict(temperature=0.8),
    dict(temperature=1.3, top_k=20),
    dict(temperature=0.7, top_p=0.9),
    dict(temperature=1.0, min_p=0.05),
    dict(temperature=0.9, top_k=50, top_p=0.8, min_p=0.01),
    dict(temperature=0, repetition_penalty=1.3),
    dict(temperature=0.8, presence_penalty=0.5, frequency_penalty=0.3, logit_bias={3: 4.0}),
    dict(temperature=0.6, logprobs=3),
    dict(temperature=0, logprobs=2),
]


def samplers(vocab: int, constraint_rows=(), vocab_limit=None) -> list[Sampler]:
    """One sampler per entry of CONTROLS (twice, other seeds), each with its own prompt and generator."""
    out = []
    for i, controls in enumerate(CONTROLS * 2):
        params = SamplingParams(seed=i, max_tokens=100, **controls)
        constraint = EvenTokensOnly(vocab) if i in constraint_rows else None
        out.append(Sampler(params, [i, 2 * i + 1], constraint, sequence_rngs(i, 1)[0], vocab_limit))
    return out


@pytest.mark.parametrize("vocab, dtype", [(49152, np.float32), (1001, np.float32), (257, np.float64)])
def test_a_batch_picks_each_row_s_solo_tokens_and_logprobs(vocab, dtype):
    rng = np.random.default_rng(vocab)
    batch = samplers(vocab, constraint_rows=(1, 12), vocab_limit=vocab - 7)
    alone = samplers(vocab, constraint_rows=(1, 12), vocab_limit=vocab - 7)
    for step in range(12):
        logits = (rng.standard_normal((len(batch), vocab)) * 3).astype(dtype)  # [B, V]
        together = sample_batch(batch, logits)
        solo = [s.sample(row) for s, row in zip(alone, logits)]
        assert [c.token_id for c in together] == [c.token_id for c in solo], step
        assert [(c.logprob, c.top_logprobs) for c in together] == [(c.logprob, c.top_logprobs) for c in solo]
    assert [s.output_ids for s in batch] == [s.output_ids for s in alone]  # recorded for the penalties, too
    drawn = [s.output_ids for s, controls in zip(batch, CONTROLS * 2) if controls["temperature"] > 0]
    assert len({tuple(ids) for ids in drawn}) == len(drawn)  # the sampled rows drew apart: their own generators


def test_a_batch_of_one_kind_and_the_order_of_rows_change_nothing():
    vocab, rng = 3000, np.random.default_rng(5)
    logits = rng.standard_normal((6, vocab)).astype(np.float32)
    params = [SamplingParams(temperature=0.8, seed=s) for s in range(6)]
    forward = sample_batch([Sampler(p) for p in params], logits)
    backward = sample_batch([Sampler(p) for p in params[::-1]], logits[::-1])
    assert [c.token_id for c in forward] == [c.token_id for c in backward][::-1]
    assert [c.token_id for c in forward] == [Sampler(p).sample(row).token_id for p, row in zip(params, logits)]
    assert sample_batch([], logits[:0]) == []
