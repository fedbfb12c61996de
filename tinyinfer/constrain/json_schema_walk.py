"""Lists that must contain a witness for each of a few requirements: "some item matches C" (`contains`
under maxItems, minItems or prefixItems, or several `contains` merged by allOf) or "some property has a
key in K and a value in V" (the complements of patternProperties and propertyNames).

A grammar cannot count or remember freely, but it can remember a *finite* state. The walk writes the
elements one by one and remembers (position, requirements met so far as a bit set, elements written, capped
at what minItems/maxItems or minProperties/maxProperties can tell apart): one grammar rule per state.
An element may claim a set S of requirements only if it meets each of them (its schema is merged with
theirs), so every list the walk ends with is valid, and every valid list has such a walk (claim what each
element meets). States from which the list cannot be closed are dropped, so no rule leads into a dead end.

    two requirements C1, C2 (as the walk sees them), maxItems 2:
      walk-0-0-0 ::= C1&C2 walk-1-3-1 | C1 walk-1-1-1 | C2 walk-1-2-1 | any walk-1-0-1
      walk-1-1-1 ::= "," C2 walk-1-3-2 | "," C1&C2 walk-1-3-2          (met {C1}: needs C2)
      walk-1-3-1 ::= "" | "," any walk-1-3-2 | ...
"""

from __future__ import annotations

import itertools

from tinyinfer.constrain.grammar import EMPTY, Literal, Ref, alt, seq
from tinyinfer.constrain.json_schema_merge import EmptySchemaError, empty_error


class Walk:
    """The rules of one list. A subclass gives `moves(i, met, count)`: (text, next position) pairs for
    one element (`element` builds its text for a claim), and whether the list may end at position i."""

    def __init__(self, compiler, path: str, wanted: list, lo: int, hi: int | None, kind: str):
        self.compiler, self.path, self.wanted, self.lo, self.hi = compiler, path, wanted, lo, hi
        self.cap = hi if hi is not None else max(lo, 1)  # counts above it need not be told apart
        self.all_met = (1 << len(wanted)) - 1
        compiler.counter += 1
        self.prefix = f"{kind}-{compiler.counter}"
        self.values: dict = {}

    def start(self):
        moves, live = self.explore()
        if (0, 0, 0) not in live:
            raise empty_error(self.path, "no value meets the `contains`/property requirements together")
        for state in live:
            options = [EMPTY if target is None else seq(text, Ref(self.rule(target)))
                       for text, target in moves[state] if target is None or target in live]
            self.compiler.rules[self.rule(state)] = alt(*options)
        return Ref(self.rule((0, 0, 0)))

    def rule(self, state) -> str:
        return f"{self.prefix}-{'-'.join(map(str, state))}"

    def explore(self) -> tuple[dict, set]:
        """Every state's moves, and the live states (from which the list can be closed)."""
        moves, todo, seen = {}, [(0, 0, 0)], {(0, 0, 0)}
        while todo:
            state = todo.pop()
            moves[state] = self.state_moves(*state)
            for _, target in moves[state]:
                if target is not None and target not in seen:
                    seen.add(target)
                    todo.append(target)
        live, changed = set(), True
        while changed:
            changed = False
            for state in seen - live:
                if any(t is None or t in live for _, t in moves[state]):
                    live.add(state)
                    changed = True
        return moves, live

    def state_moves(self, i: int, met: int, count: int) -> list:
        """(text, next state or None for the end): one more element, or the end of the list."""
        out = [(EMPTY, None)] if met == self.all_met and count >= self.lo and self.may_end(i) else []
        if self.hi is not None and count >= self.hi:
            return out + [(EMPTY, (j, met, count)) for j in self.skips(i)]
        comma = Literal(",") if count else EMPTY
        out += [(EMPTY, (j, met, count)) for j in self.skips(i)]
        for text, chosen, j in self.elements(i):
            if not any(met >> k & 1 for k in chosen):  # (claiming a met requirement again adds nothing)
                out.append((seq(comma, text), (j, met | sum(1 << k for k in chosen), min(count + 1, self.cap))))
        return out

    def claims(self, candidates):
        """Every subset of the requirement indices `candidates` (an element may meet any of them)."""
        items = list(candidates)
        return itertools.chain.from_iterable(itertools.combinations(items, n) for n in range(len(items) + 1))

    def value(self, schema, chosen: tuple):
        """The expression of a value valid for `schema` and for the requirements `chosen` (None: none is)."""
        parts = [s for s in [schema, *(self.requirement_schema(j) for j in chosen)] if s is not True and s != {}]
        whole = False if False in parts else True if not parts else parts[0] if len(parts) == 1 else {"allOf": parts}
        key = repr(whole)
        if key not in self.values:
            try:
                self.values[key] = None if whole is False else self.compiler.expr(whole, self.path)
            except EmptySchemaError:
                self.values[key] = None
        return self.values[key]

    # ---------------------------------------------------------------- given by the subclass
    def elements(self, i: int) -> list:
        """(text, claimed requirement indices, next position) for each element that can be written at i."""
        raise NotImplementedError

    def skips(self, i: int) -> list:
        """Positions reachable from i without writing (an optional declared property left out)."""
        return []

    def may_end(self, i: int) -> bool:
        return True

    def requirement_schema(self, j: int):
        raise NotImplementedError


class ItemWalk(Walk):
    """Arrays: prefixItems in order, then `rest` items; requirement j is "some item matches wanted[j]"."""

    def __init__(self, compiler, path, prefix: list, rest, wanted: list, lo: int, hi):
        super().__init__(compiler, path, wanted, lo, hi, "items")
        self.prefix_items, self.rest = prefix, rest

    def elements(self, i: int) -> list:
        schema = self.prefix_items[i] if i < len(self.prefix_items) else self.rest
        following = min(i + 1, len(self.prefix_items))
        out = []
        for chosen in self.claims(range(len(self.wanted))):
            expr = self.value(schema, chosen)
            if expr is not None:
                out.append((expr, chosen, following))
        return out

    def requirement_schema(self, j: int):
        return self.wanted[j]
