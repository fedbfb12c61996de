"""Regular expressions (the ECMAScript subset JSON Schema uses) as grammar expressions.

    regex_to_expr("[a-c]+x?")       -> Seq((Repeat(CharClass(((97, 99),)), 1, None), Repeat(Literal("x"), 0, 1)))
    pattern_to_expr("^ab")          -> "ab" followed by any characters (JSON Schema patterns *search*)

Supported: literals, `.`, classes `[a-z]` `[^...]`, escapes `\\d \\w \\s \\D \\W \\S \\n \\t \\xHH \\uHHHH
\\u{H..}` and escaped punctuation, groups `(...)` `(?:...)` `(?<name>...)`, alternation, quantifiers
`* + ? {n} {n,} {n,m}` (lazy forms `*?` match the same strings), and `^`/`$` at the start/end of a
top-level branch. Lookarounds, backreferences and word boundaries are not regular in the needed sense
and raise TinyInferError. Classes follow ECMAScript: `\\d` is [0-9], `\\w` is [A-Za-z0-9_], and `.` is
any character except line terminators.
"""

from __future__ import annotations

from tinyinfer.constrain.grammar import (
    ANY_CHAR,
    EMPTY,
    CharClass,
    Literal,
    Repeat,
    alt,
    class_code_points,
    normalize_ranges,
    seq,
)
from tinyinfer.errors import TinyInferError

DIGIT = ((0x30, 0x39),)
WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
SPACE = normalize_ranges([(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                          (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)])
LINE_TERMINATORS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_CLASS_ESCAPES = {"d": (DIGIT, False), "D": (DIGIT, True), "w": (WORD, False), "W": (WORD, True),
                  "s": (SPACE, False), "S": (SPACE, True)}
_CHAR_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "0": "\0"}


def regex_to_expr(pattern: str) -> object:
    """The strings the whole pattern matches (as re.fullmatch would); ^ and $ at the ends are allowed."""
    return alt(*(expr for expr, _, _ in _Regex(pattern).top_branches()))


def pattern_to_expr(pattern: str) -> object:
    """JSON Schema `pattern` semantics: the string must *contain* a match unless anchored with ^ / $."""
    branches = []
    for expr, anchored_start, anchored_end in _Regex(pattern).top_branches():
        anything = Repeat(ANY_CHAR, 0, None)
        branches.append(seq(EMPTY if anchored_start else anything, expr, EMPTY if anchored_end else anything))
    return alt(*branches)


class _Regex:
    """Recursive-descent reader for one pattern."""

    def __init__(self, pattern: str):
        self.text, self.pos = pattern, 0

    def error(self, message: str) -> TinyInferError:
        return TinyInferError(f"regex {self.text!r} at position {self.pos}: {message}")

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def top_branches(self) -> list[tuple[object, bool, bool]]:
        """Each top-level alternative with its own ^ / $ anchors."""
        branches = []
        while True:
            anchored_start = self.peek() == "^"
            self.pos += anchored_start
            expr = self.branch()
            anchored_end = self.peek() == "$"
            self.pos += anchored_end
            branches.append((expr, anchored_start, anchored_end))
            if self.peek() == "|":
                self.pos += 1
                continue
            if self.pos < len(self.text):
                raise self.error("unexpected " + repr(self.peek()) + ("; ^ and $ are supported only at the ends"
                                                                     if self.peek() in "^$" else ""))
            return branches

    def alternation(self):
        options = [self.branch()]
        while self.peek() == "|":
            self.pos += 1
            options.append(self.branch())
        return alt(*options)

    def branch(self):
        items = []
        while self.pos < len(self.text) and self.peek() not in "|)":
            if self.peek() == "$" and self._at_branch_end():
                break
            items.append(self.quantified())
        return seq(*items) if items else EMPTY

    def _at_branch_end(self) -> bool:
        return self.pos + 1 == len(self.text) or self.text[self.pos + 1] == "|"

    def quantified(self):
        atom = self.atom()
        while True:
            ch = self.peek()
            if ch in ("*", "+", "?") and ch:
                self.pos += 1
                atom = Repeat(atom, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[ch])
            elif ch == "{" and self._braces() is not None:
                lo, hi = self._braces()
                self.pos = self.text.index("}", self.pos) + 1
                atom = Repeat(atom, lo, hi)
            else:
                return atom
            if self.peek() == "?":  # lazy: same set of strings
                self.pos += 1

    def _braces(self) -> tuple[int, int | None] | None:
        end = self.text.find("}", self.pos)
        body = self.text[self.pos + 1 : end] if end > 0 else ""
        parts = body.split(",")
        if end < 0 or len(parts) > 2 or not parts[0].isdigit() or (len(parts) == 2 and parts[1] and not parts[1].isdigit()):
            return None  # ECMAScript reads a brace that is not a quantifier as a literal
        lo = int(parts[0])
        hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if hi is not None and hi < lo:
            raise self.error(f"quantifier {{{body}}} has max below min")
        return lo, hi

    def atom(self):
        ch = self.peek()
        self.pos += 1
        if ch == "(":
            if self.peek(2) in ("?=", "?!") or self.peek(3) in ("?<=", "?<!"):
                raise self.error("lookaround assertions are not supported")
            if self.peek(2) == "?:":
                self.pos += 2
            elif self.peek(2) == "?<":
                self.pos = self.text.index(">", self.pos) + 1
            inner = self.alternation()
            if self.peek() != ")":
                raise self.error("missing )")
            self.pos += 1
            return inner
        if ch == "[":
            return self.char_class()
        if ch == ".":
            return CharClass(LINE_TERMINATORS, negated=True)
        if ch == "\\":
            return self.escape(in_class=False)
        if ch in ("*", "+", "?"):
            raise self.error(f"nothing to repeat before {ch!r}")
        if ch in ("^", "$"):
            raise self.error(f"{ch!r} is supported only at the start/end of the pattern")
        if ch == ")":
            raise self.error("unbalanced )")
        return Literal(ch)

    def escape(self, in_class: bool):
        """After a backslash: a class escape, a character escape, or escaped punctuation."""
        ch = self.peek()
        if ch == "":
            raise self.error("pattern ends with a lone backslash")
        self.pos += 1
        if ch in _CLASS_ESCAPES:
            ranges, negated = _CLASS_ESCAPES[ch]
            return CharClass(ranges, negated)
        if ch in _CHAR_ESCAPES:
            return Literal(_CHAR_ESCAPES[ch])
        if ch == "b" and in_class:
            return Literal("\b")
        if ch in "bB":
            raise self.error("word boundaries \\b \\B are not supported")
        if ch.isdigit():
            raise self.error("backreferences are not supported")
        if ch == "c" and self.peek().isalpha():
            self.pos += 1
            return Literal(chr(ord(self.text[self.pos - 1]) % 32))
        if ch in "xu":
            return Literal(chr(self._hex_escape(ch)))
        return Literal(ch)

    def _hex_escape(self, kind: str) -> int:
        if kind == "u" and self.peek() == "{":
            end = self.text.find("}", self.pos)
            digits, self.pos = self.text[self.pos + 1 : end], end + 1
        else:
            width = 2 if kind == "x" else 4
            digits, self.pos = self.peek(width), self.pos + width
        try:
            cp = int(digits, 16)
        except ValueError:
            raise self.error(f"bad \\{kind} escape {digits!r}") from None
        if 0xD800 <= cp <= 0xDFFF or cp > 0x10FFFF:
            raise self.error(f"\\{kind}{digits} is not a character (surrogate halves are not supported)")
        return cp

    def char_class(self) -> CharClass:
        negated = self.peek() == "^"
        self.pos += negated
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":  # ECMAScript: [] matches nothing, [^] anything
            if self.pos >= len(self.text):
                raise self.error("missing ] to close the class")
            lo = self._class_atom()
            if isinstance(lo, CharClass):
                ranges.extend(class_code_points(lo))
                continue
            if self.peek() == "-" and self.peek(2) != "-]" and self.text[self.pos + 1 : self.pos + 2] not in ("]", ""):
                self.pos += 1
                hi = self._class_atom()
                if isinstance(hi, CharClass) or hi < lo:
                    raise self.error("bad class range")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        self.pos += 1
        return CharClass(normalize_ranges(ranges), negated)

    def _class_atom(self):
        ch = self.peek()
        self.pos += 1
        if ch != "\\":
            return ord(ch)
        item = self.escape(in_class=True)
        return item if isinstance(item, CharClass) else ord(item.text)
