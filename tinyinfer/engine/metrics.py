"""The server's Prometheus metrics (GET /metrics), with vLLM's names and meanings under a `tinyinfer:` prefix,
so dashboards and autoscalers written for vLLM read them unchanged (vllm:X is tinyinfer:X):

    tinyinfer:num_requests_running       gauge      sequences in the running batch
    tinyinfer:num_requests_waiting       gauge      sequences queued for a batch slot or KV blocks
    tinyinfer:kv_cache_usage_perc        gauge      fraction of the KV pool's blocks held (0..1; cached free ones not)
    tinyinfer:prefix_cache_queries_total counter    prompt tokens looked up in the prefix cache
    tinyinfer:prefix_cache_hits_total    counter    of those, tokens found there (hit rate: hits / queries)
    tinyinfer:num_preemptions_total      counter    sequences preempted (their blocks freed, recomputed later)
    tinyinfer:prompt_tokens_total        counter    prompt tokens of admitted requests
    tinyinfer:generation_tokens_total    counter    tokens generated
    tinyinfer:request_success_total{finished_reason}  counter  requests finished, by "stop" or "length"
    tinyinfer:time_to_first_token_seconds      histogram  arrival (the HTTP request) to first token
    tinyinfer:time_per_output_token_seconds    histogram  each gap between two tokens of one sequence
    tinyinfer:request_queue_time_seconds       histogram  arrival to first scheduled
    tinyinfer:e2e_request_latency_seconds      histogram  arrival to finished

Everything is updated on the engine thread after each step (`EngineMetrics.after_step`), from the LLM's own
counters (prometheus_client's metrics are thread-safe), so a scrape never touches the LLM. Each server has its
own registry: two servers in one process (as in the tests) keep separate counts.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

PREFIX = "tinyinfer:"
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                   20.0, 40.0, 80.0)  # seconds; vLLM's, from a millisecond to over a minute


class EngineMetrics:
    """The metrics of one engine, in their own registry; `render()` is the /metrics body."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry

        def gauge(name, doc):
            return Gauge(PREFIX + name, doc, registry=r)

        def counter(name, doc):
            return Counter(PREFIX + name, doc, registry=r)

        def histogram(name, doc):
            return Histogram(PREFIX + name, doc, buckets=LATENCY_BUCKETS, registry=r)

        self.running = gauge("num_requests_running", "Sequences in the running batch.")
        self.waiting = gauge("num_requests_waiting", "Sequences waiting for a batch slot or KV blocks.")
        self.kv_usage = gauge("kv_cache_usage_perc", "Fraction of the KV cache's blocks held (1 = full).")
        self.prefix_queries = counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("prefix_cache_hits", "Prompt tokens found in the prefix cache.")
        self.preemptions = counter("num_preemptions", "Sequences preempted (blocks freed, to be recomputed).")
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of admitted requests.")
        self.generation_tokens = counter("generation_tokens", "Tokens generated.")
        self.success = Counter(PREFIX + "request_success", "Requests finished, by reason.", ["finished_reason"],
                               registry=r)
        self.ttft = histogram("time_to_first_token_seconds", "Arrival to first token.")
        self.tpot = histogram("time_per_output_token_seconds", "Gap between two tokens of one sequence.")
        self.queue_time = histogram("request_queue_time_seconds", "Arrival to first scheduled.")
        self.e2e = histogram("e2e_request_latency_seconds", "Arrival to finished.")
        self._seen = {"queried": 0, "hit": 0, "preemptions": 0, "generated": 0}  # the LLM's totals already counted
        self._last_token: dict[tuple[str, int], float] = {}  # (request id, sample) -> when it last gained a token

    def after_step(self, llm, outputs) -> None:
        """Fold one step's outputs (none after an abort) into the metrics, on the engine thread."""
        s, now = llm.scheduler, time.perf_counter()
        self.running.set(len(s.running))
        self.waiting.set(len(s.waiting))
        self.kv_usage.set(s.allocator.num_used / s.allocator.n_blocks)
        self._add(self.prefix_queries, "queried", s.prompt_tokens_queried)
        self._add(self.prefix_hits, "hit", s.prompt_tokens_hit)
        self._add(self.preemptions, "preemptions", s.preemptions)
        self._add(self.generation_tokens, "generated", llm.generated_tokens)
        for out in outputs:
            key, m = (out.request_id, out.index), out.metrics
            if key not in self._last_token:  # its first output: its first token was drawn in this step
                self.ttft.observe(m.ttft_s)
                self.queue_time.observe(m.queue_s)
                if out.index == 0:  # a prompt counts once, however many samples
                    self.prompt_tokens.inc(len(out.prompt_ids))
            elif out.new_token_ids:
                self.tpot.observe(now - self._last_token[key])
            self._last_token[key] = now
            if out.finished:
                self.e2e.observe(m.latency_s)
                if out.request_id not in llm.requests:  # its last sample: the request is done
                    self.success.labels("length" if out.finish_reason == "length" else "stop").inc()
        self._last_token = {key: t for key, t in self._last_token.items() if key[0] in llm.requests}  # live ones

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _add(self, counter, key: str, total: int) -> None:
        counter.inc(total - self._seen[key])
        self._seen[key] = total
