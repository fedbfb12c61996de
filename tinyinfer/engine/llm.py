"""The engine's front door, in the shape vLLM made familiar.

Offline, a batch of prompts in, results out in the same order:

    llm = LLM("shakespeare")                                      # a name, folder, file or repo id, as vLLM's
    llm = LLM(model)                                              # or a tinyinfer Model (tinyinfer.load)
    results = llm.generate(["ROMEO:", "JULIET:"], SamplingParams(max_tokens=50, temperature=0))

Online (streaming), the caller owns the loop:

    rid = llm.add_request("ROMEO:", SamplingParams(max_tokens=50))
    while llm.has_unfinished():
        for out in llm.step():       # one model step for every running request; what each gained
            print(out.request_id, out.new_token_ids)
    llm.abort(rid)                   # frees the request's blocks at once

Structured output: `constraint=` (tinyinfer/constrain/) as in `model.generate`, an object or a function making a
fresh one per sample; `generate` takes one for all prompts or a list, one each. Each sequence's Sampler holds
its own grammar state and masks its own row of logits. A preempted sequence keeps its sampler, so its grammar
state has already read exactly the tokens it is recomputed from: it is neither reset nor advanced again.

Each step: the scheduler picks the sequences and their chunks; `Model.forward` runs them all at once on
the paged cache (the same function that generates for one prompt); each sequence whose chunk reached its
last token samples its next token with its own Sampler (own seeded generator), so its output does not
depend on what else was in the batch: it equals `model.generate` run alone.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from dataclasses import dataclass

from tinyinfer.engine.cuda_graphs import DecodeGraphs
from tinyinfer.engine.paged_cache import PagedKVCache
from tinyinfer.engine.scheduler import Scheduler, SchedulerConfig
from tinyinfer.engine.sequence import RequestMetrics, Sequence, Status
from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.generation import check_request, stop_ids
from tinyinfer.loading import load
from tinyinfer.output import OutputProcessor
from tinyinfer.sampling import Sampler, SamplingParams, TokenChoice, sample_batch, sequence_rngs


DEFAULT_TOKENS_PER_SEQ = 2048  # sizes the default pool: long-context models would otherwise ask for GBs


@dataclass
class RequestOutput:
    """One sample of a request after a step: the tokens it gained (`new_token_ids`) and everything so far."""

    request_id: str
    index: int  # which of the request's n samples
    prompt_ids: list[int]
    token_ids: list[int]  # output tokens (an EOS or stop token that ended it is not included)
    text: str  # the text shown so far (with a tokenizer): whole characters, cut before a stop string
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "eos" | "stop" | "length" | "abort"
    metrics: RequestMetrics
    logprobs: list[TokenChoice] | None = None  # one per token id, when SamplingParams.logprobs is set


@dataclass
class StepRecord:
    """What one engine step did, for stats, timelines and memory plots."""

    time: float  # perf_counter at the end of the step
    num_seqs: int  # sequences in the batch
    num_tokens: int  # tokens through the model
    blocks_held: int  # blocks held by running sequences (a shared block counted once)
    live_tokens: int  # tokens whose K/V the running sequences hold (a shared prefix counted once per sequence)
    blocks_needed: int  # the least blocks those tokens fit in, each sequence's last block part-filled (no sharing)


@dataclass
class EngineStats:
    generated_tokens: int
    elapsed_s: float
    kv_utilisation: float  # fraction of the pool held right now
    prefix_cache_hit_rate: float  # prompt tokens served from the cache / prompt tokens admitted
    preemptions: int
    steps: int

    @property
    def throughput(self) -> float:
        """Generated tokens per second of engine time."""
        return self.generated_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _count(name: str, value, hint: str = "") -> None:
    """Refuse an engine size that is not a positive integer (True is not a count either)."""
    if not is_integer_at_least(value):
        raise TinyInferError(f"{name}={value!r}: must be an integer >= 1{hint}")


class LLM:
    """A serving engine around one Model: paged KV cache, prefix caching, continuous batching.

    model: a loaded Model, or what `tinyinfer.load` takes (a built-in name, a folder, a file, a repo id),
    loaded here as vLLM's `LLM("name")` and `LLM(model="path")` do.
    block_size: tokens per KV block. n_blocks: blocks in the pool (default: every slot can hold a full
    context). max_num_seqs: sequences running at once. max_num_batched_tokens: tokens per step (decodes and
    prefill chunks together). chunked_prefill, prefix_caching: the two optimisations, on by default.
    static: the static-batching baseline instead of continuous batching. enforce_eager: never capture the decode
    step as a CUDA graph (vLLM's flag; graphs serve decode steps on device "cuda" otherwise, where the model's step
    is capturable: tinyinfer/engine/cuda_graphs.py; the CPU never uses them). kv_cache_dtype: how the pool stores
    keys and values, "auto" (the compute dtype), "float16" or "int8" (tinyinfer/kv_quant.py); None: as the
    model's own caches do (`model.kv_cache_dtype`, set by `tinyinfer.load`).
    """

    def __init__(self, model, *, block_size: int = 16, n_blocks: int | None = None, max_num_seqs: int = 32,
                 max_num_batched_tokens: int = 512, chunked_prefill: bool = True, prefix_caching: bool = True,
                 static: bool = False, kv_cache_dtype: str | None = None, enforce_eager: bool = False):
        if isinstance(model, (str, os.PathLike)):
            model = load(model, kv_cache_dtype=kv_cache_dtype or "auto")
        if not (hasattr(model, "forward") and hasattr(model, "config")):
            raise TinyInferError(f"LLM needs a model, not {type(model).__name__}: give its name or path "
                                 "(LLM('shakespeare'), LLM(model='path/to/folder')) or a loaded Model")
        _count("block_size", block_size, " (16 is usual)")
        self.model = model
        config = SchedulerConfig(max_num_seqs, max_num_batched_tokens, chunked_prefill, prefix_caching, static)
        if n_blocks is None:  # room for every slot to hold a full context (up to DEFAULT_TOKENS_PER_SEQ)
            n_blocks = max_num_seqs * -(-min(model.config.max_seq_len, DEFAULT_TOKENS_PER_SEQ) // block_size)
        _count("n_blocks", n_blocks, ", or None to size the pool for max_num_seqs full contexts")
        self.cache = PagedKVCache(model.config, n_blocks, block_size, model.dtype, model.xp,
                                  kv_cache_dtype or model.kv_cache_dtype)
        self.scheduler = Scheduler(config, self.cache)
        self.graphs = None if enforce_eager or model.device != "cuda" else DecodeGraphs(model, self.cache, max_num_seqs)
        self.requests: dict[str, list[Sequence]] = {}  # unfinished requests by id: their samples
        self.step_log: list[StepRecord] = []
        self.generated_tokens = 0
        self.started: float | None = None
        self._ids = itertools.count()  # automatic request ids
        self._seq_ids = itertools.count()  # block-table keys, one per sample

    # -- streaming API --------------------------------------------------------------------------------------

    def add_request(self, prompt, params: SamplingParams | None = None, request_id: str | None = None,
                    arrival: float | None = None, lora: str | None = None, constraint=None,
                    cache_salt: str | None = None, **overrides) -> str:
        """Queue a request (text or token ids); returns its id. Bad input raises here and queues nothing.
        `lora`: the name of a LoRA adapter loaded on the model (tinyinfer/lora.py) for this request.
        `cache_salt`: its prefix-cache blocks are shared only with requests of the same salt (vLLM's field).
        `constraint`: structured output, as in `model.generate` (with n > 1, a function making a fresh one).

        With n > 1 the request runs as n sequences; sample i draws from generator i of the request's seed,
        exactly as `model.generate` does, so each equals its solo run. `arrival` (a time.perf_counter value)
        backdates the request for TTFT, when the caller simulates arrivals.
        """
        request = check_request(self.model, prompt, params, overrides, lora, constraint)  # as model.generate
        params, prompt_ids = request.params, request.prompt_ids
        self._check_fits_pool(len(prompt_ids), params.max_tokens)
        if cache_salt is not None and not (isinstance(cache_salt, str) and cache_salt):
            raise TinyInferError(f"cache_salt={cache_salt!r:.40}: give a non-empty string, or None to share the cache")
        request_id = self._free_request_id() if request_id is None else str(request_id)
        if request_id in self.requests:
            raise TinyInferError(f"request id {request_id!r} is already in use: give each request its own id")
        if arrival is not None and (isinstance(arrival, bool) or not isinstance(arrival, (int, float))
                                    or not math.isfinite(arrival)):
            raise TinyInferError(f"arrival={arrival!r}: give a time.perf_counter() value, or None for now")
        arrival = time.perf_counter() if arrival is None else arrival
        samples = [self._new_sequence(request_id, i, prompt_ids, params, rng, arrival, lora, request.make_constraint())
                   for i, rng in enumerate(sequence_rngs(params.seed, params.n))]
        for seq in samples:
            seq.cache_salt = cache_salt
        self.requests[request_id] = samples
        for seq in samples:
            self.scheduler.add(seq)
        return request_id

    def step(self) -> list[RequestOutput]:
        """Run one model step for the scheduled sequences; return the outputs of those that gained a token."""
        self.started = self.started or time.perf_counter()
        # BEGIN EXERCISE 10.3: one engine step: schedule, one forward pass for all, sample where a chunk ended
        batch = self.scheduler.schedule()
        if not batch.sequences:
            return []
        logits = self.execute_model(batch.chunks)  # [n_seqs, V]: the last token of each chunk
        self.scheduler.advance(batch)
        ready = [(row, seq) for row, seq in enumerate(batch.sequences)  # not a prefill chunk short of the end
                 if seq.num_computed == seq.num_tokens and seq.status is not Status.FINISHED]  # nor a padding row
        rows = [row for row, _ in ready]
        ready_logits = logits if len(rows) == len(logits) else logits[rows]  # [R, V]
        choices = sample_batch([seq.sampler for _, seq in ready], ready_logits)  # each row its own controls and draw
        outputs = [self._output(seq, self._take(seq, choice)) for (_, seq), choice in zip(ready, choices)]
        self._log(batch)
        return outputs
        # END EXERCISE 10.3

    def execute_model(self, chunks):
        """One forward pass over the scheduled chunks: a CUDA graph's replay where one serves the step (a decode
        step on the GPU, tinyinfer/engine/cuda_graphs.py), `Model.forward` otherwise.  -> [len(chunks), V]"""
        if self.graphs is not None and self.graphs.serves(chunks):
            return self.graphs.execute(chunks)
        return self.model.forward(chunks, self.cache)

    def abort(self, request_id: str) -> None:
        """Stop a request now (all its samples): their blocks are freed at once. Unknown ids are ignored."""
        for seq in self.requests.pop(str(request_id), []):
            if seq.status is not Status.FINISHED:
                seq.finish("abort")
                self.scheduler.finish(seq)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    # -- offline API ------------------------------------------------------------------------------------------

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 lora: str | list[str | None] | None = None, constraint=None, **overrides) -> list:
        """Run a batch of prompts to completion. One result per prompt, in order: a RequestOutput, or with
        n > 1 a list of n (as `model.generate` returns them). `lora`: one adapter name for all, or one each.
        `constraint`: one for all (None, or a function making a fresh one), or a list, one each."""
        if isinstance(prompts, (bytes, bytearray)) or not hasattr(prompts, "__iter__"):
            raise TinyInferError(f"prompts must be a text, a list of texts or a list of token-id lists, "
                                 f"not {type(prompts).__name__}")
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        adapters = lora if isinstance(lora, list) else [lora] * len(prompts)
        constraints = _constraints_per_prompt(constraint, len(prompts))
        if len(params) != len(prompts) or len(adapters) != len(prompts) or len(constraints) != len(prompts):
            raise TinyInferError(f"{len(params)} SamplingParams, {len(adapters)} adapters and {len(constraints)} "
                                 f"constraints for {len(prompts)} prompts: give one, or one each")
        ids = []
        try:
            for prompt, p, a, c in zip(prompts, params, adapters, constraints):
                ids.append(self.add_request(prompt, p, lora=a, constraint=c, **overrides))
        except TinyInferError:  # one bad request fails the whole batch: none of it stays queued
            for request_id in ids:
                self.abort(request_id)
            raise
        finished: dict[str, dict[int, RequestOutput]] = {rid: {} for rid in ids}
        while self.has_unfinished():
            for out in self.step():
                if out.finished:
                    finished[out.request_id][out.index] = out
        results = [[samples[i] for i in sorted(samples)] for samples in (finished[rid] for rid in ids)]
        return [r[0] if len(r) == 1 else r for r in results]

    # -- statistics -------------------------------------------------------------------------------------------

    def stats(self) -> EngineStats:
        s = self.scheduler
        elapsed = (self.step_log[-1].time - self.started) if self.step_log else 0.0
        hit_rate = s.prompt_tokens_hit / s.prompt_tokens_queried if s.prompt_tokens_queried else 0.0
        return EngineStats(self.generated_tokens, elapsed, s.allocator.num_used / s.allocator.n_blocks, hit_rate,
                           s.preemptions, len(self.step_log))

    # -- requests in, outputs out --------------------------------------------------------------------------------

    def _check_fits_pool(self, n_prompt: int, max_tokens: int) -> None:
        needed = self.scheduler.blocks_for(n_prompt + max_tokens)
        if needed > self.cache.n_blocks:
            raise TinyInferError(
                f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) needs {needed} KV blocks of "
                f"{self.cache.block_size} tokens but the pool has only {self.cache.n_blocks}: lower max_tokens, "
                "shorten the prompt, or give the engine more blocks (n_blocks)"
            )

    def _free_request_id(self) -> str:
        while (request_id := str(next(self._ids))) in self.requests:
            pass
        return request_id

    def _new_sequence(self, request_id: str, index: int, prompt_ids: list[int], params: SamplingParams, rng,
                      arrival: float, lora: str | None, constraint=None) -> Sequence:
        sampler = Sampler(params, prompt_ids, constraint, rng, self.model.vocab_limit)  # the grammar state lives here
        output = OutputProcessor(params, stop_ids(self.model, params), self.model.tokenizer, prompt_ids)  # as generate
        return Sequence(request_id, next(self._seq_ids), prompt_ids, params, sampler, output, RequestMetrics(arrival),
                        index=index, lora=lora)

    def _take(self, seq: Sequence, choice: TokenChoice) -> list[int]:
        """Finish the sequence by the rules of `model.generate` (its OutputProcessor; max_tokens here, where
        generate's loop stops producing) on its drawn token; return the tokens it gained (0 or 1)."""
        seq.metrics.first_token = seq.metrics.first_token or time.perf_counter()
        output = seq.output
        output.push(choice)
        if output.stop_token is not None:  # an end token: sampled, but not part of the output
            self._finish(seq)
            return []
        seq.metrics.output_tokens += 1
        self.generated_tokens += 1
        if not output.finished and len(output.token_ids) >= seq.params.max_tokens:
            output.finish("length")
        if output.finished:
            self._finish(seq)
        return [choice.token_id]

    def _finish(self, seq: Sequence) -> None:
        seq.finish(seq.output.finish_reason)
        self.scheduler.finish(seq)
        samples = self.requests.get(seq.request_id, [])
        if all(s.status is Status.FINISHED for s in samples):
            self.requests.pop(seq.request_id, None)

    def _output(self, seq: Sequence, new: list[int]) -> RequestOutput:
        output = seq.output
        logprobs = None if output.logprobs is None else list(output.logprobs)  # a copy: the list grows
        return RequestOutput(seq.request_id, seq.index, seq.prompt_ids, list(output.token_ids), output.text, new,
                             seq.status is Status.FINISHED, seq.finish_reason, seq.metrics, logprobs)

    def _log(self, batch) -> None:
        running = self.scheduler.running
        self.step_log.append(StepRecord(time.perf_counter(), len(batch.sequences), batch.num_tokens,
                                        self.scheduler.allocator.num_used, sum(s.num_computed for s in running),
                                        sum(self.scheduler.blocks_for(s.num_computed) for s in running)))


def _constraints_per_prompt(constraint, n_prompts: int) -> list:
    """`LLM.generate`'s constraint as one per prompt. One object cannot serve several prompts, in one list or
    for all: each sequence walks its own grammar state (a function making a fresh one can)."""
    constraints = list(constraint) if isinstance(constraint, (list, tuple)) else [constraint] * n_prompts
    objects = [c for c in constraints if c is not None and not callable(c)]
    if len({id(c) for c in objects}) < len(objects):
        raise TinyInferError("one constraint object is given to several prompts: each needs its own grammar state: "
                             "pass a function that builds one, or a list with a fresh constraint per prompt")
    return constraints
