"""Grammars for JSON's building blocks: any value, strings, numbers in a range, and string formats.

Output is *compact* JSON (no whitespace), which is what `json.dumps(x, separators=(",", ":"),
ensure_ascii=False)` writes. Strings may use any JSON escape when nothing constrains their content; where a
pattern, a format or a set of excluded keys constrains it, each character is written the one way
json.dumps writes it (`"` as `\\"`, a newline as `\\n`, other control characters as `\\u001f`), so that a
character class on the *value* maps to a class on the *text*.

Integer ranges become digit patterns, the classic way:

    int_range(13, 271) -> 1[3-9] | [2-9][0-9] | 1[0-9]{2} | 2[0-6][0-9] | 27[01]     (as grammar expressions)
"""

from __future__ import annotations

import functools
import json
import math

from tinyinfer.constrain.grammar import (
    EMPTY,
    Alt,
    CharClass,
    Literal,
    Ref,
    Repeat,
    Seq,
    alt,
    class_code_points,
    normalize_ranges,
    optional,
    parse_grammar,
    seq,
)
from tinyinfer.constrain.regex import regex_to_expr

# Rules every JSON grammar may call; JsonRules adds the ones in use to a grammar.
BASE_RULES = parse_grammar(r'''
root              ::= json-value
json-value        ::= json-object | json-array | json-string | json-number | "true" | "false" | "null"
json-object       ::= "{" (json-string ":" json-value ("," json-string ":" json-value)*)? "}"
json-array        ::= "[" (json-value ("," json-value)*)? "]"
json-string       ::= "\"" json-char* "\""
json-char         ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" json-hex4 | "u" json-high "\\u" json-low)
json-hex4         ::= [0-9a-cA-Ce-fE-F] json-hex{3} | [dD] [0-7] json-hex{2}
json-high         ::= [dD] [89abAB] json-hex{2}
json-low          ::= [dD] [c-fC-F] json-hex{2}
json-hex          ::= [0-9a-fA-F]
json-non-ascii    ::= [^\x00-\x7F]
json-escape       ::= "\\" (["\\bfnrt] | "u00" [01] json-hex)   # the escapes of " \ and controls
json-integer      ::= "-"? json-natural
json-natural      ::= "0" | [1-9] [0-9]*
json-number       ::= json-integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
''').rules

# Char-level regexes for the string formats (matched on the value, then JSON-encoded).
_DAY_31 = "(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"
_DAY_30 = "(0[469]|11)-(0[1-9]|[12][0-9]|30)"
_LEAP = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29"
_DATE = f"([0-9]{{4}}-({_DAY_31}|{_DAY_30}|02-(0[1-9]|1[0-9]|2[0-8]))|{_LEAP})"
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "email": rf"[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+)*@{_LABEL}(\.{_LABEL})+",
    "uuid": "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": rf"{_OCTET}(\.{_OCTET}){{3}}",
    "hostname": rf"{_LABEL}(\.{_LABEL})*",
    "uri": r"[A-Za-z][A-Za-z0-9+.\-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*",
}
# Formats the JSON Schema specification defines that tinyinfer does not express (refused, never ignored).
UNSUPPORTED_FORMATS = {"duration", "idn-email", "idn-hostname", "ipv6", "uri-reference", "iri", "iri-reference",
                       "uri-template", "json-pointer", "relative-json-pointer", "regex"}

_JSON_SPECIAL = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))  # characters json.dumps escapes


def json_encode_char(cp: int) -> str:
    r"""The text json.dumps writes for one character inside a string: 0x22 -> '\"', 0x0A -> '\n'."""
    if 0x20 <= cp < 0x7F and cp not in (0x22, 0x5C):  # printable ASCII is itself (most of a schema's keys)
        return chr(cp)
    return json.dumps(chr(cp), ensure_ascii=False)[1:-1]


def subtract_ranges(ranges, remove) -> tuple[tuple[int, int], ...]:
    """Code point ranges minus others: subtract_ranges([(0, 10)], [(3, 4)]) -> ((0, 2), (5, 10))."""
    out = []
    for lo, hi in ranges:
        for rlo, rhi in remove:
            if rhi < lo or rlo > hi:
                continue
            if rlo > lo:
                out.append((lo, rlo - 1))
            lo = rhi + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return normalize_ranges(out)


def json_content(expr) -> object:
    """Map an expression over string *values* to one over JSON string *text* (canonical escapes)."""
    if isinstance(expr, Literal):
        return Literal("".join(json_encode_char(ord(ch)) for ch in expr.text)) if expr.text else EMPTY
    if isinstance(expr, CharClass):
        ranges = class_code_points(expr)
        plain = subtract_ranges(ranges, _JSON_SPECIAL)
        specials = subtract_ranges(ranges, subtract_ranges(ranges, _JSON_SPECIAL))  # ranges ∩ specials
        if specials == _JSON_SPECIAL:  # all of them: one shared rule instead of 34 literals
            escaped = [Ref("json-escape")]
        else:
            escaped = [Literal(json_encode_char(cp)) for lo, hi in specials for cp in range(lo, hi + 1)]
        options = ([CharClass(plain)] if plain else []) + escaped
        return alt(*options) if options else CharClass(())
    if isinstance(expr, Seq):
        return seq(*(json_content(item) for item in expr.items)) if expr.items else EMPTY
    if isinstance(expr, Alt):
        return alt(*(json_content(option) for option in expr.options))
    if isinstance(expr, Repeat):
        return Repeat(json_content(expr.item), expr.min, expr.max)
    raise TypeError(f"not a character-level expression: {expr!r}")


def quoted(content) -> object:
    return seq(Literal('"'), content, Literal('"'))


def format_expr(name: str) -> object:
    """A JSON string in the given format (one of FORMATS)."""
    return quoted(json_content(regex_to_expr(FORMATS[name])))


def string_not_in(names: list[str], alphabet: CharClass | None = None, min_length: int = 0) -> object:
    """A JSON string whose value is none of `names` (the keys beyond the declared properties).

    With `alphabet`, the value is also made of that class's characters only, at least `min_length` of
    them: the keys of a pattern `^[class]*$` other than the declared ones."""
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[None] = {}  # end of a name
    allowed = None if alphabet is None else class_code_points(alphabet)
    tail = Repeat(Ref("json-char") if alphabet is None else json_content(alphabet), 0, None)

    leaving: dict = {}  # (letters excluded, characters still due) -> "another character, then any tail"

    def rest(node: dict, depth: int) -> object:
        chars = [ch for ch in node if ch is not None and (allowed is None or _in_ranges(ord(ch), allowed))]
        options = [] if None in node or depth < min_length else [EMPTY]
        key = (tuple(sorted(chars)), max(0, min_length - depth - 1))  # the same at many nodes of the trie
        if key not in leaving:
            excluded = normalize_ranges((ord(c), ord(c)) for c in chars)
            leaving[key] = seq(_other_char(excluded, allowed), Repeat(tail.item, key[1], None))
        options.append(leaving[key])
        options += [seq(Literal(json_encode_char(ord(ch))), rest(node[ch], depth + 1)) for ch in chars]
        return Alt(tuple(options)) if len(options) > 1 else options[0]  # distinct by their first character

    return quoted(rest(trie, 0))


@functools.lru_cache(maxsize=4096)  # the same letters are excluded at many nodes of the names' trie
def _other_char(excluded: tuple, allowed: tuple | None) -> object:
    """One JSON string character (as text) outside the `excluded` code point ranges, within `allowed`."""
    if allowed is not None:
        return json_content(CharClass(subtract_ranges(allowed, excluded)))
    if all(0x20 <= lo and hi < 0x80 and not lo <= ord(c) <= hi for lo, hi in excluded for c in '"\\'):
        ascii_part = CharClass(tuple((lo, min(hi, 0x7F)) for lo, hi in
                                     class_code_points(CharClass(excluded, negated=True)) if lo < 0x80))
        return alt(json_content(ascii_part), Ref("json-non-ascii"))  # share rules: a smaller network
    return json_content(CharClass(excluded, negated=True))


def _in_ranges(cp: int, ranges) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


# ---------------------------------------------------------------- numbers
def _same_length_range(lo: str, hi: str) -> object:
    """Digit strings of equal length between lo and hi inclusive: ('13', '29') -> 1[3-9] | 2[0-9]."""
    # BEGIN EXERCISE 8.3: digit patterns for an integer range
    if lo == hi:
        return Literal(lo)
    if len(lo) == 1:
        return CharClass(((ord(lo), ord(hi)),))
    rest = len(lo) - 1
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:
        return seq(CharClass(((ord(lo[0]), ord(hi[0])),)), Repeat(CharClass(((48, 57),)), rest, rest))
    if lo[0] == hi[0]:
        return seq(Literal(lo[0]), _same_length_range(lo[1:], hi[1:]))
    options = [seq(Literal(lo[0]), _same_length_range(lo[1:], "9" * rest))]
    if int(hi[0]) - int(lo[0]) > 1:
        middle = CharClass(((ord(lo[0]) + 1, ord(hi[0]) - 1),))
        options.append(seq(middle, Repeat(CharClass(((48, 57),)), rest, rest)))
    options.append(seq(Literal(hi[0]), _same_length_range("0" * rest, hi[1:])))
    return alt(*options)
    # END EXERCISE 8.3


def natural_range(lo: int, hi: int | None) -> object:
    """Decimal naturals (no leading zeros) in lo..hi; hi None means unbounded. Assumes 0 <= lo <= hi."""
    options = []
    top_length = len(str(lo)) if hi is None else len(str(hi))
    for length in range(len(str(lo)), top_length + 1):
        a = max(lo, 10 ** (length - 1) if length > 1 else 0)
        b = 10**length - 1 if hi is None else min(hi, 10**length - 1)
        if a <= b:
            options.append(_same_length_range(str(a), str(b)))
    if hi is None:  # every longer number
        options.append(seq(CharClass(((49, 57),)), Repeat(CharClass(((48, 57),)), top_length, None)))
    return alt(*options)


def int_range(lo: int | None, hi: int | None) -> object:
    """JSON integers in lo..hi (None: unbounded on that side)."""
    options = []
    if lo is None or lo < 0:  # negative values: "-" then a magnitude in max(1, -hi)..-lo
        top = None if lo is None else -lo
        bottom = 1 if hi is None or hi >= 0 else -hi
        if top is None or bottom <= top:
            options.append(seq(Literal("-"), natural_range(bottom, top)))
    if hi is None or hi >= 0:
        options.append(natural_range(max(lo or 0, 0), hi))
    if not options:
        raise ValueError(f"empty integer range {lo}..{hi}")
    return alt(*options)


def decimal_range(lo: float | None, lo_open: bool, hi: float | None, hi_open: bool) -> object:
    """JSON numbers (no exponent) in an interval whose finite ends are integers."""
    options = []
    if hi is None or hi > 0 or (hi == 0 and not hi_open):  # zero and positive values
        start, start_open = (0, False) if lo is None or lo < 0 else (int(lo), lo_open)
        options.append(_magnitude(start, start_open, None if hi is None else int(hi), hi_open))
    if lo is None or lo < 0:  # negative values as "-" and a magnitude > 0
        start, start_open = (0, True) if hi is None or hi >= 0 else (int(-hi), hi_open)
        magnitude = _magnitude(start, start_open, None if lo is None else int(-lo), lo_open)
        if magnitude is not None:
            options.append(seq(Literal("-"), magnitude))
    options = [o for o in options if o is not None]
    if not options:
        raise ValueError("empty number range")
    return alt(*options)


def _magnitude(p: int, p_open: bool, q: int | None, q_open: bool) -> object | None:
    """Unsigned decimals I[.F] with value in the interval from p to q (q None: unbounded)."""
    digits = Repeat(CharClass(((48, 57),)), 0, None)
    any_fraction = optional(seq(Literal("."), Repeat(CharClass(((48, 57),)), 1, None)))
    zero_fraction = optional(seq(Literal("."), Repeat(Literal("0"), 1, None)))
    nonzero_fraction = seq(Literal("."), digits, CharClass(((49, 57),)), digits)
    if q is not None and (q < p or (q == p and (p_open or q_open))):
        return None
    if q == p:
        return seq(Literal(str(p)), zero_fraction)
    options = [seq(Literal(str(p)), nonzero_fraction if p_open else any_fraction)]
    if q is None or q - 1 >= p + 1:
        options.append(seq(natural_range(p + 1, None if q is None else q - 1), any_fraction))
    if q is not None and not q_open:
        options.append(seq(Literal(str(q)), zero_fraction))
    return alt(*options)


def is_integral(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and float(x).is_integer()
