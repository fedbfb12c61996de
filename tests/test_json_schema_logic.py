"""Schema logic compiled exactly: finite schemas decided value by value (`not`, `if`, `oneOf` over enums),
and each rewrite of a keyword a grammar cannot say directly. Every case: valid examples accepted token by
token, invalid ones rejected, and random-logit generation always valid for `jsonschema`."""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import numpy as np
import pytest

from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.json_schema import schema_to_grammar
from tinyinfer.constrain.json_schema_check import equal, finite_values, satisfies
from tinyinfer.constrain.mask import Constraint, TokenMasker, Vocabulary
from tinyinfer.constrain.parser import ByteParser
from tinyinfer.constrain.regex_dfa import MAX_STATES
from tinyinfer.errors import TinyInferError

# Every byte, then a few multi-byte tokens that cut across JSON syntax, then EOS.
TOKENS = [bytes([b]) for b in range(256)] + [b'{"', b'":', b'","', b'"}', b"true", b"null", b"12", b'],"', b"ab"]
VOCAB = Vocabulary(TOKENS + [b"<eos>"], eos_ids=[len(TOKENS)])
SEEDS = 8


def encode(text: str) -> list[int]:
    """Greedy longest match over TOKENS."""
    data, ids, i = text.encode(), [], 0
    index = {t: n for n, t in enumerate(TOKENS)}
    while i < len(data):
        n = next(n for n in (2, 4, 3, 1) if data[i : i + n] in index)
        ids.append(index[data[i : i + n]])
        i += n
    return ids


def accepted(masker: TokenMasker, text: str) -> bool:
    constraint = Constraint(masker)
    for token in encode(text):
        if not constraint.allowed_mask()[token]:
            return False
        constraint.advance(token)
    return bool(constraint.allowed_mask()[VOCAB.eos_ids].all())


def generated(masker: TokenMasker, seed: int, max_tokens: int = 200) -> str | None:
    """Uniform draws among the allowed tokens (random logits); None when max_tokens ran out."""
    rng, constraint, out = np.random.default_rng(seed), Constraint(masker), []
    for _ in range(max_tokens):
        allowed = np.flatnonzero(constraint.allowed_mask())
        token = int(allowed[rng.integers(allowed.size)])
        if token in VOCAB.eos_ids:
            return b"".join(out).decode()
        constraint.advance(token)
        out.append(TOKENS[token])
    return None


def holds(schema, valid: list, invalid: list) -> None:
    """Valid values (compact, keys in the order given) accepted, invalid ones rejected, generation valid."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    check = cls(schema, format_checker=cls.FORMAT_CHECKER)
    masker = TokenMasker(compile_grammar(schema_to_grammar(schema)), VOCAB)
    for expected, values in ((True, valid), (False, invalid)):
        for value in values:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            assert check.is_valid(value) == expected, (schema, value)  # the examples themselves are right
            assert accepted(masker, text) == expected, (schema, text)
    for seed in range(SEEDS):
        text = generated(masker, seed)
        if text is not None:
            assert check.is_valid(json.loads(text)), (schema, text)


def serializations(value) -> list[str]:
    """Every compact text of `value`, objects' keys in every order (the grammar fixes one order)."""
    if isinstance(value, dict):
        out = []
        for keys in itertools.permutations(value):
            for texts in itertools.product(*(serializations(value[k]) for k in keys)):
                out.append("{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{t}" for k, t in zip(keys, texts)) + "}")
        return out
    if isinstance(value, list):
        return ["[" + ",".join(texts) + "]" for texts in itertools.product(*map(serializations, value))]
    return [json.dumps(value, ensure_ascii=False)]


def agrees(schema, values: list) -> None:
    """The grammar accepts a value (in some key order) exactly when jsonschema finds it valid, and never an
    invalid one in any order; parsed byte by byte: many values at once, where `holds` feeds tokens
    through masks."""
    check = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    parser = ByteParser(compile_grammar(schema_to_grammar(schema)))
    verdicts = set()
    for value in values:
        expected = check.is_valid(value)
        texts = serializations(value)
        accepted = [parser.accepts(parser.step_bytes(parser.initial, t.encode())) for t in texts]
        assert any(accepted) == expected, (schema, texts[0])
        verdicts.add(expected)
    assert verdicts == {True, False}, "the values should include valid and invalid ones"


# ---------------------------------------------------------------- finite schemas
def test_enum_with_not_if_and_one_of_is_decided_value_by_value():
    holds({"allOf": [{"enum": [1, 2, 3, "a", [1]]}, {"not": {"type": "integer", "minimum": 2}}]},
          [1, "a", [1]], [2, 3, 4])
    holds({"type": "array", "oneOf": [{"enum": [[2], [2, 4], [6]]}, {"enum": [[], [2, 3]]}, {"enum": [[1], [2, 4]]}],
           "if": {"minItems": 1}, "then": {"minItems": 2, "items": {"multipleOf": 2}}},
          [[]], [[2, 4], [2], [2, 3], [1]])
    holds({"enum": [{"a": 1}, {"a": "x"}, {"b": 1}], "not": {"required": ["a"], "properties": {"a": {"type": "string"}}}},
          [{"a": 1}, {"b": 1}], [{"a": "x"}])
    holds({"const": 1.0, "not": {"enum": [True]}}, [1.0], [True, 1.5])


def test_finite_candidates_and_json_equality():
    resolve = {"#/$defs/x": {"enum": [1, 2]}}.__getitem__
    assert finite_values({"anyOf": [{"$ref": "#/$defs/x"}, {"const": 3}]}, resolve) == [1, 2, 3]
    assert finite_values({"anyOf": [{"$ref": "#/$defs/x"}, {"type": "string"}]}, resolve) is None
    assert finite_values({"allOf": [{"type": "string"}, {"$ref": "#/$defs/x"}]}, resolve) == [1, 2]
    assert equal(1, 1.0) and not equal(True, 1) and not equal([True], [1]) and equal({"a": [1]}, {"a": [1.0]})
    assert not equal("1", 1) and not equal({"a": 1}, {"a": 1, "b": 2})


@pytest.mark.parametrize("schema", [
    {"type": "integer", "multipleOf": 3, "exclusiveMinimum": 1, "maximum": 9},
    {"type": "number", "multipleOf": 0.5},
    {"type": "string", "pattern": "^a+$", "minLength": 2, "maxLength": 3},
    {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}, "uniqueItems": True},
    {"type": "array", "contains": {"const": 2}, "minContains": 2, "maxContains": 3},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^b": {"type": "string"}},
     "additionalProperties": False, "minProperties": 1, "propertyNames": {"maxLength": 2}},
    {"type": "object", "dependentRequired": {"a": ["b"]}, "dependentSchemas": {"b": {"required": ["c"]}}},
    {"oneOf": [{"type": "integer"}, {"minimum": 2}], "not": {"const": 0}},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 1, "exclusiveMinimum": True,
     "dependencies": {"a": ["b"]}},
])
def test_checker_agrees_with_jsonschema(schema):
    values = [None, True, False, 0, 1, 1.0, 1.5, 2, 3, 4, 4.5, 6, 9, 10, -3, "", "a", "aa", "aaa", "aaaa", "ba",
              [], [1], [1, "x"], [1, "x", "x"], [2, 2], [2, 2, 2, 2], [1, 1], {}, {"a": 1}, {"b": "x"}, {"bb": "x"},
              {"abc": 1}, {"a": "1"}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"b": 1}]
    check = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    for value in values:
        assert satisfies(value, schema, schema, lambda ref: None) == check.is_valid(value), (schema, value)


def test_undecidable_keywords_fall_back_to_keyword_by_keyword_compilation():
    """`format` may be an annotation or an assertion, so a finite schema with it is not decided by value."""
    holds({"enum": ["2024-01-01", "x"], "format": "date"}, ["2024-01-01"], ["x", "2024-01-02"])
    holds({"enum": ["2024-01-01", "2024-01-02"], "format": "date", "not": {"const": "2024-01-02"}},
          ["2024-01-01"], ["2024-01-02", "x"])
    with pytest.raises(TinyInferError, match="#/if: the complement of keyword 'uniqueItems'"):
        schema_to_grammar({"enum": ["2024-01-01"], "format": "date", "if": {"uniqueItems": True}, "then": False})


# ---------------------------------------------------------------- not
def test_not_type_and_not_values():
    holds({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}], "not": {"type": "object"}},
          ["x", [], ["a"]], [{}, 1, [1]])
    holds({"not": {"type": ["string", "number", "array", "object"]}}, [None, True], ["a", 1, 1.5, [], {}])
    holds({"type": "string", "minLength": 1, "not": {"enum": ["ab", "a", "abc", 3]}},
          ["b", "aa", "abd", "abcd", "é", "a\"", "ba"], ["a", "ab", "abc", "", 3])
    holds({"type": "integer", "not": {"enum": [0, 3, -2]}}, [1, -1, 2, 4, -3, 10], [0, 3, -2, 1.5])
    holds({"type": ["boolean", "null"], "not": {"const": True}}, [False, None], [True])


def test_not_of_bounds_counts_required_and_properties():
    holds({"type": "integer", "not": {"minimum": 5}}, [4, -7], [5, 6])
    holds({"not": {"maxLength": 2}}, ["abc"], ["ab", "", 5, None])
    holds({"type": "array", "not": {"minItems": 2}}, [[], [1]], [[1, 2]])
    holds({"type": "object", "not": {"propertyNames": False}}, [{"k": 1}], [{}])
    holds({"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False,
           "not": {"required": ["a", "b"]}}, [{}, {"a": 1}, {"b": 1}], [{"a": 1, "b": 2}])
    holds({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
           "not": {"properties": {"a": {"maximum": 3}}}}, [{"a": 4}], [{"a": 3}, {"a": -1}, {}])


def test_not_by_de_morgan_and_double_negation():
    holds({"type": "integer", "not": {"minimum": 2, "maximum": 5}}, [1, 6, -3], [2, 3, 5])  # outside [2, 5]
    holds({"type": "string", "not": {"anyOf": [{"const": "a"}, {"maxLength": 0}]}}, ["b", "aa"], ["a", ""])
    holds({"type": "integer", "allOf": [{"not": {"const": 1}}, {"not": {"const": 2}}]}, [0, 3], [1, 2])
    holds({"type": "integer", "not": {"not": {"minimum": 0}}}, [0, 7], [-1])


@pytest.mark.parametrize("schema, message", [
    ({"type": "array", "not": {"uniqueItems": True}}, "#/not: the complement of keyword 'uniqueItems'"),
    ({"type": "string", "pattern": "(a|b)*a(a|b){12}", "maxLength": 40}, f"more than {MAX_STATES} states"),
    ({"type": "number", "not": {"type": "integer"}}, "numbers that are not integers"),
    ({"not": {"const": [1]}}, "an array other than given ones"),
    ({"not": {"const": {"a": [1]}}}, "an array other than given ones"),
    ({"not": {"$ref": "#/$defs/a", "type": "string"}, "$defs": {"a": {}}}, "'$ref' with sibling keywords"),
    ({"type": "array", "not": {"items": [{"type": "integer"}], "additionalItems": False}}, "read each other"),
])
def test_inexpressible_complements_are_refused(schema, message):
    with pytest.raises(TinyInferError, match=re.escape(message)):
        schema_to_grammar(schema)


# ---------------------------------------------------------------- oneOf and allOf
def test_one_of_branches_apart_by_a_required_property_of_disjoint_types():
    holds({"oneOf": [{"type": "object", "properties": {"p": {"enum": ["x", "y"]}}, "required": ["p"]},
                     {"type": "object", "properties": {"p": {"type": "object"}}, "required": ["p"]},
                     {"allOf": [{"$ref": "#/$defs/r"}, {"properties": {"q": {"type": "integer"}}}]}],
           "$defs": {"r": {"type": "object", "properties": {"p": {"type": "integer"}}, "required": ["p"]}}},
          [{"p": "x"}, {"p": {}}, {"p": 3, "q": 1}], [{"p": "z"}, {"p": 3, "q": "a"}, {}, {"p": [1]}])


def test_all_of_over_recursive_refs_is_one_rule_per_set_of_refs():
    schema = {"$defs": {"n": {"type": "object", "properties": {"k": {"$ref": "#/$defs/n"}}},
                        "m": {"type": "object", "properties": {"k": {"$ref": "#/$defs/m"}, "v": {"type": "integer"}}}},
              "allOf": [{"$ref": "#/$defs/n"}, {"$ref": "#/$defs/m"}]}
    holds(schema, [{}, {"k": {"k": {"v": 1}}}], [{"k": {"k": {"v": "x"}}}, {"k": 1}])


def chain(depth: int, leaf=None) -> dict:
    """{"a": {"a": ... leaf}} with `depth` levels above the leaf ({} when None)."""
    value = {} if leaf is None else leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def test_all_of_with_other_parts_over_recursive_refs():
    """The recursion passes through allOf [$ref, {type}] and properties merged from two definitions (a
    set of parts that recurs every two levels names one rule). Valid: chains with an odd number of levels
    (the even levels need a property), and no key but "a"."""
    schema = {"$defs": {"word": {"type": "object", "properties": {"a": {"$ref": "#/$defs/word"}},
                                 "additionalProperties": False},
                        "even": {"additionalProperties": {"allOf": [{"$ref": "#/$defs/odd"}, {"type": "object"}]},
                                 "minProperties": 1},
                        "odd": {"additionalProperties": {"$ref": "#/$defs/even"}}},
              "allOf": [{"$ref": "#/$defs/word"}, {"$ref": "#/$defs/even"}]}
    agrees(schema, [chain(n) for n in range(12)] + [chain(n, {"b": 1}) for n in range(5)] + [chain(3, 1), 1])


def test_not_of_an_object_constant_nested_in_recursive_refs():
    """`not const` of an object: another key, a missing key, or a key with another value, recursively."""
    agrees({"type": "object", "not": {"const": {"a": {"b": 1}, "c": "x"}}},
           [{"a": {"b": 1}, "c": "x"}, {"c": "x", "a": {"b": 1}}, {"a": {"b": 1}}, {"a": {"b": 2}, "c": "x"},
            {"a": {"b": 1.0}, "c": "x"}, {"a": {"b": 1, "d": 0}, "c": "x"}, {"a": {}, "c": "x"}, {"a": 1, "c": "x"},
            {"a": {"b": 1}, "c": "y"}, {"a": {"b": 1}, "c": "x", "e": None}, {}, {"b": 1}])
    word = {"type": "object", "properties": {"a": {"$ref": "#/$defs/word"}}, "additionalProperties": False}
    agrees({"$defs": {"word": word}, "allOf": [{"$ref": "#/$defs/word"}, {"not": {"const": chain(3)}}]},
           [chain(n) for n in range(8)] + [chain(2, {"b": 1}), chain(3, 0)])
    agrees({"not": {"enum": [{}, {"a": {}}]}}, [{}, {"a": {}}, {"a": {"a": {}}}, {"b": {}}, {"a": 1}, 1, "x", None])


def test_one_of_apart_by_constants_inside_all_of():
    holds({"type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"], "additionalProperties": False,
           "oneOf": [{"properties": {"t": {"enum": ["a"]}}}, {"properties": {"t": {"enum": ["b", "c"]}}}]},
          [{"t": "a"}, {"t": "c"}], [{"t": "d"}, {}])


def test_property_counts_with_only_required_declared_properties():
    holds({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
           "additionalProperties": {"type": "string"}, "minProperties": 2, "maxProperties": 3},
          [{"a": 1, "x": "s"}, {"a": 1, "x": "s", "y": "t"}], [{"a": 1}, {"a": 1, "x": "s", "y": "t", "z": "u"}])
    holds({"type": "object", "maxProperties": 1}, [{}, {"k": [1]}], [{"k": 1, "j": 2}])


# ---------------------------------------------------------------- strings through automata
def test_string_automata_intersect_complement_and_bound_lengths():
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("ab1.\"é"), size=n)) for n in rng.integers(0, 7, size=150)]
    for schema in [
        {"type": "string", "pattern": "^(\\d+\\.\\d+.*)$", "maxLength": 5},
        {"type": "string", "allOf": [{"pattern": "a"}, {"pattern": "b$"}], "minLength": 3},
        {"type": "string", "not": {"pattern": "^a*$"}, "maxLength": 4},
        {"type": "string", "pattern": "1", "not": {"enum": ["1", "a1"]}},
        {"type": "string", "format": "ipv4", "pattern": "^1"},
    ]:
        check = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
        valid = [w for w in words + ["1.1", "10.0.0.1", "ab", "aab"] if check.is_valid(w)]
        holds(schema, list(dict.fromkeys(valid)), list(dict.fromkeys(w for w in words if not check.is_valid(w))))


# ---------------------------------------------------------------- patternProperties
def test_pattern_properties_split_undeclared_keys_by_the_patterns_they_match():
    holds({"type": "object", "patternProperties": {"^[a-z]{2}$": {"type": "string"}}},
          [{}, {"en": "x"}, {"eng": 1}, {"e": 1, "fr": "y"}, {"E1": None}], [{"en": 1}, {"fr": "y", "de": 2}])
    holds({"type": "object", "properties": {"ab": {"type": "integer"}}, "additionalProperties": {"type": "boolean"},
           "patternProperties": {"a": {"minimum": 0}, "b$": {"maximum": 9}}},
          [{"ab": 5}, {"a": 0}, {"xb": -3}, {"zz": True}, {"ab": 1, "bab": 9, "q": False}],
          [{"ab": -1}, {"ab": 10}, {"a": -1}, {"xb": 10}, {"zz": 1}, {"ab": "x"}])
    holds({"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False,
           "required": ["x1"]}, [{"x1": 1}, {"x1": 2, "xy": 3}], [{}, {"x1": "a"}, {"x1": 1, "y": 2}])


# ---------------------------------------------------------------- if/then/else
def test_if_then_else_as_two_disjoint_cases():
    holds({"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
           "required": ["kind"], "additionalProperties": False,
           "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["n"]},
           "else": {"properties": {"n": False}}},
          [{"kind": "a", "n": 1}, {"kind": "b"}], [{"kind": "a"}, {"kind": "b", "n": 2}, {"kind": "c"}])
    holds({"type": "integer", "if": {"minimum": 10}, "then": {"maximum": 12}, "else": {"minimum": 5}},
          [5, 9, 10, 12], [4, 13, -1])
    holds({"type": "string", "then": {"maxLength": 1}}, ["abc"], [1])  # then without if: no effect


# ---------------------------------------------------------------- contains
def test_contains_with_min_and_max_contains():
    holds({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}},
          [[5], [1, 7], [9, 1, 2], [6, 6]], [[], [1, 2], ["a", 5], [1, 5, "x"]])
    holds({"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}, "minContains": 2,
           "maxContains": 3}, [[1, 1], [1, 2, 1], [0, 1, 1, 1, 0]], [[1], [1, 2], [1, 1, 1, 1], [], [1, 1, "x"]])
    holds({"type": "array", "contains": {"type": "string"}, "minContains": 0, "maxContains": 1},
          [[], [1], ["a"], [1, "a", None]], [["a", "b"], [1, "a", "b"]])
    holds({"type": "array", "not": {"items": {"type": "string"}}}, [[1], ["a", None]], [[], ["a", "b"]])
    holds({"type": "array", "not": {"contains": {"type": "string"}}}, [[], [1]], [["a"], [1, "b"]])


# ---------------------------------------------------------------- propertyNames
def test_property_names_restrict_declared_and_additional_keys():
    holds({"type": "object", "propertyNames": {"pattern": "^[a-z]+$", "maxLength": 3},
           "properties": {"abcd": {"type": "integer"}, "ok": {"type": "integer"}}},
          [{}, {"ok": 1}, {"ok": 1, "xyz": None}, {"q": []}], [{"abcd": 1}, {"ok": "x"}, {"Q": 1}, {"wxyz": 1}])
    holds({"type": "object", "propertyNames": {"enum": ["a", "b"]}, "patternProperties": {"^b": {"type": "string"}}},
          [{"a": 1}, {"b": "x"}, {"a": 2, "b": "y"}], [{"c": 1}, {"b": 1}])
    holds({"type": "object", "propertyNames": False}, [{}], [{"a": 1}])
    with pytest.raises(TinyInferError, match="#/propertyNames: propertyNames is supported with string keywords"):
        schema_to_grammar({"type": "object", "propertyNames": {"anyOf": [{"pattern": "a"}]}})


# ---------------------------------------------------------------- uniqueItems
def test_unique_items_over_a_finite_set_of_values():
    holds({"type": "array", "items": {"enum": ["a", 1, 1.0, True, None]}, "uniqueItems": True, "minItems": 2},
          [["a", 1], [True, 1, None], [None, "a", True, 1]], [["a"], ["a", "a"], [1, 1.0], [1, True, 1], []])
    holds({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}, [[], [True], [False, True]],
          [[True, True], [False, True, False]])
    holds({"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True, "maxItems": 2}, [[3, 1], []],
          [[1, 2, 3], [2, 2]])


def test_one_of_overlapping_branches_as_each_minus_the_others():
    holds({"oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 10}]},
          [-5, 11, 20], [0, 5, 10, "a"])
    holds({"type": "string", "oneOf": [{"minLength": 2}, {"pattern": "^a"}, {"const": "zz"}]},
          ["a", "xy", "ba"], ["ab", "abc", "zz", "", "b"])
    with pytest.raises(TinyInferError, match="neither is expressible minus the other"):
        schema_to_grammar({"oneOf": [{"type": "integer"}, {"multipleOf": 3}]})


@pytest.mark.parametrize("schema", [{"enum": ["a", "bb", 3]}, {"type": "string", "enum": ["a", "bb", "ccc"], "maxLength": 2}])
def test_every_enum_value_is_allowed(schema):
    """Each listed value (that the other keywords allow), and nothing else."""
    agrees(schema, ["a", "bb", "ccc", 3, 4, "b", None])
