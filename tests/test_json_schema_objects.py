"""Objects as key languages (json_schema_objects.py): the complements of propertyNames, patternProperties
and additionalProperties ("some property has..."), allOf merging patternProperties with
additionalProperties, and oneOf over them; each checked token by token and by random generation."""

from __future__ import annotations

import pytest

from tests.test_json_schema_logic import agrees, holds
from tinyinfer.constrain.json_schema import schema_to_grammar
from tinyinfer.constrain.json_schema_objects import _finite_strings
from tinyinfer.constrain.regex import regex_to_expr
from tinyinfer.constrain.regex_dfa import dfa_of, minimize
from tinyinfer.errors import TinyInferError


def test_some_key_in_a_language():
    """`not propertyNames X`: some key is not valid for X."""
    holds({"type": "object", "not": {"propertyNames": {"pattern": "^a"}}, "maxProperties": 2},
          [{"b": 1}, {"a": 1, "xa": None}], [{}, {"a": 1}, {"ab": 1, "a": 2}, {"a": 1, "b": 2, "c": 3}])
    holds({"type": "object", "allOf": [{"not": {"propertyNames": {"not": {"pattern": "4"}}}},
                                       {"not": {"propertyNames": {"not": {"pattern": "3"}}}}],
           "propertyNames": {"pattern": "^[0-9]+$"}, "maxProperties": 1},
          [{"34": 1}, {"1432": []}], [{"3": 1}, {"3": 1, "4": 2}, {"x34": 1}, {}])


def test_some_property_with_a_value():
    """`not patternProperties {p: S}`: some key matching p has a value S rejects."""
    holds({"type": "object", "not": {"patternProperties": {"a1": {"not": {"type": "string", "pattern": "A"}}}},
           "propertyNames": {"maxLength": 4}},
          [{"a1": "A"}, {"xa1": "xA", "b": 2}], [{"a1": "B"}, {"a1": 1}, {"b": "A"}, {}])


def test_complement_of_properties_with_additional_properties():
    holds({"type": "object", "not": {"properties": {"a": {"type": "string"}}, "additionalProperties": False}},
          [{"a": 1}, {"b": 1}, {"a": "x", "b": 2}], [{}, {"a": "x"}])


def test_all_of_merges_pattern_properties_with_additional_properties():
    """Every key must match "a" (the second part forbids others) and may not be 1 to 3 characters long."""
    holds({"type": "object", "allOf": [{"patternProperties": {"^.{1,3}$": False}, "additionalProperties": True},
                                       {"patternProperties": {"a": {"type": "integer"}},
                                        "additionalProperties": False}], "maxProperties": 2},
          [{}, {"xxxa": 1}, {"aaaa": 2, "abcd": 3}], [{"a": 1}, {"bbbb": 1}, {"aaaa": "x"}])


def test_additional_properties_of_one_part_still_cover_keys_another_part_gives_patterns():
    """The first part's additionalProperties holds for *every* key (it declares no patterns); merged
    keyword by keyword, the second part's pattern would wrongly take "a" keys out of it."""
    schema = {"type": "object", "allOf": [{"additionalProperties": {"type": "array", "minItems": 2}},
                                          {"patternProperties": {"a": {"type": "array", "items": {"type": "integer"}}}}]}
    holds(schema, [{}, {"a": [1, 2]}, {"b": ["x", None]}], [{"a": []}, {"ab": [1]}, {"a": [1, "x"]}, {"b": []}])
    objects = [{k: v} for k in ("a", "b", "ba") for v in ([], [1], [1, 2], ["x", 2], 3)]
    agrees(schema, objects + [{"a": [1, 2], "b": [1]}, {"a": [1, 2], "b": [3, 4]}])


def test_one_of_over_pattern_properties():
    holds({"type": "object", "oneOf": [{"patternProperties": {"a": {"multipleOf": 10, "maximum": 35}}},
                                       {"patternProperties": {"a": {"multipleOf": 10, "maximum": 40}}}],
           "maxProperties": 2},
          [{"a": 40}, {"ba": 40, "c": 1}], [{}, {"a": 30}, {"a": 50}, {"b": 1}])


def test_finite_key_languages_are_listed_key_by_key():
    """Keys `^[0-9]$` are ten: written as optional properties, so none repeats."""
    assert _finite_strings(minimize(dfa_of(regex_to_expr("[0-9]"))), 32) == [str(d) for d in range(10)]
    assert _finite_strings(minimize(dfa_of(regex_to_expr("[0-9]+"))), 32) is None
    holds({"type": "object", "patternProperties": {"^[0-9]$": {"type": "array", "minItems": 1}},
           "additionalProperties": False, "maxProperties": 2,
           "not": {"anyOf": [{"propertyNames": {"not": {"enum": ["1", "3"]}}},
                             {"propertyNames": {"not": {"enum": ["2", "3"]}}}]}},
          [{"3": [1]}, {"1": [1], "2": [2]}], [{}, {"1": [1]}, {"3": []}, {"x": [1]}])


def test_an_unsatisfiable_one_of_is_refused_as_empty():
    """Both branches say "no x", so no value is in exactly one."""
    with pytest.raises(TinyInferError, match="JSON schema at #"):
        schema_to_grammar({"oneOf": [{"not": {"required": ["x"]}}, {"dependencies": {"x": False}}]})


@pytest.mark.parametrize("keys", [{}, {"patternProperties": {"^x": {"type": "integer"}}}], ids=["properties", "patterns"])
def test_required_keys_must_appear(keys):
    """Declared properties alone, and with key patterns (the object walk of json_schema_objects.py)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a"],
              **keys}
    agrees(schema, [{}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {"b": 2, "a": 1}, {"x1": 3}, {"a": 1, "x1": 3}])
