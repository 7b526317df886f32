"""Shared fixtures for storage tests: every contract test runs on disk and in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.object_store import DiskObjectStore, MemoryObjectStore, ObjectStore
from storage.refs import DiskRefStore, MemoryRefStore, RefStore

#: Small cap so limit tests need no large buffers.
TEST_MAX_OBJECT_SIZE = 64 * 1024


def make_object_store(
    kind: str, root: Path, max_object_size: int = TEST_MAX_OBJECT_SIZE
) -> ObjectStore:
    if kind == "disk":
        return DiskObjectStore(root / "objects", max_object_size=max_object_size)
    return MemoryObjectStore(max_object_size=max_object_size)


@pytest.fixture(params=["disk", "memory"])
def object_store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """An empty object store of each implementation (limit `TEST_MAX_OBJECT_SIZE`)."""
    return make_object_store(request.param, tmp_path)


@pytest.fixture(params=["disk", "memory"])
def ref_store(request: pytest.FixtureRequest, tmp_path: Path) -> RefStore:
    """An empty ref store of each implementation."""
    if request.param == "disk":
        return DiskRefStore(tmp_path / "refs")
    return MemoryRefStore()
