"""`tinyinfer bench NAME`: benchmarks that print ratios measured side by side in one run.

Each benchmark is a module `tinyinfer/bench/NAME.py` with `add_arguments(parser)` and `run(args) -> int`.
Benchmarks never assert a time: they print what they measured, next to a reference or a physical bound.
"""

from __future__ import annotations

import importlib

# name -> one-line help
BENCHMARKS = {
    "decode": "prefill and decode tokens/s against the memory-bandwidth bound and HF transformers",
    "tokenizer": "encode throughput against the Hugging Face tokenizers library",
    "grammar": "grammar compile and per-token mask time against llguidance/xgrammar when installed",
    "serve": "sequential vs static vs continuous batching on a synthetic workload",
    "http": "a bounded load test of the HTTP server on loopback: errors, outputs, blocks freed, TTFT and TPOT",
    "step": "where the time of one serving step goes, and the most batching can gain over sequential generation",
    "moe": "a Mixture-of-Experts model against a dense one with equal active parameters, timed in alternation",
    "speculative": "generation with a draft model (speculative decoding) against generation without, timed in turns",
}


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, help_text in BENCHMARKS.items():
        try:
            module = importlib.import_module(f"tinyinfer.bench.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"tinyinfer.bench.{name}":
                raise
            continue
        bench_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(bench_parser)
        bench_parser.set_defaults(run=module.run)


def run(args) -> int:  # replaced by the chosen benchmark's run through set_defaults
    raise AssertionError("unreachable: argparse sets the benchmark's own run")
