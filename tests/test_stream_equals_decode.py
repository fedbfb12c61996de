"""What `generate` prints is what `tokenizer.decode` gives for the same tokens, in every tokenizer family: the
text the generated ids add to the prompt's, decode(prompt + generated) minus decode(prompt), the prompt's
special tokens (BOS) skipped. llama2.c drops the space of the token after BOS (run.c does), SentencePiece's
Strip drops the one at the text's start, and no family drops the space after a prompt ("Hello" + " world").
The models are tiny random-weight Llamas carrying each real tokenizer, so their tokens are arbitrary pieces:
spaces, byte tokens, newlines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tinyinfer
from tests.conftest import shared_data
from tests.tiny_models import TINY_CONFIG, build_with_transformers
from tinyinfer.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def family_models(tmp_path_factory):
    """family -> a model path carrying that family's tokenizer."""
    built = {"llama2c": shared_data("models/stories260K/stories260K.bin"), "built-in": "shakespeare"}
    for family in ["gpt2", "phi-3-mini", "falcon"]:
        source = shared_data(f"tokenizers/{family}")
        folder = tmp_path_factory.mktemp(family)
        tokenizer = Tokenizer.from_file(source)
        build_with_transformers(folder, "LlamaConfig", {**TINY_CONFIG, "vocab_size": tokenizer.vocab_size,
                                                        "bos_token_id": tokenizer.bos_token_id or 0,
                                                        "eos_token_id": tokenizer.eos_token_id or 0})
        for name in ["tokenizer.json", "tokenizer_config.json"]:
            if (source / name).is_file():
                shutil.copy(source / name, folder / name)
        built[family] = folder
    return built


def cli_stdout(model, prompt: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", "--model", str(model), prompt, "--temperature", "0",
                           "--max-tokens", str(MAX_TOKENS)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def continuation(tok, prompt_ids: list[int], generated: list[int]) -> str:
    before = tok.decode(prompt_ids, skip_special_tokens=True)
    whole = tok.decode([*prompt_ids, *generated], skip_special_tokens=True)
    assert whole.startswith(before)
    return whole[len(before):]


FAMILIES = ["llama2c", "built-in", "gpt2", "phi-3-mini", "falcon"]
CASES = [(family, prompt) for family in FAMILIES for prompt in ["Hello", " Once"]] + [("llama2c", ""), ("built-in", "")]


@pytest.mark.parametrize(("family", "prompt"), CASES)  # "": from BOS alone, where the tokenizer adds one
def test_generate_prints_the_decoded_continuation(family_models, family, prompt):
    model = tinyinfer.load(family_models[family])
    result = model.generate(prompt, max_tokens=MAX_TOKENS, temperature=0)
    assert result.token_ids and not set(result.token_ids) & model.tokenizer.skipped_ids
    expected = continuation(model.tokenizer, result.prompt_ids, result.token_ids)
    assert result.text == expected
    assert cli_stdout(family_models[family], prompt) == expected + "\n"


def test_stories260k_prints_what_run_c_prints():
    """llama2.c's published greedy sample from BOS starts "Once upon a time": no space in front."""
    expected = shared_data("models/stories260K/expected_greedy.txt").read_text(encoding="utf-8")
    printed = cli_stdout(shared_data("models/stories260K/stories260K.bin"), "")
    assert printed[:40] == expected[:40] and not printed.startswith(" ")
