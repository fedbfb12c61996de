"""Structured output: at every step, only tokens that keep the output inside a grammar may be sampled.

The pieces, in the order data flows through them:

    grammar.py      the EBNF notation (`root ::= "a" [0-9]+`), its syntax tree, a printer
    regex.py        regular expressions (JSON Schema's subset) as grammar expressions
    json_values.py  JSON building blocks: any value, strings, integer/decimal ranges, formats
    json_schema.py  JSON Schema -> grammar (refusing what a grammar cannot express, with the path)
    tools.py        tool calls: {"name": tool, "arguments": its schema}, and parsing them back
    utf8.py         character ranges -> UTF-8 byte ranges
    automaton.py    grammar -> a network of per-rule automata over bytes (calls make it a pushdown)
    parser.py       the byte parser: interned stacks and states, memoized steps
    mask.py         vocabulary trie + parser -> the token mask, cached per state; the Constraint
    build.py        build_constraint(kind, spec, tokenizer, eos_ids): the one entry point

Using it (the sampler applies the mask as a logits processor: disallowed tokens get -inf):

    from tinyinfer.constrain import build_constraint
    constraint = build_constraint("json_schema", "schema.json", tokenizer)   # or a dict
    # kinds: "json_schema" (dict, JSON text or path), "json" (None/"object" or "value"),
    #        "regex" (pattern), "choice" (list of strings), "grammar" (EBNF text), "tools" (OpenAI tools)
    while True:
        mask = constraint.allowed_mask()          # np.ndarray[bool] [vocab]; EOS only when complete
        logits[~mask] = -np.inf
        token = sample(logits)
        constraint.advance(token)                 # TinyInferError if the token was not allowed
        if token in eos_ids or constraint.is_dead_end(): break   # dead end: only EOS may follow
    # reaching max_tokens first means the output is truncated: report finish reason "length".

`build_constraint` takes `eos_ids` (default: the tokenizer's EOS); it also accepts a `Vocabulary` or a
plain `list[bytes]` instead of a tokenizer. Special tokens are never allowed, EOS only when the grammar may
end. Compiled grammars and vocabulary tries are cached, so repeated requests share their masks.
"""

from tinyinfer.constrain.build import KINDS, build_constraint, grammar_for, warm_vocabulary
from tinyinfer.constrain.grammar import Grammar, parse_grammar
from tinyinfer.constrain.json_schema import schema_to_grammar
from tinyinfer.constrain.mask import Constraint, TokenMasker, Vocabulary
from tinyinfer.constrain.tools import (
           parse_tool_calls,
           tool_call_grammar,
           tool_call_schema,
)

__all__ = ["KINDS", "Constraint", "Grammar", "TokenMasker", "Vocabulary", "build_constraint", "grammar_for",
           "parse_grammar", "parse_tool_calls", "schema_to_grammar", "tool_call_grammar", "tool_call_schema",
           "warm_vocabulary"]
