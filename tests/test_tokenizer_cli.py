"""`tinyinfer tokenize` and `tinyinfer bench tokenizer` on real tokenizers (no timing is asserted)."""

from __future__ import annotations

import io
import re

import pytest

from tests.conftest import shared_data
from tinyinfer.cli import main


def table_ids(output: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^\s+\d+\s+(\d+)\s", output, re.MULTILINE)]


def test_tokenize_prints_each_token_and_the_counts(capsys):
    tokenizers = pytest.importorskip("tokenizers")
    folder = shared_data("tokenizers/gpt2")
    text = "Hello world, tokenizers! 😀"
    assert main(["tokenize", "--model", str(folder), text]) == 0
    out = capsys.readouterr().out
    expected = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids
    assert table_ids(out) == expected
    assert "'Ġworld'" in out and "' world'" in out and "b'\\x80'" in out  # piece, its text, a partial character
    n, chars, words = len(expected), len(text), len(text.split())
    assert f"{n} tokens for {chars} characters, {words} words" in out
    assert f"{chars / n:.2f} characters/token, {words / n:.2f} words/token" in out


def test_tokenize_llama2c_tokenizer_bin_adds_bos(capsys):
    assert main(["tokenize", "--model", str(shared_data("models/stories260K/tok512.bin")), "Once upon a time"]) == 0
    assert table_ids(capsys.readouterr().out)[0] == 1
    assert main(["tokenize", "--no-special", "--model", str(shared_data("models/stories260K/tok512.bin")), "Once"]) == 0
    assert 1 not in table_ids(capsys.readouterr().out)


def test_tokenize_bad_model_is_one_line_error(capsys, tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Unigram", "vocab": []}}', encoding="utf-8")
    assert main(["tokenize", "--model", str(tmp_path), "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "Unigram" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["gpt-2", "llama-spm"])
def test_tokenize_reads_a_gguf_files_tokenizer(capsys, monkeypatch, name):
    """A .gguf file's own tokenizer (its metadata): the ids printed are llama.cpp's on its vocabulary tests."""
    folder = shared_data("tokenizers/llamacpp-vocab-tests")
    texts = (folder / "ggml-vocab-test.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    expected = (folder / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")
    checked = 0
    for text, ids in list(zip(texts, expected))[::6]:  # every sixth: leading spaces, digits, scripts, code
        if not ids.strip():
            continue
        monkeypatch.setattr("sys.stdin", io.StringIO(text))  # on stdin: a text may start with "-"
        path = folder / f"ggml-vocab-{name}.gguf"
        assert main(["tokenize", "--no-special", "--max-rows", "1000", "--model", str(path)]) == 0
        assert table_ids(capsys.readouterr().out) == [int(i) for i in ids.split()], text
        checked += 1
    assert checked >= 6


def test_tokenize_a_gguf_file_without_a_tokenizer_is_one_line_error(capsys, tmp_path):
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(tmp_path / "bare.gguf"), "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert main(["tokenize", "--model", str(tmp_path / "bare.gguf"), "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "no tokenizer" in err and "tokenizer.json" in err and len(err.splitlines()) == 1


def test_bench_tokenizer_prints_side_by_side_figures(capsys):
    pytest.importorskip("tokenizers")
    args = ["bench", "tokenizer", "--tokenizer", str(shared_data("tokenizers/gpt2")),
            "--text", str(shared_data("corpora/address.txt")), "--repeats", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "ids identical to the reference: yes" in out
    assert len(re.findall(r"MB/s", out)) == 3 and "x the Rust time" in out
