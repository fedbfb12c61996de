"""Bad input never crashes tinyinfer: the API raises TinyInferError, the CLI prints one line and exits non-zero.

Every case passes something a user could pass (a damaged checkpoint, an out-of-range flag, a wrong type) and
checks two things: the failure is the documented one (TinyInferError, or one `error:` line on stderr and no
traceback), and its message names the problem (each case lists words the message must contain).
The CLI is called in-process through `tinyinfer.cli.main`; two subprocess tests check the real process.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

import tinyinfer
from tinyinfer.cli import main
from tinyinfer.engine import LLM
from tinyinfer.errors import TinyInferError
from tinyinfer.resolve import builtin_models
from tinyinfer.sampling import SamplingParams

from conftest import ROOT

BUILTIN = builtin_models()["shakespeare"]


@pytest.fixture(scope="module")
def model():
    return tinyinfer.load("shakespeare")


def copy_of_builtin(tmp_path, name="model"):
    """A private copy of the built-in model folder, free to damage."""
    return shutil.copytree(BUILTIN, tmp_path / name)


def cli_error(capsys, *argv) -> str:
    """Run the CLI in-process on bad input; check it failed the documented way; return the error line."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code not in (0, None), (argv, captured.out[-300:])
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "internal error" not in lines[0], lines[0]
    return lines[0]


def assert_names(message: str, *words: str) -> None:
    for word in words:
        assert word in message, (word, message)


# -- damaged checkpoints: the API and `generate` -------------------------------------------------------------

def edit_config(**fields):
    def damage(folder):
        config = json.loads((folder / "config.json").read_text())
        config.update(fields)
        (folder / "config.json").write_text(json.dumps(config))
    return damage


def write(name: str, content: str | bytes):
    def damage(folder):
        target = folder / name
        target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
    return damage


def safetensors_header(edit):
    """Rewrite the header of model.safetensors through `edit(header) -> header`, keeping the data."""
    def damage(folder):
        path = folder / "model.safetensors"
        data = path.read_bytes()
        (n,) = struct.unpack("<Q", data[:8])
        header = edit(json.loads(data[8:8 + n]))
        raw = json.dumps(header).encode()
        path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
    return damage


def entry(field, value, name="model.embed_tokens.weight"):
    def edit(header):
        header[name][field] = value
        return header
    return edit


DAMAGED_CHECKPOINTS = {
    "config.json is a list": (write("config.json", "[1, 2]"), ["config.json", "not an object"]),
    "num_hidden_layers is text": (edit_config(num_hidden_layers="four"), ["num_hidden_layers='four'"]),
    "num_hidden_layers negative": (edit_config(num_hidden_layers=-1), ["num_hidden_layers=-1"]),
    "num_hidden_layers zero": (edit_config(num_hidden_layers=0), ["num_hidden_layers=0"]),
    "num_hidden_layers true": (edit_config(num_hidden_layers=True), ["num_hidden_layers=True"]),
    "max_position_embeddings null": (edit_config(max_position_embeddings=None), ["max_position_embeddings=None"]),
    "rms_norm_eps text": (edit_config(rms_norm_eps="small"), ["norm_eps='small'"]),
    "rope_parameters text": (edit_config(rope_parameters="x"), ["config.json (llama)", "wrong type"]),
    "eos_token_id text": (lambda f: (edit_config(eos_token_id="x")(f), (f / "generation_config.json").unlink()),
                          ["token id 'x'", "eos_token_id"]),
    "generation_config.json is a list": (write("generation_config.json", "[1]"), ["generation_config.json", "not an object"]),
    "tokenizer.json is a list": (write("tokenizer.json", "[]"), ["tokenizer.json", "not a tokenizer.json"]),
    "tokenizer.json model is a number": (write("tokenizer.json", '{"model": 5}'), ["not a tokenizer.json"]),
    "tokenizer.json vocab is a number": (write("tokenizer.json", '{"model": {"type": "BPE", "vocab": 5, "merges": []}}'),
                                         ["not a tokenizer.json"]),
    "tokenizer.json merges hold numbers": (
        write("tokenizer.json", '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [5]}}'), ["not a tokenizer.json"]),
    "tokenizer_config.json not JSON": (write("tokenizer_config.json", "{bad"), ["tokenizer_config.json", "not valid JSON"]),
    "safetensors header not an object": (safetensors_header(lambda h: [1, 2]), ["model.safetensors", "not a JSON object"]),
    "tensor entry not an object": (safetensors_header(lambda h: {**h, "model.norm.weight": 5}), ["'model.norm.weight'"]),
    "tensor without dtype": (safetensors_header(lambda h: {**h, "model.norm.weight": {"shape": [1], "data_offsets": [0, 4]}}),
                             ["'model.norm.weight'", "dtype"]),
    "unknown dtype": (safetensors_header(entry("dtype", "F8_E9")), ["unsupported dtype 'F8_E9'"]),
    "offsets reversed": (safetensors_header(entry("data_offsets", [100, 50])), ["data_offsets [100, 50]"]),
    "offsets negative": (safetensors_header(entry("data_offsets", [-10, 50])), ["data_offsets [-10, 50]"]),
    "offsets not a pair": (safetensors_header(entry("data_offsets", "x")), ["data_offsets 'x'"]),
    "offsets beyond the file": (safetensors_header(entry("data_offsets", [0, 10**12])), ["truncated", "10000000000"]),
    "offsets span the wrong size": (safetensors_header(entry("data_offsets", [0, 8])), ["spans 8 bytes", "needs"]),
    "shape not a list of sizes": (safetensors_header(entry("shape", [-2048, 192])), ["shape [-2048, 192]"]),
    "header length beyond the file": (lambda f: write("model.safetensors", struct.pack("<Q", 10**12) + b"{}")(f),
                                      ["truncated", "header of 1000000000000 bytes"]),
    "header not JSON": (write("model.safetensors", struct.pack("<Q", 5) + b"hello"), ["header is not JSON"]),
    "safetensors is a folder": (lambda f: ((f / "model.safetensors").unlink(), (f / "model.safetensors").mkdir()),
                                ["model.safetensors"]),
    "index is not JSON": (write("model.safetensors.index.json", "{bad"), ["model.safetensors.index.json", "weight_map"]),
    "index without weight_map": (write("model.safetensors.index.json", '{"x": 1}'), ["weight_map"]),
    "weight_map is a list": (write("model.safetensors.index.json", '{"weight_map": [1]}'), ["weight_map"]),
}


@pytest.mark.parametrize("case", DAMAGED_CHECKPOINTS)
def test_damaged_checkpoint_is_refused_by_load_and_generate(tmp_path, capsys, case):
    damage, words = DAMAGED_CHECKPOINTS[case]
    folder = copy_of_builtin(tmp_path)
    damage(folder)
    with pytest.raises(TinyInferError) as info:
        tinyinfer.load(folder)
    assert_names(str(info.value), *words)
    assert_names(cli_error(capsys, "generate", "--model", folder, "--max-tokens", "2", "hi"), *words)


def test_a_model_that_is_neither_file_nor_folder(capsys):
    """/dev/null exists but is not a regular file, so it is read as a folder: its config.json cannot be read."""
    with pytest.raises(TinyInferError, match="cannot read config.json"):  # it was a NotADirectoryError
        tinyinfer.load("/dev/null")
    assert_names(cli_error(capsys, "generate", "--model", "/dev/null", "hi"), "cannot read config.json")


def test_a_bad_default_names_generation_config_json(tmp_path, capsys):
    folder = copy_of_builtin(tmp_path)
    write("generation_config.json", '{"do_sample": true, "top_k": "x"}')(folder)
    assert_names(cli_error(capsys, "generate", "--model", folder, "hi"), "top_k='x'", "generation_config.json")
    assert main(["generate", "--model", str(folder), "--top-k", "5", "--max-tokens", "2", "hi"]) == 0  # overridden


def test_a_folder_without_config_json(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert_names(cli_error(capsys, "generate", "--model", tmp_path / "empty", "hi"), "config.json not found")
    assert_names(cli_error(capsys, "memory", "--model", tmp_path / "empty"), "config.json not found")


# -- llama2.c files ---------------------------------------------------------------------------------------------

def llama2c_file(path, dim=8, hidden=16, layers=1, heads=2, kv_heads=2, vocab=10, seq_len=4, cut=0, v1=False,
                 weights=True):
    """A legacy (or version 1) llama2.c checkpoint of zero weights, `cut` bytes short of complete
    (weights=False: the header and 1000 bytes, for headers whose weights would not fit in memory)."""
    numbers = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq_len)
    header = struct.pack("<Ii", 0x616B3432, 1) + numbers + b"\1" + bytes(256 - 37) if v1 else numbers
    if not weights:
        path.write_bytes(header + bytes(1000))
        return path
    hd = dim // heads
    floats = (vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv_heads * hd * dim + 3 * hidden * dim) + dim
              + (0 if v1 else seq_len * hd))
    data = header + np.zeros(floats, np.float32).tobytes()
    path.write_bytes(data[:len(data) - cut])
    return path


def test_the_llama2c_helper_writes_a_loadable_file(tmp_path):
    """The bad files below differ from a good one in one way only."""
    for v1 in (False, True):
        model = tinyinfer.load(llama2c_file(tmp_path / f"ok{v1}.bin", v1=v1))
        assert model.logits([1, 2]).shape == (2, 10)


@pytest.mark.parametrize("kwargs, words", [
    (dict(cut=1), ["truncated"]),
    (dict(cut=1, v1=True), ["truncated"]),
    (dict(dim=6, heads=2, kv_heads=2), ["not a llama2.c checkpoint", "'dim': 6"]),  # odd head size: no RoPE pairs
    (dict(layers=2**30, dim=2**12, heads=2**6, kv_heads=2**6, hidden=2**14, weights=False), ["truncated"]),
    (dict(heads=0, weights=False), ["not a llama2.c checkpoint"]),
    (dict(vocab=-(2**31), weights=False), ["truncated"]),
], ids=["legacy cut short", "version 1 cut short", "odd head size", "a billion layers", "no heads", "huge vocabulary"])
def test_bad_llama2c_file_is_refused_by_load_and_memory(tmp_path, capsys, kwargs, words):
    path = llama2c_file(tmp_path / "model.bin", **kwargs)
    with pytest.raises(TinyInferError) as info:
        tinyinfer.load(path)
    assert_names(str(info.value), *words)
    assert_names(cli_error(capsys, "memory", "--model", path), *words)


def test_truncated_version1_header(tmp_path):
    path = tmp_path / "v1.bin"
    path.write_bytes(struct.pack("<Ii7i", 0x616B3432, 1, 8, 16, 1, 2, 2, 10, 4))  # 36 of the 256 header bytes
    with pytest.raises(TinyInferError, match="truncated: a llama2.c version 1 header is 256 bytes"):
        tinyinfer.load(path)


@pytest.mark.parametrize("zip_format", [True, False])
def test_pytorch_pickles_are_refused(tmp_path, capsys, zip_format):
    torch.save({"w": torch.zeros(2)}, tmp_path / "model.pt", _use_new_zipfile_serialization=zip_format)
    assert_names(cli_error(capsys, "generate", "--model", tmp_path / "model.pt", "hi"), "PyTorch pickle", "safetensors")


# -- command-line flags ---------------------------------------------------------------------------------------

BAD_COMMAND_LINES = [
    # argparse refuses these: one line, not the whole usage text
    (["generate"], ["required: prompt"]),
    (["bogus"], ["invalid choice: 'bogus'"]),
    (["generate", "--seed", "x", "hi"], ["--seed", "'x'"]),
    (["generate", "--seed", "1.5", "hi"], ["--seed", "'1.5'"]),
    (["generate", "--max-tokens", "1e9", "hi"], ["--max-tokens"]),
    (["generate", "--temperature", "hot", "hi"], ["--temperature", "'hot'"]),
    (["generate", "--device", "tpu", "hi"], ["--device", "'tpu'"]),
    (["bench"], ["BENCHMARK"]),
    (["bench", "bogus"], ["invalid choice: 'bogus'"]),
    (["course"], ["ACTION"]),
    # SamplingParams refuses these, naming the field and its range
    (["generate", "--max-tokens", "0", "hi"], ["max_tokens=0", ">= 1"]),
    (["generate", "--max-tokens", "-3", "hi"], ["max_tokens=-3"]),
    (["generate", "--temperature", "-1", "hi"], ["temperature=-1.0", ">= 0"]),
    (["generate", "--temperature", "nan", "hi"], ["temperature=nan"]),
    (["generate", "--temperature", "inf", "hi"], ["temperature=inf", "finite"]),
    (["generate", "--top-p", "0", "hi"], ["top_p=0.0", "(0, 1]"]),
    (["generate", "--top-p", "1.5", "hi"], ["top_p=1.5"]),
    (["generate", "--top-k", "-1", "hi"], ["top_k=-1"]),
    (["generate", "--repetition-penalty", "inf", "hi"], ["repetition_penalty=inf"]),
    (["generate", "--seed", "-1", "hi"], ["seed=-1"]),
    (["generate", "-n", "0", "hi"], ["n=0"]),
    (["generate", "--logprobs", "-1", "hi"], ["logprobs=-1"]),
    (["generate", "--logprobs", "100000", "hi"], ["logprobs=100000", "2048"]),
    (["generate", "--stop", "", "hi"], ["stop", "non-empty"]),
    (["generate", "--speculate", "0", "hi"], ["--speculate needs --draft"]),
    (["generate", "--speculate", "0", "--draft", "shakespeare-draft", "hi"], ["--speculate", ">= 1"]),
    (["generate", "--quantize", "bogus", "hi"], ["'bogus'", "int8"]),
    (["generate", "--max-tokens", "600", "hi"], ["context window of 512"]),
    (["generate", "hi " * 600], ["context window of 512", "shorten the prompt"]),
    (["generate", "--model", "/no/such/model", "hi"], ["'/no/such/model'", "Built-in models"]),
    (["generate", "--draft", "/no/such/model", "hi"], ["'/no/such/model'"]),
    (["generate", "--model", "", "hi"], ["model name is empty"]),  # it loaded the current folder
    (["tokenize", "--model", " ", "hi"], ["model name is empty"]),
    (["memory", "--model", ""], ["give --model"]),
    (["generate", "--regex", "(", "hi"], ["regex", "missing )"]),
    (["generate", "--system", "x", "hi"], ["--system needs --chat"]),
    (["chat", "--max-tokens", "0"], ["max_tokens=0"]),  # refused before the conversation starts
    (["chat", "--top-p", "2"], ["top_p=2.0"]),
    # the other commands' flags
    (["memory", "--model", "shakespeare", "--context", "0"], ["--context", ">= 1"]),
    (["memory", "--model", "shakespeare", "--context", "99999999"], ["context window of 512"]),
    (["memory", "--model", "shakespeare", "--bandwidth", "nan"], ["--bandwidth", "finite"]),
    (["memory", "--model", "shakespeare", "--batch", "0"], ["--batch"]),
    (["memory", "--params", "nan", "--layers", "1", "--kv-heads", "1", "--head-dim", "1"], ["--params"]),
    (["memory", "--params", "1e400", "--layers", "1", "--kv-heads", "1", "--head-dim", "1"], ["--params"]),
    (["memory", "--params", "0.5", "--layers", "1", "--kv-heads", "1", "--head-dim", "1"], ["--params 0.5"]),
    (["memory", "--params", "7e9", "--layers", "-1", "--kv-heads", "1", "--head-dim", "1"], ["--layers"]),
    (["memory", "--params", "7e9", "--layers", "1"], ["missing --kv-heads --head-dim"]),
    (["tokenize", "--max-rows", "-1", "hi"], ["--max-rows"]),
    (["tokenize", "--model", "/no/such/model", "hi"], ["'/no/such/model'"]),
    (["course", "verify", "--jobs", "0"], ["--jobs"]),
    (["course", "start", "DIR", "--only", "bogus"], ["'bogus'", "3.1"]),
    (["bench", "serve", "--prompt-len", "5:2"], ["--prompt-len '5:2'", "MIN <= MAX"]),
    (["bench", "serve", "--requests", "0"], ["--requests"]),
    (["bench", "serve", "--rate", "0"], ["--rate"]),
    (["bench", "serve", "--rate", "nan"], ["--rate"]),
    (["bench", "serve", "--seed", "-1"], ["--seed"]),
    (["bench", "serve", "--prefix-requests", "0"], ["--prefix-requests"]),
    (["bench", "step", "--concurrency", "1"], ["--concurrency"]),
    (["bench", "step", "--model", "shakespeare", "--context", "500"], ["--context 500", "lower --context"]),
    (["bench", "decode", "--threads", "0"], ["--threads"]),
    (["bench", "decode", "--tokens", "0"], ["--tokens"]),
    (["bench", "tokenizer", "--repeats", "0"], ["--repeats"]),
    (["bench", "grammar", "--tokens", "0"], ["--tokens"]),
    (["bench", "speculative", "-k", "0"], ["-k"]),
    (["bench", "moe", "--prompt-tokens", "0"], ["--prompt-tokens"]),
]


@pytest.mark.parametrize("argv, words", BAD_COMMAND_LINES, ids=[" ".join(argv)[:60] for argv, _ in BAD_COMMAND_LINES])
def test_bad_command_line_is_one_error_line(capsys, tmp_path, argv, words):
    argv = [str(tmp_path / "workspace") if a == "DIR" else a for a in argv]
    assert_names(cli_error(capsys, *argv), *words)


@pytest.mark.parametrize("name, content", [("tokenizer_config.json", "{bad"), ("chat_template.json", "[1]")])
def test_chat_with_a_broken_template_file(capsys, tmp_path, name, content):
    folder = copy_of_builtin(tmp_path)
    write(name, content)(folder)
    assert_names(cli_error(capsys, "chat", "--model", folder), name)


@pytest.mark.parametrize("line, words", [("{bad", ["line 1 is not JSON"]), ('{"schema": 5}', ["line 1 is not a schema row"])])
def test_bench_grammar_with_a_bad_schema_file(capsys, tmp_path, line, words):
    (tmp_path / "a.jsonl").write_text(line + "\n")
    argv = ["bench", "grammar", "--schemas", tmp_path, "--tokenizer", BUILTIN / "tokenizer.json", "--engines", "tinyinfer"]
    assert_names(cli_error(capsys, *argv), "a.jsonl", *words)


def test_bench_tokenizer_with_a_text_that_is_not_utf8(capsys, tmp_path):
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    assert_names(cli_error(capsys, "bench", "tokenizer", "--text", tmp_path / "latin1.txt", "--tokenizer", BUILTIN),
                 "latin1.txt", "not UTF-8")


def test_course_start_on_a_file(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    assert_names(cli_error(capsys, "course", "start", tmp_path / "file"), "is a file", "new directory")
    # a folder that cannot be made: the file-system error itself, as one line naming the path
    assert_names(cli_error(capsys, "course", "start", tmp_path / "file" / "sub"), "cannot use", "file/sub")


def test_tokenize_refuses_undecodable_text(capsys):
    assert_names(cli_error(capsys, "tokenize", "caf\udce9"), "UTF-8")  # b"caf\xe9" (Latin-1) as Python reads argv


def test_generate_refuses_undecodable_prompt_and_stop(capsys):
    assert_names(cli_error(capsys, "generate", "caf\udce9"), "the prompt", "UTF-8")
    assert_names(cli_error(capsys, "generate", "--stop", "\udce9", "hi"), "stop string", "UTF-8")


def test_ctrl_c_during_generation_exits_130_without_traceback(capsys, monkeypatch):
    def interrupted(stream):
        raise KeyboardInterrupt
    monkeypatch.setattr("tinyinfer.commands.generate.write_stream", interrupted)
    assert main(["generate", "hi"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_out_of_memory_is_one_error_line(capsys, monkeypatch):
    def too_big(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr("tinyinfer.commands.generate.tinyinfer.load", too_big)  # as a config of a billion layers
    assert_names(cli_error(capsys, "generate", "hi"), "out of memory")


def test_help_still_exits_zero(capsys):
    with pytest.raises(SystemExit) as info:
        main(["generate", "--help"])
    assert info.value.code == 0 and "--max-tokens" in capsys.readouterr().out


# -- the real process: one line, no traceback ------------------------------------------------------------------

def test_process_with_undecodable_argv_bytes_prints_one_line():
    run = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", b"caf\xe9", "--seed", "x"],
                         capture_output=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2 and run.stdout == b""
    assert run.stderr.decode().strip().splitlines() == [
        "error: tinyinfer generate: argument --seed: invalid int value: 'x'; see `tinyinfer generate --help`"]
    run = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", "--max-tokens", "2", b"caf\xe9"],
                         capture_output=True, cwd=ROOT, timeout=120)
    lines = run.stderr.decode(errors="replace").strip().splitlines()
    assert run.returncode == 1 and len(lines) == 1 and "the prompt is not valid UTF-8" in lines[0], lines


def test_process_interrupted_by_ctrl_c_exits_130():
    process = subprocess.Popen([sys.executable, "-m", "tinyinfer", "generate", "--max-tokens", "500",
                                "--ignore-eos", "ROMEO:"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    process.stdout.read(1)  # generation has started
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130
    assert err.decode().strip().splitlines()[-1] == "interrupted" and b"Traceback" not in err


# -- the Python API ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    (dict(model=5), ["int"]),
    (dict(model=b"shakespeare"), ["bytes"]),
    (dict(model="shakespeare", device="tpu"), ["'tpu'", "cpu"]),
    (dict(model="shakespeare", device=None), ["None"]),
    (dict(model="shakespeare", dtype="bfloat16"), ["'bfloat16'", "float32"]),
    (dict(model="shakespeare", dtype=[1]), ["[1]", "float32"]),
    (dict(model="shakespeare", tokenizer="/no/such/tokenizer"), ["/no/such/tokenizer"]),
])
def test_load_with_bad_arguments(kwargs, words):
    with pytest.raises(TinyInferError) as info:
        tinyinfer.load(**kwargs)
    assert_names(str(info.value), *words)


BAD_SAMPLING = [
    (dict(temperature="hot"), "temperature='hot'"),
    (dict(temperature=math.nan), "temperature=nan"),
    (dict(temperature=math.inf), "temperature=inf"),
    (dict(temperature=np.float32("nan")), "temperature="),
    (dict(temperature=1e-40), "temperature=1e-40 is too small"),  # it sampled token 0 every time
    (dict(top_p=0), "top_p=0"),
    (dict(top_p=-math.inf), "top_p=-inf"),
    (dict(repetition_penalty=math.inf), "repetition_penalty=inf"),
    (dict(min_p=math.nan), "min_p=nan"),
    (dict(top_k=2.0), "top_k=2.0"),
    (dict(n=0), "n=0"),
    (dict(n=True), "n=True"),
    (dict(max_tokens=True), "max_tokens=True"),
    (dict(max_tokens="5"), "max_tokens='5'"),
    (dict(seed="x"), "seed='x'"),
    (dict(logprobs=2.5), "logprobs=2.5"),
    (dict(logit_bias={5: "x"}), "logit_bias[5]='x'"),
    (dict(logit_bias={5: math.nan}), "logit_bias[5]=nan"),
    (dict(logit_bias={5.7: 1.0}), "logit_bias key=5.7"),
    (dict(logit_bias={"abc": 1.0}), "logit_bias key='abc'"),
    (dict(logit_bias={None: 1.0}), "logit_bias key=None"),
    (dict(logit_bias=[1, 2]), "logit_bias=[1, 2]"),
    (dict(stop=""), "non-empty"),
    (dict(stop=[1]), "non-empty"),
    (dict(stop=["\udcff"]), "stop string is not valid UTF-8"),
    (dict(stop_token_ids=5), "stop_token_ids=5"),
    (dict(stop_token_ids=["a"]), "stop_token_ids='a'"),
    (dict(ignore_eos="no"), "ignore_eos='no'"),
]


@pytest.mark.parametrize("fields, words", BAD_SAMPLING, ids=str)
def test_bad_sampling_params_are_refused(model, fields, words):
    with pytest.raises(TinyInferError) as info:
        SamplingParams(**fields)
    assert_names(str(info.value), words)
    with pytest.raises(TinyInferError):
        model.generate("hi", **fields)


@pytest.mark.parametrize("fields, words", [
    (dict(logit_bias={99999: 1.0}), ["token id 99999", "[0, 2047]"]),
    (dict(stop_token_ids=[2048]), ["token id 2048"]),
    (dict(logprobs=10**6), ["logprobs=1000000", "2048"]),
])
def test_sampling_params_beyond_the_vocabulary(model, fields, words):
    with pytest.raises(TinyInferError) as info:
        model.generate("hi", SamplingParams(**fields))
    assert_names(str(info.value), *words)


def test_generation_config_that_is_not_an_object():
    with pytest.raises(TinyInferError, match="generation_config.json holds list"):
        SamplingParams.from_generation_config([1])


class NotAConstraint:
    pass


BAD_GENERATE_CALLS = {
    "prompt None": (None, {}, ["NoneType"]),
    "prompt an int": (5, {}, ["int", "list of token ids"]),
    "prompt bytes": (b"hi", {}, ["bytes"]),
    "prompt empty list": ([], {}, ["empty"]),
    "negative id": ([-1], {}, ["-1", "[0, 2047]"]),
    "id beyond the vocabulary": ([99999], {}, ["99999"]),
    "id a string": (["a"], {}, ["'a'"]),
    "id a float": ([1.5], {}, ["1.5"]),
    "id a bool": ([True], {}, ["True"]),
    "nested list": ([[1, 2]], {}, ["[1, 2]"]),
    "text with undecodable bytes": ("hi\udcff", {}, ["the prompt is not valid UTF-8"]),
    "text that encodes to nothing": ("", dict(add_special_tokens=False), ["empty"]),
    "prompt beyond the context window": ("hi " * 1000, {}, ["context window"]),
    "params a dict": ("hi", dict(params={"temperature": 1}), ["SamplingParams", "dict"]),
    "params and keywords": ("hi", dict(params=SamplingParams(), temperature=1), ["not both"]),
    "misspelt keyword": ("hi", dict(temprature=1), ["'temprature'"]),
    "constraint without its methods": ("hi", dict(constraint=NotAConstraint()), ["allowed_mask"]),
    "constraint factory making a non-constraint": ("hi", dict(constraint=NotAConstraint), ["allowed_mask"]),
    "draft a name": ("hi", dict(draft="shakespeare-draft"), ["draft", "tinyinfer.load"]),
    "stream a string": ("hi", dict(stream="no"), ["stream='no'"]),  # "no" is truthy: it streamed
}


@pytest.mark.parametrize("case", BAD_GENERATE_CALLS)
def test_generate_with_bad_arguments(model, case):
    prompt, kwargs, words = BAD_GENERATE_CALLS[case]
    with pytest.raises(TinyInferError) as info:
        model.generate(prompt, **kwargs)
    assert_names(str(info.value), *words)


@pytest.mark.parametrize("ids", ["hi", [[1]], [1.5], None, [True], 5, [], [2048]], ids=repr)
def test_logits_of_bad_ids(model, ids):
    with pytest.raises(TinyInferError, match="the input of logits()"):  # "hi" and [[1]] were ValueErrors
        model.logits(ids)


@pytest.mark.parametrize("kwargs", [dict(max_seqs=0), dict(max_seqs="x"), dict(max_len=-1)], ids=str)
def test_kv_cache_of_bad_sizes(model, kwargs):
    with pytest.raises(TinyInferError, match=f"{next(iter(kwargs))}="):  # negative dimensions, TypeError
        model.new_cache(**kwargs)


@pytest.mark.parametrize("kwargs, words", [
    (dict(model=42), ["LLM needs a model, not int", "LLM('shakespeare')"]),  # a name or path is loaded
    (dict(block_size=0), ["block_size=0"]),
    (dict(block_size=True), ["block_size=True"]),
    (dict(n_blocks=-1), ["n_blocks=-1"]),
    (dict(n_blocks="x"), ["n_blocks='x'"]),
    (dict(max_num_seqs=0), ["max_num_seqs=0"]),
    (dict(max_num_batched_tokens=True), ["max_num_batched_tokens=True"]),
])
def test_engine_with_bad_arguments(model, kwargs, words):
    kwargs = {"model": model, **kwargs}
    with pytest.raises(TinyInferError) as info:
        LLM(kwargs.pop("model"), **kwargs)
    assert_names(str(info.value), *words)


@pytest.mark.parametrize("prompt, fields, words", [
    ([99999], {}, ["99999"]),
    ([], {}, ["empty"]),
    ("hi", dict(temperature="x"), ["temperature='x'"]),
    ("hi", dict(max_tokens=10**6), ["context window"]),
    ("hi", dict(logit_bias={-1: 1.0}), ["logit_bias key=-1"]),
    (None, {}, ["NoneType"]),
    ("hi", dict(arrival="now"), ["arrival='now'"]),  # it was queued; its metrics raised TypeError later
])
def test_engine_refuses_a_bad_request_without_disturbing_the_others(model, prompt, fields, words):
    llm = LLM(model, max_num_seqs=4)
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    expected = model.generate([5, 6, 7], params).token_ids
    good = llm.add_request([5, 6, 7], params)
    llm.step()  # the good request is running when the bad one arrives
    with pytest.raises(TinyInferError) as info:
        llm.add_request(prompt, **fields)
    assert_names(str(info.value), *words)
    finished = {}
    while llm.has_unfinished():
        finished.update({out.request_id: out for out in llm.step() if out.finished})
    assert list(finished) == [good] and finished[good].token_ids == expected


def test_engine_batch_with_one_bad_request_leaves_nothing_queued(model):
    llm = LLM(model)
    with pytest.raises(TinyInferError, match="context window"):
        llm.generate(["a", "b"], [SamplingParams(max_tokens=2), SamplingParams(max_tokens=10**6)])
    assert not llm.has_unfinished() and not llm.requests
    with pytest.raises(TinyInferError, match="prompts must be"):
        llm.generate(5)
    assert llm.generate(["a"], SamplingParams(max_tokens=2, temperature=0))[0].finished  # still serves
