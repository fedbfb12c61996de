"""GET /metrics: Prometheus text with vLLM's metric meanings under `tinyinfer:`, parsed by prometheus_client's own
parser, and every count checked against what the requests got (their usage) and what the engine did."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_server import post_concurrently
from test_server_abuse import get, serving

import tinyinfer
from tinyinfer.engine import LLM

N_BLOCKS = 8  # 128 tokens of 16: four requests of 3 + 60 tokens cannot all hold their blocks at once


@pytest.fixture(scope="module")
def model():
    return tinyinfer.load("shakespeare")


def finished(text: str) -> dict[str, float]:
    """tinyinfer:request_success_total by finished_reason."""
    return {sample.labels["finished_reason"]: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "tinyinfer:request_success_total"}


def scrape(server) -> dict[str, float]:
    """Sample name -> value (histograms as their _count and _sum); the content type is Prometheus text."""
    status, body = get(server, "/metrics")
    assert status == 200
    return {sample.name: sample.value for family in text_string_to_metric_families(body.decode())
            for sample in family.samples if not sample.labels or "le" not in sample.labels}


def test_metrics_count_what_the_requests_got_and_the_engine_did(model):
    with serving(LLM(model, n_blocks=N_BLOCKS), model_name="shakespeare") as server:
        before = scrape(server)
        assert before["tinyinfer:num_requests_running"] == before["tinyinfer:kv_cache_usage_perc"] == 0
        requests = [{"prompt": prompt, "max_tokens": 60, "ignore_eos": True, "seed": i}
                    for i, prompt in enumerate(["ROMEO:", "JULIET:", "HAMLET:", "KING LEAR:"])]
        answers = post_concurrently(server, "/v1/completions", requests)
        assert all(status == 200 for status, _ in answers)
        usage = [body["usage"] for _, body in answers]
        llm = server.engine.llm
        deadline = threading.Event()
        while llm.has_unfinished() and not deadline.wait(0.02):
            pass
        after = scrape(server)
        assert finished(get(server, "/metrics")[1].decode()) == {"length": 4}

    def grew(name):
        return after[name] - before.get(name, 0)

    assert grew("tinyinfer:prompt_tokens_total") == sum(u["prompt_tokens"] for u in usage)
    assert grew("tinyinfer:generation_tokens_total") == sum(u["completion_tokens"] for u in usage) == 240
    for histogram in ("time_to_first_token_seconds", "request_queue_time_seconds", "e2e_request_latency_seconds"):
        assert grew(f"tinyinfer:{histogram}_count") == 4 and after[f"tinyinfer:{histogram}_sum"] > 0
    assert grew("tinyinfer:time_per_output_token_seconds_count") == 4 * 59  # each gap between two tokens
    assert after["tinyinfer:num_preemptions_total"] == llm.scheduler.preemptions > 0  # the pool was too small
    assert after["tinyinfer:prefix_cache_queries_total"] == llm.scheduler.prompt_tokens_queried
    assert after["tinyinfer:prefix_cache_hits_total"] == llm.scheduler.prompt_tokens_hit
    assert after["tinyinfer:num_requests_running"] == after["tinyinfer:num_requests_waiting"] == 0
    assert after["tinyinfer:kv_cache_usage_perc"] == 0  # every block free again


def test_the_gauges_show_a_request_in_flight_and_its_abort(model):
    with serving(LLM(model), model_name="shakespeare") as server:
        connection = http.client.HTTPConnection(*server.server_address, timeout=60)
        connection.request("POST", "/v1/completions", json.dumps({"prompt": "ROMEO:", "max_tokens": 400,
                                                                 "ignore_eos": True, "stream": True}))
        response = connection.getresponse()
        response.readline()  # running
        during = scrape(server)
        assert during["tinyinfer:num_requests_running"] == 1 and during["tinyinfer:kv_cache_usage_perc"] > 0
        connection.close()  # the client leaves: aborted
        deadline = threading.Event()
        while scrape(server)["tinyinfer:kv_cache_usage_perc"] > 0 and not deadline.wait(0.05):
            pass
        assert scrape(server)["tinyinfer:num_requests_running"] == 0


def test_the_http_bench_runs_its_checks_and_passes():
    """`tinyinfer bench http`, small: every check it prints passes (no connection error, outputs equal to the
    offline run, every block free after), and it reports the latencies."""
    run = subprocess.run([sys.executable, "-m", "tinyinfer", "bench", "http", "--requests", "40", "--concurrency", "8",
                          "--max-tokens", "4:8", "--disconnect", "0.2"], capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "connection errors: 0" in run.stdout and "every KV block free" in run.stdout
    assert run.stdout.strip().endswith("all checks passed") and "TTFT (streams, client side): p50" in run.stdout
