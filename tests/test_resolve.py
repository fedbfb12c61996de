"""Model resolution (tinyinfer/resolve.py): built-in names, local paths, and repo ids in a Hugging Face cache
laid out in a temporary folder, with the network switched off."""

from __future__ import annotations

import json
import shutil
import sys
import types

import pytest
import transformers
from conftest import ROOT
from tiny_models import tiny_checkpoint  # noqa: F401 - a pytest fixture

import tinyinfer
from tinyinfer.cli import main
from tinyinfer.errors import TinyInferError
from tinyinfer.resolve import BUILTIN_DIR, DEFAULT_MODEL, builtin_models, cached_models, resolve_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    """An empty Hugging Face home in tmp, with the network off; the cache is <home>/hub."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf"


def add_to_cache(cache, repo_id: str, source, commit: str = COMMIT, ref: str | None = "main"):
    """Lay out `source`'s files as huggingface_hub does: blobs, a snapshot of links to them, and a ref."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for i, file in enumerate(sorted(source.iterdir())):
        blob = repo / "blobs" / f"blob{i}"
        shutil.copyfile(file, blob)
        (snapshot / file.name).symlink_to(blob)
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def test_repo_id_resolves_from_the_cache_offline(hf_home, tiny_checkpoint):
    snapshot = add_to_cache(hf_home / "hub", "tiny-org/tiny-llama", tiny_checkpoint("llama_gqa"))
    assert resolve_model("tiny-org/tiny-llama") == snapshot
    assert resolve_model(f"tiny-org/tiny-llama@{COMMIT}") == snapshot
    assert cached_models() == {"tiny-org/tiny-llama": snapshot}


def test_load_takes_a_cached_repo_id(hf_home, tiny_checkpoint):
    source = tiny_checkpoint("llama_gqa")
    add_to_cache(hf_home / "hub", "tiny-org/tiny-llama", source)
    model = tinyinfer.load("tiny-org/tiny-llama")
    assert model.config.n_kv_heads == json.loads((source / "config.json").read_text())["num_key_value_heads"]


def test_hf_hub_cache_wins_over_hf_home(hf_home, tmp_path, monkeypatch, tiny_checkpoint):
    add_to_cache(hf_home / "hub", "tiny-org/tiny-llama", tiny_checkpoint("llama"), commit="a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    snapshot = add_to_cache(tmp_path / "elsewhere", "tiny-org/tiny-llama", tiny_checkpoint("llama"), commit="b" * 40)
    assert resolve_model("tiny-org/tiny-llama") == snapshot


def test_incomplete_snapshot_is_not_a_model(hf_home, tmp_path):
    only_config = tmp_path / "only_config"
    only_config.mkdir()
    (only_config / "config.json").write_text("{}")
    add_to_cache(hf_home / "hub", "tiny-org/partial", only_config)
    with pytest.raises(TinyInferError, match="HF_HUB_OFFLINE"):
        resolve_model("tiny-org/partial")
    assert "tiny-org/partial" not in cached_models()


def test_missing_repo_offline_says_how_to_get_it_and_lists_what_exists(hf_home, tiny_checkpoint):
    add_to_cache(hf_home / "hub", "tiny-org/tiny-llama", tiny_checkpoint("llama"))
    with pytest.raises(TinyInferError) as error:
        resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    message = str(error.value)
    assert "HF_HUB_OFFLINE" in message and "weights_scripts/download.py" in message
    assert "tiny-org/tiny-llama" in message
    assert all(name in message for name in builtin_models())


def test_without_huggingface_hub_the_error_names_the_extra(hf_home, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if not installed
    with pytest.raises(TinyInferError, match=r"tinyinfer\[hub\]"):
        resolve_model("some-org/some-model")


def test_download_goes_through_huggingface_hub_into_the_cache(hf_home, monkeypatch, tiny_checkpoint):
    """Online: snapshot_download is asked for the checkpoint files only; its folder is the answer."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls = []

    def snapshot_download(repo_id, revision=None, allow_patterns=None, cache_dir=None):
        calls.append((repo_id, revision, cache_dir))
        assert "*.safetensors" in allow_patterns and "*.bin" not in allow_patterns  # never pickles
        return str(add_to_cache(hf_home / "hub", repo_id, tiny_checkpoint("llama")))

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    folder = resolve_model("tiny-org/fresh@v1")
    assert calls == [("tiny-org/fresh", "v1", hf_home / "hub")]
    assert (folder / "config.json").is_file()


def test_download_failure_is_one_clear_error(hf_home, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def snapshot_download(*args, **kwargs):
        raise OSError("Temporary failure in name resolution")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    with pytest.raises(TinyInferError, match="could not download 'some-org/some-model'.*name resolution"):
        resolve_model("some-org/some-model")


def test_unknown_name_lists_the_built_in_models(hf_home):
    with pytest.raises(TinyInferError, match="not a built-in name") as error:
        resolve_model("hamlet")
    assert all(name in str(error.value) for name in builtin_models())


def test_local_paths_are_returned_as_they_are(tmp_path, tiny_checkpoint):
    folder = tiny_checkpoint("llama")
    assert resolve_model(folder) == folder.resolve()
    assert resolve_model(str(folder / "model.safetensors")) == (folder / "model.safetensors").resolve()


def test_built_in_names_and_the_default(hf_home):
    models = builtin_models()
    if not models:
        pytest.fail(f"no built-in model in {BUILTIN_DIR} (weights_scripts/train_builtin.py trains them)")
    assert DEFAULT_MODEL in models
    assert resolve_model() == resolve_model(DEFAULT_MODEL) == BUILTIN_DIR / DEFAULT_MODEL
    assert all(resolve_model(name) == folder for name, folder in models.items())


def test_models_command_lists_built_in_and_cached(hf_home, tiny_checkpoint, capsys):
    source = tiny_checkpoint("llama_gqa")
    add_to_cache(hf_home / "hub", "tiny-org/tiny-llama", source)
    assert main(["models", "--json"]) == 0
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    tiny = rows["tiny-org/tiny-llama"]
    reference = transformers.AutoModelForCausalLM.from_pretrained(source)  # untied: every tensor is in the file
    n_params = sum(p.numel() for p in reference.parameters())
    assert (tiny["architecture"], tiny["params"], tiny["source"]) == ("LlamaForCausalLM", n_params, "Hugging Face cache")
    assert tiny["bytes"] == sum(f.stat().st_size for f in source.iterdir())
    assert {name for name, row in rows.items() if row["source"] == "built-in"} == set(builtin_models())


def test_download_script_offline_fails_with_one_clear_line_per_checkpoint(hf_home, capsys):
    from tiny_models import _import_script

    download = _import_script(ROOT / "weights_scripts" / "download.py")
    assert download.main(["--list"]) == 0
    listing = capsys.readouterr().out
    assert all(item.repo_id in listing for item in download.CHECKPOINTS.values())
    assert download.main(["smollm2", "some-org/some-model"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and all("HF_HUB_OFFLINE" in line for line in errors)
