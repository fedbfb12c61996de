"""StreamingDetokenizer: the pieces printed one token at a time concatenate to decode(ids), and no piece
ever holds a broken character."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import shared_data
from tinyinfer.tokenizer import StreamingDetokenizer, Tokenizer

PATHS = ["tokenizers/gpt2", "tokenizers/falcon", "tokenizers/phi-3-mini", "models/stories260K/tok512.bin"]


@pytest.fixture(scope="module", params=PATHS)
def tok(request):
    return Tokenizer.from_file(shared_data(request.param))


def stream(tok, ids, skip_special_tokens=False) -> list[str]:
    detok = StreamingDetokenizer(tok, skip_special_tokens=skip_special_tokens)
    return [detok.push(i) for i in ids] + [detok.flush()]


def test_stream_of_real_text_is_the_text(tok):
    text = "Emoji 😀🦙 and 日本語, accents déjà-vu:\n\tdone.  "
    ids = tok.encode(text)
    pieces = stream(tok, ids)
    assert "".join(pieces) == tok.decode(ids)
    assert "".join(stream(tok, ids, skip_special_tokens=True)) == tok.decode(ids, skip_special_tokens=True)
    assert not any("\ufffd" in p for p in pieces)  # a character is printed only once it is complete
    assert sum(1 for p in pieces if p) > 10  # and text does flow token by token


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_stream_of_any_ids_concatenates_to_decode(tok, data):
    ids = data.draw(st.lists(st.integers(0, tok.vocab_size - 1), max_size=16))
    for skip in (False, True):
        assert "".join(stream(tok, ids, skip)) == tok.decode(ids, skip_special_tokens=skip)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40))
def test_stream_of_any_encoded_text(tok, text):
    ids = tok.encode(text)
    assert "".join(stream(tok, ids)) == tok.decode(ids)


def test_skipped_special_token_inside_a_byte_run():
    """ByteFallback decodes a run of byte tokens as a whole, and a skipped special token does not end it."""
    tok = Tokenizer.from_file(shared_data("tokenizers/phi-3-mini"))
    e2, x00, special = tok.token_to_id["<0xE2>"], tok.token_to_id["<0x00>"], tok.token_to_id["<|endoftext|>"]
    for ids in ([x00, special, e2], [e2, special, x00, special], [x00, e2, special]):
        assert "".join(stream(tok, ids, skip_special_tokens=True)) == tok.decode(ids, skip_special_tokens=True)
