"""JSON Schema to grammar: every value the grammar derives is valid for the schema.

    schema_to_grammar({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
                       "required": ["n"], "additionalProperties": False})
    -> root ::= "{\\"n\\":" ([1-9] [0-9]*) "}"       (roughly: plus the shared json-* rules)

Design:

- Each subschema becomes an expression; every `$ref` target becomes a named rule, so recursive schemas
  become recursive grammars.
- Objects list their properties in the schema's order (required ones always, optional ones maybe), then
  any additional properties, whose keys differ from the declared names. Whitespace is compact.
- `allOf` is merged into one schema (json_schema_merge.py); `anyOf` is an alternation; `oneOf` is an
  alternation only when the branches provably cannot both match (different types, distinct constants,
  a required key the other branch forbids): a grammar cannot say "exactly one".
- A schema with an enum/const on every path (json_schema_check.finite_values) is the alternation of its
  candidates that satisfy the *whole* schema, decided value by value: `not`, `if`, `oneOf`... are exact there.
- `not X` is replaced by X's complement where that is expressible (json_schema_logic.py: other types,
  the other side of a bound, a missing required key, strings or numbers other than given ones...), and
  `if C then T else E` by the disjoint cases `C and T`, `(not C) and E`.
- Numbers with `multipleOf` (integer or decimal steps), `not multipleOf`, or bounds that are not integers
  are automata over the number's text (number_dfa.py): divisibility and comparison read digit by digit.
- String constraints that a single expression cannot hold together (pattern and length, two patterns,
  pattern and format, not-pattern) are intersected as deterministic automata (regex_dfa.py); so are
  object keys under `patternProperties` (split by the set of patterns each key matches) and `propertyNames`.
- `contains` counts matching items between the others; several `contains` on one array (from allOf, or
  `not items`, which is a contains of the complement) are requirements of one item walk
  (json_schema_walk.py); `uniqueItems` is exact over a finite set of item values. An optional property
  whose schema admits no value is left out (the key then never appears).
- A keyword the grammar cannot express is refused with TinyInferError naming the keyword and the path
  (`uniqueItems` over open-ended items, `oneOf` with overlapping branches, a decimal `multipleOf` that
  float division decides inexactly...). Keywords that only annotate (title, description, default, examples,
  $schema, ...) are ignored, and so are words outside the JSON Schema vocabulary, exactly as validators
  ignore them.
"""

from __future__ import annotations

import itertools
import json
import re
from fractions import Fraction
from urllib.parse import unquote

from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.grammar import (
    EMPTY,
    CharClass,
    Grammar,
    Literal,
    Ref,
    Repeat,
    alt,
    optional,
    seq,
)
from tinyinfer.constrain.json_schema_check import (
    Undecidable,
    equal,
    finite_values,
    satisfies,
    search,
)
from tinyinfer.constrain.json_schema_logic import (
    ALL_CONTAINS,
    ALL_MULTIPLES,
    ALL_PATTERNS,
    EVERY_PROPERTY,
    NOT_MULTIPLES,
    NOT_PATTERNS,
    NOT_STRINGS,
    SOME_PROPERTY,
    NotExpressible,
    negate,
)
from tinyinfer.constrain.json_schema_merge import (
    ANNOTATIONS,
    EmptySchemaError,
    empty_error,
    merge,
    schema_error,
    separate,
)
from tinyinfer.constrain.json_schema_objects import compile_object
from tinyinfer.constrain.json_schema_strings import NotProjectable, project
from tinyinfer.constrain.json_schema_walk import ItemWalk
from tinyinfer.constrain.json_values import (
    BASE_RULES,
    FORMATS,
    UNSUPPORTED_FORMATS,
    decimal_range,
    format_expr,
    int_range,
    is_integral,
    json_content,
    quoted,
    string_not_in,
)
from tinyinfer.constrain.number_dfa import bound_dfa, decimal_steps, multiples_dfa
from tinyinfer.constrain.parser import ByteParser
from tinyinfer.constrain.regex import pattern_to_expr, regex_to_expr
from tinyinfer.constrain.regex_dfa import (
    AutomatonTooLarge,
    Dfa,
    accepts,
    accepts_everything,
    complement,
    dfa_of,
    intersect,
    length_dfa,
    minimize,
    to_rules,
)
from tinyinfer.errors import TinyInferError

TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
SUPPORTED = {"type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
             "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
             "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "allOf", "$ref",
             "minProperties", "maxProperties", "uniqueItems", "patternProperties", "dependencies",
             "dependentRequired", "dependentSchemas", "propertyNames", "contains", "minContains", "maxContains", NOT_STRINGS,
             NOT_PATTERNS, ALL_PATTERNS, NOT_MULTIPLES, ALL_MULTIPLES, ALL_CONTAINS, EVERY_PROPERTY, SOME_PROPERTY}
UNSUPPORTED = {"not", "if", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$dynamicAnchor",
               "$recursiveRef", "$recursiveAnchor", "contentSchema"}
LOGIC = ("allOf", "anyOf", "oneOf", "not", "if")
STRING_KEYWORDS = {"type", "pattern", "minLength", "maxLength", "format", "enum", "const", NOT_STRINGS, NOT_PATTERNS,
                   ALL_PATTERNS}
MAX_DEPENDENCIES = 6  # each one doubles the branches
MAX_UNIQUE_ITEMS = 8  # uniqueItems writes one rule per subset of the item values
MAX_PATTERN_PROPERTIES = 4  # each key pattern doubles the kinds of undeclared keys
OTHER_KEYS = {"additionalProperties", "unevaluatedProperties", EVERY_PROPERTY, SOME_PROPERTY}  # strict leaves these


def schema_to_grammar(schema, strict: bool = False) -> Grammar:
    """Compile a JSON Schema (a dict or a bool) into a Grammar whose root derives valid instances.

    `strict` (what generation asks for: xgrammar's strict mode, vLLM's default) writes only what the schema
    names: an object that names keys (`properties`, `patternProperties`) and says nothing of others (no
    additionalProperties) takes no other key, a required one aside, and a tuple (prefixItems, or an
    `items` list) that says nothing of further items takes none. Every document is still valid for the
    schema; the grammar just leaves out what the schema only tolerates, such as arguments a tool never
    declared. Without it the grammar derives every valid document (the JSON Schema test suite's semantics).

        {"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]}
        strict: only {"a":1};  not strict: also {"a":1,"b":null}, {"a":1,"x":[true]}, ...
    """
    _check_shapes(schema, "#")
    try:
        return _Compiler(schema, strict).grammar()
    except RecursionError:  # merging recursive schemas (allOf of $refs that recurse) unrolls forever
        raise TinyInferError("JSON schema at #: allOf (or oneOf) over recursive $refs cannot be merged into "
                             "one grammar rule; reference the recursive schema once") from None


def json_grammar() -> Grammar:
    """Any JSON value (compact)."""
    return Grammar(dict(BASE_RULES))


class _Compiler:
    def __init__(self, root, strict: bool = False):
        self.root = root
        self.strict = strict  # see schema_to_grammar
        self.rules: dict[str, object] = {}
        self.ref_rules: dict[str, str] = {}  # "$ref" string -> rule name
        self.numbers: dict[str, object] = {}  # number constraints -> their rules' start (None: no number)
        self.counter = 0
        self.pattern_names: dict[tuple, str] = {}  # (pattern, minLength, maxLength) -> its rule (pattern_rule)

    def grammar(self, schema=None, path: str = "#") -> Grammar:
        """The grammar of the root schema (or of `schema`, a part of it, whose $refs point into the root)."""
        self.rules["root"] = self.expr(self.root if schema is None else schema, path)
        for name, expr in BASE_RULES.items():
            if name != "root":
                self.rules.setdefault(name, expr)
        return Grammar(self.rules)

    # ------------------------------------------------------------ references
    def resolve(self, ref: str, path: str):
        """The subschema a local reference `#/...` points to."""
        if not ref.startswith("#"):
            raise schema_error(path, f"$ref {ref!r} is not local; only '#/...' references are supported")
        if len(ref) > 1 and ref[1] != "/":  # a plain-name fragment: "$anchor": "x" or (drafts 4-7) "$id": "#x"
            found = _find_anchor(self.root, ref[1:])
            if found is None:
                raise schema_error(path, f"$ref {ref!r} points nowhere (no $anchor or id {ref!r})")
            return found
        node = self.root
        for part in ref[1:].lstrip("/").split("/") if ref not in ("#", "#/") else []:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise schema_error(path, f"$ref {ref!r} points nowhere (no {part!r})")
        return node

    def resolver(self, path: str):
        """`resolve` for the helpers that follow $refs on their own (negate, finite_values, satisfies)."""
        return lambda ref: self.resolve(ref, path)

    def ref_rule(self, ref: str, path: str) -> str:
        return self.named_rule(ref, lambda: self.expr(self.resolve(ref, path), ref))

    def named_rule(self, key: str, build) -> str:
        """The rule for `key` (a $ref, or a set of $refs to intersect), built once: recursion finds its name."""
        name = self.ref_rules.get(key)
        if name is None:
            slug = re.sub(r"[^A-Za-z0-9]+", "-", key).strip("-")[:60] or "root"
            name = self.ref_rules[key] = f"ref-{slug}-{len(self.ref_rules)}"
            self.rules[name] = EMPTY  # placeholder while compiling, so recursion finds the name
            try:
                self.rules[name] = build()
            except TinyInferError:  # never leave the placeholder behind for a caller that carries on
                del self.rules[name], self.ref_rules[key]
                raise
        return name

    def deref(self, schema, path: str, depth: int = 0):
        """Follow a chain of bare `$ref`s to a schema dict (used where schemas are merged)."""
        while isinstance(schema, dict) and "$ref" in schema:
            if depth > 32:
                raise schema_error(path, "$ref chain too deep to merge (recursive allOf?)")
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            target = self.resolve(schema["$ref"], path)
            schema = merge([target, rest], path, self) if _constraining(rest) else target
            depth += 1
        return schema

    # ------------------------------------------------------------ schemas
    def expr(self, schema, path: str):
        if schema is True or schema == {}:
            return Ref("json-value")
        if schema is False:
            raise empty_error(path, "schema `false` admits no value")
        if not isinstance(schema, dict):
            raise schema_error(path, f"a schema must be an object or a boolean, not {type(schema).__name__}")
        exact = self.finite(schema, path)
        if exact is not None:
            return exact
        if any(k in schema for k in LOGIC):
            projected = self.string_projection(schema, path)
            if projected is not None:
                return projected
        if "not" in schema:
            return self.expr(self.without_not(schema, path), path)
        if "if" in schema:
            return self.expr(self.without_if(schema, path), path)
        _check_keywords(schema, path)
        if "$ref" in schema:
            if not _constraining({k: v for k, v in schema.items() if k != "$ref"}):
                return Ref(self.ref_rule(schema["$ref"], path))
            return self.expr(self.deref(schema, path), path)
        if "allOf" in schema:
            return self.all_of(schema, path)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.union(schema, key, path)
        for key in ("dependencies", "dependentRequired", "dependentSchemas"):
            if schema.get(key):
                return self.dependencies(schema, key, path)
        if "const" in schema or "enum" in schema:
            return self.constants(schema, path)
        types = _types(schema, path)
        return alt(*(self.typed(t, schema, path) for t in types))

    def all_of(self, schema: dict, path: str):
        """allOf merged into one schema. An allOf with a bare $ref among its parts becomes one named rule
        per set of parts (nested allOfs spliced in, order ignored), so that merging recursive schemas ends:
        where the merge recurs with the same parts, the rule calls itself."""
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        parts = _flat_all_of(schema["allOf"])
        if any(isinstance(part, dict) and list(part) == ["$ref"] for part in parts) and not _constraining(rest):
            unique = sorted({_canonical(part): part for part in parts}.items())  # (A and B is B and A)
            return Ref(self.named_rule("allOf " + " & ".join(key for key, _ in unique), lambda: self.expr(
                merge([part for _, part in unique], path, self), path + "/allOf")))
        return self.expr(merge([rest, *parts], path, self), path + "/allOf")

    def union(self, schema, key: str, path: str):
        rest = {k: v for k, v in schema.items() if k != key}
        if not schema[key]:
            raise schema_error(path, f"{key} is empty")
        branches, empty = [], None
        for i, branch in enumerate(schema[key]):
            try:  # a branch no value satisfies adds nothing to the union: drop it
                merged = merge([rest, branch], f"{path}/{key}/{i}", self) if _constraining(rest) else branch
                if key == "oneOf":  # flattened, so that _separate sees the branch's keywords
                    merged = self.deref(merged, path)
                    if isinstance(merged, dict) and "allOf" in merged:
                        merged = merge([{k: v for k, v in merged.items() if k != "allOf"}, *merged["allOf"]],
                                       f"{path}/{key}/{i}", self)
                branches.append((i, merged))
            except EmptySchemaError as e:
                empty = empty or e
        if key == "oneOf":
            branches = list(zip([i for i, _ in branches], separate([b for _, b in branches], f"{path}/oneOf", lambda b: negate(
                b, self.resolver(path), ANNOTATIONS))))
        options = []
        for i, branch in branches:
            try:
                options.append(self.expr(branch, f"{path}/{key}/{i}"))
            except EmptySchemaError as e:
                empty = empty or e
        if not options:
            raise empty
        return alt(*options)

    def dependencies(self, schema: dict, key: str, path: str):
        """`if property A is present then B (or a schema) holds`, one dependency at a time, as two
        disjoint branches: A absent, or A present with its dependency merged in."""
        deps = dict(schema[key])
        if len(deps) > MAX_DEPENDENCIES:
            raise schema_error(f"{path}/{key}", f"more than {MAX_DEPENDENCIES} dependencies are not supported")
        name, dependency = deps.popitem()
        rest = {**{k: v for k, v in schema.items() if k != key}, **({key: deps} if deps else {})}
        needs = {"required": [name] + dependency} if isinstance(dependency, list) else {"required": [name]}
        parts = [rest, needs] + ([] if isinstance(dependency, list) else [dependency])
        branches = [merge(parts, f"{path}/{key}/{name}", self)]
        if name not in rest.get("required", []):  # the branch without A: A may not appear at all
            branches.append({**rest, "properties": {**rest.get("properties", {}), name: False}})
        return self.alt_of_branches(branches, path)

    def alt_of_branches(self, branches: list, path: str):
        """The alternation of the branches some value satisfies (EmptySchemaError when none)."""
        options, empty = [], None
        for branch in branches:
            try:
                options.append(self.expr(branch, path))
            except EmptySchemaError as e:
                empty = empty or e
        if not options:
            raise empty
        return alt(*options)

    def finite(self, schema: dict, path: str):
        """A schema with finitely many candidate values (an enum/const on every path): the alternation of
        the candidates that satisfy the *whole* schema, decided value by value (json_schema_check.py), so
        `not`, `if`, `oneOf`... are exact here. None when not finite, or when a keyword cannot be decided
        (then the schema is compiled keyword by keyword)."""
        values = finite_values(schema, self.resolver(path))
        if values is None:
            return None
        try:
            valid = [v for v in values if satisfies(v, schema, self.root, self.resolver(path))]
        except Undecidable:
            return None
        if not valid:
            raise empty_error(path, "no value of enum/const satisfies the schema's other keywords")
        text = dict.fromkeys(json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in valid)
        return alt(*(Literal(t) for t in text))

    def string_projection(self, schema: dict, path: str):
        """A schema of string keywords and logic as one string automaton (json_schema_strings.py), plus the
        other types it admits; None when it reads more than strings, or when its strings are all strings."""
        try:
            strings, others = self.project_strings(schema, path)
        except NotProjectable:
            return None
        except AutomatonTooLarge as e:
            raise schema_error(path, str(e)) from None
        if ("fraction" in others and "integer" not in others) or (others and accepts_everything(strings)):
            return None  # (numbers that are not integers have no grammar; all strings need no automaton)
        types = sorted(others - {"integer", "fraction"}) + (
            ["number"] if "fraction" in others else ["integer"] if "integer" in others else [])
        options = [self.expr({"type": types}, path)] if types else []
        try:
            options.append(self.string_rules(strings, path))
        except EmptySchemaError:
            if not options:
                raise
        return alt(*options)

    def project_strings(self, schema, path: str):
        """(string automaton, other types) of a schema of string keywords and logic; NotProjectable else."""
        return project(schema, self.resolver(path), lambda keywords: self.string_dfa(keywords, path),
                       SUPPORTED | UNSUPPORTED)

    def without_not(self, schema: dict, path: str):
        """The schema with `not X` replaced by X's complement (json_schema_logic.py), merged in."""
        rest = {k: v for k, v in schema.items() if k != "not"}
        try:
            complement = negate(schema["not"], self.resolver(path), ANNOTATIONS)
        except NotExpressible as e:
            raise schema_error(f"{path}/not", f"the complement of {e} is not expressible as a grammar; "
                               "rewrite the schema without 'not'") from None
        return merge([rest, complement], f"{path}/not", self)

    def without_if(self, schema: dict, path: str):
        """`if C then T else E` as the two disjoint cases `C and T`, `(not C) and E`."""
        rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
        condition, then, otherwise = schema["if"], schema.get("then", True), schema.get("else", True)
        if then is True and otherwise is True:
            return rest
        try:
            opposite = negate(condition, self.resolver(path), ANNOTATIONS)
        except NotExpressible as e:
            raise schema_error(f"{path}/if", f"the complement of {e} is not expressible as a grammar, and "
                               "if/then/else needs it; rewrite the schema without 'if'") from None
        cases = {"anyOf": [{"allOf": [condition, then]}, {"allOf": [opposite, otherwise]}]}
        return merge([rest, cases], f"{path}/if", self)

    def constants(self, schema, path: str):
        """The enum/const values (as compact JSON) that also satisfy the schema's other keywords: those
        are checked by parsing each value with the grammar of the rest of the schema."""
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        text = [json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in values]
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if _constraining(rest):
            parser = ByteParser(compile_grammar(_Compiler(self.root).grammar(rest, path)))
            text = [t for t in text if parser.accepts(parser.step_bytes(parser.initial, t.encode()))]
        if not text:
            raise empty_error(path, "no value of enum/const satisfies the schema's other keywords")
        return alt(*(Literal(t) for t in text))

    def typed(self, kind: str, schema: dict, path: str):
        if kind == "null":
            return Literal("null")
        if kind == "boolean":
            return alt(Literal("true"), Literal("false"))
        return {"string": self.string, "integer": self.integer, "number": self.number,
                "array": self.array, "object": self.object}[kind](schema, path)

    # ------------------------------------------------------------ strings and numbers
    def string(self, schema: dict, path: str):
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        fmt = schema.get("format")
        if fmt in UNSUPPORTED_FORMATS:
            raise schema_error(path, f"format {fmt!r} is not supported (supported: {', '.join(FORMATS)})")
        if hi is not None and hi < lo:
            raise empty_error(path, f"maxLength {hi} < minLength {lo}")
        patterns = ([schema["pattern"]] if "pattern" in schema else []) + list(schema.get(ALL_PATTERNS, []))
        excluded, unlike = schema.get(NOT_STRINGS, []), schema.get(NOT_PATTERNS, [])
        languages = [self.pattern(p, path) for p in patterns] + ([regex_to_expr(FORMATS[fmt])] if fmt in FORMATS else [])
        lengths = bool(lo) or hi is not None
        if len(languages) + bool(excluded) + bool(unlike) > 1 or unlike or (languages and lengths) or (
                excluded and hi is not None):
            if len(patterns) == 1 and not (fmt in FORMATS or excluded or unlike):
                fitted = _with_length(languages[0], lo, hi)  # `^[class]*$` with a length: no automaton needed
                if fitted is not None:
                    return self.pattern_rule((patterns[0], lo, hi), lambda: quoted(json_content(fitted)))
            return self.string_rules(self.string_dfa(schema, path), path)
        if patterns:
            return self.pattern_rule((patterns[0], 0, None), lambda: quoted(json_content(languages[0])))
        if fmt in FORMATS:
            return self.shared(f"format-{fmt}", lambda: format_expr(fmt))
        if excluded:  # (from `not: {enum: [...]}`) any string of lo.. characters but these
            return string_not_in([s for s in excluded if len(s) >= lo], min_length=lo)
        if lo == 0 and hi is None:
            return Ref("json-string")
        return self.shared(f"string-{lo}-{hi}", lambda: quoted(Repeat(Ref("json-char"), lo, hi)))

    def pattern(self, pattern: str, path: str):
        try:
            return pattern_to_expr(pattern)
        except TinyInferError as e:
            raise schema_error(path + "/pattern", str(e)) from None

    def string_dfa(self, schema: dict, path: str):
        """The strings satisfying the string keywords of `schema` (length, patterns, format, exclusions) as
        one deterministic automaton (regex_dfa.py)."""
        fmt = schema.get("format")
        if fmt in UNSUPPORTED_FORMATS:
            raise schema_error(path, f"format {fmt!r} is not supported (supported: {', '.join(FORMATS)})")
        patterns = ([schema["pattern"]] if "pattern" in schema else []) + list(schema.get(ALL_PATTERNS, []))
        languages = [self.pattern(p, path) for p in patterns] + ([regex_to_expr(FORMATS[fmt])] if fmt in FORMATS else [])
        excluded = [alt(*map(Literal, schema[NOT_STRINGS]))] if schema.get(NOT_STRINGS) else []
        try:
            automaton = length_dfa(schema.get("minLength", 0), schema.get("maxLength"))
            for language in languages:
                automaton = intersect(automaton, dfa_of(language))
            for language in [self.pattern(p, path) for p in schema.get(NOT_PATTERNS, [])] + excluded:
                automaton = intersect(automaton, complement(dfa_of(language)))
        except TinyInferError as e:
            raise schema_error(path, str(e)) from None
        return automaton

    def automaton_rules(self, automaton, prefix: str):
        """Add the automaton's language to the grammar as rules named `{prefix}-{n}-{state}`; returns the
        start expression (ValueError when the automaton accepts nothing)."""
        self.counter += 1
        start, rules = to_rules(automaton, f"{prefix}-{self.counter}")
        self.rules.update(rules)
        return start

    def string_rules(self, automaton, path: str, prefix: str = "str"):
        """A JSON string whose value the automaton accepts (EmptySchemaError when it accepts none)."""
        try:
            return quoted(self.automaton_rules(automaton, prefix))
        except ValueError:
            raise empty_error(path, "no string satisfies all of the string constraints") from None

    def integer(self, schema: dict, path: str):
        return self.numeric(schema, path, integer=True)

    def number(self, schema: dict, path: str):
        return self.numeric(schema, path, integer=False)

    def numeric(self, schema: dict, path: str, integer: bool):
        """Digit patterns for plain ranges (json_values.py); an automaton over the text (number_dfa.py)
        for multipleOf, `not multipleOf` and bounds that are not integers."""
        lo, lo_open, hi, hi_open = _bounds(schema)
        steps = ([schema["multipleOf"]] if "multipleOf" in schema else []) + list(schema.get(ALL_MULTIPLES, []))
        not_steps = list(schema.get(NOT_MULTIPLES, []))
        for step in steps + not_steps:
            if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0:
                raise schema_error(path, f"multipleOf must be a positive number, not {step!r}")
        if steps or not_steps or not all(b is None or is_integral(b) for b in (lo, hi)):
            return self.number_rules(steps, not_steps, (lo, lo_open, hi, hi_open), integer, path)
        if integer:
            lo = None if lo is None else int(lo) + (1 if lo_open else 0)
            hi = None if hi is None else int(hi) - (1 if hi_open else 0)
            if lo is not None and hi is not None and lo > hi:
                raise empty_error(path, f"no integer lies between the bounds {lo} and {hi}")
            return Ref("json-integer") if lo is None and hi is None else int_range(lo, hi)
        if lo is None and hi is None:
            return Ref("json-number")
        try:
            return decimal_range(lo, lo_open, hi, hi_open)
        except ValueError:
            raise empty_error(path, f"no number lies between the bounds {lo} and {hi}") from None

    def number_rules(self, steps: list, not_steps: list, bounds: tuple, integer: bool, path: str):
        """Numbers as one automaton (number_automaton), written as rules once per set of constraints (the
        branches of an anyOf merged with the same siblings often ask for the same numbers again)."""
        key = repr((steps, not_steps, bounds, integer))
        if key not in self.numbers:
            try:
                self.numbers[key] = self.automaton_rules(self.number_automaton(steps, not_steps, bounds, integer,
                                                                               path), "num")
            except ValueError:  # the automaton accepts nothing
                self.numbers[key] = None
        if self.numbers[key] is None:
            raise empty_error(path, "no number satisfies multipleOf and the bounds together")
        return self.numbers[key]

    def number_automaton(self, steps: list, not_steps: list, bounds: tuple, integer: bool, path: str):
        """The bounds' automata, minimized and intersected, then the divisibility automaton within them
        (only the residues the texts in bounds reach are built), minimized."""
        lo, lo_open, hi, hi_open = bounds
        try:
            divisible, magnitude = decimal_steps(steps, not_steps, integer)
            limits = [(lo, lo_open, False), (hi, hi_open, True)]
            if magnitude is not None:  # (float division is exact below it)
                limits += [(-magnitude, True, False), (magnitude, True, True)]
            within = None
            for limit, open_, upper in limits:
                if limit is not None:
                    automaton = minimize(bound_dfa(Fraction(limit), open_, upper))
                    within = automaton if within is None else minimize(intersect(within, automaton))
            return minimize(multiples_dfa(divisible, within))
        except ValueError as e:
            raise schema_error(path, str(e)) from None
        except AutomatonTooLarge as e:
            raise schema_error(path, f"multipleOf: {e}") from None

    # ------------------------------------------------------------ arrays and objects
    def array(self, schema: dict, path: str):
        if self.strict and ("prefixItems" in schema and "items" not in schema
                            or isinstance(schema.get("items"), list) and "additionalItems" not in schema):
            schema = {**schema, "items" if "prefixItems" in schema else "additionalItems": False}  # a closed tuple
        items = schema.get("items", True)
        if schema.get("uniqueItems") and schema.get("maxItems", 2) > 1:
            return self.unique_array(schema, items, path)
        if "prefixItems" in schema:
            prefix, rest = list(schema["prefixItems"]), items
        elif isinstance(items, list):
            prefix, rest = items, schema.get("additionalItems", True)
        else:
            prefix, rest = [], items
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        least, most = (schema.get("minContains", 1), schema.get("maxContains")) if "contains" in schema else (0, None)
        wanted = ([schema["contains"]] if "contains" in schema else []) + list(schema.get(ALL_CONTAINS, []))
        if len(wanted) > 1 and (least, most) != (1, None):
            raise schema_error(f"{path}/contains", "minContains/maxContains with several `contains` (from allOf) "
                               "are not supported")
        if least == 1 and most is None and (prefix or hi is not None or lo > 1 or len(wanted) > 1):  # the walk holds
            # every bound, and several requirements (two `contains` merged by allOf)
            walk = ItemWalk(self, path, prefix[:hi] if hi is not None else prefix, rest, wanted, lo, hi)
            return seq(Literal("["), walk.start(), Literal("]"))
        if least or most is not None:
            return self.contains(schema, rest, least, most, path)
        if hi is not None:
            prefix = prefix[:hi]
        elements, rest_expr = [], None
        try:  # an item schema no value satisfies ends the array before that item
            for i, item in enumerate(prefix):
                elements.append(self.expr(item, f"{path}/items/{i}"))
            rest_expr = None if rest is False or len(elements) < len(prefix) else self.expr(rest, f"{path}/items")
        except EmptySchemaError:
            pass
        if lo > len(elements) and rest_expr is None or (hi is not None and hi < lo):
            raise empty_error(path, f"no array satisfies minItems {lo} here")
        return seq(Literal("["), _comma_list(elements, rest_expr, lo, hi), Literal("]"))

    def unique_array(self, schema: dict, items, path: str):
        """uniqueItems over a finite set of item values: one rule per set of values already written.

            items {"enum": ["a", "b"]} -> "[" ("\"a\"" used-a | "\"b\"" used-b)? "]";  used-a ::= ("," "\"b\"")? ..."""
        where = f"{path}/uniqueItems"
        values = None if isinstance(items, list) or "prefixItems" in schema or "contains" in schema else (
            finite_values(items, self.resolver(path)))
        if values is None:
            raise schema_error(where, "uniqueItems: true is supported only for items from a finite set (enum, "
                               "const, boolean, null) and no prefixItems or contains: a grammar cannot compare items")
        try:
            valid = [v for v in values if satisfies(v, items, self.root, self.resolver(path))]
        except Undecidable as e:
            raise schema_error(where, f"cannot decide which item values are valid: {e}") from None
        distinct = [v for i, v in enumerate(valid) if not any(equal(v, w) for w in valid[:i])]
        if len(distinct) > MAX_UNIQUE_ITEMS:
            raise schema_error(where, f"uniqueItems over more than {MAX_UNIQUE_ITEMS} possible item values")
        texts = [json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in distinct]
        lo, hi = schema.get("minItems", 0), schema.get("maxItems", len(texts))
        self.counter += 1
        name = f"unique-{self.counter}"

        def used(mask: int) -> Ref:  # after writing the values in `mask`
            rule = f"{name}-{mask}"
            if rule not in self.rules:
                self.rules[rule] = EMPTY  # placeholder
                count = bin(mask).count("1")
                more = [seq(Literal(","), Literal(t), used(mask | 1 << i)) for i, t in enumerate(texts)
                        if not mask & 1 << i and count < hi]
                self.rules[rule] = alt(*more, *([EMPTY] if lo <= count <= hi else []))
            return Ref(rule)

        first = [seq(Literal(t), used(1 << i)) for i, t in enumerate(texts)] if hi > 0 else []
        if lo > len(texts) or not (first or lo == 0):
            raise empty_error(where, f"no {lo} distinct items exist here")
        return seq(Literal("["), alt(*first, *([EMPTY] if lo == 0 else [])), Literal("]"))

    def contains(self, schema: dict, items, least: int, most: int | None, path: str):
        """Arrays with least..most items that match `contains` (each item also matching `items`):

            (other ",")* match (("," other)* "," match){least-1..most-1} ("," other)*

        where `other` is any item (no upper count) or an item not matching (an upper count)."""
        where = f"{path}/contains"
        if "prefixItems" in schema or isinstance(items, list) or schema.get("maxItems") is not None or (
                schema.get("minItems", 0) > max(least, 1)):
            raise schema_error(where, "contains is supported with one `items` schema and no maxItems (nor a "
                               "minItems above minContains)")
        if most is not None and most < least:
            raise empty_error(where, f"maxContains {most} < minContains {least}")
        match = self.expr(merge([items, schema["contains"]], where, self), where)
        other_schema = items
        if most is not None:
            try:
                opposite = negate(schema["contains"], self.resolver(path), ANNOTATIONS)
            except NotExpressible as e:
                raise schema_error(where, f"maxContains needs the complement of {e}, not expressible") from None
            other_schema = {"allOf": [items, opposite]}
        try:
            other = self.expr(other_schema, f"{path}/items")
        except EmptySchemaError:  # every item matches
            other = None
        before = EMPTY if other is None else Repeat(seq(other, Literal(",")), 0, None)
        after = EMPTY if other is None else Repeat(seq(Literal(","), other), 0, None)
        more = seq(after, Literal(","), match)
        body = seq(before, match, Repeat(more, max(least - 1, 0), None if most is None else most - 1), after)
        if least == 0:  # (only with maxContains) also arrays with no match at all
            no_match = EMPTY if other is None else optional(seq(other, after))
            body = no_match if most == 0 else alt(body, no_match)
        return seq(Literal("["), body, Literal("]"))

    def object(self, schema: dict, path: str):
        if self.strict and (schema.get("properties") or schema.get("patternProperties")) and not (
                OTHER_KEYS.intersection(schema)):  # keys the schema names, declared or by a pattern, and no others
            declared = schema.get("properties", {})
            named = declared | {key: True for key in schema.get("required", []) if key not in declared}  # any value
            schema = {**schema, "properties": named, "additionalProperties": False}
        if EVERY_PROPERTY in schema or SOME_PROPERTY in schema:
            return compile_object(self, schema, path)
        props = dict(schema.get("properties", {}))
        required = list(dict.fromkeys(schema.get("required", [])))
        extra = schema.get("additionalProperties", True)
        patterns = schema.get("patternProperties", {})
        for pattern in patterns:  # (refused here if outside the regex subset, before any search)
            self.pattern(pattern, f"{path}/patternProperties")
        for key in required:  # required keys without a declared schema take additionalProperties' schema
            if key not in props and any(search(p, key) for p in patterns):
                props[key] = True  # (the matching patterns' schemas are added below)
            elif key not in props:
                if extra is False:
                    raise schema_error(path, f"required property {key!r} is forbidden by additionalProperties")
                props[key] = extra
        names = self.property_names(schema.get("propertyNames", True), f"{path}/propertyNames")
        if names is not None:  # a declared property with a name it rejects never appears
            props = {k: v if accepts(names, k) else False for k, v in props.items()}
        props, extra, pattern_extra = self.pattern_properties(schema, props, extra, path, names)
        entries, required_flags = [], []
        for key, sub in props.items():
            if sub is False:
                if key in required:
                    raise empty_error(path, f"required property {key!r} has schema false")
                continue
            try:
                value = self.expr(sub, f"{path}/properties/{key}")
            except EmptySchemaError:  # no value fits: an optional key then never appears
                if key in required:
                    raise
                continue
            entries.append(seq(Literal(json.dumps(key, ensure_ascii=False) + ":"), value))
            required_flags.append(key in required)
        extra_expr = pattern_extra
        if extra is not False:
            value = self.expr(extra, f"{path}/additionalProperties")
            extra_expr = self._object_rule(seq(string_not_in(list(props)), Literal(":"), value))
        lo, hi = schema.get("minProperties", 0), schema.get("maxProperties")
        if all(required_flags) and (lo > len(entries) or hi is not None):  # a count of the extra properties
            if hi is not None and hi < max(lo, len(entries)) or (extra_expr is None and lo > len(entries)):
                raise empty_error(path, f"no object has {lo}..{hi} properties here")
            return seq(Literal("{"), _comma_list(entries, extra_expr, max(lo, len(entries)), hi), Literal("}"))
        nonempty = lo > sum(required_flags)  # satisfiable by a grammar only for minProperties: 1
        if (nonempty and lo > 1) or (hi is not None and (extra_expr is not None or hi < len(entries))):
            raise schema_error(path, "minProperties/maxProperties are supported only with no optional declared "
                               "property, or when implied by required and additionalProperties, or as minProperties: 1")
        body = _object_body(entries, required_flags, extra_expr, nonempty, rule=self._object_rule)
        if body is None:
            raise empty_error(path, "minProperties: 1 but no property is allowed")
        return seq(Literal("{"), body, Literal("}"))

    def property_names(self, names, path: str):
        """`propertyNames` as an automaton over keys, or None when it admits every key."""
        if names is True or names == {}:
            return None
        if names is False:
            return Dfa([[]], [False])
        names = self.deref(names, path)
        unknown = [k for k in names if k not in STRING_KEYWORDS and k not in ANNOTATIONS]
        if unknown:
            raise schema_error(path, f"propertyNames is supported with string keywords only, not {unknown}")
        if "string" not in _types(names, path):
            return Dfa([[]], [False])
        automaton = self.string_dfa(names, path)
        values = finite_values(names, self.resolver(path))
        if values is not None:
            keys = [v for v in values if isinstance(v, str)]
            automaton = intersect(automaton, dfa_of(alt(*map(Literal, keys)))) if keys else Dfa([[]], [False])
        return automaton

    def pattern_properties(self, schema: dict, props: dict, extra, path: str, names=None):
        """Fold patternProperties (and the key automaton `names` of propertyNames) into (properties,
        additionalProperties, extra-key expression or None).

        A pattern that matches every key (`.*`, `^[a-z]*`) adds its schema to every property. The others
        add theirs to the declared properties they match; an undeclared key takes the schemas of exactly the
        patterns it matches (or additionalProperties if none): one key automaton per set of patterns."""
        patterns = schema.get("patternProperties", {})
        universal = [sub for pattern, sub in patterns.items() if _matches_every_key(pattern)]
        others = {pattern: sub for pattern, sub in patterns.items() if not _matches_every_key(pattern)}
        if universal:
            props = {k: v if v is False else {"allOf": [v, *universal]} for k, v in props.items()}
            extra = extra if extra is False else {"allOf": [extra, *universal]}
        if not others and names is None:
            return props, extra, None
        where = f"{path}/patternProperties"
        if len(others) > MAX_PATTERN_PROPERTIES:
            raise schema_error(where, f"more than {MAX_PATTERN_PROPERTIES} key patterns are not supported")
        languages = {pattern: self.pattern(pattern, where) for pattern in others}
        matched = {name: [sub for pattern, sub in others.items() if search(pattern, name)] for name in props}
        props = {k: v if v is False or not matched[k] else {"allOf": [v, *matched[k]]} for k, v in props.items()}
        if extra is False and len(others) == 1 and not any(matched.values()) and names is None:
            (pattern, sub), = others.items()
            value = self.expr({"allOf": [sub, *universal]} if universal else sub, f"{where}/{pattern}")
            return props, False, self._object_rule(seq(quoted(json_content(languages[pattern])), Literal(":"), value))
        undeclared = complement(dfa_of(alt(*map(Literal, props)))) if props else length_dfa(0, None)
        if names is not None:
            undeclared = intersect(undeclared, names)
        options = []
        for chosen in itertools.product((True, False), repeat=len(others)):
            subs = [sub for sub, take in zip(others.values(), chosen) if take]
            value_schema = {"allOf": [*subs, *universal]} if subs else extra
            if value_schema is False:
                continue
            automaton = undeclared
            for language, take in zip(languages.values(), chosen):
                automaton = intersect(automaton, dfa_of(language) if take else complement(dfa_of(language)))
            try:
                key = quoted(self.automaton_rules(automaton, "key"))
                value = self.expr(value_schema, where)
            except (ValueError, EmptySchemaError):  # no such key, or no value for it
                continue
            options.append(seq(key, Literal(":"), value))
        return props, False, self._object_rule(alt(*options)) if options else None

    def pattern_rule(self, key: tuple, build) -> Ref:
        """A string of a pattern as a rule of its own, built once: its own rule, the masks' local view of it
        stops at the string (`ByteParser.local_view`), so other schemas with the same pattern share its walk."""
        return self.shared(self.pattern_names.setdefault(key, f"pattern-{len(self.pattern_names) + 1}"), build)

    def shared(self, name: str, build) -> Ref:
        """A rule built once and called wherever it recurs (one `maxLength: 1024` string, not fifty)."""
        if name not in self.rules:
            self.rules[name] = build()
        return Ref(name)

    def _object_rule(self, expr) -> Ref:
        """Share an object's tail as a named rule (keeps optional properties linear in size)."""
        self.counter += 1
        name = f"obj-{self.counter}"
        self.rules[name] = expr
        return Ref(name)


def _comma_list(elements: list, rest, lo: int, hi: int | None):
    """Comma-separated: the `elements` in order (each may stop the list once lo are there), then `rest`
    repeated, with lo..hi items in all."""

    def tail(i: int):  # items from index i on, after i items already written
        if i < len(elements):
            item = seq(Literal(","), elements[i], tail(i + 1))
            return item if i < lo else optional(item)
        if rest is None or (hi is not None and i >= hi):
            return EMPTY
        return Repeat(seq(Literal(","), rest), max(lo - i, 0), None if hi is None else hi - i)

    first = elements[0] if elements else rest
    if first is None or hi == 0:
        return EMPTY
    body = seq(first, tail(1))
    return body if lo > 0 else optional(body)


def _object_body(entries: list, required: list[bool], extra, nonempty: bool, rule):
    """Properties in order (required ones always), then extra properties; commas between."""
    n = len(entries)
    extras_after = EMPTY if extra is None else rule(Repeat(seq(Literal(","), extra), 0, None))
    after = [None] * (n + 1)  # after[i]: properties i.. once something has been written
    after[n] = extras_after
    for i in range(n - 1, 0, -1):  # after[0] is never needed: the first property has no comma
        item = seq(Literal(","), entries[i], after[i + 1])
        after[i] = rule(item if required[i] else alt(item, after[i + 1]))
    starts = []  # the first property written is entry j (all before it optional and skipped)
    for j in range(n):
        starts.append(seq(entries[j], after[j + 1]))
        if required[j]:
            break
    else:
        if extra is not None:
            starts.append(seq(extra, extras_after))
        if not nonempty:
            starts.append(EMPTY)
    return alt(*starts) if starts else None


# ---------------------------------------------------------------- schema helpers
def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_names(v) -> bool:
    return isinstance(v, list) and all(isinstance(name, str) for name in v)


def _is_schema(v) -> bool:
    return isinstance(v, (dict, bool))


def _is_schemas(v) -> bool:
    return all(_is_schema(member) for member in (v.values() if isinstance(v, dict) else v))


SINGLE_SUBSCHEMAS = ("not", "if", "then", "else", "contains", "propertyNames", "additionalProperties",
                     "additionalItems", "unevaluatedProperties", "unevaluatedItems")
LISTS_OF_SUBSCHEMAS = ("allOf", "anyOf", "oneOf", "prefixItems")
OBJECTS_OF_SUBSCHEMAS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

# keyword -> (test of its value, what the specification says it must be)
KEYWORD_SHAPES = {
    "type": (lambda v: isinstance(v, str) or _is_names(v), "a type name or a list of type names"),
    "enum": (lambda v: isinstance(v, list), "a list of values"),
    "required": (_is_names, "a list of property names"),
    **{key: (lambda v: isinstance(v, list) and _is_schemas(v), "a list of schemas") for key in LISTS_OF_SUBSCHEMAS},
    **{key: (lambda v: isinstance(v, list) and len(v) > 0 and _is_schemas(v), "a non-empty list of schemas")
       for key in ("allOf", "anyOf", "oneOf")},  # these three must have a member
    **{key: (lambda v: isinstance(v, dict) and _is_schemas(v), "an object whose values are schemas")
       for key in OBJECTS_OF_SUBSCHEMAS},
    "dependentRequired": (lambda v: isinstance(v, dict) and all(_is_names(n) for n in v.values()),
                          "an object whose values are lists of property names"),
    "dependencies": (lambda v: isinstance(v, dict) and all(_is_schema(d) or _is_names(d) for d in v.values()),
                     "an object whose values are schemas or lists of property names"),
    **{key: (_is_schema, "a schema (an object or a boolean)") for key in SINGLE_SUBSCHEMAS},
    "items": (lambda v: _is_schema(v) or (isinstance(v, list) and _is_schemas(v)), "a schema or a list of schemas"),
    **{key: (_is_count, "a non-negative integer") for key in ("minLength", "maxLength", "minItems", "maxItems",
                                                              "minProperties", "maxProperties", "minContains",
                                                              "maxContains")},
    **{key: (_is_number, "a number") for key in ("minimum", "maximum")},
    **{key: (lambda v: _is_number(v) or isinstance(v, bool), "a number (or, in draft 4, a boolean)")
       for key in ("exclusiveMinimum", "exclusiveMaximum")},
    "multipleOf": (lambda v: _is_number(v) and v > 0, "a number greater than 0"),
    **{key: (lambda v: isinstance(v, str), "a string") for key in ("pattern", "format", "$ref", "$anchor")},
    "uniqueItems": (lambda v: isinstance(v, bool), "true or false"),
}


def _check_shapes(schema, path: str) -> None:
    """Every keyword of `schema` and of all its subschemas has a value of the shape the specification gives it,
    checked once before the compiler reads any of them (it reads some, e.g. to merge allOf, before compiling).

    _check_shapes({"properties": {"a": {"required": "b"}}}, "#") -> TinyInferError: JSON schema at
    #/properties/a: required must be a list of property names, not 'b'"""
    if not isinstance(schema, dict):
        return  # a boolean schema; anything else is refused where it is compiled, with its path
    for key, value in schema.items():
        test, shape = KEYWORD_SHAPES.get(key, (None, None))
        if test is not None and not test(value):
            raise schema_error(path, f"{key} must be {shape}, not {value!r}")
    for key, value in schema.items():
        if key in SINGLE_SUBSCHEMAS or (key == "items" and isinstance(value, dict)):
            _check_shapes(value, f"{path}/{key}")
        elif key in LISTS_OF_SUBSCHEMAS or (key == "items" and isinstance(value, list)):
            for i, member in enumerate(value):
                _check_shapes(member, f"{path}/{key}/{i}")
        elif key in OBJECTS_OF_SUBSCHEMAS or key == "dependencies":
            for name, member in value.items():
                _check_shapes(member, f"{path}/{key}/{name}")


def _check_keywords(schema: dict, path: str) -> None:
    for key, value in schema.items():
        if key in UNSUPPORTED and value not in ({}, True) and not (key == "dependencies" and value == {}):
            raise schema_error(path, f"keyword {key!r} is not supported; remove it or rewrite the schema without it")


def _find_anchor(node, name: str):
    """The subschema named `name` by "$anchor": name or by an id "#name", searched depth first."""
    if isinstance(node, dict):
        if node.get("$anchor") == name or f"#{name}" in (node.get("$id"), node.get("id")):
            return node
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find_anchor(child, name)
        if found is not None:
            return found
    return None


def _with_length(expr, lo: int, hi: int | None):
    """A pattern `^[class]{a,b}$` (or *, +) intersected with a length range, or None when not of that form.

    _with_length(Repeat(CharClass(((97, 122),)), 1, None), 2, 5) -> Repeat(CharClass(((97, 122),)), 2, 5)"""
    if not (isinstance(expr, Repeat) and isinstance(expr.item, CharClass)):
        return None
    top = hi if expr.max is None else (expr.max if hi is None else min(hi, expr.max))
    bottom = max(lo, expr.min)
    return Repeat(expr.item, bottom, top) if top is None or bottom <= top else None


def _matches_every_key(pattern: str) -> bool:
    """`.*` or `^[...]*`: with no end anchor they match the empty string at the start, so every key."""
    simple = re.fullmatch(r"\^?\(?\.\*\)?|\^?\[[^\]]*\]\*", pattern) is not None
    return simple and search(pattern, "")


def _flat_all_of(parts: list) -> list:
    """allOf parts with nested bare allOfs spliced in: [A, {"allOf": [B, C]}] -> [A, B, C]."""
    out = []
    for part in parts:
        if isinstance(part, dict) and list(part) == ["allOf"]:
            out += _flat_all_of(part["allOf"])
        else:
            out.append(part)
    return out


def _canonical(schema) -> str:
    """One text per schema, whatever the order of its keys (private keywords are tuples: named by str)."""
    if isinstance(schema, dict):
        items = sorted(schema.items(), key=lambda kv: str(kv[0]))
        return "{" + ",".join(f"{str(k)!r}:{_canonical(v)}" for k, v in items) + "}"
    if isinstance(schema, list):
        return "[" + ",".join(map(_canonical, schema)) + "]"
    return json.dumps(schema)


def _constraining(schema: dict) -> bool:
    return any(k in SUPPORTED or k in UNSUPPORTED for k in schema)


def _types(schema: dict, path: str) -> list[str]:
    declared = schema.get("type", list(TYPES))
    declared = [declared] if isinstance(declared, str) else list(declared)
    for t in declared:
        if t not in TYPES:
            raise schema_error(path, f"unknown type {t!r}; use one of {', '.join(TYPES)}")
    if not declared:
        raise schema_error(path, "type list is empty")
    if "number" in declared and "integer" in declared:
        declared.remove("integer")  # number already includes the integers
    return declared


def _bounds(schema: dict):
    """(lo, lo_open, hi, hi_open) from draft-4 (boolean exclusive*) or draft-6+ (numeric exclusive*)."""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    lo_open = hi_open = False
    ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(ex_lo, bool):
        lo_open = ex_lo and lo is not None
    elif ex_lo is not None and (lo is None or ex_lo >= lo):
        lo, lo_open = ex_lo, True
    if isinstance(ex_hi, bool):
        hi_open = ex_hi and hi is not None
    elif ex_hi is not None and (hi is None or ex_hi <= hi):
        hi, hi_open = ex_hi, True
    return lo, lo_open, hi, hi_open  # numbers: their shapes were checked before compiling (_check_shapes)


