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

    comm = tinyinfer.distributed.connect(2)                 # under mpirun -n 2
    stage = PipelineStageModel(tinyinfer.load("shakespeare"), comm)
    stage.generate("ROMEO:", max_tokens=20)                  # the unsplit model's tokens, on every rank

Each stage still computes the (cheap) embedding to learn the activation's shape and dtype before it receives
the real one, and its KV cache has room for every layer (only its own are written): simple, not frugal.
"""

from __future__ import annotations

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


class PipelineStageModel(CountsTokens, Model):
    """Stage comm.rank of `model` split by layers over comm.size stages (see the module docstring)."""

    def __init__(self, model: Model, comm: Communicator):
        n, s, cfg = comm.size, comm.rank, model.config
        if cfg.n_layers < n:
            raise TinyInferError(f"{cfg.n_layers} layers do not split over {n} pipeline stages: choose "
                                 f"--pipeline-parallel-size <= {cfg.n_layers}")
        self.__dict__.update(model.__dict__)
        self.comm, self.stage, self.layers = comm, s, stage_layers(cfg.n_layers, n, s)
        kept = [layer if i in self.layers else {} for i, layer in enumerate(model.params["layers"])]  # only its own
        self.params = dict(model.params, layers=kept)

    @property
    def is_last(self) -> bool:
        return self.stage == self.comm.size - 1

    def run_layers(self, x, layers, chunks, plan, ropes, cache):
        """The previous stage's output through this stage's layers, on to the next.  [T, d] -> [T, d]"""
        if self.stage > 0:
            x = self.comm.recv(x.shape, x.dtype, source=self.stage - 1)  # [T, d]: replaces this stage's embedding
        x = super().run_layers(x, self.layers, chunks, plan, ropes, cache)
        if not self.is_last:
            self.comm.send(x, dest=self.stage + 1)
        return x

    def output_logits(self, x):
        """The last stage's logits, on every stage.  [*, d] -> [*, V]"""
        if self.is_last:
            logits = super().output_logits(x)
        else:
            logits = self.xp.empty((*x.shape[:-1], self.config.vocab_size), dtype=x.dtype)  # [*, V], overwritten
        return self.comm.broadcast(logits, root=self.comm.size - 1)

    def traffic_formula(self) -> dict[str, tuple[float, str]]:
        """What this stage hands each operation for the tokens and rows so far: op -> (bytes, the formula)."""
        cfg, T, b = self.config, self.tokens, self.dtype.itemsize
        formula = {"broadcast": (self.rows * cfg.vocab_size * b, f"{self.rows} rows x V {cfg.vocab_size} x {b} B")}
        if not self.is_last:
            formula["send"] = (T * cfg.d_model * b, f"{T} tokens x d {cfg.d_model} x {b} B (one cut)")
        return formula
