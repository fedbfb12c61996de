"""`tinyinfer perplexity --model M FILE`: the model's perplexity on a text file (tinyinfer/perplexity.py).

    $ python -m tinyinfer perplexity --model shakespeare --ctx-size 128 ../shared/data/corpora/tinyshakespeare.txt
    perplexity 4.4108 over 1024 tokens (4 windows of 128, stride 64): 1.4841 nats/token, 1.4723 nats/char (1032 chars)

To compare formats and quantisations of one model, or models on your own text. --ctx-size defaults to the
model's context window and --stride to half of it; --max-tokens scores only the text's first tokens (quick).
"""

from __future__ import annotations

from pathlib import Path

import tinyinfer
from tinyinfer.commands import at_least
from tinyinfer.errors import TinyInferError
from tinyinfer.perplexity import perplexity


def add_arguments(parser) -> None:
    parser.add_argument("file", help="a UTF-8 text file")
    parser.add_argument("--model", default=None, help="built-in name, pulled name, model folder, .gguf or llama2.c .bin file")
    parser.add_argument("--ctx-size", type=at_least(2), default=None, help="tokens per window (default: the model's context window)")
    parser.add_argument("--stride", type=at_least(1), default=None, help="tokens between window starts (default: half the window)")
    parser.add_argument("--max-tokens", type=at_least(2), default=None, help="score only the first N tokens of the text")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])


def run(args) -> int:
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TinyInferError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); convert it to UTF-8") from None
    model = tinyinfer.load(args.model, device=args.device)
    if model.tokenizer is None:
        raise TinyInferError("this model has no tokenizer to read the text with: give a model that carries one")
    ids = model.tokenizer.encode(text)[:args.max_tokens]
    ctx = args.ctx_size or model.config.max_seq_len
    stride = args.stride or max(1, ctx // 2)
    result = perplexity(model, ids, ctx, stride)
    chars = len(model.tokenizer.decode(ids, skip_special_tokens=True)) if args.max_tokens else len(text)
    print(f"perplexity {result.perplexity:.4f} over {result.n_tokens} tokens ({result.n_windows} windows of {ctx}, "
          f"stride {stride}): {result.nats_per_token:.4f} nats/token, {result.total_nats / chars:.4f} nats/char ({chars} chars)")
    return 0
