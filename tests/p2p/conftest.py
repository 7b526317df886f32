"""Fixtures of the p2p tests.

`pair`: a source workspace holding ``prices`` (``pair_slices`` slices with checkpoints,
3 unless a module overrides the ``pair_slices`` fixture) and an empty destination.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.workspace import Workspace
from tests.p2p.sync_helpers import make_dataset, new_workspace


@pytest.fixture
def pair_slices() -> int:
    """How many data slices the source of `pair` holds."""
    return 3


@pytest.fixture
def pair(tmp_path: Path, pair_slices: int) -> tuple[Workspace, Workspace, Path]:
    """``(source, destination, tmp_path)``: ``prices`` in the source, nothing in the other."""
    src = new_workspace(tmp_path / "a")
    dst = new_workspace(tmp_path / "b")
    make_dataset(src, "prices", tmp_path / "files", pair_slices, checkpoints=True)
    return src, dst, tmp_path
