"""`tinyinfer bench tokenizer`: encode throughput of tinyinfer's pure-Python BPE next to the Rust
`tokenizers` library, on the same text in the same run, one thread each.

    python -m tinyinfer bench tokenizer --tokenizer ../shared/data/tokenizers/gpt2 \\
        --text ../shared/data/corpora/tinyshakespeare.txt

Three figures: tinyinfer's first pass over the text (every distinct pre-tokenized chunk goes through
BPE once), tinyinfer again (chunks come from the per-chunk cache: the steady state of a server), and
the Rust library. Each after the first is the best of --repeats runs; the ids are checked to match.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tinyinfer.commands import at_least
from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer import Tokenizer

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def add_arguments(parser) -> None:
    parser.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "gpt2"),
                        help="tokenizer.json or model folder (default: GPT-2 from ../shared/data)")
    parser.add_argument("--text", default=str(SHARED / "corpora" / "tinyshakespeare.txt"),
                        help="UTF-8 text file to encode (default: tinyshakespeare from ../shared/data)")
    parser.add_argument("--repeats", type=at_least(1), default=3, help="runs per measurement; the best is kept")


def best_time(fn, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def run(args) -> int:
    # one thread for the Rust library too; set before it is imported, so its thread pool sees it
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    text_path, tok_path = Path(args.text), Path(args.tokenizer)
    if not text_path.is_file():
        raise TinyInferError(f"text file {text_path} does not exist; pass --text PATH to a UTF-8 text file")
    try:
        text = text_path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TinyInferError(f"text file {text_path} is not UTF-8 ({e.reason} at byte {e.start}); pass --text PATH "
                             "to a UTF-8 text file") from None
    megabytes = len(text.encode("utf-8")) / 1e6

    tok = Tokenizer.from_file(tok_path)
    cold, ids = best_time(lambda: tok.encode(text), 1)  # the cache starts empty
    warm, _ = best_time(lambda: tok.encode(text), args.repeats)
    rows = [("tinyinfer, first pass (BPE on every distinct chunk)", cold), ("tinyinfer, cached chunks", warm)]
    print(f"text: {text_path.name}, {megabytes:.2f} MB, {len(ids)} tokens; tokenizer: {tok_path}")

    try:
        import tokenizers
    except ImportError:
        tokenizers = None
        print("(the `tokenizers` library is not installed: no reference figure)")
    reference_time = None
    if tokenizers is not None and tok_path.suffix != ".bin":
        json_path = tok_path / "tokenizer.json" if tok_path.is_dir() else tok_path
        reference = tokenizers.Tokenizer.from_file(str(json_path))
        reference.no_truncation()
        reference_time, reference_ids = best_time(lambda: reference.encode(text).ids, args.repeats)
        rows.append((f"tokenizers {tokenizers.__version__} (Rust, 1 thread)", reference_time))
        print(f"ids identical to the reference: {'yes' if reference_ids == ids else 'NO'}")

    for name, seconds in rows:
        ratio = f"  {seconds / reference_time:6.1f}x the Rust time" if reference_time else ""
        print(f"  {name:<52} {megabytes / seconds:8.2f} MB/s{ratio}")
    return 0
