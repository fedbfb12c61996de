"""An OpenAI-compatible HTTP server over the batching engine: `python -m tinyinfer serve`.

    python -m tinyinfer serve --port 8000
    curl localhost:8000/v1/completions -d '{"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0}'

Endpoints: GET /v1/models, GET /health, GET /metrics (Prometheus, tinyinfer/engine/metrics.py),
POST /v1/completions, POST /v1/chat/completions, and with `runtime_lora` POST /v1/load_lora_adapter and
/v1/unload_lora_adapter, with the request fields and response shapes of the OpenAI API (and vLLM's), translated
in tinyinfer/engine/openai_api.py, so any OpenAI client can talk to it.

**The stack.** HTTP is not the lesson, so it is a well-kept one: uvicorn parses HTTP/1.1 (h11), keeps
connections alive, times idle ones out and listens with a deep backlog; Starlette routes requests (ASGI). The
engine loop (tinyinfer/engine/async_engine.py) is tinyinfer's own: one thread owns the LLM, requests are
handed to it, outputs come back on asyncio queues. On top of uvicorn this module adds what a server open to
clients needs (`Limits`): a body-size cap (413: by Content-Length before reading, and while reading a body
of unknown length), a deadline for the request head and one for the body (408), a bound on the sequences
queued (503, `async_engine.Overloaded`).

**Streaming.** With `"stream": true` the reply is Server-Sent Events: one `data: {json chunk}\\n\\n` per
piece of new text, then `data: [DONE]\\n\\n`. The deltas joined equal the non-streamed text.

**Disconnects, the ASGI way.** While a request runs, a task waits on ASGI `receive()`; uvicorn answers it
`http.disconnect` when the connection is lost, and the request is aborted in the engine (its KV blocks go back
before the next step). A client that only half-closes (shuts down its sending side after the request, as
`nc -N` does) still gets its answer: at end-of-file the connection stays open for writing (`HttpProtocol`),
and until the answer starts a `100 Continue` interim response (which HTTP/1.1 clients skip) is sent now and
then: a client that has really gone answers it with a reset, and the next write fails.

**Keys, hosts, origins.** With an API key (`--api-key` or TINYINFER_API_KEY) every route but /health needs
`Authorization: Bearer KEY`, compared in constant time (hmac.compare_digest); else a 401 in OpenAI's shape.
Bound to a loopback address, the server answers only requests whose Host is a loopback name, so a web page
cannot reach it through DNS rebinding (421); a browser request (it carries an Origin) is refused unless its
origin is allowed (`--allowed-origins`), which also turns on CORS for those origins only.

Bad input is answered 4xx with an OpenAI-style error body whose message is the TinyInferError text; a bug
is answered 500, and the engine thread carries on with the other requests.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
import socket
import threading
import time
import traceback

import h11
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from tinyinfer.engine.async_engine import GONE, ClientGone, Engine, Submission
from tinyinfer.engine.limits import API_KEY_ENV, Limits
from tinyinfer.engine.metrics import EngineMetrics
from tinyinfer.engine.openai_api import (
    Reply,
    RequestError,
    cache_salt,
    engine_requests,
    parse_json,
    requested_adapter,
    stream_options,
    tool_choice,
)
from tinyinfer.errors import TinyInferError, is_integer_at_least
from tinyinfer.lora import check_adapter, load_adapter, unload_adapter

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def check_max_model_len(model, max_model_len: int | None) -> int:
    """The context window served: the model's, or a smaller one (vLLM's --max-model-len)."""
    window = model.config.max_seq_len
    if max_model_len is None:
        return window
    if not is_integer_at_least(max_model_len) or max_model_len > window:
        raise TinyInferError(f"max_model_len={max_model_len!r}: give an integer from 1 to the model's context window "
                             f"({window} tokens)")
    return max_model_len


class HttpProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, plus a deadline for the request head and half-closed clients.

    A connection must deliver a whole request head within `head_timeout_s` of opening (or of its last answer),
    else it is closed: a client trickling its headers holds nothing for long. At end-of-file while an answer
    is still due, the connection stays open for writing and is probed (see the module's docstring)."""

    limits = Limits()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.peer_closed = False
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.peer_closed:
            self.transport.close()  # nothing more can come from a client that closed its side
        elif not self.transport.is_closing():
            self._arm_head_deadline()

    def eof_received(self) -> bool | None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete or cycle.more_body:
            return None  # nothing is due, or the body was cut short: close
        self.peer_closed = True
        self._probe()
        return True  # keep the connection open for the answer

    def _arm_head_deadline(self) -> None:
        """Close the connection if, `head_timeout_s` from now, no new request has begun (`cycle` is still the
        last one) and no whole request head has come in (h11 still waits for one)."""
        last = self.cycle

        def expire():
            if self.cycle is last and self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        self.loop.call_later(self.limits.head_timeout_s, expire)

    def _probe(self) -> None:
        if self.transport.is_closing() or self.cycle.response_complete:
            return
        if self.conn.our_state is h11.SEND_RESPONSE:  # before the answer's head: an interim response fits here
            self.transport.write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[],
                                                                          reason=b"Continue")))
        self.loop.call_later(self.limits.probe_s, self._probe)  # once the answer streams, its writes probe


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    """An error answer in OpenAI's shape; it closes the connection, since what is left of the request may
    still be unread."""
    kind = "invalid_request_error" if status < 500 else "server_overloaded" if status == 503 else "internal_server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status, headers={"Connection": "close", **(headers or {})})


def refusal(e: Exception) -> JSONResponse:
    """The answer to an exception: a TinyInferError's status (400 unless it says), a bug's 500."""
    if isinstance(e, TinyInferError):
        status = getattr(e, "status", 400)
        retry = {"Retry-After": "1"} if status == 503 else None
        return error_response(status, str(e), getattr(e, "param", None), headers=retry)
    traceback.print_exception(e)  # the server's log: the client gets the message
    return error_response(500, f"internal error ({type(e).__name__}: {e})")


def answers_errors(endpoint):
    """An endpoint whose TinyInferErrors and bugs become OpenAI-shaped error answers."""
    async def guarded(request: Request):
        try:
            return await endpoint(request)
        except ClientDisconnect:
            return Response(status_code=499)  # gone while sending its body: nobody reads this
        except Exception as e:  # noqa: BLE001 - bad input, or a bug: either way the server keeps serving
            return refusal(e)
    return guarded


async def read_body(request: Request, limits: Limits) -> bytes:
    """The request body, refused (413) past `max_body_bytes`: by its Content-Length before reading anything,
    or as soon as a body of unknown length (chunked) grows past it; 408 past `body_timeout_s`."""
    length = request.headers.get("content-length")
    if length is not None and int(length) > limits.max_body_bytes:  # h11 has checked it is a number
        raise RequestError(f"the request body is {length} bytes: this server takes at most {limits.max_body_bytes} "
                           "(--max-body-bytes)", status=413)

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise RequestError(f"the request body is over {limits.max_body_bytes} bytes, the most this server "
                                   "takes (--max-body-bytes)", status=413)
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), limits.body_timeout_s)
    except asyncio.TimeoutError:
        raise RequestError(f"the request body did not arrive within {limits.body_timeout_s:g} s: send it whole "
                           "(is the Content-Length right?)", status=408) from None


class Answer:
    """The ASGI answer to a generation request, whole or streamed, for the life of its submission: it waits
    for the engine, watches for the client leaving, and always tells the engine when it is done."""

    def __init__(self, engine: Engine, submission: Submission, reply: Reply, stream: bool, include_usage: bool):
        self.engine, self.submission, self.reply = engine, submission, reply
        self.stream, self.include_usage = stream, include_usage

    async def __call__(self, scope, receive, send) -> None:
        watcher = asyncio.create_task(self._watch(receive))
        started = False
        try:
            await self.submission.accepted()
            if not self.stream:
                outputs = [out async for out in self.submission.outputs()]
                await JSONResponse(self.reply.whole(outputs))(scope, receive, send)
                return
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"connection", b"close")]})
            started = True
            async for chunk in self.reply.chunks(self.submission.outputs(), self.include_usage):
                await send({"type": "http.response.body", "body": sse(chunk), "more_body": True})
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
        except (ClientGone, OSError):
            pass  # nobody to answer
        except Exception as e:  # noqa: BLE001 - bad input the engine found, or a bug
            if not started:
                await refusal(e)(scope, receive, send)
            else:  # a stream has begun: the error is its last event
                body = refusal(e).body
                await send({"type": "http.response.body", "body": b"data: " + body + b"\n\n"})
        finally:
            watcher.cancel()
            self.engine.done(self.submission)  # a no-op once finished; frees the blocks of a client that left

    async def _watch(self, receive) -> None:
        """Wait for the client to leave (uvicorn's http.disconnect), then wake the answer to stop."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.submission.events.put_nowait(GONE)


def sse(chunk: dict) -> bytes:
    """One Server-Sent Event."""
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class Guard:
    """ASGI middleware in front of every route: the Host check (on loopback), the Origin check, the API key."""

    def __init__(self, app, api_key: str | None, loopback: bool, allowed_origins: list[str]):
        self.app, self.api_key, self.loopback = app, api_key, loopback
        self.allowed_origins = set(allowed_origins)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            refused = self.refuse(scope["path"], headers)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refuse(self, path: str, headers: dict) -> JSONResponse | None:
        if "content-length" in headers and "transfer-encoding" in headers:  # two framings: a proxy may pick the other
            return error_response(400, "the request has both Content-Length and Transfer-Encoding: send one")
        host = host_name(headers.get("host", ""))
        if self.loopback and "host" in headers and host not in LOOPBACK_NAMES:
            return error_response(421, f"Host {headers['host']!r:.80} is not this server's: it listens on a loopback "
                                  "address and answers only localhost names (a web page may be trying DNS rebinding)")
        origin = headers.get("origin")
        if origin is not None and origin not in self.allowed_origins and "*" not in self.allowed_origins:
            return error_response(403, f"requests from the web origin {origin!r:.80} are not allowed: serve with "
                                  "--allowed-origins to allow it")
        if self.api_key is not None and path != "/health" and not key_matches(headers, self.api_key):
            return error_response(401, "a valid API key is needed: send the header Authorization: Bearer KEY",
                                  code="invalid_api_key")
        return None


def key_matches(headers: dict, api_key: str) -> bool:
    """Whether the request carries `Authorization: Bearer <api_key>`, compared in constant time (the time an
    answer takes must not tell an attacker how much of a guess was right)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key.encode())


def host_name(host: str) -> str:
    """The name in a Host header, without its port: 'localhost:8000' -> 'localhost', '[::1]:80' -> '::1'.

    >>> host_name("localhost:8000"), host_name("[::1]:80"), host_name("127.0.0.1")
    ('localhost', '::1', '127.0.0.1')
    """
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if ":" in host else host


def is_loopback(host: str) -> bool:
    """Whether a listening address is this machine's loopback (only local clients can connect)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server:
    """The HTTP server and its engine. `serve_forever()` serves (on the calling thread) until `shutdown()`
    from another thread or Ctrl-C; `close()` stops the engine. `adapters`: the LoRA adapters loaded on the model
    to serve, name -> where it was loaded from. `api_key`: None reads TINYINFER_API_KEY (unset: no key).
    `max_model_len`: the context window served (default: the model's). `runtime_lora`: serve
    /v1/load_lora_adapter and /v1/unload_lora_adapter (they read adapters from the server's disk)."""

    def __init__(self, llm, host: str = "127.0.0.1", port: int = 8000, model_name: str = "shakespeare",
                 chat_template=None, adapters: dict[str, str] | None = None, *, api_key: str | None = None,
                 allowed_origins: list[str] | None = None, limits: Limits | None = None,
                 max_model_len: int | None = None, runtime_lora: bool = False):
        if llm.model.tokenizer is None:
            raise TinyInferError("the server reads and writes text: load the model with its tokenizer (tokenizer=PATH)")
        adapters = dict(adapters or {})
        for name in adapters:
            check_adapter(llm.model, name)
        if model_name in adapters:
            raise TinyInferError(f"the LoRA adapter {model_name!r} has the served model's name, so a request could not "
                                 "choose between them: give the adapter (--lora NAME=PATH) or the model "
                                 "(--served-model-name) another name")
        self.model, self.model_name, self.chat_template, self.adapters = llm.model, model_name, chat_template, adapters
        self.max_model_len = check_max_model_len(llm.model, max_model_len)
        self.limits = limits or Limits()
        self.created = int(time.time())
        self.api_key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
        self.runtime_lora = runtime_lora
        self.socket = socket.create_server((host, port), backlog=self.limits.backlog)  # binds now: a port in use fails here
        self.metrics = EngineMetrics()
        self.engine = Engine(llm, llm.scheduler.config.max_num_seqs + self.limits.max_queued, self.metrics.after_step)
        app = self._app(is_loopback(host), allowed_origins or [])
        protocol = type("HttpProtocol", (HttpProtocol,), {"limits": self.limits})
        config = uvicorn.Config(app, http=protocol, lifespan="off", log_config=None, log_level="warning",
                                access_log=False, timeout_keep_alive=self.limits.keep_alive_s,
                                limit_concurrency=self.limits.max_connections, backlog=self.limits.backlog,
                                timeout_graceful_shutdown=5)
        self.uvicorn = uvicorn.Server(config)
        self._serving = threading.Event()
        self._stopped = threading.Event()

    @property
    def max_num_seqs(self) -> int:
        return self.engine.llm.scheduler.config.max_num_seqs

    @property
    def server_address(self) -> tuple[str, int]:
        return self.socket.getsockname()[:2]

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def serve_forever(self) -> None:
        self._serving.set()
        try:
            self.uvicorn.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serve_forever (from another thread) and wait for it to return."""
        self.uvicorn.should_exit = True
        if self._serving.is_set():
            self._stopped.wait()

    def close(self) -> None:
        self.socket.close()
        self.engine.stop()

    # -- the routes -------------------------------------------------------------------------------------------

    def _app(self, loopback: bool, allowed_origins: list[str]):
        routes = [Route("/health", self._health), Route("/v1/models", self._models), Route("/metrics", self._metrics),
                  Route("/v1/completions", answers_errors(lambda r: self._generate(r, chat=False)), methods=["POST"]),
                  Route("/v1/chat/completions", answers_errors(lambda r: self._generate(r, chat=True)),
                        methods=["POST"])]
        if self.runtime_lora:
            routes += [Route("/v1/load_lora_adapter", answers_errors(self._load_lora), methods=["POST"]),
                       Route("/v1/unload_lora_adapter", answers_errors(self._unload_lora), methods=["POST"])]
        self.endpoints = ", ".join(f"{'POST' if 'POST' in r.methods else 'GET'} {r.path}" for r in routes)
        app = Starlette(routes=routes, exception_handlers={404: self._no_route, 405: self._no_route})
        app = Guard(app, self.api_key, loopback, allowed_origins)
        if allowed_origins:  # outermost: a browser's preflight is answered before the key is asked for
            app = CORSMiddleware(app, allow_origins=allowed_origins, allow_methods=["GET", "POST"],
                                 allow_headers=["Authorization", "Content-Type"])
        return app

    async def _no_route(self, request: Request, exc) -> JSONResponse:
        return error_response(exc.status_code, f"no endpoint {request.method} {request.url.path}: this server has "
                              f"{self.endpoints}")

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _metrics(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def _models(self, request: Request) -> Response:
        """The served model's card, then one per LoRA adapter: its `parent` is the model, its `root` its files."""
        card = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "tinyinfer",
                "max_model_len": self.max_model_len}
        adapters = [{**card, "id": name, "parent": self.model_name, "root": path} for name, path in self.adapters.items()]
        return JSONResponse({"object": "list", "data": [card, *adapters]})

    async def _generate(self, request: Request, chat: bool):
        arrival = time.perf_counter()
        body = parse_json(await read_body(request, self.limits))
        lora = requested_adapter(self, body)  # first: a model not served here is a 404, whatever else is wrong
        salt, (stream, include_usage), tools = cache_salt(body), stream_options(body), tool_choice(body, chat)
        requests = await run_in_threadpool(engine_requests, self, body, chat)  # tokenizing and compiling block
        reply = Reply(chat, lora or self.model_name, requests, self.model.tokenizer, None if tools is None else tools[0])
        submission = Submission(requests, lora, salt, arrival)
        self.engine.submit(submission)  # or Overloaded: a 503; from here on, Answer always tells the engine it is done
        return Answer(self.engine, submission, reply, stream, include_usage)

    async def _load_lora(self, request: Request) -> Response:
        """vLLM's POST /v1/load_lora_adapter {"lora_name": ..., "lora_path": ...}: loaded between two steps."""
        body = parse_json(await read_body(request, self.limits))
        name, path = lora_field(body, "lora_name"), lora_field(body, "lora_path")
        if name == self.model_name or name in self.adapters:
            raise RequestError(f"the name {name!r} is already served: unload it first, or choose another", "lora_name")
        await self.engine.run(lambda llm: load_adapter(llm.model, name, path))
        self.adapters[name] = path
        return Response(f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload_lora(self, request: Request) -> Response:
        """vLLM's POST /v1/unload_lora_adapter {"lora_name": ...}: refused while a request runs with it."""
        name = lora_field(parse_json(await read_body(request, self.limits)), "lora_name")
        if name not in self.adapters:
            raise RequestError(f"no LoRA adapter {name!r} is served here (served: {', '.join(self.adapters) or 'none'})",
                               "lora_name", 404)

        def unload(llm):
            if any(seq.lora == name for samples in llm.requests.values() for seq in samples):
                raise RequestError(f"requests are running with the LoRA adapter {name!r}: unload it when they are done",
                                   "lora_name", 409)
            unload_adapter(llm.model, name)

        await self.engine.run(unload)
        del self.adapters[name]
        return Response(f"Success: LoRA adapter '{name}' removed successfully.")


def lora_field(body: dict, field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise RequestError(f"{field}={value!r:.60} is invalid: give a non-empty string", field)
    return value
