"""Arrays with `contains` under maxItems, minItems and prefixItems (the item walk, json_schema_walk.py);
several `contains` on one array (allOf, or `not items`); and arrays whose item schema admits nothing (only
shorter arrays remain)."""

from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from tests.test_json_schema_logic import holds
from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.json_schema import schema_to_grammar
from tinyinfer.constrain.parser import ByteParser
from tinyinfer.errors import TinyInferError


def agrees_on_every_array(schema, items: list, longest: int) -> int:
    """The grammar accepts exactly the arrays of up to `longest` of these items that jsonschema finds valid
    (compact text); returns how many were valid, so a test can see both verdicts occur."""
    parser = ByteParser(compile_grammar(schema_to_grammar(schema)))
    check = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    valid = 0
    for n in range(longest + 1):
        for value in itertools.product(items, repeat=n):
            text = json.dumps(list(value), separators=(",", ":"))
            expected = check.is_valid(list(value))
            assert parser.accepts(parser.step_bytes(parser.initial, text.encode())) == expected, (schema, text)
            valid += expected
    return valid


def test_contains_with_min_items_and_prefix_items():
    holds({"type": "array", "contains": {"const": 1}, "minItems": 3, "items": {"type": "integer"}},
          [[1, 2, 3], [2, 2, 1], [1, 1, 1, 1]], [[1, 2], [2, 2, 2], [1, "a", 2]])
    holds({"type": "array", "prefixItems": [{"type": "string"}], "contains": {"type": "integer"}, "maxItems": 3},
          [["a", 1], ["a", "b", 2]], [["a"], [1], ["a", "b", "c"], ["a", 1, 2, 3]])


def test_several_contains_on_one_array():
    both = {"type": "array", "allOf": [{"contains": {"type": "string"}}, {"contains": {"type": "integer", "minimum": 3}}]}
    holds(both, [["a", 3], [4, "b"], [1, "a", 1, 5]], [[], ["a"], [3, 4], [1, "x", 2]])
    items = [1, 5, "a", None, [], [5], ["a", 1]]
    assert 0 < agrees_on_every_array(both, items, 3)
    # `not items` is a contains of the complement: two of them under maxItems, inside an items schema
    nested = {"type": "array", "maxItems": 2, "allOf": [{"not": {"items": {"type": "number"}}},
                                                        {"not": {"items": {"maxLength": 1}}}]}
    assert 0 < agrees_on_every_array(nested, items + ["ab"], 3)
    inner = {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"allOf": [
        {"contains": {"const": 5}}, {"contains": {"type": "string"}}, {"items": {"not": {"const": 1}}}]}]}}
    assert 0 < agrees_on_every_array(inner, items + [[5, "b"], [5, "b", 1], ["b", 5, 5]], 2)


def test_several_contains_with_a_count_are_refused():
    with pytest.raises(TinyInferError, match="minContains/maxContains"):
        schema_to_grammar({"allOf": [{"contains": {"type": "string"}}, {"contains": {"type": "integer"}},
                                     {"contains": {"type": "string"}, "maxContains": 2}]})


def test_items_that_admit_nothing_leave_shorter_arrays():
    holds({"type": "array", "items": {"type": "string", "not": {"type": "string"}}}, [[]], [["a"], [1]])
    holds({"type": "array", "prefixItems": [{"type": "integer"}, False]}, [[], [1]], [[1, 2], ["a"]])
