"""Stress: 220 requests through a deliberately small block pool, with shared prefixes, aborts, preemption.

Every request completes or is aborted as asked; completed ones equal their solo runs, aborted ones are a
prefix of theirs; and when the dust settles every block is back on the free list (no leak).
"""

from __future__ import annotations

import numpy as np
from engine_helpers import VOCAB, random_prompt, solo, stories  # noqa: F401 - stories is a fixture

from tinyinfer.engine import LLM
from tinyinfer.sampling import SamplingParams

N_REQUESTS = 220
N_BLOCKS = 40


def workload(rng: np.random.Generator):
    prefixes = [random_prompt(rng, int(n)) for n in (9, 20, 33)]
    prompts, params = [], []
    for i in range(N_REQUESTS):
        if rng.random() < 0.5:
            tail = rng.integers(3, VOCAB, size=int(rng.integers(0, 15))).tolist()
            prompts.append(prefixes[int(rng.integers(len(prefixes)))] + tail)
        else:
            prompts.append(random_prompt(rng, int(rng.integers(1, 50))))
        sampling = dict(temperature=0.8, top_p=0.95, seed=i) if i % 2 else dict(temperature=0)
        stop = [int(t) for t in rng.integers(3, VOCAB, size=3)]  # some requests end on a stop token
        params.append(SamplingParams(max_tokens=int(rng.integers(1, 25)), stop_token_ids=stop, **sampling))
    return prompts, params


def test_stress_small_pool_with_aborts(stories):
    rng = np.random.default_rng(7)
    prompts, params = workload(rng)
    llm = LLM(stories, block_size=4, n_blocks=N_BLOCKS, max_num_seqs=12, max_num_batched_tokens=24)
    pending = list(range(N_REQUESTS))
    to_abort = set(rng.choice(N_REQUESTS, size=25, replace=False).tolist())
    results: dict[str, object] = {}
    aborted: dict[str, list[int]] = {}
    while pending or llm.has_unfinished():
        for _ in range(int(rng.poisson(2))):  # arrivals between steps
            if pending:
                i = pending.pop(0)
                llm.add_request(prompts[i], params[i], request_id=str(i))
        for out in llm.step():
            results[out.request_id] = out
        for rid in [rid for rid in llm.requests if int(rid) in to_abort and rng.random() < 0.2]:
            aborted[rid] = list(results[rid].token_ids) if rid in results else []
            llm.abort(rid)
    stats = llm.stats()
    assert stats.preemptions > 0 and stats.prefix_cache_hit_rate > 0  # the hard paths were exercised
    assert llm.scheduler.allocator.num_free == N_BLOCKS  # no leaked block
    assert not llm.cache.tables and not llm.requests
    assert len(aborted) >= 10
    for i in range(N_REQUESTS):
        want = solo(stories, prompts[i], params[i])
        rid = str(i)
        if rid in aborted:
            assert aborted[rid] == want[0][:len(aborted[rid])], f"aborted request {i} went astray before its abort"
        else:
            out = results[rid]
            assert out.finished and (out.token_ids, out.finish_reason) == want, f"request {i} differs from solo"
