"""allOf merged into one schema, and oneOf branches proven (or made) disjoint: the schema algebra the
compiler (json_schema.py) runs before writing any grammar.

    merge([{"type": ["string", "null"]}, {"type": "string", "maxLength": 3}], "#", compiler)
    -> {"type": ["string"], "maxLength": 3}

Merging is exact or refused: two keywords that cannot be combined into one (two different `const`s, two
`oneOf`s) raise TinyInferError naming them. A merge no value satisfies raises EmptySchemaError, which an
anyOf/oneOf branch survives by being dropped.
"""

from __future__ import annotations

import math

from tinyinfer.constrain.json_schema_check import Undecidable, search
from tinyinfer.constrain.json_schema_logic import (
    ALL_CONTAINS,
    ALL_MULTIPLES,
    ALL_PATTERNS,
    EVERY_PROPERTY,
    KEY_KEYWORDS,
    NOT_MULTIPLES,
    NOT_PATTERNS,
    NOT_STRINGS,
    READ_EACH_OTHER,
    SOME_PROPERTY,
    NotExpressible,
    as_every,
)
from tinyinfer.constrain.json_values import is_integral
from tinyinfer.errors import TinyInferError

MAX_ANY_OF_PRODUCT = 64  # branches of two merged anyOfs
COUNTED = ("minContains", "maxContains")  # a `contains` with these does not merge with another
# Keywords that only annotate: validators (and the compiler) ignore them.
ANNOTATIONS = {"title", "description", "$schema", "$id", "id", "$comment", "examples", "default", "deprecated",
               "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$anchor", "$vocabulary",
               "$defs", "definitions"}


class EmptySchemaError(TinyInferError):
    """A (sub)schema no value satisfies: fatal at the root, but an anyOf/oneOf branch is simply dropped."""


def schema_error(path: str, message: str) -> TinyInferError:
    return TinyInferError(f"JSON schema at {path}: {message}")


def empty_error(path: str, message: str) -> EmptySchemaError:
    return EmptySchemaError(f"JSON schema at {path}: {message}")


def _search_or_refuse(pattern: str, text: str, path: str) -> bool:
    try:
        return search(pattern, text)
    except Undecidable as e:
        raise schema_error(f"{path}/patternProperties", str(e)) from None


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


# ---------------------------------------------------------------- oneOf
def separate(branches: list, path: str, complement) -> list:
    """oneOf branches that cannot both match: provably disjoint already, or two object branches made
    disjoint by forbidding, in each, a key the other requires, or else each branch minus the other,
    `A and not B` (`complement(schema)` gives `not schema` or raises NotExpressible). Each branch then
    implies every other's original is false, which is what "exactly one" asks."""
    originals, branches = list(branches), list(branches)
    for i in range(len(branches)):
        for j in range(i):
            if _disjoint(originals[i], originals[j]):
                continue
            a, b = branches[i], branches[j]
            only_b = [k for k in b.get("required", []) if k not in a.get("required", [])] if _only_objects(a) else []
            only_a = [k for k in a.get("required", []) if k not in b.get("required", [])] if _only_objects(b) else []
            if only_a and only_b:
                branches[i] = {**a, "properties": {**a.get("properties", {}), only_b[0]: False}}
                branches[j] = {**b, "properties": {**b.get("properties", {}), only_a[0]: False}}
                continue
            try:
                branches[i] = {"allOf": [a, complement(_beyond(originals[j], originals[i]))]}
                branches[j] = {"allOf": [b, complement(_beyond(originals[i], originals[j]))]}
            except NotExpressible as e:
                raise schema_error(path, f"oneOf branches {j} and {i} may both match, and neither is expressible "
                                   f"minus the other ({e}); use anyOf if overlap is acceptable") from None
    return branches


def _beyond(b: dict, a: dict) -> dict:
    """The keywords of b that a does not already have (a and not b = a and not beyond(b, a)).

    _beyond({"type": "integer", "maximum": 9}, {"type": "integer", "minimum": 0}) -> {"maximum": 9}"""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return b
    return {k: v for k, v in b.items() if not (k in a and a[k] == v and not any(k in g for g in READ_EACH_OTHER))}


def _only_objects(schema) -> bool:
    return isinstance(schema, dict) and _value_types(schema) == {"object"} and not any(
        k in schema for k in ("anyOf", "oneOf", "allOf", "dependencies", "dependentRequired", "dependentSchemas"))


def _value_types(schema) -> set[str] | None:
    """The JSON types a schema admits, or None when unknown (combinators)."""
    if not isinstance(schema, dict) or any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return None
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        return {_json_type(v) for v in values}
    types = schema.get("type")
    if types is None:
        return None
    types = {types} if isinstance(types, str) else set(types)
    return types | {"integer"} if "number" in types else types


def _ranges_apart(a: dict, b: dict, types: set[str]) -> bool:
    """Two string (or number) schemas whose length (or value) ranges do not meet."""
    low, high = ("minLength", "maxLength") if types == {"string"} else ("minimum", "maximum")
    if types not in ({"string"}, {"integer"}):
        return False
    return any(y.get(high) is not None and x.get(low) is not None and y[high] < x[low] for x, y in ((a, b), (b, a)))


def _constants(schema) -> list | None:
    """Values the schema is limited to (a superset of its valid values), or None: const, enum, or an
    allOf part's."""
    if isinstance(schema, dict) and "const" in schema:
        return [schema["const"]]
    if isinstance(schema, dict) and "enum" in schema:
        return list(schema["enum"])
    if isinstance(schema, dict) and "allOf" in schema:
        return next((c for c in map(_constants, schema["allOf"]) if c is not None), None)
    return None


def _disjoint(a, b) -> bool:
    ta, tb = _value_types(a), _value_types(b)
    if ta is not None and tb is not None and not ta & tb:
        return True
    if ta is not None and ta == (tb or set()) and len(ta) == 1 and _ranges_apart(a, b, ta):
        return True
    ca, cb = _constants(a), _constants(b)
    if ca is not None and cb is not None:
        return not any(x == y and _json_type(x) == _json_type(y) for x in ca for y in cb)
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    for x, y in ((a, b), (b, a)):  # x requires a key that y forbids, or both require it with disjoint values
        for key in x.get("required", []):
            if y.get("additionalProperties") is False and key not in y.get("properties", {}):
                return True
            px, py = x.get("properties", {}).get(key), y.get("properties", {}).get(key)
            if key in y.get("required", []) and px is not None and py is not None and _disjoint(px, py):
                return True
    return False


# ---------------------------------------------------------------- allOf
def merge(parts: list, path: str, compiler) -> dict:
    """One schema equivalent to allOf(parts), or TinyInferError where tinyinfer cannot merge them
    (`compiler.deref` follows each part's $refs)."""
    result: dict = {}
    unique = [part for i, part in enumerate(parts) if part not in parts[:i]]  # A and A is A
    for part in unique:
        part = compiler.deref(part, path)
        if isinstance(part, dict) and "if" not in part:  # then/else without if have no effect
            part = {k: v for k, v in part.items() if k not in ("then", "else")}
        if part is True:
            continue
        if part is False:
            raise empty_error(path, "allOf contains schema false: no value is valid")
        if "allOf" in part:
            nested = merge([{k: v for k, v in part.items() if k != "allOf"}] + list(part["allOf"]), path, compiler)
            part = nested
        result = _merge_two(result, part, path)
    return result


def _merge_two(a: dict, b: dict, path: str) -> dict:
    if _keys_conflict(a, b):  # key keywords as `every` pairs, which merge by concatenation
        a, b = as_every(a), as_every(b)
    out = dict(a)
    for key, value in b.items():
        if key not in out or key in ANNOTATIONS:
            out.setdefault(key, value)
            continue
        mine = out[key]
        if key == "type":
            ta = {mine} if isinstance(mine, str) else set(mine)
            tb = {value} if isinstance(value, str) else set(value)
            both = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or ("number" in ta and "integer" in tb) else set())
            if not both:
                raise empty_error(path, f"allOf types {sorted(ta)} and {sorted(tb)} do not intersect")
            out[key] = sorted(both)
        elif key == "properties":
            merged = dict(mine)
            for name, sub in value.items():
                merged[name] = {"allOf": [merged[name], sub]} if name in merged else sub
            out[key] = merged
        elif key == "required":
            out[key] = list(dict.fromkeys(list(mine) + list(value)))
        elif key in ("minLength", "minItems", "minProperties", "minimum") or (
                key == "exclusiveMinimum" and not isinstance(mine, bool) and not isinstance(value, bool)):
            out[key] = max(mine, value)
        elif key in ("maxLength", "maxItems", "maxProperties", "maximum") or (
                key == "exclusiveMaximum" and not isinstance(mine, bool) and not isinstance(value, bool)):
            out[key] = min(mine, value)
        elif key == "enum":
            out[key] = [v for v in mine if v in value]
        elif key in (NOT_STRINGS, NOT_PATTERNS, ALL_PATTERNS, NOT_MULTIPLES, ALL_MULTIPLES, ALL_CONTAINS,
                     EVERY_PROPERTY, SOME_PROPERTY):
            out[key] = list(mine) + list(value)
        elif key == "contains" and mine != value and not any(k in x for x in (a, b) for k in COUNTED):
            out[ALL_CONTAINS] = [*out.get(ALL_CONTAINS, []), value]  # an item matching each (the walk)
        elif key == "multipleOf" and is_integral(mine) and is_integral(value):  # of both: of their lcm
            out[key] = math.lcm(int(mine), int(value))
        elif key == "multipleOf":  # decimal steps: the number automaton takes them all
            out[ALL_MULTIPLES] = [*out.get(ALL_MULTIPLES, []), value]
        elif key == "patternProperties" and "additionalProperties" not in a and "additionalProperties" not in b:
            out[key] = {p: {"allOf": [mine[p], value[p]]} if p in mine and p in value else mine.get(p, value.get(p))
                        for p in {**mine, **value}}
        elif key == "pattern":  # both must match
            out[ALL_PATTERNS] = [*out.get(ALL_PATTERNS, []), value]
        elif key == "not":  # not A and not B: not (A or B)
            out[key] = {"anyOf": [mine, value]}
        elif key == "anyOf" and len(mine) * len(value) <= MAX_ANY_OF_PRODUCT:  # (A or B) and (C or D): 4 pairs
            out[key] = [{"allOf": [x, y]} for x in mine for y in value]
        elif key in ("items", "additionalProperties", "additionalItems"):
            out[key] = False if False in (mine, value) else {"allOf": [mine, value]}
        elif mine != value:
            raise schema_error(path, f"allOf combines two different {key!r} values; merge them by hand")
    if "additionalProperties" in a or "additionalProperties" in b:
        _restrict_properties(out, a, b, path)
    return out


def _keys_conflict(a: dict, b: dict) -> bool:
    """Whether the key keywords of a and b cannot be merged keyword by keyword."""
    if any(k in x for x in (a, b) for k in (EVERY_PROPERTY, SOME_PROPERTY)):
        return any(k in x for x in (a, b) for k in KEY_KEYWORDS)
    differ = [k for k in KEY_KEYWORDS if k in a and k in b and a[k] != b[k]]
    closed = "additionalProperties" in a or "additionalProperties" in b
    if closed and a.get("patternProperties", {}) != b.get("patternProperties", {}):
        return True  # one part's additionalProperties covers keys that the other's patterns would take out
    return bool(differ) and (differ != ["patternProperties"] or closed)


def _restrict_properties(out: dict, a: dict, b: dict, path: str) -> None:
    """additionalProperties of one part also governs the properties only the other part declares."""
    props = dict(out.get("properties", {}))
    for x in (a, b):
        extra = x.get("additionalProperties", True)
        if extra is True:
            continue
        own, patterns = x.get("properties", {}), x.get("patternProperties", {})
        for name in list(props):
            if name not in own and not any(_search_or_refuse(p, name, path) for p in patterns):
                if extra is False:
                    if name in out.get("required", []):
                        raise empty_error(path, f"allOf requires {name!r} but additionalProperties forbids it")
                    del props[name]
                else:
                    props[name] = {"allOf": [props[name], extra]}
    if props or "properties" in out:
        out["properties"] = props
