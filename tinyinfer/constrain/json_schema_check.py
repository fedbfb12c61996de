"""Deciding whether one JSON value satisfies a schema: what makes a *finite* schema exact.

A grammar cannot say `not`, `if/then/else` or "exactly one of" in general, but when a schema admits only
finitely many values (an `enum` or `const` somewhere in every path, found by `finite_values`) the grammar is
just those values, each checked against the whole schema here:

    finite_values({"allOf": [{"enum": [1, 2, 3]}, {"not": {"const": 2}}]})  -> [1, 2, 3]   (candidates)
    satisfies(2, {"allOf": [{"enum": [1, 2, 3]}, {"not": {"const": 2}}]})  -> False

`satisfies` follows the JSON Schema validation vocabulary (drafts 4 to 2020-12) keyword by keyword, like
the `jsonschema` package does. Where it cannot be exact it raises `Undecidable` rather than guess: a `format`
(validators may treat it as an annotation or as an assertion), a pattern outside tinyinfer's regex subset,
dynamic references, `unevaluated*`. Patterns are matched with tinyinfer's own ECMAScript-subset regex
(regex.py), so the grammar and the check read a pattern the same way.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.grammar import Grammar
from tinyinfer.constrain.json_schema_logic import (
    ALL_CONTAINS,
    ALL_MULTIPLES,
    ALL_PATTERNS,
    EVERY_PROPERTY,
    NOT_MULTIPLES,
    NOT_PATTERNS,
    NOT_STRINGS,
    SOME_PROPERTY,
)
from tinyinfer.constrain.parser import ByteParser
from tinyinfer.constrain.regex import pattern_to_expr
from tinyinfer.errors import TinyInferError

UNDECIDABLE = ("format", "$dynamicRef", "$recursiveRef", "unevaluatedProperties", "unevaluatedItems")


class Undecidable(Exception):
    """`satisfies` cannot decide this schema exactly (the caller falls back or refuses)."""


def finite_values(schema, resolve, seen: frozenset = frozenset()) -> list | None:
    """Candidate values when the schema admits only finitely many (every valid value is among them, not
    every candidate is valid), else None. `resolve` maps a "$ref" string to its target schema."""
    if not isinstance(schema, dict):
        return [] if schema is False else None
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    types = schema.get("type")
    if types in ("null", "boolean") or (isinstance(types, list) and set(types) <= {"null", "boolean"}):
        return [None, True, False]
    parts = [finite_values(s, resolve, seen) for s in schema.get("allOf", [])]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        parts.append(finite_values(resolve(ref), resolve, seen | {ref}))
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            branches = [finite_values(s, resolve, seen) for s in schema[key]]
            parts.append(None if None in branches else [v for b in branches for v in b])
    found = [p for p in parts if p is not None]
    return min(found, key=len) if found else None


def satisfies(value, schema, root, resolve) -> bool:
    """Whether `value` is valid for `schema` (a part of `root`; `resolve` follows "$ref" strings)."""
    return _Checker(root, resolve).valid(value, schema)


def equal(a, b) -> bool:
    """JSON equality: 1 == 1.0, but true != 1 and [true] != [1]."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (dict, list, str)) or isinstance(b, (dict, list, str)):
        return type(a) is type(b) and a == b
    return a == b


@lru_cache(maxsize=256)
def _pattern_parser(pattern: str) -> ByteParser:
    try:
        return ByteParser(compile_grammar(Grammar({"root": pattern_to_expr(pattern)})))
    except TinyInferError as e:
        raise Undecidable(str(e)) from None


def search(pattern: str, text: str) -> bool:
    """ECMAScript `pattern` semantics (a match anywhere unless anchored), in tinyinfer's regex subset."""
    parser = _pattern_parser(pattern)
    return parser.accepts(parser.step_bytes(parser.initial, text.encode()))


class _Checker:
    def __init__(self, root, resolve):
        self.resolve = resolve
        draft = root.get("$schema", "") if isinstance(root, dict) else ""
        self.draft4 = "draft-04" in draft or "draft-03" in draft  # 1.0 is not an integer there
        self.ref_alone = self.draft7_or_older = self.draft4 or "draft-06" in draft or "draft-07" in draft

    def is_type(self, value, kind: str) -> bool:
        if kind == "integer":
            return (isinstance(value, int) and not isinstance(value, bool)) or (
                not self.draft4 and isinstance(value, float) and value.is_integer())
        if kind == "number":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        types = {"null": type(None), "boolean": bool, "string": str, "array": list, "object": dict}
        if kind not in types:
            raise Undecidable(f"unknown type {kind!r}")
        return isinstance(value, types[kind])

    def valid(self, value, schema) -> bool:
        if schema is True or schema is False:
            return schema
        if not isinstance(schema, dict):
            raise Undecidable(f"a schema must be an object or a boolean, not {schema!r}")
        for key in UNDECIDABLE:
            if key in schema:
                raise Undecidable(f"keyword {key!r} cannot be decided exactly")
        if "$ref" in schema and self.ref_alone:  # drafts 4-7: a $ref's sibling keywords are ignored
            return self.valid(value, self.resolve(schema["$ref"]))
        return all(check(self, value, schema[key], schema) for key, check in _KEYWORDS.items() if key in schema)

    # ---------------------------------------------------------------- any type
    def type_(self, value, types, schema) -> bool:
        return any(self.is_type(value, t) for t in ([types] if isinstance(types, str) else types))

    def enum(self, value, values, schema) -> bool:
        return any(equal(value, v) for v in values)

    def const(self, value, constant, schema) -> bool:
        return equal(value, constant)

    def ref(self, value, ref, schema) -> bool:
        return self.valid(value, self.resolve(ref))

    def all_of(self, value, schemas, schema) -> bool:
        return all(self.valid(value, s) for s in schemas)

    def any_of(self, value, schemas, schema) -> bool:
        return any(self.valid(value, s) for s in schemas)

    def one_of(self, value, schemas, schema) -> bool:
        return sum(self.valid(value, s) for s in schemas) == 1

    def not_(self, value, negated, schema) -> bool:
        return not self.valid(value, negated)

    def if_(self, value, condition, schema) -> bool:
        branch = schema.get("then", True) if self.valid(value, condition) else schema.get("else", True)
        return self.valid(value, branch)

    # ---------------------------------------------------------------- numbers
    def bound(self, value, limit, schema, key: str) -> bool:
        if not self.is_type(value, "number"):
            return True
        if isinstance(limit, bool):  # draft 4: exclusiveMinimum/Maximum modify minimum/maximum
            return True
        return {"minimum": value >= limit, "maximum": value <= limit, "exclusiveMinimum": value > limit,
                "exclusiveMaximum": value < limit}[key] and self.draft4_exclusive(value, schema, key)

    def draft4_exclusive(self, value, schema, key: str) -> bool:
        flag = {"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}.get(key)
        return not (flag and schema.get(flag) is True and value == schema[key])

    def multiple_of(self, value, step, schema) -> bool:
        """As the jsonschema package decides it (float division for a float step)."""
        if not self.is_type(value, "number"):
            return True
        if isinstance(step, float):
            quotient = value / step
            if math.isinf(quotient):
                return (Fraction(value) / Fraction(step)).denominator == 1
            return int(quotient) == quotient
        return value % step == 0

    # ---------------------------------------------------------------- strings
    def length(self, value, limit, schema, key: str) -> bool:
        if not isinstance(value, str):
            return True
        return len(value) >= limit if key == "minLength" else len(value) <= limit  # in code points

    def pattern(self, value, pattern, schema) -> bool:
        return not isinstance(value, str) or search(pattern, value)

    # ---------------------------------------------------------------- arrays
    def items(self, value, items, schema) -> bool:
        if not isinstance(value, list):
            return True
        if isinstance(items, list):  # draft 4-2019: a tuple, then additionalItems
            rest = schema.get("additionalItems", True)
            return all(self.valid(v, items[i] if i < len(items) else rest) for i, v in enumerate(value))
        start = len(schema.get("prefixItems", []))
        return all(self.valid(v, items) for v in value[start:])

    def prefix_items(self, value, prefix, schema) -> bool:
        return not isinstance(value, list) or all(self.valid(v, s) for v, s in zip(value, prefix))

    def count(self, value, limit, schema, key: str) -> bool:
        kind = list if key in ("minItems", "maxItems") else dict
        if not isinstance(value, kind):
            return True
        return len(value) >= limit if key.startswith("min") else len(value) <= limit

    def unique_items(self, value, unique, schema) -> bool:
        if not (unique and isinstance(value, list)):
            return True
        return not any(equal(value[i], value[j]) for i in range(len(value)) for j in range(i))

    def contains(self, value, contained, schema) -> bool:
        if not isinstance(value, list):
            return True
        matches = sum(self.valid(v, contained) for v in value)
        return schema.get("minContains", 1) <= matches <= schema.get("maxContains", math.inf)

    # ---------------------------------------------------------------- objects
    def properties(self, value, props, schema) -> bool:
        return not isinstance(value, dict) or all(self.valid(value[k], s) for k, s in props.items() if k in value)

    def pattern_properties(self, value, patterns, schema) -> bool:
        return not isinstance(value, dict) or all(
            self.valid(v, s) for p, s in patterns.items() for k, v in value.items() if search(p, k))

    def additional_properties(self, value, extra, schema) -> bool:
        if not isinstance(value, dict):
            return True
        declared, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
        return all(self.valid(v, extra) for k, v in value.items()
                   if k not in declared and not any(search(p, k) for p in patterns))

    def required(self, value, names, schema) -> bool:
        return not isinstance(value, dict) or all(k in value for k in names)

    def property_names(self, value, names, schema) -> bool:
        return not isinstance(value, dict) or all(self.valid(k, names) for k in value)

    def draft7_dependencies(self, value, deps, schema) -> bool:
        """`dependencies` (split in two by draft 2019-09): validators of later drafts ignore it."""
        if not self.draft7_or_older:
            raise Undecidable("'dependencies' is a keyword up to draft 7 only; say which draft with $schema")
        return self.dependencies(value, deps, schema)

    def dependencies(self, value, deps, schema) -> bool:
        if not isinstance(value, dict):
            return True
        return all(all(k in value for k in need) if isinstance(need, list) else self.valid(value, need)
                   for name, need in deps.items() if name in value)


def _bound(key):
    return lambda self, value, limit, schema: self.bound(value, limit, schema, key)


def _length(key):
    return lambda self, value, limit, schema: self.length(value, limit, schema, key)


def _count(key):
    return lambda self, value, limit, schema: self.count(value, limit, schema, key)


_KEYWORDS = {
    "type": _Checker.type_, "enum": _Checker.enum, "const": _Checker.const, "$ref": _Checker.ref,
    "allOf": _Checker.all_of, "anyOf": _Checker.any_of, "oneOf": _Checker.one_of, "not": _Checker.not_,
    "if": _Checker.if_, "multipleOf": _Checker.multiple_of, "pattern": _Checker.pattern,
    **{k: _bound(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")},
    **{k: _length(k) for k in ("minLength", "maxLength")},
    **{k: _count(k) for k in ("minItems", "maxItems", "minProperties", "maxProperties")},
    "items": _Checker.items, "prefixItems": _Checker.prefix_items, "uniqueItems": _Checker.unique_items,
    "contains": _Checker.contains, "properties": _Checker.properties,
    "patternProperties": _Checker.pattern_properties, "additionalProperties": _Checker.additional_properties,
    "required": _Checker.required, "propertyNames": _Checker.property_names,
    "dependencies": _Checker.draft7_dependencies, "dependentRequired": _Checker.dependencies,
    "dependentSchemas": _Checker.dependencies,
    NOT_STRINGS: lambda self, value, excluded, schema: value not in excluded,
    NOT_PATTERNS: lambda self, value, patterns, schema: not isinstance(value, str) or not any(
        search(p, value) for p in patterns),
    ALL_PATTERNS: lambda self, value, patterns, schema: not isinstance(value, str) or all(
        search(p, value) for p in patterns),
    NOT_MULTIPLES: lambda self, value, steps, schema: not any(self.multiple_of(value, s, schema) for s in steps),
    ALL_MULTIPLES: lambda self, value, steps, schema: all(self.multiple_of(value, s, schema) for s in steps),
    ALL_CONTAINS: lambda self, value, wanted, schema: not isinstance(value, list) or all(
        any(self.valid(v, c) for v in value) for c in wanted),
    EVERY_PROPERTY: lambda self, value, pairs, schema: not isinstance(value, dict) or all(
        self.valid(v, vs) for ks, vs in pairs for k, v in value.items() if self.valid(k, ks)),
    SOME_PROPERTY: lambda self, value, pairs, schema: not isinstance(value, dict) or all(
        any(self.valid(k, ks) and self.valid(v, vs) for k, v in value.items()) for ks, vs in pairs),
}
