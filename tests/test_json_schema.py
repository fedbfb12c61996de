"""JSON Schema -> grammar, keyword by keyword, against jsonschema and Python's re on brute-force inputs."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.grammar import Grammar, Literal, seq
from tinyinfer.constrain.json_schema import json_grammar, schema_to_grammar
from tinyinfer.constrain.json_values import FORMATS, int_range
from tinyinfer.constrain.parser import ByteParser
from tinyinfer.constrain.regex import pattern_to_expr, regex_to_expr
from tinyinfer.errors import TinyInferError


def parser_of(schema) -> ByteParser:
    return ByteParser(compile_grammar(schema_to_grammar(schema)))


def accepts(parser: ByteParser, text: str) -> bool:
    return parser.accepts(parser.step_bytes(parser.initial, text.encode()))


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def agrees_with_jsonschema(schema, values) -> None:
    """The grammar accepts a value's compact text exactly when jsonschema says it is valid."""
    parser = parser_of(schema)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    check = cls(schema, format_checker=jsonschema.FormatChecker())
    for value in values:
        assert accepts(parser, compact(value)) == check.is_valid(value), (schema, value)


# ---------------------------------------------------------------- numbers
@pytest.mark.exercise("8.3")
@pytest.mark.parametrize("lo, hi", [(0, 9), (13, 271), (-45, 7), (-300, -20), (7, None), (None, -12), (100, 100)])
def test_integer_ranges_match_exactly(lo, hi):
    parser = ByteParser(compile_grammar(Grammar({"root": int_range(lo, hi)})))
    for n in range(-1100, 1100):
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert accepts(parser, str(n)) == inside, n
    assert not accepts(parser, "007") and not accepts(parser, "-0")


@pytest.mark.exercise("8.3")
def test_integer_bounds_in_every_draft_style():
    values = list(range(-30, 30)) + [2.5, "3", 10**20]
    agrees_with_jsonschema({"type": "integer", "minimum": -7, "exclusiveMaximum": 12}, values)
    agrees_with_jsonschema({"type": "integer", "exclusiveMinimum": -7.5, "maximum": 11.9}, values)
    parser = parser_of({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer",
                        "minimum": 3, "exclusiveMinimum": True})
    assert not accepts(parser, "3") and accepts(parser, "4")


def test_number_bounds_and_multiples():
    values = [x / 4 for x in range(-30, 30)] + [0, -0.5, 1e3, "1"]
    agrees_with_jsonschema({"type": "number", "minimum": -2, "maximum": 3}, values)
    agrees_with_jsonschema({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 5}, values)
    agrees_with_jsonschema({"type": "integer", "multipleOf": 7}, list(range(-50, 60)))
    agrees_with_jsonschema({"type": "integer", "multipleOf": 3, "minimum": 1}, list(range(-20, 30)))


def test_generic_numbers_follow_json_syntax():
    parser = parser_of({"type": "number"})
    for text in ["0", "-0", "12.50", "1e5", "-3.2E-7", "0.0"]:
        assert accepts(parser, text)
    for text in ["01", "+1", ".5", "1.", "1e", "NaN", "--1"]:
        assert not accepts(parser, text)


# ---------------------------------------------------------------- strings
def test_strings_lengths_escapes_and_utf8():
    schema = {"type": "string", "minLength": 2, "maxLength": 4}
    agrees_with_jsonschema(schema, ["", "a", "ab", "abcd", "abcde", "é😀", 'a"', "\n\t", "😀😀😀😀😀"])
    parser = parser_of({"type": "string"})
    for text in [r'"a\"b"', r'"\u00e9\ud83d\ude00"', '"é"', r'"\/"']:
        assert accepts(parser, text)
    for text in ['"a"b"', '"\n"', r'"\ud83d"', r'"\x41"', '"abc']:
        assert not accepts(parser, text)


def test_patterns_combine_with_lengths():
    agrees_with_jsonschema({"type": "string", "pattern": "^[a-c]+$", "minLength": 2, "maxLength": 3},
                           ["", "a", "ab", "abc", "abca", "ad", "é"])
    agrees_with_jsonschema({"type": "string", "pattern": "^a+b$", "maxLength": 3},
                           ["b", "ab", "aab", "aaab", "aabb", "a"])


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_formats_accept_their_examples_and_only_valid_strings(name):
    good = {"date": ["2024-02-29", "1999-12-31"], "time": ["23:59:59Z", "08:30:00.25+05:30"],
            "date-time": ["2024-01-31T10:00:00Z"], "email": ["a.b+c@example.co.uk"],
            "uuid": ["123e4567-e89b-12d3-a456-426614174000"], "ipv4": ["192.168.0.255"],
            "hostname": ["api.example-1.com"], "uri": ["https://example.com/a?b=c#d"]}[name]
    bad = {"date": ["2023-02-29", "2024-13-01", "2024-04-31"], "time": ["24:00:00Z", "12:00"],
           "date-time": ["2024-01-31 10:00:00Z"], "email": ["no-at-sign", "a@b"],
           "uuid": ["123e4567e89b12d3a456426614174000"], "ipv4": ["256.1.1.1", "1.2.3"],
           "hostname": ["-bad.com"], "uri": ["no scheme"]}[name]
    parser = parser_of({"type": "string", "format": name})
    for value in good:
        assert accepts(parser, compact(value)), value
    for value in bad:
        assert not accepts(parser, compact(value)), value


REGEXES = [r"^[a-c]+x?$", r"ab|c\d{2,3}", r"^(?:a|bc)*\.$", r"^[^a-c\s]{2}$", r"^\w+@\w+$", r"^x.y$", r'^"\\$',
           r"^[\-+]?\d+(\.\d+)?$", r"^(ab){1,}$", r"^a{2}b{0,1}c{1,}$"]


@pytest.mark.parametrize("pattern", REGEXES)
def test_patterns_agree_with_python_re(pattern):
    alphabet = ["a", "b", "c", "x", "y", "1", "2", ".", "@", " ", "-", '"', "\\", "\n", "é"]
    parser = parser_of({"type": "string", "pattern": pattern})
    full = ByteParser(compile_grammar(Grammar({"root": regex_to_expr(pattern)})))
    # ECMAScript semantics in Python's re: ASCII classes, and $ only at the very end
    reference = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern, re.ASCII)
    rng = random.Random(pattern)
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        assert accepts(parser, compact(text)) == bool(reference.search(text)), text
        assert accepts(full, text) == bool(reference.fullmatch(text)), text


@pytest.mark.parametrize("pattern, message", [("(?=a)b", "lookaround"), (r"(a)\1", "backreference"),
                                              (r"\bword", "word boundaries"), ("a^b", "only at the start")])
def test_unsupported_regex_features_are_refused(pattern, message):
    with pytest.raises(TinyInferError, match=message):
        pattern_to_expr(pattern)


# ---------------------------------------------------------------- objects and arrays
def test_objects_required_optional_and_additional_properties():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                               "c": {"type": "boolean"}}, "required": ["b"]}
    closed = {**schema, "additionalProperties": False}
    values = [{"b": "x"}, {"a": 1, "b": "x"}, {"b": "x", "c": True}, {"a": 1, "b": "x", "c": False}, {},
              {"a": 1}, {"b": 1}, {"b": "x", "d": None}, {"b": "x", "a": "no"}]
    agrees_with_jsonschema(closed, values)
    parser = parser_of(schema)
    assert accepts(parser, '{"b":"x","d":[1,{}]}') and accepts(parser, '{"b":"x","aa":1,"":2}')
    assert not accepts(parser, '{"b":"x","a":"no"}')  # an extra key may not reuse a declared name
    assert not accepts(parser, '{"b":"x","a":1}')  # declared properties come in the schema's order


def test_pattern_properties_matching_every_key_or_closing_the_object():
    agrees_with_jsonschema({"type": "object", "properties": {"n": {"type": ["string", "integer"]}},
                            "patternProperties": {".*": {"type": "string"}}},
                           [{}, {"n": "a"}, {"n": 1}, {"n": "a", "m": "b"}, {"n": "a", "m": 2}])
    agrees_with_jsonschema({"type": "object", "properties": {"id": {"type": "integer"}},
                            "patternProperties": {"^x-[a-z]+$": {"type": "boolean"}},
                            "additionalProperties": False},
                           [{"id": 1}, {"id": 1, "x-a": True}, {"x-ab": False, "x-c": True}, {"x-a": 1},
                            {"id": 1, "y": True}, {"x-": True}])
    agrees_with_jsonschema({"type": "object", "properties": {"ab": {"type": "integer"}},
                            "patternProperties": {"^[a-c]+$": {"minimum": 2}}, "additionalProperties": False},
                           [{}, {"ab": 2}, {"ab": 1}, {"ab": "x"}, {"a": 5}, {"abc": 1}, {"abd": 3}, {"": 3},
                            {"ab": 3, "ca": 4}, {"a": "s"}])


def test_dependencies_as_disjoint_branches():
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                               "c": {"type": "string"}},
              "dependencies": {"a": ["b"], "c": {"properties": {"b": {"minimum": 5}}}}}
    agrees_with_jsonschema(schema, [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2, "c": "x"}, {"b": 7, "c": "x"},
                                    {"a": 1, "b": 9, "c": "x"}, {"c": "x"}, {"a": 1, "c": "x"}])


def test_arrays_items_prefix_items_and_counts():
    agrees_with_jsonschema({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
                           [[], [1], [1, 2, 3], [1, 2, 3, 4], ["a"], [1, "a"]])
    agrees_with_jsonschema({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}],
                            "items": False}, [[], ["a"], ["a", None], ["a", None, 1], [None]])
    agrees_with_jsonschema({"type": "array", "prefixItems": [{"const": 1}], "items": {"type": "boolean"},
                            "minItems": 2}, [[1], [1, True], [1, True, False], [2, True], [1, 1]])


def test_combinators_enum_const_and_recursive_refs():
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"enum": ["x", 1, None]}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
    agrees_with_jsonschema(tree, [{"v": "x"}, {"v": 1, "kids": [{"v": None, "kids": [{"v": "x"}]}]},
                                  {"v": 2}, {"v": "x", "kids": [{"w": 1}]}])
    agrees_with_jsonschema({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "minimum": 5}]},
                           ["", "a", "ab", 4, 5, None])
    agrees_with_jsonschema({"oneOf": [{"type": "string"}, {"type": "number"}]}, ["a", 1, 2.5, None])
    agrees_with_jsonschema({"type": "string", "oneOf": [{"maxLength": 0}, {"minLength": 2}]}, ["", "a", "ab"])
    separated = {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
    parser, check = parser_of(separated), jsonschema.Draft202012Validator(separated)
    assert accepts(parser, '{"a":1}') and accepts(parser, '{"b":1}') and not accepts(parser, "{}")
    assert not accepts(parser, '{"a":1,"b":2}') and not check.is_valid({"a": 1, "b": 2})
    agrees_with_jsonschema({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                                      {"required": ["a"], "properties": {"a": {"minimum": 0}}}]},
                           [{"a": 1}, {"a": -1}, {}, {"a": "x"}])
    agrees_with_jsonschema({"type": ["string", "null"], "const": None}, [None, "null", 0])
    agrees_with_jsonschema({"enum": ["a", "bb", 3, 30, {"k": 1}], "maxLength": 1, "maximum": 10},
                           ["a", "bb", 3, 30, {"k": 1}, "c"])
    agrees_with_jsonschema({"$defs": {"n": {"$anchor": "num", "type": "integer"}}, "items": {"$ref": "#num"},
                            "type": "array"}, [[], [1, 2], [1, "a"]])


@pytest.mark.parametrize("schema, message", [
    ({"type": "array", "not": {"uniqueItems": True}}, "complement of keyword 'uniqueItems' is not expressible"),
    ({"type": "number", "not": {"multipleOf": 0.5}}, "only integer steps can be excluded"),
    ({"properties": {"x": {"patternProperties": {"(?=a)": {}}}}}, "at #/properties/x/patternProperties"),
    ({"type": "array", "if": {"uniqueItems": True}, "then": {"minItems": 1}}, "if/then/else needs it"),
    ({"oneOf": [{"type": "integer"}, {"minimum": 3}]}, "may both match"),
    ({"type": "string", "format": "ipv6"}, "format 'ipv6' is not supported"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"$ref": "https://example.com/s.json"}, "not local"),
    ({"$ref": "#/$defs/missing"}, "points nowhere"),
    ({"type": "number", "multipleOf": 0.7}, "multipleOf 0.7: its nearest double is too far"),
    ({"type": "string", "pattern": "(?=x)"}, "#/pattern"),
    ({"type": "integer", "minimum": 5, "maximum": 2}, "no integer"),
])
def test_unsupported_keywords_are_refused_with_keyword_and_path(schema, message):
    with pytest.raises(TinyInferError, match=re.escape(message)):
        schema_to_grammar(schema)


@pytest.mark.parametrize("schema, message", [
    ({"type": 5}, "at #: type must be a type name or a list of type names, not 5"),
    ({"properties": 3}, "properties must be an object whose values are schemas, not 3"),
    ({"properties": {"a": {"required": "a"}}}, "at #/properties/a: required must be a list of property names"),
    ({"enum": 3}, "enum must be a list of values"),
    ({"anyOf": []}, "anyOf must be a non-empty list of schemas, not []"),
    ({"allOf": [3]}, "allOf must be a non-empty list of schemas, not [3]"),
    ({"type": "string", "minLength": "x"}, "minLength must be a non-negative integer, not 'x'"),
    ({"type": "array", "maxItems": True}, "maxItems must be a non-negative integer, not True"),
    ({"type": "string", "pattern": 5}, "pattern must be a string"),
    ({"type": "string", "format": 3}, "format must be a string"),
    ({"$ref": 5}, "$ref must be a string"),
    ({"type": "number", "multipleOf": 0}, "multipleOf must be a number greater than 0, not 0"),
    ({"type": "number", "minimum": "1"}, "minimum must be a number, not '1'"),
    ({"not": 3}, "not must be a schema (an object or a boolean), not 3"),
    ({"type": "object", "dependencies": "x"}, "dependencies must be an object whose values are schemas or lists"),
    ({"anyOf": [{"type": 3}, {"type": "null"}]}, "at #/anyOf/0: type must be"),  # read by the merge before compiled
    ({"allOf": [{"items": [{"contains": []}]}]}, "at #/allOf/0/items/0: contains must be a schema"),
])
def test_malformed_keyword_values_are_refused_with_keyword_and_path(schema, message):
    """Values whose shape the JSON Schema specification does not allow: a clear error, not a crash inside."""
    with pytest.raises(TinyInferError, match=re.escape(message)):
        schema_to_grammar(schema)


def test_annotations_are_ignored_and_any_json_grammar_parses_json():
    parser = parser_of({"title": "t", "description": "d", "examples": [1], "default": 2, "type": "boolean"})
    assert accepts(parser, "true") and not accepts(parser, '"true"')
    any_json = ByteParser(compile_grammar(json_grammar()))
    rng = random.Random(0)
    for _ in range(50):
        value = {"k": [rng.random(), None, {"é": "x\"\n"}], "n": rng.randint(-9, 9), "s": "\u2028"}
        assert accepts(any_json, compact(value))
    assert not accepts(any_json, "{'a':1}") and not accepts(any_json, "[1,]")
    assert Grammar({"root": seq(Literal("a"))}).rules["root"] == Literal("a")
