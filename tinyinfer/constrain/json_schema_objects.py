"""Objects as key languages: "every property whose key is in K has a value in V" and "some property has
a key in K and a value in V".

`patternProperties`, `additionalProperties` and `propertyNames` all say the first (json_schema_logic.as_every
rewrites them into EVERY_PROPERTY pairs), and their complements say the second (SOME_PROPERTY):

    not {"propertyNames": {"pattern": "^a"}}     ->  some [{"not": {"pattern": "^a"}}, true]
    not {"patternProperties": {"x": {"type": "string"}}}
                                                 ->  some [{"pattern": "x"}, {"not": {"type": "string"}}]

A key language is a string schema, compiled to one automaton (json_schema_strings.py). An object is then:

- the declared properties, in order, each value also valid for every pair whose key language holds the name;
- undeclared keys split into *cells* by which key languages they belong to: one automaton and one value
  schema per cell (a cell whose value schema is `false` holds keys that cannot appear);
- a finite cell (`^[0-9]$`: ten keys) listed key by key as optional properties, so that no key repeats;
- a walk over the properties (json_schema_walk.py) that remembers which `some` pairs are met so far and
  how many properties are written, for minProperties/maxProperties. (Undeclared keys of an infinite cell
  may repeat, as everywhere in the compiler: a grammar cannot compare keys.)

    {"type": "object", "maxProperties": 1, SOME_PROPERTY: [[{"pattern": "a"}, true], [{"pattern": "b"}, true]]}
    -> "{" key-in-(a and b) ":" json-value "}"
"""

from __future__ import annotations

import json

from tinyinfer.constrain.grammar import Literal, alt, seq
from tinyinfer.constrain.json_schema_logic import (
    EVERY_PROPERTY,
    SOME_PROPERTY,
    as_every,
)
from tinyinfer.constrain.json_schema_merge import schema_error
from tinyinfer.constrain.json_schema_strings import NotProjectable
from tinyinfer.constrain.json_schema_walk import Walk
from tinyinfer.constrain.json_values import quoted
from tinyinfer.constrain.regex_dfa import (
    Dfa,
    accepts,
    complement,
    dfa_of,
    intersect,
    length_dfa,
    minimize,
)

MAX_PAIRS = 6  # `every` pairs: undeclared keys fall into up to 2**6 cells
MAX_SOME = 4  # `some` pairs: the walk remembers up to 2**4 sets of them
MAX_LISTED_KEYS = 32  # a finite cell with at most this many keys is listed key by key


def compile_object(compiler, schema: dict, path: str):
    """The grammar of an object schema with EVERY_PROPERTY / SOME_PROPERTY pairs (see the module doc)."""
    schema = as_every(schema)
    every = [(k, v) for k, v in schema.get(EVERY_PROPERTY, []) if v is not True and v != {}]
    some = list(schema.get(SOME_PROPERTY, []))
    if len(every) > MAX_PAIRS or len(some) > MAX_SOME:
        raise schema_error(path, f"more than {MAX_PAIRS} key patterns or {MAX_SOME} required key patterns")
    keys = [_key_language(compiler, k, path) for k, _ in every]
    required = list(dict.fromkeys(schema.get("required", [])))
    declared = dict(schema.get("properties", {}))
    declared |= {name: True for name in required if name not in declared}
    declared = {name: _all_of([s, *(v for (_, v), lang in zip(every, keys, strict=True) if accepts(lang, name))])
                for name, s in declared.items()}
    cells = _cells(complement(dfa_of(alt(*map(Literal, declared)))) if declared else length_dfa(0, None),
                   keys, [v for _, v in every])
    listed = []
    for automaton, value in list(cells):
        names = _finite_strings(automaton, MAX_LISTED_KEYS)
        if names is not None:
            cells.remove((automaton, value))
            listed += [(name, value) for name in names]
    declared |= dict(listed)
    wanted = [(_key_language(compiler, k, path), v) for k, v in some]
    walk = _PropertyWalk(compiler, path, declared, set(required), cells, wanted,
                         schema.get("minProperties", 0), schema.get("maxProperties"))
    return seq(Literal("{"), walk.start(), Literal("}"))


def _key_language(compiler, key_schema, path: str) -> Dfa:
    try:
        strings, _ = compiler.project_strings(key_schema, path)
    except NotProjectable as e:
        raise schema_error(path, f"key patterns must be string schemas ({e})") from None
    return strings


def _all_of(schemas: list):
    schemas = [s for s in schemas if s is not True and s != {}]
    if False in schemas:
        return False
    return True if not schemas else schemas[0] if len(schemas) == 1 else {"allOf": schemas}


def _cells(keys: Dfa, languages: list[Dfa], values: list) -> list[tuple[Dfa, object]]:
    """Split the keys by membership in each language; a cell's value schema is the allOf of the values of
    the languages it lies in. Empty cells and cells whose value is `false` are dropped."""
    cells = [(minimize(keys), True)]
    for language, value in zip(languages, values, strict=True):
        split = []
        for automaton, cell_value in cells:
            inside = (minimize(intersect(automaton, language)), _all_of([cell_value, value]))
            outside = (minimize(intersect(automaton, complement(language))), cell_value)
            split += [(a, v) for a, v in (inside, outside) if v is not False and any(a.accepting)]
        cells = split
    return cells


def _finite_strings(d: Dfa, limit: int) -> list[str] | None:
    """The strings a minimized automaton accepts, if they are at most `limit`, else None."""
    found, todo = [], [(0, "", frozenset([0]))]
    while todo:
        state, text, path = todo.pop()
        if d.accepting[state]:
            found.append(text)
        for lo, hi, target in d.edges[state]:
            if target in path or hi - lo >= limit:  # a loop, or too wide a range
                return None
            todo += [(target, text + chr(c), path | {target}) for c in range(lo, hi + 1)]
        if len(found) + len(todo) > limit:
            return None
    return sorted(found)


class _PropertyWalk(Walk):
    """Objects: the declared properties in order (optional ones may be skipped), then undeclared ones from
    the cells; requirement j is "some property has a key in wanted[j][0] and a value in wanted[j][1]"."""

    def __init__(self, compiler, path, declared: dict, required: set, cells: list, wanted: list, lo: int, hi):
        super().__init__(compiler, path, wanted, lo, hi, "props")
        self.declared, self.required, self.cells = list(declared.items()), required, cells
        self.key_rules: dict = {}

    def elements(self, i: int) -> list:
        out = []
        if i < len(self.declared):
            name, value = self.declared[i]
            key = Literal(json.dumps(name, ensure_ascii=False) + ":")
            for chosen in self.claims(j for j, (k, _) in enumerate(self.wanted) if accepts(k, name)):
                expr = self.value(value, chosen)
                if expr is not None:
                    out.append((seq(key, expr), chosen, i + 1))
            return out
        for c, (automaton, value) in enumerate(self.cells):
            for chosen in self.claims(range(len(self.wanted))):
                key, expr = self.key(c, automaton, chosen), self.value(value, chosen)
                if key is not None and expr is not None:
                    out.append((seq(key, Literal(":"), expr), chosen, i))
        return out

    def skips(self, i: int) -> list:
        return [i + 1] if i < len(self.declared) and self.declared[i][0] not in self.required else []

    def may_end(self, i: int) -> bool:
        return i == len(self.declared)

    def requirement_schema(self, j: int):
        return self.wanted[j][1]

    def key(self, cell: int, automaton: Dfa, chosen: tuple):
        """A quoted key of cell `cell` in the key languages of the requirements `chosen` (None: no such key)."""
        if (cell, chosen) not in self.key_rules:
            for j in chosen:
                automaton = intersect(automaton, self.wanted[j][0])
            try:
                self.key_rules[(cell, chosen)] = quoted(self.compiler.automaton_rules(minimize(automaton), "key"))
            except ValueError:
                self.key_rules[(cell, chosen)] = None
        return self.key_rules[(cell, chosen)]
