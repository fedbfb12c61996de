"""One request inside the engine: its tokens, how many of them the KV cache holds, and its clock.

A sequence moves through three states:

    WAITING --admit--> RUNNING --EOS / stop / max_tokens / abort--> FINISHED
       ^                  |
       +----preempt-------+      (its blocks freed; it keeps its tokens and its sampler, and is recomputed)

The sampler holds the sequence's constraint, if any (structured output): its grammar state has read exactly
the output tokens, so a recomputed sequence continues in the grammar where it stopped.

The one number the scheduler reasons with is `num_computed`: how many of `tokens` (prompt + output so far)
have their keys and values in the cache. The next chunk to run is tokens[num_computed:], all of it or a
slice (chunked prefill). A decode step is the case where exactly one token is left: the last one sampled.
Logits are only used when a chunk reaches the end of `tokens`: that is when the next token can be drawn.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from tinyinfer.engine.block_manager import prefix_root
from tinyinfer.output import OutputProcessor
from tinyinfer.sampling import Sampler, SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class RequestMetrics:
    """Times (time.perf_counter seconds) of one request's life, and the derived serving metrics."""

    arrival: float
    first_scheduled: float | None = None
    first_token: float | None = None
    finished: float | None = None
    output_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens served by the prefix cache at (last) admission
    preemptions: int = 0

    @property
    def queue_s(self) -> float:
        """Arrival to first scheduled: time spent waiting for a batch slot and KV blocks."""
        return (self.first_scheduled or self.arrival) - self.arrival

    @property
    def ttft_s(self) -> float:
        """Time to first token: arrival to first output token (queueing + prefill)."""
        return (self.first_token or self.arrival) - self.arrival

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first: the mean gap between tokens as the user sees them."""
        if self.output_tokens < 2 or self.finished is None or self.first_token is None:
            return 0.0
        return (self.finished - self.first_token) / (self.output_tokens - 1)

    @property
    def latency_s(self) -> float:
        return (self.finished or self.arrival) - self.arrival


@dataclass(eq=False)
class Sequence:
    """A request's state in the engine. `seq_id` names its block table in the paged cache.

    Compared by identity (eq=False): two sequences are two requests even when every field agrees, and the
    scheduler's `seq in running` stays a pointer comparison instead of a field-by-field one.
    """

    request_id: str
    seq_id: int
    prompt_ids: list[int]
    params: SamplingParams
    sampler: Sampler
    output: OutputProcessor  # its output as the user sees it: tokens, text, logprobs, when and why it ends
    metrics: RequestMetrics
    index: int = 0  # which of the request's n samples
    status: Status = Status.WAITING
    num_computed: int = 0  # leading tokens whose K and V are in the cache
    finish_reason: str | None = None  # "eos" | "stop" | "length" | "abort"
    block_names: list[bytes] = field(default_factory=list)  # prefix-cache names of its full, computed blocks
    lora: str | None = None  # the LoRA adapter it runs with (tinyinfer/lora.py): part of its blocks' names
    cache_salt: str | None = None  # shares cached blocks only with requests of the same salt (vLLM's name)

    @property
    def cache_root(self) -> bytes | None:
        """The prefix cache's "previous name" of its first block: its adapter and salt (block_manager.py)."""
        return prefix_root(self.lora, self.cache_salt)

    @property
    def output_ids(self) -> list[int]:
        return self.sampler.output_ids

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def finish(self, reason: str) -> None:
        self.status, self.finish_reason = Status.FINISHED, reason
        self.metrics.finished = time.perf_counter()
