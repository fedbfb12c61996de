"""`tinyinfer bench http`: a bounded load test of `tinyinfer serve` on loopback, checked, not only timed.

The server (the same `Server` the command runs) listens on 127.0.0.1 in this process; `--concurrency` client
threads, each with its own connections, send `--requests` requests between them: completions and chat,
streamed and whole, greedy and seeded sampling, and a `--disconnect` fraction of streams that hang up after
their first chunk. Then it checks what a server must get right under load:

- no connection error: every request was accepted and answered (the old hand-written server reset 12-20% of
  connections at 64 clients: its listen backlog was 5);
- every request that was not hung up on is complete (a finish reason; a stream ends with [DONE]) and equal to
  its offline result (`LLM.generate` on the same prompt ids: greedy and seeded requests are deterministic);
- afterwards every KV block is free, read from GET /metrics (`tinyinfer:kv_cache_usage_perc` 0, nothing
  running or waiting): the hung-up requests were aborted and gave their blocks back;

and prints the latency clients saw, p50 and p99 of time to first token (streams: request sent to first text)
and time per output token (the gaps after it, per request), with the server's own means from /metrics.

    python -m tinyinfer bench http                      # 64 clients, 500 requests, 10% hang up
    python -m tinyinfer bench http --requests 100 --concurrency 16

The exit status is 1 if a check fails.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.commands import at_least
from tinyinfer.engine import LLM
from tinyinfer.engine.limits import Limits
from tinyinfer.generation import resolve_params

NAMES = ["ROMEO", "JULIET", "HAMLET", "OTHELLO", "MACBETH", "LEAR", "PORTIA", "BRUTUS", "VIOLA", "PROSPERO"]


@dataclass
class Job:
    """One request of the load, and what became of it."""

    chat: bool
    stream: bool
    hang_up: bool
    body: dict
    status: int | None = None
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None
    ttft_s: float | None = None
    gaps_s: list[float] = field(default_factory=list)


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="built-in name, model folder, llama2.c .bin, or HF repo id "
                        "(default: the built-in model)")
    parser.add_argument("--requests", type=at_least(1), default=500)
    parser.add_argument("--concurrency", type=at_least(1), default=64, help="client threads sending at once")
    parser.add_argument("--disconnect", type=fraction, default=0.1, help="fraction of requests that are streams "
                        "hung up on after their first chunk")
    parser.add_argument("--max-tokens", type=token_range, default="8:48",
                        help="max_tokens of each request, uniform in MIN:MAX")
    parser.add_argument("--max-num-seqs", type=at_least(1), default=32, help="sequences the engine runs at once")
    parser.add_argument("--seed", type=at_least(0), default=0)


def fraction(text: str) -> float:
    """An argparse type: a number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction: give a number from 0 to 1")
    return value


def token_range(text: str) -> tuple[int, int]:
    """An argparse type: MIN:MAX (or N) token counts, 1 <= MIN <= MAX."""
    low, _, high = text.partition(":")
    try:
        low, high = int(low), int(high or low)
    except ValueError:
        low = high = 0
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN:MAX with 1 <= MIN <= MAX")
    return low, high


def run(args) -> int:
    model = tinyinfer.load(args.model)
    template = ChatTemplate.for_model(args.model, required=False)
    jobs = make_jobs(np.random.default_rng(args.seed), args.requests, args.disconnect, args.max_tokens,
                     template is not None)
    from tinyinfer.engine.server import Server  # noqa: PLC0415 - the HTTP stack loads only for this bench

    llm = LLM(model, max_num_seqs=args.max_num_seqs)
    server = Server(llm, port=0, model_name="bench", chat_template=template,
                    limits=Limits(max_queued=args.requests * 2))  # the bench measures the server, not its refusals
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    print(f"model: {args.model or 'built-in'}; server on {server.url}, engine: {args.max_num_seqs} sequences at once")
    print(f"load: {args.requests} requests from {args.concurrency} clients: {sum(j.chat for j in jobs)} chat, "
          f"{sum(j.stream for j in jobs)} streamed, {sum(j.hang_up for j in jobs)} hang up after the first chunk; "
          f"max_tokens {args.max_tokens[0]} to {args.max_tokens[1]}")
    try:
        start = time.perf_counter()
        send_all(server.server_address, jobs, args.concurrency)
        wall = time.perf_counter() - start
        metrics = settled_metrics(server.server_address)
    finally:
        server.shutdown()
        server.close()
    offline = offline_texts(model, template, jobs, args.max_num_seqs)
    return report(jobs, offline, metrics, wall)


def make_jobs(rng, n: int, disconnect: float, max_tokens: tuple[int, int], chat_ok: bool) -> list[Job]:
    """The load: half chat (when the model has a template), half streamed, half greedy, the rest seeded."""
    jobs = []
    for i in range(n):
        chat, hang_up = chat_ok and rng.random() < 0.5, rng.random() < disconnect
        stream = hang_up or rng.random() < 0.5
        name = NAMES[rng.integers(len(NAMES))]
        knobs = {"max_tokens": int(rng.integers(max_tokens[0], max_tokens[1] + 1))}
        knobs.update({"temperature": 0} if rng.random() < 0.5 else {"temperature": 0.8, "seed": i})
        if stream:
            knobs.update(stream=True, stream_options={"include_usage": True})
        text = f"{name}: speak of {NAMES[i % len(NAMES)].lower()}." if chat else f"{name}:"
        body = {"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}
        jobs.append(Job(chat, stream, hang_up, {**body, **knobs}))
    return jobs


def send_all(address, jobs: list[Job], concurrency: int) -> None:
    """`concurrency` client threads take the jobs in turn, each on its own (kept-alive) connection."""
    pending = iter(jobs)
    lock = threading.Lock()

    def client():
        connection = http.client.HTTPConnection(*address, timeout=120)
        while True:
            with lock:
                job = next(pending, None)
            if job is None:
                break
            try:
                send(connection, job)
            except (OSError, http.client.HTTPException, ValueError) as e:
                job.error = f"{type(e).__name__}: {e}"
            if job.stream or job.error:  # a stream ends with its connection
                connection.close()
                connection = http.client.HTTPConnection(*address, timeout=120)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def send(connection, job: Job) -> None:
    path = "/v1/chat/completions" if job.chat else "/v1/completions"
    sent = time.perf_counter()
    connection.request("POST", path, json.dumps(job.body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    job.status = response.status
    if not job.stream or response.status != 200:
        body = json.load(response)
        choice = body["choices"][0] if response.status == 200 else {}
        job.text = choice.get("message", {}).get("content") or "" if job.chat else choice.get("text", "")
        job.finish_reason = choice.get("finish_reason")
        return
    last = None
    for line in response:
        if not line.startswith(b"data: "):
            continue
        data = line[len(b"data: "):].strip()
        if data == b"[DONE]":
            job.finish_reason = job.finish_reason or "missing"
            return
        chunk = json.loads(data)
        for choice in chunk["choices"]:
            piece = choice["delta"].get("content") or "" if job.chat else choice["text"]
            if piece:
                now = time.perf_counter()
                if last is None:
                    job.ttft_s = now - sent
                else:
                    job.gaps_s.append(now - last)
                last = now
                job.text += piece
                if job.hang_up:
                    return  # hang up mid-stream: the caller closes the connection
            job.finish_reason = choice["finish_reason"] or job.finish_reason
    job.finish_reason = None  # no [DONE]: the stream was cut


def settled_metrics(address, seconds: float = 30) -> dict[str, float]:
    """GET /metrics once nothing is running or waiting (the hung-up requests' aborts run between steps)."""
    deadline = time.monotonic() + seconds
    while True:
        connection = http.client.HTTPConnection(*address, timeout=30)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
        connection.close()
        metrics = {name: float(value) for name, value in re.findall(r"^(tinyinfer:\w+) (\S+)$", text, re.M)}
        busy = metrics["tinyinfer:num_requests_running"] + metrics["tinyinfer:num_requests_waiting"]
        if (busy == 0 and metrics["tinyinfer:kv_cache_usage_perc"] == 0) or time.monotonic() > deadline:
            return metrics
        time.sleep(0.05)


def offline_texts(model, template, jobs: list[Job], max_num_seqs: int) -> list[str]:
    """Each request run offline through LLM.generate on the prompt ids the server makes of it."""
    prompts = []
    for job in jobs:
        if job.chat:
            rendered = template.render(job.body["messages"], add_generation_prompt=True)
            prompts.append(model.tokenizer.encode(rendered, add_special_tokens=False))
        else:
            prompts.append(model.tokenizer.encode(job.body["prompt"]))
    params = [resolve_params(model, None, {k: job.body[k] for k in ("max_tokens", "temperature", "seed")
                                            if k in job.body}) for job in jobs]
    return [out.text for out in LLM(model, max_num_seqs=max_num_seqs).generate(prompts, params)]


def percentiles(values: list[float]) -> str:
    if not values:
        return "none"
    p50, p99 = np.percentile(values, [50, 99])
    return f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"


def report(jobs: list[Job], offline: list[str], metrics: dict[str, float], wall: float) -> int:
    errors = [j for j in jobs if j.error]
    refused = [j for j in jobs if not j.error and j.status != 200]
    kept = [(j, want) for j, want in zip(jobs, offline) if not j.hang_up and not j.error]
    incomplete = [j for j, _ in kept if j.finish_reason not in ("stop", "length")]
    differ = [j for j, want in kept if j.text != want]
    free = metrics["tinyinfer:kv_cache_usage_perc"] == 0 and metrics["tinyinfer:num_requests_running"] == 0
    ttft = [j.ttft_s for j in jobs if j.ttft_s is not None and not j.hang_up]
    tpot = [float(np.mean(j.gaps_s)) for j in jobs if j.gaps_s and not j.hang_up]
    print(f"done in {wall:.1f} s: {len(jobs)} requests, {sum(len(j.text) for j in jobs)} characters")
    print(f"connection errors: {len(errors)}" + (f" (first: {errors[0].error})" if errors else ""))
    print(f"refused: {len(refused)}; complete: {len(kept) - len(incomplete)} of {len(kept)} not hung up on; "
          f"equal to the offline run: {len(kept) - len(differ)} of {len(kept)} "
          f"({sum(j.body['temperature'] == 0 for j, _ in kept)} greedy, the rest seeded)")
    print(f"after the load (GET /metrics): kv_cache_usage_perc {metrics['tinyinfer:kv_cache_usage_perc']:g}, "
          f"running {metrics['tinyinfer:num_requests_running']:g}, waiting {metrics['tinyinfer:num_requests_waiting']:g}, "
          f"preemptions {metrics['tinyinfer:num_preemptions_total']:g}: "
          + ("every KV block free" if free else "BLOCKS STILL HELD"))
    print(f"TTFT (streams, client side): {percentiles(ttft)}; "
          f"server mean {mean_of(metrics, 'time_to_first_token_seconds') * 1000:.1f} ms")
    print(f"TPOT (streams, client side): {percentiles(tpot)}; "
          f"server mean {mean_of(metrics, 'time_per_output_token_seconds') * 1000:.1f} ms")
    ok = not errors and not refused and not incomplete and not differ and free
    print("all checks passed" if ok else "CHECKS FAILED")
    return 0 if ok else 1


def mean_of(metrics: dict[str, float], histogram: str) -> float:
    count = metrics[f"tinyinfer:{histogram}_count"]
    return metrics[f"tinyinfer:{histogram}_sum"] / count if count else 0.0
