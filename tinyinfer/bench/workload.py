"""The synthetic workload of `bench serve` (requests arriving as a Poisson process, prompts of random tokens), and
a run of it through the engine measured and printed: what `bench serve` and `bench serve --disaggregated`
(tinyinfer/bench/disaggregated.py) share.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from tinyinfer.bench.prompts import random_prompt
from tinyinfer.engine import LLM
from tinyinfer.engine.llm import StepRecord
from tinyinfer.errors import TinyInferError
from tinyinfer.sampling import SamplingParams


@dataclass
class Request:
    arrival: float  # seconds after the start of the run
    prompt_ids: list[int]
    params: SamplingParams


@dataclass
class Served:
    """One mode's run: per-request token ids, TTFT and TPOT, and the wall and CPU time it took."""

    name: str
    token_ids: list[list[int]]
    ttft_s: list[float]
    tpot_s: list[float]
    wall_s: float
    cpu_s: float  # this process's CPU time: steadier than wall time on a machine shared with other work
    steps: list[tuple[float, StepRecord]] = field(default_factory=list)  # an engine's steps: seconds, what ran

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)

    @property
    def throughput(self) -> float:
        return self.tokens / self.wall_s

    @property
    def cpu_throughput(self) -> float:
        return self.tokens / self.cpu_s


def workload_of(args, model, rng) -> list[Request]:
    return make_workload(model, rng, args.requests, args.rate, parse_range(args.prompt_len, "--prompt-len"),
                         parse_range(args.output_len, "--output-len"), args.temperature)


def parse_range(text: str, flag: str) -> tuple[int, int]:
    """"16:128" -> (16, 128)."""
    try:
        low, high = (int(part) for part in text.split(":"))
    except ValueError:
        raise TinyInferError(f"{flag} {text!r}: give MIN:MAX, e.g. 16:128") from None
    if not 1 <= low <= high:
        raise TinyInferError(f"{flag} {text!r}: need 1 <= MIN <= MAX")
    return low, high


def make_workload(model, rng, n: int, rate: float, prompt_len, output_len, temperature: float) -> list[Request]:
    arrivals = np.cumsum(rng.exponential(1 / rate, size=n))  # Poisson process: exponential gaps
    limit = model.config.max_seq_len
    requests = []
    for i, arrival in enumerate(arrivals):
        n_prompt = int(rng.integers(prompt_len[0], prompt_len[1] + 1))
        max_tokens = min(int(rng.integers(output_len[0], output_len[1] + 1)), limit - n_prompt)
        if max_tokens < 1:
            raise TinyInferError(f"--prompt-len reaches {n_prompt} tokens, the context window is {limit}: lower it")
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=i)
        requests.append(Request(float(arrival), random_prompt(model, rng, n_prompt), params))
    return requests


def serve_engine(llm: LLM, workload: list[Request], name: str) -> Served:
    """Feed the requests to the engine as they arrive; step it while it has work."""
    pending, finished, steps = deque(enumerate(workload)), {}, []
    start, cpu_start = time.perf_counter(), time.process_time()
    with tqdm(total=len(workload), desc=name, leave=False, disable=None) as bar:
        while pending or llm.has_unfinished():
            while pending and start + pending[0][1].arrival <= time.perf_counter():
                i, request = pending.popleft()
                llm.add_request(request.prompt_ids, request.params, request_id=str(i), arrival=start + request.arrival)
            if not llm.has_unfinished():
                sleep_until(start + pending[0][1].arrival)
                continue
            logged, began = len(llm.step_log), time.perf_counter()
            outputs = llm.step()
            if len(llm.step_log) > logged:  # a step ran
                steps.append((time.perf_counter() - began, llm.step_log[-1]))
            for out in outputs:
                if out.finished:
                    finished[int(out.request_id)] = out
                    bar.update(1)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    results = [finished[i] for i in range(len(workload))]
    return Served(name, [r.token_ids for r in results], [r.metrics.ttft_s for r in results],
                  [r.metrics.tpot_s for r in results], wall, cpu, steps)


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.perf_counter()))


def percentile_ms(values: list[float], q: float) -> float:
    return 1000 * float(np.percentile(values, q)) if values else float("nan")


def print_latency_table(runs: list[Served]) -> None:
    print(f"\n{'mode':<22}{'tokens':>8}{'wall s':>9}{'tok/s':>9}{'CPU s':>8}{'TTFT p50':>10}{'p99':>9}"
          f"{'TPOT p50':>10}{'p99':>9}  (ms)")
    for r in runs:
        tpot = [t for t, ids in zip(r.tpot_s, r.token_ids) if len(ids) >= 2]
        print(f"{r.name:<22}{r.tokens:>8}{r.wall_s:>9.2f}{r.throughput:>9.1f}{r.cpu_s:>8.2f}"
              f"{percentile_ms(r.ttft_s, 50):>10.1f}{percentile_ms(r.ttft_s, 99):>9.1f}"
              f"{percentile_ms(tpot, 50):>10.2f}{percentile_ms(tpot, 99):>9.2f}")
