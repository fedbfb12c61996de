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
from tinyinfer.errors import TinyInferError
from tinyinfer.model import SeqChunk
from tinyinfer.sampling import Sampler, TokenChoice, draw, greedy


@dataclass
class SpeculationStats:
    """How well the draft guessed: its acceptance rate, and tokens gained per step of the target."""

    proposed: int = 0  # draft guesses checked by the target
    accepted: int = 0  # of which the target kept
    target_steps: int = 0  # forward passes of the target after the prompt
    draft_steps: int = 0  # forward passes of the draft

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


def check_draft(target, draft, constraint, n_tokens: int) -> None:
    """The draft must speak the target's vocabulary and hold the whole text; guesses cannot walk a grammar."""
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
    if constraint is not None:
        raise TinyInferError("speculative decoding does not support a constraint (grammar, JSON schema): drop --draft")


def speculative_tokens(target, draft, prompt_ids: list[int], sampler: Sampler, k: int, timings,
                       stats: SpeculationStats) -> Iterator[TokenChoice]:
    """`generate_tokens` with a draft: yields the same kind of TokenChoice, several per target step.

    The target's cache holds keys and values of `tokens[:target_done]`, the draft's of `tokens[:draft_done]`;
    a round feeds each model what it has not seen yet, so both catch up after a rejection by themselves. The
    target's pass over [last token, guesses] gives the k+1 rows of logits the guesses are checked against.
    """
    max_tokens = sampler.params.max_tokens
    target_cache = target.new_cache(max_seqs=1, max_len=len(prompt_ids) + max_tokens)
    draft_cache = draft.new_cache(max_seqs=1, max_len=len(prompt_ids) + max_tokens)
    tokens, target_done, draft_done = list(prompt_ids), 0, 0
    start = time.perf_counter()
    while len(tokens) - len(prompt_ids) < max_tokens:
        n_guesses = min(k, max_tokens - (len(tokens) - len(prompt_ids)) - 1)  # the round must not overshoot
        guesses, q = [], []
        for _ in range(n_guesses):  # the draft guesses, one cheap step per token
            context = tokens + guesses
            logits = draft.forward([SeqChunk(0, draft_done, context[draft_done:])], draft_cache)  # [1, V]
            draft_done = len(context)
            q.append(distribution(sampler, to_numpy(logits[0]), guesses))
            guesses.append(draw(q[-1], sampler.rng))
        stats.draft_steps += n_guesses
        if len(tokens) - target_done > 1:  # first round: the prompt but its last token (no logits needed)
            target.forward([SeqChunk(0, target_done, tokens[target_done:-1])], target_cache)
            target_done = len(tokens) - 1
        new = tokens[target_done:] + guesses  # the one token the target has not seen, then every guess
        rows = to_numpy(target.forward([SeqChunk(0, target_done, new)], target_cache, all_logits=True))  # [k+1, V]
        p = np.stack([distribution(sampler, rows[i], guesses[:i]) for i in range(n_guesses + 1)])  # [k+1, V]
        produced = verify(p, np.array(q) if q else np.zeros((0, p.shape[-1])), guesses, sampler.rng)
        kept = len(produced) - 1
        stats.target_steps += 1
        stats.proposed += n_guesses
        stats.accepted += kept
        target_done = len(tokens) + kept  # the caches hold the kept guesses; the last token is new to both
        draft_done = min(draft_done, target_done)
        for i, token in enumerate(produced):
            choice = sampler.choice(token, rows[i])
            tokens.append(token)
            timings.add_token(time.perf_counter() - start)  # a round's later tokens come at no extra time
            yield choice
            start = time.perf_counter()
