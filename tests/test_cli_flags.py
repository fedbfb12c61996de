"""Every flag of `python -m tinyinfer generate` has its effect: what it prints differs from the output without the
flag, and equals what the Python API gives with the same setting (so a flag that is parsed and then dropped, or
applied to a copy, fails here).

The tiny Llama checkpoint's generation_config.json is greedy, so the sampling flags are checked on top of a seeded
sampling baseline (--temperature 1.5 --seed 3); --quantize and --kv-cache-dtype change the logits by ~1e-2, so
they are checked on the logprobs printed by --logprobs (3 decimals), which the API prints the same way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gguf_files import write_gguf
from tiny_models import tiny_checkpoint  # noqa: F401 - a fixture

import tinyinfer
from tinyinfer.cli import main
from tinyinfer.commands.generate import print_logprobs
from tinyinfer.lora import load_adapter
from tinyinfer.quantize import quantize_model

PROMPT = "Once upon a time"
SAMPLED = dict(temperature=1.5, seed=3, max_tokens=24)  # the baseline the sampling flags change
# flag -> (its value on the command line, the keyword the API takes)
SAMPLING_FLAGS = {
    "--top-k": ("5", dict(top_k=5)),
    "--top-p": ("0.5", dict(top_p=0.5)),
    "--min-p": ("0.1", dict(min_p=0.1)),
    "--repetition-penalty": ("3.0", dict(repetition_penalty=3.0)),
    "--presence-penalty": ("2.0", dict(presence_penalty=2.0)),
    "--frequency-penalty": ("2.0", dict(frequency_penalty=2.0)),
    "--temperature": ("0.5", dict(temperature=0.5)),
    "--seed": ("4", dict(seed=4)),
    "--max-tokens": ("7", dict(max_tokens=7)),
}


def cli(*args) -> tuple[int, str, str]:
    """Run `tinyinfer generate` in this process; (exit status, stdout, stderr)."""
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["generate", *args])
    return status, out.getvalue(), err.getvalue()


def flags(settings: dict) -> list[str]:
    return [item for key, value in settings.items() for item in ("--" + key.replace("_", "-"), str(value))]


@pytest.fixture(scope="module")
def folder(tiny_checkpoint):
    return str(tiny_checkpoint("llama"))


@pytest.fixture(scope="module")
def model(folder):
    return tinyinfer.load(folder)


@pytest.mark.parametrize("flag", SAMPLING_FLAGS)
def test_each_sampling_flag_prints_what_generate_gives_and_changes_the_text(flag, folder, model):
    value, setting = SAMPLING_FLAGS[flag]
    status, base, _ = cli("--model", folder, PROMPT, *flags(SAMPLED))
    assert status == 0 and base == model.generate(PROMPT, **SAMPLED).text + "\n"
    status, out, _ = cli("--model", folder, PROMPT, *flags(SAMPLED), flag, value)
    assert status == 0
    assert out == model.generate(PROMPT, **{**SAMPLED, **setting}).text + "\n"
    assert out != base, f"{flag} {value} changed nothing"


def test_n_prints_each_sample_generate_gives(folder, model):
    status, out, _ = cli("--model", folder, PROMPT, *flags(SAMPLED), "-n", "3")
    texts = [result.text for result in model.generate(PROMPT, n=3, **SAMPLED)]
    assert status == 0 and len(set(texts)) == 3
    assert out == "".join(f"--- sample {i + 1} of 3 ---\n{text}\n" for i, text in enumerate(texts))


def test_stop_cuts_the_text_where_generate_cuts_it(folder, model):
    base = model.generate(PROMPT, **SAMPLED).text
    stop = base[5:7]  # two characters from the middle of the baseline
    status, out, _ = cli("--model", folder, PROMPT, *flags(SAMPLED), "--stop", stop)
    cut = model.generate(PROMPT, stop=[stop], **SAMPLED)
    assert status == 0 and out == cut.text + "\n" and cut.finish_reason == "stop" and stop not in out
    assert len(out) <= 6 < len(base)


def test_ignore_eos_keeps_going_past_eos(folder, tmp_path):
    """The checkpoint's EOS redeclared as the 4th greedy token: generation ends there, unless --ignore-eos."""
    greedy = tinyinfer.load(folder).generate(PROMPT, temperature=0, max_tokens=12, ignore_eos=True).token_ids
    eos = greedy[3]
    copy = tmp_path / "eos"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": eos}))
    model = tinyinfer.load(copy)
    short, long = (model.generate(PROMPT, temperature=0, max_tokens=12, ignore_eos=flag) for flag in (False, True))
    assert short.finish_reason == "eos" and long.finish_reason == "length" and len(long.text) > len(short.text)
    args = ("--model", str(copy), PROMPT, "--temperature", "0", "--max-tokens", "12")
    assert cli(*args)[1] == short.text + "\n"
    assert cli(*args, "--ignore-eos")[1] == long.text + "\n"


def test_tokenizer_replaces_the_models_own(folder, tmp_path):
    """--tokenizer: a folder without a tokenizer reads text with the one given; a GGUF file whose tokenizer tinyinfer
    cannot build (a T5 one) loads with a tokenizer.json given instead, and prints what the Hugging Face folder does."""
    args = (PROMPT, "--temperature", "0", "--max-tokens", "8")
    status, want, _ = cli("--model", folder, *args)
    assert status == 0 and want.strip()
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns("tokenizer*"))
    status, _, err = cli("--model", str(bare), *args)
    assert status == 1 and "has no tokenizer" in err and "--tokenizer PATH" in err
    assert cli("--model", str(bare), "--tokenizer", folder, *args)[1] == want
    t5 = write_gguf(Path(folder), tmp_path / "t5.gguf", metadata={"tokenizer.ggml.model": "t5"})
    status, _, err = cli("--model", str(t5), *args)
    assert status == 1 and "'t5' (tokenizer.ggml.model)" in err and "--tokenizer" in err
    assert cli("--model", str(t5), "--tokenizer", str(Path(folder) / "tokenizer.json"), *args)[1] == want


def logprob_lines(result, tokenizer, capsys) -> str:
    """What `generate --logprobs` prints for `result` on stderr (before its statistics line)."""
    capsys.readouterr()
    print_logprobs(result, tokenizer)
    return capsys.readouterr().err


def cli_logprob_lines(*args) -> str:
    status, _, err = cli(*args)
    assert status == 0
    return "".join(line + "\n" for line in err.splitlines() if not line.startswith("["))


GREEDY = dict(temperature=0, max_tokens=8, logprobs=2)


def test_quantize_prints_the_api_quantised_models_logprobs(folder, model, capsys):
    """--quantize int8 equals quantize_model(load(folder), "int8") and differs from float32 in the logprobs."""
    status, out, _ = cli("--model", folder, PROMPT, *flags(GREEDY), "--quantize", "int8")
    assert status == 0
    quantised = quantize_model(tinyinfer.load(folder), "int8")
    want = logprob_lines(quantised.generate(PROMPT, **GREEDY), quantised.tokenizer, capsys)
    assert cli_logprob_lines("--model", folder, PROMPT, *flags(GREEDY), "--quantize", "int8") == want
    assert want != logprob_lines(model.generate(PROMPT, **GREEDY), model.tokenizer, capsys)


def test_kv_cache_dtype_prints_the_api_models_logprobs(folder, model, capsys):
    cached = tinyinfer.load(folder, kv_cache_dtype="int8")
    want = logprob_lines(cached.generate(PROMPT, **GREEDY), cached.tokenizer, capsys)
    assert cli_logprob_lines("--model", folder, PROMPT, *flags(GREEDY), "--kv-cache-dtype", "int8") == want
    assert want != logprob_lines(model.generate(PROMPT, **GREEDY), model.tokenizer, capsys)


def test_logprobs_prints_each_tokens_logprob_and_alternatives(folder, model, capsys):
    result = model.generate(PROMPT, **GREEDY)
    lines = cli_logprob_lines("--model", folder, PROMPT, *flags(GREEDY))
    assert lines == logprob_lines(result, model.tokenizer, capsys)
    assert lines.count("\n") == len(result.token_ids) == 8 and lines.count("|") == 8


def test_lora_prints_what_the_adapter_gives():
    """The built-in adapter on the built-in model: the API's text with the adapter, not the base model's."""
    args = ("ROMEO:", "--temperature", "0", "--max-tokens", "24")
    base, adapted = tinyinfer.load("shakespeare"), tinyinfer.load("shakespeare")
    load_adapter(adapted, "shout", "shakespeare-shout")
    want = adapted.generate("ROMEO:", temperature=0, max_tokens=24, lora="shout").text
    assert want != base.generate("ROMEO:", temperature=0, max_tokens=24).text
    assert cli(*args, "--lora", "shakespeare-shout")[1] == want + "\n"
