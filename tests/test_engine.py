"""The serving engine: every request's output equals its solo run, whatever the batching did to it."""

from __future__ import annotations

import argparse
import dataclasses
import re

import numpy as np
import pytest
from conftest import shared_data
from engine_helpers import assert_same_as_solo, random_prompt, solo, stories  # noqa: F401 - stories is a fixture

import tinyinfer
from tinyinfer.bench import serve, step
from tinyinfer.bench import workload as bench_workload
from tinyinfer.engine import LLM
from tinyinfer.engine.llm import StepRecord
from tinyinfer.errors import TinyInferError
from tinyinfer.sampling import SamplingParams


def mixed_params(rng: np.random.Generator, n: int, max_tokens: int = 24) -> list[SamplingParams]:
    """Greedy and seeded sampling with assorted knobs, and assorted lengths."""
    out = []
    for i in range(n):
        tokens = int(rng.integers(1, max_tokens + 1))
        if i % 2:
            out.append(SamplingParams(temperature=0, max_tokens=tokens))
        else:
            out.append(SamplingParams(temperature=0.9, top_p=0.9, top_k=40, max_tokens=tokens, seed=int(i)))
    return out


@pytest.mark.exercise("10.1", "10.3")
def test_chunked_prefill_keeps_outputs_exact(stories):
    rng = np.random.default_rng(0)
    prompts = [random_prompt(rng, int(n)) for n in rng.integers(2, 70, size=10)]
    params = mixed_params(rng, len(prompts))
    llm = LLM(stories, block_size=8, max_num_batched_tokens=16)
    results = llm.generate(prompts, params)
    assert max(record.num_tokens for record in llm.step_log) <= 16  # the budget held ...
    assert max(len(p) for p in prompts) > 16  # ... although prompts are longer: they were chunked
    assert_same_as_solo(stories, prompts, params, results)


@pytest.mark.exercise("10.1")
def test_chunked_prefill_does_not_stall_running_decodes(stories):
    llm = LLM(stories, block_size=8, max_num_batched_tokens=16)
    short = llm.add_request([1, 50, 60], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    llm.step()  # the short request is now decoding
    long = llm.add_request(random_prompt(np.random.default_rng(1), 120), max_tokens=5, temperature=0)
    steps_to_first_token = 0
    while True:
        outs = {out.request_id: out for out in llm.step()}
        steps_to_first_token += 1
        assert len(outs[short].new_token_ids) == 1  # a decode token every single step
        if long in outs:
            break
    assert steps_to_first_token >= 120 // 15  # the prompt went through in budget-sized chunks


@pytest.mark.exercise("10.2", "10.3")
def test_preemption_recomputes_and_keeps_outputs_exact(stories):
    rng = np.random.default_rng(2)
    prompts = [random_prompt(rng, int(n)) for n in rng.integers(2, 30, size=12)]
    params = mixed_params(rng, len(prompts), max_tokens=30)
    llm = LLM(stories, block_size=4, n_blocks=16, max_num_batched_tokens=64, prefix_caching=False)
    results = llm.generate(prompts, params)
    assert llm.stats().preemptions > 0
    assert_same_as_solo(stories, prompts, params, results)
    assert llm.scheduler.allocator.num_free == 16


@pytest.mark.exercise("10.2")
def test_the_most_recently_admitted_request_is_preempted(stories):
    llm = LLM(stories, block_size=4, n_blocks=8, prefix_caching=False)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)  # 4 + 24 tokens: 7 blocks each
    first = llm.add_request([1, 5, 6, 7], params)
    second = llm.add_request([1, 8, 9, 10], params)
    seqs = {rid: llm.requests[rid][0] for rid in (first, second)}
    results = {}
    while llm.has_unfinished():
        for out in llm.step():
            results[out.request_id] = out
    assert seqs[first].metrics.preemptions == 0 and seqs[second].metrics.preemptions >= 1
    assert results[second].token_ids == solo(stories, [1, 8, 9, 10], params)[0]


@pytest.mark.exercise("10.3")
def test_prefix_cache_hits_keep_outputs_exact(stories):
    rng = np.random.default_rng(3)
    shared = random_prompt(rng, 37)
    prompts = [shared + rng.integers(3, 512, size=int(n)).tolist() for n in rng.integers(0, 12, size=8)]
    prompts += [shared[:16], shared[:17], shared]  # ends on a block boundary, one past it, the whole prefix
    params = mixed_params(rng, len(prompts))
    llm = LLM(stories, block_size=8, max_num_seqs=4)
    results = llm.generate(prompts, params)
    # the first four ran together with an empty cache; then every full block of the shared prefix is a hit,
    # except the block holding a prompt's last token, which must run to give the next token's logits
    assert [out.metrics.cached_prompt_tokens for out in results] == [0] * 4 + [32] * 4 + [8, 16, 32]
    assert llm.stats().prefix_cache_hit_rate > 0.3
    assert_same_as_solo(stories, prompts, params, results)


@pytest.mark.exercise("9.2")
def test_prefix_cache_is_reused_after_the_owner_finished(stories):
    prompt = random_prompt(np.random.default_rng(4), 40)
    llm = LLM(stories, block_size=8)
    first = llm.generate([prompt], max_tokens=3, temperature=0)[0]
    second = llm.generate([prompt], max_tokens=3, temperature=0)[0]
    assert first.metrics.cached_prompt_tokens == 0 and second.metrics.cached_prompt_tokens == 32
    assert first.token_ids == second.token_ids


def test_disabled_prefix_cache_never_hits(stories):
    prompt = random_prompt(np.random.default_rng(4), 40)
    llm = LLM(stories, block_size=8, prefix_caching=False)
    llm.generate([prompt, prompt], max_tokens=3, temperature=0)
    assert llm.stats().prefix_cache_hit_rate == 0


@pytest.mark.exercise("10.1")
def test_static_batching_is_exact_and_waits_for_the_whole_batch(stories):
    rng = np.random.default_rng(5)
    prompts = [random_prompt(rng, int(n)) for n in rng.integers(2, 30, size=8)]
    params = mixed_params(rng, len(prompts))
    llm = LLM(stories, block_size=8, max_num_seqs=4, static=True)
    results = llm.generate(prompts, params)
    first_batch_done = max(out.metrics.finished for out in results[:4])
    assert all(out.metrics.first_scheduled >= first_batch_done for out in results[4:])
    first_batch_steps = [s for s in llm.step_log if s.time <= first_batch_done]
    assert {s.num_seqs for s in first_batch_steps} == {4}  # early finishers' rows ran on as padding
    assert llm.scheduler.allocator.num_free == llm.cache.n_blocks
    assert_same_as_solo(stories, prompts, params, results)


@pytest.mark.exercise("10.2")
def test_static_batching_under_preemption_is_exact_and_leaks_nothing(stories):
    rng = np.random.default_rng(8)
    prompts = [random_prompt(rng, int(n)) for n in rng.integers(2, 20, size=10)]
    params = mixed_params(rng, len(prompts), max_tokens=30)
    llm = LLM(stories, block_size=4, n_blocks=24, max_num_seqs=5, static=True, prefix_caching=False)
    results = llm.generate(prompts, params)
    assert llm.stats().preemptions > 0
    assert_same_as_solo(stories, prompts, params, results)
    assert llm.scheduler.allocator.num_free == 24


def test_stop_tokens_and_eos_end_requests_like_solo_runs(stories):
    prompt = [1, 100, 200]
    greedy = solo(stories, prompt, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))[0]
    params = [SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[greedy[5]]),
              SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)]
    results = LLM(stories).generate([prompt, prompt], params)
    assert results[0].finish_reason == "stop" and results[0].token_ids == greedy[:5]
    assert results[1].finish_reason == "length" and results[1].token_ids == greedy
    assert_same_as_solo(stories, [prompt, prompt], params, results)


def test_a_request_that_can_never_fit_the_pool_is_rejected_at_submission(stories):
    llm = LLM(stories, block_size=16, n_blocks=4)
    with pytest.raises(TinyInferError, match=r"needs 5 KV blocks .* only 4: .*n_blocks"):
        llm.add_request([1] * 60, max_tokens=5)
    assert not llm.has_unfinished()
    assert llm.generate([[1] * 60], max_tokens=4, temperature=0)[0].finished  # 64 tokens fit exactly


def test_a_request_beyond_the_context_window_is_rejected(stories):
    with pytest.raises(TinyInferError, match="context window"):
        LLM(stories).add_request([1] * 500, max_tokens=20)


def test_invalid_sampling_params_are_rejected_per_request(stories):
    llm = LLM(stories)
    good = SamplingParams(temperature=0.8, seed=3, max_tokens=10)
    first = llm.add_request([1, 30, 40], good)
    llm.step()
    with pytest.raises(TinyInferError, match="top_p"):
        llm.add_request([1, 2], top_p=1.5)
    with pytest.raises(TinyInferError, match="logit_bias names token id 9999"):
        llm.add_request([1, 2], SamplingParams(logit_bias={9999: 1.0}))
    with pytest.raises(TinyInferError, match="stop strings need the model's tokenizer"):
        llm.add_request([1, 2], SamplingParams(stop=["."]))
    second = llm.add_request([1, 31, 41], good)
    results = {}
    while llm.has_unfinished():
        results.update((out.request_id, out) for out in llm.step())
    assert results[first].token_ids == solo(stories, [1, 30, 40], good)[0]
    assert results[second].token_ids == solo(stories, [1, 31, 41], good)[0]


def test_abort_in_static_batching_frees_blocks_at_once_but_a_finished_member_keeps_its_slot(stories):
    llm = LLM(stories, block_size=4, n_blocks=40, max_num_seqs=3, static=True)
    short, long, doomed = (llm.add_request(random_prompt(np.random.default_rng(i), 6), max_tokens=m, temperature=0,
                                           ignore_eos=True) for i, m in enumerate((2, 12, 12)))
    for _ in range(3):
        llm.step()
    allocator = llm.scheduler.allocator
    assert short not in llm.requests and 40 - allocator.num_free == 3 * 2  # finished, its 2 blocks still held
    llm.abort(doomed)
    assert 40 - allocator.num_free == 2 * 2
    while llm.has_unfinished():
        llm.step()
    assert long not in llm.requests and allocator.num_free == 40


def test_abort_frees_blocks_at_once(stories):
    llm = LLM(stories, block_size=4, n_blocks=40, max_num_seqs=2)
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    ids = [llm.add_request(random_prompt(np.random.default_rng(i), 20), params) for i in range(3)]
    llm.step()
    llm.step()
    allocator = llm.scheduler.allocator
    held = 40 - allocator.num_free
    assert held > 0 and len(llm.scheduler.waiting) == 1
    llm.abort(ids[2])  # still waiting: it held nothing
    llm.abort(ids[0])
    assert 40 - allocator.num_free < held and llm.requests.keys() == {ids[1]}
    llm.abort(ids[1])
    llm.abort("no-such-request")
    assert allocator.num_free == 40 and not llm.has_unfinished() and llm.step() == []


def test_metrics_tell_the_story_of_each_request(stories):
    rng = np.random.default_rng(6)
    prompts = [random_prompt(rng, 20) for _ in range(6)]
    llm = LLM(stories, max_num_seqs=2)
    results = llm.generate(prompts, max_tokens=8, temperature=0, ignore_eos=True)
    for out in results:
        m = out.metrics
        assert m.output_tokens == len(out.token_ids) == 8
        assert 0 <= m.queue_s <= m.ttft_s <= m.latency_s and m.tpot_s > 0
    assert results[-1].metrics.queue_s > results[0].metrics.queue_s  # the last pair waited for two batches
    stats = llm.stats()
    assert stats.generated_tokens == 48 and stats.throughput > 0 and stats.kv_utilisation == 0


def test_streaming_outputs_add_up_to_the_final_result(stories):
    llm = LLM(stories)
    rid = llm.add_request([1, 70, 80], SamplingParams(temperature=0.7, seed=9, max_tokens=12))
    streamed, final = [], None
    while llm.has_unfinished():
        for out in llm.step():
            streamed += out.new_token_ids
            final = out
    assert final.request_id == rid and final.finished and streamed == final.token_ids


def test_n_samples_of_one_request_equal_the_solo_samples(stories):
    params = SamplingParams(temperature=1.0, seed=11, max_tokens=10, n=3)
    prompt = [1, 90, 91, 92]
    llm = LLM(stories, block_size=4)
    samples = llm.generate([prompt, [1, 5]], [params, SamplingParams(temperature=0, max_tokens=4)])[0]
    want = stories.generate(prompt, params)
    assert [out.index for out in samples] == [0, 1, 2]
    assert [out.token_ids for out in samples] == [r.token_ids for r in want]
    assert len({tuple(out.token_ids) for out in samples}) > 1  # three different draws


def test_bench_serve_runs_all_modes_and_finds_the_same_tokens(capsys):
    """`python -m tinyinfer bench serve ...` as the user runs it: its stdout, line by line."""
    from tinyinfer.cli import main  # noqa: PLC0415

    assert main(["bench", "serve", "--model", str(shared_data("models/stories260K/stories260K.bin")),
                 "--requests", "6", "--concurrency", "4", "--prompt-len", "8:24", "--output-len", "2:8",
                 "--prefix-len", "40", "--prefix-requests", "3", "--block-size", "8"]) == 0
    out = capsys.readouterr().out
    for line in ("sequential", "static batching", "continuous batching", "held / live tokens need", "steady state (4",
                 "shared prefix of 40 tokens"):
        assert line in out
    assert "same tokens in all 3 modes: yes" in out or "a float-rounding tie" in out
    split = re.search(r"continuous batching's steps: ([\d.]+) s in (\d+) with prompt tokens, ([\d.]+) s in (\d+) of 4 "
                      r"decoding sequences, ([\d.]+) s in (\d+) of fewer .*, of ([\d.]+) s", out)
    prompt_s, prompt_steps, full_s, full_steps, fewer_s, fewer_steps, wall = map(float, split.groups())
    assert prompt_steps >= 1 and full_steps + fewer_steps >= 1 and prompt_s + full_s + fewer_s <= wall
    bound = re.search(r"weight products alone \(timed at 1 to (\d+) rows, linear in between\): ([\d.e-]+) s of "
                      r"sequential's ([\d.e-]+) s, ([\d.e-]+) s of continuous batching's ([\d.e-]+) s: .* at most "
                      r"([\d.]+)x sequential as it ran \(([\d.]+)x, products against products\)", out)
    most_rows, alone, seq_wall, batched, cont_wall, ceiling, products_ratio = map(float, bound.groups())
    assert most_rows >= 8  # the longest prompt, at least
    assert 0 < alone < seq_wall and 0 < batched < cont_wall  # a part of each run, never more than all of it
    # the figures are printed to 3 significant digits, the ratios to 0.1
    assert ceiling == pytest.approx(seq_wall / batched, rel=0.02, abs=0.06)
    assert products_ratio == pytest.approx(alone / batched, rel=0.02, abs=0.06)
    kv = re.search(r"held / live tokens need = ([\d.]+) \(blocks of 8 hold at least ([\d.]+)", out)
    held, least = map(float, kv.groups())
    assert 1.0 < least <= held <= least + 0.0005  # random prompts share no block: the allocator holds no spare block


def test_bench_serve_bounds_the_run_by_its_products_alone(capsys):
    """The ceiling adds what each mode computed: sequentially a prefill of each prompt (its tokens, one LM-head
    row) and then one row per further token; continuously the logged steps (tokens through the layers, one
    LM-head row per sequence). With products priced at rows + 10 x LM-head rows, by hand."""
    class Products:  # what ProductTimes gives, priced by hand
        most_rows = 8

        def __call__(self, rows: int, head_rows: int) -> float:
            return rows + 10 * head_rows

    workload = [bench_workload.Request(0.0, prompt, SamplingParams()) for prompt in ([1, 2, 3], [4] * 5)]
    sequential = bench_workload.Served("sequential", [[7, 8], [9]], [], [], 78.0, 78.0)
    steps = [(0.1, StepRecord(0.0, 2, 8, 0, 0, 0)), (0.1, StepRecord(0.0, 2, 2, 0, 0, 0))]  # 2 sequences: 8, 2 tokens
    continuous = bench_workload.Served("continuous batching", [], [], [], 13.0, 13.0, steps)
    serve.print_products_bound(Products(), workload, sequential, continuous)
    # sequential: (3 + 10) + (1 + 10) for the first request, (5 + 10) for the second; continuous: 28 + 22
    assert ("weight products alone (timed at 1 to 8 rows, linear in between): 39 s of sequential's 78 s, 50 s of "
            "continuous batching's 13 s: with no cost but its products, continuous batching would be at most 1.6x "
            "sequential as it ran (0.8x, products against products)") in capsys.readouterr().out


def test_product_times_read_between_the_rows_timed_and_keep_the_fastest(stories, monkeypatch):
    """Timed at 0, 1, 2, 4 ... rows and at the most, linear in between; a second timing that comes out slower
    (a busy machine) changes nothing, a faster one replaces the first."""
    slowdown = [1.0]
    monkeypatch.setattr(serve.ProductTimes, "_fastest", lambda self, rows, head: slowdown[0] * (rows + 10 * head))
    times = serve.ProductTimes(stories, 6, 3)
    assert times.rows == [0, 1, 2, 4, 6] and times.head_rows == [0, 1, 2, 3]
    times.time()
    assert times(3, 0) == 3 and times(5, 2) == 25 and times(0, 0) == 0
    slowdown[0] = 2.0
    times.time()
    assert times(5, 2) == 25
    slowdown[0] = 0.5
    times.time()
    assert times(5, 2) == 12.5


def test_bench_serve_tells_a_rounding_tie_from_a_bug(stories, capsys):
    rng = np.random.default_rng(9)
    workload = bench_workload.make_workload(stories, rng, 4, 100.0, (8, 16), (6, 10), 0.8)
    workload[2].params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    reference = serve.serve_sequential(stories, workload)
    assert serve.check_same_tokens(stories, workload, reference, [bench_workload.serve_engine(LLM(stories), workload, "x")])
    broken = bench_workload.Served("broken", [list(ids) for ids in reference.token_ids], [], [], 1.0, 1.0)
    prompt = workload[2].prompt_ids + reference.token_ids[2][:3]
    broken.token_ids[2][3] = int(stories.logits(prompt)[-1].argmin())  # greedy would never pick the least likely
    assert not serve.check_same_tokens(stories, workload, reference, [broken])
    assert "same tokens in all 2 modes: 3 of 4 requests; the others differ at draws far from any decision boundary: a BUG" \
        in capsys.readouterr().out


def test_bench_step_times_each_part_without_disturbing_the_engine(stories, capsys):
    """The parts are timed on the engine's own sequences (the attention rewrites what the cache holds): after
    the timing, every sequence goes on to the tokens it gets alone."""
    prompts = [serve.random_prompt(stories, np.random.default_rng(i), 10 + 3 * i) for i in range(4)]
    params = SamplingParams(temperature=0.8, max_tokens=12, ignore_eos=True)
    llm = step.filled_engine(stories, prompts, params)
    for parts in step.time_parts(stories, llm, repeats=2):  # wall, then CPU
        assert parts.pop("detokenizing") == 0.0  # this model has no tokenizer: nothing to detokenize
        assert all(seconds > 0 for seconds in parts.values()), parts
    finished = {}
    while llm.has_unfinished():
        finished.update((out.request_id, out.token_ids) for out in llm.step() if out.finished)
    for i, prompt in enumerate(prompts):
        assert finished[str(i)] == stories.generate(prompt, dataclasses.replace(params, seed=i)).token_ids
    parser = argparse.ArgumentParser()
    step.add_arguments(parser)
    args = parser.parse_args(["--model", str(shared_data("models/stories260K/stories260K.bin")), "--concurrency", "3",
                              "--context", "16", "--repeats", "2"])
    assert step.run(args) == 0
    out = capsys.readouterr().out
    for line in ("one engine step (3 tokens)", "weight products", "attention", "sampling (3 rows)", "at most",
                 "engine step / its weight products"):
        assert line in out


def test_text_prompts_stop_strings_and_streamed_text_match_model_generate():
    model = tinyinfer.load(shared_data("models/stories260K/stories260K.bin"))
    prompts = ["Once upon a time", "Tom had a big dog", "The sun was"]
    greedy_text = model.generate(prompts[0], max_tokens=40, temperature=0).text
    stop = greedy_text[20:24]  # a stop string the greedy continuation of the first prompt is sure to meet
    params = [SamplingParams(temperature=0, max_tokens=40, stop=[stop]),
              SamplingParams(temperature=0.8, seed=5, max_tokens=30),
              SamplingParams(temperature=0, max_tokens=25, stop=["\n", "."])]
    results = LLM(model, block_size=8).generate(prompts, params)
    for prompt, p, out in zip(prompts, params, results):
        want = model.generate(prompt, p)
        assert (out.text, out.token_ids, out.finish_reason) == (want.text, want.token_ids, want.finish_reason)
    assert results[0].finish_reason == "stop" and stop not in results[0].text


def test_llm_builds_the_engine_from_a_name_or_a_path_as_vllm_does():
    """LLM("shakespeare") and LLM(model=folder) load the model themselves, and generate what the model does."""
    from tinyinfer.resolve import builtin_models  # noqa: PLC0415

    greedy = SamplingParams(max_tokens=8, temperature=0)
    want = tinyinfer.load("shakespeare").generate("ROMEO:", greedy).token_ids
    for llm in (LLM("shakespeare"), LLM(model=builtin_models()["shakespeare"])):
        assert llm.generate(["ROMEO:"], greedy)[0].token_ids == want
