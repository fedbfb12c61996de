"""Sampling: turn one row of logits into the next token, the way every LLM API defines its knobs.

The design is a chain of small *logits processors*, each a plain function `f(logits, ...) -> logits` on a
1-D float array `[vocab]`, followed by one draw from a seeded `numpy.random.Generator` that belongs to the
request. Each processor is readable alone and equals the Hugging Face transformers processor of the same
name (the tests check it). The chain, in the order HF `generate` applies them:

    logit_bias -> repetition penalty -> presence/frequency penalties -> constraint mask     (reshape the scores)
    -> temperature -> top-k -> top-p -> min-p                                               (warp, then truncate)
    -> softmax -> one draw (inverse CDF)

Temperature 0 means exact greedy: the argmax of the reshaped scores, ties going to the lowest token id.
A processor removes a token by setting its logit to -inf, so softmax gives it probability exactly 0 and the
draw can never pick it.

Logprobs (when asked) are those of the *model's raw distribution*, `log_softmax(logits)` before any
processor, as vLLM reports them by default: they describe what the model believes, independent of the
knobs used to pick the token (so a greedy and a sampled run report the same numbers for the same token).

Array code takes its module from the array (`xp_of`), so the processors run on NumPy or CuPy alike; the
final draw happens on the host with the request's NumPy generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from tinyinfer.attention import softmax
from tinyinfer.backend import to_numpy, xp_of
from tinyinfer.errors import TinyInferError, is_integer_at_least

# ---------------------------------------------------------------------------------------------------------------
# The parameters of one request
# ---------------------------------------------------------------------------------------------------------------


MIN_TEMPERATURE = 1e-5  # the smallest temperature > 0 accepted (vLLM's threshold for treating it as greedy)


@dataclass
class SamplingParams:
    """Every knob of one request, validated on construction.

    >>> SamplingParams(temperature=0.7, top_p=0.9, stop=["\\n\\n"]).top_p
    0.9
    >>> SamplingParams(top_p=1.5)
    Traceback (most recent call last):
    ...
    tinyinfer.errors.TinyInferError: top_p=1.5 is out of range: top_p must be in (0, 1] (1 keeps every token)
    """

    temperature: float = 1.0  # 0 = greedy; > 0 divides the logits
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    top_p: float = 1.0  # keep the smallest set whose probability reaches top_p; 1 = off
    min_p: float = 0.0  # drop tokens less likely than min_p * p(most likely); 0 = off
    repetition_penalty: float = 1.0  # HF/CTRL: scores of tokens seen in prompt or output, /p if > 0, *p if < 0
    presence_penalty: float = 0.0  # OpenAI: subtracted once from every token already generated
    frequency_penalty: float = 0.0  # OpenAI: subtracted per occurrence in the generated text
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> value added to its logit
    max_tokens: int = 128  # generate at most this many tokens
    stop: list[str] = field(default_factory=list)  # stop when the text contains one; it is not returned
    stop_token_ids: list[int] = field(default_factory=list)  # stop when one of these is generated
    ignore_eos: bool = False  # keep going past EOS (for benchmarks)
    seed: int | None = None  # None: a fresh random seed each run
    logprobs: int | None = None  # None: off; n >= 0: logprob of each token plus its n best alternatives
    n: int = 1  # independent samples of the same prompt

    def __post_init__(self):
        self.temperature = _number("temperature", self.temperature, 0, math.inf, "must be a finite number >= 0 (0 = greedy)")
        if 0 < self.temperature < MIN_TEMPERATURE:  # logits / 1e-40 overflow float32: every token would be inf
            raise TinyInferError(f"temperature={self.temperature!r} is too small to divide the logits by: give 0 for "
                                 f"greedy decoding (its limit), or at least {MIN_TEMPERATURE:g}")
        self.top_k = _integer("top_k", self.top_k, 0, "must be an integer >= 0 (0 = off)")
        self.top_p = _number("top_p", self.top_p, 0, 1, "must be in (0, 1] (1 keeps every token)", low_open=True)
        self.min_p = _number("min_p", self.min_p, 0, 1, "must be in [0, 1] (0 = off)")
        self.repetition_penalty = _number(
            "repetition_penalty", self.repetition_penalty, 0, math.inf, "must be a finite number > 0 (1 = off)",
            low_open=True,
        )
        self.presence_penalty = _number("presence_penalty", self.presence_penalty, -2, 2, "must be in [-2, 2]")
        self.frequency_penalty = _number("frequency_penalty", self.frequency_penalty, -2, 2, "must be in [-2, 2]")
        self.logit_bias = _logit_bias(self.logit_bias)
        self.max_tokens = _integer("max_tokens", self.max_tokens, 1, "must be an integer >= 1")
        self.stop = _stop_strings(self.stop)
        self.stop_token_ids = _token_ids("stop_token_ids", self.stop_token_ids)
        self.ignore_eos = check_flag("ignore_eos", self.ignore_eos)
        if self.seed is not None:
            self.seed = _integer("seed", self.seed, 0, "must be an integer >= 0, or None for a random seed")
        if self.logprobs is not None:
            self.logprobs = _integer("logprobs", self.logprobs, 0, "must be an integer >= 0 (alternatives per token)")
        self.n = _integer("n", self.n, 1, "must be an integer >= 1")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def validate_for(self, vocab_size: int) -> SamplingParams:
        """Check the fields that depend on a model's vocabulary (token ids, logprobs); return self.

        >>> SamplingParams(logit_bias={7: 5.0}).validate_for(5)
        Traceback (most recent call last):
        ...
        tinyinfer.errors.TinyInferError: logit_bias names token id 7, outside the vocabulary: ids must be in [0, 4]
        """
        for name, ids in (("logit_bias", self.logit_bias), ("stop_token_ids", self.stop_token_ids)):
            for token_id in ids:
                if not 0 <= token_id < vocab_size:
                    raise TinyInferError(
                        f"{name} names token id {token_id}, outside the vocabulary: ids must be in [0, {vocab_size - 1}]"
                    )
        if self.logprobs is not None and self.logprobs > vocab_size:
            raise TinyInferError(f"logprobs={self.logprobs} asks for more alternatives than the vocabulary has "
                                 f"({vocab_size} tokens): give at most {vocab_size}")
        return self

    @classmethod
    def from_generation_config(cls, config: dict | None, **overrides) -> SamplingParams:
        """Defaults from a checkpoint's `generation_config.json` (a dict), then `overrides` (None = not given).

        Like HF `generate`, `do_sample` false or absent means greedy (temperature 0). Only the fields the file
        sets are taken (as vLLM does): an absent `top_k` stays off rather than HF's implicit 50.

        >>> SamplingParams.from_generation_config({"do_sample": True, "temperature": 0.6, "top_p": 0.9}).top_p
        0.9
        >>> SamplingParams.from_generation_config({"temperature": 0.6}).temperature
        0.0
        >>> SamplingParams.from_generation_config({}, temperature=0.8, top_k=None).temperature
        0.8
        """
        config = config or {}
        if not isinstance(config, dict):
            raise TinyInferError(f"generation_config.json holds {type(config).__name__} {config!r:.40}, not a JSON "
                                 "object: fix the file or delete it (it only sets sampling defaults)")
        values = {"temperature": 0.0} if not config.get("do_sample", False) else {}
        for hf_name, name in _GENERATION_CONFIG_FIELDS.items():
            if config.get(hf_name) is not None and name not in values:
                values[name] = config[hf_name]
        known = {f.name for f in fields(cls)}
        for name, value in overrides.items():
            if name not in known:
                raise TinyInferError(f"unknown sampling parameter {name!r}: use one of {', '.join(sorted(known))}")
            if value is not None:
                values[name] = value
        for name in set(values) - {name for name, value in overrides.items() if value is not None}:
            try:  # a bad value the user never typed: say where it came from
                cls(**{name: values[name]})
            except TinyInferError as e:
                raise TinyInferError(f"{e} (the value comes from the model's generation_config.json: fix it there, "
                                     f"or give {name} yourself)") from None
        return cls(**values)


# generation_config.json name -> SamplingParams field (do_sample is handled separately)
_GENERATION_CONFIG_FIELDS = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}


def _number(name, value, low, high, allowed, low_open=False) -> float:
    """A finite real number in [low, high] ((low, high] with low_open); `allowed` says so in the error."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or math.isnan(value):
        raise TinyInferError(f"{name}={value!r} is not a number: {name} {allowed}")
    if not math.isfinite(value) or value < low or value > high or (low_open and value == low):
        raise TinyInferError(f"{name}={value!r} is out of range: {name} {allowed}")
    return float(value)


def _integer(name, value, low, allowed) -> int:
    if not is_integer_at_least(value, low):
        raise TinyInferError(f"{name}={value!r} is invalid: {name} {allowed}")
    return int(value)


def check_flag(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TinyInferError(f"{name}={value!r} is invalid: {name} must be True or False")
    return bool(value)


def _token_ids(name, ids) -> list[int]:
    if ids is None:
        return []
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TinyInferError(f"{name}={ids!r} is invalid: give a list of token ids (integers >= 0)")
    return [_integer(name, i, 0, "must hold token ids (integers >= 0)") for i in ids]


def _logit_bias(bias) -> dict[int, float]:
    if bias is None:
        return {}
    if not isinstance(bias, dict):
        raise TinyInferError(f"logit_bias={bias!r} is invalid: give a dict mapping token id -> bias in [-100, 100]")
    checked = {}
    for key, value in bias.items():
        if isinstance(key, str) and key.lstrip("-").isdigit():
            key = int(key)  # JSON object keys arrive as strings, as in the OpenAI API
        token_id = _integer("logit_bias key", key, 0, "must be a token id (an integer >= 0)")
        checked[token_id] = _number(f"logit_bias[{token_id}]", value, -100, 100, "must be in [-100, 100]")
    return checked


def _stop_strings(stop) -> list[str]:
    if stop is None:
        return []
    if not isinstance(stop, (str, list, tuple)):
        raise TinyInferError(f"stop={stop!r} is invalid: give a string or a list of non-empty strings")
    stop = [stop] if isinstance(stop, str) else list(stop)
    for s in stop:
        if not isinstance(s, str) or not s:
            raise TinyInferError(f"stop={stop!r} holds {s!r}: every stop string must be a non-empty string")
        check_text(s, "a stop string")
    return stop


def check_text(text: str, what: str) -> str:
    r"""`text`, if it can be encoded as UTF-8. Undecodable bytes of a command line reach Python as lone
    surrogates ('\udcff'), which no tokenizer can encode: they are refused here, naming `what` they were.

    >>> check_text("h\u00e9", "the prompt")
    'hé'
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise TinyInferError(f"{what} is not valid UTF-8 (character {e.start} is {text[e.start]!r}, "
                             "from undecodable bytes): give UTF-8 text") from None
    return text


# ---------------------------------------------------------------------------------------------------------------
# Logits processors: each takes a 1-D float array [vocab] and returns a new one of the same shape
# ---------------------------------------------------------------------------------------------------------------


def exp_shifted(logits):
    """exp(logits - max): the softmax before its division by the sum, so proportional to the probabilities.
    Subtracting the max keeps every value in [0, 1] (no overflow) and the largest exactly 1. A draw needs
    no more: it normalises its cumulative sum anyway (see `draw`).

    >>> exp_shifted(np.array([0.0, np.log(3.0), -np.inf])).round(4).tolist()
    [0.3333, 1.0, 0.0]
    """
    return xp_of(logits).exp(logits - logits.max())


def log_softmax(logits):
    """log(softmax(logits)) without forming tiny probabilities first."""
    xp = xp_of(logits)
    shifted = logits - logits.max()
    return shifted - xp.log(xp.exp(shifted).sum())


def apply_logit_bias(logits, bias: dict[int, float]):
    """Add `bias[id]` to the logit of each listed token (OpenAI's `logit_bias`).

    >>> apply_logit_bias(np.array([1.0, 2.0, 3.0]), {0: 10.0}).tolist()
    [11.0, 2.0, 3.0]
    """
    out = logits.copy()
    for token_id, value in bias.items():
        out[token_id] += value
    return out


def apply_repetition_penalty(logits, seen_ids, penalty: float):
    """HF/CTRL repetition penalty: each token seen (in the prompt or the output) is made less likely once.

    A positive logit is divided by `penalty`, a negative one multiplied, so both move towards "less likely"
    when penalty > 1 (and towards "more likely" when penalty < 1).

    >>> apply_repetition_penalty(np.array([2.0, -2.0, 2.0]), [0, 1, 0], 2.0).tolist()
    [1.0, -4.0, 2.0]
    """
    xp = xp_of(logits)
    ids = xp.unique(xp.asarray(list(seen_ids), dtype=xp.int64))  # each token penalised once however often seen
    out = logits.copy()
    scores = out[ids]
    out[ids] = xp.where(scores < 0, scores * penalty, scores / penalty)
    return out


def apply_presence_frequency_penalties(logits, output_ids, presence: float, frequency: float):
    """OpenAI penalties on the *generated* tokens: logit -= frequency * count + presence * (count > 0).

    >>> apply_presence_frequency_penalties(np.zeros(3), [2, 2, 0], presence=0.5, frequency=1.0).tolist()
    [-1.5, 0.0, -2.5]
    """
    if len(output_ids) == 0:
        return logits
    xp = xp_of(logits)
    ids = xp.asarray(output_ids, dtype=np.int64)  # [n]: the ids cross to the device, not a [vocab] of counts
    counts = xp.bincount(ids, minlength=logits.shape[-1]).astype(logits.dtype)  # [n] -> [vocab]
    return logits - frequency * counts - presence * (counts > 0)


def apply_constraint(logits, constraint):
    """Mask the tokens a grammar forbids: `constraint.allowed_mask()` is a bool array [vocab].

    >>> class OnlyTwo:
    ...     def allowed_mask(self): return np.array([False, False, True])
    >>> apply_constraint(np.zeros(3), OnlyTwo()).tolist()
    [-inf, -inf, 0.0]
    """
    xp = xp_of(logits)
    allowed = xp.asarray(constraint.allowed_mask())  # [vocab] bool
    if allowed.shape != logits.shape:
        raise TinyInferError(
            f"the constraint's mask has shape {allowed.shape} but the logits have {logits.shape}: "
            "build the constraint with this model's tokenizer"
        )
    if not bool(allowed.any()):
        raise TinyInferError("the constraint allows no token at all: the grammar cannot continue this text")
    return xp.where(allowed, logits, -xp.inf)


def apply_temperature(logits, temperature: float):
    """Divide by the temperature: < 1 sharpens the distribution, > 1 flattens it (temperature > 0).

    >>> apply_temperature(np.array([1.0, 2.0]), 0.5).tolist()
    [2.0, 4.0]
    """
    return logits / temperature


def apply_top_k(logits, k: int):
    """Keep the k largest logits (all tokens tied with the k-th are kept, as in HF); k >= vocab keeps all.

    >>> apply_top_k(np.array([1.0, 3.0, 2.0, 3.0]), 2).tolist()
    [-inf, 3.0, -inf, 3.0]
    """
    xp = xp_of(logits)
    if k >= logits.shape[-1]:
        return logits
    kth_largest = xp.sort(logits)[-k]  # ascending sort, so the k-th largest sits k from the end
    return xp.where(logits < kth_largest, -xp.inf, logits)


def apply_top_p(logits, top_p: float):
    """Nucleus: keep the most likely tokens until their probability reaches top_p (always at least one).

    A token is kept when the probability of all tokens ranked above it is still below top_p. Ranking is by
    logit, ties broken by lowest id, so a tie at the edge of the nucleus keeps the lower id.

    >>> apply_top_p(np.log(np.array([0.5, 0.3, 0.2])), 0.7).round(2).tolist()
    [-0.69, -1.2, -inf]
    """
    xp = xp_of(logits)
    if top_p >= 1:
        return logits
    # BEGIN EXERCISE 6.2: top-p (nucleus) filtering
    order = xp.argsort(-logits, kind="stable")  # token ids, most likely first; ties -> lowest id first
    probs = softmax(logits[order].astype(xp.float64))  # [vocab], in rank order; float64 so sums stay exact
    mass_above = xp.cumsum(probs) - probs  # [vocab] probability of all tokens ranked above each one
    keep = xp.empty(logits.shape, dtype=bool)
    keep[order] = mass_above < top_p  # scatter back from rank order to token-id order
    return xp.where(keep, logits, -xp.inf)
    # END EXERCISE 6.2


def apply_min_p(logits, min_p: float):
    """Keep tokens at least `min_p` times as likely as the most likely one.

    >>> apply_min_p(np.log(np.array([0.6, 0.3, 0.1])), 0.25).round(2).tolist()
    [-0.51, -1.2, -inf]
    """
    xp = xp_of(logits)
    probs = softmax(logits)
    return xp.where(probs < min_p * probs.max(), -xp.inf, logits)


# ---------------------------------------------------------------------------------------------------------------
# The draw
# ---------------------------------------------------------------------------------------------------------------


def greedy(logits) -> int:
    """The most likely token; ties go to the lowest id (argmax returns the first maximum).

    >>> greedy(np.array([1.0, 3.0, 3.0]))
    1
    """
    return int(xp_of(logits).argmax(logits))


def draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One token drawn from `probs` [vocab] by inverse CDF: the first token whose cumulative probability
    exceeds a uniform number in [0, 1). Uses exactly one `rng.random()`, like `rng.choice(len(p), p=p)`.
    `probs` may also be any non-negative weights proportional to the probabilities: the CDF is normalised.

    >>> draw(np.array([0.0, 0.25, 0.75]), np.random.default_rng(0))
    2
    """
    # BEGIN EXERCISE 6.1: draw a token by inverse CDF
    cdf = np.cumsum(probs, dtype=np.float64)  # [vocab], non-decreasing
    cdf /= cdf[-1]  # exactly 1 at the end, so u < 1 always lands on a token with probability > 0
    u = rng.random()
    return int(np.searchsorted(cdf, u, side="right"))
    # END EXERCISE 6.1


@dataclass
class TokenChoice:
    """What the sampler picked: the token, and (when asked) its logprob and the best alternatives."""

    token_id: int
    logprob: float | None = None
    top_logprobs: list[tuple[int, float]] | None = None  # [(token id, logprob)], most likely first


def top_logprobs(logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The n most likely (token id, logprob) pairs, ties by lowest id.

    >>> top_logprobs(np.log(np.array([0.2, 0.5, 0.3])), 2)
    [(1, -0.6931471805599453), (2, -1.2039728043259361)]
    """
    order = np.argsort(-logprobs, kind="stable")[:n]  # [n]
    return [(int(i), float(logprobs[i])) for i in order]


class Sampler:
    """The sampler of one sequence: its parameters, its own random generator, and the tokens seen so far.

    Because the generator belongs to the sequence, its tokens depend only on its seed and its logits, never
    on other requests sampled beside it.

        sampler = Sampler(SamplingParams(temperature=0.8, top_p=0.9, seed=1), prompt_ids=[1, 15, 27])
        choice = sampler.sample(logits)   # logits [vocab] for the next position; records the token
    """

    def __init__(self, params: SamplingParams, prompt_ids=(), constraint=None, rng: np.random.Generator | None = None,
                 vocab_limit: int | None = None):
        self.params = params
        self.vocab_limit = vocab_limit  # ids from here on are padding rows of the output layer: never sampled
        self.prompt_ids = list(prompt_ids)
        self.output_ids: list[int] = []
        self.constraint = constraint
        self.rng = rng if rng is not None else sequence_rngs(params.seed, 1)[0]

    def process(self, logits):
        """Apply the chain of processors that reshape and truncate the scores (no draw)."""
        logits = self.reshape_scores(logits)
        if self.params.greedy:
            return logits  # the warpers below never move the argmax, so greedy can skip them
        return self.truncate(apply_temperature(logits, self.params.temperature))

    def reshape_scores(self, logits):
        """The processors that depend on this sequence's context: padding rows, bias, penalties, grammar."""
        p = self.params
        if self.vocab_limit is not None and self.vocab_limit < logits.shape[-1]:
            logits = logits.copy()
            logits[self.vocab_limit:] = -np.inf  # e.g. Phi-3: 32,064 output rows for 32,011 tokens
        if p.logit_bias:
            logits = apply_logit_bias(logits, p.logit_bias)
        if p.repetition_penalty != 1:
            logits = apply_repetition_penalty(logits, self.prompt_ids + self.output_ids, p.repetition_penalty)
        if (p.presence_penalty or p.frequency_penalty) and self.output_ids:
            logits = apply_presence_frequency_penalties(logits, self.output_ids, p.presence_penalty, p.frequency_penalty)
        if self.constraint is not None:
            logits = apply_constraint(logits, self.constraint)
        return logits

    @property
    def truncates(self) -> bool:
        """Whether top-k, top-p or min-p removes tokens."""
        return bool(self.params.top_k or self.params.top_p < 1 or self.params.min_p)

    def truncate(self, logits):
        """top-k, then top-p, then min-p, on logits already divided by the temperature."""
        p = self.params
        if p.top_k:
            logits = apply_top_k(logits, p.top_k)
        if p.top_p < 1:
            logits = apply_top_p(logits, p.top_p)
        if p.min_p:
            logits = apply_min_p(logits, p.min_p)
        return logits

    def probs(self, logits) -> np.ndarray:
        """The exact distribution the next token is drawn from (float64, on the host)."""
        return to_numpy(softmax(self.process(logits).astype(np.float64)))

    def sample(self, logits) -> TokenChoice:
        """Pick the next token from `logits` [vocab], record it, and return it (with logprobs if asked)."""
        if self.params.greedy:
            token_id = greedy(self.process(logits))
        else:  # the draw normalises its CDF, so the probabilities need not be divided by their sum first
            token_id = draw(to_numpy(exp_shifted(self.process(logits).astype(np.float64))), self.rng)
        return self.choice(token_id, logits)

    def choice(self, token_id: int, logits) -> TokenChoice:
        """Record `token_id` as picked from `logits` [vocab]; its TokenChoice carries logprobs if asked."""
        choice = TokenChoice(token_id)
        if self.params.logprobs is not None:
            raw = to_numpy(log_softmax(logits.astype(np.float64)))  # [vocab] the model's own distribution
            choice.logprob = float(raw[token_id])
            choice.top_logprobs = top_logprobs(raw, self.params.logprobs)
        self.accept(token_id)
        return choice

    def accept(self, token_id: int) -> None:
        """Record a token as generated: it feeds the penalties and advances the constraint."""
        self.output_ids.append(token_id)
        if self.constraint is not None:
            self.constraint.advance(token_id)


CPU_BLOCK_BYTES = 2**21  # float64 rows converted at a time on the CPU: a block this size stays in the cache


def float64_blocks(scores):
    """(index of its first row, the block in float64) for blocks of rows of `scores` [S, V].  -> [b, V] each

    On a GPU one block, all the rows: one copy to the host. On the CPU, blocks under 2 MiB: a block stays in the
    cache from its conversion to its draw, and its memory is reused from one step to the next, where one array
    for all the rows (12 MB for 32 rows of a 49k vocabulary) is mapped afresh by the operating system every step,
    page by page (5-9 ms a step, as much as the arithmetic).

    >>> [(first, block.shape) for first, block in float64_blocks(np.zeros((3, 2**17), dtype=np.float32))]
    [(0, (2, 131072)), (2, (1, 131072))]
    """
    size = len(scores) if xp_of(scores) is not np else max(1, CPU_BLOCK_BYTES // (8 * scores.shape[1]))
    for first in range(0, len(scores), size):
        yield first, scores[first:first + size].astype(np.float64)


def sample_batch(samplers: list[Sampler], logits) -> list[TokenChoice]:
    """Each row's next token, drawn by its own sampler, with the work the rows share done once for all.
    [B, V] -> B choices, each the very token `samplers[b].sample(logits[b])` picks alone.

    What belongs to a row stays the row's own: its penalties and grammar mask (applied row by row, only where
    set), its temperature, its truncations, and its seeded generator (one `random()` per row, in row order, as
    alone). What is shared runs once on the stacked rows: the argmax of the greedy rows; the temperature and the
    softmax's shift and exponential of the sampled rows, whose tokens `draw` then picks row by row. Each is the
    same arithmetic per element as on one row, so the tokens are identical to the solo runs, not just equal in
    distribution.
    """
    xp = xp_of(logits)
    picked = [0] * len(samplers)
    greedy_rows = [b for b, s in enumerate(samplers) if s.params.greedy]
    sampled_rows = [b for b, s in enumerate(samplers) if not s.params.greedy]
    if greedy_rows:
        scores = xp.stack([samplers[b].reshape_scores(logits[b]) for b in greedy_rows])  # [G, V]
        for b, token in zip(greedy_rows, to_numpy(scores.argmax(axis=1)).tolist()):  # ties: the lowest id
            picked[b] = token
    if sampled_rows:
        rows = [samplers[b] for b in sampled_rows]
        scores = xp.stack([s.reshape_scores(logits[b]) for s, b in zip(rows, sampled_rows)])  # [S, V]
        temperatures = xp.asarray([s.params.temperature for s in rows], dtype=scores.dtype)  # [S]
        scores /= temperatures[:, None]  # [S, V], as apply_temperature on each row (in place: a fresh stack)
        scores = xp.stack([s.truncate(row) for s, row in zip(rows, scores)]) if any(s.truncates for s in rows) else scores
        for first, block in float64_blocks(scores):  # [b, V], b rows at a time
            block -= block.max(axis=1, keepdims=True)  # exp_shifted of each row, in place
            weights = to_numpy(xp.exp(block, out=block))  # [b, V]
            for row_weights, b in zip(weights, sampled_rows[first:first + len(block)]):
                picked[b] = draw(row_weights, samplers[b].rng)  # the one draw: each row's own generator, in row order
    return [s.choice(token, row) for s, token, row in zip(samplers, picked, logits)]


def sequence_rngs(seed: int | None, n: int) -> list[np.random.Generator]:
    """One independent generator per sample of a request; sample i depends only on (seed, i).

    >>> a, b = sequence_rngs(7, 2); a.random() != b.random()
    True
    """
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]
