"""Compile a Grammar into a recursive transition network over bytes.

Each rule becomes a small nondeterministic automaton (Thompson's construction) whose edges are of three
kinds: a *byte edge* (consume one byte in lo..hi), an *epsilon edge* (move without consuming), and a *call
edge* (run another rule from its start, then continue at a return state). One rule's automaton ends in a
single end state. Calls give the network the power of a pushdown automaton: recursion such as JSON's
nested arrays needs a stack, which parser.py keeps.

    root ::= "a" root? "b"        ->   s0 -a-> s1 -call root-> s2 -b-> end(root)
                                                  \\---eps---/

Characters become UTF-8 byte-range chains (utf8.py). The network is built lazily: each rule waits at
its start, a *pending* state built (`expand`) when the parser first reaches it; `{m,n}` is expanded into
copies, but past EAGER_COPIES optional copies the rest waits likewise, so `json-char{0,65535}` (a
maxLength) costs what the text uses, not 65,535 copies; and an alternation of more than EAGER_OPTIONS
options builds each option's first item, its rest pending. Left recursion (`x ::= x "a" | "b"`) would make the stack grow without consuming input; it is
refused at compile time with the rule's name.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from tinyinfer.constrain.grammar import (
    Alt,
    CharClass,
    Grammar,
    Literal,
    Ref,
    Repeat,
    Seq,
    class_code_points,
)
from tinyinfer.constrain.utf8 import utf8_sequences
from tinyinfer.errors import TinyInferError

SHORT_RULE = 16  # bytes: a rule whose strings are at most this long is short (Network.is_short)
KEY_LIMIT = 4000  # characters of rule text beyond which a rule gets no shared name (rule_key)
EAGER_COPIES = 1  # optional copies of a repetition built at once; the others as the parser reaches them
EAGER_OPTIONS = 4  # an alternation of more options builds only each one's first item at once
KEY_STATES = 256  # states reachable within its rule beyond which a state gets no shared name (state_key)


@dataclass
class Network:
    """All rules' automata in one numbering of states."""

    byte_edges: list[list[tuple[int, int, int]]] = field(default_factory=list)  # state -> [(lo, hi, target)]
    eps_edges: list[list[int]] = field(default_factory=list)  # state -> [target]
    call_edges: list[list[tuple[int, int]]] = field(default_factory=list)  # state -> [(callee start, return)]
    end_of: list[str | None] = field(default_factory=list)  # state -> rule it ends, or None
    rule_start: dict[str, int] = field(default_factory=dict)
    rule_end: dict[str, int] = field(default_factory=dict)
    root: str = "root"
    rules: dict[str, object] = field(default_factory=dict)  # rule name -> its grammar expression
    rule_of: list[str] = field(default_factory=list)  # state -> the rule it belongs to
    _rule_keys: dict[str, str | None] = field(default_factory=dict)
    _longest_of: dict[str, float] = field(default_factory=dict)
    _state_keys: dict[tuple[int, int], tuple | None] = field(default_factory=dict)
    building: str = ""  # the rule new states belong to
    pending: dict[int, tuple[object, int]] = field(default_factory=dict)  # state -> expression still to build, end
    later: dict[int, tuple[object, int]] = field(default_factory=dict)  # every state that was pending, as it was

    def new_state(self) -> int:
        self.byte_edges.append([])
        self.eps_edges.append([])
        self.call_edges.append([])
        self.end_of.append(None)
        self.rule_of.append(self.building)
        return len(self.byte_edges) - 1

    def expand(self, state: int) -> None:
        """Build what waits at `state` (a rule, or the copies left of a long repetition): the parser got here."""
        expr, end = self.pending.pop(state)
        self.building = self.rule_of[state]
        _build(self, expr, state, end)

    @property
    def n_states(self) -> int:
        return len(self.byte_edges)

    def is_short(self, rule: str) -> bool:
        """Is every string of `rule` at most SHORT_RULE bytes long (a JSON string character: at most 12,
        `\\uD83D\\uDE00`)? Recursive rules and unbounded repetitions are not short."""
        return self._longest(rule) <= SHORT_RULE

    def _longest(self, rule: str) -> float:
        if rule not in self._longest_of:
            self._longest_of[rule] = math.inf  # reached again before it is known: the rule is recursive
            self._longest_of[rule] = _longest(self.rules[rule], self._longest)
        return self._longest_of[rule]

    def rule_key(self, rule: str) -> str | None:
        """The text of `rule` and of every rule it can reach (renamed in the order first reached): two
        networks' rules with the same key have the same automata (`_build` is deterministic). None past
        KEY_LIMIT characters: a rule that large (a whole object) is specific to its grammar."""
        if rule not in self._rule_keys:
            order, names, texts, size = {rule: 0}, [rule], [], 0
            while len(texts) < len(names) and size <= KEY_LIMIT:  # breadth first over the rules reached
                text, refs = _text_and_refs(self.rules[names[len(texts)]])
                for name in refs:
                    if name not in order:
                        order[name] = len(names)
                        names.append(name)
                texts.append(f"{text} {[order[name] for name in refs]}")
                size += len(texts[-1])
            self._rule_keys[rule] = "\n".join(texts) if size <= KEY_LIMIT else None
        return self._rule_keys[rule]

    def state_key(self, state: int, horizon: int) -> tuple | None:
        """A name for `state` that two networks share when the automata from it to its rule's end agree on
        every string of up to `horizon` bytes: its rule's states reachable from it, numbered breadth first,
        each with its edges (calls name the callee by `rule_key`). What waits to be built (a rule, the copies
        left of a repetition) is named by its expression, a repetition's count capped at `horizon`: more
        copies than that look the same to any walk that far. None past KEY_STATES states, or for a callee
        too large."""
        memo = (state, horizon)
        if memo not in self._state_keys:
            order, queue, parts = {state: 0}, [state], []

            def number(q: int) -> int:
                if q not in order:
                    order[q] = len(queue)
                    queue.append(q)
                return order[q]

            for q in queue:  # grows while read: breadth first
                if q in self.later:  # named as it was before it was built, so that history does not matter
                    expr, end = self.later[q]
                    if isinstance(expr, Repeat) and expr.max is not None and expr.max > horizon >= expr.min:
                        expr = Repeat(expr.item, expr.min, horizon)
                    text, refs = _text_and_refs(expr)
                    callees = [self.rule_key(name) for name in refs]
                    if None in callees:
                        parts = None
                        break
                    parts.append((text, tuple(callees), number(end)))
                    continue
                callees = [self.rule_key(self.rule_of[callee]) for callee, _ in self.call_edges[q]]
                if len(order) > KEY_STATES or None in callees:
                    parts = None
                    break
                parts.append((tuple((lo, hi, number(t)) for lo, hi, t in self.byte_edges[q]),
                              tuple(number(t) for t in self.eps_edges[q]),
                              tuple((k, number(ret)) for k, (_, ret) in zip(callees, self.call_edges[q])),
                              self.end_of[q] is not None))
            self._state_keys[memo] = None if parts is None else tuple(parts)
        return self._state_keys[memo]


def compile_grammar(grammar: Grammar) -> Network:
    """The network of every rule, each built when the parser first enters it (`Network.expand`), after the
    checks that must come first: every reference defined, no left recursion."""
    net = Network(root=grammar.root)
    if grammar.root not in grammar.rules:
        raise TinyInferError(f"grammar has no {grammar.root!r} rule to start from")
    _check_references(grammar)
    _check_left_recursion(grammar)
    net.rules = dict(grammar.rules)
    for name, expr in grammar.rules.items():
        net.building = name
        start, end = net.rule_start[name], net.rule_end[name] = net.new_state(), net.new_state()
        net.end_of[end] = name
        net.pending[start] = net.later[start] = (expr, end)
    return net


def _build(net: Network, expr, start: int, end: int) -> None:
    """Add states and edges so that paths start -> end spell exactly the strings of `expr`."""
    if isinstance(expr, Literal):
        data = expr.text.encode("utf-8")
        if not data:
            net.eps_edges[start].append(end)
        for i, byte in enumerate(data):
            nxt = end if i == len(data) - 1 else net.new_state()
            net.byte_edges[start].append((byte, byte, nxt))
            start = nxt
    elif isinstance(expr, CharClass):
        for byte_ranges in _byte_sequences(expr):
            state = start
            for i, (blo, bhi) in enumerate(byte_ranges):
                nxt = end if i == len(byte_ranges) - 1 else net.new_state()
                net.byte_edges[state].append((blo, bhi, nxt))
                state = nxt
    elif isinstance(expr, Seq):
        if not expr.items:
            net.eps_edges[start].append(end)
        for i, item in enumerate(expr.items):
            nxt = end if i == len(expr.items) - 1 else net.new_state()
            _build(net, item, start, nxt)
            start = nxt
    elif isinstance(expr, Alt):
        for option in expr.options:
            if len(expr.options) > EAGER_OPTIONS and isinstance(option, Seq) and len(option.items) > 1:
                nxt = net.new_state()  # one of many options (the key names an object forbids, by letter):
                _build(net, option.items[0], start, nxt)  # the rest waits until the parser gets into it
                rest = Seq(option.items[1:]) if len(option.items) > 2 else option.items[1]
                net.pending[nxt] = net.later[nxt] = (rest, end)
            else:
                _build(net, option, start, end)
    elif isinstance(expr, Repeat):
        _build_repeat(net, expr, start, end)
    elif isinstance(expr, Ref):
        net.call_edges[start].append((net.rule_start[expr.name], end))
    else:
        raise TypeError(f"not a grammar expression: {expr!r}")


@functools.lru_cache(maxsize=1024)  # every schema's string rules spell the same few classes
def _byte_sequences(cls: CharClass) -> tuple:
    """The UTF-8 byte-range sequences of a character class (utf8.py)."""
    return tuple(tuple(seq) for lo, hi in class_code_points(cls) for seq in utf8_sequences(lo, hi))


def _longest(expr, longest_rule) -> float:
    """The most bytes a string of `expr` has, or inf once that passes SHORT_RULE (or a callee is not short)."""
    if isinstance(expr, Literal):
        most = len(expr.text.encode("utf-8"))
    elif isinstance(expr, CharClass):
        points = class_code_points(expr)
        most = len(chr(points[-1][1]).encode("utf-8", "surrogatepass")) if points else 0
    elif isinstance(expr, Seq):
        most = 0
        for item in expr.items:
            most += _longest(item, longest_rule)
            if most > SHORT_RULE:
                break
    elif isinstance(expr, Alt):
        most = 0
        for option in expr.options:
            most = max(most, _longest(option, longest_rule))
            if most > SHORT_RULE:
                break
    elif isinstance(expr, Repeat):
        item = _longest(expr.item, longest_rule)
        most = 0 if expr.max == 0 or item == 0 else math.inf if expr.max is None else expr.max * item
    else:  # a Ref
        most = longest_rule(expr.name)
    return most if most <= SHORT_RULE else math.inf


@functools.lru_cache(maxsize=4096)  # the JSON rules are the same objects in every schema's grammar
def _text_and_refs(expr) -> tuple[str, tuple[str, ...]]:
    """The text of an expression with its rule references numbered in the order they appear, and those
    rules' names: ('Seq(items=(Literal(text=\'"\'), Ref(name=\'0\'), ...', ('json-char',))."""
    names: dict[str, int] = {}
    text = repr(_renamed(expr, names))
    return text, tuple(names)


def _renamed(expr, order: dict[str, int]):
    """`expr` with every rule reference replaced by its number in `order` (new names get the next numbers)."""
    if isinstance(expr, Ref):
        return Ref(str(order.setdefault(expr.name, len(order))))
    if isinstance(expr, Seq):
        return Seq(tuple(_renamed(item, order) for item in expr.items))
    if isinstance(expr, Alt):
        return Alt(tuple(_renamed(option, order) for option in expr.options))
    if isinstance(expr, Repeat):
        return Repeat(_renamed(expr.item, order), expr.min, expr.max)
    return expr


def _build_repeat(net: Network, expr: Repeat, start: int, end: int) -> None:
    for _ in range(expr.min):  # mandatory copies
        nxt = net.new_state()
        _build(net, expr.item, start, nxt)
        start = nxt
    if expr.max is None:  # a loop on a fresh state (never loop back into a state other parts share)
        loop, body_end = net.new_state(), net.new_state()
        net.eps_edges[start].append(loop)
        _build(net, expr.item, loop, body_end)
        net.eps_edges[body_end].append(loop)
        net.eps_edges[loop].append(end)
        return
    for built in range(expr.max - expr.min):  # optional copies: may stop before each one
        if built == EAGER_COPIES:  # the rest when the parser gets here (`expand`): maxLength 65535 stays small
            net.pending[start] = net.later[start] = (Repeat(expr.item, 0, expr.max - expr.min - built), end)
            return
        net.eps_edges[start].append(end)
        nxt = net.new_state()
        _build(net, expr.item, start, nxt)
        start = nxt
    net.eps_edges[start].append(end)


def _nullable(expr, nullable: set[str]) -> bool:
    """Can `expr` match the empty string (given the rules known to)?"""
    if isinstance(expr, Literal):
        return not expr.text
    if isinstance(expr, Seq):
        return all(_nullable(item, nullable) for item in expr.items)
    if isinstance(expr, Alt):
        return any(_nullable(option, nullable) for option in expr.options)
    if isinstance(expr, Repeat):
        return expr.min == 0 or _nullable(expr.item, nullable)
    return isinstance(expr, Ref) and expr.name in nullable  # a CharClass reads a character


def _left_refs(expr, nullable: set[str], out: set[str]) -> set[str]:
    """Add to `out` the rules `expr` may call before reading a byte."""
    if isinstance(expr, Ref):
        out.add(expr.name)
    elif isinstance(expr, Seq):
        for item in expr.items:
            _left_refs(item, nullable, out)
            if not _nullable(item, nullable):
                break
    elif isinstance(expr, Alt):
        for option in expr.options:
            _left_refs(option, nullable, out)
    elif isinstance(expr, Repeat) and expr.max != 0:
        _left_refs(expr.item, nullable, out)
    return out


def _check_references(grammar: Grammar) -> None:
    """Every rule a rule refers to is defined (checked before any rule is built: rules are built lazily)."""
    for rule, expr in grammar.rules.items():
        work = [expr]
        while work:
            expr = work.pop()
            kind = type(expr)
            if kind is Seq:
                work.extend(expr.items)
            elif kind is Alt:
                work.extend(expr.options)
            elif kind is Repeat:
                work.append(expr.item)
            elif kind is Ref and expr.name not in grammar.rules:
                raise TinyInferError(f"rule {rule!r} refers to undefined rule {expr.name!r}; define `{expr.name} ::= ...`")


def _check_left_recursion(grammar: Grammar) -> None:
    nullable: set[str] = set()
    changed = True
    while changed:  # a rule is nullable when its expression is, given the rules known to be
        changed = False
        for name, expr in grammar.rules.items():
            if name not in nullable and _nullable(expr, nullable):
                nullable.add(name)
                changed = True
    left = {name: _left_refs(expr, nullable, set()) for name, expr in grammar.rules.items()}
    for name, callees in left.items():  # depth-first search for a cycle name -> ... -> name
        stack, seen = list(callees), set()
        while stack:
            callee = stack.pop()
            if callee == name:
                raise TinyInferError(
                    f"rule {name!r} is left-recursive (it can call itself before reading a character); "
                    f"rewrite it with repetition, e.g. `list ::= item (\",\" item)*`"
                )
            if callee not in seen:
                seen.add(callee)
                stack.extend(left[callee])
