"""build_constraint for every kind, regex/choice constraints, and tool calls end to end."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

from tests.conftest import shared_data
from tinyinfer.constrain import build_constraint, parse_tool_calls, tool_call_grammar, tool_call_schema
from tinyinfer.constrain.tools import ToolCallStream
from tinyinfer.errors import TinyInferError

# A small byte-level vocabulary: every byte, a few multi-byte tokens, two specials.
VOCAB = [bytes([b]) for b in range(256)] + [b'{"', b'":', b'",', b'name', b'"}', b"get", b"_weather", b"yes",
                                            b"no", b"<|eos|>", b"<|tool|>"]
EOS, SPECIAL = 265, 266


class ByteTokenizer:
    """Just enough of the Tokenizer interface for build_constraint."""

    vocab_size, eos_token_id, special_ids = len(VOCAB), EOS, frozenset({EOS, SPECIAL})

    def token_bytes(self, token_id: int) -> bytes:
        return VOCAB[token_id]


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "maxLength": 12},
                                          "unit": {"enum": ["C", "F"]}}, "required": ["city"],
                                          "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": False}}},
]


def run(constraint, seed: int, max_tokens: int = 200) -> tuple[bytes, str]:
    """Uniform choice among allowed tokens (random logits); (output bytes, finish reason)."""
    rng, out = np.random.default_rng(seed), []
    for _ in range(max_tokens):
        allowed = np.flatnonzero(constraint.allowed_mask())
        assert SPECIAL not in allowed
        token = int(allowed[rng.integers(allowed.size)])
        constraint.advance(token)
        if token == EOS:
            return b"".join(VOCAB[t] for t in out), "stop"
        out.append(token)
    return b"".join(VOCAB[t] for t in out), "length"


def test_tool_calls_follow_the_chosen_tools_schema_and_parse_back():
    schema = tool_call_schema(TOOLS)
    stopped = 0
    for seed in range(8):
        text, reason = run(build_constraint("tools", TOOLS, ByteTokenizer()), seed)
        if reason == "length":
            continue
        stopped += 1
        call = json.loads(text)
        jsonschema.validate(call, schema)
        content, calls = parse_tool_calls(text.decode(), TOOLS)
        assert content == "" and calls[0]["function"]["name"] == call["name"]
        assert json.loads(calls[0]["function"]["arguments"]) == call["arguments"]
    assert stopped > 0


def test_parallel_calls_are_one_call_or_an_array_of_calls_and_parse_back():
    """With parallel=True (OpenAI's parallel_tool_calls) a reply may be an array of calls, each its own entry."""
    schema, grammar = tool_call_schema(TOOLS, parallel=True), str(tool_call_grammar(TOOLS, parallel=True))
    counts = []
    for seed in range(40):
        text, reason = run(build_constraint("grammar", grammar, ByteTokenizer()), seed, max_tokens=600)
        if reason == "length":
            continue
        value = json.loads(text)
        jsonschema.validate(value, schema)
        content, calls = parse_tool_calls(text.decode(), TOOLS)
        want = value if isinstance(value, list) else [value]
        assert content == "" and [c["id"] for c in calls] == [f"call_{i}" for i in range(len(want))]
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
            [(w["name"], w["arguments"]) for w in want]
        counts.append(len(calls) if isinstance(value, list) else 0)
        assert streamed_calls(text.decode()) == [(w["name"], w["arguments"]) for w in want]
    assert 0 in counts and max(counts) >= 2, counts  # single calls, and arrays of several, both came out
    opens = [build_constraint("grammar", str(tool_call_grammar(TOOLS, parallel=p)), ByteTokenizer()).allowed_mask()
             for p in (False, True)]
    assert not opens[0][ord("[")] and opens[1][ord("[")]  # without parallel, a reply never opens an array


def streamed_calls(text: str) -> list[tuple[str, dict]]:
    """The calls ToolCallStream reads from `text` shown one more character at a time: each call's name
    announced once, its arguments joined from the pieces."""
    stream, names, arguments = ToolCallStream(), [], []
    for end in range(len(text) + 1):
        for index, name, piece in stream.push(text[:end]):
            if name is not None:
                assert index == len(names)  # a new call comes with its name, once, in order
                names.append(name)
                arguments.append("")
            arguments[index] += piece
    return [(name, json.loads(args)) for name, args in zip(names, arguments)]


def test_tool_call_parsing_of_text_and_bad_calls():
    assert parse_tool_calls("It is sunny.", TOOLS) == ("It is sunny.", [])
    with pytest.raises(TinyInferError, match="not a call of one of the tools"):
        parse_tool_calls('{"name": "nope", "arguments": {}}', TOOLS)
    with pytest.raises(TinyInferError, match="cut by max_tokens"):
        parse_tool_calls('{"name": "add", "argu', TOOLS)
    for not_calls in ("[]", '[{"name": "add", "arguments": {}}, 3]'):
        with pytest.raises(TinyInferError, match="not a call of one of the tools"):
            parse_tool_calls(not_calls, TOOLS)
    with pytest.raises(TinyInferError, match="unique"):
        tool_call_schema(TOOLS + TOOLS[:1])


def test_choice_regex_grammar_and_json_kinds():
    for seed in range(5):
        text, reason = run(build_constraint("choice", ["yes", "no", "maybe"], ByteTokenizer()), seed)
        assert reason == "stop" and text in (b"yes", b"no", b"maybe")
        text, reason = run(build_constraint("regex", r"[a-c]{2}-\d{1,3}", ByteTokenizer()), seed)
        assert reason == "stop" and len(text) >= 4 and text[2:3] == b"-"
        text, reason = run(build_constraint("grammar", 'root ::= "(" root? ")"', ByteTokenizer()), seed)
        assert reason == "length" or (text.count(b"(") == text.count(b")") and text.startswith(b"("))
        text, reason = run(build_constraint("json", None, ByteTokenizer()), seed, max_tokens=400)
        assert reason == "length" or isinstance(json.loads(text), dict)


def test_json_schema_from_a_file_and_clear_errors(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"type": "boolean"}))
    text, reason = run(build_constraint("json_schema", str(path), ByteTokenizer()), 0)
    assert reason == "stop" and text in (b"true", b"false")
    for kind, spec, message in [("json_schema", str(tmp_path / "missing.json"), "does not exist"),
                                ("json_schema", "{not json", "not valid JSON"), ("choice", [], "at least one"),
                                ("regex", "(a", "missing )"), ("yaml", None, "unknown constraint kind"),
                                ("json", "array", "'object' (default) or 'value'")]:
        with pytest.raises(TinyInferError, match=re.escape(message)):
            build_constraint(kind, spec, ByteTokenizer())


def test_eos_only_when_complete_and_masks_shared_between_requests():
    tokenizer = ByteTokenizer()
    first = build_constraint("choice", ["yes", "yesno"], tokenizer)
    assert not first.allowed_mask()[EOS]
    first.advance(VOCAB.index(b"yes"))
    mask = first.allowed_mask()
    assert mask[EOS] and mask[VOCAB.index(b"no")] and mask[ord("n")] and mask.sum() == 3
    second = build_constraint("choice", ["yes", "yesno"], tokenizer)
    assert second.masker is first.masker and not second.allowed_mask()[EOS]  # shared caches, own state
    assert build_constraint("choice", ["yes"], tokenizer).masker is not first.masker


def test_real_tokenizer_tool_call_through_the_factory():
    from tinyinfer.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_file(shared_data("tokenizers/gpt2/tokenizer.json"))
    constraint = build_constraint("tools", TOOLS, tokenizer)
    text = '{"name":"add","arguments":{"a":2,"b":-3}}'
    for token in tokenizer.encode(text, add_special_tokens=False):
        assert constraint.allowed_mask()[token]
        constraint.advance(token)
    assert constraint.is_complete() and constraint.allowed_mask()[tokenizer.eos_token_id]


def test_bench_grammar_reports_coverage_and_mask_times(tmp_path, capsys):
    from tinyinfer.cli import main

    rows = [{"subset": "tiny", "source_path": f"s{i}", "schema": schema,
             "tests": [{"valid": False, "data": "not an object"}]}
            for i, schema in enumerate([{"type": "object", "properties": {"a": {"type": "integer"}}},
                                        {"type": "array", "not": {"uniqueItems": True}}])]
    (tmp_path / "tiny.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    tokenizer = shared_data("tokenizers/gpt2/tokenizer.json")
    assert main(["bench", "grammar", "--schemas", str(tmp_path), "--tokenizer", str(tokenizer),
                 "--engines", "tinyinfer", "--tokens", "4", "--timed-per-subset", "1"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "1/2" in out  # the schema with `not` is refused
    assert "decode step" in out and "0 of 1 (0 schemas)" in out
