"""Grammars: a tiny EBNF notation, its syntax tree, and a printer back to text.

A grammar is a set of named rules; `root` is where parsing starts. The notation is the one llama.cpp
calls GBNF, which students can read at a glance:

    root   ::= "{" pair ("," pair)* "}"      # a rule: name ::= expression
    pair   ::= key ":" [0-9]+                # sequence: items one after another
    key    ::= "\\"" [a-z_]{1,8} "\\""         # a literal, and a class repeated 1..8 times
    answer ::= "yes" | "no" | "maybe"        # alternation
    word   ::= ( [^ \\n] | "\\\\ " )+         # grouping, negated class with escapes

Elements:

- `"text"`   a literal; escapes `\\n \\r \\t \\\\ \\" \\xHH \\uHHHH \\UHHHHHHHH`.
- `[a-z_]`   a character class: single characters and ranges; `[^...]` negates it (any Unicode
  character not listed). Inside a class `\\]`, `\\-`, `\\^` and the escapes above work.
- `.`        any Unicode character.
- `name`     a reference to a rule (recursion is allowed, except *left* recursion: write `x ::= y ("," y)*`
  instead of `x ::= x "," y | y`).
- `( ... )`  grouping; postfix `?`, `*`, `+`, `{m}`, `{m,}`, `{m,n}` repeat the element before them.
- `#` starts a comment that runs to the end of the line.

Characters are Unicode code points; the parser (automaton.py) matches their UTF-8 bytes, so a token that
ends in the middle of a character is handled like any other prefix.

    >>> g = parse_grammar('root ::= "a" [0-9]{2,3}')
    >>> g.rules["root"]
    Seq(items=(Literal(text='a'), Repeat(item=CharClass(ranges=((48, 57),), negated=False), min=2, max=3)))
    >>> print(g)
    root ::= "a" [0-9]{2,3}
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tinyinfer.errors import TinyInferError

MAX_CODE_POINT = 0x10FFFF


# ---------------------------------------------------------------- the syntax tree
@dataclass(frozen=True)
class Literal:
    text: str


@dataclass(frozen=True)
class CharClass:
    ranges: tuple[tuple[int, int], ...]  # inclusive code point ranges
    negated: bool = False


@dataclass(frozen=True)
class Ref:
    name: str


class _HashedOnce:
    """A nested expression's hash, computed once: `alt` deduplicates its options by hashing them, and a
    deep alternation (the keys a schema forbids, letter by letter) would rehash every subtree at each level."""

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((type(self).__name__, *self.__dict__.values()))  # the fields, in order
            object.__setattr__(self, "_hash", cached)
        return cached


@dataclass(frozen=True)
class Seq(_HashedOnce):
    items: tuple
    __hash__ = _HashedOnce.__hash__


@dataclass(frozen=True)
class Alt(_HashedOnce):
    options: tuple
    __hash__ = _HashedOnce.__hash__


@dataclass(frozen=True)
class Repeat(_HashedOnce):
    item: object
    min: int
    max: int | None  # None: unbounded
    __hash__ = _HashedOnce.__hash__


EMPTY = Seq(())
ANY_CHAR = CharClass((), negated=True)


def seq(*items) -> object:
    """Sequence that drops empty parts: seq(Literal("a"), EMPTY) -> Literal("a")."""
    flat = []
    for item in items:
        flat.extend(item.items if isinstance(item, Seq) else [item])
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*options) -> object:
    """Alternation of distinct options: alt(x) -> x."""
    unique = list(dict.fromkeys(options))
    return unique[0] if len(unique) == 1 else Alt(tuple(unique))


def optional(item) -> Repeat:
    return Repeat(item, 0, 1)


@dataclass
class Grammar:
    """Named rules; parsing starts at `root`."""

    rules: dict[str, object]
    root: str = "root"

    def __str__(self) -> str:
        width = max(len(name) for name in self.rules)
        return "\n".join(f"{name:<{width}} ::= {format_expr(expr)}" for name, expr in self.rules.items())


# ---------------------------------------------------------------- printing
def _escape_char(cp: int, specials: str) -> str:
    ch = chr(cp)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
    if ch in named:
        return named[ch]
    if ch in specials:
        return "\\" + ch
    if cp < 0x20 or cp == 0x7F or 0xD800 <= cp <= 0xDFFF:
        return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}"
    return ch


def format_expr(expr, nested: bool = False) -> str:
    """Write an expression back in the notation: parse_grammar(str(g)) gives g's rules again."""
    if isinstance(expr, Literal):
        return '"' + "".join(_escape_char(ord(c), '"') for c in expr.text) + '"'
    if isinstance(expr, CharClass):
        if expr.negated and not expr.ranges:
            return "."
        body = "".join(
            _escape_char(lo, "]-^") + ("" if lo == hi else "-" + _escape_char(hi, "]-^")) for lo, hi in expr.ranges
        )
        return "[" + ("^" if expr.negated else "") + body + "]"
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, Seq):
        text = " ".join(format_expr(item, nested=True) for item in expr.items) if expr.items else '""'
        return f"({text})" if nested and len(expr.items) > 1 else text
    if isinstance(expr, Alt):
        text = " | ".join(format_expr(option) for option in expr.options)
        return f"({text})" if nested else text
    if isinstance(expr, Repeat):
        inner = format_expr(expr.item, nested=True)
        if isinstance(expr.item, (Seq, Alt, Repeat)) and not inner.startswith("("):
            inner = f"({inner})"
        suffix = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((expr.min, expr.max))
        if suffix is None:
            hi = "" if expr.max is None else str(expr.max)
            suffix = f"{{{expr.min}}}" if expr.min == expr.max else f"{{{expr.min},{hi}}}"
        return inner + suffix
    raise TypeError(f"not a grammar expression: {expr!r}")


# ---------------------------------------------------------------- parsing the notation
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_RULE_START = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_\-]*)\s*::=")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'", "/": "/",
                   "]": "]", "[": "[", "-": "-", "^": "^", "f": "\f", "b": "\b", "0": "\0"}


class _Reader:
    """Recursive-descent reader over the grammar text; `error` names the line and column."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def error(self, message: str) -> TinyInferError:
        line = self.text.count("\n", 0, self.pos) + 1
        col = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        return TinyInferError(f"grammar line {line}, column {col}: {message}")

    def skip_space(self, newlines: bool = True) -> None:
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            elif ch in " \t\r" or (newlines and ch == "\n"):
                self.pos += 1
            else:
                return

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_rule_start(self) -> bool:
        return _RULE_START.match(self.text, self.pos) is not None

    def escape(self) -> str:
        """Read one escape after a backslash: \\n, \\xHH, \\uHHHH, \\UHHHHHHHH, \\", ..."""
        ch = self.peek()
        self.pos += 1
        widths = {"x": 2, "u": 4, "U": 8}
        if ch in widths:
            digits = self.text[self.pos : self.pos + widths[ch]]
            if len(digits) != widths[ch] or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.error(f"\\{ch} needs {widths[ch]} hex digits")
            self.pos += widths[ch]
            cp = int(digits, 16)
            if cp > MAX_CODE_POINT:
                raise self.error(f"code point {digits} is beyond U+10FFFF")
            return chr(cp)
        if ch in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[ch]
        raise self.error(f"unknown escape \\{ch}; use \\n \\r \\t \\\\ \\\" \\xHH \\uHHHH")


def parse_grammar(text: str) -> Grammar:
    """Parse the notation above into a Grammar; errors name the line and column and the fix."""
    reader = _Reader(text)
    rules: dict[str, object] = {}
    reader.skip_space()
    while reader.pos < len(text):
        match = _RULE_START.match(text, reader.pos)
        if match is None:
            raise reader.error("expected a rule `name ::= expression`")
        name = match.group(1)
        if name in rules:
            raise reader.error(f"rule {name!r} is defined twice; merge the two with |")
        reader.pos = match.end()
        rules[name] = _parse_alt(reader)
        reader.skip_space()
    if "root" not in rules:
        raise TinyInferError("grammar has no `root` rule; parsing starts at `root ::= ...`")
    return Grammar(rules)


def _parse_alt(reader: _Reader):
    options = [_parse_seq(reader)]
    while True:
        reader.skip_space()
        if reader.peek() != "|":
            return alt(*options) if len(options) > 1 else options[0]
        reader.pos += 1
        options.append(_parse_seq(reader))


def _parse_seq(reader: _Reader):
    items = []
    while True:
        reader.skip_space()
        if reader.peek() in ("", "|", ")") or reader.at_rule_start():
            return seq(*items) if items else EMPTY
        items.append(_parse_postfix(reader))


def _parse_postfix(reader: _Reader):
    item = _parse_atom(reader)
    while True:
        ch = reader.peek()
        if ch in "?*+" and ch:
            reader.pos += 1
            item = Repeat(item, *{"?": (0, 1), "*": (0, None), "+": (1, None)}[ch])
        elif ch == "{":
            match = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(reader.text, reader.pos)
            if match is None:
                raise reader.error("bad repetition; write {m}, {m,} or {m,n}")
            reader.pos = match.end()
            lo = int(match.group(1))
            hi = lo if match.group(2) is None else (int(match.group(3)) if match.group(3) else None)
            if hi is not None and hi < lo:
                raise reader.error(f"repetition {{{lo},{hi}}} has max below min")
            item = Repeat(item, lo, hi)
        else:
            return item


def _parse_atom(reader: _Reader):
    ch = reader.peek()
    if ch == '"':
        reader.pos += 1
        chars = []
        while reader.peek() != '"':
            if reader.peek() in ("", "\n"):
                raise reader.error("unterminated string literal; close it with \"")
            reader.pos += 1
            chars.append(reader.escape() if reader.text[reader.pos - 1] == "\\" else reader.text[reader.pos - 1])
        reader.pos += 1
        return Literal("".join(chars)) if chars else EMPTY
    if ch == "[":
        return _parse_class(reader)
    if ch == ".":
        reader.pos += 1
        return ANY_CHAR
    if ch == "(":
        reader.pos += 1
        inner = _parse_alt(reader)
        reader.skip_space()
        if reader.peek() != ")":
            raise reader.error("missing ) to close the group")
        reader.pos += 1
        return inner
    match = _NAME.match(reader.text, reader.pos)
    if match is None:
        raise reader.error(f"unexpected {ch!r}; expected a literal, [class], rule name, . or (group)")
    reader.pos = match.end()
    return Ref(match.group(0))


def _parse_class(reader: _Reader) -> CharClass:
    reader.pos += 1  # [
    negated = reader.peek() == "^"
    reader.pos += negated
    ranges = []

    def one_char() -> int:
        ch = reader.peek()
        if ch == "":
            raise reader.error("unterminated character class; close it with ]")
        reader.pos += 1
        return ord(reader.escape()) if ch == "\\" else ord(ch)

    while reader.peek() != "]":
        lo = one_char()
        hi = lo
        if reader.peek() == "-" and reader.text[reader.pos + 1 : reader.pos + 2] not in ("]", ""):
            reader.pos += 1
            hi = one_char()
            if hi < lo:
                raise reader.error(f"class range {chr(lo)!r}-{chr(hi)!r} is reversed")
        ranges.append((lo, hi))
    reader.pos += 1
    return CharClass(normalize_ranges(ranges), negated)


def normalize_ranges(ranges) -> tuple[tuple[int, int], ...]:
    """Sort and merge code point ranges: [(5, 9), (0, 5), (11, 12)] -> ((0, 9), (11, 12))."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def class_code_points(cls: CharClass) -> tuple[tuple[int, int], ...]:
    """The code point ranges a class matches, negation resolved (surrogates are never characters).

    class_code_points(CharClass(((0, 0x10FFFF - 1),), negated=True)) -> ((0x10FFFF, 0x10FFFF),)
    """
    if not cls.negated:
        return cls.ranges
    result, start = [], 0
    for lo, hi in cls.ranges:
        if lo > start:
            result.append((start, lo - 1))
        start = max(start, hi + 1)
    if start <= MAX_CODE_POINT:
        result.append((start, MAX_CODE_POINT))
    return tuple(result)
