"""`tinyinfer bench speculative`: generation with a draft model against generation without, timed in turns.

For each k (guesses per round) it prints tokens/s without and with the draft, the acceptance rate, the tokens
gained per step of the target, and whether the tokens are the same (at temperature 0 they must be). Then the
costs that decide the speed-up, measured on the same two models (chapter 11):

    c_t      one decode step of the target (one token)
    c_v(k)   one pass of the target over k+1 tokens (the verify step)
    c_d      one decode step of the draft
    expected speed-up = tokens per round / (k c_d / c_t + c_v(k) / c_t)

    python -m tinyinfer bench speculative                         # built-in shakespeare, shakespeare-draft
    python -m tinyinfer bench speculative --model M --draft D -k 1 2 4 --temperature 0.8
"""

from __future__ import annotations

import time

import numpy as np

import tinyinfer
from tinyinfer.commands import at_least
from tinyinfer.errors import TinyInferError
from tinyinfer.model import SeqChunk


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="shakespeare", help="the target model (default: built-in shakespeare)")
    parser.add_argument("--draft", default="shakespeare-draft", help="the draft model (default: shakespeare-draft)")
    parser.add_argument("-k", type=at_least(1), nargs="+", default=[1, 2, 4], help="guesses per round to try")
    parser.add_argument("--tokens", type=at_least(1), default=200, help="tokens to generate per run")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--prompt", default="ROMEO:", help="prompt text")
    parser.add_argument("--rounds", type=at_least(1), default=3, help="runs of each setting, in turns; the fastest is kept")


def time_generate(target, prompt: str, n: int, temperature: float, **speculation):
    start = time.perf_counter()
    result = target.generate(prompt, max_tokens=n, temperature=temperature, seed=0, ignore_eos=True, **speculation)
    return time.perf_counter() - start, result


def step_costs(target, draft, prompt_ids: list[int], ks: list[int], repeats: int = 30) -> tuple[float, dict, float]:
    """(c_t, {k: c_v(k)}, c_d) in seconds: the medians of `repeats` passes, the kinds taken in turn."""
    n = len(prompt_ids)
    caches = {"target": target.new_cache(1, n + max(ks) + 1), "draft": draft.new_cache(1, n + 1)}
    target.forward([SeqChunk(0, 0, prompt_ids)], caches["target"])
    draft.forward([SeqChunk(0, 0, prompt_ids)], caches["draft"])
    passes = {"t": lambda: target.forward([SeqChunk(0, n, [1])], caches["target"]),
              "d": lambda: draft.forward([SeqChunk(0, n, [1])], caches["draft"])}
    passes.update({k: (lambda k=k: target.forward([SeqChunk(0, n, [1] * (k + 1))], caches["target"], all_logits=True))
                   for k in ks})
    times = {name: [] for name in passes}
    for _ in range(repeats):
        for name, run_pass in passes.items():
            start = time.perf_counter()
            run_pass()
            times[name].append(time.perf_counter() - start)
    median = {name: float(np.median(t)) for name, t in times.items()}
    return median.pop("t"), {k: median[k] for k in ks}, median.pop("d")


def run(args) -> int:
    target, draft = tinyinfer.load(args.model), tinyinfer.load(args.draft)
    if target.tokenizer is None:
        raise TinyInferError(f"{args.model} has no tokenizer: this benchmark prompts with text")
    print(f"target {args.model}: {target.n_params / 1e6:.2f}M parameters; draft {args.draft}: "
          f"{draft.n_params / 1e6:.2f}M; temperature {args.temperature}, {args.tokens} tokens, fastest of {args.rounds}")
    best, results = {}, {}
    for _ in range(args.rounds):
        for k in [None, *args.k]:
            extra = {} if k is None else dict(draft=draft, num_speculative_tokens=k)
            seconds, results[k] = time_generate(target, args.prompt, args.tokens, args.temperature, **extra)
            best[k] = min(best.get(k, np.inf), seconds)
    c_t, c_v, c_d = step_costs(target, draft, target.tokenizer.encode(args.prompt), args.k)
    print(f"\ncosts: target step c_t = {c_t * 1e3:.2f} ms, draft step c_d = {c_d * 1e3:.2f} ms (c_d / c_t = {c_d / c_t:.2f})")
    print(f"\n{'':14s}{'tokens/s':>10s}{'speed-up':>10s}{'expected':>10s}{'accepted':>10s}{'tok/step':>10s}"
          f"{'c_v/c_t':>9s}  same tokens")
    plain = results[None].token_ids
    print(f"{'no draft':14s}{args.tokens / best[None]:10.1f}{1.0:9.2f}x")
    for k in args.k:
        s = results[k].speculation
        expected = s.tokens_per_target_step / (k * c_d / c_t + c_v[k] / c_t)
        same = "yes" if results[k].token_ids == plain else ("no (sampling: same distribution, other draws)"
                                                            if args.temperature > 0 else "NO")
        print(f"{'k = ' + str(k):14s}{args.tokens / best[k]:10.1f}{best[None] / best[k]:9.2f}x{expected:9.2f}x"
              f"{s.acceptance_rate:10.0%}{s.tokens_per_target_step:10.2f}{c_v[k] / c_t:9.2f}  {same}")
    return 0
