"""Pre-tokenizers: cut normalized text into pieces ("words") before BPE, as tokenizer.json declares.

BPE never merges across a piece boundary, so the split decides what can become one token: GPT-2 keeps
" world" together but never joins "world" with the "." after it. Each step maps a list of pieces to a
finer list; a `Sequence` runs its steps in order. The semantics follow the Hugging Face `tokenizers`
library (its Rust source is the reference), e.g. for GPT-2's ByteLevel step:

    ByteLevel().split(["Hello world!"], at_start=True) -> (['Hello', 'Ġworld', '!'], True)

`at_start` says whether the first piece begins the whole input, at offset 0 (Metaspace's prepend_scheme
"first" prepends '▁' only there); each step returns its pieces and whether that still holds, which it
no longer does once a split has removed text in front of the first piece:

    Split(regex.compile(" "), "Removed").split([" Hi you"], at_start=True) -> (['Hi', 'you'], False)
"""

from __future__ import annotations

import regex

from tinyinfer.errors import TinyInferError
from tinyinfer.tokenizer.byte_level import GPT2_SPLIT_PATTERN, to_byte_level

# Rust's char::is_ascii_punctuation() or char::is_punctuation() (Unicode categories P*).
PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
NUMERIC = r"\p{N}"  # Rust's char::is_numeric(): categories Nd, Nl, No
ONIG_WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\xb2\xb3\xb9\xbc-\xbe"  # Oniguruma's \w, as a class body


def split_by_pattern(text: str, pattern: regex.Pattern, behavior: str, invert: bool = False) -> list[str]:
    """Split `text` around the matches of `pattern`; `behavior` says where each match goes.

    With pattern r"-": Removed 'a-b' -> ['a', 'b'], Isolated -> ['a', '-', 'b'],
    MergedWithPrevious -> ['a-', 'b'], MergedWithNext -> ['a', '-b'], Contiguous 'a--b' -> ['a', '--', 'b'].
    """
    return [text[start:end] for start, end in split_spans(text, pattern, behavior, invert)]


def split_spans(text: str, pattern: regex.Pattern, behavior: str, invert: bool = False) -> list[tuple[int, int]]:
    """The (start, end) of each piece split_by_pattern returns: split_spans('-a', r"-", "Removed") -> [(1, 2)]."""
    spans, prev, match_end = [], 0, None  # spans: (start, end, is_match) covering the whole text
    for m in pattern.finditer(text):
        if m.start() == m.end() == match_end:
            continue  # Oniguruma, unlike the regex module, finds no empty match right where a match ended
        if prev != m.start():
            spans.append([prev, m.start(), invert])
        spans.append([m.start(), m.end(), not invert])
        prev = match_end = m.end()
    if prev != len(text):
        spans.append([prev, len(text), invert])
    if behavior == "Removed":
        kept = [s for s in spans if not s[2]]
    elif behavior == "Isolated":
        kept = spans
    elif behavior in ("Contiguous", "MergedWithPrevious"):
        kept, previous_match = [], False
        for span in spans:
            joins = span[2] == previous_match if behavior == "Contiguous" else span[2] and not previous_match
            if joins and kept:
                kept[-1][1] = span[1]
            else:
                kept.append(span)
            previous_match = span[2]
    elif behavior == "MergedWithNext":
        kept, previous_match = [], False
        for span in reversed(spans):
            if span[2] and not previous_match and kept:
                kept[-1][0] = span[0]
            else:
                kept.append(span)
            previous_match = span[2]
        kept.reverse()
    else:
        raise TinyInferError(f"unknown split behavior {behavior!r} in tokenizer.json; expected Removed, Isolated, Contiguous, MergedWithPrevious or MergedWithNext")
    return [(start, end) for start, end, _ in kept if end > start]


class Split:
    """Split on a literal string or a regex (tokenizer.json "Split": Llama-3, Qwen, Falcon)."""

    def __init__(self, pattern: regex.Pattern, behavior: str, invert: bool = False):
        self.pattern, self.behavior, self.invert = pattern, behavior, invert

    def split(self, pieces: list[str], at_start: bool) -> tuple[list[str], bool]:
        out = []
        for i, piece in enumerate(pieces):
            spans = split_spans(piece, self.pattern, self.behavior, self.invert)
            if i == 0:  # the first piece still begins the input unless text in front of it was removed
                at_start = at_start and bool(spans) and spans[0][0] == 0
            out.extend(piece[start:end] for start, end in spans)
        return out, at_start


class ByteLevel:
    """GPT-2: optionally prefix a space, cut with GPT-2's regex, then spell each piece's bytes as characters."""

    def __init__(self, add_prefix_space: bool = False, use_regex: bool = True):
        self.add_prefix_space, self.use_regex = add_prefix_space, use_regex
        self.pattern = regex.compile(GPT2_SPLIT_PATTERN)

    def split(self, pieces: list[str], at_start: bool) -> tuple[list[str], bool]:
        out = []
        for piece in pieces:
            if self.add_prefix_space and not piece.startswith(" "):
                piece = " " + piece
            chunks = self.pattern.findall(piece) if self.use_regex else [piece]
            out.extend(to_byte_level(chunk) for chunk in chunks)
        return out, at_start


class Metaspace:
    """SentencePiece: spaces become '▁', a '▁' is prepended, and (optionally) each word starts at a '▁'."""

    def __init__(self, replacement: str = "▁", prepend_scheme: str = "always", split: bool = True):
        self.replacement, self.prepend_scheme, self.split_words = replacement, prepend_scheme, split
        self.pattern = regex.compile(regex.escape(replacement))

    def split(self, pieces: list[str], at_start: bool) -> tuple[list[str], bool]:
        out = []
        for i, piece in enumerate(pieces):
            piece = piece.replace(" ", self.replacement)
            first = at_start and i == 0
            if not piece.startswith(self.replacement) and (self.prepend_scheme == "always" or (self.prepend_scheme == "first" and first)):
                piece = self.replacement + piece
            out.extend(split_by_pattern(piece, self.pattern, "MergedWithNext") if self.split_words else [piece])
        return out, at_start


class Sequence:
    def __init__(self, steps: list):
        self.steps = steps

    def split(self, pieces: list[str], at_start: bool) -> tuple[list[str], bool]:
        for step in self.steps:
            pieces, at_start = step.split(pieces, at_start)
        return pieces, at_start


# Escapes that mean something else in Oniguruma (Ruby syntax, the reference's regex engine) than in the
# `regex` module: escape -> (spelling outside a class, spelling inside one; None: left as it is).
ONIG_ESCAPES = {
    r"\w": ("[" + ONIG_WORD + "]", ONIG_WORD),
    r"\W": ("[^" + ONIG_WORD + "]", None),  # a complement cannot join a class's union
    r"\h": ("[0-9a-fA-F]", "0-9a-fA-F"),     # a hex digit (for the regex module: horizontal space)
    r"\H": ("[^0-9a-fA-F]", None),
    r"\z": (r"\Z", None),                   # the end of the text
    r"\Z": (r"(?=\n?\Z)", None),            # the end, or before a final newline
}
HEX_ESCAPE = regex.compile(r"\\x\{([0-9a-fA-F]+)\}")  # \x{263A}: the regex module spells it \U0000263A


def onig_to_regex(pattern: str) -> str:
    """Rewrite an Oniguruma pattern (as tokenizer.json holds) for the `regex` module, compiled MULTILINE
    since Ruby's ^ and $ match at every line's start and end.

    The escapes in ONIG_ESCAPES are spelled out; the main one is \\w: Oniguruma's holds Alphabetic, Mark,
    Decimal_Number, Connector_Punctuation and the Latin-1 ²³¹¼½¾, the regex module's lacks those six and
    adds the joiners U+200C/U+200D, which glue emoji sequences (👨‍👩‍👧) together:
    onig_to_regex(r"\\w+|[^\\w\\s]+") -> r"[WORD]+|[^WORD\\s]+" with WORD = ONIG_WORD.
    A class nested in a class is a union in Ruby, so its brackets go (BLOOM's pre-tokenizer has one):
    onig_to_regex(r" ?[^(\\s|[.,!?])]+") -> r" ?[^(\\s|.,!?)]+".
    """
    out, i, depth = [], 0, 0  # depth: how many character classes are open
    while i < len(pattern):
        two = pattern[i:i + 2]
        if two in ONIG_ESCAPES and ONIG_ESCAPES[two][depth > 0] is not None:
            out.append(ONIG_ESCAPES[two][depth > 0])
            i += 2
        elif hex_escape := HEX_ESCAPE.match(pattern, i):
            out.append(f"\\U{int(hex_escape.group(1), 16):08X}")
            i = hex_escape.end()
        elif two.startswith("\\") or (depth and two == "[:"):  # another escape, or a POSIX class [:alpha:]
            end = i + 2 if two.startswith("\\") else pattern.find(":]", i) + 2
            end = end if end > i else len(pattern)
            out.append(pattern[i:end])
            i = end
        elif pattern[i] == "[":
            if depth and two == "[^":
                raise TinyInferError(f"the tokenizer.json regex {pattern!r} nests a negated character class, which "
                                     "tinyinfer cannot rewrite for Python's regex module; spell the class out")
            head = regex.match(r"\[\^?\]?", pattern[i:]).group()  # a ']' right at the start is a literal
            out.append(head if depth == 0 else head[1:])  # a nested class: only its members stay
            depth += 1
            i += len(head)
        else:
            if pattern[i] == "]" and depth:
                depth -= 1
            if pattern[i] != "]" or depth == 0:  # the ']' of a nested class goes with its '['
                out.append(pattern[i])
            i += 1
    return "".join(out)


def compile_pattern(spec: dict) -> regex.Pattern:
    """A tokenizer.json pattern: {"String": "▁"} is literal, {"Regex": "\\s+"} a regular expression."""
    if "String" in spec:
        return regex.compile(regex.escape(spec["String"]))
    if "Regex" in spec:
        try:
            return regex.compile(onig_to_regex(spec["Regex"]), regex.MULTILINE)
        except regex.error as e:
            raise TinyInferError(f"the tokenizer.json regex {spec['Regex']!r} does not compile ({e}); "
                                 "tinyinfer reads Oniguruma's syntax only as far as Python's regex module shares it") from e
    raise TinyInferError(f"unknown pattern {spec!r} in tokenizer.json; expected {{'String': ...}} or {{'Regex': ...}}")


def prepend_scheme(spec: dict) -> str:
    """A Metaspace entry's prepend_scheme; older files say add_prefix_space (true: "always")."""
    scheme = spec.get("prepend_scheme", "always" if spec.get("add_prefix_space", True) else "never")
    if scheme not in ("always", "first", "never"):
        raise TinyInferError(f"Metaspace prepend_scheme {scheme!r} in tokenizer.json is unknown; expected always, first or never")
    return scheme


def build_pre_tokenizer(spec: dict | None):
    """The pre-tokenizer a tokenizer.json "pre_tokenizer" entry describes (None: the whole text is one piece)."""
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        return Sequence([build_pre_tokenizer(s) for s in spec["pretokenizers"]])
    if kind == "ByteLevel":
        return ByteLevel(spec.get("add_prefix_space", False), spec.get("use_regex", True))
    if kind == "Split":
        return Split(compile_pattern(spec["pattern"]), spec["behavior"], spec.get("invert", False))
    if kind == "Digits":
        pattern = NUMERIC if spec.get("individual_digits", False) else NUMERIC + "+"
        return Split(regex.compile(pattern), "Isolated")
    if kind == "Punctuation":
        return Split(regex.compile(PUNCTUATION), spec.get("behavior", "Isolated"))
    if kind == "Whitespace":
        # written for Rust's regex crate, whose \w is the `regex` module's (not Oniguruma's, as in Split)
        return Split(regex.compile(r"\w+|[^\w\s]+"), "Removed", invert=True)
    if kind == "WhitespaceSplit":
        return Split(regex.compile(r"\s"), "Removed")
    if kind == "BertPreTokenizer":  # words at whitespace, then every punctuation mark on its own
        return Sequence([Split(regex.compile(r"\s"), "Removed"), Split(regex.compile(PUNCTUATION), "Isolated")])
    if kind == "CharDelimiterSplit":
        return Split(regex.compile(regex.escape(spec["delimiter"])), "Removed")
    if kind == "FixedLength":  # pieces of `length` characters
        return Split(regex.compile(f"(?s:.{{1,{spec.get('length', 5)}}})"), "Isolated")
    if kind == "Metaspace":
        return Metaspace(spec.get("replacement", "▁"), prepend_scheme(spec), spec.get("split", True))
    raise TinyInferError(f"tokenizer.json uses the pre-tokenizer {kind!r}, which tinyinfer does not implement "
                         "(supported: ByteLevel, Split, Digits, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, "
                         "CharDelimiterSplit, FixedLength, Metaspace, Sequence)")
