"""Real-world JSON Schemas (JSONSchemaBench): compile or refuse clearly, accept valid examples token by token,
reject invalid ones, and never let random sampling produce an invalid document.

The grammar writes objects with properties in the schema's order and compact separators, so a valid
example is checked in that one serialization (`canonical`); an invalid example must be refused in its
plain serialization: every document the grammar accepts is valid, so every invalid one is refused.
"""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from tests.conftest import SHARED_DATA, shared_data
from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.json_schema import _Compiler, merge, schema_to_grammar
from tinyinfer.constrain.mask import Constraint, TokenMasker, Vocabulary
from tinyinfer.constrain.parser import DEAD, ByteParser
from tinyinfer.errors import TinyInferError

SUBSETS = sorted(p.stem for p in (SHARED_DATA / "jsonschema").glob("*.jsonl"))
PER_SUBSET = 3  # schemas sampled per subset (the bench compiles them all)
SEEDS = 3
MAX_TOKENS = 256
SMALL_VOCAB = 2048


@pytest.fixture(scope="module")
def gpt2():
    from tinyinfer.tokenizer import Tokenizer

    return Tokenizer.from_file(shared_data("tokenizers/gpt2/tokenizer.json"))


class SmallVocab:
    """GPT-2's first SMALL_VOCAB byte-level tokens (all 256 bytes, then the earliest merges) plus EOS:
    a real byte-level vocabulary small enough for fast tests. Text is split by greedy longest match."""

    def __init__(self, gpt2):
        self.token_bytes = [gpt2.token_bytes(i) for i in range(SMALL_VOCAB)] + [b"<|endoftext|>"]
        self.vocab = Vocabulary(self.token_bytes, eos_ids=[SMALL_VOCAB])
        self.longest = max(len(t) for t in self.token_bytes[:SMALL_VOCAB])
        self.ids = {t: i for i, t in enumerate(self.token_bytes[:SMALL_VOCAB])}

    def encode(self, text: str) -> list[int]:
        data, out, i = text.encode(), [], 0
        while i < len(data):
            n = next(n for n in range(min(self.longest, len(data) - i), 0, -1) if data[i : i + n] in self.ids)
            out.append(self.ids[data[i : i + n]])
            i += n
        return out

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.token_bytes[i] for i in ids).decode("utf-8")


@pytest.fixture(scope="module")
def small(gpt2):
    return SmallVocab(gpt2)


def sample_rows(subset: str) -> list[dict]:
    rows = [json.loads(line) for line in shared_data(f"jsonschema/{subset}.jsonl").open()]
    return random.Random(subset).sample(rows, min(PER_SUBSET, len(rows)))


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def canonical(root, schema, value, compiler: _Compiler):
    """`value` with object keys in the order the grammar writes them (schema properties first)."""
    schema = compiler.deref(schema, "#")
    if not isinstance(schema, dict):
        return value
    if "allOf" in schema:
        schema = merge([{k: v for k, v in schema.items() if k != "allOf"}] + list(schema["allOf"]), "#", compiler)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            rest = {k: v for k, v in schema.items() if k != key}
            for branch in schema[key]:
                if matches(root, branch, value):
                    return canonical(root, merge([rest, branch], "#", compiler), value, compiler)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        keys = [k for k in props if k in value] + [k for k in value if k not in props]
        return {k: canonical(root, props.get(k, extra), value[k], compiler) for k in keys}
    if isinstance(value, list):
        prefix = schema.get("prefixItems", schema["items"] if isinstance(schema.get("items"), list) else [])
        rest = schema.get("additionalItems", True) if isinstance(schema.get("items"), list) else schema.get("items", True)
        return [canonical(root, prefix[i] if i < len(prefix) else rest, v, compiler) for i, v in enumerate(value)]
    return value


def matches(root, branch, value) -> bool:
    """jsonschema's verdict on `value` against a subschema whose $refs point into `root`."""
    resource = Resource.from_contents(root, default_specification=DRAFT7)
    registry = Registry().with_resource("urn:root", resource)
    schema = {"$ref": "urn:root#/$branch"}
    resource = Resource.from_contents({**root, "$branch": branch}, default_specification=DRAFT7)
    registry = Registry().with_resource("urn:root", resource)
    return jsonschema.Draft7Validator(schema, registry=registry).is_valid(value)


def accepts_text(masker: TokenMasker, tokens: list[int]) -> bool:
    """Feed the tokens through the mask one by one; then EOS must be allowed."""
    constraint = Constraint(masker)
    for token in tokens:
        if not constraint.allowed_mask()[token]:
            return False
        constraint.advance(token)
    return constraint.allowed_mask()[masker.eos_ids].all()


def generate(masker: TokenMasker, seed: int) -> tuple[list[int], str]:
    """Random logits (the model is no help), masked; returns (tokens, finish reason).

    The argmax of i.i.d. random logits over the allowed tokens is a uniform draw among them."""
    rng = np.random.default_rng(seed)
    constraint, tokens = Constraint(masker), []
    for _ in range(MAX_TOKENS):
        allowed = np.flatnonzero(constraint.allowed_mask())
        assert allowed.size, "the grammar left no token to choose"
        token = int(allowed[rng.integers(allowed.size)])
        constraint.advance(token)
        if token in masker.eos_ids:
            return tokens, "stop"
        tokens.append(token)
    return tokens, "length"


def compiled_or_refused(row):
    """The grammar network, or None after checking the refusal names the path and the reason."""
    try:
        return compile_grammar(schema_to_grammar(row["schema"]))
    except TinyInferError as e:
        assert str(e).startswith("JSON schema at #"), (row["source_path"], str(e))
        return None


def serialized_examples(row):
    """(valid?, compact text) per example; valid ones in the grammar's key order."""
    schema = row["schema"]
    for test in row["tests"]:
        value = canonical(schema, schema, test["data"], _Compiler(schema)) if test["valid"] else test["data"]
        yield test["valid"], json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("subset", SUBSETS)
def test_schemas_compile_and_hold_on_examples_and_random_generation(subset, small):
    stopped = 0
    for row in sample_rows(subset):
        net = compiled_or_refused(row)
        if net is None:
            continue
        where, masker = row["source_path"], TokenMasker(net, small.vocab)
        for valid, text in serialized_examples(row):
            assert accepts_text(masker, small.encode(text)) == valid, (where, valid, text[:300])
        check = validator(row["schema"])
        for seed in range(SEEDS):
            tokens, reason = generate(masker, seed)
            if reason == "stop":
                stopped += 1
                text = small.decode(tokens)
                errors = [e.message for e in check.iter_errors(json.loads(text))]
                assert not errors, (where, seed, errors[:3], text[:300])
    print(f"{subset}: {stopped} generations ended by EOS (the rest reached max_tokens={MAX_TOKENS})")


def test_examples_through_the_full_gpt2_vocabulary(gpt2):
    """The same checks with GPT-2's real BPE tokenization and all 50,257 tokens, on a few schemas."""
    vocab = Vocabulary.from_tokenizer(gpt2)
    for subset in ("Glaiveai2K", "Github_trivial"):
        for row in sample_rows(subset)[:2]:
            net = compiled_or_refused(row)
            if net is None:
                continue
            masker = TokenMasker(net, vocab)
            for valid, text in serialized_examples(row):
                assert accepts_text(masker, gpt2.encode(text, add_special_tokens=False)) == valid, text[:300]


def closing_walk(parser: ByteParser, rng: random.Random, limit: int = 4000) -> bytes | None:
    """Random bytes the grammar allows, leaning towards closing brackets and short values, until the text
    may end (None if `limit` bytes did not get there)."""
    state, out = parser.initial, []
    for _ in range(limit):
        if parser.accepts(state) and rng.random() < 0.5:
            return bytes(out)
        allowed = parser.next_bytes(state)
        if not allowed:
            return bytes(out) if parser.accepts(state) else None
        closing = [b for b in allowed if b in b'}]",:0123456789']
        byte = rng.choice(closing if closing and rng.random() < 0.9 else allowed)
        following = parser.step(state, byte)
        if following != DEAD:
            state = following
            out.append(byte)
    return None


def test_every_handwritten_schema_compiles_exactly_or_is_refused():
    """The subset written to exercise not, oneOf, contains, multipleOf automata and key languages: each
    schema compiles (or is refused with its path), and every document its grammar lets a random walk
    finish is valid for jsonschema."""
    finished = 0
    for row in (json.loads(line) for line in shared_data("jsonschema/Handwritten.jsonl").open()):
        net = compiled_or_refused(row)
        if net is None:
            continue
        parser, check, rng = ByteParser(net), validator(row["schema"]), random.Random(row["source_path"])
        for _ in range(10):
            text = closing_walk(parser, rng)
            if text is not None:
                finished += 1
                value = json.loads(text)
                assert check.is_valid(value), (row["source_path"], text[:300])
    assert finished > 100
