"""Parameter trees: a model's parameters are nested dicts and lists of arrays (tinyinfer/weights.py gives the
layout); these walk them.

    >>> tree = {"embed": 1, "layers": [{"qkv": 2}, {"qkv": 3}]}
    >>> list(leaves(tree)), map_arrays(tree, lambda a: a * 10)
    ([1, 2, 3], {'embed': 10, 'layers': [{'qkv': 20}, {'qkv': 30}]})
"""

from __future__ import annotations


def leaves(tree):
    """Every array of a parameter tree (nested dicts and lists), in order."""
    if isinstance(tree, dict):
        for value in tree.values():
            yield from leaves(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from leaves(value)
    else:
        yield tree


def map_arrays(tree, fn):
    """The same parameter tree (nested dicts and lists) with fn applied to every array."""
    if isinstance(tree, dict):
        return {key: map_arrays(value, fn) for key, value in tree.items()}
    if isinstance(tree, list):
        return [map_arrays(value, fn) for value in tree]
    return fn(tree)
