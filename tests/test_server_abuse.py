"""The server under abuse: what a client can send to hurt it or other clients, and what it gets back.

Each test is one of the attacks a bounded probe found on the earlier hand-written server: a 50 MB body (the
process grew to 5 GB), a Content-Length that lies, Content-Lengths no int holds, idle and trickling
connections, no API key, DNS rebinding and cross-origin posts, a prefix cache shared across clients, a queue
without bound. Each answer is checked as the client reads it: the status, OpenAI's error shape, the time.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from test_prefix_cache_safety import FIRST, SECOND, TAIL

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.engine import LLM
from tinyinfer.engine.limits import Limits
from tinyinfer.engine.server import Server

MB = 1 << 20


@pytest.fixture(scope="module")
def model():
    return tinyinfer.load("shakespeare")


@contextlib.contextmanager
def serving(llm, **options):
    server = Server(llm, port=0, chat_template=ChatTemplate.for_model("shakespeare"), **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.close()


@pytest.fixture(scope="module")
def server(model):
    with serving(LLM(model), limits=Limits(body_timeout_s=1, head_timeout_s=1)) as server:
        yield server


def exchange(server, data: bytes, shut: bool = False, timeout: float = 10) -> tuple[float, bytes]:
    """Send raw bytes on a new connection (then half-close it if `shut`), read until the server closes or
    `timeout`; the seconds it took and what came back."""
    start = time.monotonic()
    with socket.create_connection(server.server_address) as client:
        client.sendall(data)
        if shut:
            client.shutdown(socket.SHUT_WR)
        client.settimeout(timeout)
        answer = b""
        with contextlib.suppress(TimeoutError, ConnectionError):
            while chunk := client.recv(65536):
                answer += chunk
    return time.monotonic() - start, answer


def request_head(path: str = "/v1/completions", length: int | None = None, extra: str = "") -> bytes:
    content_length = "" if length is None else f"Content-Length: {length}\r\n"
    return f"POST {path} HTTP/1.1\r\nHost: localhost\r\n{content_length}{extra}\r\n".encode()


def status_and_body(answer: bytes) -> tuple[int, dict]:
    """The final response's status and JSON body (interim 100 responses skipped)."""
    while answer.startswith(b"HTTP/1.1 100"):
        answer = answer.split(b"\r\n\r\n", 1)[1]
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post(server, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    connection = http.client.HTTPConnection(*server.server_address, timeout=60)
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    return response.status, json.loads(answer) if answer.startswith(b"{") else answer, dict(response.getheaders())


def get(server, path: str, headers: dict | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(*server.server_address, timeout=60)
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    return response.status, answer


def assert_openai_error(body: dict, words: str) -> None:
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] in ("invalid_request_error", "server_overloaded")
    assert words in body["error"]["message"], body


SMALL = {"prompt": "ROMEO:", "max_tokens": 3, "temperature": 0}


# -- bodies ---------------------------------------------------------------------------------------------------


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1)) / 1024


def refuse_50mb(address, chunked: bool) -> tuple[float, int]:
    """Send a 50 MB body (declared in Content-Length, or chunked without one) while reading the answer; the
    seconds until the answer's head arrived, and its status."""
    head = (b"Transfer-Encoding: chunked\r\n" if chunked else b"Content-Length: %d\r\n" % (50 * MB))
    client = socket.create_connection(address)
    client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n" + head + b"\r\n")
    piece = b"x" * MB
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece

    def send_body():
        with contextlib.suppress(OSError):  # the server may close while the rest is still on its way
            for _ in range(50):
                client.sendall(chunk)

    start = time.monotonic()
    sender = threading.Thread(target=send_body, daemon=True)
    sender.start()
    client.settimeout(10)
    answer = client.recv(4096)
    elapsed = time.monotonic() - start
    client.close()
    sender.join(10)
    return elapsed, int(answer.split()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's peak memory from /proc")
def test_a_50mb_body_is_refused_in_under_a_second_with_memory_flat():
    """On the command users run: its peak memory must not grow by the body's size."""
    process = subprocess.Popen([sys.executable, "-m", "tinyinfer", "serve", "--port", "0"], stderr=subprocess.PIPE,
                               text=True)
    try:
        url = process.stderr.readline().split(" at ")[1].split()[0]
        host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=30):
            pass
        before = peak_rss_mb(process.pid)
        for chunked in (False, True):
            elapsed, status = refuse_50mb((host, int(port)), chunked)
            assert status == 413 and elapsed < 1.0, (chunked, status, elapsed)
        grown = peak_rss_mb(process.pid) - before
        assert grown < 16, f"the server's peak memory grew by {grown:.0f} MB"  # the body is 50 MB; 4 MB are read
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("length", [10**12, 2**63, 2**64 + 1])
def test_a_content_length_no_int_holds_is_a_413_not_a_crash(server, length):
    elapsed, answer = exchange(server, request_head(length=length))
    status, body = status_and_body(answer)
    assert status == 413 and elapsed < 1.0
    assert_openai_error(body, f"{length} bytes")


def test_a_content_length_longer_than_the_body_times_out_and_others_are_served(server):
    """The client promises more than it sends: the connection is answered 408 when the body deadline passes,
    and meanwhile (a coroutine waits, not a thread) other requests are served."""
    body = json.dumps(SMALL).encode()
    result = {}
    liar = threading.Thread(target=lambda: result.update(
        answer=exchange(server, request_head(length=len(body) + 100) + body)))
    liar.start()
    time.sleep(0.1)
    assert post(server, "/v1/completions", SMALL)[0] == 200
    liar.join(10)
    elapsed, answer = result["answer"]
    status, error = status_and_body(answer)
    assert status == 408 and 0.9 < elapsed < 5
    assert_openai_error(error, "did not arrive")


def test_two_framings_are_refused(server):
    """Content-Length and Transfer-Encoding together: a proxy in front might frame the body the other way
    (request smuggling); two different Content-Lengths too."""
    _, answer = exchange(server, request_head(length=5, extra="Transfer-Encoding: chunked\r\n") + b"0\r\n\r\n")
    assert status_and_body(answer)[0] == 400
    _, answer = exchange(server, request_head(length=5, extra="Content-Length: 6\r\n") + b"123456")
    assert answer.startswith(b"HTTP/1.1 400")


# -- connections ------------------------------------------------------------------------------------------------


def test_200_idle_connections_do_not_slow_a_normal_request_and_are_closed(server):
    idle = [socket.create_connection(server.server_address) for _ in range(200)]
    trickling = socket.create_connection(server.server_address)
    trickling.sendall(b"GET /health HTTP/1.1\r\n")  # a request head that never ends
    try:
        start = time.monotonic()
        status, body, _ = post(server, "/v1/completions", SMALL)
        assert status == 200 and body["usage"]["completion_tokens"] == 3
        assert time.monotonic() - start < 5
        deadline = time.monotonic() + 10  # the head deadline is 1 s in this server
        for connection in [*idle, trickling]:
            connection.settimeout(max(0.1, deadline - time.monotonic()))
            assert connection.recv(1) == b""  # closed by the server
    finally:
        for connection in [*idle, trickling]:
            connection.close()


def test_a_busy_kept_alive_connection_outlives_the_head_deadline(server):
    """The head deadline (1 s here) is for a request head that does not come, not for a connection in use."""
    connection = http.client.HTTPConnection(*server.server_address, timeout=10)
    connection.request("GET", "/health")
    connection.getresponse().read()
    first = connection.sock
    for _ in range(12):  # 2.4 s of requests on one connection
        time.sleep(0.2)
        connection.request("GET", "/health")
        response = connection.getresponse()
        assert response.status == 200 and json.load(response) == {"status": "ok"}
    assert connection.sock is first
    connection.close()


def test_a_client_that_half_closes_still_gets_its_answer(server, model):
    """`shutdown(SHUT_WR)` after the request, as `nc -N` and some proxies do: the answer still comes."""
    body = json.dumps(SMALL).encode()
    _, answer = exchange(server, request_head(length=len(body)) + body, shut=True)
    status, reply = status_and_body(answer)
    assert status == 200 and reply["choices"][0]["text"] == model.generate(**SMALL).text


def test_a_full_queue_is_a_503_to_retry(model):
    with serving(LLM(model, max_num_seqs=1), limits=Limits(max_queued=0)) as server:
        long = {"prompt": "ROMEO:", "max_tokens": 200, "ignore_eos": True, "stream": True}
        connection = http.client.HTTPConnection(*server.server_address, timeout=60)
        connection.request("POST", "/v1/completions", json.dumps(long))
        response = connection.getresponse()
        assert response.readline().startswith(b"data: ")  # running: the one slot is taken
        status, body, headers = post(server, "/v1/completions", SMALL)
        assert status == 503 and headers.get("retry-after") == "1"
        assert_openai_error(body, "the server is busy")
        connection.close()


# -- keys, hosts, origins -------------------------------------------------------------------------------------------


def test_an_api_key_is_needed_on_every_route_but_health(model):
    with serving(LLM(model), api_key="s3cret") as server:
        for path in ("/v1/models", "/metrics"):
            status, answer = get(server, path)
            assert status == 401
            assert_openai_error(json.loads(answer), "API key")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            status, body, _ = post(server, "/v1/completions", SMALL, headers)
            assert status == 401 and body["error"]["code"] == "invalid_api_key"  # as OpenAI answers it
        assert post(server, "/v1/completions", SMALL, {"Authorization": "Bearer s3cret"})[0] == 200
        assert get(server, "/health")[0] == 200


def test_the_api_key_comes_from_the_environment_too(model, monkeypatch):
    monkeypatch.setenv("TINYINFER_API_KEY", "from-env")
    with serving(LLM(model)) as server:
        assert post(server, "/v1/completions", SMALL)[0] == 401
        assert post(server, "/v1/completions", SMALL, {"Authorization": "Bearer from-env"})[0] == 200


def test_a_foreign_host_on_loopback_is_refused_dns_rebinding(server):
    status, body, _ = post(server, "/v1/completions", SMALL, {"Host": "evil.example:8000"})
    assert status == 421
    assert_openai_error(body, "DNS rebinding")
    assert post(server, "/v1/completions", SMALL, {"Host": "localhost:1234"})[0] == 200


def test_a_web_page_cannot_post_unless_its_origin_is_allowed(model, server):
    status, body, headers = post(server, "/v1/completions", SMALL, {"Origin": "https://evil.example"})
    assert status == 403 and "access-control-allow-origin" not in {k.lower() for k in headers}
    assert_openai_error(body, "--allowed-origins")
    with serving(LLM(model), allowed_origins=["https://app.example"]) as allowing:
        status, _, headers = post(allowing, "/v1/completions", SMALL, {"Origin": "https://app.example"})
        assert status == 200 and headers.get("access-control-allow-origin") == "https://app.example"
        assert post(allowing, "/v1/completions", SMALL, {"Origin": "https://evil.example"})[0] == 403


# -- the prefix cache, over HTTP ------------------------------------------------------------------------------------


def prefix_hits(server) -> float:
    metrics = get(server, "/metrics")[1].decode()
    return float(re.search(r"^tinyinfer:prefix_cache_hits_total (\S+)$", metrics, re.M).group(1))


def test_the_colliding_blocks_are_served_separately_on_a_live_server(model, server):
    greedy = {"max_tokens": 8, "temperature": 0, "ignore_eos": True}
    for prompts in ([FIRST + TAIL, SECOND + TAIL], [SECOND + TAIL, FIRST + TAIL]):
        for prompt in prompts:
            status, body, _ = post(server, "/v1/completions", {"prompt": prompt, **greedy, "cache_salt": str(prompts)})
            assert status == 200 and body["choices"][0]["text"] == model.generate(prompt, **greedy).text


def test_a_cache_salt_keeps_a_clients_blocks_to_itself_over_http(server):
    prompt = [FIRST + TAIL]
    request = {"prompt": prompt, "max_tokens": 2, "temperature": 0}
    post(server, "/v1/completions", {**request, "cache_salt": "tenant-a"})
    before = prefix_hits(server)
    assert post(server, "/v1/completions", {**request, "cache_salt": "tenant-b"})[0] == 200
    assert prefix_hits(server) == before  # another salt: nothing shared
    assert post(server, "/v1/completions", {**request, "cache_salt": "tenant-a"})[0] == 200
    assert prefix_hits(server) == before + 16  # the same salt: its first block is shared
    status, body, _ = post(server, "/v1/completions", {**request, "cache_salt": ""})
    assert status == 400 and body["error"]["param"] == "cache_salt"


# -- request limits ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("knobs, param, words", [
    ({"stop": [str(i) for i in range(17)]}, "stop", "at most 16"),
    ({"stop": "x" * 257}, "stop", "at most 256"),
    ({"logprobs": 21}, "logprobs", "more alternatives"),
    ({"prompt": ["ROMEO:"] * 33}, "prompt", "33 prompts"),
])
def test_request_limits_are_400s_naming_the_field(server, knobs, param, words):
    status, body, _ = post(server, "/v1/completions", {**SMALL, **knobs})
    assert status == 400 and body["error"]["param"] == param
    assert_openai_error(body, words)


def test_a_huge_prompt_is_refused_before_the_tokenizer_runs(server, model, monkeypatch):
    def no_tokenizing(*args, **kwargs):
        raise AssertionError("the tokenizer ran on a prompt that cannot fit")

    monkeypatch.setattr(model.tokenizer, "encode", no_tokenizing)
    status, body, _ = post(server, "/v1/completions", {**SMALL, "prompt": "ROMEO " * 500_000})
    assert status == 400 and body["error"]["param"] == "prompt"
    assert_openai_error(body, "more than the 512 tokens")
    status, body, _ = post(server, "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "x" * 3_000_000}], "max_tokens": 2})
    assert status == 400 and body["error"]["param"] == "messages"


def test_a_process_serves_the_command_line_flags(tmp_path):
    """--max-model-len and --served-model-name, through /v1/models of the command users run."""
    process = subprocess.Popen([sys.executable, "-m", "tinyinfer", "serve", "--port", "0", "--max-model-len", "128",
                                "--served-model-name", "bard"], stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TINYINFER_API_KEY": ""})
    try:
        url = process.stderr.readline().split(" at ")[1].split()[0]
        with urllib.request.urlopen(url + "/models", timeout=30) as response:
            [card] = json.load(response)["data"]
        assert (card["id"], card["max_model_len"]) == ("bard", 128)
        request = urllib.request.Request(url + "/completions", json.dumps({"model": "bard", "prompt": "ROMEO:",
                                                                          "max_tokens": 200}).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 400 and "context window of 128 tokens" in json.load(refused.value)["error"]["message"]
    finally:
        process.kill()
        process.wait()
