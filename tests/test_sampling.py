"""The sampler: each processor against Hugging Face's, the draw against the exact distribution, seeds, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tinyinfer.errors import TinyInferError
from tinyinfer.sampling import (
    Sampler,
    SamplingParams,
    apply_constraint,
    apply_logit_bias,
    apply_min_p,
    apply_presence_frequency_penalties,
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    draw,
    log_softmax,
    sequence_rngs,
    softmax,
)

from chi_square import assert_counts_fit

import torch  # noqa: E402 - dev dependencies: missing is a failure, not a skip
from transformers.generation import logits_process  # noqa: E402

VOCAB = 64


def random_logits(seed: int, vocab: int = VOCAB) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(vocab) * 3).astype(np.float32)


def tied_logits(seed: int, vocab: int = VOCAB) -> np.ndarray:
    """Logits with many exact ties (small integers)."""
    return np.random.default_rng(seed).integers(-3, 4, vocab).astype(np.float32)


def hf(processor, logits: np.ndarray, input_ids=(0,)) -> np.ndarray:
    """Run one HF processor on a batch of one row."""
    ids = torch.tensor([list(input_ids)], dtype=torch.long)
    return processor(ids, torch.from_numpy(logits.copy())[None, :])[0].numpy()


LOGIT_CASES = [random_logits(s) for s in range(4)] + [tied_logits(s) for s in range(4)]


# --- each processor equals HF's of the same name ---------------------------------------------------------------


@pytest.mark.parametrize("logits", LOGIT_CASES)
@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_matches_hf(logits, temperature):
    expected = hf(logits_process.TemperatureLogitsWarper(temperature), logits)
    np.testing.assert_allclose(apply_temperature(logits, temperature), expected, rtol=1e-6)


@pytest.mark.parametrize("logits", LOGIT_CASES)
@pytest.mark.parametrize("k", [1, 2, 5, VOCAB - 1, VOCAB, VOCAB + 10])
def test_top_k_matches_hf_including_ties_and_k_above_vocab(logits, k):
    expected = hf(logits_process.TopKLogitsWarper(k), logits)
    np.testing.assert_array_equal(apply_top_k(logits, k), expected)


@pytest.mark.exercise("6.2")
@pytest.mark.parametrize("logits", [random_logits(s) for s in range(8)])
@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.6, 0.9, 0.99, 1.0])
def test_top_p_matches_hf(logits, top_p):
    expected = hf(logits_process.TopPLogitsWarper(top_p), logits)
    np.testing.assert_array_equal(apply_top_p(logits, top_p), expected)


@pytest.mark.exercise("6.2")
@pytest.mark.parametrize("logits", [tied_logits(s) for s in range(8)])
@pytest.mark.parametrize("top_p", [0.2, 0.5, 0.8, 0.95])
def test_top_p_with_ties_keeps_what_hf_keeps(logits, top_p):
    """With ties at the edge of the nucleus HF keeps whichever tied ids its sort puts last (not specified);
    the kept *probabilities* must still be the same multiset."""
    expected = hf(logits_process.TopPLogitsWarper(top_p), logits)
    ours = apply_top_p(logits, top_p)
    assert np.isfinite(ours).sum() == np.isfinite(expected).sum()
    np.testing.assert_array_equal(np.sort(ours[np.isfinite(ours)]), np.sort(expected[np.isfinite(expected)]))


@pytest.mark.exercise("6.2")
def test_top_p_tie_at_the_edge_keeps_the_lowest_id():
    logits = np.log(np.array([0.1, 0.4, 0.1, 0.4], dtype=np.float32))
    assert np.isfinite(apply_top_p(logits, 0.85)).tolist() == [True, True, False, True]
    assert np.isfinite(apply_top_p(logits, 0.3)).tolist() == [False, True, False, False]


@pytest.mark.parametrize("logits", LOGIT_CASES)
@pytest.mark.parametrize("min_p", [0.0, 0.01, 0.1, 0.5, 1.0])
def test_min_p_matches_hf(logits, min_p):
    expected = hf(logits_process.MinPLogitsWarper(min_p), logits)
    np.testing.assert_array_equal(apply_min_p(logits, min_p), expected)


@pytest.mark.parametrize("logits", LOGIT_CASES)
@pytest.mark.parametrize("penalty", [0.5, 1.0, 1.3, 3.0])
def test_repetition_penalty_matches_hf(logits, penalty):
    seen = [3, 3, 7, 0, VOCAB - 1, 12, 7]  # repeats are penalised once
    expected = hf(logits_process.RepetitionPenaltyLogitsProcessor(penalty), logits, seen)
    np.testing.assert_array_equal(apply_repetition_penalty(logits, seen, penalty), expected)


def test_presence_and_frequency_penalties_follow_the_openai_formula():
    logits = random_logits(5)
    output = [4, 4, 4, 9, 1, 9]
    ours = apply_presence_frequency_penalties(logits, output, presence=0.7, frequency=-0.4)
    expected = logits.copy()
    for token_id in set(output):  # OpenAI: mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence
        expected[token_id] -= output.count(token_id) * -0.4 + 0.7
    np.testing.assert_allclose(ours, expected, rtol=1e-6)


def test_logit_bias_adds_to_the_listed_ids():
    logits = random_logits(6)
    out = apply_logit_bias(logits, {2: 100.0, 5: -100.0})
    assert out[2] == logits[2] + 100 and out[5] == logits[5] - 100
    np.testing.assert_array_equal(np.delete(out, [2, 5]), np.delete(logits, [2, 5]))
    assert Sampler(SamplingParams(temperature=0, logit_bias={17: 100})).sample(logits).token_id == 17


def test_softmax_and_log_softmax_match_torch():
    logits = random_logits(7).astype(np.float64)
    np.testing.assert_allclose(softmax(logits), torch.softmax(torch.from_numpy(logits), -1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(log_softmax(logits), torch.log_softmax(torch.from_numpy(logits), -1).numpy(), rtol=1e-12)


def test_the_whole_chain_equals_hf_warpers_in_hf_order():
    logits = random_logits(8)
    seen = [1, 2, 3, 3]
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, min_p=0.05, repetition_penalty=1.2)
    chain = [
        logits_process.RepetitionPenaltyLogitsProcessor(1.2),
        logits_process.TemperatureLogitsWarper(0.7),
        logits_process.TopKLogitsWarper(20),
        logits_process.TopPLogitsWarper(0.8),
        logits_process.MinPLogitsWarper(0.05),
    ]
    expected = logits
    for processor in chain:
        expected = hf(processor, expected, seen)
    np.testing.assert_allclose(Sampler(params, prompt_ids=seen).process(logits), expected, rtol=1e-6)


# --- the draw ---------------------------------------------------------------------------------------------------


@pytest.mark.exercise("6.1")
def test_draw_equals_numpy_choice_with_the_same_seed():
    probs = softmax(random_logits(9).astype(np.float64))
    for seed in range(50):
        assert draw(probs, np.random.default_rng(seed)) == np.random.default_rng(seed).choice(VOCAB, p=probs)


@pytest.mark.exercise("6.1")
def test_draw_never_picks_a_zero_probability_token():
    probs = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    rng = np.random.default_rng(0)
    assert {draw(probs, rng) for _ in range(500)} == {1, 3}


@pytest.mark.exercise("6.1")
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, seed=1),
        SamplingParams(temperature=0.7, top_k=5, seed=2),
        SamplingParams(temperature=1.3, top_p=0.8, seed=3),
        SamplingParams(temperature=1.0, min_p=0.1, top_k=7, seed=4),
    ],
)
def test_empirical_frequencies_match_the_exact_distribution(params):
    """Chi-square goodness of fit at significance 0.001 (deterministic seed), and nothing outside the support."""
    logits = np.log(np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.03, 0.02, 0.01]))
    sampler = Sampler(params)
    exact = sampler.probs(logits)
    draws = 20000
    counts = np.bincount([sampler.sample(logits).token_id for _ in range(draws)], minlength=len(logits))
    assert_counts_fit(counts, exact, "tokens outside top-k / top-p / min-p, or the draws,")


def test_exact_distribution_is_hf_chain_then_softmax():
    logits = random_logits(10)
    params = SamplingParams(temperature=0.9, top_k=10, top_p=0.7)
    expected = logits
    for processor in [
        logits_process.TemperatureLogitsWarper(0.9),
        logits_process.TopKLogitsWarper(10),
        logits_process.TopPLogitsWarper(0.7),
    ]:
        expected = hf(processor, expected)
    expected = torch.softmax(torch.from_numpy(expected).double(), -1).numpy()
    np.testing.assert_allclose(Sampler(params).probs(logits), expected, rtol=1e-5, atol=1e-12)


# --- greedy, seeds, independence ----------------------------------------------------------------------------------


def test_temperature_zero_is_argmax_with_ties_to_the_lowest_id():
    logits = np.array([0.5, 2.0, -1.0, 2.0, 2.0], dtype=np.float32)
    assert Sampler(SamplingParams(temperature=0)).sample(logits).token_id == 1
    for seed in range(4):
        logits = random_logits(seed)
        assert Sampler(SamplingParams(temperature=0, seed=seed)).sample(logits).token_id == int(np.argmax(logits))


def _run(sampler: Sampler, steps: int = 40) -> list[int]:
    return [sampler.sample(random_logits(100 + t)).token_id for t in range(steps)]


def test_same_seed_gives_same_tokens_and_neighbours_do_not_matter():
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=1234)
    alone = _run(Sampler(params))
    assert alone == _run(Sampler(params))
    # the same request sampled beside another one, steps interleaved, gives the same tokens
    mine, neighbour = Sampler(params), Sampler(SamplingParams(temperature=1.5, seed=99))
    interleaved = []
    for t in range(40):
        neighbour.sample(random_logits(500 + t))
        interleaved.append(mine.sample(random_logits(100 + t)).token_id)
    assert interleaved == alone
    assert _run(Sampler(SamplingParams(temperature=1.0, top_p=0.95, seed=1235))) != alone


def test_n_samples_get_independent_generators_and_sample_zero_is_the_single_run():
    params = SamplingParams(temperature=1.0, seed=5)
    first, second = (Sampler(params, rng=rng) for rng in sequence_rngs(5, 2))
    assert _run(first) == _run(Sampler(params))
    assert _run(second) != _run(Sampler(params))


# --- constraints and penalties inside the sampler -----------------------------------------------------------------


class EvenTokensOnly:
    """A toy constraint: only even ids are allowed; records what it was advanced with."""

    def __init__(self, vocab):
        self.vocab, self.seen = vocab, []

    def allowed_mask(self):
        return np.arange(self.vocab) % 2 == 0

    def advance(self, token_id):
        self.seen.append(token_id)


def test_constraint_masks_tokens_and_is_advanced():
    constraint = EvenTokensOnly(VOCAB)
    sampler = Sampler(SamplingParams(temperature=1.5, seed=0), constraint=constraint)
    tokens = _run(sampler)
    assert all(t % 2 == 0 for t in tokens) and constraint.seen == tokens
    assert np.isneginf(apply_constraint(random_logits(0), constraint)[1::2]).all()


def test_constraint_that_allows_nothing_is_a_clear_error():
    class Nothing:
        def allowed_mask(self):
            return np.zeros(VOCAB, dtype=bool)

    with pytest.raises(TinyInferError, match="allows no token"):
        apply_constraint(random_logits(0), Nothing())


def test_repetition_penalty_counts_prompt_and_output_but_openai_penalties_only_output():
    logits = np.zeros(8, dtype=np.float32) + 1.0
    sampler = Sampler(SamplingParams(temperature=0, repetition_penalty=2.0, presence_penalty=1.0), prompt_ids=[0])
    sampler.output_ids = [1]
    processed = sampler.process(logits)
    assert processed[0] == 0.5 and processed[1] == 0.5 - 1.0 and processed[2] == 1.0


def test_logprobs_are_the_raw_distribution_with_top_n():
    logits = random_logits(11)
    raw = torch.log_softmax(torch.from_numpy(logits).double(), -1).numpy()
    choice = Sampler(SamplingParams(temperature=0.5, top_k=3, logprobs=4, seed=0)).sample(logits)
    assert choice.logprob == pytest.approx(raw[choice.token_id])
    assert [i for i, _ in choice.top_logprobs] == list(np.argsort(-raw)[:4])
    assert Sampler(SamplingParams(seed=0)).sample(logits).logprob is None


# --- validation ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"min_p": -0.1}, "min_p"),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": ["ok", ""]}, "stop"),
        ({"stop": 5}, "stop"),
        ({"logprobs": -1}, "logprobs"),
        ({"n": 0}, "n"),
        ({"seed": -5}, "seed"),
        ({"logit_bias": {"x": 1.0}}, "logit_bias"),
        ({"logit_bias": {3: 101.0}}, "logit_bias"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
    ],
)
def test_bad_values_name_the_field_and_the_range(kwargs, field):
    with pytest.raises(TinyInferError, match=field):
        SamplingParams(**kwargs)


def test_edge_values_are_accepted():
    SamplingParams(temperature=0, top_p=1.0, min_p=1.0, top_k=0, presence_penalty=-2, frequency_penalty=2, logprobs=0)
    assert SamplingParams(stop="###").stop == ["###"]
    assert SamplingParams(logit_bias={"5": -100}).logit_bias == {5: -100.0}
    none = SamplingParams(stop=None, stop_token_ids=None, logit_bias=None)
    assert (none.stop, none.stop_token_ids, none.logit_bias) == ([], [], {})


def test_validate_for_rejects_ids_outside_the_vocabulary():
    SamplingParams(logit_bias={99: 1.0}, stop_token_ids=[0]).validate_for(100)
    with pytest.raises(TinyInferError, match=r"logit_bias.*100.*\[0, 99\]"):
        SamplingParams(logit_bias={100: 1.0}).validate_for(100)
    with pytest.raises(TinyInferError, match="stop_token_ids"):
        SamplingParams(stop_token_ids=[100]).validate_for(100)


def test_defaults_from_generation_config():
    sampled = SamplingParams.from_generation_config(
        {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "max_new_tokens": 64, "eos_token_id": [1, 2]}
    )
    assert (sampled.temperature, sampled.top_p, sampled.top_k, sampled.max_tokens) == (0.6, 0.9, 0, 64)
    assert SamplingParams.from_generation_config({"temperature": 0.6}).temperature == 0  # do_sample absent: greedy
    assert SamplingParams.from_generation_config(None).temperature == 0
    overridden = SamplingParams.from_generation_config({"do_sample": True, "top_k": 40}, top_k=None, temperature=0.2)
    assert (overridden.top_k, overridden.temperature) == (40, 0.2)
    with pytest.raises(TinyInferError, match="unknown sampling parameter"):
        SamplingParams.from_generation_config({}, topp=0.5)
    with pytest.raises(TinyInferError, match="top_p"):
        SamplingParams.from_generation_config({"do_sample": True, "top_p": 0})


# --- the same processors on a GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_processors_on_cupy_equal_numpy():
    from tinyinfer.backend import get_xp, to_numpy

    cp = get_xp("cuda")
    logits = random_logits(12)
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, min_p=0.02, repetition_penalty=1.3,
                            presence_penalty=0.5, frequency_penalty=0.3, logit_bias={3: 2.0}, logprobs=3, seed=7)
    on_cpu, on_gpu = Sampler(params, prompt_ids=[1, 2]), Sampler(params, prompt_ids=[1, 2])
    on_cpu.output_ids, on_gpu.output_ids = [5, 5, 9], [5, 5, 9]
    np.testing.assert_allclose(to_numpy(on_gpu.process(cp.asarray(logits))), on_cpu.process(logits), rtol=1e-6)
    for _ in range(20):
        a, b = on_cpu.sample(logits), on_gpu.sample(cp.asarray(logits))
        assert a.token_id == b.token_id and a.logprob == pytest.approx(b.logprob)
        assert [i for i, _ in a.top_logprobs] == [i for i, _ in b.top_logprobs]
