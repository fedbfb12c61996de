"""The scheduler: which sequences run in the next step, and how many of their tokens.

Continuous batching decides at every step, not once per batch. One step of `schedule()`:

1. Running sequences, oldest first, each get their next tokens: one for a decode, a chunk of the prompt
   for a prefill still in progress. All of them share a per-step *token budget*
   (`max_num_batched_tokens`), so a long prompt is cut into chunks across steps (chunked prefill) instead of
   stalling every decode behind it for one huge step.
2. If a running sequence needs a new block and none is free, the most recently admitted sequence is
   *preempted*: its blocks are freed and it goes back to the front of the queue, to be recomputed later
   (its tokens and its sampler are kept, so it continues exactly where it was). Never dropped.
3. Waiting sequences are admitted, first come first served, while there is budget, a batch slot, and
   blocks. A new sequence first looks its prompt up in the prefix cache: the blocks found are reused as is
   and their tokens are not computed again.

Finished sequences leave as soon as their last token is sampled (`finish`), so their slot and blocks go to
a waiting request at the very next step.

The static-batching baseline (`static=True`) admits a whole batch only when the previous one has
completely finished, and runs each prompt in one piece. Like any fixed-shape batch, it keeps computing a
row for every member until the longest is done: an early finisher's result is out, but its slot runs on as
padding (its last token recomputed, the output ignored). The chapter measures the difference.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from tinyinfer.engine.block_manager import BlockAllocator, block_hash, prefix_hashes
from tinyinfer.engine.paged_cache import PagedKVCache
from tinyinfer.engine.sequence import Sequence, Status
from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.model import SeqChunk


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 32  # sequences running at once (the batch size of a decode step)
    max_num_batched_tokens: int = 512  # tokens per step, decodes and prefill chunks together
    chunked_prefill: bool = True  # cut prompts into chunks to fit the token budget
    prefix_caching: bool = True  # reuse cached blocks of earlier prompts with the same prefix
    static: bool = False  # static batching: admit a new batch only when the whole previous one has finished

    def __post_init__(self):
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            if not is_integer_at_least(getattr(self, name)):
                raise TinyInferError(f"{name}={getattr(self, name)!r}: must be an integer >= 1")


@dataclass
class Batch:
    """One step's work: sequences with the number of new tokens each runs, in the order of `chunks`.
    0 new tokens marks a padding row of static batching: a finished sequence recomputing its last token."""

    sequences: list[Sequence] = field(default_factory=list)
    num_new: list[int] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    def add(self, seq: Sequence, n: int) -> None:
        self.sequences.append(seq)
        self.num_new.append(n)

    @property
    def chunks(self) -> list[SeqChunk]:
        return [SeqChunk(s.seq_id, s.num_computed, s.tokens[s.num_computed:s.num_computed + n], s.lora) if n else
                SeqChunk(s.seq_id, s.num_computed - 1, s.tokens[s.num_computed - 1:s.num_computed], s.lora)
                for s, n in zip(self.sequences, self.num_new)]

    @property
    def num_tokens(self) -> int:
        return sum(max(n, 1) for n in self.num_new)


class Scheduler:
    """Queues (waiting, running), the block allocator, and the cache's block tables, kept consistent."""

    def __init__(self, config: SchedulerConfig, cache: PagedKVCache):
        self.config = config
        self.cache = cache
        self.block_size = cache.block_size
        self.allocator = BlockAllocator(cache.n_blocks)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in order of admission: the last one is preempted first
        self.prompt_tokens_queried = 0  # prefix-cache statistics, in tokens
        self.prompt_tokens_hit = 0
        self.preemptions = 0

    def blocks_for(self, n_tokens: int) -> int:
        return -(-n_tokens // self.block_size)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- one step ------------------------------------------------------------------------------------------

    def schedule(self) -> Batch:
        """Choose this step's sequences and token counts, growing (and if need be preempting) block tables."""
        batch = Batch()
        budget = math.inf if self.config.static else self.config.max_num_batched_tokens  # static: one whole batch
        self._end_static_batch()
        for seq in list(self.running):  # a copy: preemption removes from the end of the list
            if seq not in self.running:
                continue  # preempted earlier in this loop
            if seq.status is Status.FINISHED:
                batch.add(seq, 0)  # static batching: a finished member's row runs on as padding
                continue
            n = self._chunk_size(seq, budget, first=not batch.sequences)
            if n == 0:
                break
            if not self._grow_or_preempt(seq, seq.num_computed + n, batch):
                break  # it preempted itself: it was the most recent, so nobody after it is left
            batch.add(seq, n)
            budget -= n
        if not batch.preempted and self._may_admit():
            self._admit(batch, budget)
        return batch

    def advance(self, batch: Batch) -> None:
        """After the model ran `batch`: count the computed tokens and name the blocks that became full."""
        for seq, n in zip(batch.sequences, batch.num_new):
            seq.num_computed += n
            if n and self.config.prefix_caching:
                self._register_full_blocks(seq, seq.num_computed - n)

    def finish(self, seq: Sequence) -> None:
        """Retire a finished (or aborted) sequence: its blocks go back at once. In static batching a member
        that finished keeps its slot and blocks until the whole batch is done (an aborted one does not)."""
        keeps_slot = self.config.static and seq.finish_reason != "abort" and seq in self.running
        if not keeps_slot:
            if seq in self.running:
                self.running.remove(seq)
            elif seq in self.waiting:
                self.waiting.remove(seq)
            self._release(seq)
        self._end_static_batch()

    # -- admission ------------------------------------------------------------------------------------------

    def _end_static_batch(self) -> None:
        """Static batching: once no member is left running (all finished, or the last one preempted), the
        batch is over and its padding rows let go of their blocks."""
        if self.config.static and all(seq.status is Status.FINISHED for seq in self.running):
            for member in self.running:
                self._release(member)
            self.running.clear()

    def _may_admit(self) -> bool:
        if self.config.static:
            return not self.running  # the previous batch must be completely done
        return True

    def _admit(self, batch: Batch, budget: int) -> None:
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            hits = self._cached_prefix(seq)
            computed = len(hits) * self.block_size
            n = self._chunk_size(seq, budget, first=not batch.sequences, computed=computed)
            if n == 0:
                return
            if self._new_blocks_needed(seq, hits, computed + n) > self.allocator.num_free:
                return  # wait for blocks: admission never preempts
            self.waiting.popleft()
            self._take(seq, hits)
            self._grow(seq, seq.num_computed + n)
            seq.status = Status.RUNNING
            seq.metrics.first_scheduled = seq.metrics.first_scheduled or time.perf_counter()
            self.running.append(seq)
            batch.add(seq, n)
            budget -= n

    def _chunk_size(self, seq: Sequence, budget: int, first: bool, computed: int | None = None) -> int:
        """How many of the sequence's missing tokens run this step: all, or what the budget allows."""
        # BEGIN EXERCISE 10.1: the token budget and chunked prefill
        missing = seq.num_tokens - (seq.num_computed if computed is None else computed)
        if self.config.chunked_prefill and not self.config.static:
            return min(missing, budget)
        # unchunked: the whole prompt in one step; it may exceed the budget only alone in the step
        return missing if missing <= budget or first else 0
        # END EXERCISE 10.1

    # -- prefix cache -----------------------------------------------------------------------------------------

    def _cached_prefix(self, seq: Sequence) -> list[tuple[bytes, list[int]]]:
        """(name, token ids) of the leading full blocks of the sequence found in the prefix cache (not yet
        taken): same name and same tokens.

        The block holding the last token is never taken from the cache: that token must run through the
        model, because its logits give the next token.
        """
        if not self.config.prefix_caching:
            return []
        tokens, bs = seq.tokens, self.block_size
        names = prefix_hashes(tokens[:seq.num_tokens - 1], bs, seq.cache_root)
        hits = []
        for i, name in enumerate(names):
            block_tokens = tokens[i * bs:(i + 1) * bs]
            if self.allocator.find(name, block_tokens) is None:
                break
            hits.append((name, block_tokens))
        return hits

    def _new_blocks_needed(self, seq: Sequence, hits: list[tuple[bytes, list[int]]], n_tokens: int) -> int:
        """Free blocks that admitting takes: fresh ones, plus cached hits nobody holds (they leave the free list)."""
        revived = sum(self.allocator.is_free_cached(name) for name, _ in hits)
        return self.blocks_for(n_tokens) - len(hits) + revived

    def _take(self, seq: Sequence, hits: list[tuple[bytes, list[int]]]) -> None:
        """Start the sequence's block table with the cached blocks (shared, refcount + 1)."""
        self.cache.tables[seq.seq_id] = [self.allocator.lookup(name, tokens) for name, tokens in hits]
        seq.num_computed = len(hits) * self.block_size
        seq.metrics.cached_prompt_tokens = seq.num_computed
        self.prompt_tokens_queried += seq.num_tokens
        self.prompt_tokens_hit += seq.num_computed

    def _register_full_blocks(self, seq: Sequence, computed_before: int) -> None:
        """Give each block that became full and computed in this step its name, so later requests find it."""
        table, bs = self.cache.tables[seq.seq_id], self.block_size
        full = seq.num_computed // bs
        for i in range(len(seq.block_names), full):  # names depend only on tokens (and root): computed once
            previous = seq.block_names[-1] if seq.block_names else seq.cache_root
            seq.block_names.append(block_hash(previous, seq.tokens[i * bs:(i + 1) * bs]))
        for i in range(computed_before // bs, full):
            self.allocator.register(table[i], seq.block_names[i], seq.tokens[i * bs:(i + 1) * bs])

    # -- blocks and preemption ------------------------------------------------------------------------------

    def _grow(self, seq: Sequence, n_tokens: int) -> bool:
        """Extend the block table to hold n_tokens positions; False (and no change) if blocks are short."""
        table = self.cache.tables.setdefault(seq.seq_id, [])
        missing = self.blocks_for(n_tokens) - len(table)
        if missing > self.allocator.num_free:
            return False
        table.extend(self.allocator.allocate() for _ in range(missing))
        return True

    def _grow_or_preempt(self, seq: Sequence, n_tokens: int, batch: Batch) -> bool:
        """Grow the table, preempting the most recently admitted sequences until it fits.
        False when `seq` itself had to go."""
        # BEGIN EXERCISE 10.2: preempt the most recently admitted sequence until the blocks fit
        while not self._grow(seq, n_tokens):
            victim = self.running[-1]
            self._preempt(victim)
            batch.preempted.append(victim)
            if victim is seq:
                return False
        return True
        # END EXERCISE 10.2

    def _preempt(self, seq: Sequence) -> None:
        """Free the sequence's blocks and requeue it first in line; it will be recomputed (never dropped).
        A finished member of a static batch (a padding row) is simply let go: it has nothing left to do."""
        self.running.remove(seq)
        self._release(seq)
        if seq.status is Status.FINISHED:
            return
        seq.status = Status.WAITING
        seq.metrics.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _release(self, seq: Sequence) -> None:
        self.allocator.free(self.cache.tables.pop(seq.seq_id, []))
        seq.num_computed = 0
