"""Every sampling parameter of `/v1/completions` has its effect: the text the server answers differs from the
answer without it, and equals `model.generate`'s with the same setting (so a field that is accepted and then
dropped, or mapped onto the wrong SamplingParams field, fails here). The distribution each sampling control
draws from is checked in tests/test_sampling_statistics.py; these check the plumbing of every field.
"""

from __future__ import annotations

import pytest
from test_sampling_statistics import OFF, PROMPT, completion, model, server  # noqa: F401 - fixtures
from tiny_models import tiny_checkpoint  # noqa: F401 - a fixture

BASE = {**OFF, "temperature": 1.5, "seed": 3, "max_tokens": 16}  # a seeded sampling baseline (the checkpoint is greedy)
# request field -> (its value in the request, the keywords model.generate takes for it)
FIELDS = {
    "temperature": (0.4, dict(temperature=0.4)),
    "top_k": (3, dict(top_k=3)),
    "top_p": (0.5, dict(top_p=0.5)),
    "min_p": (0.1, dict(min_p=0.1)),
    "repetition_penalty": (3.0, dict(repetition_penalty=3.0)),
    "presence_penalty": (2.0, dict(presence_penalty=2.0)),
    "frequency_penalty": (2.0, dict(frequency_penalty=2.0)),
    "logit_bias": ({"26": 5.0, "70": 5.0}, dict(logit_bias={26: 5.0, 70: 5.0})),
    "seed": (4, dict(seed=4)),
    "max_tokens": (5, dict(max_tokens=5)),
    "ignore_eos": (False, dict(ignore_eos=False)),
}


def answer(server, **fields) -> dict:
    return completion(server, {"prompt": PROMPT, "ignore_eos": True, **BASE, **fields})["choices"]


@pytest.mark.parametrize("field", FIELDS)
def test_each_field_answers_what_generate_gives_and_changes_the_text(field, model, server):
    value, setting = FIELDS[field]
    base = answer(server)[0]["text"]
    assert base == model.generate(PROMPT, ignore_eos=True, **BASE).text
    text = answer(server, **{field: value})[0]["text"]
    assert text == model.generate(PROMPT, **{"ignore_eos": True, **BASE, **setting}).text
    if field != "ignore_eos":  # its effect needs an EOS drawn; tests/test_cli_flags.py shows it on the CLI
        assert text != base, f"{field}={value!r} changed nothing"


def test_stop_cuts_where_generate_cuts(model, server):
    base = answer(server)[0]["text"]
    stop = base[4:6]
    choice = answer(server, stop=[stop])[0]
    assert choice["text"] == model.generate(PROMPT, stop=[stop], ignore_eos=True, **BASE).text
    assert choice["finish_reason"] == "stop" and len(choice["text"]) <= 4 < len(base)


def test_stop_token_ids_end_where_generate_ends(model, server):
    base = model.generate(PROMPT, ignore_eos=True, **BASE)
    stop = base.token_ids[3]  # the baseline's 4th token
    choice = answer(server, stop_token_ids=[stop])[0]
    cut = model.generate(PROMPT, stop_token_ids=[stop], ignore_eos=True, **BASE)
    assert choice["text"] == cut.text and choice["finish_reason"] == "stop" and len(cut.token_ids) <= 3


def test_n_answers_the_samples_generate_gives(model, server):
    choices = answer(server, n=3)
    texts = [out.text for out in model.generate(PROMPT, n=3, ignore_eos=True, **BASE)]
    assert [c["text"] for c in choices] == texts and len(set(texts)) == 3


def test_logprobs_are_generates(model, server):
    choice = answer(server, logprobs=2)[0]
    result = model.generate(PROMPT, logprobs=2, ignore_eos=True, **BASE)
    assert choice["logprobs"]["token_logprobs"] == [c.logprob for c in result.logprobs]
    def text(i):  # the completions API keys the alternatives by text (tokens of one text collapse, as in OpenAI's)
        return model.tokenizer.token_bytes(i).decode("utf-8", "replace")

    assert choice["logprobs"]["top_logprobs"] == [{text(i): lp for i, lp in c.top_logprobs} for c in result.logprobs]
