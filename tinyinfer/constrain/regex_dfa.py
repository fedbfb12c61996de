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

Products and minimization touch every (state, character range) pair, tens of thousands of states for a
length bound of 100 or a divisibility test modulo 12012, so they run on a *table*: the code points are cut
into columns (intervals no edge splits), and `table[state, column]` is the target (-1: none). The product
is a breadth-first search over pairs, one level at a time; Moore's refinement splits all blocks at once
(a state's signature is its block and its targets' blocks: one row per state, `np.unique` over rows).
A Dfa keeps whichever form it was built in and makes the other on demand.
"""

from __future__ import annotations

import numpy as np

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

MAX_STATES = 50_000  # subset construction and products can blow up exponentially; refuse beyond this
UNIVERSE = class_code_points(ANY_CHAR)
SURROGATES = (0xD800, 0xE000)  # always a column of their own, never an edge (not characters)
END = 0x110000  # one past the last code point


class Dfa:
    """A deterministic automaton; state 0 is the start. Two forms of the same edges:

    - `edges[state]` = [(lo, hi, target)], disjoint code point ranges (to read, write rules, run);
    - `table()` = (cuts, targets): column c covers code points cuts[c] .. cuts[c+1] - 1 (the last up to
      0x10FFFF), targets [S, C] int64, -1 where no edge (for products and minimization).
    """

    def __init__(self, edges: list[list[tuple[int, int, int]]] | None, accepting, table=None):
        self._edges, self._table = edges, table
        self.accepting = [bool(a) for a in accepting]

    @classmethod
    def from_table(cls, cuts: np.ndarray, targets: np.ndarray, accepting) -> Dfa:
        return cls(None, accepting, (cuts, targets))

    @property
    def edges(self) -> list[list[tuple[int, int, int]]]:
        if self._edges is None:
            self._edges = _edges_of(*self._table)
        return self._edges

    @property
    def n_states(self) -> int:
        return len(self.accepting)

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        if self._table is None:
            self._table = _table_of(self._edges)
        return self._table


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
    cuts, targets = d.table()
    dead = d.n_states
    characters = _character_columns(cuts)  # [C]
    total = np.vstack([targets, np.full((1, cuts.size), -1)])  # [S, C] -> [S + 1, C]
    total[(total < 0) & characters] = dead
    return Dfa.from_table(cuts, total, [not a for a in d.accepting] + [True])


def intersect(a: Dfa, b: Dfa) -> Dfa:
    """Strings both accept: the product automaton over the pairs reachable from (0, 0)."""
    cuts, targets = a.table()
    accepting = np.array(a.accepting)
    return product(cuts, lambda states: targets[states], lambda states: accepting[states], b)


def product(cuts: np.ndarray, step, accept, b: Dfa) -> Dfa:
    """The product of an automaton given by functions, `step(states [F]) -> targets [F, C]` on columns `cuts`
    (-1: none) and `accept(states [F]) -> [F]` bool, with `b`: only the pairs reachable from (0, 0) are
    ever stepped, one breadth-first level at a time (pair (p, q) coded as p * |b| + q). So the first
    automaton may be far too large to write down (number_dfa.py: residues modulo ten million)."""
    common = np.union1d(cuts, b.table()[0])  # [C]
    columns = np.searchsorted(cuts, common, side="right") - 1  # [C] the column of `cuts` holding each
    tb = _on_columns(b, common)  # [Sb, C]
    width = b.n_states

    def pair_targets(codes):  # [F] -> [F, C] pair codes, -1 where either has no edge
        ta, tq = step(codes // width)[:, columns], tb[codes % width]
        return np.where((ta >= 0) & (tq >= 0), ta * width + tq, -1)

    levels, frontier, seen = [np.array([0])], np.array([0]), np.array([0])  # codes, numbered level by level
    while frontier.size:
        nxt = np.unique(pair_targets(frontier))
        frontier = nxt[(nxt >= 0) & ~np.isin(nxt, seen, assume_unique=True)]
        seen = np.union1d(seen, frontier)
        levels.append(frontier)
        check_size(seen.size)
    order = np.concatenate(levels)  # state number -> pair code
    by_code = np.argsort(order)  # state numbers in the order of their codes
    codes = pair_targets(order)  # [S, C]
    targets = np.full(codes.shape, -1, dtype=np.int64)
    targets[codes >= 0] = by_code[np.searchsorted(order[by_code], codes[codes >= 0])]
    return Dfa.from_table(common, targets, accept(order // width) & np.array(b.accepting)[order % width])


def union(a: Dfa, b: Dfa) -> Dfa:
    """Strings either accepts (De Morgan: not (not a and not b))."""
    return complement(intersect(complement(a), complement(b)))


def minimize(d: Dfa) -> Dfa:
    """The smallest automaton for the same language (Moore's algorithm): drop the states that cannot reach
    acceptance, then split states into blocks until two states share a block only when every column
    takes them to the same block (or both nowhere). The start stays state 0, the others are numbered
    breadth first; the empty language is one rejecting state."""
    live = _co_reachable(d)
    if not live[0]:
        return Dfa([[]], [False])
    cuts, targets = d.table()
    kept = np.flatnonzero(live)  # [L] live states, renumbered 0..L-1 (the start stays 0)
    number = np.full(d.n_states + 1, -1, dtype=np.int64)
    number[kept] = np.arange(kept.size)
    targets = number[targets[kept]]  # [L, C] (-1, and edges into dead states, index the -1 at the end)
    distinct = _row_ids(targets.T)  # columns no state tells apart are read once
    columns = np.unique(distinct, return_index=True)[1]  # [C'] one column of each kind
    block = np.array(d.accepting, dtype=np.int64)[kept]  # [L]
    count = np.unique(block).size
    while True:
        signature = np.column_stack([block, np.where(targets[:, columns] >= 0, block[targets[:, columns]], -1)])
        block = _row_ids(signature)  # [L]
        if block.max() + 1 == count:
            break
        count = block.max() + 1
    first = np.unique(block, return_index=True)[1]  # a member of each block
    quotient = np.where(targets[first] >= 0, block[targets[first]], -1)  # [B, C] block -> block
    order = _breadth_first(quotient, block[0])  # blocks reachable from the start's, numbered
    renumber = np.full(first.size + 1, -1, dtype=np.int64)
    renumber[order] = np.arange(order.size)
    return Dfa.from_table(cuts, renumber[quotient[order]], np.array(d.accepting)[kept[first[order]]])


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
                check_size(len(index))
            if out and out[-1][1] == ord(ch) - 1 and out[-1][2] == index[target]:
                out[-1] = (out[-1][0], ord(ch), index[target])
            else:
                out.append((ord(ch), ord(ch), index[target]))
        edges.append(out)
        accepting.append(is_accepting(state))
    return Dfa(edges, accepting)


def accepts_everything(d: Dfa) -> bool:
    """Whether every string is accepted: its complement accepts none."""
    return not _co_reachable(complement(d))[0]


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
    if not live[0]:
        raise ValueError("empty language")
    rules, texts = {}, {}  # texts: the JSON text of each character class, escaped once
    for state in np.flatnonzero(live).tolist():
        by_target: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, target in d.edges[state]:
            if live[target]:
                by_target.setdefault(target, []).append((lo, hi))
        for ranges in map(tuple, by_target.values()):
            if ranges not in texts:
                texts[ranges] = json_content(CharClass(ranges))
        options = [seq(texts[tuple(ranges)], Ref(f"{prefix}-{t}")) for t, ranges in by_target.items()]
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
                check_size(len(index))
            if out and out[-1][1] == lo - 1 and out[-1][2] == index[target]:
                out[-1] = (out[-1][0], nxt - 1, index[target])
            else:
                out.append((lo, nxt - 1, index[target]))
        edges.append(out)
        accepting.append(is_accepting(current))
    return Dfa(edges, accepting)


def _table_of(edges: list[list[tuple[int, int, int]]]) -> tuple[np.ndarray, np.ndarray]:
    """Edge lists -> (cuts, targets): the columns are the intervals between every edge's ends."""
    ends = {0, END, *SURROGATES}
    for out in edges:
        for lo, hi, _ in out:
            ends.update((lo, hi + 1))
    bounds = sorted(ends)
    column = {c: i for i, c in enumerate(bounds)}
    targets = np.full((len(edges), len(bounds) - 1), -1, dtype=np.int64)  # [S, C]
    for state, out in enumerate(edges):
        for lo, hi, target in out:
            targets[state, column[lo] : column[hi + 1]] = target
    return np.array(bounds[:-1], dtype=np.int64), targets


def _edges_of(cuts: np.ndarray, targets: np.ndarray) -> list[list[tuple[int, int, int]]]:
    """(cuts, targets) -> edge lists, neighbouring columns with one target joined into one range."""
    n_states, n_columns = targets.shape
    starts = np.ones(targets.shape, dtype=bool)  # [S, C]: a run of equal targets begins here
    starts[:, 1:] = targets[:, 1:] != targets[:, :-1]
    flat = np.flatnonzero(starts)  # run starts, row by row (column 0 always starts one)
    last = np.append(flat[1:], targets.size) - 1  # each run's last cell
    tops = np.append(cuts[1:], END) - 1  # [C] last code point of each column
    state, target = flat // n_columns, targets.reshape(-1)[flat]
    lo, hi = cuts[flat % n_columns], tops[last % n_columns]
    edges: list[list[tuple[int, int, int]]] = [[] for _ in range(n_states)]
    for s, a, b, t in zip(*(x[target >= 0].tolist() for x in (state, lo, hi, target)), strict=True):
        edges[s].append((a, b, t))
    return edges


def _on_columns(d: Dfa, cuts: np.ndarray) -> np.ndarray:
    """d's targets on finer columns `cuts` (each a piece of one of d's columns): [S, C']."""
    own, targets = d.table()
    return targets[:, np.searchsorted(own, cuts, side="right") - 1]


def _character_columns(cuts: np.ndarray) -> np.ndarray:
    """[C] bool: the columns of characters (not the surrogates' column)."""
    return (cuts < SURROGATES[0]) | (cuts >= SURROGATES[1])


def _row_ids(rows: np.ndarray) -> np.ndarray:
    """[S, K] -> [S] ids 0..n-1: equal rows get equal ids, different rows different ones. Rows are hashed
    to one integer each (fast to sort); a hash shared by different rows is caught, and then the rows are
    compared as raw bytes instead, so the answer is always exact."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    weights = np.random.default_rng(rows.shape[1]).integers(1, 2**63, size=rows.shape[1], dtype=np.uint64)
    hashes = rows.astype(np.uint64) @ weights  # [S] (wraps modulo 2**64)
    _, first, ids = np.unique(hashes, return_index=True, return_inverse=True)
    if (rows == rows[first[ids]]).all():
        return ids.reshape(-1)
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    return np.unique(keys, return_inverse=True)[1].reshape(-1)


def _breadth_first(targets: np.ndarray, start: int) -> np.ndarray:
    """The states reachable from `start`, in breadth-first order (a level at a time, each level sorted)."""
    order, frontier = [np.array([start])], np.array([start])
    seen = np.zeros(targets.shape[0], dtype=bool)
    seen[start] = True
    while frontier.size:
        nxt = np.unique(targets[frontier])
        nxt = nxt[nxt >= 0]
        frontier = nxt[~seen[nxt]]
        seen[frontier] = True
        order.append(frontier)
    return np.concatenate(order)


def _co_reachable(d: Dfa) -> np.ndarray:
    """[S] bool: the states from which some accepting state can be reached (backwards, a level at a time)."""
    _, targets = d.table()
    sources, columns = np.nonzero(targets >= 0)
    ends = targets[sources, columns]
    order = np.argsort(ends, kind="stable")
    sources, ends = sources[order], ends[order]  # edges grouped by target
    first = np.searchsorted(ends, np.arange(d.n_states + 1))  # [S + 1] where each target's edges start
    live = np.array(d.accepting, dtype=bool)
    frontier = np.flatnonzero(live)
    while frontier.size:
        counts = first[frontier + 1] - first[frontier]
        at = np.repeat(first[frontier] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        back = np.unique(sources[at])
        frontier = back[~live[back]]
        live[frontier] = True
    return live


class AutomatonTooLarge(TinyInferError):
    """The constraints need more than MAX_STATES states (the caller names the schema path)."""


def check_size(n: int) -> None:
    if n > MAX_STATES:
        raise AutomatonTooLarge(f"the constraints need an automaton of more than {MAX_STATES} states")
