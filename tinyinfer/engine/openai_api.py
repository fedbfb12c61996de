"""The OpenAI API's side of the server (tinyinfer/engine/server.py): request bodies in, token ids and
SamplingParams out; RequestOutputs in, response bodies and stream chunks out. Plain functions over dicts,
with no threads and no sockets. The server is seen only through `Served` (what it serves and its limits), so
this module sits below the HTTP layer and imports nothing of it.

Limits, each a 400 naming the field before any work: at most MAX_STOP_STRINGS stop strings of at most
MAX_STOP_CHARS characters; n up to the samples the engine runs at once; logprobs and top_logprobs up to
MAX_LOGPROBS; and a text prompt is measured before it is tokenized: no token is longer than the vocabulary's
longest, so a text of more bytes than max_model_len such tokens cannot fit, and is refused without running the
tokenizer over it.

Each knob of a request has its OpenAI name and meaning and maps onto a SamplingParams field; a knob left
out takes the checkpoint's generation_config.json value, as `generate` does:

    {"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0.8, "stop": "\\n\\n", "seed": 1}
    -> SamplingParams(max_tokens=30, temperature=0.8, stop=["\\n\\n"], seed=1, top_k=50)   # shakespeare's top_k

`model` picks the LoRA adapter (chapter 13) as vLLM does: the served model's name runs without one, an
adapter's name (`serve --lora NAME=PATH`) runs with it, and the response reports the name asked for.

A field with no effect on the output (`user`, `metadata`) is ignored; one that would change the output and
that tinyinfer cannot honour (`echo`, `best_of`, `suffix`) is refused, never silently dropped.

Structured output maps onto tinyinfer's constraints (tinyinfer/constrain/), compiled here on the handler's
thread (so a schema the compiler refuses is a 400 naming the keyword, before any work) and handed to the
engine as a function making a fresh grammar state per sample:

    "response_format": {"type": "json_object"}                           -> build_constraint("json", "object")
    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {...}}}  -> "json_schema"
    "guided_json": {...}, "guided_regex": "...", "guided_choice": [...], "guided_grammar": "..."   (vLLM's)
    "tools": [...], "tool_choice": "required" | {"type": "function", "function": {"name": ...}} | "auto"

A tool call is the JSON object {"name": ..., "arguments": {...}} (tinyinfer/constrain/tools.py), returned as
the message's `tool_calls` with finish_reason "tool_calls"; with "parallel_tool_calls" (true unless the request
says false, as in OpenAI's API) the reply may instead be a JSON array of calls, each one entry of `tool_calls`.
"required" and a named function force a call; "auto" (the default when tools are given) lets the model answer
in text instead (any reply not starting like a call, with `{` or `[`); "none" is text only.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import threading
import time
import uuid
from typing import Protocol

from tinyinfer.constrain import (
    Constraint,
    build_constraint,
    parse_tool_calls,
    tool_call_grammar,
)
from tinyinfer.constrain.tools import ToolCallStream, calls_so_far, tool_functions
from tinyinfer.errors import TinyInferError
from tinyinfer.generation import constraint_vocabulary, encode_prompt, resolve_params
from tinyinfer.sampling import SamplingParams

MAX_STOP_STRINGS = 16  # OpenAI allows 4; vLLM any number: each one is matched against every new piece of text
MAX_STOP_CHARS = 256  # the text a stop string holds back is as long as the longest one
MAX_LOGPROBS = 20  # alternatives per token (OpenAI's top_logprobs limit, vLLM's default max_logprobs)

# request field -> SamplingParams field: OpenAI's names, then tinyinfer's (and vLLM's) extras
SAMPLING_FIELDS = {name: name for name in (
    "max_tokens", "temperature", "top_p", "n", "stop", "seed", "presence_penalty", "frequency_penalty",
    "logit_bias", "top_k", "min_p", "repetition_penalty", "stop_token_ids", "ignore_eos")}
SAMPLING_FIELDS["max_completion_tokens"] = "max_tokens"  # the chat API's newer name; it wins over max_tokens
GUIDED_FIELDS = {"guided_json": ("json_schema", (dict, bool, str)), "guided_regex": ("regex", str),  # vLLM's:
                 "guided_choice": ("choice", list), "guided_grammar": ("grammar", str)}  # -> (kind, JSON type)
OTHER_FIELDS = {"prompt", "messages", "model", "stream", "stream_options", "logprobs", "top_logprobs",  # read apart
                "response_format", "tools", "tool_choice", "parallel_tool_calls", *GUIDED_FIELDS,
                "cache_salt", "user", "metadata", "store", "service_tier"}  # the last four: no effect on the output
NO_OP_VALUES = {"echo": False, "best_of": 1, "suffix": ""}  # accepted at these values only
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length"}  # the engine's reasons -> OpenAI's
_COMPILING = threading.Lock()  # worker threads compile constraints; the constraint caches are plain dicts


class Served(Protocol):
    """What the server serves, as this module needs it: the model (with its tokenizer), its name in the API,
    its chat template (None: no chat), the LoRA adapters loaded on it (name -> where from), the samples the
    engine runs at once, and the context window served (at most the model's)."""

    model: object
    model_name: str
    chat_template: object
    adapters: dict[str, str]
    max_num_seqs: int
    max_model_len: int


class RequestError(TinyInferError):
    """Bad input, with the HTTP status and the request field (`param`) to report."""

    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


def parse_json(data: bytes) -> dict:
    """The request body: a JSON object."""
    try:
        body = json.loads(data) if data else None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # bad JSON, or nesting too deep
        raise RequestError(f"the request body is not valid JSON ({e}): send a JSON object") from None
    if not isinstance(body, dict):
        what = "empty" if body is None else f"a JSON {type(body).__name__}"
        raise RequestError(f"the request body is {what}, not an object: send {{\"prompt\": ..., ...}} with a "
                           "Content-Length header")
    return body


def engine_requests(served: Served, body: dict, chat: bool) -> list[tuple[str, list[int], SamplingParams, object]]:
    """The engine's work for a request body: a fresh request id, the token ids, the SamplingParams and the
    constraint maker (None: free text) of each prompt (a chat request has one)."""
    model, max_seqs = served.model, served.max_num_seqs
    params = sampling_params(model, body, chat)  # first: cheap checks before any tokenizing or compiling
    if params.n > max_seqs:  # the samples of a request must be able to run at once
        raise RequestError(f"n={params.n} is more samples than the engine runs at once ({max_seqs}): lower n, or "
                           "serve with a larger --max-num-seqs", "n")
    make_constraint = output_constraint(served, body, chat)  # before the prompt: it checks the tools the template shows
    prompts = (chat_prompt(served, body.get("messages"), body.get("tools") or None) if chat
               else completion_prompts(served, body.get("prompt")))
    if len(prompts) * params.n > max_seqs:
        raise RequestError(f"{len(prompts)} prompts x n={params.n} is more sequences than the engine runs at once "
                           f"({max_seqs}): send fewer prompts per request", "prompt")
    given = body.get("max_tokens") is not None or body.get("max_completion_tokens") is not None
    return [(f"{uuid.uuid4().hex}-{i}", ids, fit_max_tokens(served, ids, params, given), make_constraint)
            for i, ids in enumerate(prompts)]


def requested_adapter(served: Served, body: dict) -> str | None:
    """The LoRA adapter the request's `model` asks for, as vLLM serves adapters: each one is a model of its own
    name, and the served model's name (or no `model`) means no adapter. Any other name is a 404."""
    name = body.get("model")
    if name in (None, served.model_name):
        return None
    if isinstance(name, str) and name in served.adapters:
        return name
    names = ", ".join(map(repr, [served.model_name, *served.adapters]))
    raise RequestError(f"model {name!r} is not served here: this server serves {names}", "model", 404)


def cache_salt(body: dict) -> str | None:
    """vLLM's `cache_salt`: requests share prefix-cache blocks only with requests of the same salt."""
    salt = body.get("cache_salt")
    if salt is not None and not (isinstance(salt, str) and salt):
        raise RequestError(f"cache_salt={salt!r:.40} is invalid: give a non-empty string, or leave it out to share "
                           "the prefix cache", "cache_salt")
    return salt


def sampling_params(model, body: dict, chat: bool) -> SamplingParams:
    """The request's SamplingParams: the fields it gives over the model's generation_config.json defaults.
    Every field is checked alone first, so an error names the field (`param`) it came from."""
    fields, newer = {}, body.get("max_completion_tokens") is not None  # SamplingParams field -> (value, request field)
    for name, value in body.items():
        if value is None or name in OTHER_FIELDS or (name == "max_tokens" and newer):
            continue  # null means "not given", as in the OpenAI API
        if name in NO_OP_VALUES and type(value) is type(NO_OP_VALUES[name]) and value == NO_OP_VALUES[name]:
            continue
        if name not in SAMPLING_FIELDS:
            raise RequestError(f"{name}={value!r} is not supported: this server does not know it: leave it out", name)
        fields[SAMPLING_FIELDS[name]] = (value, name)
    if (logprobs := logprobs_wanted(body, chat)) is not None:
        fields["logprobs"] = (logprobs, "top_logprobs" if chat else "logprobs")
    for field_name, (value, name) in fields.items():
        try:
            SamplingParams(**{field_name: value})
        except TinyInferError as e:
            raise RequestError(str(e), name) from None
    check_limits({field_name: value for field_name, (value, _) in fields.items()},
                 {field_name: name for field_name, (_, name) in fields.items()})
    return resolve_params(model, None, {field_name: value for field_name, (value, _) in fields.items()})


def check_limits(fields: dict, names: dict) -> None:
    """The server's bounds on valid SamplingParams values (`names`: the request field each came from)."""
    stop = fields.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise RequestError(f"stop has {len(stops)} strings of up to {max(map(len, stops))} characters: this server "
                           f"takes at most {MAX_STOP_STRINGS} of at most {MAX_STOP_CHARS}", names["stop"])
    if (fields.get("logprobs") or 0) > MAX_LOGPROBS:
        raise RequestError(f"{names['logprobs']}={fields['logprobs']} asks for more alternatives per token than the "
                           f"{MAX_LOGPROBS} this server gives: lower it", names["logprobs"])


def logprobs_wanted(body: dict, chat: bool):
    """SamplingParams.logprobs: the completions API gives the number of alternatives (`logprobs`: 2), the chat
    API asks with `logprobs`: true and gives the number in `top_logprobs` (default 0).

    >>> logprobs_wanted({"logprobs": 2}, chat=False), logprobs_wanted({"logprobs": True}, chat=True)
    (2, 0)
    """
    if not chat:
        if body.get("top_logprobs") is not None:
            raise RequestError("top_logprobs is a chat field: in completions, logprobs=N asks for N alternatives",
                               "top_logprobs")
        return body.get("logprobs")
    wanted, top = body.get("logprobs") or False, body.get("top_logprobs")
    if not isinstance(wanted, bool):
        raise RequestError(f"logprobs={wanted!r} is invalid: in chat it is true or false (top_logprobs says how "
                           "many alternatives)", "logprobs")
    if top is not None and not wanted:
        raise RequestError("top_logprobs needs logprobs: true: set it, or leave top_logprobs out", "top_logprobs")
    return (0 if top is None else top) if wanted else None


def output_constraint(served: Served, body: dict, chat: bool):
    """A function making a fresh constraint per sample for the structure the request asks for, or None.
    The grammar is compiled here, once (later requests with the same spec find it in build_constraint's cache);
    each sample then gets its own Constraint, its own position in that grammar."""
    asked = requested_structure(body, chat)
    if asked is None:
        return None
    kind, spec, field = asked
    try:
        with _COMPILING:
            compiled = build_constraint(kind, spec, constraint_vocabulary(served.model))
    except TinyInferError as e:  # a malformed schema, or a keyword or pattern the compiler cannot express
        raise RequestError(str(e), field) from None
    return functools.partial(Constraint, compiled.masker)


def requested_structure(body: dict, chat: bool) -> tuple[str, object, str] | None:
    """(build_constraint kind, spec, request field) of the structure the request asks for, or None for text.

    >>> requested_structure({"response_format": {"type": "json_object"}}, chat=True)
    ('json', 'object', 'response_format')
    """
    asked = []
    if (spec := response_format_spec(body.get("response_format"))) is not None:
        asked.append((*spec, "response_format"))
    for name, (kind, json_type) in GUIDED_FIELDS.items():
        if (value := body.get(name)) is not None:
            if not isinstance(value, json_type):
                raise RequestError(f"{name}={value!r:.60} is invalid: give a {kind} spec (see the vLLM API)", name)
            if kind == "json_schema" and isinstance(value, str):  # JSON text; never a path on the server
                try:
                    value = json.loads(value)
                except json.JSONDecodeError as e:
                    raise RequestError(f"{name} is not valid JSON ({e}): give a JSON Schema", name) from None
            asked.append((kind, value, name))
    if (tools := tool_choice(body, chat)) is not None:
        offered, text_allowed = tools
        grammar = tool_call_grammar(offered, allow_text=text_allowed, parallel=parallel_tool_calls(body))
        asked.append(("grammar", str(grammar), "tools"))
    if len(asked) > 1:
        raise RequestError(f"{' and '.join(field for _, _, field in asked)} each constrain the output: give one",
                           asked[1][2])
    return asked[0] if asked else None


def response_format_spec(response_format) -> tuple[str, object] | None:
    """OpenAI's response_format as (build_constraint kind, spec); None for plain text (or none given). `strict`
    needs nothing: the output always follows the schema."""
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if response_format is None or kind == "text":
        return None
    if kind == "json_object":
        return "json", "object"
    json_schema = response_format.get("json_schema") if kind == "json_schema" else None
    if isinstance(json_schema, dict) and isinstance(json_schema.get("schema"), (dict, bool)):
        return "json_schema", json_schema["schema"]
    raise RequestError(f"response_format={response_format!r:.80} is invalid: give {{\"type\": \"text\"}}, "
                       '{"type": "json_object"}, or {"type": "json_schema", "json_schema": {"name": ..., '
                       '"schema": {...}}}', "response_format")


def tool_choice(body: dict, chat: bool) -> tuple[list[dict], bool] | None:
    """(the tools the reply may call, whether it may be text instead), from `tools` and `tool_choice`; None
    when the reply is text only ("none", or no tools)."""
    tools, choice = body.get("tools") or [], body.get("tool_choice")
    if not chat and (tools or choice is not None):
        raise RequestError("tools are offered in chat: use /v1/chat/completions", "tools")
    if not isinstance(tools, list):
        raise RequestError(f"tools={tools!r:.60} is invalid: give a list of {{\"type\": \"function\", \"function\": "
                           '{"name": ..., "parameters": {...}}}', "tools")
    try:
        names = list(tool_functions(tools)) if tools else []  # checked even with "none": the template shows them
    except TinyInferError as e:
        raise RequestError(str(e), "tools") from None
    choice = ("auto" if tools else "none") if choice is None else choice
    if choice == "none":
        return None
    if not tools:
        raise RequestError(f"tool_choice={choice!r} needs tools: give the tools it may call", "tool_choice")
    if choice in ("auto", "required"):
        return tools, choice == "auto"
    function = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    if name is None:
        raise RequestError(f"tool_choice={choice!r:.80} is invalid: give \"none\", \"auto\", \"required\" or "
                           '{"type": "function", "function": {"name": ...}}', "tool_choice")
    if name not in names:
        raise RequestError(f"tool_choice names the function {name!r}, which is not among the tools {names}",
                           "tool_choice")
    return [tools[names.index(name)]], False


def parallel_tool_calls(body: dict) -> bool:
    """OpenAI's `parallel_tool_calls`: whether one reply may call several tools (true when not given)."""
    value = body.get("parallel_tool_calls")
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"parallel_tool_calls={value!r:.40} is invalid: give true or false", "parallel_tool_calls")
    return value is not False


def fit_max_tokens(served: Served, prompt_ids: list[int], params: SamplingParams, given: bool) -> SamplingParams:
    """The params for one prompt: without an explicit max_tokens, the default shrinks to what the context
    window served (max_model_len) leaves (as vLLM does); then the prompt must fit."""
    limit, n_prompt = served.max_model_len, len(prompt_ids)
    if not given:
        params = dataclasses.replace(params, max_tokens=max(1, min(params.max_tokens, limit - n_prompt)))
    if n_prompt + params.max_tokens > limit:
        raise RequestError(f"prompt ({n_prompt} tokens) + max_tokens ({params.max_tokens}) = "
                           f"{n_prompt + params.max_tokens} exceeds the context window of {limit} tokens this server "
                           "serves (max_model_len): shorten the prompt or lower max_tokens")
    return params


def stream_options(body: dict) -> tuple[bool, bool]:
    """Whether to stream, and whether the stream ends with a usage chunk (stream_options.include_usage)."""
    stream, options = body.get("stream") or False, body.get("stream_options") or {}
    if not isinstance(stream, bool):
        raise RequestError(f"stream={stream!r} is invalid: stream must be true or false", "stream")
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise RequestError(f"stream_options={options!r} is invalid: give {{\"include_usage\": true}} or leave it out",
                           "stream_options")
    return stream, options.get("include_usage", False)


def completion_prompts(served: Served, prompt) -> list[list[int]]:
    """Token ids of each prompt: `prompt` is a text, a list of token ids, or a batch (a list of either)."""
    if prompt is None:
        raise RequestError("prompt is missing: give a text, a list of token ids, or a list of either", "prompt")
    batch = isinstance(prompt, list) and bool(prompt) and all(isinstance(p, (str, list)) for p in prompt)
    prompts = prompt if batch else [prompt]
    if len(prompts) > served.max_num_seqs:
        raise RequestError(f"{len(prompts)} prompts in one request: this server runs at most {served.max_num_seqs} "
                           "sequences at once: send fewer", "prompt")
    try:
        return [encode_prompt(served.model, check_text_fits(served, p, "prompt")) for p in prompts]
    except TinyInferError as e:
        raise RequestError(f"{e} (prompt is a text, a list of token ids, or a list of either)", "prompt") from None


def check_text_fits(served: Served, text, field: str):
    """Refuse, before tokenizing it, a text that cannot fit the context window: every token stands for at most
    `longest_token_bytes` bytes, so a text of more bytes than max_model_len such tokens has too many tokens.
    Anything but a string passes through (token ids are counted as they are)."""
    if isinstance(text, str) and len(text) > served.max_model_len:  # a character is at least one byte
        size, longest = len(text.encode("utf-8", "surrogatepass")), longest_token_bytes(served.model.tokenizer)
        if size > served.max_model_len * longest:
            raise RequestError(f"the {field} is {size} bytes: more than the {served.max_model_len} tokens of the "
                               f"context window can hold (no token is longer than {longest} bytes): shorten it",
                               field)
    return text


@functools.lru_cache(maxsize=8)
def longest_token_bytes(tokenizer) -> int:
    """The most bytes of text one token id stands for, over the whole vocabulary (special tokens included)."""
    return max(len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size))


def chat_prompt(served: Served, messages, tools: list | None = None) -> list[list[int]]:
    """The conversation (and the tools offered, for templates that show them) rendered by the model's chat
    template: one prompt's token ids."""
    if served.chat_template is None:
        raise RequestError(f"the model {served.model_name!r} has no chat template (no chat_template in its "
                           "tokenizer_config.json): use /v1/completions, or serve a chat model", "messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(f"messages={messages!r:.60} is invalid: give a non-empty list of "
                           '{"role": ..., "content": ...} objects', "messages")
    messages = [{**m, "content": message_text(m.get("content"))} if isinstance(m, dict) else m for m in messages]
    try:
        text = check_text_fits(served, served.chat_template.render(messages, add_generation_prompt=True, tools=tools),
                               "messages")
        return [encode_prompt(served.model, text, add_special_tokens=False)]  # the template holds its special tokens
    except TinyInferError as e:
        raise RequestError(str(e), "messages") from None


def message_text(content) -> str | None:
    """A message's content as text: a string, or OpenAI's list of parts of which only text ones are served.

    >>> message_text([{"type": "text", "text": "Hail,"}, {"type": "text", "text": "Caesar"}])
    'Hail,\\nCaesar'
    """
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and
                                         isinstance(p.get("text"), str) for p in content):
        return "\n".join(p["text"] for p in content)
    raise RequestError(f"message content {content!r:.60} is invalid: give a string or a list of "
                       '{"type": "text", "text": ...} parts (this server reads text only)', "messages")


def _call(name: str, arguments: str) -> dict:
    """OpenAI's `tool_calls` entry of a call: a fresh id, its name, its arguments (so far, when streamed)."""
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": arguments}}


class Reply:
    """The OpenAI response bodies of one submission's requests, whole or as stream chunks, from its outputs.
    With `tools` (those the reply may call) a finished reply that is a call becomes the message's tool_calls;
    streamed, each call is sent as OpenAI streams one (`ToolCallStream`): its id and name once the name is
    complete, then its arguments as they grow. A reply whose first character shows it is text streams as text."""

    def __init__(self, chat: bool, model_name: str, requests: list, tokenizer, tools: list | None = None):
        self.chat, self.prompts, self.tokenizer = chat, [ids for _, ids, _, _ in requests], tokenizer
        self.tools = tools
        keys = [(rid, i) for rid, _, params, _ in requests for i in range(params.n)]
        self.index = {key: i for i, key in enumerate(keys)}  # (request id, sample) -> choice index
        kind = ("chatcmpl", "chat.completion") if chat else ("cmpl", "text_completion")
        self.head = {"id": f"{kind[0]}-{uuid.uuid4().hex}", "object": kind[1], "created": int(time.time()),
                     "model": model_name}

    def whole(self, outputs) -> dict:
        final = {(out.request_id, out.index): out for out in outputs if out.finished}
        choices = [self._choice(i, final[key].text, final[key].finish_reason, self._logprobs(final[key].logprobs))
                   for key, i in self.index.items()]
        return {**self.head, "choices": choices, "usage": self._usage(final.values())}

    async def chunks(self, outputs, include_usage: bool):
        """Each output's new text as a chunk (`outputs`: an async iterator); a chat stream first says each
        choice's role."""
        head = {**self.head, "object": "chat.completion.chunk" if self.chat else "text_completion"}
        usage = {"usage": None} if include_usage else {}
        for i in self.index.values() if self.chat else []:
            yield {**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                        "finish_reason": None}], **usage}
        sent = dict.fromkeys(self.index, (0, 0))  # per choice: characters of text, and logprobs, sent so far
        calls = {key: ToolCallStream() for key in self.index} if self.tools is not None else {}
        final = []
        async for out in outputs:
            key = (out.request_id, out.index)
            chars, tokens = sent[key]
            as_calls = key in calls and not ToolCallStream.is_text(out.text)  # calls, or not known yet: held as such
            pieces = [{"index": i, **(_call(name, more) if name else {"function": {"arguments": more}})}
                      for i, name, more in calls[key].push(out.text)] if as_calls else []  # a new call, or more of one
            if out.finished:
                final.append(out)
            elif not (pieces or (out.text[chars:] and not as_calls)):
                continue  # nothing to send yet: the logprobs wait for the next piece
            logprobs = self._logprobs(None if out.logprobs is None else out.logprobs[tokens:], offset=chars)
            if as_calls:
                reason = self._message(out.text, out.finish_reason)[1] if out.finished else None
                choice = {"index": self.index[key], "delta": {"tool_calls": pieces} if pieces else {},
                          "logprobs": logprobs, "finish_reason": reason}
            else:
                choice = self._choice(self.index[key], out.text[chars:], out.finish_reason, logprobs, delta=True)
            yield {**head, "choices": [choice], **usage}
            sent[key] = (len(out.text), len(out.logprobs or ()))
        if include_usage:
            yield {**head, "choices": [], "usage": self._usage(final)}

    def _choice(self, index: int, text: str, reason: str | None, logprobs: dict | None, delta: bool = False) -> dict:
        if not self.chat:
            return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": FINISH_REASONS.get(reason, reason)}
        message, reason = self._message(text, reason)
        content = {"delta": {"content": text} if text else {}} if delta else {"message": {"role": "assistant", **message}}
        return {"index": index, **content, "logprobs": logprobs, "finish_reason": reason}

    def _message(self, text: str, reason: str | None) -> tuple[dict, str | None]:
        """A chat reply's message fields and OpenAI finish reason: finished calls of the tools become
        `tool_calls` (arguments as the JSON text the model wrote) with finish_reason "tool_calls"; anything else
        is content."""
        if self.tools is not None and reason in ("eos", "stop") and self._calls_tools(text):
            return {"content": None, "tool_calls": [_call(*call) for call in calls_so_far(text)]}, "tool_calls"
        return {"content": text}, FINISH_REASONS.get(reason, reason)

    def _calls_tools(self, text: str) -> bool:
        """Whether a finished reply is calls of the tools, each naming one and giving an object of arguments."""
        try:
            return bool(parse_tool_calls(text, self.tools)[1])
        except TinyInferError:  # cut short, or with tool_choice "auto" text that only starts like a call
            return False

    def _logprobs(self, choices, offset: int = 0) -> dict | None:
        """OpenAI's logprobs of some tokens (TokenChoices, or None when not asked): chat's `content` list, or the
        completions API's lists (`text_offset` counts from `offset`, the characters of text before them)."""
        if choices is None:
            return None
        text = {i: self.tokenizer.token_bytes(i).decode("utf-8", "replace")
                for c in choices for i in [c.token_id] + [i for i, _ in c.top_logprobs]}
        if self.chat:
            def entry(i, logprob):
                return {"token": text[i], "logprob": logprob, "bytes": list(self.tokenizer.token_bytes(i))}
            return {"content": [{**entry(c.token_id, c.logprob), "top_logprobs": [entry(*t) for t in c.top_logprobs]}
                                for c in choices]}
        tokens = [text[c.token_id] for c in choices]
        return {"tokens": tokens, "token_logprobs": [c.logprob for c in choices],
                "top_logprobs": [{text[i]: logprob for i, logprob in c.top_logprobs} for c in choices],
                "text_offset": list(itertools.accumulate(map(len, tokens), initial=offset))[:-1]}

    def _usage(self, finals) -> dict:
        """Prompt tokens count once per prompt (not per sample); completion tokens as model.generate counts them."""
        prompt, completion = sum(map(len, self.prompts)), sum(len(out.token_ids) for out in finals)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
