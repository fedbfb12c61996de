"""`tinyinfer tokenize --model PATH "text"`: how a text splits into tokens, and what that costs.

    python -m tinyinfer tokenize --model ../shared/data/tokenizers/gpt2 "Hello world, tokenizers!"

prints one row per token (position, id, the piece as the vocabulary stores it, the text it stands for),
then the counts the chapter on tokens teaches: characters per token and words per token (English runs
about 4 characters and 0.75 words per token on GPT-2; other scripts and code cost more tokens).
PATH is a tokenizer.json, a model folder, a llama2.c tokenizer.bin, a .gguf file (its tokenizer), or a
built-in or pulled model's name.
"""

from __future__ import annotations

import sys

from tinyinfer.commands import at_least
from tinyinfer.errors import TinyInferError
from tinyinfer.loading import load_tokenizer
from tinyinfer.resolve import resolve_model
from tinyinfer.sampling import check_text
from tinyinfer.tokenizer import Tokenizer


def add_arguments(parser) -> None:
    parser.add_argument("text", nargs="?", help="the text to tokenize (omit it, or give '-', to read stdin)")
    parser.add_argument("--model", default=None, help="tokenizer.json, model folder, llama2.c tokenizer.bin, .gguf "
                        "file, built-in or pulled name, or HF repo id (default: the built-in model)")
    parser.add_argument("--no-special", action="store_true", help="do not add BOS/EOS (add_special_tokens=False)")
    parser.add_argument("--max-rows", type=at_least(0), default=200,
                        help="print at most this many token rows (the counts cover all)")


def model_tokenizer(model: str | None) -> Tokenizer:
    """The tokenizer of a path, a built-in, pulled or hub name, or (None) the built-in model."""
    return load_tokenizer(resolve_model(model))


def shown(data: bytes) -> str:
    """A token's text, or its raw bytes (b'\\xf0\\x9f') when it holds only part of a character."""
    try:
        return repr(data.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(data)


def read_text(text: str | None) -> str:
    """The text argument, or stdin for None and '-'; either must be UTF-8."""
    try:
        return check_text(sys.stdin.read() if text in (None, "-") else text, "the text")
    except UnicodeDecodeError as e:
        raise TinyInferError(f"stdin is not valid UTF-8 ({e.reason} at byte {e.start}): pass UTF-8 text") from None


def run(args) -> int:
    text = read_text(args.text)
    tok = model_tokenizer(args.model)
    ids = tok.encode(text, add_special_tokens=not args.no_special)
    print(f"{'#':>5} {'id':>7}  {'piece':<24} text")
    for position, token_id in enumerate(ids[:args.max_rows]):
        print(f"{position:>5} {token_id:>7}  {tok.id_to_piece(token_id)!r:<24} {shown(tok.token_bytes(token_id))}")
    if len(ids) > args.max_rows:
        print(f"  ... {len(ids) - args.max_rows} more tokens (--max-rows)")
    n, words = len(ids), len(text.split())
    per_token = f"{len(text) / n:.2f} characters/token, {words / n:.2f} words/token" if n else "no tokens"
    print(f"{n} tokens for {len(text)} characters, {words} words, {len(text.encode('utf-8'))} bytes: {per_token}")
    return 0
