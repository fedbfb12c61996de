"""Token masks on real schemas against a token-by-token reference: every fast path (the plain-Python walk, the
NumPy walk on a local view, escapes finished with the full state, walks shared between grammars through the
vocabulary) must give exactly the tokens whose bytes the parser survives."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tests.conftest import SHARED_DATA, shared_data
from tinyinfer.constrain import automaton
from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.build import grammar_for, warm_vocabulary
from tinyinfer.constrain.grammar import parse_grammar
from tinyinfer.constrain.json_schema import schema_to_grammar
from tinyinfer.constrain.mask import Constraint, TokenMasker, Vocabulary
from tinyinfer.constrain.parser import DEAD
from tinyinfer.errors import TinyInferError

VOCAB_SIZE = 4096  # GPT-2's first tokens: every byte, then the earliest merges (`",`, ` the`, digits...)
STEPS = 16


@pytest.fixture(scope="module")
def token_bytes():
    from tinyinfer.tokenizer import Tokenizer

    gpt2 = Tokenizer.from_file(shared_data("tokenizers/gpt2/tokenizer.json"))
    return [gpt2.token_bytes(i) for i in range(VOCAB_SIZE)] + [b"<|endoftext|>"]


def reference_mask(masker: TokenMasker, token_bytes: list[bytes], state: int) -> np.ndarray:
    """Each token tried alone: allowed when the parser survives all its bytes; EOS when the text may end."""
    parser = masker.parser
    mask = np.array([bool(t) and parser.step_bytes(state, t) != DEAD for t in token_bytes])
    mask[masker.eos_ids] = parser.accepts(state)
    return mask


def one_schema_per_subset() -> list[dict]:
    rows = []
    for path in sorted((SHARED_DATA / "jsonschema").glob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        rows.append(json.loads(random.Random(path.stem).choice(lines))["schema"])
    return rows


@pytest.mark.parametrize("sparse_limit", [0, None])  # 0: every mask through the NumPy walk and its views
def test_masks_equal_the_token_by_token_reference_on_real_schemas(token_bytes, sparse_limit):
    vocab = Vocabulary(token_bytes, eos_ids=[VOCAB_SIZE])  # one vocabulary: grammars share its walks
    checked = 0
    for index, schema in enumerate(one_schema_per_subset()):
        try:
            masker = TokenMasker(compile_grammar(schema_to_grammar(schema)), vocab)
        except TinyInferError:
            continue
        if sparse_limit is not None:
            masker.sparse_limit = sparse_limit
        constraint, rng = Constraint(masker), np.random.default_rng(index)
        for _ in range(STEPS):
            mask = constraint.allowed_mask()
            expected = reference_mask(masker, token_bytes, constraint.state)
            assert (mask == expected).all(), (index, np.flatnonzero(mask != expected)[:10])
            checked += 1
            allowed = np.flatnonzero(mask)
            token = int(allowed[rng.integers(allowed.size)])
            if token == VOCAB_SIZE:
                break
            constraint.advance(token)
    assert checked > 100
    assert vocab.view_walks, "no walk was shared through the vocabulary"


def test_a_string_walk_is_shared_between_grammars_yet_exact(token_bytes):
    """Grammars with the same string rule in different objects: the second finds the first's walk in the
    vocabulary (no new entry), and its mask still follows its own object (`"}` vs `",`). A string of at most
    two characters over the same character rule is another walk (a new entry, refusing longer tokens)."""
    vocab = Vocabulary(token_bytes, eos_ids=[VOCAB_SIZE])
    chars = "\n" + r'char ::= [^"\\\x00-\x1F] | "\\" ["\\/bfnrt]'
    string = "\n" + r'str ::= "\"" char* "\""' + chars
    grammars = [(r'root ::= "{\"a\":" str "}"' + string, b'{"a":"x', 1),
                (r'root ::= "[" str "," str "]"' + string, b'["x', 0),
                (r'root ::= "[" str "]"' + "\n" + r'str ::= "\"" char{0,2} "\""' + chars, b'["x', 1)]
    for grammar, text, new_walks in grammars:
        masker = TokenMasker(compile_grammar(parse_grammar(grammar)), vocab)
        masker.sparse_limit = 0
        state = masker.parser.step_bytes(masker.parser.initial, text)
        walks_before = len(vocab.view_walks)
        assert (masker.mask(state) == reference_mask(masker, token_bytes, state)).all(), grammar
        assert len(vocab.view_walks) == walks_before + new_walks, grammar


@pytest.mark.parametrize("kind", ["json_schema", "json"])
def test_a_warmed_vocabulary_holds_the_walk_of_every_json_string_body(token_bytes, kind):
    """`warm_vocabulary` walks a JSON string's body once, ahead of any grammar: the strings of a schema (a
    property's value, an array's items, a key of JSON mode's any object) then add no walk of their own, and
    their masks still equal the token-by-token reference."""
    vocab = warm_vocabulary(Vocabulary(token_bytes, eos_ids=[VOCAB_SIZE]))
    walks = len(vocab.view_walks)
    assert walks == 1
    specs = {"json_schema": [({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
                               "additionalProperties": False}, b'{"name":"ab'),
                              ({"type": "array", "items": {"type": "string"}}, b'["x","'), ({"type": "string"}, b'"')],
             "json": [("object", b'{"'), ("object", b'{"a":["b')]}
    for spec, text in specs[kind]:
        masker = TokenMasker(compile_grammar(grammar_for(kind, spec)), vocab)
        state = masker.parser.step_bytes(masker.parser.initial, text)
        assert state != DEAD
        assert (masker.mask(state) == reference_mask(masker, token_bytes, state)).all(), (spec, text)
        assert len(vocab.view_walks) == walks, (spec, text)


def test_a_long_bounded_string_is_built_lazily_and_shares_walks_far_from_its_bound(token_bytes):
    """maxLength 3000: the copies are built as the text reaches them, positions with more characters left than
    the longest token has bytes share one walk, and masks near the bound refuse the tokens that would pass it."""
    vocab = Vocabulary(token_bytes, eos_ids=[VOCAB_SIZE])
    chars = "\n" + r'char ::= [^"\\\x00-\x1F] | "\\" ["\\/bfnrt]'
    net = compile_grammar(parse_grammar(r'root ::= "[" str "]"' + "\n" + r'str ::= "\"" char{0,3000} "\""' + chars))
    assert net.n_states < 100  # one copy built; all 3000 would take some 20,000 states
    masker = TokenMasker(net, vocab)
    masker.sparse_limit = 0
    walks = []
    for length in (1, 2, 500, 2990, 2999, 3000):
        state = masker.parser.step_bytes(masker.parser.initial, b'["' + b"a" * length)
        assert (masker.mask(state) == reference_mask(masker, token_bytes, state)).all(), length
        walks.append(len(vocab.view_walks))
    assert walks[0] == walks[1] == walks[2] < walks[3] < walks[4] < walks[5]  # 1, 2, 500 chars: one walk


def test_the_key_names_an_object_forbids_are_built_as_the_text_reaches_them(token_bytes, monkeypatch):
    """additionalProperties beside declared names: any key but those, an alternation by letter whose
    branches wait until the text enters them (fewer states than building every branch at once); masks at
    each step of such keys still equal the reference."""
    vocab = Vocabulary(token_bytes, eos_ids=[VOCAB_SIZE])
    names = ["alpha", "alps", "beta", "bet", "gamma", "delta", "epsilon"]
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names}}
    texts = [b"{", b'{"', b'{"a', b'{"al', b'{"alp', b'{"alpx', b'{"alpha":1,"', b'{"alpha":1,"b', b'{"alpha":1,"be']
    sizes = {}
    for eager in (False, True):
        if eager:
            monkeypatch.setattr(automaton, "EAGER_OPTIONS", 10**9)
        masker = TokenMasker(compile_grammar(schema_to_grammar(schema)), vocab)
        for text in texts:
            state = masker.parser.step_bytes(masker.parser.initial, text)
            assert (masker.mask(state) == reference_mask(masker, token_bytes, state)).all(), (eager, text)
        sizes[eager] = masker.parser.net.n_states
    assert sizes[False] < sizes[True]


def test_a_number_starts_from_the_tokens_of_its_digits(token_bytes):
    """Inside a number the parser loops on the digits: the mask starts from every token spelled with digits
    only (known to the vocabulary) and walks on from the bytes that leave the loop (`,`, `}`, `.`, `e`).
    Where a number starts, `1`..`9` lead into that loop: the tokens of a nonzero digit, then digits."""
    vocab = Vocabulary(token_bytes, eos_ids=[VOCAB_SIZE])
    schema = {"type": "object", "properties": {"n": {"type": "number"}, "k": {"type": "integer"}}, "required": ["n"]}
    masker = TokenMasker(compile_grammar(schema_to_grammar(schema)), vocab)
    for text in (b'{"n":', b'{"n":1', b'{"n":12', b'{"n":-', b'{"n":-3', b'{"n":1.', b'{"n":1.5', b'{"n":1.5e1',
                 b'{"n":0,"k":', b'{"n":0,"k":7'):
        state = masker.parser.step_bytes(masker.parser.initial, text)
        assert (masker.mask(state) == reference_mask(masker, token_bytes, state)).all(), text
    digits = b"0123456789"
    assert {(digits, digits), (digits[1:], digits)} <= vocab.trie._spelled.keys()  # inside, and at the start


@pytest.mark.parametrize("sparse_limit", [0, None])  # 0: the frontier below the loop through the NumPy walk
@pytest.mark.parametrize("loop_bytes", [None, 257])  # 257: no byte set is that large, the shortcut is off
def test_a_string_view_starts_from_the_tokens_of_its_characters(token_bytes, sparse_limit, loop_bytes, monkeypatch):
    """A string's local view loops on its plain characters: its walk takes every token spelled with them at
    once and walks on only from the bytes that leave the loop (an escape, a quote, a UTF-8 lead byte). Tokens
    that close the string only after leaving the loop (`é"`, `\\n"}`) are escapes found below that frontier,
    finished with the full state. Exact with and without the shortcut."""
    import tinyinfer.constrain.mask as mask_module

    if loop_bytes is not None:
        monkeypatch.setattr(mask_module, "LOOP_BYTES", loop_bytes)
    closing = ['é"', '\\n"', '\\u00e9",', 'é",', 'aé"}', 'é\\"x']  # each leaves the loop before its quote
    words = token_bytes[:-1] + [w.encode() for w in closing] + token_bytes[-1:]
    vocab = Vocabulary(words, eos_ids=[len(words) - 1])
    schema = {"type": "object", "properties": {"s": {"type": "string"}, "t": {"type": "string", "maxLength": 3}}}
    masker = TokenMasker(compile_grammar(schema_to_grammar(schema)), vocab)
    if sparse_limit is not None:
        masker.sparse_limit = sparse_limit
    for text in (b'{"s":"', b'{"s":"ab', b'{"s":"\\', b'{"s":"\\u00', b'{"s":"x","t":"', b'{"s":"x","t":"ab'):
        state = masker.parser.step_bytes(masker.parser.initial, text)
        mask = masker.mask(state)
        assert (mask == reference_mask(masker, words, state)).all(), text
        if text == b'{"s":"':
            assert mask[len(token_bytes) - 1:-1].all()  # every one of the closing tokens
    used = any(len(loop) > 64 for _, loop in vocab.trie._spelled)  # a string's characters
    assert used == (loop_bytes is None)
