"""Boolean combinations of string keywords as one automaton (json_schema_strings.py), and the automaton
operations under them (regex_dfa.py: union, complement, minimize), checked against jsonschema and `re`."""

from __future__ import annotations

import itertools
import random
import re

import jsonschema
import pytest

from tests.test_json_schema_logic import agrees, holds
from tinyinfer.constrain.json_schema import SUPPORTED, UNSUPPORTED, _Compiler
from tinyinfer.constrain.json_schema_strings import NotProjectable, project
from tinyinfer.constrain.regex import pattern_to_expr
from tinyinfer.constrain.regex_dfa import (
    accepts,
    complement,
    dfa_of,
    explore,
    intersect,
    minimize,
    union,
)

ALPHABET = "ab1"
STRINGS = ["".join(p) for n in range(6) for p in itertools.product(ALPHABET, repeat=n)]  # 364 strings
OTHERS = [None, True, 0, 1.5, [], {}]


def projection(schema):
    compiler = _Compiler(schema)
    return project(schema, compiler.resolver("#"), lambda keywords: compiler.string_dfa(keywords, "#"),
                   SUPPORTED | UNSUPPORTED)


@pytest.mark.parametrize("schema", [
    {"not": {"pattern": "ab"}},
    {"oneOf": [{"pattern": "a"}, {"pattern": "b"}, {"maxLength": 2}]},
    {"anyOf": [{"pattern": "^a"}, {"not": {"maxLength": 3}}], "type": ["string", "null"]},
    {"allOf": [{"not": {"anyOf": [{"pattern": "^....$"}, {"pattern": "a1"}]}}, {"pattern": "1$"}]},
    {"if": {"pattern": "^a"}, "then": {"minLength": 3}, "else": {"not": {"enum": ["b", "bb"]}}},
    {"type": "integer", "not": {"pattern": "x"}},
    {"$defs": {"p": {"pattern": "b1"}}, "oneOf": [{"$ref": "#/$defs/p"}, {"not": {"$ref": "#/$defs/p"}}]},
])
def test_projection_agrees_with_jsonschema_on_every_short_string_and_other_types(schema):
    strings, others = projection(schema)
    check = jsonschema.Draft202012Validator(schema)
    for text in STRINGS:
        assert accepts(strings, text) == check.is_valid(text), (schema, text)
    kinds = {None: "null", True: "boolean", 0: "integer", 1.5: "fraction", "[]": "array", "{}": "object"}
    for value in OTHERS:
        kind = kinds[str(value) if isinstance(value, (list, dict)) else value]
        assert (kind in others) == check.is_valid(value), (schema, value)


def test_keywords_about_other_types_are_not_projected():
    with pytest.raises(NotProjectable, match="minimum"):
        projection({"anyOf": [{"pattern": "a"}, {"minimum": 3}]})


def test_union_complement_and_minimize_keep_the_language():
    rng = random.Random(0)
    patterns = ["a+1", "^b", "1.?a$", "(ab|1)*", "^a{2,3}$"]
    for p, q in itertools.combinations(patterns, 2):
        a, b = dfa_of(pattern_to_expr(p)), dfa_of(pattern_to_expr(q))
        both, either, neither = intersect(a, b), union(a, b), complement(union(a, b))
        small = [minimize(d) for d in (both, either, neither)]
        for text in rng.sample(STRINGS, 120):
            x, y = re.search(p, text) is not None, re.search(q, text) is not None
            for automaton, expected in zip(small, (x and y, x or y, not (x or y)), strict=True):
                assert accepts(automaton, text) == expected, (p, q, text)
        for d, m in zip((both, either, neither), small, strict=True):
            assert len(m.edges) <= len(d.edges) + 1


def test_minimize_finds_the_fewest_states():
    """Digit strings whose value is divisible by 3, built with 60 states (value mod 60): 3 remain; by 6,
    4 remain (mod 3, and for 0 mod 3 whether the last digit is even)."""
    for k, fewest in ((3, 3), (6, 4)):
        redundant = explore(0, lambda r, ch: (10 * r + int(ch)) % 60, lambda r, k=k: r % k == 0, "0123456789")
        assert len(redundant.edges) == 60 and len(minimize(redundant).edges) == fewest
        for n in range(500):
            assert accepts(minimize(redundant), str(n)) == (n % k == 0)


def test_string_logic_compiles_exactly():
    holds({"type": "string", "oneOf": [{"pattern": "a"}, {"pattern": "b"}]}, ["a", "xb", "ab1"[::2]],
          ["ab", "", "x"])
    holds({"type": "string", "maxLength": 4, "not": {"anyOf": [{"pattern": "^a"}, {"pattern": "1$"}]}},
          ["b", "", "ba", "b1a"], ["a", "b1", "bbbbb", 1])
    holds({"anyOf": [{"type": "null"}, {"type": "string", "not": {"pattern": "^[ab]*$"}}]},
          [None, "x", "ax"], ["", "ab", 3])


def test_large_string_products_agree_with_jsonschema():
    """Three patterns, a length and a `not`: products of a few thousand states, minimized to 2,300."""
    schema = {"type": "string", "minLength": 80, "allOf": [
        {"pattern": "^([a-z][0-9])+$"}, {"pattern": "(c1d3.{2,4}){4}"}, {"pattern": "(t|8){4}$"},
        {"not": {"pattern": "^(c1d3.{2,4}){4}"}}]}
    rng = random.Random(0)
    pairs = ["a0", "c1", "d3", "t8", "g3"]
    values = []
    for _ in range(400):
        body = "".join(rng.choice(["c1d3" + rng.choice(pairs) * rng.choice([1, 2]), rng.choice(pairs)])
                       for _ in range(rng.randint(12, 30)))
        values.append(rng.choice(["", "a0", "c1d3a0"]) + body + rng.choice(["t8t8", "8t", "t8t8t8", ""]))
    agrees(schema, values)


@pytest.mark.parametrize("schema", [{"type": "string", "minLength": 2}, {"type": "string", "minLength": 2, "maxLength": 3}])
def test_a_plain_strings_length_bounds(schema):
    """minLength and maxLength alone (no pattern or format): the plain string rule, not the automaton."""
    agrees(schema, STRINGS[:40] + OTHERS)
