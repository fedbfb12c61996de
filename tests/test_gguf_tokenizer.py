"""Tokenizers built from GGUF metadata (tinyinfer/tokenizer/gguf.py) against three references on the same files:
llama.cpp's own expected ids for its vocabulary test strings, transformers' tokenizer converted from the GGUF
(`AutoTokenizer.from_pretrained(folder, gguf_file=name)`), and Google's sentencepiece on the Llama-2
tokenizer.model whose vocabulary ggml-vocab-llama-spm.gguf holds. The `gguf` package reads the metadata here
(a reference tool: tinyinfer's runtime never imports it).

llama.cpp's pre-tokenizer table (PRE_TOKENIZERS) is checked three ways: its adapted patterns split as Hugging Face
tokenizers does with the tokenizer.json regexes they came from (ORIGINALS), every pattern splits as llama.cpp's
own std::regex does over the text as llama.cpp hands it over (tests/llamacpp_regex_split.cpp), and a vocabulary
under each new name encodes to the ids of a tokenizers BPE with the same merges, split and ignore_merges."""

from __future__ import annotations

import copy
import functools
import importlib.util
import itertools
import unicodedata

import pytest
import regex

from tests.conftest import shared_data
from tinyinfer.catalogue import pulled_path
from tinyinfer.chat import ChatTemplate
from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.byte_level import BYTE_TO_CHAR
from tinyinfer.chat import chat_template_from_gguf
from tinyinfer.tokenizer.gguf import (ADD_BOS, IGNORE_MERGES, NOT_REGEXES, PRE_TOKENIZERS, merges_from_scores,
                                     stop_token_ids, tokenizer_from_gguf)
from tinyinfer.tokenizer.pre_tokenizers import build_pre_tokenizer

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
def gpt2_metadata():
    return gguf_metadata(shared_data(f"{VOCAB_TESTS}/ggml-vocab-gpt-2.gguf"))


@pytest.fixture(scope="module")
def gpt2_vocab(gpt2_metadata):
    return shared_data(f"{VOCAB_TESTS}/ggml-vocab-gpt-2.gguf"), tokenizer_from_gguf(gpt2_metadata)


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


def test_pre_tokenizer_names_choose_the_split(gpt2_metadata):
    """The same vocabulary split by three of llama.cpp's pre-tokenizers: numbers whole (gpt-2), in threes
    (llama3), digit by digit (qwen2, smollm)."""
    metadata = gpt2_metadata
    pieces = {}
    for name in ["gpt-2", "llama3", "qwen2", "smollm", "default", "falcon", "starcoder", "deepseek-llm", "llama-bpe"]:
        tok = tokenizer_from_gguf({**metadata, "tokenizer.ggml.pre": name})
        pieces[name] = [tok.decode([i]) for i in tok.encode("x 12345", add_special_tokens=False)]
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


# The tokenizer.json regexes llama.cpp adapted its patterns from, as src/llama-vocab.cpp quotes them in comments.
_CASE_FREE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"


def _cased_words(contraction: str) -> str:
    return (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{contraction}"
            rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{contraction}")


ORIGINALS = {
    "tekken": [_cased_words("") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "gpt-4o": [_cased_words(_CASE_FREE + "?") + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "llama3": [_CASE_FREE + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "jais-2": [_CASE_FREE + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)"
               r"|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)"
               r"|\s{1,2}(?!\S)|\s{1}"],
    "qwen2": [_CASE_FREE + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "grok-2": [_CASE_FREE + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen35": [_CASE_FREE + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+"],
    "minicpm5": [r"\p{N}{1,3}",
                 _CASE_FREE + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "seed-coder": [_CASE_FREE + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "exaone-moe": [_CASE_FREE + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
                   r"|\s*[\r\n]|\s+(?!\S)|\s+"],
    # possessive quantifiers, which llama.cpp made greedy: the same matches, as the optional character is never a letter
    "bailingmoe": [r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]"
                   r"|\s+(?!\S)|\s+"],
}
# Where llama.cpp's adaptation of the cased patterns (tekken, gpt-4o) splits differently, by design of its regex
# engine (src/unicode.cpp), which sees each non-ASCII character only as its category (one byte per letter, mark...):
# an upper-case letter is "a letter that is not a-z", so a non-ASCII capital does not start a new word after a
# letter (" kΩ" stays whole), and a combining mark is no letter (the Thai "แผ่น" splits at its tone mark). tinyinfer
# follows llama.cpp, the GGUF file's production stack; texts with either are left out of the comparison below.
CASE_OR_MARK = regex.compile(r"\p{M}|(?![A-Z])\p{L}(?=(?![A-Z])[\p{Lu}\p{Lt}])")
SPLIT_CASES = ["HelloWorld XMLHttpRequest iPhone CamelCaseWords", "THE END, ALLCAPS WORDS; MiXeD",
               "He'S here, we'll go, I'M, they'RE", "it's O'Neil's 'quoted'", "12345678901 3.14159 1,000,000",
               "中文字符 日本語のテキスト 한국어", "naïve café Ünïcödé straße", "a\n\n\nb\r\n c  \n   d",
               "x" + " " * 40 + "y\t\t z   ", "  leading and trailing  ", "tabs\tand\u3000ideographic space",
               "emoji 👨‍👩‍👧 ok!!! ...", "path/to/file\n/usr/bin", "~~~ $$ ^^ `code` <tag>"]


def split_texts() -> list[str]:
    """Real text in chunks between blank lines (corpora, UTF-8-demo, German) and the hand-picked cases."""
    unicode = [shared_data(f"unicode/{name}").read_text(encoding="utf-8") for name in ("UTF-8-demo.txt", "german.txt")]
    texts = [*corpora(), *unicode]
    return [chunk for text in texts for chunk in regex.split(r"(?<=\n\n)", text)] + SPLIT_CASES


def tinyinfer_split(patterns: list[str]) -> callable:
    steps = [{"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False} for p in patterns]
    pre = build_pre_tokenizer({"type": "Sequence", "pretokenizers": steps})
    return lambda text: pre.split([text], at_start=True)[0]


def hf_split(patterns: list[str]) -> callable:
    from tokenizers import Regex, pre_tokenizers

    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(p), behavior="isolated") for p in patterns])
    return lambda text: [piece for piece, _ in pre.pre_tokenize_str(text)]


@pytest.mark.parametrize("name", list(ORIGINALS))
def test_adapted_patterns_split_as_the_tokenizer_json_originals(name):
    """tinyinfer's split with llama.cpp's adapted patterns equals Hugging Face tokenizers' split with the original
    regex, on real text and hand-picked cases, but for the documented CASE_OR_MARK texts of the cased patterns."""
    ours, ref = tinyinfer_split(PRE_TOKENIZERS[name]), hf_split(ORIGINALS[name])
    cased = name in ("tekken", "gpt-4o")
    compared = 0
    for text in split_texts():
        if cased and CASE_OR_MARK.search(text):
            continue
        assert ours(text) == ref(text), text[:80]
        compared += len(text)
    assert compared > 140_000  # every corpus, not a few lines


@pytest.mark.parametrize("name", ["tekken", "gpt-4o", "minimax-m2"])
def test_cased_patterns_differ_from_their_originals_only_as_llamacpp_does(name):
    ours, ref = tinyinfer_split(PRE_TOKENIZERS[name]), hf_split(ORIGINALS["tekken" if name == "tekken" else "gpt-4o"])
    assert ours("camelCase XMLHttp") == ref("camelCase XMLHttp") == ["camel", "Case", " XMLHttp"]
    assert ours(" kΩ") == [" kΩ"] and ref(" kΩ") == [" k", "Ω"]      # Ω is no capital to llama.cpp
    assert ours(" v\u0307") == [" v", "\u0307"] and ref(" v\u0307") == [" v\u0307"]  # nor is a mark a letter
    assert sum(ours(t) != ref(t) for t in split_texts()) > 0  # real text has such cases (UTF-8-demo's Greek, Thai)


def test_youtu_reads_no_letter_case_as_llamacpp():
    """Youtu's pattern names \\p{Lu} and \\p{Ll}, which llama.cpp's engine reads as any letter: CamelCase stays whole."""
    ours, literal = tinyinfer_split(PRE_TOKENIZERS["youtu"]), hf_split(LLAMACPP_LITERAL["youtu"])
    assert ours("HelloWorld 안녕 Hi") == [*ours("HelloWorld"), " ", "안녕", " Hi"] and ours("HelloWorld") == ["HelloWorld"]
    assert literal("HelloWorld") == ["Hello", "World"]  # what the pattern says to an engine with letter case


def test_every_table_pattern_splits_as_the_tokenizers_library_reads_it():
    """Python's regex module reads every pattern of the table as Oniguruma does (Hugging Face tokenizers' engine),
    llama.cpp's and tinyinfer's own patterns alike, on the same texts."""
    texts = split_texts()[1:] + LLAMACPP_CASES  # all but corpus.en, which the tests above split
    for patterns in {tuple(p) for p in PRE_TOKENIZERS.values()}:
        ours, ref = tinyinfer_split(list(patterns)), hf_split(list(patterns))
        for text in texts:
            assert ours(text) == ref(text), (patterns[0][:40], text[:60])


def with_whole_word(metadata: dict, word: str) -> dict:
    """The metadata with one more token, `word` in byte-level spelling, that no merge produces."""
    tokens = [*metadata["tokenizer.ggml.tokens"], "".join(BYTE_TO_CHAR[b] for b in word.encode())]
    types = [*metadata["tokenizer.ggml.token_type"], 1]
    return {**metadata, "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}


def hf_tokenizer(metadata: dict, patterns: list[str], ignore_merges: bool):
    """Hugging Face tokenizers' byte-level BPE over the same vocabulary and merges, split by `patterns`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(metadata["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ")) for m in metadata["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in patterns]
    tok.pre_tokenizer = pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    types = metadata["tokenizer.ggml.token_type"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)  # <|endoftext|>, matched whole as in llama.cpp
                            for t, kind in zip(metadata["tokenizer.ggml.tokens"], types) if kind == 3])
    return tok


@pytest.mark.parametrize("name", ["tekken", "gpt-4o", "qwen35", "jais-2", "minicpm5", "bailingmoe", "deepseek-v3",
                                  "chameleon", "superbpe", "glm4", "exaone4", "youtu"])
def test_new_pre_tokenizers_give_the_ids_of_the_original_tokenizer(name, gpt2_metadata):
    """A GGUF-style vocabulary named `name` encodes as Hugging Face tokenizers does with the same vocabulary, merges,
    the original regexes (where llama.cpp adapted them; else its own) and ignore_merges as llama.cpp sets it."""
    metadata = with_whole_word({**gpt2_metadata, "tokenizer.ggml.pre": name}, " tinyinfer")
    tok = tokenizer_from_gguf(metadata)
    ref = hf_tokenizer(metadata, ORIGINALS.get(name, PRE_TOKENIZERS[name]), ignore_merges=name in IGNORE_MERGES)
    german = shared_data("unicode/german.txt").read_text(encoding="utf-8")
    texts = [*vocab_test_strings(), *corpora()[1:], german, *SPLIT_CASES, "we build tinyinfer with tinyinfer"]
    for text in texts:
        if name in ("tekken", "gpt-4o") and CASE_OR_MARK.search(text):
            continue
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == ref.encode(text).ids, text[:60]
        assert tok.decode(ids) == text
    whole = len(metadata["tokenizer.ggml.tokens"]) - 1
    assert (tok.encode(" tinyinfer", add_special_tokens=False) == [whole]) == (name in IGNORE_MERGES)


def test_llamacpp_flags_ignore_merges_and_bos(gpt2_metadata):
    """tekken (Mistral Nemo) takes a word the vocabulary holds whole, even one BPE would not reach, and adds BOS
    where the file does not say; gpt-4o does neither, as llama.cpp sets them."""
    metadata = with_whole_word(gpt2_metadata, " tinyinfer")
    whole, bos = len(metadata["tokenizer.ggml.tokens"]) - 1, metadata["tokenizer.ggml.bos_token_id"]
    tekken = tokenizer_from_gguf({**metadata, "tokenizer.ggml.pre": "tekken"})
    gpt4o = tokenizer_from_gguf({**metadata, "tokenizer.ggml.pre": "gpt-4o"})
    assert tekken.encode("Hi tinyinfer") == [bos, *tekken.encode("Hi", add_special_tokens=False), whole]
    ref = hf_tokenizer(metadata, ORIGINALS["gpt-4o"], ignore_merges=False)
    assert gpt4o.encode(" tinyinfer") == ref.encode(" tinyinfer").ids
    assert whole not in gpt4o.encode(" tinyinfer") and gpt4o.encode("Hi")[0] != bos
    quiet = tokenizer_from_gguf({**metadata, "tokenizer.ggml.pre": "tekken", "tokenizer.ggml.add_bos_token": False})
    assert quiet.encode("Hi") == tekken.encode("Hi", add_special_tokens=False)
    assert IGNORE_MERGES <= set(PRE_TOKENIZERS) and ADD_BOS <= set(PRE_TOKENIZERS)
    assert not set(NOT_REGEXES) & set(PRE_TOKENIZERS)


@pytest.mark.parametrize("name, why", [("kimi-k2", "hand-written splitter"), ("afmoe", "digit splitter"),
                                       ("gemma4", "raw UTF-8"), ("sarvam-moe", "byte_encode = false"),
                                       ("tiny_aya", "C\\+\\+ library")])
def test_pre_tokenizers_beyond_regexes_are_refused_with_the_fix(name, why):
    with pytest.raises(TinyInferError, match=rf"pre-tokenizer '{name}'.*{why}.*Hugging Face folder"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"],
                             "tokenizer.ggml.merges": [], "tokenizer.ggml.pre": name})


# llama.cpp's own split (src/unicode.cpp, unicode_regex_split) re-enacted: its std::regex, compiled from
# tests/llamacpp_regex_split.cpp, over the text as llama.cpp hands it over. A pattern with a Unicode property
# (\p{L}...) runs on the "collapsed" text, one byte per character: ASCII as it is, other white space as \v, any
# other character as a byte for its category; each \p{..} becomes that byte plus its ASCII members. A pattern
# without one runs as std::wregex on the code points, non-ASCII white space again as \v.
PROPERTY = {r"\p{N}": "N", r"\p{L}": "L", r"\p{P}": "P", r"\p{M}": "M", r"\p{S}": "S",
            **{rf"\p{{L{case}}}": "L" for case in "ultmo"}}
CATEGORY_BYTE = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}  # other categories: \xd0
ASCII_MEMBERS = {"N": "0-9", "L": "A-Za-z", "P": r"!-#%-*,-/:-;?-@\[-\]_\{\}", "M": "", "S": r"\$\+<->^`\|"}
# patterns llama.cpp splits by hand-written code, which test_ids_equal_llamacpp_on_its_vocab_test_strings checks
HAND_WRITTEN = {PRE_TOKENIZERS["gpt-2"][0], PRE_TOKENIZERS["llama3"][0]}
_DEEPSEEK3 = r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
_CONTRACTION = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
# src/llama-vocab.cpp's regex_exprs where tinyinfer's table spells them as llama.cpp's engine reads them
LLAMACPP_LITERAL = {
    "deepseek-llm": [*PRE_TOKENIZERS["deepseek-llm"][:2], r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", "[一-龥ࠀ-一가-퟿]+",
                     r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"],
    "deepseek-v3": [*PRE_TOKENIZERS["deepseek-v3"][:2], _DEEPSEEK3 + r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "spark2_5": [*PRE_TOKENIZERS["spark2_5"][:2], _DEEPSEEK3 + r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"],
    "superbpe": [r"\p{N}+", r"(?=(\d{3})+(?!\d))"],
    "youtu": [PRE_TOKENIZERS["youtu"][0],
              r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _CONTRACTION
              + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _CONTRACTION
              + r"?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}
LLAMACPP_CASES = ["a\u2003b\u00a0c \u3000\u3000。 ١٢٣٤٥ x\u202fy 안녕하세요 ㄅㄆ （全角） HelloWorld ÜberAll",
                  "1234567 ١٢٣٤ <sentinel:12> IMGIMGABZ a\t\tb    c  d", "x~~\n~abc 3~4 $$ ^^ a ~ b"]


def collapsed_text(text: str) -> str:
    def byte(c: str) -> str:
        if ord(c) < 128:
            return c
        return "\x0b" if c.isspace() else CATEGORY_BYTE.get(unicodedata.category(c)[0], "\xd0")
    return "".join(byte(c) for c in text)


def collapsed_regex(pattern: str) -> str:
    """Each \\p{..} as its byte and ASCII members, bracketed outside a class (unicode_regex_split's loop)."""
    out, inside, i = [], False, 0
    while i < len(pattern):
        if pattern[i] == "[" and (i == 0 or pattern[i - 1] != "\\"):
            inside = True
        elif inside and pattern[i] == "]" and pattern[i - 1] != "\\":
            inside = False
        elif (prop := regex.match(r"\\p\{\w+\}", pattern[i:])) and prop.group() in PROPERTY:
            cat = PROPERTY[prop.group()]
            members = CATEGORY_BYTE[cat] + ASCII_MEMBERS[cat]
            out.append(members if inside else f"[{members}]")
            i += len(prop.group())
            continue
        out.append(pattern[i])
        i += 1
    return "".join(out)


@pytest.fixture(scope="module")
def llamacpp_regex_split(tmp_path_factory):
    import shutil
    import subprocess
    from pathlib import Path

    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler (g++ or clang++) to build tests/llamacpp_regex_split.cpp")
    binary = tmp_path_factory.mktemp("llamacpp") / "split"
    source = Path(__file__).with_name("llamacpp_regex_split.cpp")
    subprocess.run([compiler, "-O1", "-std=c++17", str(source), "-o", str(binary)], check=True)

    def split(pattern: str, pieces: list[str]) -> list[list[str]]:
        if any(p in pattern for p in PROPERTY):
            head = "c " + collapsed_regex(pattern).encode("latin-1").hex()
            lines = [collapsed_text(p).encode("latin-1").hex() for p in pieces]
        else:
            head = "w " + "".join(f"{ord(c):08x}" for c in pattern)
            lines = ["".join(f"{0x0B if ord(c) > 0x7F and c.isspace() else ord(c):08x}" for c in p) for p in pieces]
        out = subprocess.run([str(binary)], input="\n".join([head, *lines]) + "\n", capture_output=True, text=True,
                             check=True).stdout.split("\n")
        result = []
        for piece, line in zip(pieces, out):
            ends = list(itertools.accumulate(int(n) for n in line.split(",") if n))
            result.append([piece[a:b] for a, b in zip([0, *ends], ends) if b > a])
        return result
    return split


def llamacpp_pieces(split, patterns: list[str], texts: list[str]) -> list[list[str]]:
    pieces = [[t] for t in texts]
    for pattern in patterns:
        if pattern in HAND_WRITTEN:
            step = tinyinfer_split([pattern])
            pieces = [[q for p in ps for q in step(p)] for ps in pieces]
        else:
            flat = split(pattern, [p for ps in pieces for p in ps])
            it = iter(flat)
            pieces = [[q for _ in ps for q in next(it)] for ps in pieces]
    return pieces


DISTINCT = list({tuple(patterns): name for name, patterns in reversed(PRE_TOKENIZERS.items())}.values())


@pytest.mark.parametrize("name", DISTINCT)
def test_every_table_entry_splits_as_llamacpps_std_regex(name, llamacpp_regex_split):
    """Each entry of the table splits real text and the hand-picked cases as llama.cpp's regexes for the name do
    in llama.cpp's engine: std::regex over the text as src/unicode.cpp hands it over."""
    texts = split_texts()[1:] + LLAMACPP_CASES  # all but corpus.en, to keep std::regex's time short
    expected = llamacpp_pieces(llamacpp_regex_split, LLAMACPP_LITERAL.get(name, PRE_TOKENIZERS[name]), texts)
    ours = tinyinfer_split(PRE_TOKENIZERS[name])
    for text, pieces in zip(texts, expected):
        assert ours(text) == pieces, text[:60]
