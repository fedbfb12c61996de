"""An OpenAI-compatible HTTP server over the batching engine: `python -m tinyinfer serve`.

    python -m tinyinfer serve --port 8000
    curl localhost:8000/v1/completions -d '{"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0}'

Endpoints: GET /v1/models, GET /health, POST /v1/completions, POST /v1/chat/completions, with the request
fields and response shapes of the OpenAI API, so any OpenAI client can talk to it. Standard library only.

**One engine thread.** The LLM (tinyinfer/engine/llm.py) is not thread-safe, and it does not need to be:
exactly one thread, the engine thread, ever touches it. Each HTTP request gets its own handler thread
(ThreadingHTTPServer), which parses and checks the request, tokenizes it, and hands the engine a
`Submission` through a thread-safe queue (the inbox). The engine thread loops:

    wait on the inbox while there is no work (no busy loop)  ->  admit what arrived (add_request, abort)
    ->  one step() for every running request  ->  put each RequestOutput on its submission's own queue

Requests that arrive while others are running join them at the next step: that is continuous batching
(chapter 10), now fed by real clients. The handler threads only wait on their queues and write to sockets.

**Streaming.** With `"stream": true` the reply is Server-Sent Events: one `data: {json chunk}\\n\\n` per
piece of new text (the text an output gained since the last one), then `data: [DONE]\\n\\n`. Text only
grows, and the engine holds back anything a stop string might still cut, so the deltas joined equal the
non-streamed text.

**Abort on disconnect.** A client that goes away must not keep its blocks. The handler notices (a write
fails, or while waiting the socket reads end-of-file) and sends an abort through the inbox; the engine
thread calls `LLM.abort`, which frees the request's KV blocks before the next step.

Bad input is answered 400 with an OpenAI-style error body whose message is the TinyInferError text; a bug
is answered 500, and the engine thread carries on with the other requests.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import queue
import select
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tinyinfer.errors import TinyInferError
from tinyinfer.generation import check_fits, encode_prompt, resolve_params
from tinyinfer.sampling import SamplingParams

# request field -> SamplingParams field: OpenAI's names, then tinyinfer's (and vLLM's) extras
SAMPLING_FIELDS = {name: name for name in (
    "max_tokens", "temperature", "top_p", "n", "stop", "seed", "presence_penalty", "frequency_penalty",
    "logit_bias", "top_k", "min_p", "repetition_penalty", "stop_token_ids", "ignore_eos")}
SAMPLING_FIELDS["max_completion_tokens"] = "max_tokens"  # the chat API's newer name; it wins over max_tokens
OTHER_FIELDS = {"prompt", "messages", "model", "stream", "stream_options", "logprobs", "top_logprobs",  # read apart
                "user", "metadata", "store", "service_tier", "parallel_tool_calls"}  # no effect on the output
NO_OP_VALUES = {"echo": False, "best_of": 1, "suffix": "", "tools": [], "tool_choice": "none",
                "response_format": {"type": "text"}}  # accepted at these values only
TOOLS = "this server makes no tool calls"
UNSUPPORTED = {"tools": TOOLS, "tool_choice": TOOLS,  # fields that would change the output, and why they are refused
               "response_format": "the serving engine has no structured output yet (generate --json-schema has)"}
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length"}  # the engine's reasons -> OpenAI's
POLL_S = 0.25  # how often a waiting handler checks that its client is still connected


class RequestError(TinyInferError):
    """Bad input, with the HTTP status and the request field (`param`) to report."""

    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


class ClientGone(Exception):
    """The client closed its connection while its request was running."""


@dataclass
class Submission:
    """One HTTP request's work for the engine: a (request id, prompt ids, params) per prompt, and the queue on
    which the engine thread answers: first ACCEPTED or an exception, then RequestOutputs."""

    requests: list[tuple[str, list[int], SamplingParams]]
    events: queue.Queue = field(default_factory=queue.Queue)

    def keys(self) -> list[tuple[str, int]]:
        """(request id, sample index) of every choice, in the order of the response's `choices`."""
        return [(rid, i) for rid, _, params in self.requests for i in range(params.n)]


ACCEPTED = "accepted"  # the engine queued every request of a submission
STOP = None  # tells the engine thread to end


class Engine:
    """The one thread that owns the LLM. Other threads only `submit` and `abort`: their calls travel through
    the inbox as functions the engine thread runs between two steps."""

    def __init__(self, llm):
        self.llm = llm
        self.inbox: queue.Queue = queue.Queue()
        self.routes: dict[str, Submission] = {}  # running request id -> the submission waiting for it
        self.thread = threading.Thread(target=self._loop, name="tinyinfer-engine", daemon=True)
        self.thread.start()

    def submit(self, submission: Submission) -> None:
        self.inbox.put(lambda: self._admit(submission))

    def abort(self, submission: Submission) -> None:
        """Stop what is left of a submission: its blocks go back to the pool before the next step."""
        self.inbox.put(lambda: self._abort(submission))

    def stop(self) -> None:
        self.inbox.put(STOP)
        self.thread.join()

    def _loop(self) -> None:
        while True:
            calls = [] if self.llm.has_unfinished() else [self.inbox.get()]  # idle: sleep until work comes
            while not self.inbox.empty():
                calls.append(self.inbox.get())
            for call in calls:
                if call is STOP:
                    return
                call()
            if self.llm.has_unfinished():
                self._step()

    def _admit(self, submission: Submission) -> None:
        added = []
        try:
            for rid, prompt_ids, params in submission.requests:
                added.append(self.llm.add_request(prompt_ids, params, request_id=rid))
        except Exception as e:  # noqa: BLE001 - bad input (a 400), or a bug (a 500): the handler answers it
            for rid in added:
                self.llm.abort(rid)
            submission.events.put(e)
            return
        self.routes.update((rid, submission) for rid in added)
        submission.events.put(ACCEPTED)

    def _abort(self, submission: Submission) -> None:
        for rid, _, _ in submission.requests:
            self.llm.abort(rid)  # ids that already finished are ignored
            self.routes.pop(rid, None)

    def _step(self) -> None:
        try:
            outputs = self.llm.step()
            for out in outputs:
                self.routes[out.request_id].events.put(out)
            for out in outputs:  # a second pass: two samples of one request may finish in the same step
                if out.request_id not in self.llm.requests:  # all its samples finished
                    self.routes.pop(out.request_id, None)
        except Exception as e:  # noqa: BLE001 - a bug: fail the requests in flight, keep serving new ones
            for rid, submission in self.routes.items():
                self.llm.abort(rid)
                submission.events.put(e)
            self.routes.clear()


class Server(ThreadingHTTPServer):
    """The HTTP server and its engine. `serve_forever()` serves; `close()` stops both."""

    daemon_threads = True

    def __init__(self, llm, host: str = "127.0.0.1", port: int = 8000, model_name: str = "shakespeare",
                 chat_template=None):
        if llm.model.tokenizer is None:
            raise TinyInferError("the server reads and writes text: load the model with its tokenizer (tokenizer=PATH)")
        super().__init__((host, port), Handler)  # binds now: a port in use fails here, before any thread starts
        self.model, self.model_name, self.chat_template = llm.model, model_name, chat_template
        self.created = int(time.time())
        self.engine = Engine(llm)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server_close()
        self.engine.stop()


class Handler(BaseHTTPRequestHandler):
    """One HTTP request, on its own thread: parse, check, submit, then relay the engine's outputs."""

    server: Server

    def do_GET(self) -> None:
        self._route({"/v1/models": self._models, "/health": lambda: self._send_json(200, {"status": "ok"})})

    def do_POST(self) -> None:
        self._route({"/v1/completions": lambda: self._generate(chat=False),
                     "/v1/chat/completions": lambda: self._generate(chat=True)})

    def log_message(self, format, *args) -> None:
        pass  # no access log: the server prints one line when it starts, and errors go to the client

    def _route(self, routes: dict) -> None:
        self.streaming = False
        try:
            path = self.path.split("?")[0]
            if path not in routes:
                raise RequestError(f"no endpoint {self.command} {path}: this server has GET /v1/models, GET /health, "
                                   "POST /v1/completions and POST /v1/chat/completions", status=404)
            routes[path]()
        except (ClientGone, ConnectionError):
            self.close_connection = True
        except TinyInferError as e:
            self._send_error(getattr(e, "status", 400), str(e), getattr(e, "param", None))
        except Exception as e:  # noqa: BLE001 - a bug must not take the server down
            self._send_error(500, f"internal error ({type(e).__name__}: {e})", kind="internal_server_error")

    def _models(self) -> None:
        card = {"id": self.server.model_name, "object": "model", "created": self.server.created,
                "owned_by": "tinyinfer", "max_model_len": self.server.model.config.max_seq_len}
        self._send_json(200, {"object": "list", "data": [card]})

    def _generate(self, chat: bool) -> None:
        body = read_json(self.rfile, self.headers.get("Content-Length"))
        submission, (stream, include_usage) = make_submission(self.server, body, chat), stream_options(body)
        self.server.engine.submit(submission)
        try:
            events = self._events(submission)
            next(events)  # ACCEPTED, or the engine's refusal raised here, before any header is sent
            reply = Reply(chat, self.server.model_name, submission, self.server.model.tokenizer)
            if stream:
                self._stream(reply.chunks(events, include_usage))
            else:
                self._send_json(200, reply.whole(events))
        finally:
            self.server.engine.abort(submission)  # a no-op once finished; frees the blocks of a client that left

    def _events(self, submission: Submission):
        """The engine's answers: ACCEPTED, then RequestOutputs until every choice has finished. Raises the
        engine's error, or ClientGone when the client leaves meanwhile."""
        unfinished = set(submission.keys())
        while unfinished:
            try:
                event = submission.events.get(timeout=POLL_S)
            except queue.Empty:
                if self._client_gone():
                    raise ClientGone from None
                continue
            if isinstance(event, Exception):
                raise event
            if event is not ACCEPTED and event.finished:
                unfinished.discard((event.request_id, event.index))
            yield event

    def _client_gone(self) -> bool:
        """The client closed its end: its socket reads as end-of-file (peeked, so nothing is consumed)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _stream(self, chunks) -> None:
        """Server-Sent Events: a `data:` line per chunk, a blank line after each, and [DONE] at the end."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.streaming = True
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")  # a failed write: ClientGone's twin
        self.wfile.write(b"data: [DONE]\n\n")

    def _send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        """OpenAI's error body; once a stream has started, its last event instead of a status."""
        error = {"error": {"message": message, "type": kind, "param": param, "code": None}}
        try:
            if self.streaming:
                self.wfile.write(b"data: " + json.dumps(error).encode() + b"\n\n")
            else:
                self._send_json(status, error)
        except ConnectionError:
            self.close_connection = True


class Reply:
    """The OpenAI response bodies of one submission, whole or as stream chunks, built from its outputs."""

    def __init__(self, chat: bool, model_name: str, submission: Submission, tokenizer):
        self.chat, self.prompts, self.tokenizer = chat, [ids for _, ids, _ in submission.requests], tokenizer
        self.index = {key: i for i, key in enumerate(submission.keys())}  # (request id, sample) -> choice index
        kind = ("chatcmpl", "chat.completion") if chat else ("cmpl", "text_completion")
        self.head = {"id": f"{kind[0]}-{uuid.uuid4().hex}", "object": kind[1], "created": int(time.time()),
                     "model": model_name}

    def whole(self, outputs) -> dict:
        final = {(out.request_id, out.index): out for out in outputs if out.finished}
        choices = [self._choice(i, final[key].text, final[key].finish_reason, self._logprobs(final[key].logprobs))
                   for key, i in self.index.items()]
        return {**self.head, "choices": choices, "usage": self._usage(final.values())}

    def chunks(self, outputs, include_usage: bool):
        """Each output's new text as a chunk; a chat stream first says each choice's role."""
        head = {**self.head, "object": "chat.completion.chunk" if self.chat else "text_completion"}
        usage = {"usage": None} if include_usage else {}
        for i in self.index.values() if self.chat else []:
            yield {**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                        "finish_reason": None}], **usage}
        sent = dict.fromkeys(self.index, (0, 0))  # per choice: characters of text, and logprobs, sent so far
        final = []
        for out in outputs:
            key = (out.request_id, out.index)
            chars, tokens = sent[key]
            if out.text[chars:] or out.finished:  # logprobs ride along with text (the engine may hold text back)
                logprobs = self._logprobs(None if out.logprobs is None else out.logprobs[tokens:], offset=chars)
                choice = self._choice(self.index[key], out.text[chars:], out.finish_reason, logprobs, delta=True)
                yield {**head, "choices": [choice], **usage}
                sent[key] = (len(out.text), len(out.logprobs or ()))
            if out.finished:
                final.append(out)
        if include_usage:
            yield {**head, "choices": [], "usage": self._usage(final)}

    def _choice(self, index: int, text: str, reason: str | None, logprobs: dict | None, delta: bool = False) -> dict:
        if not self.chat:
            content = {"text": text}
        elif delta:
            content = {"delta": {"content": text} if text else {}}
        else:
            content = {"message": {"role": "assistant", "content": text}}
        return {"index": index, **content, "logprobs": logprobs, "finish_reason": FINISH_REASONS.get(reason, reason)}

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


# -- checking a request ------------------------------------------------------------------------------------------


def read_json(stream, length) -> dict:
    """The request body: a JSON object."""
    try:
        body = json.loads(stream.read(int(length or 0)) or b"null")
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError, so is a bad length
        raise RequestError(f"the request body is not valid JSON ({e}): send a JSON object") from None
    if not isinstance(body, dict):
        raise RequestError(f"the request body is a JSON {type(body).__name__}, not an object: send "
                           '{"prompt": ..., "max_tokens": ...}')
    return body


def make_submission(server: Server, body: dict, chat: bool) -> Submission:
    """The engine's work for a request body: each prompt's token ids with its SamplingParams."""
    model, max_seqs = server.model, server.engine.llm.scheduler.config.max_num_seqs
    if body.get("model") not in (None, server.model_name):
        raise RequestError(f"model {body['model']!r} is not served here: this server serves {server.model_name!r}",
                           "model", 404)
    prompts = chat_prompt(server, body.get("messages")) if chat else completion_prompts(model, body.get("prompt"))
    params = sampling_params(model, body, chat)
    if params.n > max_seqs:  # the samples of a request must be able to run at once
        raise RequestError(f"n={params.n} is more samples than the engine runs at once ({max_seqs}): lower n, or "
                           "serve with a larger --max-num-seqs", "n")
    given = body.get("max_tokens") is not None or body.get("max_completion_tokens") is not None
    return Submission([(f"{uuid.uuid4().hex}-{i}", ids, fit_max_tokens(model, ids, params, given))
                       for i, ids in enumerate(prompts)])


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
            raise RequestError(f"{name}={value!r} is not supported: "
                               f"{UNSUPPORTED.get(name, 'this server does not know it')}: leave it out", name)
        fields[SAMPLING_FIELDS[name]] = (value, name)
    if (logprobs := logprobs_wanted(body, chat)) is not None:
        fields["logprobs"] = (logprobs, "top_logprobs" if chat else "logprobs")
    for field_name, (value, name) in fields.items():
        try:
            SamplingParams(**{field_name: value})
        except TinyInferError as e:
            raise RequestError(str(e), name) from None
    return resolve_params(model, None, {field_name: value for field_name, (value, _) in fields.items()})


def logprobs_wanted(body: dict, chat: bool):
    """SamplingParams.logprobs: the completions API gives the number of alternatives (`logprobs`: 2), the chat
    API asks with `logprobs`: true and gives the number in `top_logprobs` (default 0)."""
    if not chat:
        return body.get("logprobs")
    wanted, top = body.get("logprobs") or False, body.get("top_logprobs")
    if not isinstance(wanted, bool):
        raise RequestError(f"logprobs={wanted!r} is invalid: in chat it is true or false (top_logprobs says how "
                           "many alternatives)", "logprobs")
    if top is not None and not wanted:
        raise RequestError("top_logprobs needs logprobs: true: set it, or leave top_logprobs out", "top_logprobs")
    return (0 if top is None else top) if wanted else None


def fit_max_tokens(model, prompt_ids: list[int], params: SamplingParams, given: bool) -> SamplingParams:
    """The params for one prompt: without an explicit max_tokens, the default shrinks to what the context
    window leaves (as vLLM does); then the prompt must fit."""
    if not given:
        room = model.config.max_seq_len - len(prompt_ids)
        params = dataclasses.replace(params, max_tokens=max(1, min(params.max_tokens, room)))
    check_fits(model, len(prompt_ids), params.max_tokens)
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


def completion_prompts(model, prompt) -> list[list[int]]:
    """Token ids of each prompt: `prompt` is a text, a list of token ids, or a batch (a list of either)."""
    if prompt is None:
        raise RequestError("prompt is missing: give a text, a list of token ids, or a list of either", "prompt")
    batch = isinstance(prompt, list) and bool(prompt) and all(isinstance(p, (str, list)) for p in prompt)
    try:
        return [encode_prompt(model, p) for p in (prompt if batch else [prompt])]
    except TinyInferError as e:
        raise RequestError(f"{e} (prompt is a text, a list of token ids, or a list of either)", "prompt") from None


def chat_prompt(server: Server, messages) -> list[list[int]]:
    """The conversation rendered by the model's chat template: one prompt's token ids."""
    if server.chat_template is None:
        raise RequestError(f"the model {server.model_name!r} has no chat template (no chat_template in its "
                           "tokenizer_config.json): use /v1/completions, or serve a chat model", "messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(f"messages={messages!r:.60} is invalid: give a non-empty list of "
                           '{"role": ..., "content": ...} objects', "messages")
    messages = [{**m, "content": message_text(m.get("content"))} if isinstance(m, dict) else m for m in messages]
    try:
        text = server.chat_template.render(messages, add_generation_prompt=True)
        return [encode_prompt(server.model, text, add_special_tokens=False)]  # the template holds its special tokens
    except TinyInferError as e:
        raise RequestError(str(e), "messages") from None


def message_text(content) -> str | None:
    """A message's content as text: a string, or OpenAI's list of parts of which only text ones are served."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and
                                         isinstance(p.get("text"), str) for p in content):
        return "\n".join(p["text"] for p in content)
    raise RequestError(f"message content {content!r:.60} is invalid: give a string or a list of "
                       '{"type": "text", "text": ...} parts (this server reads text only)', "messages")
