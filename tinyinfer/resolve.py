"""Model resolution: turn what a user types after `--model` into a local path, in one place.

A model spec is tried as, in order:

1. a built-in name: a Hugging Face folder shipped inside the package (`tinyinfer/models/<name>/`), so
   `python -m tinyinfer generate "ROMEO:"` works from a fresh install with no network;
2. a name in tinyinfer's catalogue of real models (tinyinfer/catalogue.py): the file `python -m tinyinfer pull
   NAME` put in tinyinfer's model cache (a name not pulled yet is an error saying to pull it);
3. a local path: a Hugging Face folder or a single file (a llama2.c `.bin`, a `.gguf`), returned as is;
4. a Hugging Face repo id (`org/name`, optionally `org/name@revision`): looked up in the local Hugging Face
   cache, the layout every HF tool shares:

       $HF_HUB_CACHE (or $HF_HOME/hub, or ~/.cache/huggingface/hub)
         models--org--name/refs/main               the commit hash that `main` points to
         models--org--name/snapshots/<hash>/...    the files of that commit

   and, when it is not there, downloaded through `huggingface_hub` (the optional `hub` extra) unless
   `HF_HUB_OFFLINE` is set.

Anything else is a `TinyInferError` that lists what exists and says how to get the files.
`resolve_model(spec) -> Path` is what `tinyinfer.load` calls.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tinyinfer.catalogue import CATALOGUE, model_cache_dir, pulled_path
from tinyinfer.errors import TinyInferError

BUILTIN_DIR = Path(__file__).resolve().parent / "models"
DEFAULT_MODEL = "shakespeare"
# The files a checkpoint needs; a download fetches only these (not PyTorch .bin or ONNX copies).
CHECKPOINT_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.jinja", "*.txt"]
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
TRUTHY = {"1", "on", "yes", "true"}


def resolve_path(model) -> Path:
    """A local path for `model`: an existing path as is, anything else through `resolve_model`."""
    path = Path(model).expanduser()
    if path.exists() and str(model).strip():  # Path("") is the current folder: an empty name is refused below
        return path
    return resolve_model(str(model))


def resolve_model(spec: str | os.PathLike | None = None) -> Path:
    """The local folder or file that `spec` names (default: the built-in `shakespeare`).

    resolve_model("shakespeare")           -> .../tinyinfer/models/shakespeare
    resolve_model("./my-model")            -> the folder itself
    resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") -> .../models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots/<hash>
    """
    spec = DEFAULT_MODEL if spec is None else os.fspath(spec)
    if not spec.strip():  # e.g. --model "$MODEL" with MODEL unset: never the current folder by accident
        raise TinyInferError(f"the model name is empty: give a built-in name, a folder, a file or a repo id. "
                             f"{available_models_hint()}")
    builtins = builtin_models()
    if spec in builtins:
        return builtins[spec]
    if spec in CATALOGUE:
        pulled = pulled_path(spec)
        if pulled is None:
            raise TinyInferError(f"{spec} is not pulled yet (it is not in {model_cache_dir()}): run "
                                 f"`python -m tinyinfer pull {spec}`")
        return pulled
    path = Path(spec).expanduser()
    if path.exists():
        return path.resolve()
    repo_id, _, revision = spec.partition("@")
    if not REPO_ID.match(repo_id):
        raise TinyInferError(f"model {spec!r} is not a built-in name, an existing file or folder, or a Hugging Face "
                             f"repo id (org/name). {available_models_hint()}")
    cached = find_in_cache(repo_id, revision or "main")
    if cached is not None:
        return cached
    return download(repo_id, revision or None)


def builtin_models() -> dict[str, Path]:
    """Built-in model name -> its folder inside the package."""
    if not BUILTIN_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(BUILTIN_DIR.iterdir()) if (p / "config.json").is_file()}


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, found the way huggingface_hub finds it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def cache_folder(repo_id: str) -> Path:
    """Where a repo lives in the cache: cache_folder("org/name") -> <cache>/models--org--name."""
    return hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def find_in_cache(repo_id: str, revision: str = "main") -> Path | None:
    """The cached snapshot of `repo_id` at `revision` (a branch, tag or commit hash) if it is complete."""
    repo = cache_folder(repo_id)
    ref = repo / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = repo / "snapshots" / commit
    return snapshot if is_checkpoint(snapshot) else None


def is_checkpoint(folder: Path) -> bool:
    """A folder holding a config and its weights (single safetensors file or a sharded index)."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors*"))


def cached_models() -> dict[str, Path]:
    """Repo id -> snapshot folder, for every complete checkpoint in the local Hugging Face cache."""
    found = {}
    cache = hf_cache_dir()
    if not cache.is_dir():
        return found
    for repo in sorted(cache.glob("models--*")):
        repo_id = repo.name[len("models--"):].replace("--", "/")
        snapshot = find_in_cache(repo_id)
        if snapshot is None:  # no complete `main`: fall back to the newest complete snapshot
            snapshots = sorted((s for s in (repo / "snapshots").glob("*") if is_checkpoint(s)),
                               key=lambda s: s.stat().st_mtime)
            snapshot = snapshots[-1] if snapshots else None
        if snapshot is not None:
            found[repo_id] = snapshot
    return found


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUTHY


def download(repo_id: str, revision: str | None) -> Path:
    """Fetch a checkpoint's files into the Hugging Face cache with huggingface_hub, or explain how to."""
    how = (f"fetch it where the network allows with `python weights_scripts/download.py {repo_id}` "
           f"(or `huggingface-cli download {repo_id}`), then copy the cache ({hf_cache_dir()}) here")
    if hub_offline():
        raise TinyInferError(f"{repo_id!r} is not in the local Hugging Face cache ({hf_cache_dir()}) and "
                             f"HF_HUB_OFFLINE is set; {how}, or pass a local folder. {available_models_hint()}")
    try:
        import huggingface_hub
    except ImportError:
        raise TinyInferError(f"{repo_id!r} is not in the local Hugging Face cache ({hf_cache_dir()}); to download it, "
                             f"install the extra (`pip install 'tinyinfer[hub]'`), or {how}. "
                             f"{available_models_hint()}") from None
    try:
        folder = huggingface_hub.snapshot_download(repo_id, revision=revision, allow_patterns=CHECKPOINT_FILES,
                                                   cache_dir=hf_cache_dir())
    except Exception as e:  # noqa: BLE001 - network down, repo missing or gated: the message is what the user can act on
        raise TinyInferError(f"could not download {repo_id!r} from the Hugging Face Hub ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else 'no detail'}); check the name and the network, "
                             f"or {how}. {available_models_hint()}") from None
    return Path(folder)


def available_models_hint() -> str:
    builtin = ", ".join(builtin_models()) or "none"
    cached = ", ".join(cached_models()) or f"none in {hf_cache_dir()}"
    pulled = ", ".join(name for name in CATALOGUE if pulled_path(name)) or "none"
    return (f"Built-in models: {builtin}. Pulled models: {pulled} (`python -m tinyinfer pull NAME` fetches "
            f"{', '.join(CATALOGUE)}). Cached models: {cached}. (`python -m tinyinfer models` lists them.)")
