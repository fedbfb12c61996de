"""Speculative decoding: a small draft model guesses k tokens, the big target model checks all k in one
forward pass, and every guess it agrees with is a token gained for the price of a fraction of a step.

A decode step of one sequence is bound by reading the weights (chapter 02), not by arithmetic: the target
can score k+1 positions in about the time it scores one. So each round:

    draft:   x1..xk, each drawn from the draft's distribution q      (k steps of the small model)
    verify:  the target on [last token, x1..xk] -> p1..p(k+1)         (one step of the big model)
    accept:  x_i is kept with probability min(1, p_i(x_i) / q_i(x_i)), in order, until one is rejected;
             the rejected position draws instead from the residual max(0, p_i - q_i), renormalised;
             all k kept: one bonus token from p(k+1)

and the round yields 1..k+1 tokens. The rule is exact (Leviathan et al. 2023; Chen et al. 2023): each token
is distributed exactly as if drawn from the target alone, whatever the draft. A good draft only makes it
faster. Sketch of why, for one position: the token is y either because y was guessed and kept,
q(y) min(1, p(y)/q(y)) = min(q(y), p(y)), or because some guess was rejected, probability
sum_x (q(x) - min(q(x), p(x))) = sum_x max(0, q(x) - p(x)) = sum_x max(0, p(x) - q(x)) = Z, and then y was
drawn from max(0, p - q) / Z: together min(q(y), p(y)) + max(0, p(y) - q(y)) = p(y).

At temperature 0 both distributions are one-hot (the argmax): a guess is kept exactly when it is the
target's argmax, and a rejection takes the target's argmax, so the output is greedy decoding of the target,
token for token.

Rejected guesses leave keys and values in both caches; nothing is copied back, since the caches are
written by position: the next round simply writes over them.

    >>> target, draft = tinyinfer.load("shakespeare"), tinyinfer.load("shakespeare-draft")   # doctest: +SKIP
    >>> target.generate("ROMEO:", draft=draft, num_speculative_tokens=4).speculation          # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from tinyinfer.backend import to_numpy
from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.model import SeqChunk
from tinyinfer.sampling import Sampler, TokenChoice, draw, greedy


@dataclass
class SpeculationStats:
    """How well the guesses went: the acceptance rate, tokens gained per step of the target, and whether the
    guessing rounds were slower per token than plain decoding (timed in the same run)."""

    proposed: int = 0  # guesses checked by the target
    accepted: int = 0  # of which the target kept
    target_steps: int = 0  # forward passes of the target after the prompt (one per round)
    plain_step_s: float = float("inf")  # the fastest round without guesses: plain decoding's time per token
    guessing_s: float = 0.0  # time of the rounds with guesses, guessing and checking together
    guessing_tokens: int = 0  # tokens those rounds produced
    guessing_rounds: int = 0  # rounds that made guesses (the others were plain steps)

    def count(self, proposed: int, produced: int, seconds: float) -> None:
        """Record one round: `proposed` guesses, `produced` tokens (the kept guesses and one more)."""
        self.proposed += proposed
        self.accepted += produced - 1
        self.target_steps += 1
        if proposed:
            self.guessing_s += seconds
            self.guessing_tokens += produced
            self.guessing_rounds += 1
        else:
            self.plain_step_s = min(self.plain_step_s, seconds)

    @property
    def tokens(self) -> int:
        """Tokens produced: each round yields its kept guesses and one token of the target's."""
        return self.accepted + self.target_steps

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_target_step(self) -> float:
        return self.tokens / self.target_steps if self.target_steps else 0.0

    @property
    def speed_up(self) -> float | None:
        """Plain decoding's time per token over the guessing rounds' (None until both were timed)."""
        if not self.guessing_tokens or self.plain_step_s == float("inf"):
            return None
        return self.plain_step_s / (self.guessing_s / self.guessing_tokens)

    @property
    def slower_than_plain(self) -> bool:
        return self.speed_up is not None and self.speed_up < 1


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Where to draw after the target rejects a guess: max(0, p - q), renormalised.  [V], [V] -> [V]

    It holds the probability the target gives beyond what the draft already proposed. When p equals q there
    is nothing left (and no guess can be rejected); rounding can still reject by a hair, so then p is used.

    >>> residual(np.array([0.5, 0.5, 0.0]), np.array([0.75, 0.0, 0.25])).tolist()
    [0.0, 1.0, 0.0]
    """
    # BEGIN EXERCISE 11.1: the residual distribution
    extra = np.maximum(p - q, 0.0)  # [V]
    total = extra.sum()
    return extra / total if total > 0 else p
    # END EXERCISE 11.1


def verify(p: np.ndarray, q: np.ndarray, guesses: list[int], rng: np.random.Generator) -> list[int]:
    """One round's tokens: the guesses the target keeps, in order, then one token drawn from the target.

    p: [k+1, V] the target's distributions after the last token and after each guess; q: [k, V] the draft's
    distributions the guesses were drawn from; guesses: [k]. Returns 1..k+1 tokens.

    >>> p = np.array([[0.0, 1.0], [1.0, 0.0]]); q = np.array([[0.0, 1.0]])   # the target agrees with guess 1
    >>> verify(p, q, [1], np.random.default_rng(0))                          # kept, then the bonus from p[1]
    [1, 0]
    """
    # BEGIN EXERCISE 11.2: accept each guess with probability min(1, p/q); at the first rejection, draw from the residual
    for i, x in enumerate(guesses):
        if rng.random() >= p[i, x] / q[i, x]:  # q[i, x] > 0: x was drawn from q[i]
            return guesses[:i] + [draw(residual(p[i], q[i]), rng)]
    return guesses + [draw(p[len(guesses)], rng)]  # every guess kept: a bonus token from the last position
    # END EXERCISE 11.2


def distribution(sampler: Sampler, logits, guessed: list[int]) -> np.ndarray:
    """The distribution `sampler` draws the next token from (one-hot at the argmax when greedy), as if the
    `guessed` tokens had already been generated (repetition penalties count them).  [V] -> [V] float64"""
    kept = len(sampler.output_ids)
    sampler.output_ids.extend(guessed)
    try:
        if sampler.params.greedy:
            one_hot = np.zeros(logits.shape[-1])
            one_hot[greedy(sampler.process(logits))] = 1.0
            return one_hot
        return sampler.probs(logits)
    finally:
        del sampler.output_ids[kept:]


def check_draft(target, draft, constraint, lora, n_tokens: int, k) -> None:
    """The draft must speak the target's vocabulary and hold the whole text; guesses cannot walk a grammar."""
    if lora is not None:
        raise TinyInferError("speculative decoding with a LoRA adapter is not supported (the draft model has no "
                             "adapter): drop the draft, or merge the adapter into the model first")
    if constraint is not None:
        raise TinyInferError("speculative decoding does not support a constraint (grammar, JSON schema): drop --draft")
    if not is_integer_at_least(k):
        raise TinyInferError(f"num_speculative_tokens={k!r} (--speculate) is invalid: give an integer >= 1")
    if draft == "ngram" or isinstance(draft, PromptLookup):
        return
    if not isinstance(draft, type(target)):
        raise TinyInferError(f"draft must be a Model like the one it helps, \"ngram\" or a PromptLookup, not "
                             f"{type(draft).__name__}: load it first, e.g. draft=tinyinfer.load('shakespeare-draft')")
    if draft.config.vocab_size != target.config.vocab_size:
        raise TinyInferError(
            f"the draft model has a vocabulary of {draft.config.vocab_size} tokens and the target of "
            f"{target.config.vocab_size}: speculative decoding needs a draft with the target's tokenizer"
        )
    if target.tokenizer is not None and draft.tokenizer is not None and \
            target.tokenizer.vocab_size != draft.tokenizer.vocab_size:
        raise TinyInferError("the draft's tokenizer differs from the target's: use a draft trained with the same tokenizer")
    if n_tokens > draft.config.max_seq_len:
        raise TinyInferError(f"prompt + max_tokens = {n_tokens} tokens exceeds the draft's context window of "
                             f"{draft.config.max_seq_len}: lower max_tokens or use a draft with a longer context")


def proposer(target, draft, n_tokens: int):
    """What makes the guesses: a DraftModel around a model, or prompt lookup ("ngram" or a PromptLookup)."""
    if draft == "ngram":
        return PromptLookup(vocab_size=target.config.vocab_size)
    if isinstance(draft, PromptLookup):
        draft.vocab_size = target.config.vocab_size
        return draft
    return DraftModel(draft, n_tokens)


class DraftModel:
    """Guesses from a smaller model with the target's tokenizer: each guess drawn from the draft's own
    distribution q, which the acceptance rule divides by. Its cache holds keys and values of `tokens[:done]`."""

    def __init__(self, model, n_tokens: int):
        self.model, self.done = model, 0
        self.cache = model.new_cache(max_seqs=1, max_len=n_tokens)

    def propose(self, tokens: list[int], n: int, sampler: Sampler) -> tuple[list[int], list[np.ndarray]]:
        """n guesses after `tokens`, and the [V] distribution each was drawn from."""
        guesses, q = [], []
        for _ in range(n):  # one cheap step of the draft per guess
            context = tokens + guesses
            logits = self.model.forward([SeqChunk(0, self.done, context[self.done:])], self.cache)  # [1, V]
            self.done = len(context)
            q.append(distribution(sampler, to_numpy(logits[0]), guesses))
            guesses.append(draw(q[-1], sampler.rng))
        return guesses, q

    def keep(self, n_tokens: int) -> None:
        """Only the first n_tokens are settled: the draft's cache beyond them is written over next round."""
        self.done = min(self.done, n_tokens)


class PromptLookup:
    """Prompt-lookup (n-gram) guesses, no draft model: find the text's last n tokens earlier in the text
    (the prompt or the output) and guess the tokens that followed them there. It pays where the output
    repeats its input: quoting, summarising, editing code, extracting fields.

    vLLM's "ngram" method: the longest suffix of n in [prompt_lookup_min, prompt_lookup_max] tokens that
    occurred before wins, at its latest occurrence. A guess is a certain choice, so its q is one-hot: the
    target keeps it with probability p(x), and on a rejection draws from p without x, renormalised (the
    residual of a one-hot q) — the same exact rule as for a draft model.

    >>> PromptLookup(prompt_lookup_max=2, vocab_size=10).propose([5, 6, 7, 8, 5, 6], 3, None)[0]   # after "5 6": 7 8 5
    [7, 8, 5]
    """

    def __init__(self, prompt_lookup_max: int = 3, prompt_lookup_min: int = 1, vocab_size: int = 0):
        if not (is_integer_at_least(prompt_lookup_min, 1) and is_integer_at_least(prompt_lookup_max, prompt_lookup_min)):
            raise TinyInferError(f"prompt_lookup_min={prompt_lookup_min!r}, prompt_lookup_max={prompt_lookup_max!r}: "
                                 "give integers with 1 <= prompt_lookup_min <= prompt_lookup_max")
        self.low, self.high, self.vocab_size = prompt_lookup_min, prompt_lookup_max, vocab_size

    def propose(self, tokens: list[int], n: int, sampler) -> tuple[list[int], list[np.ndarray]]:
        guesses = lookup(np.asarray(tokens), n, self.low, self.high)  # [<= n]
        return guesses, [one_hot(x, self.vocab_size) for x in guesses]

    def keep(self, n_tokens: int) -> None:
        pass  # no state beyond the tokens themselves


def lookup(tokens: np.ndarray, n: int, low: int, high: int) -> list[int]:
    """Up to n tokens that followed the latest earlier occurrence of the longest suffix of `tokens` with
    low..high tokens; [] when none occurred.  [L] -> [<= n]

    >>> lookup(np.array([1, 2, 3, 9, 2, 3]), 2, 1, 3)     # "2 3" occurred at 1, followed by 9 2
    [9, 2]
    """
    for size in range(min(high, len(tokens) - 1), low - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], size)  # [L - size, size] earlier n-grams
        starts = np.flatnonzero((windows == tokens[-size:]).all(axis=1))  # where the suffix occurred before
        if len(starts):
            follow = starts[-1] + size  # the latest occurrence: its text is the most like what comes now
            return tokens[follow:follow + n].tolist()
    return []


def one_hot(token: int, vocab_size: int) -> np.ndarray:
    """[V] the distribution of a guess made for certain."""
    q = np.zeros(vocab_size)
    q[token] = 1.0
    return q


class GuessBudget:
    """How many guesses the next round makes: speculation backs off where its guesses fail, so it never costs
    much more than plain decoding (a round of j guesses costs c_v(j) / c_t = 1.5-4 plain steps on the CPU,
    chapter 11; a round whose every guess is rejected yields one token for that price).

    - every guess kept: guess k again (the text is predictable);
    - some kept: guess one more than were kept (about where the last run of agreement ended);
    - none kept: guess 1, after `wait` rounds with no guesses at all (plain steps); `wait` doubles with each
      miss in a row, 1, 2, 4, ... up to MAX_WAIT, and a kept guess resets it.

    Whatever the budget, each round's tokens follow the target's distribution (the rule is exact for any k
    chosen before the round), so this changes the speed, never the output. Not `adaptive`: k every round.

    >>> b = GuessBudget(4); b.update(4, 0); [b.next() for _ in range(3)]   # a miss: one plain step, then 1 guess
    [0, 1, 1]
    >>> b.update(1, 1); b.next()                                            # kept: back to k
    4
    """

    MAX_WAIT = 16

    def __init__(self, k: int, adaptive: bool = True):
        self.k, self.size, self.wait, self.misses, self.adaptive = k, k, 0, 0, adaptive

    def next(self) -> int:
        """Guesses to make this round (0: a plain step)."""
        if self.wait:
            self.wait -= 1
            return 0
        return self.size

    def update(self, proposed: int, kept: int) -> None:
        """The round made `proposed` guesses and the target kept `kept` of them."""
        if not (proposed and self.adaptive):
            return
        if kept:
            self.misses = 0
            self.size = self.k if kept == proposed else min(self.k, kept + 1)
        else:
            self.wait = min(2 ** self.misses, self.MAX_WAIT)
            self.misses, self.size = self.misses + 1, 1


def speculative_tokens(target, draft, prompt_ids: list[int], sampler: Sampler, k: int, timings,
                       stats: SpeculationStats, adaptive: bool = True) -> Iterator[TokenChoice]:
    """`generate_tokens` with guesses: yields the same kind of TokenChoice, several per target step.

    `draft` is a model or prompt lookup (see `proposer`). The target's cache holds keys and values of
    `tokens[:target_done]`; a round feeds it the one token it has not seen and the guesses, and its pass gives
    the k+1 rows of logits the guesses are checked against. The first round makes no guesses: a plain
    decoding step, timed as the yardstick the guessing rounds are compared with (`stats.slower_than_plain`);
    after it, a GuessBudget of at most k says how many guesses each round makes (k each, unless `adaptive`).
    """
    max_tokens = sampler.params.max_tokens
    guesser = proposer(target, draft, len(prompt_ids) + max_tokens)
    target_cache = target.new_cache(max_seqs=1, max_len=len(prompt_ids) + max_tokens)
    tokens, target_done = list(prompt_ids), len(prompt_ids) - 1
    budget = GuessBudget(k, adaptive)
    start = time.perf_counter()
    if target_done:  # the prompt but its last token: no logits needed
        target.forward([SeqChunk(0, 0, tokens[:-1])], target_cache)
    while len(tokens) - len(prompt_ids) < max_tokens:
        round_start = time.perf_counter()
        room = max_tokens - (len(tokens) - len(prompt_ids)) - 1  # the round must not overshoot
        n = min(budget.next(), room) if stats.target_steps else 0  # the first round: the plain yardstick
        guesses, q = guesser.propose(tokens, n, sampler) if n else ([], [])
        new = tokens[target_done:] + guesses  # the one token the target has not seen, then every guess
        rows = to_numpy(target.forward([SeqChunk(0, target_done, new)], target_cache, all_logits=True))  # [k+1, V]
        p = np.stack([distribution(sampler, rows[i], guesses[:i]) for i in range(len(guesses) + 1)])  # [k+1, V]
        produced = verify(p, np.array(q) if q else np.zeros((0, p.shape[-1])), guesses, sampler.rng)
        stats.count(len(guesses), len(produced), time.perf_counter() - round_start)
        budget.update(len(guesses), len(produced) - 1)
        target_done = len(tokens) + len(produced) - 1  # the cache holds the kept guesses; the last token is new
        guesser.keep(target_done)
        for i, token in enumerate(produced):
            choice = sampler.choice(token, rows[i])
            tokens.append(token)
            timings.add_token(time.perf_counter() - start)  # a round's later tokens come at no extra time
            yield choice
            start = time.perf_counter()
