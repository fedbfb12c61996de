"""Shared test helpers: where the real data lives, and how to skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tinyinfer import backend

# The `exercise` marker's plumbing: `pytest --exercise 3.1`, and the outcome report for `course check`.
from tinyinfer.course.pytest_plugin import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
# Real files made by others live beside the project, never inside it. A course workspace lives elsewhere,
# so `course check` names the project's data folder in TINYINFER_SHARED_DATA.
SHARED_DATA = Path(os.environ.get("TINYINFER_SHARED_DATA") or ROOT.parent / "shared" / "data")
# CI sets it: there, absent data fails the tests that need it instead of skipping them (a skip would pass CI
# with the engine, paged-cache and prefix-cache tests never run).
REQUIRE_SHARED_DATA = os.environ.get("TINYINFER_REQUIRE_SHARED_DATA", "") not in ("", "0")


def shared_data(relative: str) -> Path:
    """Path to a file under ../shared/data/; when it is absent, skip the test with the reason, or fail it where
    TINYINFER_REQUIRE_SHARED_DATA=1 (CI)."""
    path = SHARED_DATA / relative
    if not path.exists():
        reason = f"real test data {path} is absent (it lives in ../shared/data/ beside the project)"
        if REQUIRE_SHARED_DATA:
            pytest.fail(f"{reason}; TINYINFER_REQUIRE_SHARED_DATA is set, so this is a failure", pytrace=False)
        pytest.skip(reason)
    return path


# The GPU tests (marked `gpu`) run on CuPy where a GPU is present, and on the strict CuPy stand-in everywhere else
# (tests/strict_cupy.py): the same tests, selected by `device="cuda"` as a user selects CUDA.
REAL_GPU = backend.cuda_available()


@pytest.fixture(autouse=True)
def _cuda_for_gpu_tests(request):
    if request.node.get_closest_marker("gpu") is None or REAL_GPU:
        yield
        return
    import strict_cupy  # noqa: PLC0415 - only the GPU tests need it

    strict_cupy.transfers.reset()
    with backend.cuda_module(strict_cupy):
        yield


@pytest.fixture(autouse=True, scope="session")
def _no_api_key_from_the_shell():
    """A server started by a test asks for a key only where the test gives one: TINYINFER_API_KEY set in the
    shell running the tests (and inherited by the servers they start as processes) is taken away."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TINYINFER_API_KEY", raising=False)
        yield
