"""An OpenAI-compatible HTTP server over the batching engine: `python -m tinyinfer serve`.

    python -m tinyinfer serve --port 8000
    curl localhost:8000/v1/completions -d '{"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0}'

Endpoints: GET /v1/models, GET /health, POST /v1/completions, POST /v1/chat/completions, with the request
fields and response shapes of the OpenAI API (translated in tinyinfer/engine/openai_api.py), so any OpenAI
client can talk to it. Standard library only: http.server, threading, queue, json.

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

**Structured output.** `response_format`, vLLM's `guided_*` fields and chat `tools` become a constraint
(openai_api.py), compiled on the handler thread; the engine gives each sample its own grammar state.

**LoRA adapters.** Each adapter loaded on the model (tinyinfer/lora.py) is served as a model of its own name,
listed by GET /v1/models with the base model as its `parent`; a request naming it in `model` runs with it,
in the same batches as the others (vLLM's `--lora-modules` convention).

Bad input is answered 400 with an OpenAI-style error body whose message is the TinyInferError text; a bug
is answered 500, and the engine thread carries on with the other requests.
"""

from __future__ import annotations

import contextlib
import json
import queue
import selectors
import socket
import traceback
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tinyinfer.engine.openai_api import (
    Reply,
    RequestError,
    cache_salt,
    engine_requests,
    read_json,
    requested_adapter,
    stream_options,
    tool_choice,
)
from tinyinfer.errors import TinyInferError
from tinyinfer.lora import check_adapter
from tinyinfer.sampling import SamplingParams

POLL_S = 0.25  # how long a handler waits for the engine before it checks that its client is still there


class ClientGone(Exception):
    """The client closed its connection while its request was running."""


@dataclass
class Submission:
    """One HTTP request's work for the engine: a (request id, prompt ids, params, constraint maker) per prompt,
    the LoRA adapter they all run with (None: the base model), and the queue on which the engine thread
    answers: first ACCEPTED or an exception, then RequestOutputs."""

    requests: list[tuple[str, list[int], SamplingParams, object]]
    lora: str | None = None
    cache_salt: str | None = None
    events: queue.Queue = field(default_factory=queue.Queue)

    def keys(self) -> list[tuple[str, int]]:
        """(request id, sample index) of every choice, in the order of the response's `choices`."""
        return [(rid, i) for rid, _, params, _ in self.requests for i in range(params.n)]


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
                self._guarded(call)
            if self.llm.has_unfinished():
                self._guarded(self._step)

    def _guarded(self, call) -> None:
        """Run one call of the loop; a bug in it fails the requests in flight, and the thread keeps serving."""
        try:
            call()
        except Exception as e:  # noqa: BLE001 - a bug: the engine thread must outlive it, or every request hangs
            traceback.print_exc()  # the server's log: the client only gets a 500 with the message
            routes, self.routes = self.routes, {}
            for submission in routes.values():
                submission.events.put(e)  # first unblock every handler waiting on a request in flight
            for rid in routes:
                with contextlib.suppress(Exception):  # best effort: the engine's state may be what failed
                    self.llm.abort(rid)

    def _admit(self, submission: Submission) -> None:
        added = []
        try:
            for rid, prompt_ids, params, make_constraint in submission.requests:
                added.append(self.llm.add_request(prompt_ids, params, request_id=rid, lora=submission.lora,
                                                   constraint=make_constraint, cache_salt=submission.cache_salt))
        except Exception as e:  # noqa: BLE001 - bad input (a 400), or a bug (a 500): the handler answers it
            for rid in added:
                self.llm.abort(rid)
            submission.events.put(e)
            return
        self.routes.update((rid, submission) for rid in added)
        submission.events.put(ACCEPTED)

    def _abort(self, submission: Submission) -> None:
        for rid, *_ in submission.requests:
            self.llm.abort(rid)  # ids that already finished are ignored
            self.routes.pop(rid, None)

    def _step(self) -> None:
        outputs = self.llm.step()
        for out in outputs:
            self.routes[out.request_id].events.put(out)
        for out in outputs:  # a second pass: two samples of one request may finish in the same step
            if out.request_id not in self.llm.requests:  # all its samples finished
                self.routes.pop(out.request_id, None)


class Server(ThreadingHTTPServer):
    """The HTTP server and its engine. `serve_forever()` serves; `close()` stops both. `adapters`: the LoRA
    adapters loaded on the model to serve, name -> where it was loaded from (a folder or a built-in name)."""

    daemon_threads = True

    def __init__(self, llm, host: str = "127.0.0.1", port: int = 8000, model_name: str = "shakespeare",
                 chat_template=None, adapters: dict[str, str] | None = None):
        if llm.model.tokenizer is None:
            raise TinyInferError("the server reads and writes text: load the model with its tokenizer (tokenizer=PATH)")
        adapters = dict(adapters or {})
        for name in adapters:
            check_adapter(llm.model, name)
        if model_name in adapters:
            raise TinyInferError(f"the LoRA adapter {model_name!r} has the served model's name, so a request could not "
                                 "choose between them: give the adapter (--lora NAME=PATH) or the model "
                                 "(--served-model-name) another name")
        super().__init__((host, port), Handler)  # binds now: a port in use fails here, before any thread starts
        self.model, self.model_name, self.chat_template = llm.model, model_name, chat_template
        self.adapters = adapters
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
    """One HTTP request, on its own thread: parse, check, submit, then relay the engine's outputs.

    HTTP/1.1: a client may send its next request on the same connection (OpenAI's client keeps connections
    open), so every whole answer carries its Content-Length; a stream has none and ends with the connection,
    as does an error, after which the rest of the request may still be unread."""

    server: Server
    protocol_version = "HTTP/1.1"

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
        """The served model's card, then one per LoRA adapter: its `parent` is the model, its `root` its files."""
        server = self.server
        card = {"id": server.model_name, "object": "model", "created": server.created, "owned_by": "tinyinfer",
                "max_model_len": server.model.config.max_seq_len}
        adapters = [{**card, "id": name, "parent": server.model_name, "root": path}
                    for name, path in server.adapters.items()]
        self._send_json(200, {"object": "list", "data": [card, *adapters]})

    def _generate(self, chat: bool) -> None:
        body = read_json(self.rfile, self.headers.get("Content-Length"))
        lora = requested_adapter(self.server, body)  # first: a model not served here is a 404, whatever else is wrong
        submission = Submission(engine_requests(self.server, body, chat), lora, cache_salt(body))
        stream, include_usage = stream_options(body)
        self.server.engine.submit(submission)
        try:
            events = self._events(submission)
            next(events)  # ACCEPTED, or the engine's refusal raised here, before any header is sent
            tools = tool_choice(body, chat)  # the tools the reply may call: its text is read back as a call
            reply = Reply(chat, lora or self.server.model_name, submission, self.server.model.tokenizer,
                          None if tools is None else tools[0])
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
                if not self.server.engine.thread.is_alive():
                    raise RequestError("the engine has stopped: restart the server", status=503) from None
                event = None
            if self._client_gone():  # on every event too: while the engine runs, the queue is never empty for long
                raise ClientGone
            if event is None:
                continue
            if isinstance(event, Exception):
                raise event
            if event is not ACCEPTED and event.finished:
                unfinished.discard((event.request_id, event.index))
            yield event

    def _client_gone(self) -> bool:
        """The client closed its end: its socket reads as end-of-file (peeked, so nothing is consumed)."""
        with selectors.DefaultSelector() as selector:  # poll/epoll where there is one: any file number works
            selector.register(self.connection, selectors.EVENT_READ)
            try:
                readable = bool(selector.select(timeout=0))
                return readable and self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

    def _stream(self, chunks) -> None:
        """Server-Sent Events: a `data:` line per chunk, a blank line after each, and [DONE] at the end."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the stream's end is the connection's
        self.end_headers()
        self.streaming = self.close_connection = True
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")  # a failed write: ClientGone's twin
        self.wfile.write(b"data: [DONE]\n\n")

    def _send_json(self, status: int, payload: dict, close: bool = False) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        """OpenAI's error body; once a stream has started, its last event instead of a status."""
        error = {"error": {"message": message, "type": kind, "param": param, "code": None}}
        self.close_connection = True  # what is left of the request (an unread body) must not read as the next one
        try:
            if self.streaming:
                self.wfile.write(b"data: " + json.dumps(error).encode() + b"\n\n")
            else:
                self._send_json(status, error, close=True)
        except ConnectionError:
            pass
