"""From bytes to tokens: the mask of vocabulary entries that keep the output inside the grammar.

A token is allowed when the parser survives every one of its bytes. Checking 50,000 tokens one by one
repeats work: tokens share prefixes (" the", " then", " there"). So the vocabulary's byte strings go
into a *trie*, and one depth-first walk steps the parser once per trie edge, dropping a whole subtree the
moment a byte is refused.

Masks are cached per parser state, and computed in one of two ways:

- Most states allow a handful of tokens (the next letters of a key, `":"`, a digit). A depth-first walk in
  plain Python follows only the live trie nodes; it gives up past `sparse_limit` of them.
- The others (inside a string, almost every token) take the NumPy walk, a depth of the trie at a time
  with one gather from a table of transitions (a row per parser state), on the parser's
  `local_view`: bytes that stay inside the current rules give a context-free part of the mask, cached by
  the view; where a byte finishes the current rule (the view is `escaped`), the walk records the trie node
  and finishes that subtree with the full state. Those escape points are few (tokens containing `"` inside
  a string). The view's walk is kept in the Vocabulary under the view's shared name (`view_key`), so every
  grammar whose strings use the same rules finds it done: a string body costs one walk per vocabulary.

Where first bytes lead into a loop (a number's digits, a string's plain characters), every token spelled with
the loop's bytes is allowed without a walk (the vocabulary knows those tokens per byte set), and the walk goes
on only below the bytes that leave the loop (`_loop_start`).

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


MAX_BYTE_SETS = 64  # pairs of byte sets whose tokens a trie keeps (VocabTrie.spelled_with)


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
        depth = [0] * self.n_nodes
        for node in range(1, self.n_nodes):  # a child is numbered after its parent
            depth[node] = depth[parent[node]] + 1
        self.depth = np.array(depth, dtype=np.int64)  # [n_nodes] bytes from the root
        self.longest = max(depth)  # bytes of the longest token
        by_depth = np.argsort(self.depth, kind="stable")
        self.levels = np.split(by_depth, np.flatnonzero(np.diff(self.depth[by_depth])) + 1)  # depth -> nodes
        # the same in Python lists for the plain-Python walk (indexing a NumPy array per element is slow)
        self.child_start_list, self.child_node_list = self.child_start.tolist(), self.child_node.tolist()
        self.child_byte_bytes = self.child_byte.tobytes()
        self._token_at = [-1] * self.n_nodes  # node -> the token whose bytes end there (-1: none)
        self._more_tokens: dict[int, list[int]] = {}  # node -> further tokens with the same bytes (rare)
        self._children: dict[int, dict[int, int]] = {}  # node -> children_of(node)
        self._spelled: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # (first, loop) -> spelled_with(...)
        for token_id, node in enumerate(self.node_of_token.tolist()):
            if node and self._token_at[node] >= 0:
                self._more_tokens.setdefault(node, []).append(token_id)
            elif node:
                self._token_at[node] = token_id

    def spelled_with(self, first: bytes, loop: bytes) -> tuple[np.ndarray, np.ndarray]:
        """For two sets of bytes: the tokens whose first byte is in `first` and every later byte in `loop`
        (`1`..`9`, then digits), and the nodes one byte outside them (children, by a byte not in `loop`, of
        a node spelled so). Memoized per pair of sets.

        >>> trie = VocabTrie([b"1", b"12", b"0", b"1x", b"x"], excluded=set())
        >>> tokens, outside = trie.spelled_with(b"123456789", b"0123456789")
        >>> tokens.tolist(), [trie.prefix(n) for n in outside]
        ([0, 1], [b'1x'])
        """
        hit = self._spelled.get((first, loop))
        if hit is None:
            member, starts = np.zeros(256, dtype=bool), np.zeros(256, dtype=bool)  # [256], [256]
            member[list(loop)], starts[list(first)] = True, True
            inside = member[self.edge_byte]  # [n_nodes] the node's own byte is in `loop`
            for level in self.levels[1:2]:  # the first byte: in `first` (no level 1 in a vocabulary of no bytes)
                inside[level] = starts[self.edge_byte[level]]
            closed = np.zeros(self.n_nodes, dtype=bool)  # [n_nodes] every byte from the root is in its set
            closed[0] = True
            for level in self.levels[1:]:
                closed[level] = inside[level] & closed[self.parent[level]]
            below = np.flatnonzero(closed[self.parent] & (self.depth >= 2))  # [X'] the root's children aside
            outside = below[~inside[below]]  # [X]
            tokens = np.flatnonzero(closed[self.node_of_token] & (self.node_of_token > 0))
            if len(self._spelled) >= MAX_BYTE_SETS:  # the oldest goes
                self._spelled.pop(next(iter(self._spelled)))
            hit = self._spelled[(first, loop)] = (tokens, outside)
        return hit

    def children_of(self, node: int) -> dict[int, int]:
        """byte -> child node, for a node with many children (memoized)."""
        kids = self._children.get(node)
        if kids is None:
            edges = slice(self.child_start_list[node], self.child_start_list[node + 1])
            kids = self._children[node] = dict(zip(self.child_byte_bytes[edges], self.child_node_list[edges]))
        return kids

    def tokens_at(self, nodes: list[int]) -> list[int]:
        """The token ids whose bytes end at these nodes."""
        tokens = [t for n in nodes if (t := self._token_at[n]) >= 0]
        return tokens + [t for n in nodes for t in self._more_tokens.get(n, ())] if self._more_tokens else tokens

    def prefix(self, node: int) -> bytes:
        """The byte string spelled from the root to `node`."""
        out = []
        while node > 0:
            out.append(int(self.edge_byte[node]))
            node = int(self.parent[node])
        return bytes(reversed(out))


MAX_VIEW_WALKS = 256  # views' walks a Vocabulary keeps (each a bool per token: 50 KB for GPT-2)


class Vocabulary:
    """What a mask needs to know about a tokenizer: each token's bytes (as a trie), EOS and special ids."""

    def __init__(self, token_bytes: list[bytes], eos_ids, special_ids=()):
        self.size = len(token_bytes)
        self.eos_ids = sorted({int(i) for i in eos_ids})
        bad = [i for i in self.eos_ids if not 0 <= i < self.size]
        if bad:
            raise TinyInferError(f"EOS id(s) {bad} outside the vocabulary of {self.size} tokens")
        self.trie = VocabTrie(token_bytes, set(self.eos_ids) | {int(i) for i in special_ids})
        self.view_walks: dict[frozenset, tuple] = {}  # local views' walks, by shared name (TokenMasker._local_walk)

    def remember_walk(self, key: frozenset, walk: tuple) -> None:
        """Keep a view's walk for every grammar on this vocabulary (the oldest goes past MAX_VIEW_WALKS)."""
        if len(self.view_walks) >= MAX_VIEW_WALKS:
            self.view_walks.pop(next(iter(self.view_walks)))
        self.view_walks[key] = walk

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


SPARSE_LIMIT = 2048  # live trie nodes a plain-Python walk follows before the NumPy walk takes over
MANY_BYTES = 64  # a state taking more first bytes than this (a string body) goes straight to the NumPy walk
LOOP_BYTES = 8  # a state looping on this many bytes (a number's digits) starts from the tokens of those bytes
FEW_CHILDREN = 16  # up to this many children a trie node steps the parser per child byte
TABLE_AFTER = 16  # a parser state stepped this often without its table of 256 transitions gets one


class TokenMasker:
    """Masks over one vocabulary for one grammar, with the caches every Constraint on them shares."""

    def __init__(self, net: Network, vocab: Vocabulary):
        self.parser = ByteParser(net)
        self.vocab, self.vocab_size, self.eos_ids, self.trie = vocab, vocab.size, vocab.eos_ids, vocab.trie
        self._local_cache: dict[int, tuple[np.ndarray, list]] = {}  # view -> _local_walk(view)
        self._mask_cache: dict[int, np.ndarray] = {}
        self._table = _Table()  # rows of transitions for the NumPy walk (_step_many)
        self._row_of = np.full(1024, -1, dtype=np.int64)  # parser state -> its row in the table (-1: none yet)
        self._uses = np.zeros(1024, dtype=np.int64)  # parser state -> bytes it was stepped by without a row
        self._byte_tables: dict[int, list[int]] = {}  # state -> _byte_table(state)
        self._visits: dict[int, int] = {}  # state -> trie nodes the plain walk stepped it at, without a table
        self.sparse_limit = SPARSE_LIMIT

    def mask(self, state: int) -> np.ndarray:
        """Allowed tokens after reaching parser `state` (EOS exactly when the grammar may end)."""
        cached = self._mask_cache.get(state)
        if cached is None:
            cached = self._tokens_after(state)
            if self.parser.accepts(state):
                cached[self.eos_ids] = True
            self._mask_cache[state] = cached
        return cached.copy()

    def _tokens_after(self, state: int) -> np.ndarray:
        """bool [vocab]: the tokens allowed after `state` (EOS aside), by the cheapest exact walk for it."""
        first_bytes = len(self.parser.next_bytes(state))
        if first_bytes > MANY_BYTES:  # a string body
            return self._view_mask(state)
        start = self._loop_start(state) if first_bytes >= LOOP_BYTES else None
        if start is not None:  # a number, or its digits
            tokens, (nodes, states) = start
            allowed = self._tokens_below(list(zip(nodes.tolist(), states.tolist())))
            allowed[tokens] = True
            return allowed
        nodes = self._walk_sparse([(0, state)], self.sparse_limit)  # a few first bytes: likely a few tokens
        if nodes is None:
            return self._view_mask(state)
        tokens = np.zeros(self.vocab_size, dtype=bool)  # [vocab]
        tokens[self.trie.tokens_at(nodes)] = True
        return tokens

    def _view_mask(self, state: int) -> np.ndarray:
        """bool [vocab]: the walk of the state's local view (shared), its escapes finished with the state."""
        local, escapes = self._local_walk(self.parser.local_view(state))
        starts = [(n, s) for n, prefix in escapes if (s := self.parser.step_bytes(state, prefix)) != DEAD]
        return local | self._tokens_below(starts)  # [vocab]

    def _self_loop(self, state: int) -> bytes:
        """The bytes that lead from `state` back to itself (a digit inside a number's digits)."""
        return bytes(b for b, nxt in enumerate(self._byte_table(state)) if nxt == state)

    def _loop_start(self, state: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None:
        """A walk from the trie's root in `state` that takes loops whole, or None where no first byte leads
        to a loop: (tokens allowed for sure [K], (nodes [F], their states [F]) to walk on from).

        The first bytes are grouped by the state each leads to. Where several lead to a state that loops on
        LOOP_BYTES bytes or more (the digits after a number's first digit, the characters of a string; a
        lone byte, a key's first letter, is not worth building its state's 256 steps), every token spelled
        with a byte of the group and then loop bytes only ends in it, alive: the vocabulary knows those
        tokens (`spelled_with`), and the walk goes on from the nodes one byte outside them, stepped from the
        loop's state. Other groups start at the root's children. An escaped loop state (a local view's
        string closed) is no shortcut: its tokens are walked like the others."""
        table, groups = self._byte_table(state), {}
        for byte in self.parser.next_bytes(state):
            groups.setdefault(table[byte], bytearray()).append(byte)
        tokens, nodes, states, looped = [], [], [], False
        for nxt, group in groups.items():
            loop = b"" if nxt == DEAD or len(group) < 2 or self.parser.escaped(nxt) else self._self_loop(nxt)
            if len(loop) >= LOOP_BYTES:
                spelled, outside = self.trie.spelled_with(bytes(group), loop)
                following, _ = self._step_many(np.full(outside.size, nxt), self.trie.edge_byte[outside])  # [X]
                live = following != DEAD
                tokens.append(spelled)
                nodes.append(outside[live])
                states.append(following[live])
                looped = True
            elif nxt != DEAD:
                kids = self.trie.children_of(0)
                first = [kids[b] for b in group if b in kids]
                nodes.append(np.array(first, dtype=np.int64))
                states.append(np.full(len(first), nxt, dtype=np.int64))
        if not looped:
            return None
        return np.concatenate(tokens), (np.concatenate(nodes), np.concatenate(states))

    def _tokens_below(self, starts: list[tuple[int, int]]) -> np.ndarray:
        """bool [vocab]: the tokens at or below trie nodes reached alive, each in its parser state."""
        tokens = np.zeros(self.vocab_size, dtype=bool)  # [vocab]
        nodes = self._walk_sparse(starts, self.sparse_limit)
        if nodes is None:
            node_ok = np.zeros(self.trie.n_nodes, dtype=bool)  # [n_nodes]
            node_ok[self._walk(*(np.array(column, dtype=np.int64) for column in zip(*starts)))] = True
            tokens |= node_ok[self.trie.node_of_token]  # [n_nodes] -> [vocab]
            nodes = []
        tokens[self.trie.tokens_at(nodes + [n for n, _ in starts])] = True
        return tokens

    def _walk_sparse(self, starts: list[tuple[int, int]], limit: int, escapes: list | None = None) -> list[int] | None:
        """The trie nodes below `starts` (node, parser state) whose prefix keeps the parser alive, depth first
        in plain Python, or None as soon as more than `limit` are: most states allow a handful of tokens (a
        key's next letters, `":"`, a digit), where a loop over the few live nodes beats NumPy's per-call cost.
        With `escapes`, nodes whose state is escaped are appended there instead (as in `_walk`)."""
        start, byte, child = self.trie.child_start_list, self.trie.child_byte_bytes, self.trie.child_node_list
        allowed, stack = [], list(starts)
        while stack:
            node, at = stack.pop()
            edges = range(start[node], start[node + 1])
            following = self._byte_tables.get(at)
            if len(edges) > FEW_CHILDREN and len(self.parser.next_bytes(at)) < len(edges) // 4:
                kids = self.trie.children_of(node)  # the root, say, in a state taking a few bytes: step those
                steps = [(kids[b], self.parser.step(at, b)) for b in self.parser.next_bytes(at) if b in kids]
            elif following is not None or len(edges) > FEW_CHILDREN:  # the state's table of 256 (built once)
                following = following or self._byte_table(at)
                steps = [(child[edge], following[byte[edge]]) for edge in edges]
            else:  # a step per child (memoized in the parser); a state met at many nodes gets its table
                steps = [(child[edge], self.parser.step(at, byte[edge])) for edge in edges]
                self._visits[at] = visits = self._visits.get(at, 0) + 1
                if visits == TABLE_AFTER:
                    self._byte_table(at)
            for kid, nxt in steps:
                if nxt == DEAD:
                    continue
                if escapes is not None and self.parser.escaped(nxt):
                    escapes.append(kid)
                else:
                    allowed.append(kid)
                    stack.append((kid, nxt))
            if len(allowed) > limit:
                return None
        return allowed

    def _byte_table(self, state: int) -> list[int]:
        """The parser state after each of the 256 bytes (DEAD where none), as a list (memoized)."""
        table = self._byte_tables.get(state)
        if table is None:
            table = self._byte_tables[state] = self.parser.step_all(state)
        return table

    def _local_walk(self, view: int) -> tuple[np.ndarray, list[tuple[int, bytes]]]:
        """For a local view: the tokens it allows without escaping (bool [vocab]) and its escapes (trie node,
        the node's bytes). Cached per view, and in the vocabulary under the view's shared name, so another
        grammar with the same string rule finds the walk done."""
        local = self._local_cache.get(view)
        if local is None:
            key = None if view == DEAD else self.parser.view_key(view, self.trie.longest + 1)
            local = self.vocab.view_walks.get(key) if key is not None else None
            if local is None:
                node_ok = np.zeros(self.trie.n_nodes, dtype=bool)  # [n_nodes]
                escapes: list[np.ndarray] = []
                start = self._loop_start(view) if view != DEAD else None
                if start is not None:  # a string's characters: the tokens spelled with them, then the rest
                    spelled, (nodes, states) = start
                    escaped = np.array([self.parser.escaped(s) for s in states.tolist()], dtype=bool)  # [F]
                    escapes.append(nodes[escaped])
                    nodes, states = nodes[~escaped], states[~escaped]
                    node_ok[nodes] = True
                    found: list[int] = []  # the frontier's subtrees are small (tokens that leave the loop)
                    below = self._walk_sparse(list(zip(nodes.tolist(), states.tolist())), self.sparse_limit, found)
                    if below is None:
                        below = self._walk(nodes, states, escapes)
                    else:
                        escapes.append(np.array(found, dtype=np.int64))
                    node_ok[below] = True
                elif view != DEAD:
                    node_ok[self._walk(np.array([0]), np.array([view]), escapes)] = True
                node_ok[0] = False
                nodes = np.concatenate(escapes).tolist() if escapes else []
                allowed = node_ok[self.trie.node_of_token]  # [n_nodes] -> [vocab]
                if start is not None:
                    allowed[start[0]] = True
                local = (allowed, [(n, self.trie.prefix(n)) for n in nodes])
                if key is not None:
                    self.vocab.remember_walk(key, local)
            self._local_cache[view] = local
        return local

    def _step_many(self, states: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each parser state stepped by its byte: the next states (DEAD where refused) and whether each is
        escaped, gathered from a table with a row of 256 transitions per state (rows built on first use)."""
        if states.size and states.max() >= self._row_of.size:  # the parser interned new states: make room
            size = max(2 * self._row_of.size, int(states.max()) + 1)
            self._row_of = np.concatenate([self._row_of, np.full(size - self._row_of.size, -1, dtype=np.int64)])
            self._uses = np.concatenate([self._uses, np.zeros(size - self._uses.size, dtype=np.int64)])
        rows = self._row_of[states]  # [N]
        if (rows < 0).any():
            np.add.at(self._uses, states[rows < 0], 1)
            new = np.unique(states[rows < 0])
            for state in new[self._uses[new] >= TABLE_AFTER].tolist():  # stepped often enough for all 256 bytes
                following = self._byte_table(state)  # [256]
                self._table.append(following, [s != DEAD and self.parser.escaped(s) for s in following])
                self._row_of[state] = self._table.size - 1
            rows = self._row_of[states]
        following, escaped = self._table.following[rows, data], self._table.escaped[rows, data]  # [N], [N]
        for i in np.flatnonzero(rows < 0).tolist():  # a state met a few times: a step per byte (memoized)
            following[i] = nxt = self.parser.step(int(states[i]), int(data[i]))
            escaped[i] = nxt != DEAD and self.parser.escaped(nxt)
        return following, escaped

    def _walk(self, nodes: np.ndarray, states: np.ndarray, escapes: list | None = None) -> np.ndarray:
        """Trie nodes below `nodes` (each reached in parser state `states`; none below another) whose prefix
        keeps the parser alive, a frontier at a time: the children of all live nodes step their parent's
        state by their own byte in one gather from the transition table (`_step_many`).

        The children come from the trie's rows (`child_start`); when the frontier is most of one depth of
        the trie (inside a string), sweeping the whole next depth and asking each node's parent is cheaper.
        With `escapes`, nodes whose state is escaped are appended there (an array per step) instead."""
        # BEGIN EXERCISE 8.2: walk the vocabulary trie with the parser
        trie, allowed, reached = self.trie, [], None
        depths = trie.depth[nodes]
        depth = int(depths[0]) if nodes.size and (depths == depths[0]).all() else None  # one depth: may sweep
        while nodes.size:
            if depth is not None and depth + 1 < len(trie.levels) and nodes.size * 4 > trie.levels[depth].size:
                if reached is None:
                    reached = np.full(trie.n_nodes, DEAD, dtype=np.int64)  # [n_nodes] state at live nodes
                reached[nodes] = states
                children = trie.levels[depth + 1]  # [C] every node one byte deeper
                before = reached[trie.parent[children]]  # [C] its parent's state (DEAD: not alive)
                children, before = children[before != DEAD], before[before != DEAD]
            else:
                counts = trie.child_start[nodes + 1] - trie.child_start[nodes]  # [F] children per node
                first = np.repeat(np.cumsum(counts) - counts, counts)  # [C] index of each one's first sibling
                edges = np.repeat(trie.child_start[nodes], counts) + np.arange(first.size) - first  # [C]
                children, before = trie.child_node[edges], np.repeat(states, counts)  # [C], [C]
            following, escaped = self._step_many(before, trie.edge_byte[children])  # [C], [C]
            live = following != DEAD
            if escapes is not None:
                escapes.append(children[live & escaped])
                live &= ~escaped
            nodes, states = children[live], following[live]
            allowed.append(nodes)
            depth = None if depth is None else depth + 1
        return np.concatenate(allowed) if allowed else np.zeros(0, dtype=np.int64)
        # END EXERCISE 8.2


class _Table:
    """A growing table of transitions, a row per parser state: next state and escaped flag per byte."""

    def __init__(self):
        self.size = 0
        self.following = np.zeros((16, 256), dtype=np.int64)  # [capacity, 256]
        self.escaped = np.zeros((16, 256), dtype=bool)  # [capacity, 256]

    def append(self, following: list[int], escaped: list[bool]) -> None:
        if self.size == len(self.following):  # full: double the capacity
            self.following = np.concatenate([self.following, np.zeros_like(self.following)])
            self.escaped = np.concatenate([self.escaped, np.zeros_like(self.escaped)])
        self.following[self.size], self.escaped[self.size] = following, escaped
        self.size += 1


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
