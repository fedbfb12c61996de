"""Multi-LoRA serving over HTTP, vLLM's way: each adapter is a model of its own name, listed with the base as its
parent; a request naming it runs with it, in the same batches as the others, and gets what model.generate(lora=)
gives; any other name is a 404 that lists what is served."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
from test_server import post, post_concurrently, stream_events, wait_idle

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.cli import main
from tinyinfer.commands.serve import load_adapters
from tinyinfer.engine import LLM
from tinyinfer.engine.server import Server
from tinyinfer.errors import TinyInferError
from tinyinfer.lora import builtin_adapters, load_adapter
from tinyinfer.sampling import SamplingParams

SHOUT = "shakespeare-shout"  # the built-in adapter: the built-in model, fine-tuned to write in capitals


@pytest.fixture(scope="module")
def reference():
    """The model run directly, with the adapter loaded as it is on the server: what every answer must equal."""
    model = tinyinfer.load("shakespeare")
    load_adapter(model, "shout", SHOUT)
    return model


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The built-in adapter served twice: by its built-in name as "shout", and from a PEFT folder as "folder"."""
    folder = tmp_path_factory.mktemp("adapter") / "shout"
    shutil.copytree(builtin_adapters()[SHOUT], folder)
    model = tinyinfer.load("shakespeare")
    adapters = load_adapters(model, [f"shout={SHOUT}", f"folder={folder}"])  # what `serve --lora` does
    server = Server(LLM(model), port=0, model_name="shakespeare", chat_template=ChatTemplate.for_model("shakespeare"),
                    adapters=adapters)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.close()


def completion(server, model: str, prompt: str = "ROMEO:", **knobs) -> dict:
    status, body = post(server, "/v1/completions", {"model": model, "prompt": prompt, **knobs})
    assert status == 200, body
    assert body["model"] == model  # the name the request asked for
    return body


def test_models_lists_the_base_and_each_adapter_with_its_parent(server):
    with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as response:
        cards = json.load(response)["data"]
    assert [card["id"] for card in cards] == ["shakespeare", "shout", "folder"]
    assert "parent" not in cards[0]
    assert [(card["parent"], card["root"]) for card in cards[1:]] == [("shakespeare", SHOUT),
                                                                       ("shakespeare", server.adapters["folder"])]
    assert all(card["object"] == "model" and card["owned_by"] == "tinyinfer" and card["created"] == cards[0]["created"]
               for card in cards)


@pytest.mark.parametrize("knobs", [{"temperature": 0}, {"temperature": 0.8, "top_p": 0.95, "seed": 11}])
def test_an_adapter_answers_as_model_generate_with_it(server, reference, knobs):
    request = {"prompt": "ROMEO:", "max_tokens": 24, **knobs}
    shout = reference.generate(**request, lora="shout").text
    base = completion(server, "shakespeare", **request)["choices"][0]["text"]
    assert completion(server, "shout", **request)["choices"][0]["text"] == shout
    assert completion(server, "folder", **request)["choices"][0]["text"] == shout  # the same adapter, from a folder
    assert base == reference.generate(**request).text and base != shout

    def capitals(text):
        letters = [c for c in text if c.isalpha()]
        return sum(c.isupper() for c in letters) / len(letters)

    assert capitals(shout) > 0.8 > capitals(base)  # the adapter really is on: it writes in capitals


def test_chat_logprobs_n_and_structured_output_run_with_the_adapter(server, reference):
    messages = [{"role": "user", "content": "Who art thou?"}]
    status, chat = post(server, "/v1/chat/completions", {"model": "shout", "messages": messages, "max_tokens": 12,
                                                          "temperature": 0})
    prompt = ChatTemplate.for_model("shakespeare").render(messages, add_generation_prompt=True)
    solo = reference.generate(prompt, max_tokens=12, temperature=0, add_special_tokens=False, lora="shout")
    assert status == 200 and chat["model"] == "shout" and chat["choices"][0]["message"]["content"] == solo.text

    knobs = {"max_tokens": 10, "temperature": 0.9, "top_p": 0.95, "top_k": 40, "seed": 3, "n": 2, "logprobs": 2}
    body = completion(server, "shout", "JULIET:", **knobs)
    [samples] = LLM(reference).generate(["JULIET:"], SamplingParams(**knobs), lora="shout")
    assert [c["text"] for c in body["choices"]] == [s.text for s in samples]
    for choice, sample in zip(body["choices"], samples):
        assert choice["logprobs"]["token_logprobs"] == pytest.approx([c.logprob for c in sample.logprobs], abs=1e-5)

    choices = ["ROMEO", "JULIET", "NURSE"]
    guided = completion(server, "shout", "Who speaks? ", max_tokens=8, temperature=0, guided_choice=choices)
    assert guided["choices"][0]["text"] in choices


def test_concurrent_base_and_adapter_requests_share_steps_and_get_their_solo_outputs(server, reference):
    requests = [{"model": model, "prompt": f"{name}:", "max_tokens": 24, "temperature": t, "seed": i,
                 "ignore_eos": True}
                for i, (model, name, t) in enumerate([("shout", "ROMEO", 0), ("shakespeare", "ROMEO", 0),
                                                      ("folder", "JULIET", 0.8), ("shakespeare", "HAMLET", 1.0),
                                                      ("shout", "LEAR", 0.7), ("shakespeare", "LEAR", 0.7)])]
    llm, first_step = server.engine.llm, len(server.engine.llm.step_log)
    answers = post_concurrently(server, "/v1/completions", requests)
    for request, (status, body) in zip(requests, answers):
        model, knobs = request["model"], {k: v for k, v in request.items() if k != "model"}
        solo = reference.generate(**knobs, lora=None if model == "shakespeare" else "shout")
        assert status == 200 and body["model"] == model and body["choices"][0]["text"] == solo.text
    assert max(record.num_seqs for record in llm.step_log[first_step:]) > 1  # they shared engine steps


def test_an_adapter_stream_joins_to_the_whole_answer(server):
    request = {"model": "shout", "prompt": "KING HENRY:", "max_tokens": 30, "temperature": 0.8, "seed": 3}
    whole = completion(server, **request)
    events = stream_events(server, "/v1/completions", request)
    assert events[-1] == "[DONE]" and all(e["model"] == "shout" for e in events[:-1])
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == whole["choices"][0]["text"]


def test_an_adapter_request_whose_client_leaves_is_aborted(server):
    llm = server.engine.llm
    wait_idle(server)
    free, generated_before, max_tokens = llm.scheduler.allocator.num_free, llm.generated_tokens, 400
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("POST", "/v1/completions", json.dumps({"model": "shout", "prompt": "ROMEO:", "stream": True,
                                                             "max_tokens": max_tokens, "ignore_eos": True}))
    response = connection.getresponse()
    assert response.readline().startswith(b"data: ")  # running
    response.close()
    connection.close()
    wait_idle(server)
    assert not llm.has_unfinished() and llm.generated_tokens - generated_before < max_tokens
    assert llm.scheduler.allocator.num_free == free


@pytest.mark.parametrize("model", ["shakespeare-shout", ["shout"], ""])
def test_a_model_not_served_is_a_404_listing_the_served_names(server, model):
    status, body = post(server, "/v1/completions", {"model": model, "prompt": "ROMEO:", "max_tokens": 2})
    assert status == 404 and body["error"]["param"] == "model" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].endswith("not served here: this server serves 'shakespeare', 'shout', 'folder'")


def test_the_server_refuses_an_adapter_it_cannot_serve(reference):
    with pytest.raises(TinyInferError, match="has the served model's name"):
        Server(LLM(reference), port=0, model_name="shout", adapters={"shout": SHOUT})
    with pytest.raises(TinyInferError, match="no LoRA adapter named 'sql' is loaded"):
        Server(LLM(reference), port=0, adapters={"sql": "sql-folder"})


def test_cli_a_bad_adapter_is_one_error_line():
    done = subprocess.run([sys.executable, "-m", "tinyinfer", "serve", "--port", "0", "--lora", "bad=/nonexistent"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("error: /nonexistent has no adapter_config.json") and done.stderr.count("\n") == 1


@pytest.mark.parametrize("argv, words", [
    (["--lora", f"x={SHOUT}", "--served-model-name", "x"], "has the served model's name"),
    (["--lora", f"x={SHOUT}", "--lora", "x=elsewhere"], "names two adapters 'x'"),
    (["--lora", f"={SHOUT}"], "is incomplete"),
])
def test_cli_refuses_adapter_names_that_clash(argv, words, capsys):
    assert main(["serve", "--port", "0", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1


def test_adapters_load_and_unload_at_run_time_as_vllm_does(reference):
    """POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's), served only when asked for."""
    model = tinyinfer.load("shakespeare")
    server = Server(LLM(model), port=0, model_name="shakespeare", runtime_lora=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        def answer(path, body) -> tuple[int, bytes]:
            request = urllib.request.Request(server.url + path, json.dumps(body).encode())
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status, response.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        assert post(server, "/v1/completions", {"model": "late", "prompt": "ROMEO:"})[0] == 404
        assert answer("/v1/load_lora_adapter", {"lora_name": "late", "lora_path": SHOUT}) == (
            200, b"Success: LoRA adapter 'late' added successfully.")
        assert [card["id"] for card in json.load(urllib.request.urlopen(server.url + "/v1/models"))["data"]] == [
            "shakespeare", "late"]
        want = reference.generate("ROMEO:", max_tokens=12, temperature=0, lora="shout").text
        assert completion(server, "late", max_tokens=12, temperature=0)["choices"][0]["text"] == want
        assert answer("/v1/load_lora_adapter", {"lora_name": "late", "lora_path": SHOUT})[0] == 400
        assert answer("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/no/such/folder"})[0] == 400
        assert answer("/v1/unload_lora_adapter", {"lora_name": "late"})[0] == 200
        assert post(server, "/v1/completions", {"model": "late", "prompt": "ROMEO:"})[0] == 404
        assert answer("/v1/unload_lora_adapter", {"lora_name": "late"})[0] == 404
    finally:
        server.shutdown()
        server.close()


def test_runtime_adapter_loading_is_off_unless_asked(server):
    status, body = post(server, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": SHOUT})
    assert status == 404 and "no endpoint" in body["error"]["message"]
