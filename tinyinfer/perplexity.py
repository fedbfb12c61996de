"""Perplexity: how surprised a model is by a text, the standard measure of a language model's quality.

Each token t of the text costs -log p(t | the tokens before it) nats; their mean is the cross-entropy, and
perplexity = exp(mean): the number of equally likely tokens the model is, on average, choosing between. A
model sees at most its context window, so a long text is read in windows of `ctx` tokens that start every
`stride` tokens (the sliding window of llama.cpp's perplexity tool with --ppl-stride, and of Hugging Face's
perplexity guide), and each token is scored once, in the first window that holds it past the previous
window's end, so with a stride below ctx every token but those of the first window is scored with at least
ctx - stride tokens before it:

    ids 0..9, ctx 4, stride 2:  window [0, 4) scores 1, 2, 3;  [2, 6) scores 4, 5;  [4, 8) 6, 7;  [6, 10) 8, 9

Nats per token depend on the tokenizer; nats per character (total nats / characters of the text scored) do
not, so they compare models with different vocabularies.

    result = perplexity(model, model.tokenizer.encode(text), ctx=128, stride=64)
    result.perplexity, result.nats_per_token
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinyinfer.errors import TinyInferError


@dataclass
class PerplexityResult:
    total_nats: float  # the sum of -log p over the scored tokens
    n_tokens: int  # tokens scored (every token but the first)
    n_windows: int

    @property
    def nats_per_token(self) -> float:
        return self.total_nats / self.n_tokens

    @property
    def perplexity(self) -> float:
        return math.exp(self.nats_per_token)


def windows(n: int, ctx: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored position) of each window over n ids.

    windows(10, 4, 2) -> [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    windows(10, 4, 4) -> [(0, 4, 1), (3, 7, 4), (6, 10, 7)]   (stride = ctx: each window starts one token early)
    """
    out, scored_to, begin = [], 1, 0  # position 0 has nothing before it to predict it from
    while scored_to < n:
        end = min(begin + ctx, n)
        out.append((begin, end, scored_to))
        scored_to, begin = end, min(begin + stride, end - 1)  # a window holds a token before its first scored one
    return out


def token_nats(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, in float64.  [T, V], [T] -> [T]"""
    z = logits.astype(np.float64)  # [T, V]
    top = z.max(axis=1, keepdims=True)  # [T, 1]
    log_norm = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]  # [T]
    return log_norm - z[np.arange(len(targets)), targets]  # [T]


def perplexity(model, ids: list[int], ctx: int, stride: int) -> PerplexityResult:
    """Score `ids` with `model` in windows of `ctx` ids starting every `stride` ids (see the module docstring)."""
    if len(ids) < 2:
        raise TinyInferError(f"the text is {len(ids)} token(s) long: perplexity needs at least 2 (one to predict from)")
    if not 1 <= stride <= ctx:
        raise TinyInferError(f"stride {stride} must be between 1 and the window ({ctx}): a larger stride would skip tokens")
    if ctx > model.config.max_seq_len:
        raise TinyInferError(f"a window of {ctx} tokens exceeds the model's context window of {model.config.max_seq_len} "
                             f"tokens{model.config.context_note}: lower --ctx-size")
    total, count, spans = 0.0, 0, windows(len(ids), ctx, stride)
    for begin, end, first in spans:
        logits = model.logits(ids[begin:end])  # [end - begin, V]: row j predicts ids[begin + j + 1]
        rows = logits[first - 1 - begin:end - 1 - begin]  # [end - first, V]
        total += float(token_nats(rows, np.asarray(ids[first:end])).sum())
        count += end - first
    return PerplexityResult(total, count, len(spans))
