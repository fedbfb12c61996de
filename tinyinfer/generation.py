"""Generation: the loop that turns a prompt into a continuation, one token at a time.

    prefill:  the whole prompt through the model once -> logits of the next token     (time to first token)
    decode:   sample a token, feed it back, get the next logits; repeat               (time per output token)
    until:    an EOS token, a stop token, a stop string, or max_tokens

Around the bare loop (`generate_tokens`) sit the parts a user of an LLM API expects:

- the sampler (tinyinfer/sampling.py) with the request's SamplingParams, one seeded generator per sample;
- per-token finishing (tinyinfer/output.py, the engine's too): end tokens, logprobs, the streaming detokenizer
  (whole characters only) and the stop matcher (tinyinfer/stopping.py), so the stream never shows text that a
  stop string later cuts;
- a result with the text, the token ids, why it finished ("eos", "stop" or "length"), per-token logprobs when
  asked, and timings (TTFT, TPOT, tokens/s);
- `n` samples of one prompt, decoded one after the other here (the serving engine batches them);
- a constraint (tinyinfer/constrain/), applied by the sampler as a mask on the logits;
- a draft model (tinyinfer/speculative.py): the same tokens, several per step of the model.

The KV cache is allocated once for prompt + max_tokens, so the loop never copies it. A prompt that cannot fit
in the context window with its max_tokens, and every other bad request, is refused before any work is done
(`check_request`, the engine's too).

    >>> model = tinyinfer.load("shakespeare")                                  # doctest: +SKIP
    >>> model.generate("ROMEO:", max_tokens=20, temperature=0).text             # doctest: +SKIP
    >>> for piece in (stream := model.generate("ROMEO:", stream=True)):         # doctest: +SKIP
    ...     print(piece, end="")
    >>> stream.result.finish_reason                                             # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.lora import check_adapter
from tinyinfer.model import Model, SeqChunk, check_token_ids
from tinyinfer.sampling import Sampler, SamplingParams, TokenChoice, check_flag, check_text, sequence_rngs
from tinyinfer.output import OutputProcessor
from tinyinfer.speculative import SpeculationStats, check_draft, speculative_tokens


@dataclass
class Timings:
    """Where the time of one request went. TTFT = prefill (+ first sample); TPOT = mean decode step."""

    ttft_s: float = 0.0
    decode_s: float = 0.0  # total time of the decode steps after the first token
    output_tokens: int = 0

    def add_token(self, seconds: float) -> None:
        """Count one output token that took `seconds` to produce: the first one's time is the TTFT."""
        if self.output_tokens == 0:
            self.ttft_s = seconds
        else:
            self.decode_s += seconds
        self.output_tokens += 1

    @property
    def tpot_s(self) -> float:
        return self.decode_s / max(self.output_tokens - 1, 1)

    @property
    def tokens_per_s(self) -> float:
        return (self.output_tokens - 1) / self.decode_s if self.decode_s > 0 else 0.0


@dataclass
class GenerationResult:
    text: str  # what the stream showed: decoded tokens, cut before a stop string
    token_ids: list[int]  # generated tokens, without the EOS / stop token that ended them
    finish_reason: str  # "eos" | "stop" (stop string or stop token) | "length"
    prompt_tokens: int
    timings: Timings
    logprobs: list[TokenChoice] | None = None  # one per token id, when SamplingParams.logprobs is set
    prompt_ids: list[int] = field(default_factory=list)
    stop_string: str | None = None  # the stop string that matched, if any
    speculation: SpeculationStats | None = None  # with a draft model: how many of its guesses were kept


class GenerationStream:
    """Iterate to get the text as it is produced; `.result` holds the GenerationResult once done."""

    def __init__(self, model, prompt_ids: list[int], sampler: Sampler, draft=None, num_speculative_tokens: int = 4,
                 lora: str | None = None, adaptive_speculation: bool = True):
        self.result: GenerationResult | None = None
        self._pieces = _run(model, prompt_ids, sampler, self, draft, num_speculative_tokens, lora, adaptive_speculation)

    def __iter__(self) -> Iterator[str]:
        return self._pieces


def encode_prompt(model, prompt, add_special_tokens: bool = True) -> list[int]:
    """Token ids of a prompt given as text (encoded with the model's tokenizer) or as ids.

    A rendered chat template already holds its special tokens, so it is encoded with add_special_tokens=False.
    Anything else is refused here, before any work: a prompt of no tokens, ids outside the vocabulary (they
    would index past the embedding table), text that is not valid UTF-8.
    """
    if isinstance(prompt, str):
        if model.tokenizer is None:
            raise TinyInferError("this model has no tokenizer: pass token ids, or load it with tokenizer=PATH "
                                 "(on the command line: --tokenizer PATH)")
        ids = model.tokenizer.encode(check_text(prompt, "the prompt"), add_special_tokens=add_special_tokens)
        if not ids:
            raise TinyInferError("the prompt is empty and the tokenizer adds no BOS token to start from: give some text")
        return ids
    if isinstance(prompt, (bytes, bytearray)) or not hasattr(prompt, "__iter__"):
        raise TinyInferError(f"the prompt is a {type(prompt).__name__}: give text (str) or a list of token ids")
    return check_token_ids(model, prompt, "the prompt")


def resolve_params(model, params: SamplingParams | None, overrides: dict) -> SamplingParams:
    """The request's SamplingParams: given ones, or the checkpoint's defaults with keyword overrides."""
    if params is None:
        params = SamplingParams.from_generation_config(model.generation_config, **overrides)
    elif not isinstance(params, SamplingParams):
        raise TinyInferError(f"sampling parameters must be a SamplingParams, not {type(params).__name__}: write "
                             "SamplingParams(temperature=0.7, ...) or pass the fields as keywords")
    elif overrides:
        raise TinyInferError("pass either a SamplingParams object or keyword parameters, not both")
    return params.validate_for(model.config.vocab_size)


def check_fits(model, n_prompt: int, max_tokens: int) -> None:
    limit = model.config.max_seq_len
    if n_prompt + max_tokens > limit:
        raise TinyInferError(
            f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) = {n_prompt + max_tokens} exceeds the context "
            f"window of {limit} tokens{model.config.context_note}: shorten the prompt or lower max_tokens"
        )


def generate_tokens(model, prompt_ids: list[int], sampler: Sampler, timings: Timings,
                    lora: str | None = None) -> Iterator[TokenChoice]:
    """The bare loop: prefill once, then one decode step per token; yields each sampled TokenChoice.
    Every chunk names the LoRA adapter `lora` (None: the plain model).

    The caller decides when to stop (it simply stops iterating); at most `max_tokens` tokens are produced.
    """
    # BEGIN EXERCISE 5.2: prefill once, then decode one token at a time through the KV cache
    max_tokens = sampler.params.max_tokens
    cache = model.new_cache(max_seqs=1, max_len=len(prompt_ids) + max_tokens)
    start = time.perf_counter()
    logits = model.forward([SeqChunk(0, 0, prompt_ids, lora)], cache)  # prefill: [1, V]
    position = len(prompt_ids)
    for step in range(max_tokens):
        choice = sampler.sample(logits[0])
        timings.add_token(time.perf_counter() - start)
        yield choice
        if step + 1 == max_tokens:
            return
        start = time.perf_counter()
        logits = model.forward([SeqChunk(0, position, [choice.token_id], lora)], cache)  # decode: [1, V]
        position += 1
    # END EXERCISE 5.2


def constraint_vocabulary(model):
    """What a constraint on this model masks (a tinyinfer.constrain Vocabulary, cached per tokenizer): one entry
    per row of its logits, padding rows included, and its EOS ids (allowed when the grammar may end)."""
    from tinyinfer.constrain.build import vocabulary_of  # noqa: PLC0415 - only structured output needs it

    return vocabulary_of(model.tokenizer, sorted(eos_ids(model)), rows=model.config.vocab_size)


def eos_ids(model) -> set[int]:
    """The model's end-of-sequence ids: from its config (generation_config.json) and its tokenizer."""
    ids = set(model.config.eos_token_ids)
    if model.tokenizer is not None and model.tokenizer.eos_token_id is not None:
        ids.add(model.tokenizer.eos_token_id)
    return ids


def stop_ids(model, params: SamplingParams) -> set[int]:
    """Token ids that end generation: the model's EOS ids (unless ignore_eos) and the request's stop ids."""
    ids = set(params.stop_token_ids)
    if not params.ignore_eos:
        ids |= eos_ids(model)
    return ids


def _run(model, prompt_ids: list[int], sampler: Sampler, out: GenerationStream, draft, k: int,
         lora: str | None, adaptive: bool) -> Iterator[str]:
    params = sampler.params
    timings = Timings()
    speculation = None if draft is None else SpeculationStats()
    if draft is None:
        picks = generate_tokens(model, prompt_ids, sampler, timings, lora)
    else:
        picks = speculative_tokens(model, draft, prompt_ids, sampler, k, timings, speculation, adaptive)
    output = OutputProcessor(params, stop_ids(model, params), model.tokenizer, prompt_ids)
    for choice in picks:  # at most max_tokens of them
        piece = output.push(choice)
        if piece:
            yield piece
        if output.finished:
            break
    else:
        tail = output.finish("length")
        if tail:
            yield tail
    out.result = GenerationResult(output.text, output.token_ids, output.finish_reason, len(prompt_ids), timings,
                                  output.logprobs, prompt_ids, output.stop_string, speculation)


def generate(model, prompt, params: SamplingParams | None = None, *, stream: bool = False, constraint=None,
             add_special_tokens: bool = True, draft=None, num_speculative_tokens: int = 4, lora: str | None = None,
             adaptive_speculation: bool = True, **overrides):
    """Generate a continuation of `prompt` (text or token ids).

    `params` is a SamplingParams, or give its fields as keywords (max_tokens=50, temperature=0, seed=1, ...);
    unspecified fields come from the checkpoint's generation_config.json (its max_new_tokens shrinks to the room the
    context window leaves after the prompt; a max_tokens asked for that does not fit is an error).

    Returns a GenerationResult, or with `stream=True` a GenerationStream yielding text pieces whose `.result`
    is set at the end. With n > 1 it returns a list of them, one per sample (sample i uses generator i of the
    request's seed, so sample 0 equals the n = 1 run).

    `constraint`: an object with `allowed_mask()`, `advance(id)`, `is_complete()` (tinyinfer/constrain/), or a
    function making a fresh one (needed with n > 1: each sample walks its own grammar state).

    `draft`: a smaller Model with the same tokenizer, for speculative decoding: it guesses
    `num_speculative_tokens` tokens per round and the model checks them in one pass (tinyinfer/speculative.py);
    or "ngram" (a `PromptLookup`): the guesses are the tokens that followed the text's last tokens earlier on.
    The tokens follow the same distribution (at temperature 0: the very same tokens); the result's
    `.speculation` says how many guesses were kept. `adaptive_speculation`: guess fewer (or none, for a while)
    after rejected guesses, as `GuessBudget` says; False guesses `num_speculative_tokens` every round.

    `lora`: the name of a LoRA adapter loaded on the model with `tinyinfer.lora.load_adapter`.
    """
    stream, add_special_tokens = check_flag("stream", stream), check_flag("add_special_tokens", add_special_tokens)
    adaptive_speculation = check_flag("adaptive_speculation", adaptive_speculation)
    request = check_request(model, prompt, params, overrides, lora, constraint, add_special_tokens,
                            fit_default_length=True)
    params, prompt_ids, make_constraint = request.params, request.prompt_ids, request.make_constraint
    if draft is not None:
        check_draft(model, draft, constraint, lora, len(prompt_ids) + params.max_tokens, num_speculative_tokens)
    streams = [
        GenerationStream(model, prompt_ids, Sampler(params, prompt_ids, make_constraint(), rng, model.vocab_limit),
                         draft, num_speculative_tokens, lora, adaptive_speculation)
        for rng in sequence_rngs(params.seed, params.n)
    ]
    if not stream:
        for s in streams:
            for _ in s:
                pass
    outputs = streams if stream else [s.result for s in streams]
    return outputs[0] if params.n == 1 else outputs


@dataclass
class CheckedRequest:
    """A request that `check_request` accepted: its prompt's token ids, its sampling parameters, and a function
    giving each of its n samples its constraint."""

    prompt_ids: list[int]
    params: SamplingParams
    make_constraint: Callable


def check_request(model, prompt, params: SamplingParams | None, overrides: dict, lora: str | None = None,
                  constraint=None, add_special_tokens: bool = True, fit_default_length: bool = False) -> CheckedRequest:
    """Everything `generate` and the engine (`LLM.add_request`, which the server's requests go through) refuse
    before any work, in one place: bad sampling parameters, a prompt that is empty, not text or ids, or too long
    for the context window with its max_tokens, stop strings without a tokenizer to read the text, an adapter the
    model does not have, a constraint that is not one (or one object for n samples), and a constraint with
    ignore_eos (once its grammar is complete only EOS is allowed, so nothing could follow).

    `fit_default_length` (generate's): a max_tokens the request did not give (the checkpoint's default) shrinks
    to the room the context window leaves, as the server's does."""
    chosen_by_default = params is None and overrides.get("max_tokens") is None
    params = resolve_params(model, params, overrides)
    prompt_ids = encode_prompt(model, prompt, add_special_tokens)
    room = model.config.max_seq_len - len(prompt_ids)
    if fit_default_length and chosen_by_default and room >= 1:
        params = replace(params, max_tokens=min(params.max_tokens, room))
    check_fits(model, len(prompt_ids), params.max_tokens)
    if params.stop and model.tokenizer is None:
        raise TinyInferError("stop strings need the model's tokenizer to read the text: use stop_token_ids instead")
    check_adapter(model, lora)
    make_constraint = constraint_maker(constraint, params.n)
    if constraint is not None and params.ignore_eos:  # past its EOS a grammar allows nothing: the step would fail
        raise TinyInferError("ignore_eos with a constraint: a constrained output ends at EOS once its grammar is "
                             "complete, so nothing can follow it: drop ignore_eos")
    return CheckedRequest(prompt_ids, params, make_constraint)


def constraint_maker(constraint, n: int):
    """A function giving each of a request's n samples its constraint (generate's and the engine's `constraint`):
    None, an object (n = 1 only: a grammar state belongs to one sample), or a function making a fresh one."""
    if constraint is None:
        return lambda: None
    if callable(constraint):  # a function making a fresh constraint per sample (or None for none)
        return lambda: _checked_constraint(constraint())
    _checked_constraint(constraint)
    if n > 1:
        raise TinyInferError("with n > 1 each sample needs its own constraint: pass a function that builds one")
    return lambda: constraint


def _checked_constraint(constraint):
    if constraint is not None and not all(hasattr(constraint, m) for m in ("allowed_mask", "advance", "is_complete")):
        raise TinyInferError(f"constraint {constraint!r:.60} is not a constraint: give an object with allowed_mask(), "
                             "advance(id) and is_complete() (see tinyinfer/constrain/), or a function that makes one")
    return constraint


def greedy_tokens(model, prompt_ids: list[int], n: int) -> list[int]:
    """The next n greedy token ids, EOS ignored (for parity checks against other implementations)."""
    return generate(model, prompt_ids, max_tokens=n, temperature=0.0, ignore_eos=True).token_ids


# `model.generate(prompt, ...)`: the loop above, as a method of every Model. It is attached here, not written in
# tinyinfer/model.py, because generation builds on the model and the model knows nothing of generation.
Model.generate = generate
