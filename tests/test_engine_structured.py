"""Structured output in the batching engine and the OpenAI-compatible server: every constrained request gets
exactly its solo `model.generate(..., constraint=...)` output, whatever runs beside it (other schemas, free
text, n = 2, preemption, prefix-cache hits), and that output parses and validates against its schema."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import test_server
from test_server import post, stream_events

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.constrain import build_constraint, tool_call_grammar, tool_call_schema
from tinyinfer.engine import LLM
from tinyinfer.errors import TinyInferError
from tinyinfer.generation import constraint_vocabulary, eos_ids
from tinyinfer.safetensors_io import Checkpoint
from tinyinfer.sampling import SamplingParams

ROOT = Path(__file__).resolve().parents[1]
model, server = test_server.model, test_server.server  # its fixtures: the shakespeare model, a served LLM

# Bounded schemas: every string, number and array has a size limit, so each output completes (and ends with
# EOS) well within MAX_TOKENS, and can be validated.
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
WORDS = {"type": "array", "items": {"enum": ["to", "be", "or", "not"]}, "minItems": 1, "maxItems": 3}
SONNET = {"type": "object", "properties": {"mood": {"enum": ["merry", "sad"]}, "rhymes": {"type": "boolean"},
                                           "lines": {"type": "integer", "minimum": 1, "maximum": 14}},
          "required": ["mood", "rhymes", "lines"], "additionalProperties": False}
MAX_TOKENS = 64
PROMPTS = ["ROMEO:", "JULIET: I pray thee, tell me", "KING HENRY:", "HAMLET: To be, or not"]
SCHEMAS = [PERSON, WORDS, None, SONNET]  # None: a request without a constraint, batched with the others


def maker(model, schema):
    """A function making a fresh constraint for `schema` (None: no constraint)."""
    if schema is None:
        return None
    return lambda: build_constraint("json_schema", schema, model.tokenizer, sorted(eos_ids(model)))


def solo(model, prompt, schema, params: SamplingParams):
    """The request run alone through model.generate: the reference every engine output must equal."""
    results = model.generate(prompt, params, constraint=maker(model, schema))
    return results if isinstance(results, list) else [results]


def assert_solo_and_valid(model, prompts, schemas, params, outputs) -> None:
    for prompt, schema, out in zip(prompts, schemas, outputs):
        samples = out if isinstance(out, list) else [out]
        expected = solo(model, prompt, schema, params)
        assert [(s.token_ids, s.text, s.finish_reason) for s in samples] == \
               [(r.token_ids, r.text, r.finish_reason) for r in expected], f"{prompt!r} differs from its solo run"
        if schema is not None:
            for sample in samples:
                assert sample.finish_reason == "eos"  # a bounded schema completes: the grammar then allows only EOS
                jsonschema.validate(json.loads(sample.text), schema)


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=MAX_TOKENS, temperature=0),
                                    SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=11, n=2)],
                         ids=["greedy", "seeded-n2"])
def test_a_batch_of_schemas_and_free_text_equals_the_solo_runs(model, params):
    llm = LLM(model, block_size=4)
    outputs = llm.generate(PROMPTS, params, constraint=[maker(model, s) for s in SCHEMAS])
    assert_solo_and_valid(model, PROMPTS, SCHEMAS, params, outputs)
    assert max(record.num_seqs for record in llm.step_log) >= len(PROMPTS)  # they really ran side by side
    again = llm.generate(PROMPTS, params, constraint=[maker(model, s) for s in SCHEMAS])  # prompts now cached
    assert llm.stats().prefix_cache_hit_rate > 0
    assert_solo_and_valid(model, PROMPTS, SCHEMAS, params, again)


def test_one_constraint_maker_for_all_prompts(model):
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.8, seed=2)
    outputs = LLM(model).generate(PROMPTS[:2], params, constraint=maker(model, WORDS))
    assert_solo_and_valid(model, PROMPTS[:2], [WORDS, WORDS], params, outputs)


def test_preempted_constrained_sequences_continue_their_grammar_exactly(model):
    """A pool of 24 blocks of 4 tokens cannot hold six growing sequences: some are preempted mid-output and
    recomputed from prompt + output so far, their grammar state kept as it was (not reset, not re-advanced)."""
    prompts = [f"{name}:" for name in ("ROMEO", "JULIET", "HAMLET", "OTHELLO", "MACBETH", "LEAR")]
    schemas = [PERSON, SONNET, WORDS, PERSON, None, SONNET]
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.9, seed=5)
    llm = LLM(model, block_size=4, n_blocks=24)
    outputs = llm.generate(prompts, params, constraint=[maker(model, s) for s in schemas])
    assert llm.stats().preemptions > 0
    assert any(out.metrics.preemptions > 0 for out, s in zip(outputs, schemas) if s is not None)
    assert_solo_and_valid(model, prompts, schemas, params, outputs)
    assert llm.scheduler.allocator.num_free == 24


def test_abort_of_a_constrained_request_frees_its_blocks(model):
    llm = LLM(model, block_size=4, n_blocks=40)
    rid = llm.add_request("ROMEO:", SamplingParams(max_tokens=MAX_TOKENS, temperature=0, n=2),
                          constraint=maker(model, PERSON))
    for _ in range(4):
        llm.step()
    assert llm.scheduler.allocator.num_free < 40
    llm.abort(rid)
    assert not llm.has_unfinished() and llm.scheduler.allocator.num_free == 40
    [out] = llm.generate(["ROMEO:"], SamplingParams(max_tokens=MAX_TOKENS, temperature=0),
                         constraint=[maker(model, PERSON)])  # the engine carries on
    jsonschema.validate(json.loads(out.text), PERSON)


def test_shared_grammar_states_and_ignore_eos_are_refused_and_queue_nothing(model):
    llm = LLM(model)
    make = maker(model, PERSON)
    shared = make()
    for call, words in [
        (lambda: llm.add_request("ROMEO:", SamplingParams(n=2, max_tokens=16), constraint=shared), "pass a function"),
        (lambda: llm.generate(["ROMEO:", "JULIET:"], SamplingParams(max_tokens=16), constraint=shared), "several prompts"),
        (lambda: llm.generate(["ROMEO:", "JULIET:"], SamplingParams(max_tokens=16), constraint=[shared, shared]), "several prompts"),
        (lambda: llm.generate(["ROMEO:", "JULIET:"], SamplingParams(max_tokens=16), constraint=[make]), "1 constraints for 2"),
        (lambda: llm.add_request("ROMEO:", SamplingParams(ignore_eos=True, max_tokens=16), constraint=make), "drop ignore_eos"),
        (lambda: llm.add_request("ROMEO:", SamplingParams(max_tokens=16), constraint="{}"), "not a constraint"),
    ]:
        with pytest.raises(TinyInferError, match=words):
            call()
        assert not llm.has_unfinished() and not llm.requests


# ---------------------------------------------------------------------------------------------------------------
# The server: response_format, vLLM's guided_* fields, tools
# ---------------------------------------------------------------------------------------------------------------

MESSAGES = [{"role": "user", "content": "Who art thou?"}]


def chat_ids(model, messages=MESSAGES):
    return model.tokenizer.encode(ChatTemplate.for_model("shakespeare").render(messages, add_generation_prompt=True),
                                  add_special_tokens=False)


def engine_text(model, prompt, schema_or_maker, **knobs) -> list[str]:
    """The texts the engine gives directly for one prompt (a schema, or a constraint maker); unset knobs from
    generation_config.json, as the server takes them."""
    make = schema_or_maker if callable(schema_or_maker) else maker(model, schema_or_maker)
    out = LLM(model).generate([prompt], constraint=[make], **knobs)[0]
    return [sample.text for sample in (out if isinstance(out, list) else [out])]


def test_response_format_json_schema_validates_and_equals_the_engine(server, model):
    knobs = {"max_tokens": MAX_TOKENS, "temperature": 0.9, "seed": 4, "n": 2}
    status, body = post(server, "/v1/chat/completions", {
        "messages": MESSAGES, **knobs,
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}})
    assert status == 200
    texts = [choice["message"]["content"] for choice in body["choices"]]
    assert texts == engine_text(model, chat_ids(model), PERSON, **knobs)
    for choice in body["choices"]:
        assert choice["finish_reason"] == "stop"
        jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)


def test_json_object_and_the_guided_fields(server, model):
    tokenizer, ends = model.tokenizer, sorted(eos_ids(model))
    for path, prompt, field, kind, spec, temperature in [
        ("/v1/chat/completions", chat_ids(model), "response_format", "json", "object", 0),  # sampled: long-winded
        ("/v1/completions", "ROMEO:", "guided_json", "json_schema", SONNET, 0.7),
        ("/v1/completions", "ROMEO:", "guided_regex", "regex", r"[A-Z][a-z]{1,8}, [a-z]{2,8}!", 0.7),
        ("/v1/completions", "ROMEO:", "guided_choice", "choice", ["yea", "nay", "perchance"], 0.7),
    ]:
        value = {"type": "json_object"} if field == "response_format" else spec
        request = {"max_tokens": 90, "temperature": temperature, "seed": 3, field: value,  # 20 + 90 fit the pool
                   **({"messages": MESSAGES} if path.endswith("chat/completions") else {"prompt": prompt})}
        status, body = post(server, path, request)
        assert status == 200, body
        [choice] = body["choices"]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
        expected = engine_text(model, prompt, lambda k=kind, s=spec: build_constraint(k, s, tokenizer, ends),
                               max_tokens=90, temperature=temperature, seed=3)
        assert [text] == expected and choice["finish_reason"] == "stop"
        if kind == "json":
            assert isinstance(json.loads(text), dict)
        elif kind == "json_schema":
            jsonschema.validate(json.loads(text), SONNET)
        elif kind == "choice":
            assert text in spec


def test_streaming_with_a_schema_joins_to_the_whole_answer(server):
    request = {"messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0.8, "seed": 9,
               "response_format": {"type": "json_schema", "json_schema": {"name": "words", "schema": WORDS}}}
    _, whole = post(server, "/v1/chat/completions", request)
    events = stream_events(server, "/v1/chat/completions", request)
    assert events[-1] == "[DONE]"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == whole["choices"][0]["message"]["content"] and len(events) > 4  # several pieces
    jsonschema.validate(json.loads(text), WORDS)
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


ADD = {"type": "function", "function": {"name": "add", "description": "Add two small numbers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                     "b": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["a", "b"], "additionalProperties": False}}}
RHYME = {"type": "function", "function": {"name": "rhyme", "parameters": {
    "type": "object", "properties": {"word": {"type": "string", "maxLength": 8}}, "required": ["word"],
    "additionalProperties": False}}}


@pytest.mark.parametrize("choice, offered", [("required", [ADD, RHYME]),
                                             ({"type": "function", "function": {"name": "rhyme"}}, [RHYME])])
def test_forced_tool_calls_come_back_as_tool_calls(server, model, choice, offered):
    request = {"messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0.9, "seed": 1,
               "tools": [ADD, RHYME], "tool_choice": choice}
    status, body = post(server, "/v1/chat/completions", request)
    assert status == 200, body
    [answer] = body["choices"]
    assert answer["finish_reason"] == "tool_calls" and answer["message"]["content"] is None
    [call] = answer["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    if isinstance(choice, dict):
        assert call["function"]["name"] == "rhyme"
    generated = {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}
    jsonschema.validate(generated, tool_call_schema(offered))
    [text] = engine_text(model, chat_ids(model), tool_call_maker(model, offered, parallel=True),
                         max_tokens=MAX_TOKENS, temperature=0.9, seed=1)
    assert json.loads(text) == generated
    events = stream_events(server, "/v1/chat/completions", request)
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"
    [streamed] = joined_tool_calls(events[:-1])
    assert streamed["function"] == call["function"] and streamed["id"].startswith("call_")
    assert sum("tool_calls" in e["choices"][0]["delta"] for e in events[:-1]) > 3  # the arguments came in pieces


OPEN = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 6}}, "required": ["word"]}  # says
# nothing of other keys: JSON Schema allows them; the server, as vLLM's default grammar backend, writes none


def test_schemas_that_allow_other_keys_get_only_the_declared_ones(server):
    """Tool arguments and response_format objects carry only the keys their schema declares, sampled
    freely (a tool called with an argument it never declared breaks the caller's code)."""
    tool = {"type": "function", "function": {"name": "rhyme", "parameters": OPEN}}
    calls = objects = 0
    for seed in range(3):
        base = {"messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": seed, "n": 3}
        status, body = post(server, "/v1/chat/completions", {**base, "tools": [tool], "tool_choice": "required",
                                                             "parallel_tool_calls": False})
        assert status == 200, body
        for choice in body["choices"]:
            for call in choice["message"].get("tool_calls") or []:  # (none when max_tokens cut the call)
                assert set(json.loads(call["function"]["arguments"])) == {"word"}, call
                calls += 1
        status, body = post(server, "/v1/chat/completions", {**base, "response_format": {
            "type": "json_schema", "json_schema": {"name": "rhyme", "schema": OPEN}}})
        assert status == 200, body
        for choice in body["choices"]:
            if choice["finish_reason"] == "stop":
                assert set(json.loads(choice["message"]["content"])) == {"word"}, choice
                objects += 1
    assert calls >= 5 and objects >= 5, (calls, objects)  # few finish: rambling past the declared keys?


def joined_tool_calls(events: list[dict]) -> list[dict]:
    """The calls a streamed chat reply made, its `tool_calls` deltas joined as a client joins them: the first
    piece of a call brings its index, id and name, later pieces more of its arguments."""
    calls: dict[int, dict] = {}
    for event in events:
        for piece in event["choices"][0]["delta"].get("tool_calls", []):
            call = calls.setdefault(piece["index"], {"id": piece.get("id"), "type": piece.get("type"),
                                                     "function": {"name": piece["function"].get("name"), "arguments": ""}})
            call["function"]["arguments"] += piece["function"]["arguments"]
    return [calls[i] for i in sorted(calls)]


def tool_call_maker(model, tools: list[dict], parallel: bool):
    """A function making the constraint the server builds for a forced call of one of `tools`."""
    grammar = str(tool_call_grammar(tools, parallel=parallel))
    return lambda: build_constraint("grammar", grammar, model.tokenizer, sorted(eos_ids(model)))


@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_tool_calls_may_open_an_array_of_calls_unless_turned_off(server, model, parallel):
    """Pushed to open with "[" and to close any array at once: with parallel_tool_calls (the default) the reply is
    an array of one call, which comes back as that call; turned off, "[" is not allowed and the reply is a call
    object. Either way the text is the engine's own under the same grammar."""
    brackets = {model.tokenizer.encode(c, add_special_tokens=False)[0]: 100 for c in "[]"}
    knobs = {"max_tokens": MAX_TOKENS, "temperature": 0.9, "seed": 4, "logit_bias": brackets}
    request = {"messages": MESSAGES, "tools": [ADD, RHYME], "tool_choice": "required", **knobs,
               **({} if parallel else {"parallel_tool_calls": False})}
    status, body = post(server, "/v1/chat/completions", request)
    assert status == 200, body
    [answer] = body["choices"]
    assert answer["finish_reason"] == "tool_calls"
    [call] = answer["message"]["tool_calls"]
    [text] = engine_text(model, chat_ids(model), tool_call_maker(model, [ADD, RHYME], parallel), **knobs)
    generated = {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}
    assert json.loads(text) == ([generated] if parallel else generated)


def test_tool_choice_auto_may_answer_in_text_and_none_is_free_text(server, model):
    base = {"messages": MESSAGES, "max_tokens": 20, "temperature": 0, "tools": [ADD]}
    _, auto = post(server, "/v1/chat/completions", base)  # no tool_choice: "auto"
    _, none = post(server, "/v1/chat/completions", {**base, "tool_choice": "none"})
    free = model.generate(chat_ids(model), max_tokens=20, temperature=0).text
    assert none["choices"][0]["message"] == {"role": "assistant", "content": free}
    assert auto["choices"][0]["message"]["content"] == free  # greedy text does not start with "{": allowed as is
    pieces = [e["choices"][0]["delta"].get("content", "") for e in stream_events(server, "/v1/chat/completions", base)[:-1]]
    assert "".join(pieces) == free and sum(map(bool, pieces)) > 3  # streamed as it comes once it is plainly text
    brace = model.tokenizer.encode("{", add_special_tokens=False)
    _, called = post(server, "/v1/chat/completions", {**base, "max_tokens": MAX_TOKENS, "logit_bias": {brace[0]: 100}})
    [answer] = called["choices"]  # pushed to open with "{", the reply can only go on as a call
    assert answer["finish_reason"] == "tool_calls" and answer["message"]["tool_calls"][0]["function"]["name"] == "add"
    jsonschema.validate(json.loads(answer["message"]["tool_calls"][0]["function"]["arguments"]),
                        ADD["function"]["parameters"])


@pytest.mark.parametrize("path, extra, param, words", [
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "array", "uniqueItems": True}}}}, "response_format", "uniqueItems"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "pattern": "(a"}}}}, "response_format", "missing )"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": 5}}}}, "response_format", "type must be a type name"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", '"schema": {...}'),
    ("/v1/chat/completions", {"response_format": {"type": "yaml"}}, "response_format", "json_object"),
    ("/v1/completions", {"guided_json": "/etc/passwd"}, "guided_json", "not valid JSON"),
    ("/v1/completions", {"guided_choice": "yea"}, "guided_choice", "is invalid"),
    ("/v1/completions", {"guided_regex": "[a-z]", "guided_choice": ["a"]}, "guided_choice", "give one"),
    ("/v1/completions", {"tools": [ADD], "tool_choice": "required"}, "tools", "chat"),
    ("/v1/chat/completions", {"tool_choice": "required"}, "tool_choice", "needs tools"),
    ("/v1/chat/completions", {"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "sub"}}},
     "tool_choice", "not among the tools"),
    ("/v1/chat/completions", {"tools": [{"type": "function"}], "tool_choice": "required"}, "tools", "no name"),
    ("/v1/chat/completions", {"tools": [5], "tool_choice": "none"}, "tools", "no name"),
    ("/v1/chat/completions", {"tools": [ADD], "tool_choice": "sometimes"}, "tool_choice", "is invalid"),
    ("/v1/chat/completions", {"tools": [ADD], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
    ("/v1/chat/completions", {"tools": [ADD], "tool_choice": "required",
                              "response_format": {"type": "json_object"}}, "tools", "give one"),
])
def test_a_structure_that_cannot_be_built_is_a_400_naming_the_field(server, path, extra, param, words):
    request = {"messages": MESSAGES} if path.endswith("chat/completions") else {"prompt": "ROMEO:"}
    status, body = post(server, path, {**request, "max_tokens": 5, **extra})
    assert status == 400 and body["error"]["param"] == param and words in body["error"]["message"], body
    assert server.engine.llm.scheduler.allocator.num_free == server.engine.llm.cache.n_blocks  # nothing ran


# -- a model whose output layer has more rows than its tokenizer has tokens (Phi-3: 32,064 for 32,011) --------


@pytest.fixture(scope="module")
def padded_folder(tmp_path_factory):
    """The built-in model with 64 padding rows appended to its (tied) embedding and output layer."""
    from safetensors.numpy import save_file  # noqa: PLC0415

    source = ROOT / "tinyinfer" / "models" / "shakespeare"
    folder = tmp_path_factory.mktemp("padded")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(source / name, folder / name)
    checkpoint = Checkpoint(source / "model.safetensors")  # bf16 on disk, read as float32
    tensors = {name: checkpoint.get(name, np.float32) for name in checkpoint.names()}
    table = tensors["model.embed_tokens.weight"]
    tensors["model.embed_tokens.weight"] = np.concatenate([table, np.full((64, table.shape[1]), 0.5, table.dtype)])
    save_file(tensors, folder / "model.safetensors")  # rows of 0.5: without the mask they would win the argmax
    config = json.loads((source / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": table.shape[0] + 64, "dtype": "float32"}))
    return folder


def test_padding_rows_of_the_output_layer_are_masked_by_the_engine_and_the_cli(padded_folder):
    padded = tinyinfer.load(padded_folder)
    assert padded.config.vocab_size == padded.tokenizer.vocab_size + 64
    vocabulary = constraint_vocabulary(padded)
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=3)
    out = LLM(padded).generate([PROMPTS[0]], params, constraint=lambda: build_constraint("json_schema", PERSON, vocabulary))
    jsonschema.validate(json.loads(out[0].text), PERSON)
    schema_file = padded_folder / "person.json"
    schema_file.write_text(json.dumps(PERSON))
    run = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", "--model", str(padded_folder), "ROMEO:",
                          "--json-schema", str(schema_file), "--seed", "3", "--max-tokens", str(MAX_TOKENS)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    jsonschema.validate(json.loads(run.stdout), PERSON)


def test_a_constrained_output_cut_by_max_tokens_is_reported_incomplete(server):
    """Never presented as valid: the API says finish_reason "length" (and no tool call is made of it); the CLI
    prints the text, a line saying the JSON is not complete, and exits 1."""
    request = {"messages": [{"role": "user", "content": "Who art thou?"}], "max_tokens": 3, "temperature": 0,
               "response_format": {"type": "json_schema", "json_schema": {"name": "who", "schema": {
                   "type": "object", "properties": {"name": {"type": "string", "minLength": 20}},
                   "required": ["name"]}}}}
    status, body = post(server, "/v1/chat/completions", request)
    [choice] = body["choices"]
    assert status == 200 and choice["finish_reason"] == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice["message"]["content"])
    run = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", "ROMEO:", "--json", "--max-tokens", "1",
                          "--temperature", "0"], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1 and run.stdout == "{\n"
    assert "warning: the JSON is not complete: the output was cut at max_tokens" in run.stderr
    done = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", "ROMEO:", "--json", "--max-tokens", "50",
                           "--temperature", "0"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "not complete" not in done.stderr and json.loads(done.stdout) is not None
