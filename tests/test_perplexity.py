"""`tinyinfer perplexity`: the sliding window scores every token once, and the figures equal transformers' on
the same checkpoint and token ids, computed with the same windows in PyTorch; the built-in model is best at the
window it was trained on (128 tokens), which its config now advertises."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinyinfer
from tests.conftest import shared_data
from tests.tiny_models import TINY_CONFIG, build_with_transformers
from tinyinfer.catalogue import pulled_path
from tinyinfer.errors import TinyInferError
from tinyinfer.perplexity import perplexity, token_nats, windows
from tinyinfer.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
LINE = re.compile(r"perplexity (\S+) over (\d+) tokens \((\d+) windows of (\d+), stride (\d+)\): (\S+) nats/token, "
                  r"(\S+) nats/char \((\d+) chars\)\n")


def test_windows_score_every_token_once():
    assert windows(10, 4, 2) == [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    assert windows(10, 4, 4) == [(0, 4, 1), (3, 7, 4), (6, 10, 7)]
    for n, ctx, stride in [(2, 2, 1), (97, 16, 5), (64, 64, 64), (65, 8, 8)]:
        spans = windows(n, ctx, stride)
        scored = [t for _, end, first in spans for t in range(first, end)]
        assert scored == list(range(1, n))
        assert all(end - begin <= ctx and begin < first for begin, end, first in spans)


def test_token_nats_is_the_negative_log_softmax():
    logits = np.array([[1000.0, 0.0, -5.0], [0.1, 0.2, 0.3]])
    expected = [1000.0 + math.log1p(math.exp(-1000.0) + math.exp(-1005.0)) + 5.0,  # logsumexp - logit, no overflow
                -math.log(math.exp(0.3) / sum(math.exp(v) for v in (0.1, 0.2, 0.3)))]
    np.testing.assert_allclose(token_nats(logits, np.array([2, 2])), expected, rtol=1e-12)


def hf_perplexity(hf_model, ids: list[int], ctx: int, stride: int) -> tuple[float, int]:
    """(total nats, tokens scored) with transformers' logits over the same windows."""
    total, count = 0.0, 0
    for begin, end, first in windows(len(ids), ctx, stride):
        with torch.no_grad():
            logits = hf_model(torch.tensor([ids[begin:end]])).logits[0].double()  # [end - begin, V]
        nll = torch.nn.functional.cross_entropy(logits[first - 1 - begin:end - 1 - begin], torch.tensor(ids[first:end]),
                                                reduction="sum")
        total, count = total + float(nll), count + end - first
    return total, count


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinyinfer", "perplexity", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})


def cli_figures(*args) -> dict:
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    match = LINE.fullmatch(done.stdout)
    assert match, done.stdout
    keys = ["perplexity", "tokens", "windows", "ctx", "stride", "nats_per_token", "nats_per_char", "chars"]
    return {k: (float if "." in v else int)(v) for k, v in zip(keys, match.groups())}


@pytest.fixture(scope="module")
def tiny_gpt2_llama(tmp_path_factory):
    """A random-weight Llama with GPT-2's real tokenizer, written by transformers."""
    source = shared_data("tokenizers/gpt2")
    folder = tmp_path_factory.mktemp("ppl-gpt2")
    build_with_transformers(folder, "LlamaConfig", {**TINY_CONFIG, "vocab_size": Tokenizer.from_file(source).vocab_size,
                                                    "bos_token_id": 50256, "eos_token_id": 50256})
    shutil.copy(source / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.mark.parametrize(("ctx", "stride"), [(128, 64), (100, 100), (128, 1 + 128 // 3)])
def test_cli_perplexity_equals_transformers_on_a_tiny_model(tiny_gpt2_llama, ctx, stride):
    text = shared_data("corpora/corpus.en")
    n = 600
    figures = cli_figures("--model", tiny_gpt2_llama, text, "--ctx-size", ctx, "--stride", stride, "--max-tokens", n)
    tok = Tokenizer.from_file(tiny_gpt2_llama)
    ids = tok.encode(text.read_text(encoding="utf-8"))[:n]
    total, count = hf_perplexity(transformers.AutoModelForCausalLM.from_pretrained(tiny_gpt2_llama).eval(), ids, ctx, stride)
    assert figures["tokens"] == count == n - 1 and figures["windows"] == len(windows(n, ctx, stride))
    assert figures["perplexity"] == pytest.approx(math.exp(total / count), rel=1e-4)  # 4 decimals printed
    assert figures["nats_per_token"] == pytest.approx(total / count, abs=1e-4)
    assert figures["chars"] == len(tok.decode(ids))


def test_the_real_model_perplexity_equals_transformers_within_a_thousandth():
    """SmolLM2-135M-Instruct Q4_1 (GGUF): tinyinfer's CLI against transformers loading the same file."""
    path = pulled_path("smollm2-135m-instruct")
    if path is None:
        pytest.skip("the real model is not pulled: run `python -m tinyinfer pull smollm2-135m-instruct` (CI does)")
    pytest.importorskip("tinyinfer.gguf", reason="tinyinfer does not load GGUF files in this checkout")
    pytest.importorskip("gguf")
    text = shared_data("corpora/tinystories_sample.txt")
    ctx, stride, n = 256, 128, 600
    figures = cli_figures("--model", "smollm2-135m-instruct", text, "--ctx-size", ctx, "--stride", stride, "--max-tokens", n)
    ids = tinyinfer.load("smollm2-135m-instruct").tokenizer.encode(text.read_text(encoding="utf-8"))[:n]
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    total, count = hf_perplexity(hf_model, ids, ctx, stride)
    assert figures["tokens"] == count
    assert figures["perplexity"] == pytest.approx(math.exp(total / count), rel=1e-3)
    print(f"SmolLM2-135M-Instruct Q4_1 on tinystories_sample (first {n} tokens, ctx {ctx}, stride {stride}): "
          f"tinyinfer {figures['perplexity']:.4f}, transformers {math.exp(total / count):.4f}")


def test_bad_input_is_one_line(tmp_path):
    binary = tmp_path / "x.txt"
    binary.write_bytes(b"\xff\xfe hello")
    empty, verse = tmp_path / "empty.txt", tmp_path / "verse.txt"
    empty.write_text("", encoding="utf-8")
    verse.write_text("To be, or not to be, that is the question.", encoding="utf-8")
    for args, message in [((binary,), "is not UTF-8 text"), ((empty,), "perplexity needs at least 2"),
                          ((verse, "--stride", 200, "--ctx-size", 100), "stride 200 must be between 1 and the window")]:
        done = cli("--model", "shakespeare", *args)
        assert done.returncode == 1 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    with pytest.raises(TinyInferError, match="stride 0"):
        perplexity(tinyinfer.load("shakespeare"), [1, 2, 3], 2, 0)
