"""Speculative decoding: exact at temperature 0 (the target's own greedy tokens), exact in distribution when
sampling (the acceptance rule), and clear errors for drafts that cannot serve."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

import tinyinfer
from tinyinfer.errors import TinyInferError
from tinyinfer.model import SeqChunk
from tinyinfer.sampling import Sampler, SamplingParams
from tinyinfer.speculative import GuessBudget, PromptLookup, SpeculationStats, lookup, residual, verify


@pytest.fixture(scope="module")
def target():
    return tinyinfer.load("shakespeare")


@pytest.fixture(scope="module")
def draft():
    return tinyinfer.load("shakespeare-draft")


@pytest.fixture(scope="module")
def bad_draft():
    """The draft with its layers' weights scrambled: it guesses badly, so most guesses are rejected."""
    scrambled = tinyinfer.load("shakespeare-draft")
    rng = np.random.default_rng(0)
    for layer in scrambled.params["layers"]:
        for group in (layer, layer["mlp"]):
            for name, w in group.items():
                if isinstance(w, np.ndarray) and w.ndim == 2:
                    group[name] = rng.permutation(w.ravel()).reshape(w.shape).astype(w.dtype)
    return scrambled


def random_distribution(rng, vocab: int, zeros: int = 0) -> np.ndarray:
    p = rng.random(vocab) ** 3
    p[rng.choice(vocab, zeros, replace=False)] = 0.0
    return p / p.sum()


@pytest.mark.exercise("11.1")
def test_guess_kept_or_residual_draw_adds_up_to_the_target_distribution():
    """One position: P(y) = P(y guessed and kept) + P(some guess rejected) * residual(y) must be p(y) exactly."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        vocab = int(rng.integers(2, 40))
        p, q = random_distribution(rng, vocab, int(rng.integers(0, vocab - 1))), random_distribution(rng, vocab)
        kept = np.minimum(q, p)  # q(y) * min(1, p(y) / q(y))
        rejected = 1.0 - kept.sum()
        np.testing.assert_allclose(kept + rejected * residual(p, q), p, atol=1e-12)
    same = random_distribution(rng, 5)
    np.testing.assert_array_equal(residual(same, same), same)  # nothing beyond q: rounding falls back to p


@pytest.mark.exercise("11.2")
def test_verify_yields_tokens_distributed_as_the_target():
    """Many rounds of `verify` on fixed distributions: the first token follows p[0], and after a kept first
    guess the second token follows p[1] (counts within 5 standard deviations)."""
    rng = np.random.default_rng(1)
    vocab, rounds = 5, 20000
    p = np.stack([random_distribution(rng, vocab, 1) for _ in range(3)])  # [k+1, V]
    q = np.stack([random_distribution(rng, vocab) for _ in range(2)])  # [k, V]
    first, second = np.zeros(vocab), np.zeros(vocab)
    draws = np.random.default_rng(2)
    for _ in range(rounds):
        guesses = [int(draws.choice(vocab, p=q[0])), int(draws.choice(vocab, p=q[1]))]
        out = verify(p, q, guesses, draws)
        assert 1 <= len(out) <= 3 and out[:-1] == guesses[:len(out) - 1]
        first[out[0]] += 1
        if out[0] == guesses[0]:
            second[out[1]] += 1
    for counts, expected in ((first, p[0]), (second, p[1])):
        n = counts.sum()
        sigma = np.sqrt(n * expected * (1 - expected)) + 1e-9
        assert np.all(np.abs(counts - n * expected) < 5 * sigma + 1), (counts / n, expected)
        assert np.all(counts[expected == 0] == 0)  # a token the target never picks never comes out


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_with_a_draft_is_the_target_greedy_token_for_token(target, draft, bad_draft, k):
    plain = target.generate("ROMEO:", max_tokens=60, temperature=0, ignore_eos=True)
    for helper in (draft, bad_draft):
        fast = target.generate("ROMEO:", max_tokens=60, temperature=0, ignore_eos=True, draft=helper,
                               num_speculative_tokens=k)
        assert fast.token_ids == plain.token_ids
        assert fast.text == plain.text
        s = fast.speculation
        assert s.tokens == 60 and s.accepted <= s.proposed
    good = target.generate("ROMEO:", max_tokens=60, temperature=0, ignore_eos=True, draft=draft, num_speculative_tokens=k)
    bad = target.generate("ROMEO:", max_tokens=60, temperature=0, ignore_eos=True, draft=bad_draft, num_speculative_tokens=k)
    assert good.speculation.acceptance_rate > bad.speculation.acceptance_rate  # a trained draft guesses better
    assert good.speculation.target_steps < 60 and bad.speculation.proposed > 0
    assert bad.speculation.proposed < 20  # its rejected guesses made the budget back off to plain steps
    fixed = target.generate("ROMEO:", max_tokens=60, temperature=0, ignore_eos=True, draft=bad_draft,
                            num_speculative_tokens=k, adaptive_speculation=False)  # k guesses every round
    assert fixed.token_ids == plain.token_ids and fixed.speculation.proposed > 2 * bad.speculation.proposed


def test_stop_strings_eos_and_logprobs_behave_as_without_a_draft(target, draft):
    kwargs = dict(max_tokens=80, temperature=0, stop=["\n\n"], logprobs=2)
    plain = target.generate("JULIET:", **kwargs)
    fast = target.generate("JULIET:", **kwargs, draft=draft, num_speculative_tokens=4)
    assert (fast.text, fast.token_ids, fast.finish_reason) == (plain.text, plain.token_ids, plain.finish_reason)
    for a, b in zip(plain.logprobs, fast.logprobs):  # the target's own logprobs, from its verify pass
        assert a.token_id == b.token_id and a.logprob == pytest.approx(b.logprob, abs=1e-4)


def test_a_draft_equal_to_the_target_keeps_almost_every_guess_when_sampling(target):
    twin = tinyinfer.load("shakespeare")
    result = target.generate("ROMEO:", max_tokens=60, temperature=1.0, seed=3, ignore_eos=True, draft=twin,
                             num_speculative_tokens=4)
    assert result.speculation.acceptance_rate > 0.95  # p and q differ only by rounding
    again = target.generate("ROMEO:", max_tokens=60, temperature=1.0, seed=3, ignore_eos=True, draft=twin,
                            num_speculative_tokens=4)
    assert again.token_ids == result.token_ids  # seeded: reproducible


def test_sampling_with_a_draft_matches_the_target_statistics(target, draft):
    """Over many seeds, the first sampled token (after the prompt) is distributed as the target's own."""
    probs = target.generate("ROMEO:", max_tokens=1, temperature=1.0, seed=0, logprobs=5).logprobs[0].top_logprobs
    top = {token: np.exp(lp) for token, lp in probs}
    counts = dict.fromkeys(top, 0)
    n = 300
    for seed in range(n):
        token = target.generate("ROMEO:", max_tokens=3, temperature=1.0, seed=seed, ignore_eos=True, draft=draft,
                                num_speculative_tokens=2).token_ids[0]
        if token in counts:
            counts[token] += 1
    for token, p in top.items():
        assert abs(counts[token] - n * p) < 5 * np.sqrt(n * p * (1 - p)) + 1, (token, counts[token], n * p)


REPEATING = "ROMEO:\nO, what's the matter?\n\nJULIET:\nO, what's the matter?\n\nROMEO:\nO, what"


def test_lookup_takes_the_longest_suffix_at_its_latest_occurrence():
    tokens = np.array([7, 1, 2, 8, 3, 2, 9, 4, 1, 2])
    assert lookup(tokens, 3, 1, 3) == [8, 3, 2]  # "1 2" (two tokens) beats the later "2" alone
    assert lookup(tokens, 3, 1, 1) == [9, 4, 1]  # "2" alone: its latest earlier occurrence, at 5
    assert lookup(tokens, 3, 3, 3) == []  # "4 1 2" never occurred before
    assert lookup(np.array([5, 5, 5]), 4, 1, 2) == [5]  # overlapping occurrences; no more text than there is
    assert lookup(np.array([5]), 4, 1, 3) == []


@pytest.mark.parametrize("k, longest", [(1, 1), (3, 3), (6, 2)])
def test_greedy_with_prompt_lookup_is_the_target_greedy_token_for_token(target, k, longest):
    plain = target.generate(REPEATING, max_tokens=80, temperature=0, ignore_eos=True)
    fast = target.generate(REPEATING, max_tokens=80, temperature=0, ignore_eos=True, num_speculative_tokens=k,
                           draft=PromptLookup(prompt_lookup_max=longest))
    assert (fast.token_ids, fast.text) == (plain.token_ids, plain.text)
    s = fast.speculation
    assert s.tokens == 80 and 0 < s.accepted < s.proposed and s.target_steps < 80  # guesses made, kept, rejected
    assert target.generate(REPEATING, max_tokens=80, temperature=0, ignore_eos=True, draft="ngram").token_ids == plain.token_ids


def exact_distribution(model, params, prompt_ids, output_ids) -> np.ndarray:
    """[V] what `model` samples after prompt + output under `params`, from a forward pass of its own."""
    sampler = Sampler(params, prompt_ids)
    sampler.output_ids = list(output_ids)
    ids = prompt_ids + list(output_ids)
    logits = model.forward([SeqChunk(0, 0, ids)], model.new_cache(1, len(ids)))  # [1, V]
    return sampler.probs(np.asarray(logits[0]))


def test_sampling_with_prompt_lookup_gives_the_target_joint_distribution(target):
    """The first three sampled tokens (top-k 3, so 27 outcomes) over many seeds: each outcome's count is within
    5 standard deviations of its exact probability, computed from the target alone. Rounds 2 and 3 guess from
    the repeating prompt, so kept guesses, rejections and residual draws all take part."""
    params = SamplingParams(temperature=1.0, top_k=3, max_tokens=4, ignore_eos=True)
    prompt = target.tokenizer.encode(REPEATING)
    exact = {}
    p1 = exact_distribution(target, params, prompt, [])
    for a in np.flatnonzero(p1):
        p2 = exact_distribution(target, params, prompt, [a])
        for b in np.flatnonzero(p2):
            p3 = exact_distribution(target, params, prompt, [a, b])
            for c in np.flatnonzero(p3):
                exact[(int(a), int(b), int(c))] = p1[a] * p2[b] * p3[c]
    n, counts, accepted, proposed = 800, dict.fromkeys(exact, 0), 0, 0
    for seed in range(n):
        result = target.generate(REPEATING, temperature=1.0, top_k=3, max_tokens=4, ignore_eos=True, seed=seed,
                                 draft="ngram", num_speculative_tokens=2)
        counts[tuple(result.token_ids[:3])] += 1  # a KeyError would be an outcome the target never samples
        accepted, proposed = accepted + result.speculation.accepted, proposed + result.speculation.proposed
    assert 0 < accepted < proposed
    for outcome, p in exact.items():
        assert abs(counts[outcome] - n * p) < 5 * np.sqrt(n * p * (1 - p)) + 1, (outcome, counts[outcome], n * p)


def test_guess_budget_backs_off_after_misses_and_returns_to_k_when_guesses_are_kept():
    budget = GuessBudget(6)
    assert budget.next() == 6
    budget.update(6, 2)  # two kept: next, one more than that
    assert budget.next() == 3
    budget.update(3, 3)  # all kept: back to k
    assert budget.next() == 6
    plans = []
    for _ in range(40):  # nothing is ever kept: plain steps in between, 1, 2, 4, ... at most MAX_WAIT of them
        n = budget.next()
        plans.append(n)
        budget.update(n, 0)
    guessing = [i for i, n in enumerate(plans) if n]
    assert plans[0] == 6 and all(plans[i] == 1 for i in guessing[1:])
    assert np.diff(guessing).tolist()[:5] == [2, 3, 5, 9, 17] and max(np.diff(guessing)) == GuessBudget.MAX_WAIT + 1
    while not (n := budget.next()):  # the rest of the back-off: plain steps
        pass
    budget.update(n, 1)  # a kept guess ends it
    assert n == 1 and [budget.next(), budget.next()] == [6, 6]


def test_stats_compare_guessing_rounds_with_the_plain_step():
    s = SpeculationStats()
    s.count(0, 1, 0.010)  # a round without guesses: a plain step of 10 ms a token
    s.count(0, 1, 0.012)
    assert s.speed_up is None and not s.slower_than_plain  # no guessing round yet
    s.count(4, 3, 0.024)  # 3 tokens in 24 ms: 8 ms a token
    assert (s.proposed, s.accepted, s.target_steps, s.tokens, s.guessing_rounds) == (4, 2, 3, 5, 1)
    assert s.speed_up == pytest.approx(1.25) and not s.slower_than_plain
    s.count(4, 1, 0.020)  # 4 tokens in 44 ms: 11 ms a token, slower than the 10 ms plain step
    assert s.speed_up == pytest.approx(10 / 11) and s.slower_than_plain


def test_bad_drafts_and_settings_are_clear_errors(target, draft):
    with pytest.raises(TinyInferError, match="num_speculative_tokens"):
        target.generate("ROMEO:", max_tokens=5, draft=draft, num_speculative_tokens=0)
    with pytest.raises(TinyInferError, match="constraint"):
        target.generate("ROMEO:", max_tokens=5, draft=draft, constraint=object())
    other = copy.copy(draft)
    other.config = dataclasses.replace(draft.config, vocab_size=1000)
    with pytest.raises(TinyInferError, match="vocabulary of 1000 tokens"):
        target.generate("ROMEO:", max_tokens=5, draft=other)
    short = copy.copy(draft)
    short.config = dataclasses.replace(draft.config, max_seq_len=16)
    with pytest.raises(TinyInferError, match="context window of 16"):
        target.generate("ROMEO:", max_tokens=30, draft=short)
    with pytest.raises(TinyInferError, match="not str"):
        target.generate("ROMEO:", max_tokens=5, draft="eagle")
    with pytest.raises(TinyInferError, match="prompt_lookup_min=2, prompt_lookup_max=1"):
        PromptLookup(prompt_lookup_max=1, prompt_lookup_min=2)
    with pytest.raises(TinyInferError, match="constraint"):
        target.generate("ROMEO:", max_tokens=5, draft="ngram", constraint=object())
    with pytest.raises(TinyInferError, match="adaptive_speculation='no' is invalid"):
        target.generate("ROMEO:", max_tokens=5, draft="ngram", adaptive_speculation="no")


def test_cli_generate_with_a_draft_prints_the_same_text_and_the_guess_statistics(capsys):
    from tinyinfer.cli import main  # noqa: PLC0415

    args = ["generate", "ROMEO:", "--max-tokens", "30", "--temperature", "0", "--ignore-eos"]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert main(args + ["--draft", "shakespeare-draft", "--speculate", "3"]) == 0
    out = capsys.readouterr()
    assert out.out == plain and "guesses kept" in out.err
    assert main(args + ["--speculate", "3"]) == 1
    assert "--speculate needs --draft" in capsys.readouterr().err
    assert main(args + ["--speculative-method", "ngram", "--speculate", "3", "--prompt-lookup-max", "2"]) == 0
    out = capsys.readouterr()
    assert out.out == plain and "guesses kept" in out.err
    assert main(args + ["--speculative-method", "ngram", "--draft", "shakespeare-draft"]) == 1
    assert "drop --draft" in capsys.readouterr().err
    assert main(args + ["--speculative-method", "ngram", "--prompt-lookup-max", "0"]) == 1
    assert "prompt_lookup_max=0" in capsys.readouterr().err


@pytest.mark.parametrize("speed_up, warnings", [(0.5, 1), (1.5, 0)])
def test_cli_warns_once_when_speculation_measured_slower_than_plain_decoding(capsys, monkeypatch, speed_up, warnings):
    from tinyinfer.cli import main  # noqa: PLC0415

    monkeypatch.setattr(SpeculationStats, "speed_up", property(lambda self: speed_up))  # the timing, fixed
    args = ["generate", "ROMEO:", "--max-tokens", "10", "--draft", "shakespeare-draft", "-n", "2", "--seed", "1"]
    assert main(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert sum(line.startswith("warning: speculation ran at 0.50x the speed of plain decoding") for line in err) == warnings


def test_bench_speculative_repeat_on_the_real_model_keeps_most_prompt_lookup_guesses(capsys):
    """SmolLM2-135M-Instruct asked to repeat the bench's passage copies it, so prompt lookup's guesses are
    mostly kept, and the tokens are the plain greedy ones (the row ends "yes")."""
    from tinyinfer.catalogue import pulled_path  # noqa: PLC0415
    from tinyinfer.cli import main  # noqa: PLC0415

    if pulled_path("smollm2-135m-instruct") is None:
        pytest.skip("the real model is not in the model cache: `python -m tinyinfer pull smollm2-135m-instruct`")
    assert main(["bench", "speculative", "--model", "smollm2-135m-instruct", "--method", "ngram", "--task",
                 "repeat", "-k", "8", "--tokens", "40", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "task repeat" in out
    row = next(line for line in out.splitlines() if line.startswith("ngram k = 8")).split()
    accepted, tokens_per_step = float(row[7].rstrip("%")) / 100, float(row[8])  # after "ngram k = 8", 3 columns
    assert row[-1] == "yes" and accepted > 0.8 and tokens_per_step > 4


def test_bench_speculative_compares_both_methods_with_the_same_tokens(capsys):
    from tinyinfer.cli import main  # noqa: PLC0415

    assert main(["bench", "speculative", "--task", "repeat", "--tokens", "12", "--rounds", "1", "-k", "2"]) == 0
    rows = {line.split("  ")[0].strip(): line for line in capsys.readouterr().out.splitlines()}
    assert set(rows) >= {"no speculation", "draft_model k = 2", "ngram k = 2"}
    assert rows["draft_model k = 2"].endswith("yes") and rows["ngram k = 2"].endswith("yes")  # greedy: same tokens
