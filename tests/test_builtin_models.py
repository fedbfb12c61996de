"""The built-in models (tinyinfer/models/): complete Hugging Face folders, small enough to ship, trained for real,
identical under tinyinfer and transformers, and present in the built wheel so a fresh install runs them.

The Mixture-of-Experts sibling's parity with transformers is checked with the other MoE models in
tests/test_moe_parity.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, shared_data
from safetensors import safe_open
from tiny_models import assert_logits_equal_transformers, hf_greedy
from tokenizers import Tokenizer as HFTokenizer

import tinyinfer
from tinyinfer.chat import ChatTemplate
from tinyinfer.resolve import BUILTIN_DIR, DEFAULT_MODEL, builtin_models

NAMES = ["shakespeare", "shakespeare-draft", "shakespeare-moe"]
FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "README.md"]
PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"


def folder_of(name: str) -> Path:
    folder = builtin_models().get(name)
    if folder is None:
        pytest.fail(f"built-in model {name} is absent from {BUILTIN_DIR} (weights_scripts/train_builtin.py trains it)")
    return folder


@pytest.mark.parametrize("name", NAMES)
def test_folder_is_a_complete_16_bit_checkpoint(name):
    folder = folder_of(name)
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    with safe_open(folder / "model.safetensors", framework="pt") as f:
        assert {f.get_slice(key).get_dtype() for key in f.keys()} <= {"BF16", "F16"}
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    rendered = ChatTemplate.for_model(folder).render([{"role": "user", "content": "Who is there?"}], add_generation_prompt=True)
    assert "Who is there?" in rendered and tokenizer_config["bos_token"] in rendered
    assert "nats per character" in (folder / "README.md").read_text()


def test_built_in_files_stay_under_30_mb_and_share_one_tokenizer():
    folders = [folder_of(name) for name in NAMES]
    assert sum(p.stat().st_size for folder in folders for p in folder.iterdir()) < 30e6
    assert len({(folder / "tokenizer.json").read_bytes() for folder in folders}) == 1
    assert DEFAULT_MODEL == "shakespeare"


def test_tokenizer_adds_bos_like_the_tokenizers_library():
    folder = folder_of(DEFAULT_MODEL)
    ours = tinyinfer.load(DEFAULT_MODEL).tokenizer
    reference = HFTokenizer.from_file(str(folder / "tokenizer.json"))
    ids = ours.encode(PROMPT)
    assert ids == reference.encode(PROMPT).ids
    assert ids[0] == ours.bos_token_id and ours.decode(ids, skip_special_tokens=True) == PROMPT


@pytest.mark.parametrize("name", ["shakespeare", "shakespeare-draft"])
def test_logits_and_greedy_text_match_transformers(name):
    folder = folder_of(name)
    model = tinyinfer.load(name)
    ids = model.tokenizer.encode(PROMPT)
    assert_logits_equal_transformers(model, folder, ids)
    ours = model.generate(ids, max_tokens=24, temperature=0.0, ignore_eos=True)
    assert list(ours.token_ids) == hf_greedy(folder, ids, 24)


def test_default_model_is_trained_on_shakespeare():
    """On held-out Shakespeare (the last 10% of tinyshakespeare, never trained on) the built-in model must
    beat the 2.97 nats/char an untrained model scores (uniform over 2,048 tokens at ~2.56 chars/token) by far."""
    folder_of(DEFAULT_MODEL)
    text = shared_data("corpora/tinyshakespeare.txt").read_text(encoding="utf-8")
    held_out = text[int(len(text) * 0.9):][:250]  # ~110 tokens: inside the 128-token context
    model = tinyinfer.load(DEFAULT_MODEL)
    ids = model.tokenizer.encode(held_out)  # BOS first, then the text
    logits = model.logits(ids)[:-1]  # [T-1, vocab]: the prediction of each next token
    log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    nll = -log_probs[np.arange(len(ids) - 1), ids[1:]].sum()
    assert nll / len(held_out) < 2.2


@pytest.mark.slow
def test_wheel_ships_the_models_and_an_install_generates(tmp_path):
    """Build the wheel, install it into a bare folder, and run `generate` with no --model from there."""
    for name in NAMES:
        folder_of(name)
    source = tmp_path / "source"  # build from a copy: setuptools writes build/ and egg-info beside the sources
    shutil.copytree(ROOT / "tinyinfer", source / "tinyinfer", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "wheel")], check=True, cwd=tmp_path)
    wheel = next((tmp_path / "wheel").glob("tinyinfer-*.whl"))
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert {f"tinyinfer/models/{name}/{file}" for name in NAMES for file in FILES} <= shipped
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, cwd=tmp_path)
    env = {**os.environ, "PYTHONPATH": str(target), "HF_HUB_OFFLINE": "1"}
    where = subprocess.run([sys.executable, "-c", "import tinyinfer.resolve as r; print(r.resolve_model())"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == target / "tinyinfer" / "models" / DEFAULT_MODEL
    run = subprocess.run([sys.executable, "-m", "tinyinfer", "generate", "ROMEO:", "--max-tokens", "8", "--temperature", "0"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    expected = tinyinfer.load(DEFAULT_MODEL).generate("ROMEO:", max_tokens=8, temperature=0.0).text
    assert expected.strip() and expected in run.stdout
