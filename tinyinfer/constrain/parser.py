"""A byte-at-a-time parser for a compiled network: which bytes may come next, and may the text end here?

The parser runs the network like a pushdown automaton that follows every possibility at once:

- A *stack* is a chain of nodes `(network state, parent)`: the state we are in, and the stack to return
  to when the current rule ends. Stacks are interned, so one stack is one integer and two parses that
  share their history share their nodes.
- A *parser state* is the set of stacks still alive after the bytes so far, each stopped at a state with
  byte edges (ready to consume), plus the ACCEPT marker when the root rule may end here. Parser states are
  interned too, so `step(state, byte)` is memoized in a dict and text that loops (the inside of a JSON
  string) costs one lookup per byte after the first time.

    parser = ByteParser(compile_grammar(parse_grammar('root ::= "(" root ")" | "x"')))
    s = parser.initial
    for byte in b"((x)":
        s = parser.step(s, byte)          # DEAD (-1) as soon as a byte cannot extend a valid prefix
    parser.accepts(s) -> False;  parser.next_bytes(s) -> b")"

The closure after each byte follows epsilon edges, enters called rules (pushing the return state), and
pops back to the parent when a rule ends. An ambiguous grammar simply keeps several stacks.
A call in *tail position* (its return state is its rule's end, with nothing left to do) pushes nothing:
returning there would only pop again. So right recursion, the way automata become rules
(`s-0 ::= [a-z] s-1`, `s-1 ::= [0-9] s-0 | ""`), runs in constant stack depth, and the same automaton state
is the same parser state however long the text, which is what lets masks be cached.

`local_view(state)` supports the mask cache (mask.py): it keeps the top frame of every stack (and the
callers of *short* rules, a string's character rule) and re-roots them on a numbered placeholder, so states
that differ only *below* those rules (a JSON string at depth 1 or depth 5) share one view.
Popping into a placeholder marks the resulting state as `escaped`: what follows depends on the context
the view forgot, and the mask layer asks the full state instead. `view_key(view)` names a view in terms
any network shares (`Network.state_key`), so grammars on one vocabulary share the walks of their views.
"""

from __future__ import annotations

from tinyinfer.constrain.automaton import Network

DEAD = -1  # step() result when the byte cannot extend a valid prefix
ACCEPT = 0  # stack node id: popping into it means the root rule has ended
_ACCEPT_MARK = -1  # network "state" of the ACCEPT node; placeholders use -2, -3, ...


class ByteParser:
    """Shared, growing tables for one network: stacks, parser states and memoized steps."""

    def __init__(self, net: Network):
        self.net = net
        self._nodes: list[tuple[int, int]] = [(_ACCEPT_MARK, DEAD)]  # node id -> (network state, parent node)
        self._node_ids: dict[tuple[int, int], int] = {}
        self._placeholders: list[int] = []
        self._state_nodes: list[frozenset[int]] = []  # parser state id -> its stack nodes
        self._state_ids: dict[frozenset[int], int] = {}
        self._accepts: list[bool] = []
        self._escaped: list[bool] = []
        self._next_bytes: list[bytes | None] = []
        self._steps: list[dict[int, int]] = []
        self._local_views: dict[int, int] = {}
        self.initial = self._closure([self._node(net.rule_start[net.root], ACCEPT)])

    # ------------------------------------------------------------ interning
    def _node(self, state: int, parent: int) -> int:
        key = (state, parent)
        node = self._node_ids.get(key)
        if node is None:
            node = self._node_ids[key] = len(self._nodes)
            self._nodes.append(key)
        return node

    def _placeholder(self, k: int) -> int:
        while len(self._placeholders) <= k:
            self._placeholders.append(self._node(_ACCEPT_MARK - 1 - len(self._placeholders), DEAD))
        return self._placeholders[k]

    def _intern(self, nodes: frozenset[int]) -> int:
        sid = self._state_ids.get(nodes)
        if sid is None:
            sid = self._state_ids[nodes] = len(self._state_nodes)
            self._state_nodes.append(nodes)
            self._accepts.append(ACCEPT in nodes)
            self._escaped.append(any(self._nodes[n][0] < _ACCEPT_MARK for n in nodes))
            self._next_bytes.append(None)
            self._steps.append({})
        return sid

    # ------------------------------------------------------------ the parser
    def _closure(self, seeds: list[int]) -> int:
        """Intern the set of stacks reachable from `seeds` without consuming a byte (DEAD if none)."""
        net, nodes = self.net, self._nodes
        seen: set[int] = set()
        ready: set[int] = set()
        work = list(seeds)
        while work:
            node = work.pop()
            if node in seen:
                continue
            seen.add(node)
            state, parent = nodes[node]
            if state < 0:  # ACCEPT or a placeholder: the stack bottomed out here
                ready.add(node)
                continue
            if state in net.pending:  # copies of a long repetition, built when first reached
                net.expand(state)
            if net.byte_edges[state]:
                ready.add(node)
            for target in net.eps_edges[state]:
                work.append(self._node(target, parent))
            for callee_start, ret in net.call_edges[state]:  # push the return point, enter the callee
                caller = parent if self._returns_at_once(ret) else self._node(ret, parent)
                work.append(self._node(callee_start, caller))
            if net.end_of[state] is not None:  # rule done: continue with the caller's stack
                work.append(parent)
        return self._intern(frozenset(ready)) if ready else DEAD

    def _returns_at_once(self, q: int) -> bool:
        """Does network state `q` only end its rule (so a tail call returning there need not push it)?"""
        net = self.net
        return net.end_of[q] is not None and not (net.byte_edges[q] or net.eps_edges[q] or net.call_edges[q])

    def step(self, state: int, byte: int) -> int:
        """The parser state after one more byte, or DEAD. Memoized per (state, byte)."""
        memo = self._steps[state]
        nxt = memo.get(byte)
        if nxt is None:
            nxt = memo[byte] = self._advance(state, byte)
        return nxt

    def _advance(self, state: int, byte: int) -> int:
        # BEGIN EXERCISE 8.1: advance the parser by one byte
        seeds = []
        for node in self._state_nodes[state]:
            net_state, parent = self._nodes[node]
            if net_state < 0:
                continue
            for lo, hi, target in self.net.byte_edges[net_state]:
                if lo <= byte <= hi:
                    seeds.append(self._node(target, parent))
        return self._closure(seeds) if seeds else DEAD
        # END EXERCISE 8.1

    def step_all(self, state: int) -> list[int]:
        """The state after each of the 256 bytes (DEAD where none), memoized like `step`.

        Bytes that every edge out of the state treats alike (the same side of every range boundary) lead to
        the same state, so one closure per such *class* of bytes serves them all: inside a JSON string a
        handful of classes ('"', '\\', control bytes, the rest) stand for some 200 bytes. Regex engines call
        this alphabet compression."""
        cuts = {0, 256}
        for node in self._state_nodes[state]:
            net_state = self._nodes[node][0]
            if net_state >= 0:
                for lo, hi, _ in self.net.byte_edges[net_state]:
                    cuts.update((lo, hi + 1))
        memo, following = self._steps[state], [DEAD] * 256
        bounds = sorted(cuts)
        for lo, hi in zip(bounds, bounds[1:]):  # bytes lo..hi-1 meet the same edges
            nxt = memo.get(lo)
            if nxt is None:
                nxt = self._advance(state, lo)
            memo.update(dict.fromkeys(range(lo, hi), nxt))
            following[lo:hi] = [nxt] * (hi - lo)
        return following

    def step_bytes(self, state: int, data: bytes) -> int:
        """step() over several bytes: step_bytes(s, b"ab") == step(step(s, ord("a")), ord("b"))."""
        for byte in data:
            if state == DEAD:
                break
            state = self.step(state, byte)
        return state

    def accepts(self, state: int) -> bool:
        """May the text end here?"""
        return state != DEAD and self._accepts[state]

    def escaped(self, state: int) -> bool:
        """Did a local view pop below its root (so the full context decides what follows)?"""
        return self._escaped[state]

    def next_bytes(self, state: int) -> bytes:
        """The bytes with an edge out of `state`, sorted (each one gives a live state, or DEAD in rare
        grammars whose rule can never finish)."""
        cached = self._next_bytes[state]
        if cached is None:
            allowed = set()
            for node in self._state_nodes[state]:
                net_state = self._nodes[node][0]
                if net_state >= 0:
                    for lo, hi, _ in self.net.byte_edges[net_state]:
                        allowed.update(range(lo, hi + 1))
            cached = self._next_bytes[state] = bytes(sorted(allowed))
        return cached

    def local_view(self, state: int) -> int:
        """The state with each stack cut below its top frame and re-rooted on a placeholder (numbered in a
        fixed order), so the same rules reached from different callers share one view. A frame in a *short*
        rule (`Network.is_short`: a character, an escape) keeps its caller's frame too, since it
        returns within a byte or two: the character rule of a string keeps the string rule, whose loop
        takes the next character, while the object around the string is cut away (popping into it is an
        escape like any other), so the view is the string's alone and other grammars share it."""
        view = self._local_views.get(state)
        if view is None:
            cuts: dict[int, int] = {}
            nodes = set()
            for node in sorted(self._state_nodes[state], key=lambda n: self._nodes[n]):
                frames, cut = [], node
                while self._nodes[cut][0] >= 0 and (not frames or self.net.is_short(self.net.rule_of[frames[-1]])):
                    frames.append(self._nodes[cut][0])
                    cut = self._nodes[cut][1]
                if not frames:  # the ACCEPT marker: the full state handles EOS
                    continue
                rebuilt = self._placeholder(cuts.setdefault(cut, len(cuts)))
                for net_state in reversed(frames):
                    rebuilt = self._node(net_state, rebuilt)
                nodes.add(rebuilt)
            view = self._local_views[state] = self._intern(frozenset(nodes)) if nodes else DEAD
        return view

    def view_key(self, view: int, horizon: int) -> frozenset | None:
        """What a local view's walk over tokens of up to `horizon` bytes depends on, in names any network
        shares (`Network.state_key`): the frames of each stack, top first; None if one has no shared name. Placeholders are left out: which caller
        a stack returns to never changes which bytes it takes before it escapes."""
        stacks = set()
        for node in self._state_nodes[view]:
            frames = []
            while self._nodes[node][0] >= 0:
                frames.append(self.net.state_key(self._nodes[node][0], horizon))
                node = self._nodes[node][1]
            if None in frames:
                return None
            stacks.add(tuple(frames))
        return frozenset(stacks)
