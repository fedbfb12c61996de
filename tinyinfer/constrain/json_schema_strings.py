"""A schema built from string keywords and logic (allOf, anyOf, oneOf, not, if) as one string automaton.

Regular languages are closed under intersection, union and complement, so any boolean combination of
`pattern`, `minLength`, `format`, `enum` of strings... is again one deterministic automaton (regex_dfa.py),
where a grammar alternation could not say `not` or "exactly one". A value that is not a string passes or
fails such a schema by its type alone (string keywords hold for it vacuously), so the schema is projected:

    project({"anyOf": [{"pattern": "^a"}, {"not": {"maxLength": 3}}], "type": ["string", "null"]})
    -> (automaton of strings that start with "a" or have 4+ characters, {"null"})

    allOf -> intersect      anyOf -> union      not -> complement (and the other types flip)
    oneOf -> in exactly one branch: union of (branch i and no other branch)
    if C then T else E -> (C and T) or (not C and E)

A schema with any keyword about another type (minimum, items, required...) is not projected (None): the
compiler then works keyword by keyword.
"""

from __future__ import annotations

from tinyinfer.constrain.grammar import Literal, alt
from tinyinfer.constrain.json_schema_logic import (
    ALL_PATTERNS,
    NOT_PATTERNS,
    NOT_STRINGS,
)
from tinyinfer.constrain.regex_dfa import (
    Dfa,
    complement,
    dfa_of,
    intersect,
    length_dfa,
    minimize,
    union,
)

# Values of the other types, as far as string keywords and `type` can tell them apart.
OTHER_TYPES = frozenset({"null", "boolean", "integer", "fraction", "array", "object"})  # fraction: 1.5
STRING_KEYWORDS = {"minLength", "maxLength", "pattern", "format", NOT_STRINGS, NOT_PATTERNS, ALL_PATTERNS}
LOGIC = {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "type", "enum", "const"}
MAX_DEPTH = 64  # $refs followed in a row (a string schema cannot recurse usefully)


class NotProjectable(Exception):
    """The schema reads something other than strings and types."""


def project(schema, resolve, string_dfa, vocabulary, depth: int = 0) -> tuple[Dfa, frozenset]:
    """(automaton of the strings `schema` accepts, the other types it accepts). `resolve` follows a
    "$ref"; `string_dfa(keywords)` is the automaton of a dict of string keywords; `vocabulary` holds the
    keywords with a meaning (others are ignored, as validators ignore them). Raises NotProjectable."""
    if depth > MAX_DEPTH:
        raise NotProjectable("$ref chain too deep")
    if schema is True or schema is False:
        return (_ALL if schema else _NONE), (OTHER_TYPES if schema else frozenset())
    if not isinstance(schema, dict):
        raise NotProjectable("not a schema")
    foreign = [k for k in schema if k in vocabulary and k not in STRING_KEYWORDS and k not in LOGIC]
    if foreign:
        raise NotProjectable(f"keyword {foreign[0]!r}")
    if "$ref" in schema and any(k in vocabulary for k in schema if k != "$ref"):
        raise NotProjectable("$ref with sibling keywords (ignored up to draft 7, applied after)")
    strings, others = _ALL, OTHER_TYPES
    own = {k: v for k, v in schema.items() if k in STRING_KEYWORDS}
    if own:
        strings = string_dfa(own)
    parts = []
    if "type" in schema:
        parts.append(_types(schema["type"]))
    if "const" in schema or "enum" in schema:
        parts.append(_values([schema["const"]] if "const" in schema else schema["enum"]))

    def sub(subschema):
        return project(subschema, resolve, string_dfa, vocabulary, depth + 1)

    if "$ref" in schema:
        parts.append(sub(resolve(schema["$ref"])))
    parts += [sub(s) for s in schema.get("allOf", [])]
    if "anyOf" in schema:
        parts.append(_any([sub(s) for s in schema["anyOf"]]))
    if "oneOf" in schema:
        parts.append(_exactly_one([sub(s) for s in schema["oneOf"]]))
    if "not" in schema:
        parts.append(_not(sub(schema["not"])))
    if "if" in schema:
        condition = sub(schema["if"])
        then, otherwise = sub(schema.get("then", True)), sub(schema.get("else", True))
        parts.append(_any([_all([condition, then]), _all([_not(condition), otherwise])]))
    return _all([(strings, others), *parts])


_ALL, _NONE = length_dfa(0, None), Dfa([[]], [False])


def _types(types) -> tuple[Dfa, frozenset]:
    names = {types} if isinstance(types, str) else set(types)
    others = set(names & OTHER_TYPES) | ({"integer", "fraction"} if "number" in names else set())
    return (_ALL if "string" in names else _NONE), frozenset(others)


def _values(values: list) -> tuple[Dfa, frozenset]:
    if any(not isinstance(v, str) for v in values):
        raise NotProjectable("enum/const of values other than strings")
    return (minimize(dfa_of(alt(*map(Literal, values)))) if values else _NONE), frozenset()


def _all(parts: list) -> tuple[Dfa, frozenset]:
    strings, others = _ALL, OTHER_TYPES
    for dfa, types in parts:
        strings, others = minimize(intersect(strings, dfa)), others & types
    return strings, others


def _any(parts: list) -> tuple[Dfa, frozenset]:
    strings, others = _NONE, frozenset()
    for dfa, types in parts:
        strings, others = minimize(union(strings, dfa)), others | types
    return strings, others


def _not(part: tuple[Dfa, frozenset]) -> tuple[Dfa, frozenset]:
    dfa, types = part
    return minimize(complement(dfa)), OTHER_TYPES - types


def _exactly_one(parts: list) -> tuple[Dfa, frozenset]:
    return _any([_all([part, *(_not(other) for j, other in enumerate(parts) if j != i)])
                 for i, part in enumerate(parts)])
