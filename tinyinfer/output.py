"""Finishing one sample's output, token by token: the same rules for `model.generate` and the serving engine.

Each sampled token goes through one `OutputProcessor`, which decides what the user sees and when it ends:

    an end token (EOS, unless ignore_eos; or one of stop_token_ids)  -> finished ("eos" / "stop"), not kept
    else: kept (with its logprobs when asked), its text through the streaming detokenizer (whole characters
          only) and then the stop matcher (text a stop string may still claim is held back)
    a stop string completed                                          -> finished ("stop"), the text cut there
    `finish(reason)` (max_tokens reached: "length"; "abort")         -> the held-back text flushed: the
                                                                        detokenizer's last bytes may still
                                                                        complete a stop string

    >>> from tinyinfer.sampling import SamplingParams, TokenChoice
    >>> out = OutputProcessor(SamplingParams(max_tokens=5), enders={2})
    >>> [out.push(TokenChoice(t, 0.0)) for t in (7, 8, 2)], out.token_ids, out.finish_reason, out.stop_token
    (['', '', ''], [7, 8], 'eos', 2)
"""

from __future__ import annotations

from tinyinfer.sampling import SamplingParams, TokenChoice
from tinyinfer.stopping import StopMatcher
from tinyinfer.tokenizer import StreamingDetokenizer


class OutputProcessor:
    """One sample's output so far: its tokens, its text, its logprobs, and why it finished (None: not yet)."""

    def __init__(self, params: SamplingParams, enders: set[int], tokenizer=None, prompt_ids: list[int] = ()):
        self.params, self.enders = params, enders
        # with a tokenizer: the text (which continues the prompt's), as whole characters, cut before a stop string
        self.detokenizer = None if tokenizer is None else StreamingDetokenizer(tokenizer, context=prompt_ids)
        self.stop_matcher = None if tokenizer is None else StopMatcher(params.stop)
        self.token_ids: list[int] = []  # the output: without the end token that finished it
        self.logprobs: list[TokenChoice] | None = [] if params.logprobs is not None else None  # one per token id
        self.text = ""
        self.finish_reason: str | None = None  # "eos" | "stop" | "length" | "abort"
        self.stop_token: int | None = None  # the end token that finished it (sampled, not part of the output)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def stop_string(self) -> str | None:
        """The stop string that ended the text, if one did."""
        return None if self.stop_matcher is None else self.stop_matcher.stop_string

    def push(self, choice: TokenChoice) -> str:
        """Take one sampled token; return the text it adds to what the user sees (maybe "")."""
        token = choice.token_id
        if token in self.enders:
            self.stop_token = token
            return self.finish("stop" if token in self.params.stop_token_ids else "eos")
        self.token_ids.append(token)
        if self.logprobs is not None:
            self.logprobs.append(choice)
        if self.stop_matcher is None:
            return ""
        piece = self.stop_matcher.push(self.detokenizer.push(token))  # whole characters, minus a stop prefix
        self.text += piece
        if self.stop_matcher.stopped:
            self.finish_reason = "stop"
        return piece

    def finish(self, reason: str) -> str:
        """End the output for `reason`; return the text held back until now (then shown), which a stop string
        completed by the detokenizer's last bytes may still cut (the reason is "stop" then)."""
        tail, matcher = "", self.stop_matcher
        if matcher is not None and not matcher.stopped:
            tail = matcher.push(self.detokenizer.flush())
            reason = "stop" if matcher.stopped else reason
            tail += matcher.flush()
        self.text += tail
        self.finish_reason = reason
        return tail
