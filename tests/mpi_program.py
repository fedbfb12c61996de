"""What the MPI tests (tests/test_distributed.py) run under `mpirun -n 2`: one rank's part of a parallel run.

    mpirun -n 2 python tests/mpi_program.py collectives OUT_DIR
    mpirun -n 2 python tests/mpi_program.py splits CHECKPOINT OUT_DIR MODE...   (MODE: tp, pp, ep)
    mpirun -n 2 python tests/mpi_program.py dead-rank OUT_DIR

Each rank writes what it computed to OUT_DIR/rank{r}.npz (or .json); the test compares every rank's with the
single-process run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import tinyinfer
from tinyinfer.distribute import distribute
from tinyinfer.distributed import CommunicationError, connect
from tinyinfer.engine import LLM
from tinyinfer.engine.ranks import engine_on_ranks
from tinyinfer.model import Model
from tinyinfer.param_tree import map_arrays
from tinyinfer.sampling import SamplingParams

SPLITS = {"tp": dict(tensor_parallel_size=2), "pp": dict(pipeline_parallel_size=2),
          "ep": dict(tensor_parallel_size=2, enable_expert_parallel=True)}
PROMPT = [5, 17, 42, 99, 3, 64, 120, 7, 33, 250, 18, 77]  # ids below every tiny checkpoint's vocabulary
MAX_TOKENS = 12
# a mixed batch for the engine: prompts of several lengths, greedy and seeded sampling, n = 2; with 16 tokens per
# step, long prompts are prefilled in chunks alongside other sequences' decodes
ENGINE_PROMPTS = [PROMPT, PROMPT[:3], PROMPT * 3, PROMPT[5:]]
ENGINE_PARAMS = [SamplingParams(max_tokens=10, temperature=0, ignore_eos=True),
                 SamplingParams(max_tokens=8, temperature=0.9, seed=3, n=2, ignore_eos=True),
                 SamplingParams(max_tokens=6, temperature=0.7, top_p=0.9, seed=4, ignore_eos=True),
                 SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)]
ENGINE_OPTIONS = dict(max_num_batched_tokens=16, max_num_seqs=4, block_size=4)


def engine_tokens(llm) -> list:
    """The token ids of every sample of ENGINE_PROMPTS run through `llm`, in order."""
    results = llm.generate(ENGINE_PROMPTS, ENGINE_PARAMS)
    return [[o.token_ids for o in r] if isinstance(r, list) else [r.token_ids] for r in results]


def single_process_engine_tokens(model) -> list:
    return engine_tokens(LLM(model, **ENGINE_OPTIONS))


def collectives(out: Path) -> None:
    comm = connect(2, timeout_s=20)
    r = comm.rank
    result = {
        "all_reduce": comm.all_reduce(np.array([r + 1.0, 10.0 * r], dtype=np.float32)).tolist(),
        "all_gather": comm.all_gather(np.full((1, 2), r, dtype=np.int64), axis=1).tolist(),
        "broadcast": comm.broadcast(np.array([7.0 if r == 1 else 0.0]), root=1).tolist(),
        "broadcast_object": comm.broadcast_object({"from": r, "tokens": [1, 2]} if r == 0 else None),
        "all_to_all": [p.tolist() for p in comm.all_to_all([np.full((j + r, 2), 10 * r + j, dtype=np.float32)
                                                            for j in range(2)])],
    }
    if r == 0:
        comm.send(np.arange(3, dtype=np.float64), dest=1)
    else:
        result["recv"] = comm.recv((3,), np.float64, source=0).tolist()
    result["calls"], result["bytes"] = dict(comm.stats.calls), dict(comm.stats.bytes)
    (out / f"rank{r}.json").write_text(json.dumps(result))


def splits(folder: str, out: Path, modes: list[str]) -> None:
    """For each mode: float32 logits of PROMPT (and the communicator's counts for that pass), float64 logits,
    greedy tokens."""
    whole = tinyinfer.load(folder)
    comm = connect(2, timeout_s=60)
    arrays = {}
    for mode in modes:
        model = distribute(whole, comm, **SPLITS[mode])
        comm.stats.reset()
        arrays[f"{mode}_logits"] = model.logits(PROMPT)
        arrays[f"{mode}_bytes"] = np.array([comm.stats.bytes[op] for op in OPS])
        arrays[f"{mode}_calls"] = np.array([comm.stats.calls[op] for op in OPS])
        arrays[f"{mode}_tokens"] = np.array(model.generate(PROMPT, max_tokens=MAX_TOKENS, temperature=0,
                                                           ignore_eos=True).token_ids)
        arrays[f"{mode}_logits64"] = distribute(float64(whole), comm, **SPLITS[mode]).logits(PROMPT)
        with engine_on_ranks(model, comm, **ENGINE_OPTIONS) as llm:
            if llm is not None:  # rank 0
                (out / f"{mode}_engine.json").write_text(json.dumps(engine_tokens(llm)))
    np.savez(out / f"rank{comm.rank}.npz", **arrays)


def float64(model: Model) -> Model:
    """The model widened to float64: what is left of a difference is the split's, not float32's rounding."""
    return Model(model.config, map_arrays(model.params, lambda a: a.astype(np.float64)), dtype=np.float64)


OPS = ("all_reduce", "all_gather", "broadcast", "send", "all_to_all")


def dead_rank(out: Path) -> None:
    """Rank 1 leaves before the second all-reduce; rank 0 must report it, not wait for ever."""
    comm = connect(2, timeout_s=2)
    comm.all_reduce(np.ones(4))
    if comm.rank == 1:
        sys.exit(0)
    try:
        comm.all_reduce(np.ones(4))
    except CommunicationError as e:
        (out / "rank0.txt").write_text(str(e))
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "collectives":
        collectives(Path(rest[0]))
    elif command == "splits":
        splits(rest[0], Path(rest[1]), rest[2:])
    elif command == "dead-rank":
        dead_rank(Path(rest[0]))
