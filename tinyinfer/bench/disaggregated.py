"""`mpirun -n 2 python -m tinyinfer bench serve --disaggregated`: a combined worker against a prefill rank and a
decode rank (tinyinfer/engine/disaggregated.py), on the same workload, side by side in one run.

1. combined: rank 0 alone serves the workload with the engine (chunked prefill mixes prompts into the decode
   steps of running sequences); rank 1 waits.
2. disaggregated: rank 0 prefills each prompt as it arrives and sends its KV blocks; rank 1 runs the engine,
   which takes them from its prefix cache and decodes.

Both use the same engine settings and seeded requests, so both must give the same tokens (checked); the table
compares TTFT (arrival to first token) and TPOT (time per output token after the first). Long prompts are what
disaggregation is for: give `--prompt-len` in the hundreds.
"""

from __future__ import annotations

import time

import numpy as np

import tinyinfer
from tinyinfer.bench.workload import Served, print_latency_table, serve_engine, workload_of
from tinyinfer.commands.parallel_flags import rank_zero_output
from tinyinfer.distributed import connect
from tinyinfer.engine import LLM
from tinyinfer.engine.disaggregated import DECODE_RANK, PREFILL_RANK, decode_worker, prefill_worker
from tinyinfer.errors import TinyInferError


def run_disaggregated(args) -> int:
    comm = connect(2, args.device)
    model = tinyinfer.load(args.model, device=args.device)
    workload = workload_of(args, model, np.random.default_rng(args.seed))  # the same on both ranks: same seed
    engine = dict(block_size=args.block_size, max_num_seqs=args.concurrency, max_num_batched_tokens=args.max_batched_tokens)
    with rank_zero_output(comm):
        print(f"workload: {len(workload)} requests, prompts {args.prompt_len} tokens, max_tokens {args.output_len}, "
              f"Poisson arrivals at {args.rate:g}/s; engine: {engine}")
        combined = serve_engine(LLM(model, **engine), workload, "combined worker") if comm.rank == 0 else None
        with comm.patience(float("inf")):
            start = comm.broadcast_object(time.perf_counter() + 0.1)  # the disaggregated run starts together
        requests = [(str(i), r.prompt_ids, r.params, r.arrival) for i, r in enumerate(workload)]
        if comm.rank == DECODE_RANK:
            cpu = time.process_time()
            llm = LLM(model, **engine)
            outputs = {int(out.request_id): out for out in decode_worker(comm, llm)}
            results = [outputs[i] for i in range(len(workload))]
            served = Served("prefill + decode ranks", [r.token_ids for r in results], [r.metrics.ttft_s for r in results],
                            [r.metrics.tpot_s for r in results], max(r.metrics.finished for r in results) - start,
                            time.process_time() - cpu)
            comm.send_object((served, llm.stats().prefix_cache_hit_rate), PREFILL_RANK)
            return 0
        prefill_worker(comm, model, requests, engine["block_size"], start)
        with comm.patience(float("inf")):
            disaggregated, hit_rate = comm.recv_object(DECODE_RANK)
        print_latency_table([combined, disaggregated])
        print(f"decode rank: {hit_rate:.0%} of the prompt tokens came as KV blocks from the prefill rank")
        same = combined.token_ids == disaggregated.token_ids
        print(f"same tokens in both: {'yes' if same else 'NO'}; disaggregated / combined: "
              f"TTFT p50 {_ratio(disaggregated.ttft_s, combined.ttft_s)}, "
              f"TPOT p50 {_ratio(_tpot(disaggregated), _tpot(combined))}")
        if not same:
            raise TinyInferError("the disaggregated run gave other tokens than the combined worker: a bug")
        return 0


def _tpot(run) -> list[float]:
    return [t for t, ids in zip(run.tpot_s, run.token_ids) if len(ids) >= 2]


def _ratio(a: list[float], b: list[float]) -> str:
    return f"{np.median(a) / np.median(b):.2f}x"
