"""How many server replicas a load needs, decided from what each replica's GET /metrics says (chapter 15).

An autoscaler (Kubernetes' HPA, KEDA, a cron job) polls the replicas and sets their number. For an LLM server
the telling signals are not CPU or request rate but the engine's own: the *queue depth*
(`tinyinfer:num_requests_waiting`, sequences waiting for a batch slot or KV blocks) and the *KV-cache
utilisation* (`tinyinfer:kv_cache_usage_perc`). A queue means clients wait before their first token; a full
cache means the next long request preempts a running one. The rule is the HPA's proportional one on the
worst of the two, with a dead band so that a replica is not added and taken away on every poll:

    desired = ceil(replicas * max(waiting per replica / target waiting, kv usage / target kv usage))

Two replicas each with 6 waiting (target 4: a ratio of 1.5) need 3; at 70% of the KV cache (target 75%:
0.93, inside the dead band) and no queue they stay 2:

    >>> desired_replicas([{"tinyinfer:num_requests_waiting": 6, "tinyinfer:kv_cache_usage_perc": 0.5}] * 2)
    3
    >>> desired_replicas([{"tinyinfer:num_requests_waiting": 0, "tinyinfer:kv_cache_usage_perc": 0.7}] * 2)
    2
"""

from __future__ import annotations

import math
import re

METRIC_LINE = re.compile(r"^(tinyinfer:\w+) (\S+)$", re.M)


def parse_metrics(text: str) -> dict[str, float]:
    """The unlabelled samples of a /metrics page: name -> value.

    >>> parse_metrics("# TYPE tinyinfer:num_requests_waiting gauge\\ntinyinfer:num_requests_waiting 3.0\\n")
    {'tinyinfer:num_requests_waiting': 3.0}
    """
    return {name: float(value) for name, value in METRIC_LINE.findall(text)}


def desired_replicas(replicas: list[dict[str, float]], target_waiting: float = 4.0, target_kv: float = 0.75,
                     tolerance: float = 0.1, min_replicas: int = 1, max_replicas: int = 64) -> int:
    """The number of replicas for the load the `replicas`' metrics show (one dict per replica, parse_metrics).

    target_waiting: sequences waiting per replica that are acceptable (a short queue keeps batches full);
    target_kv: KV-cache utilisation to run at (headroom for the requests' growth). The ratio of load to
    target is taken for each signal, the larger one decides; within `tolerance` of 1 nothing changes.
    """
    # BEGIN EXERCISE 15.1: scale on queue depth and KV-cache utilisation
    n = len(replicas)
    waiting = sum(r["tinyinfer:num_requests_waiting"] for r in replicas) / n
    kv = sum(r["tinyinfer:kv_cache_usage_perc"] for r in replicas) / n
    ratio = max(waiting / target_waiting, kv / target_kv)
    if abs(ratio - 1) <= tolerance:
        return n
    return min(max_replicas, max(min_replicas, math.ceil(n * ratio)))
    # END EXERCISE 15.1
