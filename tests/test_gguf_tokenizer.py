"""Tokenizers built from GGUF metadata (tinyinfer/tokenizer/gguf.py) against three references on the same files:
llama.cpp's own expected ids for its vocabulary test strings, transformers' tokenizer converted from the GGUF
(`AutoTokenizer.from_pretrained(folder, gguf_file=name)`), and Google's sentencepiece on the Llama-2
tokenizer.model whose vocabulary ggml-vocab-llama-spm.gguf holds. The `gguf` package reads the metadata here
(a reference tool: tinyinfer's runtime never imports it)."""

from __future__ import annotations

import copy
import functools
import importlib.util

import pytest

from tests.conftest import shared_data
from tinyinfer.catalogue import pulled_path
from tinyinfer.chat import ChatTemplate
from tinyinfer.errors import TinyInferError
from tinyinfer.chat import chat_template_from_gguf
from tinyinfer.tokenizer.gguf import PRE_TOKENIZERS, merges_from_scores, stop_token_ids, tokenizer_from_gguf

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

VOCAB_TESTS = "tokenizers/llamacpp-vocab-tests"
CORPORA = ["corpus.en", "tinystories_sample.txt", "address.txt"]


def gguf_metadata(path) -> dict:
    """{key: value} of a GGUF file, as the gguf package reads it."""
    return {key: field.contents() for key, field in gguf.GGUFReader(path).fields.items()}


def vocab_test_strings() -> list[str]:
    return shared_data(f"{VOCAB_TESTS}/ggml-vocab-test.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")


def llamacpp_ids(name: str) -> list[list[int]]:
    lines = shared_data(f"{VOCAB_TESTS}/ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")
    return [[int(i) for i in line.split()] for line in lines]


def corpora() -> list[str]:
    return [shared_data(f"corpora/{name}").read_text(encoding="utf-8") for name in CORPORA]


@functools.lru_cache(maxsize=None)
def hf_from_gguf(path):
    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture(scope="module")
def gpt2_vocab():
    path = shared_data(f"{VOCAB_TESTS}/ggml-vocab-gpt-2.gguf")
    return path, tokenizer_from_gguf(gguf_metadata(path))


@pytest.fixture(scope="module")
def spm_vocab():
    path = shared_data(f"{VOCAB_TESTS}/ggml-vocab-llama-spm.gguf")
    return path, tokenizer_from_gguf(gguf_metadata(path))


@pytest.fixture(scope="module")
def smollm2():
    path = pulled_path("smollm2-135m-instruct")
    if path is None:
        pytest.skip("the real model is not pulled: run `python -m tinyinfer pull smollm2-135m-instruct` (CI does)")
    metadata = gguf_metadata(path)
    return path, metadata, tokenizer_from_gguf(metadata)


@pytest.mark.parametrize("name", ["gpt-2", "llama-spm"])
def test_ids_equal_llamacpp_on_its_vocab_test_strings(name, gpt2_vocab, spm_vocab):
    tok = {"gpt-2": gpt2_vocab, "llama-spm": spm_vocab}[name][1]
    strings, expected = vocab_test_strings(), llamacpp_ids(name)
    assert len(strings) == len(expected) == 47
    for text, ids in zip(strings, expected):
        assert tok.encode(text, add_special_tokens=False) == ids, text


def test_gpt2_gguf_equals_transformers_and_decodes_back(gpt2_vocab):
    path, tok = gpt2_vocab
    ref = hf_from_gguf(path)
    for text in [*vocab_test_strings(), *corpora()]:
        ids = tok.encode(text)
        assert ids == ref.encode(text), text[:60]
        assert tok.decode(ids) == ref.decode(ids) == text


def test_llama_spm_gguf_equals_sentencepiece_and_transformers(spm_vocab):
    """sentencepiece on Llama-2's tokenizer.model is the original of this vocabulary. transformers' GGUF
    converter prepends '▁' only where the text does not start with one (Metaspace, prepend_scheme "first"),
    so on text starting with a space it differs from sentencepiece and llama.cpp; elsewhere all agree."""
    spm = pytest.importorskip("sentencepiece")
    path, tok = spm_vocab
    sp = spm.SentencePieceProcessor(model_file=str(shared_data("tokenizers/llama2-sentencepiece/tokenizer.model")))
    ref = hf_from_gguf(path)
    texts = [*vocab_test_strings(), *corpora()]
    for text in texts:
        ids = tok.encode(text)
        assert ids == [tok.bos_token_id, *sp.encode(text)], text[:60]
        assert tok.decode(ids, skip_special_tokens=True) == sp.decode(ids[1:])
        if not text[:1].isspace():
            assert ids == ref.encode(text), text[:60]
    assert sum(tok.encode(t) != ref.encode(t) for t in texts) > 0  # the difference above is real, not hypothetical


def test_smollm2_tokenizer_equals_transformers(smollm2):
    """SmolLM2's pre-tokenizer is llama.cpp's `smollm`: every digit alone (\\p{N}, as the model's own
    tokenizer.json's Digits step), then GPT-2's regex. transformers' converter knows no `smollm` and keeps
    GPT-2's regex alone, which differs only on a numeric character merged with a space (' ½'); the reference is
    transformers' tokenizer with the pre-tokenizer set from the same table, as its converter does for the
    names it knows."""
    from tokenizers import Regex, pre_tokenizers

    path, metadata, tok = smollm2
    assert metadata["tokenizer.ggml.pre"] == "smollm"
    plain = hf_from_gguf(path)
    ref = copy.deepcopy(plain)
    ref.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*(pre_tokenizers.Split(Regex(r), behavior="isolated") for r in PRE_TOKENIZERS["smollm"]),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    for text in [*vocab_test_strings(), *corpora()]:
        ids = tok.encode(text)
        assert ids == ref.encode(text), text[:60]
        assert tok.decode(ids) == ref.decode(ids) == text
        if "½" not in text:
            assert ids == plain.encode(text), text[:60]
    assert tok.encode("½") == plain.encode("½") and tok.encode(" ½") != plain.encode(" ½")
    assert tok.bos_token_id == 1 and tok.eos_token_id == 2 and stop_token_ids(metadata) == [2]
    assert tok.encode("<|im_start|>user") == [1, *tok.encode("user")]  # control tokens are matched whole


CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4."}, {"role": "user", "content": "And 3+3?"}],
]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_smollm2_chat_template_ids_equal_apply_chat_template(smollm2, add_generation_prompt):
    path, metadata, tok = smollm2
    template = chat_template_from_gguf(metadata)
    ref = hf_from_gguf(path)
    if importlib.util.find_spec("tinyinfer.gguf") is not None:  # what `chat --model smollm2-135m-instruct` renders
        assert ChatTemplate.for_model("smollm2-135m-instruct").sources == template.sources
    for messages in CONVERSATIONS:
        text = template.render(messages, add_generation_prompt=add_generation_prompt)
        expected = ref.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
        expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
        assert tok.encode(text) == list(expected)
    assert chat_template_from_gguf({k: v for k, v in metadata.items() if k != "tokenizer.chat_template"}) is None


def test_merges_from_scores_rank_by_the_merged_tokens_score():
    assert merges_from_scores(["a", "b", "c", "ab", "abc"], [0, 0, 0, -1, -2]) == [("a", "b"), ("ab", "c")]
    assert merges_from_scores(["a", "b", "c", "ab", "bc"], [0, 0, 0, -2, -1]) == [("b", "c"), ("a", "b")]


def spm_metadata(**overrides) -> dict:
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "▁", "H", "i", "Hi", "▁Hi"]
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": [0.0] * 262 + [-5.0, -1.0], "tokenizer.ggml.token_type": [2, 3, 3, *[6] * 256, 1, 1, 1, 1, 1],
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
            **overrides}


def test_llama_flags_space_prefix_bos_eos_and_byte_fallback():
    tok = tokenizer_from_gguf(spm_metadata())
    assert tok.encode("Hi") == [1, 263]  # BOS by default, then '▁Hi'
    assert tok.encode("Hi", add_special_tokens=False) == [263]
    no_prefix = tokenizer_from_gguf(spm_metadata(**{"tokenizer.ggml.add_space_prefix": False, "tokenizer.ggml.add_bos_token": False,
                                                    "tokenizer.ggml.add_eos_token": True}))
    assert no_prefix.encode("Hi") == [262, 2]  # 'Hi' (no '▁' prepended), then EOS
    assert no_prefix.encode(" Hi") == [263, 2]
    assert tok.encode("é", add_special_tokens=False) == [259, 3 + 0xC3, 3 + 0xA9]  # '▁', then é's UTF-8 bytes
    assert tok.decode(tok.encode("Hi é"), skip_special_tokens=True) == "Hi é"


def test_bad_metadata_is_refused_with_the_fix(gpt2_vocab):
    with pytest.raises(TinyInferError, match=r"pre-tokenizer 'made-up'.*PRE_TOKENIZERS"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.merges": [],
                             "tokenizer.ggml.pre": "made-up"})
    with pytest.raises(TinyInferError, match=r"'bert'.*gpt2 and llama"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(TinyInferError, match="one score per token"):
        tokenizer_from_gguf(spm_metadata(**{"tokenizer.ggml.scores": [0.0]}))
    with pytest.raises(TinyInferError, match="no tokenizer.ggml.tokens"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "llama"})
    with pytest.raises(TinyInferError, match="bos_token_id is 999, outside"):
        tokenizer_from_gguf(spm_metadata(**{"tokenizer.ggml.bos_token_id": 999}))


def test_pre_tokenizer_names_choose_the_split(gpt2_vocab):
    """The same vocabulary split by three of llama.cpp's pre-tokenizers: numbers whole (gpt-2), in threes
    (llama3), digit by digit (qwen2, smollm)."""
    metadata = gguf_metadata(gpt2_vocab[0])
    pieces = {}
    for name in ["gpt-2", "llama3", "qwen2", "smollm", "default", "falcon", "starcoder", "deepseek-llm", "llama-bpe"]:
        tok = tokenizer_from_gguf({**metadata, "tokenizer.ggml.pre": name})
        pieces[name] = [tok.decode([i]) for i in tok.encode("x 12345")]
    assert pieces["gpt-2"] == ["x", " 123", "45"]  # ' 12345' is one piece, BPE'd
    assert pieces["llama3"] == pieces["llama-bpe"] == ["x", " ", "123", "45"]
    assert pieces["qwen2"] == pieces["smollm"] == pieces["starcoder"] == ["x", " ", "1", "2", "3", "4", "5"]


def test_chat_with_the_real_model_answers_as_transformers_does(smollm2):
    """`chat --model smollm2-135m-instruct`, greedy: the reply to "Hi" is transformers' greedy reply on the
    same file and the same template's ids (an instruct model's answer, not Shakespeare)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("tinyinfer.gguf", reason="tinyinfer does not load GGUF files in this checkout")
    torch = pytest.importorskip("torch")
    path, metadata, tok = smollm2
    ids = tok.encode(chat_template_from_gguf(metadata).render([{"role": "user", "content": "Hi"}], add_generation_prompt=True))
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=30, do_sample=False)[0, len(ids):].tolist()
    reply = tok.decode([i for i in out if i not in (1, 2)], skip_special_tokens=True)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "tinyinfer", "chat", "--model", "smollm2-135m-instruct", "--temperature", "0",
                           "--max-tokens", "30"], input="Hi\n", capture_output=True, text=True, cwd=root, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert f"> {reply}\n" in done.stdout and reply.strip()
