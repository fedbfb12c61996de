"""The serving engine over many ranks: rank 0 schedules, every rank runs each step's forward pass.

Under tensor or pipeline parallelism every rank holds part of the model and part of every KV block (its own KV
heads, or its own layers), so every forward pass needs all of them. Rank 0 owns the engine (requests, the
scheduler, block tables, sampling); before each forward pass it broadcasts the step: the chunks (sequence,
start, tokens) and the block table of each sequence in them. The other ranks keep a pool of the same geometry
and run the same forward pass on it, writing their share of each block where rank 0's table says; what their
forward pass returns (the same logits, gathered) they drop. Rank 0 then samples, alone.

    with engine_on_ranks(model, comm, max_num_seqs=8) as llm:   # model: this rank's part (tinyinfer/distribute.py)
        if llm is not None:                                       # rank 0
            results = llm.generate(prompts, params)
    # leaving the block on rank 0 tells the others to stop; their `with` ends then, with llm None

A worker waits for the next step for as long as it takes (a server may idle for hours); once a step has begun,
the step's collectives wait only the communicator's timeout.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from tinyinfer.distributed import CommunicationError
from tinyinfer.engine.llm import LLM
from tinyinfer.model import SeqChunk


STOP_WAIT_S = 5.0  # how long rank 0 waits for the others to hear that it stops


@dataclass
class Step:
    """What the other ranks need to run one forward pass as rank 0 does."""

    chunks: list[SeqChunk]
    tables: dict[int, list[int]]  # seq_id -> its block ids, for the sequences of the chunks
    all_logits: bool


class StepBroadcaster:
    """Rank 0's model as its engine sees it: each forward pass is first broadcast to the other ranks."""

    def __init__(self, model, comm):
        self.model, self.comm = model, comm

    def __getattr__(self, name):  # config, tokenizer, dtype, ...: the model's own
        return getattr(self.model, name)

    def forward(self, chunks: list[SeqChunk], cache, all_logits: bool = False):
        tables = {c.seq_id: list(cache.tables[c.seq_id]) for c in chunks}
        self.comm.broadcast_object(Step(chunks, tables, all_logits))
        return self.model.forward(chunks, cache, all_logits)

    def stop(self) -> None:
        self.comm.broadcast_object(None)


def run_steps(model, comm, cache) -> None:
    """A worker rank: run the forward pass of every step rank 0 broadcasts, until it broadcasts None (or Ctrl-C,
    which mpirun hands every rank: a server is stopped that way)."""
    try:
        while True:
            with comm.patience(float("inf")):  # idle until there is work
                step = comm.broadcast_object(None)
            if step is None:
                return
            cache.tables = step.tables  # only the sequences of this step are read or written
            model.forward(step.chunks, cache, step.all_logits)
    except KeyboardInterrupt:
        return


@contextlib.contextmanager
def engine_on_ranks(model, comm, **options):
    """Rank 0: an LLM(model, **options) whose steps every rank runs (None on the other ranks, once rank 0 has
    left the block). One rank: the plain LLM."""
    if comm.size == 1:
        yield LLM(model, **options)
        return
    if comm.rank != 0:
        run_steps(model, comm, LLM(model, **options).cache)  # the same pool geometry as rank 0's
        yield None
        return
    broadcaster = StepBroadcaster(model, comm)
    try:
        yield LLM(broadcaster, **options)
    finally:
        try:
            with comm.patience(STOP_WAIT_S):  # after a Ctrl-C the other ranks may have stopped already
                broadcaster.stop()
        except CommunicationError:
            pass
