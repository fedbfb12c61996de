"""`tinyinfer generate [--model M] "prompt"`: stream a continuation to stdout, statistics to stderr."""

from __future__ import annotations

import sys

import tinyinfer


def add_arguments(parser) -> None:
    parser.add_argument("prompt", help="the text to continue")
    parser.add_argument("--model", default=None, help="built-in name, model folder, llama2.c .bin, or HF repo id "
                        "(default: the built-in model)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--max-tokens", type=int, default=None, help="generate at most this many tokens")
    parser.add_argument("--temperature", type=float, default=None, help="0 = greedy; default from the checkpoint")
    parser.add_argument("--seed", type=int, default=None, help="random seed for reproducible sampling")


def run(args) -> int:
    model = tinyinfer.load(args.model, device=args.device)
    stream = model.generate(args.prompt, stream=True, max_tokens=args.max_tokens, temperature=args.temperature,
                            seed=args.seed)
    for piece in stream:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    print_stats(stream.result)
    return 0


def print_stats(result) -> None:
    t = result.timings
    print(f"[{result.prompt_tokens} prompt tokens, {len(result.token_ids)} output tokens ({result.finish_reason}); "
          f"TTFT {t.ttft_s * 1000:.1f} ms, TPOT {t.tpot_s * 1000:.1f} ms, decode {t.tokens_per_s:.1f} tokens/s]",
          file=sys.stderr)
