"""Download the real checkpoints the course uses, with progress bars, through `huggingface_hub`.

    python weights_scripts/download.py --list                 # what each one is for
    python weights_scripts/download.py smollm2 stories15M     # into the Hugging Face cache (then --model REPO_ID works)
    python weights_scripts/download.py gpt2 --to ~/models     # into ~/models/gpt2/ (then --model ~/models/gpt2 works)
    python weights_scripts/download.py Qwen/Qwen3-0.6B        # any other repo id works too

Only the files a checkpoint needs are fetched (configs, safetensors, tokenizer files), never PyTorch pickles.
Where the Hub cannot be reached (offline machines, `HF_HUB_OFFLINE=1`), each failure is one clear line and
the exit code is 1; download on a connected machine and copy the cache folder (`~/.cache/huggingface/hub`)
or the `--to` folder across.
"""

from __future__ import annotations

import argparse
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from tinyinfer.resolve import CHECKPOINT_FILES, hf_cache_dir, hub_offline  # noqa: E402


@dataclass(frozen=True)
class Download:
    repo_id: str
    purpose: str
    files: tuple[str, ...] = tuple(CHECKPOINT_FILES)
    model_file: str = ""  # what --model takes inside the folder ("" = the folder itself)
    extra_urls: tuple[str, ...] = ()  # files from outside the Hub, saved beside the others


CHECKPOINTS = {
    "gpt2": Download("openai-community/gpt2",
                     "GPT-2 small (124M): learned positions, LayerNorm, GELU; the classic the course starts from"),
    "smollm2": Download("HuggingFaceTB/SmolLM2-135M-Instruct",
                        "a small modern Llama (GQA, RoPE, SwiGLU) with a chat template: chat, sampling, structured output"),
    "qwen2.5": Download("Qwen/Qwen2.5-0.5B-Instruct",
                        "Qwen2 (QKV biases, tied embeddings, a large vocabulary): parity on a second family, tool calling"),
    "tinyllama": Download("TinyLlama/TinyLlama-1.1B-Chat-v1.0",
                          "a 1.1B Llama: memory arithmetic and decode-speed bounds at a size that starts to matter"),
    "olmoe": Download("allenai/OLMoE-1B-7B-0924",
                      "a real Mixture-of-Experts (64 experts, 8 per token, 7B total / 1B active): MoE routing, chapter 07"),
    "stories15M": Download("karpathy/tinyllamas",
                           "llama2.c's TinyStories model (15M) as a raw .bin, with llama2.c's tokenizer: loading "
                           "llama2.c files, chapter 04", files=("stories15M.bin",), model_file="stories15M.bin",
                           extra_urls=("https://raw.githubusercontent.com/karpathy/llama2.c/master/tokenizer.bin",)),
}


def lookup(name: str) -> Download:
    """A course checkpoint by short name, or any repo id: lookup("gpt2").repo_id -> 'openai-community/gpt2'."""
    return CHECKPOINTS.get(name) or Download(name, "a checkpoint asked for by repo id")


def download(name: str, to: Path | None) -> Path:
    """Fetch one checkpoint; return the folder that holds it. Raises RuntimeError with a one-line reason."""
    item = lookup(name)
    if hub_offline():
        raise RuntimeError("HF_HUB_OFFLINE is set; unset it on a machine that can reach huggingface.co")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise RuntimeError("huggingface_hub is not installed: pip install 'tinyinfer[hub]'") from None
    try:  # huggingface_hub draws a tqdm progress bar per file
        folder = snapshot_download(item.repo_id, allow_patterns=list(item.files),
                                   local_dir=to / name.replace("/", "--") if to else None, cache_dir=None if to else hf_cache_dir())
    except Exception as e:  # noqa: BLE001 - no network, unknown repo, gated model: the message is what the user can act on
        first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RuntimeError(f"could not reach the Hugging Face Hub for {item.repo_id} ({type(e).__name__}: {first_line})") from None
    for url in item.extra_urls:
        fetch_url(url, Path(folder) / url.rsplit("/", 1)[1])
    return Path(folder) / item.model_file


def fetch_url(url: str, dest: Path) -> None:
    """Download one file with a progress bar."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response, open(dest, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name) as bar:
                while chunk := response.read(1 << 16):
                    out.write(chunk)
                    bar.update(len(chunk))
    except OSError as e:
        raise RuntimeError(f"could not download {url} ({e})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"checkpoints to fetch (default: all): {', '.join(CHECKPOINTS)}, "
                        "or any Hugging Face repo id (org/name)")
    parser.add_argument("--to", type=Path, help="download into TO/NAME/ instead of the Hugging Face cache")
    parser.add_argument("--list", action="store_true", help="say what each checkpoint is for, and fetch nothing")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in CHECKPOINTS and "/" not in n]
    if unknown:
        parser.error(f"unknown checkpoint(s) {', '.join(unknown)}; choose from {', '.join(CHECKPOINTS)}")
    if args.list:
        for name, item in CHECKPOINTS.items():
            print(f"{name:11s} {item.repo_id:38s} {item.purpose}")
        return 0
    failed = 0
    for name in args.names or CHECKPOINTS:
        print(f"{name}: {lookup(name).purpose}")
        try:
            folder = download(name, args.to)
        except RuntimeError as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            failed += 1
            continue
        item = lookup(name)
        print(f"{name}: in {folder}; use it with --model {folder if args.to or item.model_file else item.repo_id}")
    if failed:
        print(f"{failed} download(s) failed. On an offline machine: run this script where the network allows and copy "
              f"{args.to or hf_cache_dir()} across.", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
