"""One entry point for every kind of constraint: build_constraint(kind, spec, tokenizer, eos_ids).

    build_constraint("json_schema", {"type": "object", ...}, tokenizer)   # or a path / JSON text
    build_constraint("json", None, tokenizer)                               # any JSON object
    build_constraint("regex", r"\\d{3}-\\d{4}", tokenizer)
    build_constraint("choice", ["yes", "no"], tokenizer)
    build_constraint("grammar", 'root ::= "a"+', tokenizer)                  # the EBNF notation
    build_constraint("tools", tools, tokenizer)                             # OpenAI-style tools

Compiling a grammar and building a vocabulary trie cost milliseconds to seconds, so both are cached: a
second request with the same spec and tokenizer gets a fresh Constraint over the *same* TokenMasker and
finds the masks earlier requests computed.
"""

from __future__ import annotations

import json
from pathlib import Path

from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.grammar import Grammar, Literal, alt, parse_grammar
from tinyinfer.constrain.json_schema import json_grammar, schema_to_grammar
from tinyinfer.constrain.mask import Constraint, TokenMasker, Vocabulary
from tinyinfer.constrain.regex import regex_to_expr
from tinyinfer.constrain.tools import tool_call_grammar
from tinyinfer.errors import TinyInferError

KINDS = ("json_schema", "json", "regex", "choice", "grammar", "tools")
_MAX_CACHED = 32
_maskers: dict[tuple, tuple[Vocabulary, TokenMasker]] = {}
_vocabularies: dict[tuple, tuple[object, Vocabulary]] = {}


def load_schema(spec) -> dict | bool:
    """A schema given as a dict/bool, as JSON text, or as the path of a .json file."""
    if isinstance(spec, (dict, bool)):
        return spec
    if isinstance(spec, Path) or (isinstance(spec, str) and not spec.lstrip().startswith(("{", "["))):
        path = Path(spec)
        if not path.is_file():
            raise TinyInferError(f"JSON schema file {path} does not exist; pass a path to a .json schema")
        spec = path.read_text(encoding="utf-8")
    try:
        return json.loads(spec)
    except (TypeError, json.JSONDecodeError) as e:
        raise TinyInferError(f"the JSON schema is not valid JSON ({e}); check the file") from None


def grammar_for(kind: str, spec) -> Grammar:
    """The grammar of one constraint kind (see KINDS)."""
    if kind == "json_schema":  # strict: no key or item the schema does not name (see schema_to_grammar)
        return schema_to_grammar(load_schema(spec), strict=True)
    if kind == "json":
        grammar = json_grammar()
        if spec in (None, "object"):
            grammar.rules["root"] = grammar.rules["json-object"]
        elif spec != "value":
            raise TinyInferError(f"--json takes 'object' (default) or 'value', not {spec!r}")
        return grammar
    if kind == "regex":
        return Grammar({"root": regex_to_expr(str(spec))})
    if kind == "choice":
        choices = [spec] if isinstance(spec, str) else list(spec or [])
        if not choices:
            raise TinyInferError("a choice constraint needs at least one option to choose from")
        return Grammar({"root": alt(*(Literal(str(c)) for c in choices))})
    if kind == "grammar":
        return parse_grammar(str(spec))
    if kind == "tools":
        return tool_call_grammar(spec)
    raise TinyInferError(f"unknown constraint kind {kind!r}; use one of {', '.join(KINDS)}")


def vocabulary_of(tokenizer, eos_ids=None, rows: int | None = None) -> Vocabulary:
    """The tokenizer's Vocabulary (a list of token bytes works too), cached per tokenizer, EOS set and number of
    logits rows (`Vocabulary.from_tokenizer`)."""
    if isinstance(tokenizer, Vocabulary):
        return tokenizer
    if isinstance(tokenizer, list):
        return Vocabulary(tokenizer, eos_ids or [])
    key = (id(tokenizer), None if eos_ids is None else tuple(sorted(eos_ids)), rows)
    cached = _vocabularies.get(key)
    if cached is None or cached[0] is not tokenizer:
        cached = _vocabularies[key] = (tokenizer, Vocabulary.from_tokenizer(tokenizer, eos_ids, rows))
    return cached[1]


def warm_vocabulary(vocab: Vocabulary) -> Vocabulary:
    """Walk once, ahead of any request, what every JSON grammar on this vocabulary shares: the body of a JSON
    string (the tokens allowed inside one: 11 ms for GPT-2's 50,257 tokens, the slowest walk most schemas
    need, and 27 ms in a fresh process, whose first `np.unique` imports numpy.ma). The walk is kept in the
    vocabulary under its view's shared name (`Vocabulary.view_walks`), so the first string of the first schema
    finds it done, as every later one would."""
    masker = TokenMasker(compile_grammar(schema_to_grammar({"type": "string"})), vocab)
    masker.mask(masker.parser.step(masker.parser.initial, ord('"')))  # inside the string: its body's walk
    return vocab


def build_constraint(kind: str, spec, tokenizer, eos_ids=None) -> Constraint:
    """A fresh Constraint for one sequence; `tokenizer` may be a Tokenizer, a Vocabulary or a list of bytes."""
    vocab = vocabulary_of(tokenizer, eos_ids)
    key = (kind, json.dumps(spec, sort_keys=True, default=str), id(vocab))
    cached = _maskers.get(key)
    if cached is None or cached[0] is not vocab:  # (an id can be reused once its object is gone)
        if len(_maskers) >= _MAX_CACHED:
            _maskers.pop(next(iter(_maskers)))
        cached = _maskers[key] = (vocab, TokenMasker(compile_grammar(grammar_for(kind, spec)), vocab))
    return Constraint(cached[1])
