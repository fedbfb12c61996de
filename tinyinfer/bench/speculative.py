"""`tinyinfer bench speculative`: generation with guesses against generation without, timed in turns.

Two ways to guess (`--method`): a draft model (a smaller model with the same tokenizer), and prompt lookup
("ngram": the tokens that followed the text's last tokens earlier on, no model at all). For each method and
each k (guesses per round) it prints tokens/s, the speed-up over plain decoding, the acceptance rate, the
tokens gained per step of the target, and whether the tokens are the same (at temperature 0 they must be).
The speed-up is also given per CPU second of this process ("CPU s-up"), which other work on a shared
machine disturbs far less than wall time. Then the costs that decide the speed-up, measured on the same
models (chapter 11):

    c_t      one decode step of the target (one token)
    c_v(k)   one pass of the target over k+1 tokens (the verify step)
    c_d      one decode step of the draft (prompt lookup: ~0, a search of the text)
    expected speed-up = tokens per round / cost of a round in target steps, where a round with guesses costs
                        k c_d / c_t + c_v(k) / c_t and a plain one (the guess budget backed off) 1

Which method wins depends on the task (`--task`): continuing free text ("continue", the prompt as given)
gives prompt lookup little to find, while an input-grounded task lets it guess whole runs of tokens for free.
"repeat" is one a user runs: the chat request "Repeat this text exactly, word for word:" with a passage of
prose (PASSAGES: the longest that fits the context window with --tokens; about 150 tokens, or a line of
Romeo and Juliet for the built-in models' 128-token window), through the model's chat template; the answer
ends where the model ends it (EOS) or at --tokens, and the model is free to stray from the passage: what it
copies, prompt lookup guesses. Quoting, editing code and extracting fields are answered the same way.
"summarise" asks for a summary of the same passage instead: the answer reuses phrases of it, not whole runs.

    python -m tinyinfer bench speculative                          # built-in shakespeare, shakespeare-draft
    python -m tinyinfer bench speculative --task repeat --method ngram draft_model
    python -m tinyinfer bench speculative --model M --method ngram --task repeat -k 2 4 8
"""

from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.commands import at_least
from tinyinfer.errors import TinyInferError
from tinyinfer.model import SeqChunk
from tinyinfer.speculative import PromptLookup

REQUESTS = {"repeat": "Repeat this text exactly, word for word:", "summarise": "Summarise this text in a few sentences:"}
PASSAGES = (  # the text the requests are about: the first that fits the model's context window
    "A lighthouse keeper's day began an hour before sunset. He climbed the spiral stairs with a can of oil, "
    "trimmed the wick, polished the great lens until no smear could scatter the beam, and wound the clockwork "
    "that turned it. Through the night he returned every few hours to wind the weights again and to write in "
    "the log: the wind's direction, the state of the sea, the ships that passed and the time they passed. At "
    "dawn he put the flame out, drew the curtains around the lens so that the sun could not set fire to "
    "anything through it, and slept until noon. In fog he rang a bell by hand, sometimes for a whole night, "
    "because a ship that could not see the light might still hear the bell and keep away from the rocks.",
    "But, soft! what light through yonder window breaks? It is the east, and Juliet is the sun.",
)


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="shakespeare", help="the target model (default: built-in shakespeare)")
    parser.add_argument("--draft", default="shakespeare-draft", help="the draft model of --method draft_model")
    parser.add_argument("--method", nargs="+", choices=["draft_model", "ngram"], default=["draft_model", "ngram"],
                        help="how the guesses are made: a draft model, prompt lookup, or both (the default)")
    parser.add_argument("-k", type=at_least(1), nargs="+", default=[1, 2, 4], help="guesses per round to try")
    parser.add_argument("--prompt-lookup-max", type=at_least(1), default=3, help="ngram: the longest suffix looked up")
    parser.add_argument("--task", choices=["continue", *REQUESTS], default="continue",
                        help="continue: the prompt as given, --tokens generated; repeat: the chat request "
                             "'Repeat this text exactly, word for word:' with a passage of prose (~150 tokens), "
                             "answered until the model's EOS or --tokens; summarise: 'Summarise this text in a "
                             "few sentences:' with the same passage")
    parser.add_argument("--tokens", type=at_least(1), default=64, help="tokens to generate per run")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--prompt", default="ROMEO:", help="prompt text (--task continue)")
    parser.add_argument("--rounds", type=at_least(1), default=3, help="runs of each setting, in turns; the fastest is kept")
    parser.add_argument("--blas-threads", type=at_least(1), default=1, help="matrix-library threads (as in bench serve)")


def task_prompt(model_name: str, model, task: str, prompt: str, n_tokens: int) -> str:
    """The prompt text of `task`: a request about a passage goes through the model's chat template when it has
    one, with the first of PASSAGES whose prompt leaves the model's context window room for `n_tokens` more."""
    if task == "continue":
        return prompt
    for passage in PASSAGES:
        text = passage_request(model_name, REQUESTS[task], passage)
        if len(model.tokenizer.encode(text)) + n_tokens <= model.config.max_seq_len:
            break
    return text


def passage_request(model_name: str, instruction: str, passage: str) -> str:
    request = f"{instruction}\n\n{passage}"
    template = ChatTemplate.for_model(model_name, required=False)
    if template is None:  # a plain language model: the request, then the start of an answer to continue
        return f"{request}\n\nAnswer:\n\n"
    return template.render([{"role": "user", "content": request}], add_generation_prompt=True)


def time_generate(target, prompt: str, n: int, temperature: float, ignore_eos: bool, **speculation):
    """(wall seconds, CPU seconds of this process, result) of one generation of at most n tokens."""
    start, start_cpu = time.perf_counter(), time.process_time()
    result = target.generate(prompt, max_tokens=n, temperature=temperature, seed=0, ignore_eos=ignore_eos,
                             **speculation)
    return time.perf_counter() - start, time.process_time() - start_cpu, result


def step_costs(target, draft, prompt_ids: list[int], ks: list[int], repeats: int = 30) -> tuple[float, dict, float]:
    """(c_t, {k: c_v(k)}, c_d) in seconds (c_d 0 without a draft): medians of `repeats` passes, in turns."""
    n = len(prompt_ids)
    cache = target.new_cache(1, n + max(ks) + 1)
    target.forward([SeqChunk(0, 0, prompt_ids)], cache)
    passes = {"t": lambda: target.forward([SeqChunk(0, n, [1])], cache)}
    passes.update({k: (lambda k=k: target.forward([SeqChunk(0, n, [1] * (k + 1))], cache, all_logits=True))
                   for k in ks})
    if draft is not None:
        draft_cache = draft.new_cache(1, n + 1)
        draft.forward([SeqChunk(0, 0, prompt_ids)], draft_cache)
        passes["d"] = lambda: draft.forward([SeqChunk(0, n, [1])], draft_cache)
    times = {name: [] for name in passes}
    for _ in range(repeats):
        for name, run_pass in passes.items():
            start = time.perf_counter()
            run_pass()
            times[name].append(time.perf_counter() - start)
    median = {name: float(np.median(t)) for name, t in times.items()}
    return median["t"], {k: median[k] for k in ks}, median.get("d", 0.0)


def run(args) -> int:
    with threadpool_limits(limits=args.blas_threads, user_api="blas"):
        return measure_and_report(args)


def measure_and_report(args) -> int:
    target = tinyinfer.load(args.model)
    draft = tinyinfer.load(args.draft) if "draft_model" in args.method else None
    if target.tokenizer is None:
        raise TinyInferError(f"{args.model} has no tokenizer: this benchmark prompts with text")
    prompt = task_prompt(args.model, target, args.task, args.prompt, args.tokens)
    settings = [(None, None)] + [(method, k) for method in args.method for k in args.k]
    print(f"target {args.model}: {target.n_params / 1e6:.2f}M parameters" +
          (f"; draft {args.draft}: {draft.n_params / 1e6:.2f}M" if draft is not None else "") +
          f"; task {args.task} ({len(target.tokenizer.encode(prompt))} prompt tokens), temperature "
          f"{args.temperature}, {'' if args.task == 'continue' else 'up to '}{args.tokens} tokens, BLAS threads "
          f"{args.blas_threads}, fastest of {args.rounds}")
    best, best_cpu, results = {}, {}, {}
    for _ in range(args.rounds):
        for method, k in settings:
            helper = draft if method == "draft_model" else PromptLookup(prompt_lookup_max=args.prompt_lookup_max)
            extra = {} if method is None else dict(draft=helper, num_speculative_tokens=k)
            seconds, cpu, result = time_generate(target, prompt, args.tokens, args.temperature,
                                                 ignore_eos=args.task == "continue", **extra)
            results[method, k] = result  # seeded: each round of a setting gives the same tokens
            n = len(result.token_ids)  # greedy: the same for every setting; sampling: counted per setting
            best[method, k] = max(best.get((method, k), 0.0), n / seconds)  # tokens/s
            best_cpu[method, k] = max(best_cpu.get((method, k), 0.0), n / cpu)  # tokens per CPU second
    c_t, c_v, c_d = step_costs(target, draft, target.tokenizer.encode(prompt), args.k)
    print(f"\ncosts: target step c_t = {c_t * 1e3:.2f} ms" +
          (f", draft step c_d = {c_d * 1e3:.2f} ms (c_d / c_t = {c_d / c_t:.2f})" if draft is not None else ""))
    print(f"\n{'':22s}{'tokens/s':>10s}{'speed-up':>10s}{'expected':>10s}{'accepted':>10s}{'tok/step':>10s}"
          f"{'c_v/c_t':>9s}{'CPU s-up':>10s}  same tokens")
    plain = results[None, None].token_ids
    print(f"{'no speculation':22s}{best[None, None]:10.1f}{1.0:9.2f}x{'':39s}{1.0:9.2f}x  ({len(plain)} tokens)")
    for method, k in settings[1:]:
        s = results[method, k].speculation
        # a round with guesses costs at most that of k guesses (it may make fewer); a plain round one step
        guessing_cost = k * (c_d if method == "draft_model" else 0.0) / c_t + c_v[k] / c_t
        expected = s.tokens / (s.guessing_rounds * guessing_cost + s.target_steps - s.guessing_rounds)
        same = "yes" if results[method, k].token_ids == plain else (
            "no (sampling: same distribution, other draws)" if args.temperature > 0 else "NO")
        print(f"{f'{method} k = {k}':22s}{best[method, k]:10.1f}{best[method, k] / best[None, None]:9.2f}x"
              f"{expected:9.2f}x{s.acceptance_rate:10.0%}{s.tokens_per_target_step:10.2f}{c_v[k] / c_t:9.2f}"
              f"{best_cpu[method, k] / best_cpu[None, None]:9.2f}x  {same}")
    return 0
