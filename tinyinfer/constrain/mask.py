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
    """The vocabulary's byte strings as a trie: node 0 is the empty prefix."""

    def __init__(self, vocab: list[bytes], excluded: set[int]):
        self.children: list[dict[int, int]] = [{}]
        self.depth: list[int] = [0]
        self.parent: list[int] = [-1]
        self.node_of_token = np.zeros(len(vocab), dtype=np.int64)  # token -> trie node (0: never allowed)
        for token_id, data in enumerate(vocab):
            if token_id in excluded or not data:  # special and empty tokens never match grammar text
                continue
            node = 0
            for byte in data:
                child = self.children[node].get(byte)
                if child is None:
                    child = len(self.children)
                    self.children[node][byte] = child
                    self.children.append({})
                    self.depth.append(self.depth[node] + 1)
                    self.parent.append(node)
                node = child
            self.node_of_token[token_id] = node
        self.edge_byte = np.zeros(len(self.children), dtype=np.uint8)
        for node, kids in enumerate(self.children):
            for byte, child in kids.items():
                self.edge_byte[child] = byte

    def prefix(self, node: int) -> bytes:
        """The byte string spelled from the root to `node`."""
        out = []
        while node > 0:
            out.append(int(self.edge_byte[node]))
            node = self.parent[node]
        return bytes(reversed(out))

    @property
    def n_nodes(self) -> int:
        return len(self.children)


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
    def from_tokenizer(cls, tokenizer, eos_ids=None) -> Vocabulary:
        """From a tinyinfer Tokenizer (`token_bytes`, `special_ids`, `eos_token_id`)."""
        if eos_ids is None:
            eos_ids = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
        token_bytes = [tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)]
        return cls(token_bytes, eos_ids, getattr(tokenizer, "special_ids", ()))


class TokenMasker:
    """Masks over one vocabulary for one grammar, with the caches every Constraint on them shares."""

    def __init__(self, net: Network, vocab: Vocabulary):
        self.parser = ByteParser(net)
        self.vocab_size, self.eos_ids, self.trie = vocab.size, vocab.eos_ids, vocab.trie
        self._local_cache: dict[int, tuple[np.ndarray, list[int]]] = {}  # view -> (allowed nodes, escapes)
        self._mask_cache: dict[int, np.ndarray] = {}

    def mask(self, state: int) -> np.ndarray:
        """Allowed tokens after reaching parser `state` (EOS exactly when the grammar may end)."""
        cached = self._mask_cache.get(state)
        if cached is None:
            node_ok = np.zeros(self.trie.n_nodes, dtype=bool)  # [n_nodes]
            view = self.parser.local_view(state)
            if view != DEAD:
                local = self._local_cache.get(view)
                if local is None:
                    local = self._local_cache[view] = self._walk_local(view)
                allowed_nodes, escapes = local
                node_ok[allowed_nodes] = True
                for node in escapes:  # a rule ended inside the token: finish it with the full state
                    real = self.parser.step_bytes(state, self.trie.prefix(node))
                    if real != DEAD:
                        node_ok[node] = True
                        node_ok[self._walk(real, node)] = True
            node_ok[0] = False
            cached = node_ok[self.trie.node_of_token]  # [n_nodes] -> [vocab]
            if self.parser.accepts(state):
                cached[self.eos_ids] = True
            self._mask_cache[state] = cached
        return cached.copy()

    def _walk(self, state: int, start: int, escapes: list[int] | None = None) -> list[int]:
        """Trie nodes below `start` whose prefix keeps the parser alive from `state`.

        With `escapes`, a node whose state is escaped is recorded there instead of walked further."""
        # BEGIN EXERCISE 8.2: walk the vocabulary trie with the parser
        parser, children = self.parser, self.trie.children
        allowed: list[int] = []
        stack = [(start, state)]
        while stack:
            node, st = stack.pop()
            kids, next_bytes = children[node], parser.next_bytes(st)
            if len(next_bytes) < len(kids):  # iterate over the smaller side
                pairs = [(b, kids[b]) for b in next_bytes if b in kids]
            else:
                pairs = [(b, child) for b, child in kids.items() if b in next_bytes]
            for byte, child in pairs:
                nxt = parser.step(st, byte)
                if nxt == DEAD:
                    continue
                if escapes is not None and parser.escaped(nxt):
                    escapes.append(child)
                    continue
                allowed.append(child)
                stack.append((child, nxt))
        return allowed
        # END EXERCISE 8.2

    def _walk_local(self, view: int) -> tuple[np.ndarray, list[int]]:
        escapes: list[int] = []
        allowed = self._walk(view, 0, escapes)
        return np.array(allowed, dtype=np.int64), escapes


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

    def accepts_bytes(self, data: bytes) -> bool:
        """Would these bytes keep the output a valid prefix? (No state change.)"""
        return self.masker.parser.step_bytes(self.state, data) != DEAD

    def is_complete(self) -> bool:
        return self.finished or self.masker.parser.accepts(self.state)

    def is_dead_end(self) -> bool:
        """True when nothing but EOS (or nothing at all) may follow: generation should stop."""
        mask = self.allowed_mask()
        mask[self.masker.eos_ids] = False
        return not mask.any()
