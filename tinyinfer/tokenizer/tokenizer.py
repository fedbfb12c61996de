"""The Tokenizer: text <-> token ids, through the pipeline a tokenizer.json file describes.

    encode: text -> split out added tokens -> normalize -> pre-tokenize into words -> BPE each word
            -> post-process (BOS/EOS)
    decode: ids -> token strings -> decoder steps -> text

Each stage is its own small module (added_tokens, normalizers, pre_tokenizers, bpe, post_processors,
decoders) built from its tokenizer.json entry; an entry tinyinfer does not implement is a clear error
naming it. Training (train.py) produces the same Tokenizer; llama2.c's tokenizer.bin (llama2c.py) a sibling with the same
vocabulary side (base.py) and its own encode and decode.

Decisions where the reference library has no single answer:
- A Python str may hold lone surrogates (U+D800..U+DFFF), which are not text and have no UTF-8 form
  (the Hugging Face library refuses such a str). tinyinfer encodes each of them as U+FFFD.
- tokenizer.json may carry truncation and padding settings (GPT-2's file truncates to 50 tokens).
  They belong to training pipelines, so encode ignores them: a prompt is never cut silently.
- An id outside the vocabulary is an error (the reference drops it silently).
- Two added tokens whose normalized texts are the same: the reference matches one of them at random (it
  walks a hash map), tinyinfer the one listed last.
"""

from __future__ import annotations

import json
from pathlib import Path

from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.added_tokens import AddedToken, AddedTokenMatcher
from tinyinfer.tokenizer.base import TokenizerBase
from tinyinfer.tokenizer.bpe import BPE
from tinyinfer.tokenizer.byte_level import without_surrogates
from tinyinfer.tokenizer.decoders import BYTE_TOKEN, build_decoder, build_token_bytes, decoder_steps
from tinyinfer.tokenizer.llama2c import Llama2cTokenizer
from tinyinfer.tokenizer.normalizers import build_normalizer
from tinyinfer.tokenizer.post_processors import build_post_processor
from tinyinfer.tokenizer.pre_tokenizers import build_pre_tokenizer

# Names that mark beginning / end of sequence, used when no tokenizer_config.json says which ids they are.
BOS_NAMES = ("<s>", "<|begin_of_text|>", "<|startoftext|>", "<bos>", "[BOS]")
EOS_NAMES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "[EOS]")


class Tokenizer(TokenizerBase):
    """A tokenizer loaded from a tokenizer.json or a model folder, or trained (`from_file` also opens a llama2.c
    tokenizer.bin, as the Llama2cTokenizer beside this class: tinyinfer/tokenizer/llama2c.py)."""

    def __init__(self, spec: dict, bos_token: str | None = None, eos_token: str | None = None):
        """Build every stage from `spec`, the parsed tokenizer.json; bos/eos_token name those tokens."""
        self.spec = spec
        self.normalizer = build_normalizer(spec.get("normalizer"))
        self.pre_tokenizer = build_pre_tokenizer(spec.get("pre_tokenizer"))
        self.post_processor = build_post_processor(spec.get("post_processor"))
        self.decoder = build_decoder(spec.get("decoder"))
        self.model = build_model(spec.get("model") or {})
        piece_bytes = build_token_bytes(spec.get("decoder"))

        entries = read_added_tokens(spec.get("added_tokens") or [], self.model.vocab)
        added = list({t.id: t for t in entries}.values())  # a token listed twice: its last entry holds, as in the reference
        self.raw_added = AddedTokenMatcher({t.content: t for t in added if not t.normalized})
        normalize = self.normalizer or (lambda s: s)
        self.normalized_added = AddedTokenMatcher({normalize(t.content): t for t in added if t.normalized})
        special_ids = frozenset(t.id for t in entries if t.special)

        size = max([*self.model.vocab.values(), *(t.id for t in added)], default=-1) + 1
        id_to_token: list[str | None] = [None] * size  # the string each id hands to the decoder
        for token, i in self.model.vocab.items():
            id_to_token[i] = token
        for t in added:  # a normalized added token decodes as its normalized text, as in the reference
            id_to_token[t.id] = normalize(t.content) if t.normalized else t.content
        token_to_id = {**self.model.vocab, **{t.content: t.id for t in added}}
        # skip_special_tokens drops the ids whose decoded string is a special token's text (the
        # reference compares strings, so a normalized special token that the normalizer changed stays)
        special_texts = {t.content for t in entries if t.special}
        # ids a ByteFallback decoder reads as raw bytes (<0x41>); a streaming decoder waits for their run to end
        has_byte_fallback = any(step.get("type") == "ByteFallback" for step in decoder_steps(spec.get("decoder")))
        super().__init__(
            id_to_token, [piece_bytes(t) if t is not None else b"" for t in id_to_token], token_to_id,
            special_id(bos_token, BOS_NAMES, token_to_id, special_ids),
            special_id(eos_token, EOS_NAMES, token_to_id, special_ids), special_ids,
            skipped_ids=frozenset(i for i, t in enumerate(id_to_token) if t in special_texts),
            byte_fallback_ids=frozenset(i for i, t in enumerate(id_to_token)
                                        if has_byte_fallback and t and BYTE_TOKEN.fullmatch(t)))

    # ---- loading and saving -------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer | Llama2cTokenizer:
        """Load a tokenizer.json, a model folder holding one, or a llama2.c tokenizer.bin."""
        if not isinstance(path, (str, Path)):
            raise TinyInferError(f"Tokenizer.from_file takes a path (str or pathlib.Path), not {type(path).__name__}")
        path = Path(path)
        if path.is_dir():
            candidates = [path / "tokenizer.json", path / "tokenizer.bin"]
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                raise TinyInferError(f"{path} holds neither tokenizer.json nor tokenizer.bin; "
                                     "point --model at a folder with one of them (a SentencePiece tokenizer.model alone is not supported)")
            path = found
        if not path.is_file():
            raise TinyInferError(f"tokenizer file {path} does not exist; pass a tokenizer.json, a model folder, or a llama2.c tokenizer.bin")
        if path.suffix == ".bin":
            return Llama2cTokenizer.from_file(path)
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TinyInferError(f"{path} is not valid JSON ({e}); re-download or re-export the tokenizer.json") from e
        bos, eos = read_bos_eos(path.parent / "tokenizer_config.json")
        try:
            return cls(spec, bos, eos)
        except (AttributeError, KeyError, TypeError, ValueError) as e:  # bad input: JSON that is not a tokenizer
            raise TinyInferError(f"{path} is not a tokenizer.json tinyinfer can read ({type(e).__name__}: {e}); "
                                 "give the tokenizer.json of a Hugging Face model, or re-export it") from e

    def save(self, path: str | Path) -> None:
        """Write a tokenizer.json that this class and the Hugging Face `tokenizers` library both load."""
        Path(path).write_text(json.dumps(self.spec, ensure_ascii=False, indent=2), encoding="utf-8")

    @classmethod
    def train(cls, text: str, vocab_size: int, special_tokens: list[str] | tuple[str, ...] = ("<|endoftext|>",)) -> Tokenizer:
        """Train a GPT-2-style byte-level BPE tokenizer on `text` (see train.py); special tokens take the last ids."""
        from tinyinfer.tokenizer.train import byte_level_bpe_spec
        specials = list(special_tokens)
        return cls(byte_level_bpe_spec(text, vocab_size, specials), eos_token=specials[0] if specials else None)

    # ---- encoding -----------------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; add_special_tokens adds what the post-processor says (e.g. BOS)."""
        if not isinstance(text, str):
            raise TinyInferError(f"encode takes a str, got {type(text).__name__}; decode bytes to str first")
        text = without_surrogates(text)
        ids: list[int] = []
        for i, piece in enumerate(self.raw_added.split(text)):
            if isinstance(piece, int):
                ids.append(piece)
                continue
            normalized = self.normalizer(piece) if self.normalizer else piece
            at_start = i == 0 and self._keeps_first_character(piece)
            for j, sub in enumerate(self.normalized_added.split(normalized)):
                if isinstance(sub, int):
                    ids.append(sub)
                else:
                    ids.extend(self.encode_ordinary(sub, at_start=at_start and j == 0))
        if add_special_tokens and self.post_processor is not None:
            ids = self.post_processor(ids)
        return ids

    def encode_ordinary(self, normalized: str, at_start: bool = True) -> list[int]:
        """Ids of normalized text holding no added token: pre-tokenize into words, then BPE each word.
        at_start: the text begins the input (Metaspace's prepend_scheme "first" marks only that word)."""
        words = self.pre_tokenizer.split([normalized], at_start)[0] if self.pre_tokenizer else [normalized]
        ids: list[int] = []
        for word in words:
            ids.extend(self.model.encode_word(word))
        return ids

    def _keeps_first_character(self, text: str) -> bool:
        """Whether the normalizer keeps the first character of `text` (Strip drops ' ' from ' Hi'), so that the
        normalized text still begins at the input's offset 0. Probed on that character before an 'x'."""
        if self.normalizer is None or not text:
            return True
        return self.normalizer(text[0] + "x") != self.normalizer("x")

    # ---- decoding -----------------------------------------------------------------------------------

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """The text of `ids`; bytes that are not valid UTF-8 become U+FFFD, as in the reference."""
        tokens = [self.id_to_token[i] for i in self._checked(ids) if not (skip_special_tokens and i in self.skipped_ids)]
        if self.decoder is None:
            return " ".join(tokens)
        return "".join(self.decoder(tokens))




def special_id(name: str | None, fallback_names: tuple[str, ...], token_to_id: dict[str, int],
               special_ids: frozenset[int]) -> int | None:
    """The id of the token `name`, or without a name the first special token among `fallback_names`."""
    if name is not None:
        return token_to_id.get(name)
    return next((token_to_id[n] for n in fallback_names if n in token_to_id and token_to_id[n] in special_ids), None)


def build_model(spec: dict) -> BPE:
    """The model stage of a tokenizer.json; only BPE is implemented (the lesson of this chapter)."""
    kind = spec.get("type", "BPE" if "merges" in spec else None)
    if kind != "BPE":
        raise TinyInferError(f"tokenizer.json uses the model type {kind!r}; tinyinfer implements only BPE "
                             "(Unigram, WordPiece and WordLevel tokenizers are not supported)")
    if spec.get("dropout"):
        raise TinyInferError("tokenizer.json sets BPE dropout, which makes encoding random; set model.dropout to null")
    merges = []
    for m in spec.get("merges", []):
        pair = m.split(" ") if isinstance(m, str) else m  # "a b" in older files, ["a", "b"] in newer ones
        if len(pair) != 2:
            raise TinyInferError(f"BPE merge {m!r} in tokenizer.json is not a pair of tokens; the file is corrupt")
        merges.append(tuple(pair))
    return BPE(spec["vocab"], merges, unk_token=spec.get("unk_token"), byte_fallback=spec.get("byte_fallback", False),
               fuse_unk=spec.get("fuse_unk", False), continuing_subword_prefix=spec.get("continuing_subword_prefix"),
               end_of_word_suffix=spec.get("end_of_word_suffix"), ignore_merges=spec.get("ignore_merges", False))


def read_added_tokens(entries: list[dict], vocab: dict[str, int]) -> list[AddedToken]:
    """The added tokens of a tokenizer.json, with ids given as the Hugging Face library gives them: a
    token in the model's vocabulary keeps that id, new ones count up from the vocabulary's size. In a well-formed file this is exactly the "id" the file states."""
    tokens: list[AddedToken] = []
    known = dict(vocab)  # a token listed twice keeps the id of its first listing
    next_id = len(vocab)
    for entry in entries:
        token_id = known.get(entry["content"])
        if token_id is None:
            token_id, next_id = next_id, next_id + 1
            known[entry["content"]] = token_id
        flags = {k: entry[k] for k in ("special", "lstrip", "rstrip", "single_word", "normalized") if k in entry}
        tokens.append(AddedToken(token_id, entry["content"], **flags))
    return tokens


def read_bos_eos(config_path: Path) -> tuple[str | None, str | None]:
    """bos_token and eos_token from a tokenizer_config.json beside the tokenizer.json, if there is one."""
    if not config_path.is_file():
        return None, None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TinyInferError(f"{config_path} is not valid JSON ({e}); re-download or re-export it") from e
    if not isinstance(config, dict):
        raise TinyInferError(f"{config_path} holds a JSON {type(config).__name__}, not an object; re-download it")

    def name(entry):
        return entry.get("content") if isinstance(entry, dict) else entry
    return name(config.get("bos_token")), name(config.get("eos_token"))
