"""Chapter 15's autoscaling rule: replicas from the queue depth and KV-cache utilisation in /metrics."""

from __future__ import annotations

import pytest

from tinyinfer.engine.autoscale import desired_replicas, parse_metrics


def replica(waiting: float, kv: float) -> dict[str, float]:
    return {"tinyinfer:num_requests_waiting": waiting, "tinyinfer:kv_cache_usage_perc": kv}


@pytest.mark.exercise("15.1")
def test_a_queue_adds_replicas_in_proportion():
    assert desired_replicas([replica(8, 0.2)] * 2) == 4  # 8 waiting each, target 4: twice the replicas
    assert desired_replicas([replica(5, 0.2), replica(0, 0.2)]) == 2  # the mean, 2.5 each, is under the target


@pytest.mark.exercise("15.1")
def test_a_full_kv_cache_adds_replicas_even_without_a_queue():
    assert desired_replicas([replica(0, 0.99)] * 3) == 4  # 0.99 / 0.75 = 1.32 -> ceil(3.96)
    assert desired_replicas([replica(0, 0.95)] * 3, target_kv=0.9) == 3  # 1.06: inside the band, no change


@pytest.mark.exercise("15.1")
def test_idle_replicas_scale_down_but_not_below_the_minimum():
    assert desired_replicas([replica(0, 0.1)] * 8) == 2  # 0.1 / 0.75 of 8 replicas: ceil(1.07)
    assert desired_replicas([replica(0, 0.0)] * 8) == 1
    assert desired_replicas([replica(0, 0.0)] * 8, min_replicas=3) == 3
    assert desired_replicas([replica(400, 1.0)] * 8, max_replicas=10) == 10


def test_metrics_text_is_parsed_to_its_unlabelled_samples():
    text = ("# HELP tinyinfer:num_requests_waiting Sequences waiting.\n# TYPE tinyinfer:num_requests_waiting gauge\n"
            "tinyinfer:num_requests_waiting 3.0\ntinyinfer:e2e_request_latency_seconds_bucket{le=\"0.1\"} 2.0\n"
            "tinyinfer:kv_cache_usage_perc 0.25\n")
    assert parse_metrics(text) == {"tinyinfer:num_requests_waiting": 3.0, "tinyinfer:kv_cache_usage_perc": 0.25}
