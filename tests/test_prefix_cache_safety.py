"""The prefix cache cannot be poisoned: blocks are named by SHA-256 and a hit compares token ids, so two prompts
are never answered from each other's keys and values, even when their blocks' names collide; a cache_salt keeps
a tenant's blocks to itself; and an ordinary shared prefix still hits.

The two 16-token blocks below collided under the old names, Python's hash((None, tuple(ids))): on a live
server the second prompt was answered from the first one's keys and values.
"""

from __future__ import annotations

import pytest

import tinyinfer
from tinyinfer.engine import LLM
from tinyinfer.engine import block_manager, scheduler
from tinyinfer.errors import TinyInferError
from tinyinfer.sampling import SamplingParams

FIRST = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1442, 1770, 1764, 259, 670, 63]
SECOND = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1485, 1008, 1478, 431, 355, 190]
TAIL = [40, 41, 42, 43]  # the prompt goes on past the first block, so that block is taken from the cache
GREEDY = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def model():
    return tinyinfer.load("shakespeare")


def run_one_after_another(llm: LLM, prompts: list[list[int]], salts=None):
    """Each prompt run to the end before the next is added, so a later one can hit the earlier one's blocks."""
    outputs = []
    for prompt, salt in zip(prompts, salts or [None] * len(prompts)):
        llm.add_request(prompt, GREEDY, cache_salt=salt)
        while llm.has_unfinished():
            outputs += [out for out in llm.step() if out.finished]
    return outputs


def test_the_colliding_blocks_are_served_separately_both_ways(model):
    for prompts in ([FIRST + TAIL, SECOND + TAIL], [SECOND + TAIL, FIRST + TAIL]):
        outputs = run_one_after_another(LLM(model), prompts)
        assert [out.token_ids for out in outputs] == [model.generate(p, GREEDY).token_ids for p in prompts]
        assert [out.metrics.cached_prompt_tokens for out in outputs] == [0, 0]


def test_a_name_collision_is_a_miss_because_the_token_ids_differ(model, monkeypatch):
    """Every block gets one name (the worst hash there is): the second prompt must still get its own answer."""
    def one_name(previous, token_ids):
        return b"x" * 32

    monkeypatch.setattr(block_manager, "block_hash", one_name)
    monkeypatch.setattr(scheduler, "block_hash", one_name)
    prompts = [FIRST + TAIL, SECOND + TAIL, FIRST + TAIL]
    outputs = run_one_after_another(LLM(model), prompts)
    assert [out.token_ids for out in outputs] == [model.generate(p, GREEDY).token_ids for p in prompts]
    assert [out.metrics.cached_prompt_tokens for out in outputs] == [0, 0, 16]  # the same block still hits


def test_an_ordinary_shared_prefix_still_hits_and_a_salt_refuses_to_share(model):
    prompt = FIRST + TAIL
    want = model.generate(prompt, GREEDY).token_ids
    cases = {(None, None): 16, ("a", "a"): 16, ("a", "b"): 0, (None, "a"): 0, ("a", None): 0}
    for salts, hit in cases.items():
        outputs = run_one_after_another(LLM(model), [prompt, prompt], list(salts))
        assert [out.token_ids for out in outputs] == [want, want]
        assert [out.metrics.cached_prompt_tokens for out in outputs] == [0, hit], salts


@pytest.mark.parametrize("salt", ["", 7, b"a"])
def test_a_cache_salt_is_a_non_empty_string(model, salt):
    with pytest.raises(TinyInferError, match="cache_salt"):
        LLM(model).add_request(FIRST, GREEDY, cache_salt=salt)
