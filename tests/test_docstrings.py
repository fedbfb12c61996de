"""Every worked example in a docstring (`>>>` lines) runs and prints what it shows: the examples a reader
learns from cannot drift away from the code."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import tinyinfer

MODULES = sorted(info.name for info in pkgutil.walk_packages(tinyinfer.__path__, "tinyinfer.")
                 if not info.name.endswith("__main__"))  # importing __main__ runs the command line


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run_as_written(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, report=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples in {name} fail: " \
                               f"python -m pytest --doctest-modules {module.__file__}"


def test_the_examples_are_found():
    """Guard against a walk that finds nothing: the package has many worked examples."""
    attempted = sum(doctest.testmod(importlib.import_module(name), report=False).attempted for name in MODULES)
    assert attempted >= 100
