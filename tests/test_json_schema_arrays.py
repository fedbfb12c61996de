"""Arrays with `contains` under maxItems, minItems and prefixItems (the item walk, json_schema_walk.py);
and arrays whose item schema admits nothing (only shorter arrays remain)."""

from __future__ import annotations

from tests.test_json_schema_logic import holds


def test_contains_with_min_items_and_prefix_items():
    holds({"type": "array", "contains": {"const": 1}, "minItems": 3, "items": {"type": "integer"}},
          [[1, 2, 3], [2, 2, 1], [1, 1, 1, 1]], [[1, 2], [2, 2, 2], [1, "a", 2]])
    holds({"type": "array", "prefixItems": [{"type": "string"}], "contains": {"type": "integer"}, "maxItems": 3},
          [["a", 1], ["a", "b", 2]], [["a"], [1], ["a", "b", "c"], ["a", 1, 2, 3]])


def test_items_that_admit_nothing_leave_shorter_arrays():
    holds({"type": "array", "items": {"type": "string", "not": {"type": "string"}}}, [[]], [["a"], [1]])
    holds({"type": "array", "prefixItems": [{"type": "integer"}, False]}, [[], [1]], [[1, 2], ["a"]])
