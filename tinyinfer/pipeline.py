"""Pipeline parallelism: the layers split over n ranks (stages), the activations sent from stage to stage.

    stage 0: embed, layers 0 .. L/n - 1         --send x [T, d]-->
    stage 1: layers L/n .. 2L/n - 1             --send x [T, d]-->   ...
    last:    its layers, final norm, LM head    --broadcast logits [n_chunks, V] to every stage

A stage holds only its layers' weights: n stages hold a model n times larger than one could. Only one [T, d]
activation crosses each cut per forward pass (tensor parallelism all-reduces two per layer), so stages can sit
in different machines. But a token crosses the stages one after another: one request is no faster, and while
stage 1 works, stage 0 waits (the "bubble"; an engine fills it with micro-batches of other requests, chapter 14).

Every rank runs the same program; the last stage broadcasts the logits so that every rank samples the same
token (the same seed on every rank) and runs the same next step.

A step of many sequences goes through in micro-batches (`micro_batches`: as many as there are stages): stage
0 hands the first on and starts the second while stage 1 works on the first, so the stages overlap instead of
taking turns; the logits of every micro-batch are broadcast once, at the end of the step.

    comm = tinyinfer.distributed.connect(2)                 # under mpirun -n 2
    stage = PipelineStageModel(tinyinfer.load("shakespeare"), comm)
    stage.generate("ROMEO:", max_tokens=20)                  # the unsplit model's tokens, on every rank

Each stage still computes the (cheap) embedding to learn the activation's shape and dtype before it receives
the real one, and its KV cache has room for every layer (only its own are written): simple, not frugal.
"""

from __future__ import annotations

import numpy as np

from tinyinfer.distributed import Communicator
from tinyinfer.errors import TinyInferError
from tinyinfer.model import Model
from tinyinfer.parallel import CountsTokens


def stage_layers(n_layers: int, n: int, s: int) -> range:
    """The layers of stage s of n: a contiguous block, as even as possible.

    >>> [list(stage_layers(5, 2, s)) for s in range(2)]
    [[0, 1], [2, 3, 4]]
    """
    return range(s * n_layers // n, (s + 1) * n_layers // n)


def micro_batches(chunks: list, n: int) -> list[list]:
    """The chunks of a step cut into at most n contiguous groups of about as many tokens each (none empty).
    Stage 0 sends the first group on and starts the second while stage 1 works on the first: with m groups over
    p stages, each stage idles (p - 1) / (m + p - 1) of the step instead of (p - 1) / p.

    >>> from tinyinfer.model import SeqChunk
    >>> [[len(c.tokens) for c in group] for group in micro_batches([SeqChunk(i, 0, [1] * n) for i, n in enumerate([1, 1, 1, 5])], 2)]
    [[1, 1, 1], [5]]
    >>> len(micro_batches([SeqChunk(0, 0, [1, 2, 3])], 2))  # one sequence: nothing to overlap
    1
    """
    ends = np.cumsum([len(c.tokens) for c in chunks])  # [n_chunks]: tokens up to each chunk's end
    cuts = {max(1, int(np.searchsorted(ends, ends[-1] * k / n, side="right"))) for k in range(1, n)}  # k/n of them
    bounds = sorted({0, len(chunks)} | {cut for cut in cuts if cut < len(chunks)})
    return [chunks[a:b] for a, b in zip(bounds, bounds[1:])]


class PipelineStageModel(CountsTokens, Model):
    """Stage comm.rank of `model` split by layers over comm.size stages (see the module docstring)."""

    def __init__(self, model: Model, comm: Communicator):
        n, s, cfg = comm.size, comm.rank, model.config
        if cfg.n_layers < n:
            raise TinyInferError(f"{cfg.n_layers} layers do not split over {n} pipeline stages: choose "
                                 f"--pipeline-parallel-size <= {cfg.n_layers}")
        self.__dict__.update(model.__dict__)  # a tensor-parallel model's shard too, with its communicator
        self.pipe, self.stage, self.layers = comm, s, stage_layers(cfg.n_layers, n, s)
        self.__dict__.setdefault("comm", comm)
        kept = [layer if i in self.layers else {} for i, layer in enumerate(model.params["layers"])]  # only its own
        self.params = dict(model.params, layers=kept)

    @property
    def computes_logits(self) -> bool:
        return self.is_last

    @property
    def is_last(self) -> bool:
        return self.stage == self.pipe.size - 1

    def run_layers(self, x, layers, chunks, plan, ropes, cache):
        """The previous stage's output through this stage's layers, on to the next.  [T, d] -> [T, d]"""
        if self.stage > 0:
            x = self.pipe.recv(x.shape, x.dtype, source=self.stage - 1)  # [T, d]: replaces this stage's embedding
        x = super().run_layers(x, self.layers, chunks, plan, ropes, cache)
        if not self.is_last:
            self.pipe.send(x, dest=self.stage + 1)
        return x

    def forward(self, chunks, cache, all_logits: bool = False):
        """The batch through the stages in micro-batches (`micro_batches`), then the last stage's logits of all
        of them broadcast to every stage.  -> [rows, V]"""
        parts = []
        for group in micro_batches(chunks, self.pipe.size):  # a loop: super() does not work in a comprehension
            parts.append(super().forward(group, cache, all_logits))
        logits = parts[0] if len(parts) == 1 else self.xp.concatenate(parts)  # [rows, V]
        return self.pipe.broadcast(logits, root=self.pipe.size - 1)

    def output_logits(self, x):
        """The last stage's logits; elsewhere a buffer of their shape, which the broadcast fills.  [*, d] -> [*, V]"""
        if self.is_last:
            return super().output_logits(x)
        return self.xp.empty((*x.shape[:-1], self.config.vocab_size), dtype=x.dtype)  # [*, V]

    def traffic_formula(self) -> dict[str, tuple[float, str]]:
        """What this stage hands each operation for the tokens and rows so far: op -> (bytes, the formula); with
        tensor parallelism inside the stage, its operations too."""
        cfg, T, b = self.config, self.tokens, self.dtype.itemsize
        formula = super().traffic_formula() if hasattr(super(), "traffic_formula") else {}
        formula["broadcast"] = (self.rows * cfg.vocab_size * b, f"{self.rows} rows x V {cfg.vocab_size} x {b} B")
        if not self.is_last:
            formula["send"] = (T * cfg.d_model * b, f"{T} tokens x d {cfg.d_model} x {b} B (one cut)")
        return formula


def pipeline_stage(model: Model, pipe: Communicator) -> PipelineStageModel:
    """Stage pipe.rank of `model`, which may itself be a tensor-parallel shard (then each stage is a group of
    tensor-parallel ranks, and each of them talks to the same-numbered rank of the next stage)."""
    if type(model) is Model:
        return PipelineStageModel(model, pipe)
    both = type(f"PipelineStage{type(model).__name__}", (PipelineStageModel, type(model)), {})
    stage = both.__new__(both)
    PipelineStageModel.__init__(stage, model, pipe)
    return stage
