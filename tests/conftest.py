"""Shared test helpers: where the real data lives, and how to skip when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Real files made by others live beside the project, never inside it.
SHARED_DATA = ROOT.parent / "shared" / "data"


def shared_data(relative: str) -> Path:
    """Path to a file under ../shared/data/, or skip the test with the reason when it is absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"real test data {path} is absent (it lives in ../shared/data/ beside the project)")
    return path
