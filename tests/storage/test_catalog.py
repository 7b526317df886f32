"""storage.catalog: listing and summaries without the metadata model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fbs.model import AddData, DatasetKind, SetInfo
from storage import catalog
from storage.chain import STATE_FORMAT_VERSION
from storage.dataset import MAX_STATE_CACHE_SIZE
from storage.errors import CorruptChain, DatasetNotFound
from storage.workspace import Workspace
from tests.storage.test_dataset import SCHEMA, write_parquet


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.init(tmp_path)


def test_repeated_constants_match_their_sources() -> None:
    assert catalog.STATE_FORMAT_VERSION == STATE_FORMAT_VERSION
    assert catalog.MAX_STATE_CACHE_SIZE == MAX_STATE_CACHE_SIZE
    assert {k.value: k.name for k in DatasetKind} == catalog.KIND_NAMES


def _with_data(ws: Workspace, tmp_path: Path, alias: str = "a") -> catalog.DatasetEntry:
    ds = ws.create_dataset(alias)
    ds.commit(SCHEMA, expected_head=ds.head())
    slice_, path = write_parquet(tmp_path / f"{alias}.parquet", 0, 3)
    ds.commit(AddData(new_data=slice_), expected_head=ds.head(), data_file=path)
    return ws.resolve(alias)


def test_summary_only_from_a_cache_at_the_head(ws: Workspace, tmp_path: Path) -> None:
    entry = _with_data(ws, tmp_path)
    # The cache is written every STATE_CACHE_EVERY blocks: here it is behind the head.
    assert catalog.cached_summary(ws.root, entry) is None
    ds = catalog.open_dataset(ws.root, entry)
    state = ds.state()
    assert state is not None
    ds.flush_state_cache()
    summary = catalog.cached_summary(ws.root, entry)
    assert summary == catalog.DatasetSummary(
        "Root", state.head, state.num_blocks, state.num_records, state.data_size
    )
    assert (summary.blocks, summary.records) == (3, 3)
    # A new head makes the cache stale again.
    ds.commit(SetInfo(description="x"), expected_head=ds.head())
    assert catalog.cached_summary(ws.root, entry) is None


def test_damaged_cache_or_head_block_is_not_trusted(ws: Workspace, tmp_path: Path) -> None:
    entry = _with_data(ws, tmp_path)
    ds = catalog.open_dataset(ws.root, entry)
    ds.flush_state_cache()
    cache = catalog.state_cache_path(ws.root, entry.id)
    good = cache.read_bytes()
    outer = json.loads(good)
    outer["state"] = outer["state"].replace('"data_size":', '"data_size":1')
    cache.write_text(json.dumps(outer))
    assert catalog.cached_summary(ws.root, entry) is None  # SHA3 no longer matches
    cache.write_bytes(good)
    assert catalog.cached_summary(ws.root, entry) is not None
    head = ds.head()
    assert head is not None
    block = ds.layout.blocks.path_of(head)
    block.chmod(0o644)
    block.write_bytes(block.read_bytes() + b"x")
    assert catalog.cached_summary(ws.root, entry) is None  # the full path reports it


def test_cache_of_another_dataset_is_not_used(ws: Workspace, tmp_path: Path) -> None:
    a = _with_data(ws, tmp_path, "a")
    b = _with_data(ws, tmp_path, "b")
    catalog.open_dataset(ws.root, a).flush_state_cache()
    src = catalog.state_cache_path(ws.root, a.id)
    catalog.state_cache_path(ws.root, b.id).write_bytes(src.read_bytes())
    assert catalog.cached_summary(ws.root, b) is None


def test_entries_resolve_and_open_match_the_workspace(ws: Workspace) -> None:
    ws.create_dataset("b.one")
    ws.create_dataset("alice/A")
    assert catalog.entries(ws.root) == ws.list()
    assert [e.alias for e in catalog.entries(ws.root)] == ["alice/A", "b.one"]
    assert catalog.resolve(ws.root, "ALICE/a") == ws.resolve("alice/A")
    assert catalog.find_root(ws.root.parent) == ws.root.resolve()
    with pytest.raises(DatasetNotFound):
        catalog.resolve(ws.root, "nope")
    entry = ws.resolve("b.one")
    (entry.path / "refs" / "head").unlink()
    with pytest.raises(CorruptChain, match="refs/head is missing"):
        catalog.open_dataset(ws.root, entry)
    assert catalog.open_dataset(ws.root, entry, require_head=False).head() is None
