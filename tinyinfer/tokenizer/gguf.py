"""A tokenizer from a GGUF file's metadata: llama.cpp's keys turned into the tokenizer.json they imply.

A GGUF file has no tokenizer.json. It stores the vocabulary under llama.cpp's key names, and names the
rest of the pipeline instead of spelling it out:

    tokenizer.ggml.model       "gpt2" (byte-level BPE) or "llama" (SentencePiece-style BPE with scores)
    tokenizer.ggml.tokens      every token's text, by id
    tokenizer.ggml.merges      "Ġ t" ... in rank order (gpt2); a llama vocabulary has scores instead
    tokenizer.ggml.scores      one float per token: SentencePiece merges the pair whose result scores highest
    tokenizer.ggml.token_type  1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte (<0x41>)
    tokenizer.ggml.pre         the name of the pre-tokenizer (a set of regexes llama.cpp holds in its source)
    tokenizer.ggml.bos_token_id / eos_token_id / eot_token_id / unknown_token_id / padding_token_id
    tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix
    tokenizer.chat_template    the Jinja2 chat template

So this module writes out the tokenizer.json spec they imply and hands it to tinyinfer's Tokenizer (the same
BPE, pre-tokenizers and decoders as for a Hugging Face folder):

    tok = tokenizer_from_gguf(metadata)        # metadata: {key: value} as a GGUF reader gives it
    tok.encode("Hello world")                  # -> [19556, 905] with SmolLM2's file

- gpt2: the vocabulary and merges as stored; the regexes of PRE_TOKENIZERS[pre], each splitting every piece
  into its matches and the text between them (llama.cpp's unicode_regex_split), then the byte-level spelling.
  The table holds the names llama.cpp splits by regexes (Llama-3's, Qwen's, GPT-4o's, Mistral's tekken,
  DeepSeek-V3's, GLM-4's...) with llama.cpp's flags: after an IGNORE_MERGES one a word the vocabulary holds
  whole skips BPE, after an ADD_BOS one BOS is added unless add_bos_token says otherwise. The few names it splits
  with hand-written code or outside the byte-level alphabet (NOT_REGEXES: kimi-k2, afmoe, gemma4...) are refused.
- llama: merges are not stored, the scores say them: a token t of score s that is the concatenation of two
  tokens (a, b) gives the merge a + b -> t, and merges rank by score, best first (as Hugging Face's converter
  does). Spaces become '▁', one is prepended when add_space_prefix says so (default true), and a character
  missing from the vocabulary becomes its UTF-8 bytes as <0xNN> tokens (byte fallback).
- control (and unknown) tokens are special added tokens, user-defined ones are added tokens that are not
  special: all are matched whole in the text before BPE, as llama.cpp does.
"""

from __future__ import annotations

import re

from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.byte_level import BYTE_TO_CHAR, to_byte_level
from tinyinfer.tokenizer.tokenizer import Tokenizer

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# llama.cpp's pre-tokenizers (src/llama-vocab.cpp: the regex_exprs of llm_tokenizer_bpe's constructor, under the
# tokenizer.ggml.pre names llama_vocab::impl::load gives them): name -> the regexes applied in turn. The patterns are
# llama.cpp's. Its regex engine (src/unicode.cpp: std::regex on a copy of the text where each non-ASCII character is
# a byte for its category) has no (?i) and no letter case, so llama.cpp spells Llama-3's "(?i:'s|...)" with explicit
# cases, and tekken's and GPT-4o's upper-case letter as "a letter that is not a-z" (_UPPER). Where that engine reads
# a pattern otherwise than Python's regex module would (a class with a non-ASCII space, '~' and \p{S}, \p{Lu}, \d),
# the table spells it as llama.cpp reads it, and says so; tests/test_gguf_tokenizer.py runs both engines.
_CONTRACTION = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_UPPER, _LOWER = r"((?=[\p{L}])([^a-z]))", r"((?=[\p{L}])([^A-Z]))"  # the tokenizer.json's [\p{Lu}...], [\p{Ll}...]
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = _CONTRACTION + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# Qwen2's pattern without _CONTRACTION
_UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTION + "|" + _UFAKZEKA
_QWEN35 = (_CONTRACTION + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_JAIS2 = (_CONTRACTION + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)"
          r"|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)"
          r"|\s{1,2}(?!\S)|\s{1}")
_MINICPM5 = _CONTRACTION + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_SEED_CODER = _CONTRACTION + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
_EXAONE_MOE = (_CONTRACTION + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
               r"|\s*[\r\n]|\s+(?!\S)|\s+")
_BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]|\s+(?!\S)|\s+")
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}?"
          rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GRANITE_EMB_MULTI = _GPT4O.replace(r"(?=[\p{L}])", r"(?=[\p{L}\p{M}])")  # GPT-4o's, a mark counting as a letter
_DEEPSEEK_LETTERS = (  # \u escapes: compatibility letters (U+2126 Ω...) that an editor would normalise away
    r"A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳ"
    r"Ꙁ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃")
# llama.cpp hands its engine every non-ASCII space as \v, so no class of characters ever holds one: "[一-龥ࠀ-一가-퟿]"
# (U+0800-U+4E00 spans U+2000-U+200A, U+3000...) leaves them out, and "　-。" starts at U+3001.
_CJK = r"(?:(?!\s)[一-龥ࠀ-一가-퟿])+"
_HAN_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"  # CJK ideographs, hiragana, katakana
# DeepSeek-V3's patterns; llama.cpp's \p{S} lacks ASCII '~' (src/unicode.cpp's k_ucat_map), so "[^...\p{S}]" holds
# it and "[\p{P}\p{S}]" does not.
_DEEPSEEK3_WORDS = r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|(?:[^\r\n\p{L}\p{P}\p{S}]|~)?[\p{L}\p{M}]+"""
_PUNCTUATION_SYMBOLS = r"(?:(?!~)[\p{P}\p{S}])+"
# Youtu's: Korean, CJK punctuation, bopomofo, han and kana runs, then words. llama.cpp's engine reads \p{Lu},
# \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all as \p{L} (src/unicode.cpp's k_ucat_enum), so to it "HelloWorld" is one word.
_YOUTU_SCRIPTS = "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|" + _HAN_KANA
_YOUTU_WORDS = re.sub(r"\\p\{L[ultmo]\}", r"\\p{L}", (  # as llama.cpp reads it
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _CONTRACTION
    + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _CONTRACTION
    + r"?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"))
_DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"]
_STARCODER = [r"\p{N}", _GPT2]
_BLOOM = [r" ?[^(\s|.,!?…。，、।۔،)]+"]
_LLAMA3_NAMES = ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                 "jina-v5-nano"]

PRE_TOKENIZERS: dict[str, list[str]] = {
    "default": _DEFAULT,
    **dict.fromkeys([*_LLAMA3_NAMES, "dbrx", "smaug-bpe", "glm4", "chatglm-bpe"], [_LLAMA3]),
    "jais-2": [_JAIS2],
    "minicpm5": [r"\p{N}{1,3}", _MINICPM5],
    "deepseek-llm": ["[\r\n]", rf"\s?[{_DEEPSEEK_LETTERS}]+", r"\s?[!-/:-~！-／：-～‘-‟、-。]+", r"\s+$", _CJK, r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"],
    **dict.fromkeys(["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"], [
        r"\p{N}{1,3}", _HAN_KANA, rf"{_DEEPSEEK3_WORDS}| ?{_PUNCTUATION_SYMBOLS}[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]),
    "spark2_5": [r"\p{N}{1,3}", _HAN_KANA, rf"{_DEEPSEEK3_WORDS}| ?{_PUNCTUATION_SYMBOLS}|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"],
    **dict.fromkeys(["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"],
                    _STARCODER),
    **dict.fromkeys(["gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "roberta-bpe", "jina-es", "jina-de",
                     "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "gigachat", "a.x-4.0", "mellum",
                     "modern-bert", "granite-docling", "exaone4"], [_GPT2]),
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open",
                     "grok-2"], [_QWEN2]),
    "qwen35": [_QWEN35],
    "ufakzeka": [_UFAKZEKA],
    "laguna": ["[^\n]+|[\n]+", _QWEN2],
    "seed-coder": [_SEED_CODER],
    "exaone-moe": [_EXAONE_MOE],
    **dict.fromkeys(["bailingmoe", "bailingmoe2", "llada-moe"], [_BAILINGMOE]),
    **dict.fromkeys(["poro-chat", "bloom", "gpt3-finnish"], _BLOOM),
    "viking": [*_BLOOM, r"\p{N}"],
    "youtu": [_YOUTU_SCRIPTS, _YOUTU_WORDS],
    "tekken": [_TEKKEN],
    **dict.fromkeys(["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], [_GPT4O]),
    "granite-embed-multi-97m": [_GRANITE_EMB_MULTI],
    "chameleon": ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\t\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", _GPT2],
    # llama.cpp's "(?=(\d{3})+(?!\d))": C++'s \d is [0-9] (iswdigit), Python's any decimal digit
    "superbpe": [r"\p{N}+", "(?=([0-9]{3})+(?![0-9]))"],
}
# Pre-tokenizers whose words found whole in the vocabulary skip BPE (llama.cpp's ignore_merges; Llama-3's
# tokenizer.json says the same).
IGNORE_MERGES = {*_LLAMA3_NAMES, "tekken", "minicpm5", "granite-embed-multi-97m", "youtu"}
# Pre-tokenizers after which llama.cpp adds BOS where the file has no tokenizer.ggml.add_bos_token.
ADD_BOS = {*_LLAMA3_NAMES, "tekken", "chameleon"}
# Names llama.cpp knows whose split is more than regexes, so tinyinfer refuses them: name -> why.
NOT_REGEXES = {
    "kimi-k2": "a hand-written splitter (src/unicode.cpp) that keeps \\p{Han} apart from other letters",
    "afmoe": "a hand-written digit splitter (src/unicode.cpp) that groups a run of digits in threes from its end",
    **dict.fromkeys(["tiny_aya", "cohere2moe"], "a digit regex, \\d{1,3}(?=(?:\\d{3})*\\b), whose \\b in a lookahead "
                    "std::regex reads by its C++ library's rules (libstdc++ splits 2023 as 202 3, the regex says 2 023)"),
    **dict.fromkeys(["gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace"],
                    "BPE on raw UTF-8 rather than the byte-level alphabet (byte_encode = false)"),
}


def tokenizer_from_gguf(metadata: dict) -> Tokenizer:
    """tinyinfer's Tokenizer for the tokenizer a GGUF file's metadata describes (see the module docstring)."""
    kind = metadata.get("tokenizer.ggml.model")
    builders = {"gpt2": byte_level_spec, "llama": sentencepiece_spec}
    if kind not in builders:
        raise TinyInferError(f"the GGUF file's tokenizer is {kind!r} (tokenizer.ggml.model); tinyinfer reads "
                             f"{' and '.join(builders)} tokenizers: use a GGUF of a model with one of those, or give "
                             "--tokenizer a tokenizer.json")
    tokens = _strings(metadata, "tokenizer.ggml.tokens")
    bos, eos = _token(metadata, tokens, "bos_token_id"), _token(metadata, tokens, "eos_token_id")  # checks the ids
    spec = builders[kind](metadata, tokens)
    spec["added_tokens"] = added_tokens(metadata, tokens, spec["model"]["vocab"])
    add_bos = kind == "llama" or metadata.get("tokenizer.ggml.pre") in ADD_BOS
    spec["post_processor"] = post_processor(metadata, tokens, add_bos_default=add_bos)
    return Tokenizer(spec, bos, eos)


def byte_level_spec(metadata: dict, tokens: list[str]) -> dict:
    """gpt2: byte-level BPE with the stored merges, split by the regexes `tokenizer.ggml.pre` names."""
    pre = metadata.get("tokenizer.ggml.pre") or "default"  # llama.cpp's choice for a file that names none
    if pre in NOT_REGEXES:
        raise TinyInferError(f"the GGUF file names the pre-tokenizer {pre!r} (tokenizer.ggml.pre), which llama.cpp "
                             f"runs as {NOT_REGEXES[pre]}; tinyinfer builds a GGUF pre-tokenizer from regexes only: "
                             "give --tokenizer the model's tokenizer.json, or load its Hugging Face folder instead")
    if pre not in PRE_TOKENIZERS:
        raise TinyInferError(f"the GGUF file names the pre-tokenizer {pre!r} (tokenizer.ggml.pre), which tinyinfer does "
                             f"not know; known: {', '.join(sorted(PRE_TOKENIZERS))}. Add its regexes from llama.cpp's "
                             "src/llama-vocab.cpp to PRE_TOKENIZERS in tinyinfer/tokenizer/gguf.py, or give --tokenizer "
                             "the model's tokenizer.json")
    merges = _strings(metadata, "tokenizer.ggml.merges")
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in PRE_TOKENIZERS[pre]]
    return {
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            *splits, {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": byte_level_vocab(tokens), "merges": merges,
                  "ignore_merges": pre in IGNORE_MERGES},
    }


def byte_level_vocab(tokens: list[str]) -> dict[str, int]:
    """Token text -> id; a token with characters outside the byte alphabet (a few converters store added
    tokens as plain text, spaces included) is spelled in it, as Hugging Face's converter does."""
    alphabet = set(BYTE_TO_CHAR.values())
    return {t if set(t) <= alphabet else to_byte_level(t): i for i, t in enumerate(tokens)}


def sentencepiece_spec(metadata: dict, tokens: list[str]) -> dict:
    """llama: SentencePiece-style BPE, merges from the scores, byte fallback, '▁' for spaces."""
    scores = [float(s) for s in metadata.get("tokenizer.ggml.scores", [])]
    if len(scores) != len(tokens):
        raise TinyInferError(f"the GGUF file has {len(tokens)} tokens but {len(scores)} scores (tokenizer.ggml.scores); "
                             "a llama tokenizer needs one score per token: the file is damaged, re-convert it")
    space_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    strip = [{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if space_prefix else []
    unk = metadata.get("tokenizer.ggml.unknown_token_id")
    prefix = [{"type": "Prepend", "prepend": "▁"}] if space_prefix else []
    return {
        # every piece of text between added tokens gets the prefix, as in llama.cpp and SentencePiece
        "normalizer": {"type": "Sequence", "normalizers": [*prefix, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
            *strip]},
        "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges_from_scores(tokens, scores),
                  "byte_fallback": True, "fuse_unk": True, "unk_token": tokens[unk] if unk is not None else None},
    }


def merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """The BPE merges a SentencePiece vocabulary implies, best first.

    Every way to cut a token into two tokens is a merge; it ranks by the whole token's score (higher first),
    then by the longer left part, as Hugging Face's converter orders them:
    tokens ['a', 'b', 'c', 'ab', 'abc'] with scores [0, 0, 0, -1, -2] -> [('a', 'b'), ('ab', 'c')].
    """
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []  # (score, len(left), len(right), left, right)
    for token, score in zip(tokens, scores):
        pairs = [(token[:k], token[k:]) for k in range(1, len(token)) if token[:k] in vocab and token[k:] in vocab]
        pairs.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]))
        merges.extend((score, len(left), len(right), left, right) for left, right in pairs)
    merges.sort(key=lambda m: m[:3], reverse=True)  # stable: equal keys keep the vocabulary's order
    return [(left, right) for _, _, _, left, right in merges]


def added_tokens(metadata: dict, tokens: list[str], vocab: dict[str, int]) -> list[dict]:
    """Control and unknown tokens as special added tokens, user-defined ones as plain added tokens.

    In a byte-level vocabulary a control token spelled with characters outside the byte alphabet is a
    converter's mislabel that no text can produce, so it stays a vocabulary entry (as Hugging Face does)."""
    types = [int(t) for t in metadata.get("tokenizer.ggml.token_type", [])]
    byte_level = metadata.get("tokenizer.ggml.model") == "gpt2"
    alphabet = set(BYTE_TO_CHAR.values())
    entries = []
    for token_id, (token, kind) in enumerate(zip(tokens, types)):
        special = kind in (CONTROL, UNKNOWN)
        if kind in (CONTROL, UNKNOWN, USER_DEFINED) and not (special and byte_level and not set(token) <= alphabet):
            entries.append({"id": vocab.get(token, token_id), "content": token, "special": special, "normalized": False,
                            "lstrip": False, "rstrip": False, "single_word": False})
    return entries


def post_processor(metadata: dict, tokens: list[str], add_bos_default: bool) -> dict | None:
    """BOS / EOS around the ids, as add_bos_token / add_eos_token say (where they are absent llama.cpp adds BOS
    to a llama vocabulary, and to a gpt2 one only after the pre-tokenizers in ADD_BOS)."""
    add = {"bos": metadata.get("tokenizer.ggml.add_bos_token", add_bos_default),
           "eos": metadata.get("tokenizer.ggml.add_eos_token", False)}
    ids = {end: metadata.get(f"tokenizer.ggml.{end}_token_id") for end in add if add[end]}
    ids = {end: int(i) for end, i in ids.items() if i is not None}
    if not ids:
        return None
    special = {tokens[i]: {"id": tokens[i], "ids": [i], "tokens": [tokens[i]]} for i in ids.values()}
    single = [*([{"SpecialToken": {"id": tokens[ids["bos"]]}}] if "bos" in ids else []), {"Sequence": {"id": "A"}},
              *([{"SpecialToken": {"id": tokens[ids["eos"]]}}] if "eos" in ids else [])]
    return {"type": "TemplateProcessing", "single": single, "special_tokens": special}


def stop_token_ids(metadata: dict) -> list[int]:
    """The ids that end a reply: EOS, and EOT / EOM where the file names them (Llama-3's <|eot_id|>)."""
    keys = ("eos_token_id", "eot_token_id", "eom_token_id")
    ids = [metadata.get(f"tokenizer.ggml.{key}") for key in keys]
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


def special_tokens_from_gguf(metadata: dict) -> dict[str, str]:
    """The special tokens a chat template may name ({"bos_token": "<s>", ...}), those the file gives."""
    tokens = _strings(metadata, "tokenizer.ggml.tokens")
    names = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
             "pad_token": "padding_token_id"}
    special = {name: _token(metadata, tokens, key) for name, key in names.items()}
    return {name: token for name, token in special.items() if token is not None}


def _strings(metadata: dict, key: str) -> list[str]:
    value = metadata.get(key)
    if value is None:
        raise TinyInferError(f"the GGUF file has no {key}; its tokenizer cannot be built: use a GGUF converted with its "
                             "tokenizer (llama.cpp's convert_hf_to_gguf.py writes it), or give --tokenizer a tokenizer.json")
    return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v) for v in value]


def _token(metadata: dict, tokens: list[str], key: str) -> str | None:
    """The text of the token `tokenizer.ggml.<key>` names, or None."""
    token_id = metadata.get(f"tokenizer.ggml.{key}")
    if token_id is None:
        return None
    if not 0 <= int(token_id) < len(tokens):
        raise TinyInferError(f"tokenizer.ggml.{key} is {token_id}, outside the vocabulary of {len(tokens)} tokens; "
                             "the GGUF file is damaged: re-convert it")
    return tokens[int(token_id)]
