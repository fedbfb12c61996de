"""Deterministic automata over characters: intersection and complement of regular string languages.

A grammar expression can say "matches A" but not "matches A and B" or "does not match A". Over a
*deterministic* automaton both are easy: run two automata side by side (product) and accept when both
accept; or accept exactly where the automaton rejects. The result is written back as grammar rules, one
per state, each character class on the JSON-escaped text (json_values.json_content):

    dfa_of(regex_to_expr("a+"))                  states 0 -a-> 1 -a-> 1, 1 accepting
    complement(that)                             accepts "", "b", "ab", ...: everything but a+
    intersect(dfa_of(A), length_dfa(2, 5))       A with 2 to 5 characters
    union(A, B) = complement(intersect(complement(A), complement(B)))      (De Morgan)
    minimize(that)                               the fewest states for the same language
    to_rules(dfa, "str-3")                       str-3-0 ::= "a" str-3-1 ;  str-3-1 ::= "a" str-3-1 | ""

Edges carry code point ranges; a state's ranges never overlap. Built by the subset construction from a
Thompson automaton of the expression (Literal, CharClass, Seq, Alt, Repeat; no rule references).
States that cannot reach acceptance are dropped when writing rules, so no rule leads into a dead end.
Regular languages are closed under all three operations, so any boolean combination of patterns stays one
automaton; `minimize` (Moore's partition refinement) after each operation keeps products small.
`explore` builds an automaton from a transition function over hashable states (number_dfa.py uses it).
"""

from __future__ import annotations

from dataclasses import dataclass

from tinyinfer.constrain.grammar import (
    ANY_CHAR,
    EMPTY,
    Alt,
    CharClass,
    Literal,
    Ref,
    Repeat,
    Seq,
    alt,
    class_code_points,
    seq,
)
from tinyinfer.constrain.json_values import json_content
from tinyinfer.errors import TinyInferError

MAX_STATES = 4000  # subset construction can blow up exponentially; refuse beyond this
UNIVERSE = class_code_points(ANY_CHAR)


@dataclass
class Dfa:
    edges: list[list[tuple[int, int, int]]]  # state -> [(lo, hi, target)], disjoint ranges
    accepting: list[bool]  # state 0 is the start


def dfa_of(expr) -> Dfa:
    """The automaton of a character-level expression (the strings it matches, whole)."""
    nfa = _Nfa()
    start, end = nfa.build(expr)
    return _determinize(lambda states: _closure(nfa, states), nfa.ranges, frozenset([start]), lambda s: end in s)


def length_dfa(lo: int, hi: int | None) -> Dfa:
    """Strings of lo..hi characters (hi None: no upper bound); state n counts characters, up to the cap."""
    cap = lo if hi is None else hi
    edges = [[(a, b, min(n + 1, cap)) for a, b in UNIVERSE] if hi is None or n < hi else [] for n in range(cap + 1)]
    return Dfa(edges, [n >= lo for n in range(cap + 1)])


def complement(d: Dfa) -> Dfa:
    """Every string `d` rejects (made total with a dead state first)."""
    dead = len(d.edges)
    edges = [_fill(e, dead) for e in d.edges] + [[(a, b, dead) for a, b in UNIVERSE]]
    return Dfa(edges, [not a for a in d.accepting] + [True])


def intersect(a: Dfa, b: Dfa) -> Dfa:
    """Strings both accept: the product automaton, states numbered as reached from (0, 0)."""
    index, edges, accepting, todo = {(0, 0): 0}, [], [], [(0, 0)]
    while todo:
        p, q = todo.pop(0)
        out = []
        for lo1, hi1, t1 in a.edges[p]:
            for lo2, hi2, t2 in b.edges[q]:
                lo, hi = max(lo1, lo2), min(hi1, hi2)
                if lo <= hi:
                    if (t1, t2) not in index:
                        index[(t1, t2)] = len(index)
                        todo.append((t1, t2))
                        _check_size(len(index))
                    out.append((lo, hi, index[(t1, t2)]))
        edges.append(out)
        accepting.append(a.accepting[p] and b.accepting[q])
    return Dfa(edges, accepting)


def union(a: Dfa, b: Dfa) -> Dfa:
    """Strings either accepts (De Morgan: not (not a and not b))."""
    return complement(intersect(complement(a), complement(b)))


def minimize(d: Dfa) -> Dfa:
    """The smallest automaton for the same language (Moore's algorithm): drop the states that cannot reach
    acceptance, then split states into blocks until two states share a block only when every character
    takes them to the same block. The start stays state 0; the empty language is one rejecting state."""
    live = _co_reachable(d)
    if 0 not in live:
        return Dfa([[]], [False])
    block = {s: int(d.accepting[s]) for s in live}
    while True:
        signatures: dict = {}
        refined = {s: signatures.setdefault((block[s], _signature(d.edges[s], block)), len(signatures)) for s in live}
        if len(signatures) == len(set(block.values())):
            break
        block = refined
    member = {}  # one state per block
    for s in live:
        member.setdefault(block[s], s)
    number, todo, edges = {block[0]: 0}, [block[0]], []
    while todo:  # number the blocks breadth first from the start's
        out = _signature(d.edges[member[todo.pop(0)]], block)
        for _, _, b in out:
            if b not in number:
                number[b] = len(number)
                todo.append(b)
        edges.append([(lo, hi, number[b]) for lo, hi, b in out])
    accepting = [False] * len(number)
    for b, i in number.items():
        accepting[i] = d.accepting[member[b]]
    return Dfa(edges, accepting)


def explore(start, step, is_accepting, alphabet: str) -> Dfa:
    """The automaton of the states reachable from `start`, where `step(state, ch)` is the next state (None:
    no move) for each character of `alphabet`; states are any hashable values.

        explore(0, lambda r, ch: (10 * r + int(ch)) % 3, lambda r: r == 0, "0123456789")
        -> decimal digit strings divisible by 3 (three states)"""
    index, edges, accepting, todo = {start: 0}, [], [], [start]
    while todo:
        state = todo.pop(0)
        out: list[tuple[int, int, int]] = []
        for ch in sorted(alphabet):
            target = step(state, ch)
            if target is None:
                continue
            if target not in index:
                index[target] = len(index)
                todo.append(target)
                _check_size(len(index))
            if out and out[-1][1] == ord(ch) - 1 and out[-1][2] == index[target]:
                out[-1] = (out[-1][0], ord(ch), index[target])
            else:
                out.append((ord(ch), ord(ch), index[target]))
        edges.append(out)
        accepting.append(is_accepting(state))
    return Dfa(edges, accepting)


def accepts_everything(d: Dfa) -> bool:
    """Whether every string is accepted: its complement accepts none."""
    return 0 not in _co_reachable(complement(d))


def accepts(d: Dfa, text: str) -> bool:
    """Run the automaton: accepts(dfa_of(regex_to_expr("a+")), "aa") -> True."""
    state = 0
    for ch in text:
        state = next((t for lo, hi, t in d.edges[state] if lo <= ord(ch) <= hi), None)
        if state is None:
            return False
    return d.accepting[state]


def to_rules(d: Dfa, prefix: str) -> tuple[object, dict[str, object]]:
    """(expression for the start, rules) deriving the JSON string *content* of the accepted strings.
    Raises ValueError when no string is accepted."""
    live = _co_reachable(d)
    if 0 not in live:
        raise ValueError("empty language")
    rules = {}
    for state in sorted(live):
        by_target: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, target in d.edges[state]:
            if target in live:
                by_target.setdefault(target, []).append((lo, hi))
        options = [seq(json_content(CharClass(tuple(ranges))), Ref(f"{prefix}-{t}")) for t, ranges in by_target.items()]
        rules[f"{prefix}-{state}"] = alt(*options, *([EMPTY] if d.accepting[state] else []))
    return Ref(f"{prefix}-0"), rules


# ---------------------------------------------------------------- construction
class _Nfa:
    """Thompson automaton: state -> epsilon targets, state -> [(lo, hi, target)]."""

    def __init__(self):
        self.eps: list[list[int]] = []
        self.ranges: list[list[tuple[int, int, int]]] = []

    def state(self) -> int:
        self.eps.append([])
        self.ranges.append([])
        return len(self.eps) - 1

    def build(self, expr) -> tuple[int, int]:
        start, end = self.state(), self.state()
        if isinstance(expr, Literal):
            at = start
            for ch in expr.text:
                nxt = self.state()
                self.ranges[at].append((ord(ch), ord(ch), nxt))
                at = nxt
            self.eps[at].append(end)
        elif isinstance(expr, CharClass):
            self.ranges[start] += [(lo, hi, end) for lo, hi in class_code_points(expr)]
        elif isinstance(expr, Seq):
            at = start
            for item in expr.items:
                s, e = self.build(item)
                self.eps[at].append(s)
                at = e
            self.eps[at].append(end)
        elif isinstance(expr, Alt):
            for option in expr.options:
                s, e = self.build(option)
                self.eps[start].append(s)
                self.eps[e].append(end)
        elif isinstance(expr, Repeat):
            at = start
            for i in range(expr.min if expr.max is None else expr.max):
                s, e = self.build(expr.item)
                self.eps[at].append(s)
                if i >= expr.min:  # an optional copy may be skipped to the end
                    self.eps[at].append(end)
                at = e
            if expr.max is None:  # then any number more
                s, e = self.build(expr.item)
                self.eps[at] += [s]
                self.eps[e] += [s]
                self.eps[e].append(end)
            self.eps[at].append(end)
        else:
            raise TinyInferError(f"not a character-level expression: {expr!r}")
        return start, end


def _closure(nfa: _Nfa, states) -> frozenset:
    seen, todo = set(states), list(states)
    while todo:
        for t in nfa.eps[todo.pop()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return frozenset(seen)


def _determinize(closure, ranges, start, is_accepting) -> Dfa:
    first = closure(start)
    index, edges, accepting, todo = {first: 0}, [], [], [first]
    while todo:
        current = todo.pop(0)
        moves = [r for s in current for r in ranges[s]]
        cuts = sorted({lo for lo, _, _ in moves} | {hi + 1 for _, hi, _ in moves})
        out = []
        for lo, nxt in zip(cuts, cuts[1:]):  # elementary intervals [lo, nxt - 1]
            targets = frozenset(t for a, b, t in moves if a <= lo and nxt - 1 <= b)
            if not targets:
                continue
            target = closure(targets)
            if target not in index:
                index[target] = len(index)
                todo.append(target)
                _check_size(len(index))
            if out and out[-1][1] == lo - 1 and out[-1][2] == index[target]:
                out[-1] = (out[-1][0], nxt - 1, index[target])
            else:
                out.append((lo, nxt - 1, index[target]))
        edges.append(out)
        accepting.append(is_accepting(current))
    return Dfa(edges, accepting)


def _fill(edges: list[tuple[int, int, int]], dead: int) -> list[tuple[int, int, int]]:
    """A state's edges plus edges to `dead` on every character of UNIVERSE they miss."""
    covered = sorted((lo, hi) for lo, hi, _ in edges)
    gaps, at = [], 0
    for lo, hi in covered:
        if lo > at:
            gaps.append((at, lo - 1))
        at = max(at, hi + 1)
    gaps.append((at, 0x10FFFF))
    missing = [(max(lo, ulo), min(hi, uhi)) for lo, hi in gaps for ulo, uhi in UNIVERSE if max(lo, ulo) <= min(hi, uhi)]
    return edges + [(lo, hi, dead) for lo, hi in missing]


def _signature(edges, block: dict) -> tuple[tuple[int, int, int], ...]:
    """A state's edges into live states, targets replaced by their blocks, adjacent ranges joined."""
    out: list[tuple[int, int, int]] = []
    for lo, hi, t in sorted(edges):
        if t not in block:
            continue
        if out and out[-1][1] == lo - 1 and out[-1][2] == block[t]:
            out[-1] = (out[-1][0], hi, block[t])
        else:
            out.append((lo, hi, block[t]))
    return tuple(out)


def _co_reachable(d: Dfa) -> set[int]:
    """States from which some accepting state can be reached."""
    back: dict[int, set[int]] = {}
    for s, edges in enumerate(d.edges):
        for _, _, t in edges:
            back.setdefault(t, set()).add(s)
    live = {s for s, a in enumerate(d.accepting) if a}
    todo = list(live)
    while todo:
        for s in back.get(todo.pop(), ()):
            if s not in live:
                live.add(s)
                todo.append(s)
    return live


class AutomatonTooLarge(TinyInferError):
    """The constraints need more than MAX_STATES states (the caller names the schema path)."""


def _check_size(n: int) -> None:
    if n > MAX_STATES:
        raise AutomatonTooLarge(f"the constraints need an automaton of more than {MAX_STATES} states")
