"""The OpenAI-compatible server: the same outputs as the engine run directly, streamed or whole, batched
across clients, aborted when a client leaves, and an OpenAI-style error for every bad request."""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import shared_data
from engine_helpers import stories  # noqa: F401 - a fixture

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.commands.serve import chat_template_of
from tinyinfer.engine import LLM
from tinyinfer.engine.server import Server
from tinyinfer.errors import TinyInferError
from tinyinfer.sampling import SamplingParams

N_BLOCKS = 7  # 112 tokens of 16: less than the 128-token context, so a request can fit one and not the other


@pytest.fixture(scope="module")
def model():
    return tinyinfer.load("shakespeare")


@pytest.fixture(scope="module")
def server(model):
    server = Server(LLM(model, n_blocks=N_BLOCKS), port=0, model_name="shakespeare",
                    chat_template=ChatTemplate.for_model("shakespeare"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.close()


def post(server, path: str, body) -> tuple[int, dict]:
    """POST a JSON body (or raw bytes); the status and the decoded JSON answer."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def post_concurrently(server, path: str, bodies: list) -> list[tuple[int, dict]]:
    """POST every body at once, one client thread each (released together); their answers, in order."""
    answers = [None] * len(bodies)
    start = threading.Barrier(len(bodies))

    def client(i):
        start.wait()
        answers[i] = post(server, path, bodies[i])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def stream_events(server, path: str, body: dict) -> list:
    """POST with stream=true; the decoded `data:` events of the Server-Sent Events, "[DONE]" kept as is."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("POST", path, json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    lines = [line for line in response.read().split(b"\n\n") if line]
    connection.close()
    assert all(line.startswith(b"data: ") for line in lines)
    events = [line[len(b"data: "):].decode() for line in lines]
    return [event if event == "[DONE]" else json.loads(event) for event in events]


def wait_idle(server, seconds: float = 20.0) -> None:
    """Wait (a bounded time) for the engine thread to have nothing left to run or to route."""
    deadline = time.monotonic() + seconds
    while (server.engine.llm.has_unfinished() or server.engine.routes) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_models_and_health(server):
    with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as response:
        listing = json.load(response)
    assert listing["object"] == "list" and [card["id"] for card in listing["data"]] == ["shakespeare"]
    with urllib.request.urlopen(server.url + "/health", timeout=10) as response:
        assert response.status == 200


def test_greedy_completion_equals_model_generate(server, model):
    status, body = post(server, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 20, "temperature": 0})
    solo = model.generate("ROMEO:", max_tokens=20, temperature=0)
    assert status == 200 and body["object"] == "text_completion" and body["model"] == "shakespeare"
    [choice] = body["choices"]
    assert (choice["index"], choice["text"], choice["finish_reason"]) == (0, solo.text, "length")
    assert body["usage"] == {"prompt_tokens": len(model.tokenizer.encode("ROMEO:")), "completion_tokens": 20,
                             "total_tokens": len(model.tokenizer.encode("ROMEO:")) + 20}


def test_seeded_batch_equals_the_engine_run_directly(server, model):
    """A batch of prompts (text and token ids) with n=2: choice i*n + j is sample j of prompt i."""
    prompts = ["JULIET:", [model.tokenizer.bos_token_id, 40, 41, 42]]
    knobs = {"max_tokens": 12, "temperature": 0.9, "top_p": 0.95, "top_k": 40, "seed": 7, "n": 2,
             "presence_penalty": 0.5, "frequency_penalty": 0.3, "logit_bias": {"5": 2.0}}
    status, body = post(server, "/v1/completions", {"prompt": prompts, **knobs})
    direct = LLM(model).generate(prompts, SamplingParams(**{**knobs, "logit_bias": {5: 2.0}}))
    assert status == 200
    assert [c["text"] for c in body["choices"]] == [sample.text for samples in direct for sample in samples]
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    completion = sum(len(sample.token_ids) for samples in direct for sample in samples)
    assert body["usage"]["completion_tokens"] == completion
    assert body["usage"]["prompt_tokens"] == len(model.tokenizer.encode("JULIET:")) + 4  # once per prompt, not n times


def test_a_stop_string_ends_with_finish_reason_stop(server, model):
    full = model.generate("ROMEO:", max_tokens=40, temperature=0).text
    assert "\n\n" in full.lstrip("\n")  # the greedy text has a blank line to stop at
    status, body = post(server, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 40, "temperature": 0,
                                                    "stop": ["\n\n"]})
    assert status == 200
    [choice] = body["choices"]
    assert choice["finish_reason"] == "stop"
    assert choice["text"] == model.generate("ROMEO:", max_tokens=40, temperature=0, stop=["\n\n"]).text
    assert full.startswith(choice["text"]) and len(choice["text"]) < len(full)


def test_logprobs_are_those_of_model_generate_whole_and_streamed(server, model):
    request = {"prompt": "ROMEO:", "max_tokens": 12, "temperature": 0.8, "seed": 5, "logprobs": 3}
    solo = model.generate(**request)
    _, whole = post(server, "/v1/completions", request)
    logprobs = whole["choices"][0]["logprobs"]
    assert logprobs["tokens"] == [model.tokenizer.decode([c.token_id]) for c in solo.logprobs]
    assert logprobs["token_logprobs"] == pytest.approx([c.logprob for c in solo.logprobs], abs=1e-5)
    best = [{model.tokenizer.decode([i]): lp for i, lp in c.top_logprobs} for c in solo.logprobs]
    assert [list(top) for top in logprobs["top_logprobs"]] == [list(top) for top in best]
    chunks = stream_events(server, "/v1/completions", request)[:-1]
    streamed = [c["choices"][0]["logprobs"] for c in chunks]
    assert [token for part in streamed for token in part["tokens"]] == logprobs["tokens"]
    assert [lp for part in streamed for lp in part["token_logprobs"]] == pytest.approx(logprobs["token_logprobs"],
                                                                                       abs=1e-5)
    chat = {"messages": [{"role": "user", "content": "Hail!"}], "max_tokens": 8, "temperature": 0,
            "logprobs": True, "top_logprobs": 2}
    _, whole = post(server, "/v1/chat/completions", chat)
    content = whole["choices"][0]["logprobs"]["content"]
    assert "".join(entry["token"] for entry in content) == whole["choices"][0]["message"]["content"]
    assert all(len(entry["top_logprobs"]) == 2 and entry["top_logprobs"][0]["logprob"] >= entry["logprob"]
               for entry in content)
    chunks = stream_events(server, "/v1/chat/completions", chat)[:-1]
    streamed = [entry for c in chunks if c["choices"][0]["logprobs"] for entry in c["choices"][0]["logprobs"]["content"]]
    assert [(e["token"], e["bytes"]) for e in streamed] == [(e["token"], e["bytes"]) for e in content]
    assert [e["logprob"] for e in streamed] == pytest.approx([e["logprob"] for e in content], abs=1e-5)


def test_stream_deltas_join_to_the_whole_completion(server):
    request = {"prompt": "KING HENRY:", "max_tokens": 30, "temperature": 0.8, "seed": 3}
    _, whole = post(server, "/v1/completions", request)
    events = stream_events(server, "/v1/completions", {**request, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]["usage"]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == whole["choices"][0]["finish_reason"]
    assert usage == whole["usage"]


def test_chat_through_the_template_whole_and_streamed(server, model):
    messages = [{"role": "system", "content": "Speak in verse."}, {"role": "user", "content": "Who art thou?"}]
    request = {"messages": messages, "max_completion_tokens": 16, "temperature": 0}
    status, whole = post(server, "/v1/chat/completions", request)
    prompt = ChatTemplate.for_model("shakespeare").render(messages, add_generation_prompt=True)
    solo = model.generate(prompt, max_tokens=16, temperature=0, add_special_tokens=False)
    assert status == 200 and whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": solo.text}
    events = stream_events(server, "/v1/chat/completions", request)
    assert events[-1] == "[DONE]" and all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content", "") for d in deltas) == solo.text
    assert events[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_chat_without_a_template_is_refused(server, monkeypatch):
    monkeypatch.setattr(server, "chat_template", None)
    status, body = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and "no chat template" in body["error"]["message"]


def test_the_command_finds_a_chat_template_or_none(stories):  # noqa: F811 - the fixture
    assert chat_template_of("shakespeare") is not None
    assert chat_template_of(shared_data("models/stories260K/stories260K.bin")) is None  # llama2.c: no template
    with pytest.raises(TinyInferError, match="reads and writes text"):
        Server(LLM(stories), port=0)  # loaded without its tokenizer: token ids only, nothing to serve as text


def test_concurrent_clients_are_batched_and_get_their_solo_outputs(server, model):
    requests = [{"prompt": f"{name}:", "max_tokens": 30, "temperature": t, "seed": i, "ignore_eos": True}
                for i, (name, t) in enumerate([("ROMEO", 0), ("JULIET", 0.8), ("HAMLET", 1.0), ("LEAR", 0),
                                               ("OTHELLO", 0.7), ("MACBETH", 0.9)])]
    llm, first_step = server.engine.llm, len(server.engine.llm.step_log)
    answers = post_concurrently(server, "/v1/completions", requests)
    for request, (status, body) in zip(requests, answers):
        solo = model.generate(**request)  # unset knobs from generation_config.json, as the server does
        assert status == 200 and body["choices"][0]["text"] == solo.text
    assert max(record.num_seqs for record in llm.step_log[first_step:]) > 1  # they shared engine steps


def slow_steps(llm, monkeypatch, seconds: float = 0.005) -> None:
    """Each engine step made at least `seconds` long (a test double): the built-in model otherwise runs a whole
    400-token answer in about the time a client's leaving takes to reach the engine, and the abort would find
    nothing left to stop."""
    step = llm.step

    def slowed():
        time.sleep(seconds)
        return step()

    monkeypatch.setattr(llm, "step", slowed)


def test_a_client_that_disconnects_mid_stream_is_aborted_and_its_blocks_freed(server, monkeypatch):
    llm = server.engine.llm
    slow_steps(llm, monkeypatch)
    wait_idle(server)
    generated_before, max_tokens, n = llm.generated_tokens, 100, 4
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("POST", "/v1/completions", json.dumps({"prompt": "ROMEO:", "max_tokens": max_tokens, "n": n,
                                                             "ignore_eos": True, "stream": True}))
    response = connection.getresponse()
    assert response.readline().startswith(b"data: ")  # the first chunk came: the request is running
    response.close()
    connection.close()  # the client goes away mid-stream
    wait_idle(server)
    assert not llm.has_unfinished() and not server.engine.routes
    assert llm.generated_tokens - generated_before < n * max_tokens  # stopped early: aborted, not run to the end
    assert llm.scheduler.allocator.num_free == N_BLOCKS  # every block back in the pool


def test_a_client_that_leaves_before_a_whole_answer_is_aborted_too(server, monkeypatch):
    """Without a stream nothing is written until the end: the handler watches the socket while it waits."""
    llm = server.engine.llm
    slow_steps(llm, monkeypatch)
    wait_idle(server)
    generated_before, total = llm.generated_tokens, 4 * 100
    body = json.dumps({"prompt": "JULIET:", "max_tokens": 100, "n": 4, "ignore_eos": True}).encode()
    client = socket.create_connection(server.server_address[:2])
    client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    deadline = time.monotonic() + 20
    while llm.generated_tokens == generated_before and time.monotonic() < deadline:
        time.sleep(0.005)  # until the engine runs it
    client.close()
    wait_idle(server)
    assert 0 < llm.generated_tokens - generated_before < total
    assert llm.scheduler.allocator.num_free == N_BLOCKS


TOO_LONG = list(range(10, 600))  # 590 token ids: more than the 128-token context window


@pytest.mark.parametrize("path, body, status, param, words", [
    ("/v1/completions", b'{"prompt": "ROMEO:", ', 400, None, "not valid JSON"),
    ("/v1/completions", b"[" * 100_000, 400, None, "not valid JSON"),  # nested too deep for the parser
    ("/v1/completions", {"prompt": "x", "logprobs": 1, "top_logprobs": 2}, 400, "top_logprobs", "a chat field"),
    ("/v1/completions", b'["ROMEO:"]', 400, None, "not an object"),
    ("/v1/completions", b"", 400, None, "body is empty"),
    ("/v1/completions", {"prompt": "ROMEO:", "temperature": "hot"}, 400, "temperature", "not a number"),
    ("/v1/completions", {"prompt": "ROMEO:", "max_tokens": -1}, 400, "max_tokens", "integer >= 1"),
    ("/v1/completions", {"prompt": "ROMEO:", "n": True}, 400, "n", "integer >= 1"),
    ("/v1/completions", {"prompt": "ROMEO:", "n": 10**9}, 400, "n", "more samples than the engine runs at once"),
    ("/v1/completions", {"prompt": "ROMEO:", "stream": "yes"}, 400, "stream", "true or false"),
    ("/v1/completions", {"prompt": TOO_LONG, "max_tokens": 5}, 400, None, "context window"),
    ("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 115}, 400, None, "KV blocks"),  # fits 128, not the pool
    ("/v1/completions", {"prompt": "ROMEO:", "logit_bias": {"4096": 1}}, 400, None, "outside the vocabulary"),
    ("/v1/completions", {"max_tokens": 5}, 400, "prompt", "missing"),
    ("/v1/completions", {"prompt": "ROMEO:", "model": "gpt-4"}, 404, "model", "not served here"),
    ("/v1/completions", {"prompt": "ROMEO:", "logprobs": -1}, 400, "logprobs", "integer >= 0"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, 400,
     "top_logprobs", "needs logprobs: true"),
    ("/v1/completions", {"prompt": "ROMEO:", "echo": True}, 400, "echo", "not supported"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "response_format": {"type": "yaml"}}, 400, "response_format", "is invalid"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "messages", "non-empty list"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages",
     "text only"),
    ("/v1/nowhere", {}, 404, None, "no endpoint"),
])
def test_bad_input_gets_an_openai_error_and_the_server_carries_on(server, path, body, status, param, words):
    got, answer = post(server, path, body)
    assert got == status
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["param"] == param
    assert words in answer["error"]["message"] and answer["error"]["code"] is None
    assert post(server, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 2, "user": "x"})[0] == 200


def test_an_internal_error_is_a_500_and_the_engine_keeps_serving(server, model, monkeypatch):
    def broken_forward(*args, **kwargs):
        raise RuntimeError("a bug in the model")

    monkeypatch.setattr(model, "forward", broken_forward)
    status, body = post(server, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 3})
    assert status == 500 and "a bug in the model" in body["error"]["message"]
    monkeypatch.undo()
    assert post(server, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 3})[0] == 200
    assert server.engine.llm.scheduler.allocator.num_free == N_BLOCKS


def test_a_bug_outside_a_step_does_not_stop_the_engine_thread(server, monkeypatch, capsys):
    """The engine thread runs every call in a guard: a bug in an abort (each request ends with one) is a 500 for
    the requests in flight at worst, never a dead thread that leaves every later request waiting forever."""
    called = threading.Event()

    def broken_abort(request_id):
        called.set()
        raise RuntimeError("a bug in abort")

    monkeypatch.setattr(server.engine.llm, "abort", broken_abort)
    assert post(server, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 3})[0] == 200
    assert called.wait(20)  # the handler asks for the abort after its answer is sent: wait for the engine to run it
    monkeypatch.undo()
    assert post(server, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 3})[0] == 200
    assert server.engine.thread.is_alive() and "a bug in abort" in capsys.readouterr().err


def test_cli_a_port_in_use_is_one_error_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "tinyinfer", "serve", "--port", str(port)],
                              check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}") and done.stderr.count("\n") == 1


def test_cli_a_broken_chat_template_file_stops_the_server_at_start(tmp_path):
    """A model without a chat template is served (its chat endpoint says so); a broken template file is an error."""
    folder = tmp_path / "model"
    shutil.copytree(Path(tinyinfer.__file__).parent / "models" / "shakespeare", folder)
    (folder / "chat_template.json").write_text("{")
    done = subprocess.run([sys.executable, "-m", "tinyinfer", "serve", "--model", str(folder), "--port", "0"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "chat_template.json is not valid JSON" in done.stderr
    assert done.stderr.count("\n") == 1


def test_cli_serves_and_stops_cleanly_on_ctrl_c():
    process = subprocess.Popen([sys.executable, "-m", "tinyinfer", "serve", "--port", "0"],
                               stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()  # "tinyinfer: serving 'shakespeare' at http://127.0.0.1:PORT/v1 ..."
        url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=30) as response:
            assert response.status == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        assert "Traceback" not in process.stderr.read()
    finally:
        process.kill()


def test_a_connection_serves_request_after_request_until_a_stream_or_an_error(server, model):
    """HTTP/1.1 keep-alive, as OpenAI's client uses it: whole answers leave the connection open for the next
    request; a stream, and an error (whose request may not have been read whole), close it."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    want = model.generate("ROMEO:", max_tokens=6, temperature=0).text
    sockets = []
    for _ in range(2):
        connection.request("POST", "/v1/completions", json.dumps({"prompt": "ROMEO:", "max_tokens": 6, "temperature": 0}),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and json.load(response)["choices"][0]["text"] == want
        sockets.append(connection.sock)  # None once the server has closed the connection
    assert sockets[0] is not None and sockets[1] is sockets[0]  # both answers came over one connection
    connection.request("GET", "/v1/models")
    assert json.load(connection.getresponse())["data"][0]["id"] == "shakespeare"
    connection.request("POST", "/v1/completions", json.dumps({"prompt": "ROMEO:", "max_tokens": 0}))
    response = connection.getresponse()
    assert response.status == 400 and response.getheader("Connection") == "close"
    response.read()
    connection.request("POST", "/v1/completions", json.dumps({"prompt": "ROMEO:", "max_tokens": 3, "stream": True}))
    response = connection.getresponse()  # (a new socket: the server closed the last one)
    assert response.getheader("Connection") == "close" and response.read().endswith(b"data: [DONE]\n\n")
    connection.close()


WARM_UP = """
import gc
import tinyinfer
from tinyinfer.commands.serve import warm_up
from tinyinfer.constrain import build
from tinyinfer.engine import LLM
llm = LLM(tinyinfer.load("shakespeare"))
assert gc.get_freeze_count() == 0 and not build._vocabularies
warm_up(llm)
[(tokenizer, vocabulary)] = build._vocabularies.values()
print(gc.get_freeze_count(), tokenizer is llm.model.tokenizer, vocabulary.size, len(vocabulary.view_walks))
"""


def test_warm_up_builds_the_masks_vocabulary_and_freezes_what_lives_as_long_as_the_server():
    """Before it serves, `serve` builds the vocabulary structured output masks over (a first structured request
    then finds it) and freezes the objects alive then out of the garbage collector (in a process of its own:
    gc.freeze is process-wide)."""
    out = subprocess.run([sys.executable, "-c", WARM_UP], capture_output=True, text=True, timeout=120, check=True)
    frozen, same_tokenizer, size, walks = out.stdout.split()
    assert int(frozen) > 10_000  # the tokenizer, the trie's tables, the engine, the modules
    assert int(walks) >= 1  # a JSON string's body, walked (tests/test_constrain_masks.py)
    assert same_tokenizer == "True" and int(size) == tinyinfer.load("shakespeare").config.vocab_size
