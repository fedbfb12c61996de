"""From bytes to tokens: the mask of vocabulary entries that keep the output inside the grammar.

A token is allowed when the parser survives every one of its bytes. Checking 50,000 tokens one by one
repeats work: tokens share prefixes (" the", " then", " there"). So the vocabulary's byte strings go
into a *trie*, and one depth-first walk steps the parser once per trie edge, dropping a whole subtree the
moment a byte is refused.

Masks are cached per parser state. To share them between states that differ only in what lies *below*
the current rule (the same JSON string rule reached at another depth), the walk runs on the parser's
`local_view`: bytes that stay inside the current rules give a context-free part of the mask, cached by the
view; where a byte finishes the current rule (the view is `escaped`), the walk records the trie node and
finishes that subtree with the full state. Those escape points are few (tokens containing `"` inside a
string), so most of the work is cached across contexts.

    masker = TokenMasker(compile_grammar(g), Vocabulary([b"a", b"b", b"ab", b"<eos>"], eos_ids=[3]))
    c = Constraint(masker)
    c.allowed_mask()  -> array([ True, False,  True, False])     # for root ::= "a" "b"?
    c.advance(0); c.allowed_mask() -> array([False,  True, False,  True])
"""

from __future__ import annotations

import numpy as np

from tinyinfer.constrain.automaton import Network
from tinyinfer.constrain.parser import DEAD, ByteParser
from tinyinfer.errors import TinyInferError


class VocabTrie:
    """The vocabulary's byte strings as a trie: node 0 is the empty prefix.

    Children are stored flat (compressed sparse rows): node n's children are child_node[child_start[n]:
    child_start[n + 1]], reached by the bytes child_byte[...] at the same positions."""

    def __init__(self, vocab: list[bytes], excluded: set[int]):
        children: list[dict[int, int]] = [{}]
        parent = [-1]
        self.node_of_token = np.zeros(len(vocab), dtype=np.int64)  # token -> trie node (0: never allowed)
        for token_id, data in enumerate(vocab):
            if token_id in excluded or not data:  # special and empty tokens never match grammar text
                continue
            node = 0
            for byte in data:
                child = children[node].get(byte)
                if child is None:
                    child = children[node][byte] = len(children)
                    children.append({})
                    parent.append(node)
                node = child
            self.node_of_token[token_id] = node
        self.n_nodes = len(children)
        self.parent = np.array(parent, dtype=np.int64)  # [n_nodes]
        self.child_start = np.cumsum([0] + [len(kids) for kids in children]).astype(np.int64)  # [n_nodes + 1]
        self.child_byte = np.array([b for kids in children for b in kids], dtype=np.uint8)  # [n_nodes - 1]
        self.child_node = np.array([c for kids in children for c in kids.values()], dtype=np.int64)
        self.edge_byte = np.zeros(self.n_nodes, dtype=np.uint8)  # [n_nodes]: the byte that leads to the node
        self.edge_byte[self.child_node] = self.child_byte

    def prefix(self, node: int) -> bytes:
        """The byte string spelled from the root to `node`."""
        out = []
        while node > 0:
            out.append(int(self.edge_byte[node]))
            node = int(self.parent[node])
        return bytes(reversed(out))


class Vocabulary:
    """What a mask needs to know about a tokenizer: each token's bytes (as a trie), EOS and special ids."""

    def __init__(self, token_bytes: list[bytes], eos_ids, special_ids=()):
        self.size = len(token_bytes)
        self.eos_ids = sorted({int(i) for i in eos_ids})
        bad = [i for i in self.eos_ids if not 0 <= i < self.size]
        if bad:
            raise TinyInferError(f"EOS id(s) {bad} outside the vocabulary of {self.size} tokens")
        self.trie = VocabTrie(token_bytes, set(self.eos_ids) | {int(i) for i in special_ids})

    @classmethod
    def from_tokenizer(cls, tokenizer, eos_ids=None, rows: int | None = None) -> Vocabulary:
        """From a tinyinfer Tokenizer (`token_bytes`, `special_ids`, `eos_token_id`). `rows`: the rows of the
        model's logits when they differ from the tokenizer's size: padding rows (Phi-3 has 32,064 for 32,011
        tokens) get no bytes and are never allowed; ids beyond the rows are dropped."""
        if eos_ids is None:
            eos_ids = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
        rows = tokenizer.vocab_size if rows is None else rows
        known = min(tokenizer.vocab_size, rows)
        token_bytes = [tokenizer.token_bytes(i) for i in range(known)] + [b""] * (rows - known)
        return cls(token_bytes, [i for i in eos_ids if i < rows], getattr(tokenizer, "special_ids", ()))


class TokenMasker:
    """Masks over one vocabulary for one grammar, with the caches every Constraint on them shares."""

    def __init__(self, net: Network, vocab: Vocabulary):
        self.parser = ByteParser(net)
        self.vocab_size, self.eos_ids, self.trie = vocab.size, vocab.eos_ids, vocab.trie
        self._local_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # view -> (allowed nodes, escapes)
        self._mask_cache: dict[int, np.ndarray] = {}
        self._tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # state -> _transitions(state)

    def mask(self, state: int) -> np.ndarray:
        """Allowed tokens after reaching parser `state` (EOS exactly when the grammar may end)."""
        cached = self._mask_cache.get(state)
        if cached is None:
            node_ok = np.zeros(self.trie.n_nodes, dtype=bool)  # [n_nodes]
            view = self.parser.local_view(state)
            if view != DEAD:
                local = self._local_cache.get(view)
                if local is None:
                    escapes: list[np.ndarray] = []
                    allowed = self._walk(np.array([0]), np.array([view]), escapes)
                    local = self._local_cache[view] = (allowed, np.concatenate(escapes))
                allowed, escapes = local
                node_ok[allowed] = True
                # a rule ended inside these tokens: finish them with the full state
                starts = [(n, self.parser.step_bytes(state, self.trie.prefix(n))) for n in escapes.tolist()]
                starts = [(n, s) for n, s in starts if s != DEAD]
                if starts:
                    nodes, states = (np.array(column, dtype=np.int64) for column in zip(*starts))
                    node_ok[nodes] = True
                    node_ok[self._walk(nodes, states)] = True
            node_ok[0] = False
            cached = node_ok[self.trie.node_of_token]  # [n_nodes] -> [vocab]
            if self.parser.accepts(state):
                cached[self.eos_ids] = True
            self._mask_cache[state] = cached
        return cached.copy()

    def _transitions(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """For each of the 256 bytes: the next parser state (DEAD if none) and whether it is escaped."""
        table = self._tables.get(state)
        if table is None:
            following = np.array(self.parser.step_all(state), dtype=np.int64)  # [256]
            escaped = np.array([s != DEAD and self.parser.escaped(s) for s in following.tolist()])  # [256]
            table = self._tables[state] = (following, escaped)
        return table

    def _walk(self, nodes: np.ndarray, states: np.ndarray, escapes: list | None = None) -> np.ndarray:
        """Trie nodes below `nodes` (each reached in parser state `states`) whose prefix keeps the parser
        alive, walked level by level: all edges out of the frontier at once, one table lookup per state.

        With `escapes`, nodes whose state is escaped are appended there (an array per level) instead."""
        # BEGIN EXERCISE 8.2: walk the vocabulary trie with the parser
        trie, allowed = self.trie, []
        while nodes.size:
            counts = trie.child_start[nodes + 1] - trie.child_start[nodes]  # [F] children per frontier node
            before = np.repeat(np.cumsum(counts) - counts, counts)  # [E] index of each edge's first sibling
            edges = np.repeat(trie.child_start[nodes], counts) + np.arange(before.size) - before  # [E]
            parents = np.repeat(states, counts)  # [E] parser state before each edge
            following = np.full(edges.size, DEAD, dtype=np.int64)  # [E]
            escaped = np.zeros(edges.size, dtype=bool)  # [E]
            for state, group in _groups(parents):
                table, table_escaped = self._transitions(state)
                following[group] = table[trie.child_byte[edges[group]]]
                escaped[group] = table_escaped[trie.child_byte[edges[group]]]
            live = following != DEAD
            if escapes is not None:
                escapes.append(trie.child_node[edges[live & escaped]])
                live &= ~escaped
            nodes, states = trie.child_node[edges[live]], following[live]
            allowed.append(nodes)
        return np.concatenate(allowed) if allowed else np.zeros(0, dtype=np.int64)
        # END EXERCISE 8.2


def _groups(states: np.ndarray):
    """(state, positions of `states` holding it) for each distinct state: the edges of one trie level grouped
    by the parser state they leave from. Often a level has one state (the inside of a string): no sorting."""
    if states.size and states.min() == states.max():
        return [(int(states[0]), slice(None))]
    order = np.argsort(states, kind="stable")
    distinct, first = np.unique(states[order], return_index=True)
    return zip(distinct.tolist(), np.split(order, first[1:]))


class Constraint:
    """One sequence's position in a grammar: the object the sampler asks for a mask at every step.

    `allowed_mask()` -> bool [vocab]; `advance(token_id)` after sampling; `is_complete()` when the
    grammar may end here (EOS is then allowed). Several Constraints can share one TokenMasker's caches.
    """

    def __init__(self, masker: TokenMasker):
        self.masker = masker
        self.state = masker.parser.initial
        self.finished = False  # an EOS was accepted

    def allowed_mask(self) -> np.ndarray:
        if self.finished:
            return np.zeros(self.masker.vocab_size, dtype=bool)
        return self.masker.mask(self.state)

    def advance(self, token_id: int) -> None:
        """Consume one sampled token; a token the mask forbids raises TinyInferError."""
        token_id = int(token_id)
        if self.finished:
            raise TinyInferError("the constrained output already ended with EOS; stop generating")
        if token_id in self.masker.eos_ids:
            if not self.is_complete():
                raise TinyInferError(f"EOS token {token_id} before the grammar is complete")
            self.finished = True
            return
        node = int(self.masker.trie.node_of_token[token_id]) if 0 <= token_id < self.masker.vocab_size else 0
        nxt = DEAD if node == 0 else self.masker.parser.step_bytes(self.state, self.masker.trie.prefix(node))
        if nxt == DEAD:
            raise TinyInferError(f"token {token_id} is not allowed by the grammar here; sample from allowed_mask()")
        self.state = nxt

    def is_complete(self) -> bool:
        return self.finished or self.masker.parser.accepts(self.state)

    def is_dead_end(self) -> bool:
        """True when nothing but EOS (or nothing at all) may follow: generation should stop."""
        mask = self.allowed_mask()
        mask[self.masker.eos_ids] = False
        return not mask.any()
