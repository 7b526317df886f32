"""Every ingest test runs with slice-hash verification on (streamed vs file hash)."""

from __future__ import annotations

import pytest

from node.ingest.writer import VERIFY_HASH_ENV


@pytest.fixture(autouse=True)
def _verify_slice_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VERIFY_HASH_ENV, "1")
