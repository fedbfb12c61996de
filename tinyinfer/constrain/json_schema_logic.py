"""`not` rewritten into schemas without it, where the complement is exactly expressible.

A schema object is the conjunction of its keywords, so `not {K1, K2}` is `anyOf [not {K1}, not {K2}]`
(De Morgan), and most single keywords have a plain complement. A keyword about one type (minLength,
maximum, required...) holds for every value of another type, so its complement is "of that type, and the
bound fails":

    negate({"type": "string"})          -> {"type": ["null", "boolean", "object", "array", "number"]}
    negate({"minLength": 3})            -> {"type": "string", "maxLength": 2}
    negate({"required": ["a", "b"]})    -> {"anyOf": [{"type": "object", "properties": {"a": false}},
                                                      {"type": "object", "properties": {"b": false}}]}
    negate({"const": 3})                -> {"anyOf": [{"type": [...all but number]},
                                                      {"type": "number", "exclusiveMaximum": 3},
                                                      {"type": "number", "exclusiveMinimum": 3}]}

An object other than a constant object has another key, lacks one of its keys, or holds another value
under one of them (the last recursively: a constant nested 30 levels deep takes 30 levels of `anyOf`).
Strings other than a finite set, or not matching a pattern, are said with the private keywords NOT_STRINGS
and NOT_PATTERNS, which the compiler turns into automata (regex_dfa.py); numbers that are no multiple of a
step with NOT_MULTIPLES (number_dfa.py). Keywords whose complement a grammar cannot say (`uniqueItems`,
`patternProperties`, `dependencies`, keywords that read each other such as `additionalProperties` with
`properties`) raise NotExpressible, and the caller refuses the schema with the keyword's name.
"""

from __future__ import annotations

TYPES = ("null", "boolean", "object", "array", "string", "number")  # "integer" lies inside "number"
# Private keywords (keys no JSON document can hold): a string, but none of these / matching none of these
# patterns / matching all of these patterns too (two `pattern`s merged by allOf).
NOT_STRINGS = ("not", "strings")
NOT_PATTERNS = ("not", "patterns")
ALL_PATTERNS = ("all", "patterns")
NOT_MULTIPLES = ("not", "multiples")  # a number, but a multiple of none of these steps
ALL_MULTIPLES = ("all", "multiples")  # a multiple of each of these steps too (two `multipleOf`s merged)
ALL_CONTAINS = ("all", "contains")  # an array with an item matching each of these too (two `contains` merged)
# [key schema, value schema] pairs: every property whose key is valid for the first has a value valid for the
# second / some property has a key valid for the first and a value valid for the second.
EVERY_PROPERTY = ("every", "property")
SOME_PROPERTY = ("some", "property")
KEY_KEYWORDS = ("patternProperties", "additionalProperties", "propertyNames")
# keyword -> (the type it is about, the keyword that bounds the other side, how the bound moves)
_COUNTERS = {"minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
             "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
             "minProperties": ("object", "maxProperties", -1), "maxProperties": ("object", "minProperties", 1)}
_BOUNDS = {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
           "exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}
# Keywords whose meaning depends on each other: a schema is the conjunction of its keywords except these.
READ_EACH_OTHER = [{"if", "then", "else"}, {"contains", "minContains", "maxContains"},
                   {"additionalProperties", "properties", "patternProperties"},
                   {"additionalItems", "items", "prefixItems"}]


class NotExpressible(Exception):
    """The complement of this keyword is not expressible as a grammar; the message names the keyword."""


def negate(schema, resolve, annotations) -> dict | bool:
    """A schema, free of `not` at its top, admitting exactly the values `schema` rejects."""
    if isinstance(schema, bool):
        return not schema
    keywords = {k: v for k, v in schema.items() if k not in annotations}
    for lone, needs in (("then", "if"), ("else", "if"), ("minContains", "contains"), ("maxContains", "contains")):
        if needs not in keywords:  # without it, no effect
            keywords.pop(lone, None)
    if "$ref" in keywords:  # (its siblings are ignored in drafts 4-7, merged after: refuse the ambiguity)
        if len(keywords) > 1:
            raise NotExpressible("'$ref' with sibling keywords")
        return negate(resolve(keywords["$ref"]), resolve, annotations)
    if not keywords:
        return False
    if any(k in keywords for k in KEY_KEYWORDS):  # (then `properties` no longer reads the others)
        keywords = as_every(keywords)
    if len(keywords) > 1:
        for group in READ_EACH_OTHER:
            if len(group & keywords.keys()) > 1:
                raise NotExpressible(f"keywords {sorted(group & keywords.keys())} (which read each other)")
        return {"anyOf": [negate({k: v}, resolve, annotations) for k, v in keywords.items()]}
    (key, value), = keywords.items()
    return _negate_keyword(key, value, resolve, annotations)


def _negate_keyword(key: str, value, resolve, annotations):
    if key == "not":
        return value
    if key == "type":
        return _other_types(value)
    if key in ("const", "enum"):
        return _not_values([value] if key == "const" else list(value))
    if key == "allOf":
        return {"anyOf": [negate(s, resolve, annotations) for s in value]}
    if key == "anyOf":
        return {"allOf": [negate(s, resolve, annotations) for s in value]}
    if key in _COUNTERS:
        kind, other, step = _COUNTERS[key]
        bound = value + step
        return False if bound < 0 else {"type": kind, other: bound}
    if key in _BOUNDS and not isinstance(value, bool):
        return {"type": "number", _BOUNDS[key]: value}
    if key == "required":
        if not value:
            return False
        return {"anyOf": [{"type": "object", "properties": {name: False}} for name in value]}
    if key == "pattern":
        return {"type": "string", NOT_PATTERNS: [value]}
    if key == "multipleOf":
        return {"type": "number", NOT_MULTIPLES: [value]}
    if key == "items" and isinstance(value, (dict, bool)):  # some item fails it
        return {"type": "array", "contains": negate(value, resolve, annotations)}
    if key == "contains":  # no item matches
        return {"type": "array", "items": negate(value, resolve, annotations)}
    if key == ALL_CONTAINS:  # for one of them, no item matches
        return {"anyOf": [{"type": "array", "items": negate(c, resolve, annotations)} for c in value]}
    if key == EVERY_PROPERTY:  # some property breaks one of them
        return {"anyOf": [{"type": "object", SOME_PROPERTY: [[k, negate(v, resolve, annotations)]]} for k, v in value]}
    if key == SOME_PROPERTY:  # for one of them, every property breaks it
        return {"anyOf": [{"type": "object", EVERY_PROPERTY: [[k, negate(v, resolve, annotations)]]} for k, v in value]}
    if key in ("dependencies", "dependentRequired", "dependentSchemas"):  # some present key's dependency fails
        return {"anyOf": [{"allOf": [{"type": "object", "required": [name]}, negate(
            {"required": need} if isinstance(need, list) else need, resolve, annotations)]}
            for name, need in value.items()]} if value else False
    if key == "properties":  # some declared property is present with a value its schema rejects
        return {"anyOf": [{"type": "object", "required": [name], "properties": {name: negate(s, resolve, annotations)}}
                          for name, s in value.items()]} if value else False
    raise NotExpressible(f"keyword {key!r}")


def as_every(schema: dict) -> dict:
    """patternProperties, additionalProperties and propertyNames as EVERY_PROPERTY pairs, which no longer
    read each other (so they merge and negate keyword by keyword):

        as_every({"properties": {"a": {}}, "patternProperties": {"^x": S}, "additionalProperties": False})
        -> {"properties": {"a": {}}, EVERY_PROPERTY: [[{"pattern": "^x"}, S],
                                                      [{"not": {"anyOf": [{"enum": ["a"]}, {"pattern": "^x"}]}}, False]]}"""
    out = {k: v for k, v in schema.items() if k not in KEY_KEYWORDS}
    patterns = schema.get("patternProperties", {})
    every = list(schema.get(EVERY_PROPERTY, [])) + [[{"pattern": p}, s] for p, s in patterns.items()]
    if schema.get("additionalProperties", True) is not True:
        known = ([{"enum": list(schema["properties"])}] if schema.get("properties") else []) + [
            {"pattern": p} for p in patterns]
        every.append([{"not": {"anyOf": known}} if known else True, schema["additionalProperties"]])
    if schema.get("propertyNames", True) is not True:
        every.append([{"not": schema["propertyNames"]}, False])
    if every:
        out[EVERY_PROPERTY] = every
    return out


def _other_types(types) -> dict | bool:
    """`not {type: ...}`: the remaining types (integers can't be taken out of numbers: 1.0 is one)."""
    taken = {types} if isinstance(types, str) else set(types)
    if "integer" in taken and "number" not in taken:
        raise NotExpressible("keyword 'type' (numbers that are not integers)")
    rest = [t for t in TYPES if t not in taken]
    return {"type": rest} if rest else False


def _not_values(values: list) -> dict | bool:
    """Everything but a finite set of values: per type, the type's values minus the excluded ones."""
    options = []
    for kind in TYPES:
        excluded = [v for v in values if _type_of(v) == kind]
        if not excluded:
            options.append({"type": kind})
        elif kind == "null":
            continue
        elif kind == "boolean":
            options += [{"const": b} for b in (True, False) if b not in excluded]
        elif kind == "string":
            options.append({"type": "string", NOT_STRINGS: excluded})
        elif kind == "number":
            options += _numbers_apart(sorted(set(excluded)))
        elif kind == "object":  # other than each excluded object
            others = [_other_object(o) for o in excluded]
            options.append({"allOf": others} if len(others) > 1 else others[0])
        else:
            raise NotExpressible(f"keyword 'enum'/'const' (an {kind} other than given ones)")
    return {"anyOf": options} if options else False


def _other_object(excluded: dict) -> dict:
    """Objects other than `excluded`: one with a key it lacks, or without one of its keys, or with one of its
    keys holding another value (recursively, so a nested constant needs as many levels as it has):

        _other_object({"a": 1}) -> {"anyOf": [{"type": "object", SOME_PROPERTY: [[{"not": {"enum": ["a"]}}, True]]},
                                              {"type": "object", "properties": {"a": False}},
                                              {"type": "object", "required": ["a"], "properties": {"a": <not 1>}}]}"""
    keys = list(excluded)
    if not keys:
        return {"type": "object", "minProperties": 1}
    return {"anyOf": [{"type": "object", SOME_PROPERTY: [[{"not": {"enum": keys}}, True]]},
                      *({"type": "object", "properties": {k: False}} for k in keys),
                      *({"type": "object", "required": [k], "properties": {k: _not_values([v])}}
                        for k, v in excluded.items())]}


def _numbers_apart(points: list) -> list[dict]:
    """The open intervals between excluded numbers: [3, 5] -> (-inf, 3), (3, 5), (5, inf)."""
    edges = [None, *points, None]
    return [{"type": "number", **({} if lo is None else {"exclusiveMinimum": lo}),
             **({} if hi is None else {"exclusiveMaximum": hi})} for lo, hi in zip(edges, edges[1:])]


def _type_of(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "number")
