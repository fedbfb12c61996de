"""`tinyinfer bench serve`: what batching and prefix caching buy, measured side by side in one run.

1. Throughput and latency. One synthetic workload (Poisson arrivals, random prompt and output lengths,
   seeded sampling, EOS allowed: only tokens actually generated are counted) is served three ways:
   - sequential: `model.generate` one request after another (no batching at all);
   - static batching: the engine admits a batch only when the previous one has completely finished;
   - continuous batching: the engine admits and retires requests at every step.
   Every request is seeded, so all three produce the same tokens (the bench checks it); only time differs.
   Beside the ratios: the whole run's ceiling (the weight products alone, timed at a few row counts and
   summed over what each mode computed) and the steady state's (`tinyinfer bench step`).
2. Prefix caching. Requests sharing a long prefix (512 tokens, or what the context window allows) with a
   short own suffix, sent one after another (so no queueing blurs the prefill): time to first token with
   the prefix cache on, then off.
3. Memory. During the continuous run, the KV bytes held (whole blocks) against the bytes the live tokens
   need, and against contiguous slabs of the full context for the same sequences.

    python -m tinyinfer bench serve                                   # the built-in model
    python -m tinyinfer bench serve --model path/to/model --requests 128 --concurrency 32

Each mode runs `--rounds` times (2 by default), the modes taking turns, and the fastest run of each is
reported: on a machine shared with other work, a run is only ever slowed down by it. The matrix library
runs on `--blas-threads` threads (1 by default) in every mode, set through threadpoolctl.
"""

from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

import tinyinfer
from tinyinfer.bench import step
from tinyinfer.bench.disaggregated import run_disaggregated
from tinyinfer.bench.prompts import random_prompt
from tinyinfer.bench.workload import (Request, Served, percentile_ms, print_latency_table, serve_engine, sleep_until,
                                      workload_of)
from tinyinfer.engine import LLM
from tinyinfer.engine.cuda_graphs import graph_unsupported
from tinyinfer.commands import at_least, positive_number
from tinyinfer.commands.generate import add_enforce_eager_argument, add_loading_arguments, loading_options
from tinyinfer.errors import TinyInferError
from tinyinfer.sampling import Sampler, SamplingParams, sequence_rngs


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="built-in name, model folder, llama2.c .bin, or HF repo id "
                        "(default: the built-in model)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    add_loading_arguments(parser)
    add_enforce_eager_argument(parser)
    parser.add_argument("--requests", type=at_least(1), default=128,
                        help="requests in the workload (several times the concurrency, so the batch is mostly full)")
    parser.add_argument("--concurrency", type=at_least(1), default=32, help="sequences the engine runs at once")
    parser.add_argument("--rate", type=positive_number, default=100.0, help="Poisson arrival rate, requests per second")
    parser.add_argument("--prompt-len", default="16:64", help="prompt lengths, uniform in MIN:MAX tokens")
    parser.add_argument("--output-len", default="16:64", help="max_tokens, uniform in MIN:MAX (EOS may end sooner)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--block-size", type=at_least(1), default=16)
    parser.add_argument("--max-batched-tokens", type=at_least(1), default=512, help="the engine's per-step token budget")
    parser.add_argument("--prefix-len", type=at_least(1), default=512, help="shared prefix length for the prefix-cache test")
    parser.add_argument("--prefix-requests", type=at_least(1), default=16)
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--blas-threads", type=at_least(1), default=1, help="matrix-library threads, the same for every mode")
    parser.add_argument("--price-per-hour", type=positive_number, default=None, metavar="USD",
                        help="what an hour of this machine costs: prints each mode's cost per million output tokens")
    parser.add_argument("--rounds", type=at_least(1), default=2,
                        help="runs of each mode, the modes taking turns; the fastest run of each is reported "
                        "(other work on the machine slows a run down at random, it never speeds one up)")
    parser.add_argument("--disaggregated", action="store_true",
                        help="under `mpirun -n 2`: a combined worker against a prefill rank and a decode rank, "
                             "TTFT and TPOT side by side (tinyinfer/bench/disaggregated.py)")


def run(args) -> int:
    """Every mode gets the same BLAS threads. One by default: on a machine shared with other work, a threaded
    BLAS waits for a busy core inside every product, so small products (a short prefill, a decode step of
    one row) turn many times slower at random and the figures would measure the machine's load."""
    with threadpool_limits(limits=args.blas_threads, user_api="blas"):
        if args.disaggregated:
            return run_disaggregated(args)
        return serve_and_report(args, f"BLAS threads: {args.blas_threads} for every mode")


def serve_and_report(args, blas: str) -> int:
    model = tinyinfer.load(args.model, device=args.device, **loading_options(args))
    rng = np.random.default_rng(args.seed)
    workload = workload_of(args, model, rng)
    engine = dict(block_size=args.block_size, max_num_seqs=args.concurrency,
                  max_num_batched_tokens=args.max_batched_tokens, enforce_eager=args.enforce_eager)
    graphs = args.device == "cuda" and not args.enforce_eager and graph_unsupported(model) is None  # CUDA graphs serve
    # the engines' decode steps: continuous batching then runs once more without them
    print(f"model: {args.model or 'built-in'} ({model.n_params / 1e6:.2f}M parameters), device {args.device}")
    print(f"workload: {args.requests} requests, Poisson arrivals at {args.rate:g}/s, prompts {args.prompt_len} "
          f"tokens, max_tokens {args.output_len}, temperature {args.temperature:g}, EOS allowed; "
          f"engine: {args.concurrency} concurrent sequences, blocks of {args.block_size}, "
          f"{args.max_batched_tokens} tokens per step, KV cache {args.kv_cache_dtype}; {blas}")
    products = ProductTimes(model, max([args.max_batched_tokens] + [len(r.prompt_ids) for r in workload]),
                            args.concurrency)
    rounds = []
    for _ in range(args.rounds):
        rounds.append(serve_all_modes(model, workload, engine, graphs))
        products.time()  # after every round, the fastest kept, as for the modes
    fastest = [max(runs, key=lambda run: run[0].throughput) for runs in zip(*rounds)]  # the fastest run of each mode
    (sequential, _), (static, _), (continuous, continuous_llm) = fastest[:3]
    eager = [run for run, _ in fastest[3:]]  # continuous batching without CUDA graphs, where they served the others
    print(f"fastest of {args.rounds} runs of each mode, the modes taking turns")
    print_latency_table([sequential, static, continuous] + eager)
    same = check_same_tokens(model, workload, sequential, [static, continuous] + eager)
    print(f"throughput: continuous / sequential = {continuous.throughput / sequential.throughput:.1f}x, "
          f"continuous / static = {continuous.throughput / static.throughput:.2f}x "
          f"(per CPU second: {continuous.cpu_throughput / sequential.cpu_throughput:.1f}x and "
          f"{continuous.cpu_throughput / static.cpu_throughput:.2f}x)")
    for run in eager:
        print(f"CUDA graphs: continuous batching with / without them (--enforce-eager) = "
              f"{continuous.throughput / run.throughput:.2f}x throughput")
    if args.price_per_hour is not None:
        print("cost per 1M output tokens at $" + f"{args.price_per_hour:g}/hour: " + ", ".join(
            f"{run.name} ${cost_per_million_tokens(args.price_per_hour, run.throughput):,.2f}"
            for run in (sequential, static, continuous)))
    print_time_split(continuous, args.concurrency)
    print_products_bound(products, workload, sequential, continuous)
    print_steady_state(model, workload, args.concurrency)
    print_memory(continuous_llm, model)
    print_prefix_caching(model, rng, args, engine)
    return 0 if same else 1


def print_time_split(run: Served, concurrency: int) -> None:
    """Where continuous batching's steps spent their time: steps with prompt tokens (prompts cost about the same
    one by one), steps of a full batch of decodes (what batching speeds up), and steps of fewer decodes (the
    tail, as the queue drains and the last requests finish one by one)."""
    prompt, full, fewer = [], [], []
    for seconds, record in run.steps:
        part = prompt if record.num_tokens > record.num_seqs else full if record.num_seqs >= concurrency else fewer
        part.append((seconds, record.num_seqs))
    tail_rows = f", {np.mean([rows for _, rows in fewer]):.1f} sequences on average" if fewer else ""
    print(f"{run.name}'s steps: {sum(s for s, _ in prompt):.2f} s in {len(prompt)} with prompt tokens, "
          f"{sum(s for s, _ in full):.2f} s in {len(full)} of {concurrency} decoding sequences, "
          f"{sum(s for s, _ in fewer):.2f} s in {len(fewer)} of fewer (the tail{tail_rows}), "
          f"of {run.wall_s:.2f} s")


def print_products_bound(products, workload: list[Request], sequential: Served, continuous: Served) -> None:
    """The whole run's ceiling: the time of the weight products alone in each mode (a step of T tokens over S
    sequences: the layers' products on T rows, the LM head's on S; `products` gives its seconds), against the
    time sequential generation took.

    Sequential generation pays a prefill of each prompt and then one-row steps; continuous batching, the steps
    of its log. Prefills cost about the same in both modes (their products already have many rows), so when
    prompts are as long as outputs, batching speeds up only the decode half: no scheduler or kernel brings the
    ratio above what the products alone allow."""
    alone = sum(products(len(r.prompt_ids), 1) + (len(ids) - 1) * products(1, 1)
                for r, ids in zip(workload, sequential.token_ids))
    batched = sum(products(r.num_tokens, r.num_seqs) for _, r in continuous.steps)
    print(f"weight products alone (timed at 1 to {products.most_rows} rows, linear in between): {alone:.3g} s of "
          f"{sequential.name}'s {sequential.wall_s:.3g} s, {batched:.3g} s of {continuous.name}'s "
          f"{continuous.wall_s:.3g} s: with no cost but its products, {continuous.name} would be at most "
          f"{sequential.wall_s / batched:.1f}x {sequential.name} as it ran ({alone / batched:.1f}x, products "
          f"against products)")


PRODUCT_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)  # where ProductTimes times the products
PRODUCT_TIMING_S = 0.1  # each row count is timed for about this long (at least 3 runs); the fastest run counts


def row_counts(most: int) -> list[int]:
    """Where a part is timed: no rows, the PRODUCT_ROWS below `most`, and `most`.

    >>> row_counts(48)
    [0, 1, 2, 4, 8, 16, 32, 48]
    """
    return [0] + [n for n in PRODUCT_ROWS if n < most] + [most]


class ProductTimes:
    """Seconds of a step's weight products as a function of (rows through the layers, rows through the LM
    head): each part timed alone (`step.weight_products`) at its `row_counts`, linear in between. `time()`
    again, between the modes' runs, keeps the fastest of each: other work on the machine only ever slows a run
    down."""

    def __init__(self, model, most_rows: int, most_head_rows: int):
        self.model, self.most_rows = model, most_rows
        self.rows, self.head_rows = row_counts(most_rows), row_counts(most_head_rows)
        self.layer_s, self.head_s = [np.inf] * len(self.rows), [np.inf] * len(self.head_rows)

    def time(self) -> None:
        self.layer_s = [min(t, self._fastest(n, 0)) for n, t in zip(self.rows, self.layer_s)]
        self.head_s = [min(t, self._fastest(0, n)) for n, t in zip(self.head_rows, self.head_s)]

    def _fastest(self, rows: int, head_rows: int) -> float:
        products = step.weight_products(self.model, rows, head_rows)
        once = step.fastest(products, 1, self.model.xp)[0]
        repeats = max(2, min(20, int(PRODUCT_TIMING_S / max(once, 1e-6))))
        return min(once, step.fastest(products, repeats, self.model.xp)[0])

    def __call__(self, rows: int, head_rows: int) -> float:
        return float(np.interp(rows, self.rows, self.layer_s) + np.interp(head_rows, self.head_rows, self.head_s))


def print_steady_state(model, workload: list[Request], concurrency: int) -> None:
    """What a full batch gains at most in the steady state (`tinyinfer bench step`, at the workload's mean
    context while decoding): the ceiling the whole run's ratio, which also pays prefills and a tail, stays under."""
    context, rows = round(np.mean([len(r.prompt_ids) + r.params.max_tokens / 2 for r in workload])), max(concurrency, 2)
    try:
        (parts, cpu), (alone, alone_cpu) = step.measure(model, rows, context, repeats=10)
    except TinyInferError as e:
        print(f"steady state: not measured ({e})")
        return
    at_most, unshared_only = step.bounds(parts, rows, alone)
    cpu_at_most, cpu_unshared_only = step.bounds(cpu, rows, alone_cpu)
    print(f"steady state ({rows} sequences of {context}+ tokens all decoding, `bench step`): at most {at_most:.1f}x "
          f"sequential ({cpu_at_most:.1f}x per CPU second); with no cost but the work no batch shares, "
          f"{unshared_only:.1f}x ({cpu_unshared_only:.1f}x)")


def cost_per_million_tokens(price_per_hour: float, tokens_per_s: float) -> float:
    """What a million tokens cost on a machine billed by the hour, kept busy at `tokens_per_s`:
    price per hour / tokens per hour x 1e6. The machine costs the same busy or idle, so the price of a token
    falls as the batch fills it: the economics of self-hosting (an API bills per token instead).

    >>> round(cost_per_million_tokens(2.0, 1000.0), 3)   # $2/hour at 1,000 tokens/s: 3.6M tokens per hour
    0.556
    """
    return price_per_hour / (tokens_per_s * 3600) * 1e6


ROUNDING_MARGIN = 1e-5  # a draw this close to a decision boundary can be flipped by float rounding alone
# with a float16 or int8 KV cache, a cached number that float rounding moves across one of the cache's own rounding
# boundaries changes by a whole step of that format (2^-11 relative, or 1/127 of its vector's largest): the logits
# then move by up to ~1e-3, and so may a draw's distance to a boundary
ROUNDED_CACHE_MARGIN = 1e-3


def check_same_tokens(model, workload: list[Request], reference: Served, runs: list[Served]) -> bool:
    """Print whether every request got the same tokens in every mode; explain each difference.

    Batched and single-row matrix products round differently (about 1e-7), so a draw that lands within
    that distance of a decision boundary (two near-equal logits when greedy, a uniform number next to a
    step of the CDF when sampling) can go either way. Such a tie is reported as one; a difference at a
    draw far from any boundary is a real bug, and the bench then fails. A KV cache that rounds what it stores
    (float16, int8) widens the ties (ROUNDED_CACHE_MARGIN).
    """
    exact_cache = model.kv_cache_dtype == "auto"
    tie, tie_name = (ROUNDING_MARGIN, "a float-rounding tie") if exact_cache else \
        (ROUNDED_CACHE_MARGIN, f"a rounding tie of the {model.kv_cache_dtype} KV cache")
    differing = [(run.name, i) for run in runs for i, ids in enumerate(run.token_ids) if ids != reference.token_ids[i]]
    if not differing:
        print(f"same tokens in all {len(runs) + 1} modes: yes ({len(workload)} requests)")
        return True
    margins = [draw_margin(model, workload[i], reference.token_ids[i], run_ids)
               for name, i in differing for run_ids in [next(r for r in runs if r.name == name).token_ids[i]]]
    for (name, i), margin in zip(differing, margins):
        kind = tie_name if margin < tie else "a BUG: outputs must not depend on batching"
        print(f"request {i} differs under {name} from its sequential run at a draw {margin:.1e} from a decision "
              f"boundary: {kind}")
    ties_only = all(margin < tie for margin in margins)
    n_differing = len({i for _, i in differing})
    print(f"same tokens in all {len(runs) + 1} modes: {len(workload) - n_differing} of {len(workload)} requests; "
          + (f"the other {n_differing} each differ at {tie_name} (a draw within {tie:g} of a decision boundary)"
             if ties_only else "the others differ at draws far from any decision boundary: a BUG"))
    return ties_only


def draw_margin(model, request: Request, want: list[int], got: list[int]) -> float:
    """How far the first draw where `got` leaves `want` was from going got's way, on the solo logits: the
    logit gap when greedy, the distance of the uniform number to got's slice of the CDF when sampling."""
    k = next((j for j, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    chosen, other = (want + [None])[k], (got + [None])[k]  # None: that run ended there (EOS or a stop token)
    sampler = Sampler(request.params, request.prompt_ids)
    for token in want[:k]:
        sampler.accept(token)
    logits = model.logits(request.prompt_ids + want[:k])[-1].astype(np.float64)  # [V]
    if request.params.greedy:
        scores = sampler.process(logits)
        rival = np.sort(scores)[-2] if other is None else scores[other]  # an unknown ender: the runner-up
        return float(abs(scores.max() - rival))
    rng = sequence_rngs(request.params.seed, 1)[0]
    u = [rng.random() for _ in range(k + 1)][-1]  # each sampled token takes exactly one uniform number
    cdf = np.cumsum(sampler.probs(logits))
    cdf /= cdf[-1]  # token t owns [cdf[t-1], cdf[t])
    if other is None or chosen is None:
        return float(np.abs(cdf - u).min())
    # model.logits recomputes without a cache, itself rounding differently: a tie may land on either side
    return float(abs(cdf[other - 1] - u if other > chosen else u - cdf[other]))


def serve_all_modes(model, workload: list[Request], engine: dict, graphs: bool = False) -> list[tuple[Served, LLM | None]]:
    """One run of each mode: sequential, static batching, continuous batching (with the engine it used); with
    `graphs` (the engines replay CUDA graphs), continuous batching once more with --enforce-eager."""
    static_llm, continuous_llm = LLM(model, static=True, **engine), LLM(model, **engine)
    runs = [(serve_sequential(model, workload), None),
            (serve_engine(static_llm, workload, "static batching"), static_llm),
            (serve_engine(continuous_llm, workload, "continuous batching"), continuous_llm)]
    if graphs:
        eager_llm = LLM(model, **dict(engine, enforce_eager=True))
        runs.append((serve_engine(eager_llm, workload, "continuous, eager"), eager_llm))
    return runs


def serve_sequential(model, workload: list[Request]) -> Served:
    """`model.generate` one request at a time, each starting when it has arrived and its predecessor is done."""
    out = Served("sequential", [], [], [], 0.0, 0.0)
    start, cpu_start = time.perf_counter(), time.process_time()
    for request in tqdm(workload, desc="sequential", leave=False, disable=None):
        sleep_until(start + request.arrival)
        began = time.perf_counter()
        result = model.generate(request.prompt_ids, request.params)
        out.token_ids.append(result.token_ids)
        out.ttft_s.append(began - (start + request.arrival) + result.timings.ttft_s)  # queueing + prefill
        out.tpot_s.append(result.timings.tpot_s)
    out.wall_s, out.cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    return out


def print_memory(llm: LLM, model) -> None:
    """KV bytes held against bytes needed, averaged over the steps of the continuous run, beside the least that
    blocks can hold: every sequence's tokens in whole blocks, its last block part-filled (up to block_size - 1
    slots empty). Held above that least is memory the allocator wastes; a shared prefix may bring it below."""
    steps = [s for s in llm.step_log if s.live_tokens]
    bytes_per_token = llm.cache.bytes_per_block / llm.cache.block_size
    held = sum(s.blocks_held for s in steps) * llm.cache.bytes_per_block
    least = sum(s.blocks_needed for s in steps) * llm.cache.bytes_per_block
    live = sum(s.live_tokens for s in steps) * bytes_per_token
    slabs = sum(s.num_seqs for s in steps) * model.config.max_seq_len * bytes_per_token
    peak = max(s.blocks_held for s in steps) * llm.cache.bytes_per_block
    print(f"\nKV memory (continuous run, mean over {len(steps)} steps): held / live tokens need = {held / live:.3f} "
          f"(blocks of {llm.cache.block_size} hold at least {least / live:.3f}: each sequence's last block "
          f"part-filled); "
          f"contiguous {model.config.max_seq_len}-token slabs per sequence / live = {slabs / live:.1f}; "
          f"peak held {peak / 2**20:.1f} MiB of a {llm.cache.nbytes / 2**20:.1f} MiB pool")


def serve_one_by_one(llm: LLM, workload: list[Request], name: str) -> Served:
    """Each request sent when the previous one has finished: its TTFT is its own prefill, no queueing."""
    out = Served(name, [], [], [], 0.0, 0.0)
    start, cpu_start = time.perf_counter(), time.process_time()
    for request in tqdm(workload, desc=name, leave=False, disable=None):
        llm.add_request(request.prompt_ids, request.params)
        while llm.has_unfinished():
            for result in llm.step():
                if result.finished:
                    out.token_ids.append(result.token_ids)
                    out.ttft_s.append(result.metrics.ttft_s)
                    out.tpot_s.append(result.metrics.tpot_s)
    out.wall_s, out.cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    return out


def print_prefix_caching(model, rng, args, engine: dict) -> None:
    """TTFT of requests sharing a long prefix, with the prefix cache on and off."""
    suffix, max_tokens = (8, 32), 8
    prefix_len = min(args.prefix_len, model.config.max_seq_len - suffix[1] - max_tokens)
    prefix = random_prompt(model, rng, prefix_len)
    workload = [Request(0.0, prefix + random_prompt(model, rng, int(rng.integers(*suffix)) + 1)[1:],
                        SamplingParams(temperature=0, max_tokens=max_tokens)) for _ in range(args.prefix_requests)]
    runs = {cached: serve_one_by_one(LLM(model, prefix_caching=cached, **engine), workload,
                                     f"prefix cache {'on' if cached else 'off'}") for cached in (True, False)}
    on, off = runs[True], runs[False]
    same = "yes" if on.token_ids == off.token_ids else "NO"
    print(f"\nshared prefix of {prefix_len} tokens + {suffix[0]}-{suffix[1]} own tokens, {args.prefix_requests} "
          f"requests one after another: TTFT p50 {percentile_ms(off.ttft_s, 50):.1f} ms without prefix caching, "
          f"{percentile_ms(on.ttft_s, 50):.1f} ms with it: {percentile_ms(off.ttft_s, 50) / percentile_ms(on.ttft_s, 50):.1f}x faster "
          f"(mean {np.mean(off.ttft_s) / np.mean(on.ttft_s):.1f}x, the first request fills the cache); "
          f"same tokens: {same}")
