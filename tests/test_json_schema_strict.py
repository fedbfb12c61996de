"""Strict grammars (`schema_to_grammar(schema, strict=True)`, what generation uses, as xgrammar's strict mode):
only the keys and items a schema names, and still only documents valid for the schema."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.test_json_schema_logic import VOCAB, generated
from tinyinfer.errors import TinyInferError
from tinyinfer.constrain import build_constraint, tool_call_grammar
from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.json_schema import schema_to_grammar
from tinyinfer.constrain.mask import TokenMasker
from tinyinfer.constrain.parser import ByteParser
from tests.conftest import shared_data


def derives(grammar, value) -> bool:
    """Does the grammar derive the compact JSON text of `value` (keys in the order given)?"""
    parser = ByteParser(compile_grammar(grammar))
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    return parser.accepts(parser.step_bytes(parser.initial, text))


def verdicts(schema, values) -> list[tuple[bool, bool]]:
    """(strict grammar derives it, spec grammar derives it) for each value."""
    strict, spec = schema_to_grammar(schema, strict=True), schema_to_grammar(schema)
    return [(derives(strict, v), derives(spec, v)) for v in values]


def test_an_object_takes_only_the_keys_it_declares_and_its_required_ones():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["a", "r"]}
    assert verdicts(schema, [{"a": 1, "r": [True]}, {"a": 1, "b": "x", "r": None},  # "r": required, any value
                             {"a": 1, "r": 0, "c": 2}, {"a": 1}]) == [
        (True, True), (True, True), (False, True), (False, False)]


def test_what_the_schema_says_of_other_keys_stays():
    free = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True}
    assert verdicts(free, [{"a": 1, "c": 2}]) == [(True, True)]
    typed = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    assert verdicts(typed, [{"a": 1, "c": "x"}, {"a": 1, "c": 2}]) == [(True, True), (False, False)]
    patterns = {"type": "object", "patternProperties": {"^x": {"type": "integer"}}}  # keys named by a pattern
    assert verdicts(patterns, [{"x1": 5}, {"x1": 5, "y": 5}, {"x1": "s"}]) == [(True, True), (False, True),
                                                                            (False, False)]
    anything = {"type": "object"}  # names no key: any object, strict or not
    assert verdicts(anything, [{"y": [1, {"z": None}]}]) == [(True, True)]


def test_a_tuple_takes_only_the_items_it_names():
    for schema in ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
                   {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]}):  # draft 7's tuples
        assert verdicts(schema, [[1, "a"], [1], [1, "a", 3], ["a"]]) == [
            (True, True), (True, True), (False, True), (False, False)]
    more = {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"}}
    assert verdicts(more, [[1, True, False], [1, 2]]) == [(True, True), (False, False)]
    plain = {"type": "array", "items": {"type": "integer"}}
    assert verdicts(plain, [[1, 2, 3]]) == [(True, True)]


def test_merged_and_alternative_schemas_close_on_what_they_name_together():
    merged = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                        {"properties": {"b": {"type": "integer"}}}]}
    assert verdicts(merged, [{"a": 1, "b": 2}, {"a": 1, "c": 2}]) == [(True, True), (False, True)]
    branches = {"type": "object", "properties": {"kind": {"enum": ["x", "y"]}},
                "anyOf": [{"properties": {"x": {"type": "integer"}}}, {"properties": {"y": {"type": "string"}}}]}
    assert verdicts(branches, [{"kind": "x", "x": 1}, {"kind": "y", "y": "s"}, {"kind": "x", "z": 1}]) == [
        (True, True), (True, True), (False, True)]


@pytest.mark.parametrize("subset", ["Github_easy", "Github_medium", "Snowplow", "Glaiveai2K", "BFCL_simple"])
def test_strict_grammars_of_real_schemas_generate_only_valid_documents(subset):
    """Strict leaves things out, never lets an invalid document in: random generations from the strict grammar of
    each real-world schema (the first 12 of a subset that compile) validate with jsonschema."""
    checked = 0
    for line in shared_data(f"jsonschema/{subset}.jsonl").open():
        schema = json.loads(line)["schema"]
        try:
            masker = TokenMasker(compile_grammar(schema_to_grammar(schema, strict=True)), VOCAB)
        except TinyInferError:  # a schema the compiler refuses, strict or not
            continue
        check = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)
        for seed in range(3):
            text = generated(masker, seed)
            if text is not None:
                assert check.is_valid(json.loads(text)), (schema, text)
        checked += 1
        if checked == 12:
            break
    assert checked == 12


def test_generation_and_tool_calls_are_strict():
    """What users reach: build_constraint's json_schema (response_format, guided_json, --json-schema) and the
    arguments of tool calls take no key their schema does not name."""
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    masker = build_constraint("json_schema", parameters, [bytes([b]) for b in range(256)] + [b""], [256]).masker
    parser = masker.parser
    assert parser.accepts(parser.step_bytes(parser.initial, b'{"city":"Paris"}'))
    assert not parser.accepts(parser.step_bytes(parser.initial, b'{"city":"Paris","day":1}'))
    calls = tool_call_grammar([{"type": "function", "function": {"name": "weather", "parameters": parameters}}])
    assert derives(calls, {"name": "weather", "arguments": {"city": "Paris"}})
    assert not derives(calls, {"name": "weather", "arguments": {"city": "Paris", "description": "sunny"}})
