"""The sampled distribution, control by control, through every door a user draws from: `model.generate`, the
engine (`LLM.generate`) and the server (`/v1/completions`).

Each test draws N two-token continuations of one prompt from the tiny Llama checkpoint, with fixed seeds, and
compares them with the exact distribution computed here independently of tinyinfer's sampler: the model's
logits put through transformers' own logits processors (repetition penalty, temperature, top-k, top-p, min-p)
and OpenAI's formulas (logit_bias, presence and frequency penalties). Token 1 is tested against its exact
distribution and token 2 against its exact distribution given token 1 (the penalties only act on generated
tokens); the chi-square statistics add up over the cells and the groups (tests/chi_square.py).

The prompt's likeliest next token (p = 0.59) is one of its own tokens, so the repetition penalty moves the
distribution, and the controls are chosen so each moves it by a total variation above 0.05 (a guard test).
A draw that forgets to normalise its CDF (`draw`, which `model.generate` uses, and `sample_batch`, which the
engine and so the server use, both in tinyinfer/sampling.py, get unnormalised weights whose sum is at least 1)
never reaches the tokens with the highest ids: chi-square in the thousands, p = 0 (tests/mutate.py plants both).
"""

from __future__ import annotations

import json
import threading
import urllib.request

import numpy as np
import pytest
import torch
from chi_square import ALPHA, chi_square, chi_square_sf
from tiny_models import prompt_ids, tiny_checkpoint  # noqa: F401 - a fixture
from transformers.generation import logits_process

import tinyinfer
from tinyinfer.engine import LLM
from tinyinfer.engine.server import Server
from tinyinfer.sampling import SamplingParams

PROMPT = prompt_ids(6, seed=100)  # its likeliest next token (26) is its own 5th
N = 1000  # continuations per test; a planted bug's chi-square is in the hundreds, a correct sampler's ~dof
SEED = 1
OFF = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0)  # every control at "off"
SERVER_N = 50  # samples per server request (the engine runs them at once): N / SERVER_N requests
CONTROLS = {
    "temperature": dict(temperature=1.6),
    "top_k": dict(top_k=4),
    "top_p": dict(top_p=0.6),  # keeps the top token (0.59) and the one that crosses 0.6
    "min_p": dict(min_p=0.04),
    "repetition_penalty": dict(repetition_penalty=2.0),
    "presence_frequency_penalties": dict(presence_penalty=1.5, frequency_penalty=1.0, logit_bias={26: 3.0}),
    "logit_bias": dict(logit_bias={26: -2.0, 70: 2.5}),
}
# what each control is measured against in the guard: the default, or for the penalties the same bias without them
# (the bias makes token 26 likely twice running, so that penalising the repeat matters)
WITHOUT = {"presence_frequency_penalties": {"logit_bias": {26: 3.0}}}


# --- the exact distribution, without tinyinfer's sampler ------------------------------------------------------

def exact_next(logits: np.ndarray, control: dict, output_ids: list[int]) -> np.ndarray:
    """The probabilities of the next token after PROMPT + output_ids under `control`.  [V] -> [V]"""
    x = torch.from_numpy(logits.astype(np.float64))[None].clone()  # [1, V]
    for token, bias in control.get("logit_bias", {}).items():
        x[0, token] += bias
    seen = torch.tensor([PROMPT + output_ids])
    if control.get("repetition_penalty", 1.0) != 1.0:
        x = logits_process.RepetitionPenaltyLogitsProcessor(control["repetition_penalty"])(seen, x)
    counts = torch.from_numpy(np.bincount(output_ids, minlength=x.shape[1]).astype(np.float64))[None]  # [1, V]
    x = x - control.get("presence_penalty", 0.0) * (counts > 0) - control.get("frequency_penalty", 0.0) * counts
    x = logits_process.TemperatureLogitsWarper(control.get("temperature", 1.0))(seen, x)
    if control.get("top_k"):
        x = logits_process.TopKLogitsWarper(control["top_k"])(seen, x)
    if control.get("top_p", 1.0) < 1.0:
        x = logits_process.TopPLogitsWarper(control["top_p"])(seen, x)
    if control.get("min_p"):
        x = logits_process.MinPLogitsWarper(control["min_p"])(seen, x)
    return torch.softmax(x, -1)[0].numpy()


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return tinyinfer.load(tiny_checkpoint("llama"))


@pytest.fixture(scope="module")
def next_logits(model):
    """The model's logits after PROMPT, and after PROMPT + [t] for every token t: (logits [V], [V, V])."""
    after = np.stack([model.logits(PROMPT + [t])[-1] for t in range(model.config.vocab_size)])  # [V, V]
    return model.logits(PROMPT)[-1], after


def exact_pairs(next_logits, control: dict) -> np.ndarray:
    """P(token 1 = a, token 2 = b) under `control`.  -> [V, V]"""
    first, after = next_logits
    p1 = exact_next(first, control, [])  # [V]
    return np.stack([p1[a] * exact_next(after[a], control, [a]) if p1[a] > 0 else np.zeros_like(p1)
                     for a in range(len(p1))])  # [V, V]


def assert_pairs_fit(pairs: list[tuple], labels: list, exact: np.ndarray) -> float:
    """The sampled (label of token 1, label of token 2) pairs fit `exact` [V, V]: token 1's counts its marginal,
    and each first label's second labels their conditional distribution, by one chi-square over all the cells.
    `labels[t]` names token t as the sampler's user sees it (its id, or its text where only text comes back)."""
    names = sorted(set(labels), key=str)
    index = {name: i for i, name in enumerate(names)}
    of = np.array([index[label] for label in labels])  # [V] token -> cell
    joint = np.zeros((len(names), len(names)))  # exact, by cells
    np.add.at(joint, (of[:, None], of[None, :]), exact)
    counts = np.zeros_like(joint)
    for a, b in pairs:
        counts[index[a], index[b]] += 1
    impossible = counts[joint == 0].sum()
    assert impossible == 0, f"{impossible:.0f} pairs were drawn that have probability 0"
    first = joint.sum(axis=1)  # [cells]
    statistic, dof = chi_square(counts.sum(axis=1)[first > 0], first[first > 0])
    for a in np.flatnonzero(first):
        seen = joint[a] > 0
        if counts[a].sum() > 0 and seen.sum() > 1:
            s, d = chi_square(counts[a][seen], joint[a][seen] / first[a])
            statistic, dof = statistic + s, dof + d
    p_value = chi_square_sf(statistic, dof)
    assert p_value > ALPHA, f"chi-square {statistic:.1f} on {dof} degrees of freedom: p = {p_value:.3g}"
    return p_value


def params(control: dict, **more) -> SamplingParams:
    return SamplingParams(max_tokens=2, ignore_eos=True, **control, **more)


# --- the three doors ----------------------------------------------------------------------------------------

def test_the_controls_move_the_distribution(next_logits):
    """Guard: each control changes the exact distribution of the pairs, so a door that dropped it would fail."""
    for name, control in CONTROLS.items():
        without = exact_pairs(next_logits, WITHOUT.get(name, {}))
        assert np.abs(exact_pairs(next_logits, control) - without).sum() / 2 > 0.05, name


@pytest.mark.parametrize("name", ["default", *CONTROLS])
def test_generate_draws_the_exact_distribution(name, model, next_logits):
    control = CONTROLS.get(name, {})
    outputs = model.generate(PROMPT, params(control, n=N, seed=SEED))
    pairs = [tuple(out.token_ids) for out in outputs]
    assert_pairs_fit(pairs, list(range(model.config.vocab_size)), exact_pairs(next_logits, control))


@pytest.mark.parametrize("name", ["default", *CONTROLS])
def test_the_engine_draws_the_exact_distribution(name, model, next_logits):
    """N requests of one sample each, batched by the engine, each with its own seed."""
    control = CONTROLS.get(name, {})
    outputs = LLM(model, max_num_seqs=64).generate([PROMPT] * N, [params(control, seed=s) for s in range(N)])
    pairs = [tuple(out.token_ids) for out in outputs]
    assert_pairs_fit(pairs, list(range(model.config.vocab_size)), exact_pairs(next_logits, control))


@pytest.fixture(scope="module")
def server(model):
    server = Server(LLM(model, max_num_seqs=SERVER_N), port=0, model_name="tiny")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.close()


def completion(server, body: dict) -> dict:
    request = urllib.request.Request(server.url + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


@pytest.mark.parametrize("name", ["default", *CONTROLS])
def test_the_server_draws_the_exact_distribution(name, model, next_logits, server):
    """The request's OpenAI fields (logit_bias keys are strings there), n samples a request; the tokens are read
    from the completions API's logprobs, as text: tokens of one text share a cell. Fields a request leaves out
    take the checkpoint's generation_config.json (greedy here), so the request sets every control."""
    control = CONTROLS.get(name, {})
    body = {"prompt": PROMPT, "max_tokens": 2, "ignore_eos": True, "logprobs": 0, "n": SERVER_N, **OFF, **control}
    if "logit_bias" in control:
        body["logit_bias"] = {str(token): bias for token, bias in control["logit_bias"].items()}
    pairs = [tuple(choice["logprobs"]["tokens"]) for seed in range(N // SERVER_N)
             for choice in completion(server, {**body, "seed": seed})["choices"]]
    texts = [model.tokenizer.token_bytes(t).decode("utf-8", "replace") for t in range(model.config.vocab_size)]
    assert_pairs_fit(pairs, texts, exact_pairs(next_logits, control))
