"""The server through OpenAI's own Python client: what users of the API run, parsed by the client's models.

tests/test_server.py checks the server's answers field by field over raw HTTP; here the official `openai`
package talks to it as it talks to api.openai.com (its request shapes, its Server-Sent Events reader, its
error classes), and the answers must equal `model.generate` run directly.
"""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.engine import LLM
from tinyinfer.engine.server import Server

import openai  # noqa: E402 - a dev dependency: missing is a failure, not a skip

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Verona"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"], "additionalProperties": False}}}
VERDICT_SCHEMA = {"type": "object", "properties": {"guilty": {"type": "boolean"}, "years": {"enum": [1, 5, 10]}},
                  "required": ["guilty", "years"], "additionalProperties": False}


@pytest.fixture(scope="module")
def model():
    return tinyinfer.load("shakespeare")


@pytest.fixture(scope="module")
def client(model):
    server = Server(LLM(model), port=0, model_name="shakespeare", chat_template=ChatTemplate.for_model("shakespeare"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    server.shutdown()
    server.close()


def chat_prompt(model, text: str) -> list[int]:
    """The prompt the server makes of one user message: the rendered template, which holds its special tokens."""
    rendered = ChatTemplate.for_model("shakespeare").render([{"role": "user", "content": text}], add_generation_prompt=True)
    return model.tokenizer.encode(rendered, add_special_tokens=False)


def test_models_and_a_completion_equal_generate(client, model):
    assert [m.id for m in client.models.list().data] == ["shakespeare"]
    reply = client.completions.create(model="shakespeare", prompt="ROMEO:", max_tokens=24, temperature=0)
    want = model.generate("ROMEO:", max_tokens=24, temperature=0)
    assert reply.choices[0].text == want.text
    assert reply.usage.completion_tokens == len(want.token_ids)
    assert reply.choices[0].finish_reason == "length"


def test_a_streamed_chat_equals_the_whole_reply_and_generate(client, model):
    ask = dict(model="shakespeare", messages=[{"role": "user", "content": "Speak, friend"}], max_tokens=20,
               temperature=0.9, seed=3)
    whole = client.chat.completions.create(**ask)
    chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    want = model.generate(chat_prompt(model, "Speak, friend"), max_tokens=20, temperature=0.9, seed=3)  # + its defaults
    assert streamed == whole.choices[0].message.content == want.text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == len(want.token_ids)


def test_a_named_tool_call_is_parsed_by_the_client(client):
    reply = client.chat.completions.create(
        model="shakespeare", messages=[{"role": "user", "content": "The weather?"}], tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=100, temperature=0.7, seed=1)
    call, = reply.choices[0].message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])
    assert reply.choices[0].finish_reason == "tool_calls"


def test_a_streamed_tool_call_joins_to_the_whole_one(client):
    """Streamed, the call arrives as OpenAI streams one: its id and name first, then its arguments in pieces."""
    ask = dict(model="shakespeare", messages=[{"role": "user", "content": "The weather?"}], tools=[WEATHER_TOOL],
               tool_choice="required", max_tokens=100, temperature=0.7, seed=2)
    whole, = client.chat.completions.create(**ask).choices[0].message.tool_calls
    pieces = [call for chunk in client.chat.completions.create(**ask, stream=True) if chunk.choices
              for call in chunk.choices[0].delta.tool_calls or []]
    first = pieces[0]
    assert first.index == 0 and first.id.startswith("call_") and first.function.name == whole.function.name
    assert "".join(p.function.arguments for p in pieces) == whole.function.arguments and len(pieces) > 3


def test_a_json_schema_reply_validates(client):
    reply = client.chat.completions.create(
        model="shakespeare", messages=[{"role": "user", "content": "Your verdict"}], max_tokens=100,
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA}})
    jsonschema.validate(json.loads(reply.choices[0].message.content), VERDICT_SCHEMA)


def test_logprobs_and_n_as_the_client_reads_them(client):
    reply = client.chat.completions.create(model="shakespeare", messages=[{"role": "user", "content": "Hail"}],
                                           max_tokens=6, logprobs=True, top_logprobs=3, n=2, temperature=1.0, seed=5)
    assert [c.index for c in reply.choices] == [0, 1]
    for choice in reply.choices:
        tokens = choice.logprobs.content
        assert "".join(t.token for t in tokens) == choice.message.content
        assert all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in tokens)
        assert all(t.top_logprobs[0].logprob >= t.logprob for t in tokens)  # the best alternative is the best


def test_errors_come_back_as_the_clients_exceptions(client):
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model="shakespeare", messages=[{"role": "user", "content": "Hi"}], max_tokens=0)
    with pytest.raises(openai.NotFoundError, match="shakespeare"):  # the message lists the served names
        client.completions.create(model="gpt-4o", prompt="Hi", max_tokens=2)
