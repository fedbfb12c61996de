"""The grammar engine: notation, UTF-8 byte ranges, the byte parser, and token masks against brute force."""

from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest

from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.grammar import parse_grammar
from tinyinfer.constrain.mask import Constraint, TokenMasker, Vocabulary
from tinyinfer.constrain.parser import DEAD, ByteParser
from tinyinfer.constrain.utf8 import utf8_sequences
from tinyinfer.errors import TinyInferError


def parser_for(text: str) -> ByteParser:
    return ByteParser(compile_grammar(parse_grammar(text)))


def accepts(parser: ByteParser, data: bytes) -> bool:
    return parser.accepts(parser.step_bytes(parser.initial, data))


# ---------------------------------------------------------------- notation
def test_notation_round_trips_through_the_printer():
    text = r'''
        root  ::= item ("," item)* | "\x41\u00e9\n" | [^"\\\]a-c]{2,} .?
        item  ::= [a-z_]{1,3} digit+ | "(" root ")"   # recursion is fine
        digit ::= [0-9]
    '''
    grammar = parse_grammar(text)
    assert parse_grammar(str(grammar)).rules == grammar.rules


@pytest.mark.parametrize(
    "text, message",
    [
        ('root ::= "abc', "unterminated string"),
        ("root ::= [a-", "unterminated character class"),
        ('root ::= ("a"', "missing )"),
        ('root ::= "a"{3,1}', "max below min"),
        ('root ::= "\\q"', "unknown escape"),
        ('start ::= "a"', "no `root` rule"),
        ("root ::= other", "undefined rule 'other'"),
        ('root ::= root "a" | "b"', "left-recursive"),
        ('root ::= x\nx ::= "c"? root "a" | "b"', "left-recursive"),
    ],
)
def test_bad_grammars_are_refused_with_the_reason(text, message):
    with pytest.raises(TinyInferError, match=re.escape(message)):
        compile_grammar(parse_grammar(text))


# ---------------------------------------------------------------- UTF-8
@pytest.mark.parametrize("lo, hi", [(0, 0x7F), (0x61, 0x7A), (0x7F, 0x800), (0x7FF, 0xE000), (0xFFF0, 0x10010)])
def test_utf8_sequences_match_exactly_the_encodings(lo, hi):
    sequences = utf8_sequences(lo, hi)

    def matched(data: bytes) -> bool:
        return any(len(s) == len(data) and all(a <= b <= c for (a, c), b in zip(s, data)) for s in sequences)

    window = range(max(0, lo - 300), min(0x10FFFF, hi + 300) + 1)
    for cp in window:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        assert matched(chr(cp).encode()) == (lo <= cp <= hi and not 0xD800 <= cp <= 0xDFFF), hex(cp)
    assert not any(matched(b) for b in (b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80"))  # never valid


# ---------------------------------------------------------------- the parser
@pytest.mark.exercise("8.1")
def test_parser_agrees_with_python_re_on_a_regular_grammar():
    parser = parser_for('root ::= ("ab" | [0-9]{2,3} | [^a-z0-9]) ("x"* "é")?')
    regex = re.compile("(ab|[0-9]{2,3}|[^a-z0-9])(x*é)?", re.DOTALL)
    rng = random.Random(0)
    alphabet = ["a", "b", "1", "x", "é", "-", "\n", "z"]
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))
        assert accepts(parser, text.encode()) == bool(regex.fullmatch(text)), text


@pytest.mark.exercise("8.1")
def test_parser_handles_recursion_and_utf8_bytes():
    parser = parser_for('root ::= "(" root ")" root | ""')
    for text in ["", "()", "(())()", "((()))"]:
        assert accepts(parser, text.encode())
    for text in ["(", ")(", "(()", "())"]:
        assert not accepts(parser, text.encode())
    assert parser.step_bytes(parser.initial, b"())") == DEAD
    parser = parser_for('root ::= "é" [ü-ÿ]')
    half = parser.step(parser.initial, "é".encode()[0])  # a token may end inside a character
    assert half != DEAD and not parser.accepts(half)
    assert accepts(parser, "éü".encode()) and not accepts(parser, "éa".encode())


@pytest.mark.exercise("8.1")
def test_right_recursion_runs_in_constant_stack_depth():
    """Automata are written as right-recursive rules; a tail call pushes no frame, so the same automaton
    state is the same parser state however long the text (what lets masks be cached)."""
    parser = parser_for('root ::= "[" even "]"\neven ::= [a-z] odd | ""\nodd ::= [a-z] even')
    state, seen = parser.step(parser.initial, ord("[")), set()
    for i in range(1, 401):
        state = parser.step(state, ord("a"))
        seen.add(state)
        assert (parser.step(state, ord("]")) != DEAD) == (i % 2 == 0)
    assert len(seen) == 2  # one state for "odd so far", one for "even so far"
    assert accepts(parser, b"[" + b"ab" * 300 + b"]") and not accepts(parser, b"[" + b"a" * 301 + b"]")

# ---------------------------------------------------------------- masks against brute force
def language(grammar_text: str, alphabet: list[str], max_len: int) -> set[bytes]:
    """Every string up to max_len characters the grammar accepts (by brute force over an alphabet)."""
    parser = parser_for(grammar_text)
    words = set()
    for n in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=n):
            data = "".join(chars).encode()
            if accepts(parser, data):
                words.add(data)
    return words


FINITE = 'root ::= ("ab" | "a" [0-9] | "é" "x"?){1,3}'
BALANCED = 'root ::= ("(" root ")")*'
VOCAB = [b"a", b"b", b"ab", b"a1", b"1", b"2", b"\xc3", b"\xa9", "é".encode(), "éx".encode(), b"x",
         b"(", b")", b"()", b"((", b"))", b")(", b"b(", b"", b"<|end|>", b"<|special|>"]
EOS, SPECIAL = 19, 20


@pytest.mark.exercise("8.2")
@pytest.mark.parametrize("grammar_text, alphabet, max_len, test_len", [
    (FINITE, ["a", "b", "1", "2", "é", "x"], 6, 6),
    (BALANCED, ["(", ")"], 12, 4),
])
@pytest.mark.parametrize("sparse_limit", [0, 512])  # 0: the NumPy walk (the exercise); 512: plain Python
def test_mask_equals_brute_force_on_random_states(grammar_text, alphabet, max_len, test_len, sparse_limit):
    words = language(grammar_text, alphabet, max_len)
    prefixes = {w[:i] for w in words for i in range(len(w) + 1)}
    masker = TokenMasker(compile_grammar(parse_grammar(grammar_text)), Vocabulary(VOCAB, [EOS], [SPECIAL]))
    masker.sparse_limit = sparse_limit
    rng = random.Random(1)
    states = sorted(p for p in prefixes if len(p) <= test_len)
    for prefix in rng.sample(states, min(40, len(states))) + [b""]:
        state = masker.parser.step_bytes(masker.parser.initial, prefix)
        expected = np.array([bool(tok) and prefix + tok in prefixes for tok in VOCAB])
        expected[SPECIAL] = False
        expected[EOS] = prefix in words
        assert (masker.mask(state) == expected).all(), prefix


@pytest.mark.exercise("8.2")
def test_constraint_walks_tokens_and_refuses_forbidden_ones():
    masker = TokenMasker(compile_grammar(parse_grammar('root ::= "a" "b"?')), Vocabulary([b"a", b"b", b"ab", b"<eos>"], [3]))
    constraint = Constraint(masker)
    assert constraint.allowed_mask().tolist() == [True, False, True, False]
    constraint.advance(0)
    assert constraint.is_complete() and constraint.allowed_mask().tolist() == [False, True, False, True]
    with pytest.raises(TinyInferError, match="not allowed"):
        constraint.advance(0)
    constraint.advance(1)
    assert constraint.allowed_mask().tolist() == [False, False, False, True] and constraint.is_dead_end()
    constraint.advance(3)
    assert not constraint.allowed_mask().any()


def test_masks_are_shared_across_contexts_yet_exact():
    """The same string rule reached at two depths: the cached local part must not leak the context."""
    grammar = 'root ::= "[" (s | root) "]"\ns ::= "\\"" [a-z]* "\\""'
    vocab = [b"[", b"]", b'"', b"ab", b'b"', b'b"]', b'b"]]', b"<eos>"]
    masker = TokenMasker(compile_grammar(parse_grammar(grammar)), Vocabulary(vocab, [7]))
    shallow = masker.parser.step_bytes(masker.parser.initial, b'["a')
    deep = masker.parser.step_bytes(masker.parser.initial, b'[["a')
    assert masker.mask(shallow).tolist() == [False, False, True, True, True, True, False, False]
    assert masker.mask(deep).tolist() == [False, False, True, True, True, True, True, False]


def test_step_all_equals_one_step_per_byte():
    """The byte classes of `step_all` give, for every byte, the state `step` gives it alone (on fresh parsers,
    so neither reads the other's memo)."""
    net = compile_grammar(parse_grammar('root ::= "[" ([a-f0-9] | "\\\\" [nt] | [^\\x00-\\x7f])* "]" | "x" [0-9]{2,40}'))
    together, alone = ByteParser(net), ByteParser(net)
    states = [together.initial]
    for data in (b"[", b"[a", b"[\\", b"[\xc3", b"x1", b"x12"):
        states.append(together.step_bytes(together.initial, data))
        assert alone.step_bytes(alone.initial, data) == states[-1]  # both parsers number states alike
    for state in states:
        assert together.step_all(state) == [alone.step(state, byte) for byte in range(256)]


def test_bench_grammar_prints_coverage_and_wall_and_cpu_times(capsys, tmp_path):
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from tinyinfer.cli import main  # noqa: PLC0415

    rows = [{"subset": "tiny", "source_path": f"s{i}", "schema": schema, "tests": [{"data": bad, "valid": False}]}
            for i, (schema, bad) in enumerate([({"type": "integer"}, "x"), ({"type": "string", "maxLength": 3}, "abcd")])]
    (tmp_path / "tiny.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tokenizer = Path(__file__).resolve().parents[1] / "tinyinfer" / "models" / "shakespeare" / "tokenizer.json"
    assert main(["bench", "grammar", "--schemas", str(tmp_path), "--tokenizer", str(tokenizer), "--engines",
                 "tinyinfer", "--tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "2/2" in out and "the same in CPU time" in out
    assert "0 of 2 (0 schemas)" in out  # neither invalid example is accepted
