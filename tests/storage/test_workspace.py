"""Workspace: init/open, datasets by alias and DID, snapshots (atomic), delete, gc."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fbs.errors import InvalidDid
from fbs.model import (
    AddData,
    AddPushSource,
    DatasetKind,
    DatasetSnapshot,
    MergeStrategyAppend,
    ReadStepNdJson,
    Seed,
    SetInfo,
    SetTransform,
    TransformInput,
    TransformSql,
)
from fbs.multiformats import Multihash
from storage.errors import (
    ChainRuleViolation,
    DatasetExists,
    DatasetNotFound,
    InvalidAlias,
    WorkspaceError,
    WorkspaceNotFound,
)
from storage.verify import verify_integrity
from storage.workspace import WORKSPACE_DIR, Workspace
from tests.storage.test_dataset import SCHEMA, write_parquet


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.init(tmp_path)


def test_init_and_open_upwards(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path)
    assert ws.root == tmp_path / WORKSPACE_DIR
    with pytest.raises(WorkspaceError):
        Workspace.init(tmp_path)
    assert Workspace.init(tmp_path, exist_ok=True).root == ws.root
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert Workspace.open(deep).root == ws.root.resolve()
    old = os.getcwd()
    try:
        os.chdir(deep)
        assert Workspace.open().root == ws.root.resolve()
    finally:
        os.chdir(old)


def test_open_without_workspace(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceNotFound):
        Workspace.open(tmp_path)
    (tmp_path / WORKSPACE_DIR).mkdir()
    with pytest.raises(WorkspaceError):
        Workspace.open(tmp_path)  # not a workspace of ours (no version file)


def test_create_resolve_list(ws: Workspace) -> None:
    ds = ws.create_dataset("Com.Example.Cities")
    entry = ws.resolve("com.example.cities")  # case-insensitive
    assert entry.alias == "Com.Example.Cities"
    state = ds.state()
    assert state is not None and state.kind == DatasetKind.Root
    assert entry.id == state.dataset_id
    assert entry.path.name == state.dataset_id.as_multibase()
    assert ws.resolve(entry.id.to_did_odf()).path == entry.path
    assert ws.resolve(entry.id.to_did_key()).path == entry.path
    assert ws.resolve(entry.id).alias == "Com.Example.Cities"
    ws.create_dataset("alice/other", DatasetKind.Derivative)
    assert [e.alias for e in ws.list()] == ["alice/other", "Com.Example.Cities"]
    # Identity key stored and matching.
    assert ws.keys.load(entry.id).dataset_id == entry.id
    seed = next(b for _, _, b in ds.iter_blocks() if b.sequence_number == 0).event
    assert isinstance(seed, Seed) and seed.dataset_id == entry.id
    with pytest.raises(DatasetExists):
        ws.create_dataset("com.example.CITIES")


@pytest.mark.parametrize(
    "ref", ["../x", "a/b/c", "", "x y", "did:odf:../../etc", "did:odf:fed01zz", "-a", "a..b"]
)
def test_hostile_refs(ws: Workspace, ref: str) -> None:
    ws.create_dataset("a")
    with pytest.raises((InvalidAlias, InvalidDid)):
        ws.resolve(ref)
    with pytest.raises((InvalidAlias, InvalidDid)):
        ws.delete(ref)
    if not ref.startswith("did:"):
        with pytest.raises(InvalidAlias):
            ws.create_dataset(ref)
    assert [e.alias for e in ws.list()] == ["a"]


def test_unknown_refs(ws: Workspace) -> None:
    with pytest.raises(DatasetNotFound):
        ws.resolve("nope")
    from fbs.did import DatasetId

    with pytest.raises(DatasetNotFound):
        ws.resolve(DatasetId.new_seeded(b"x").to_did_odf())


def test_index_is_rebuilt(ws: Workspace) -> None:
    ws.create_dataset("a")
    (ws.root / "aliases.json").write_text("{broken")
    assert ws.resolve("a").alias == "a"
    (ws.root / "aliases.json").unlink()
    assert ws.resolve("A").alias == "a"
    # A stale index entry pointing at the wrong dataset is not trusted.
    b = ws.create_dataset("b")
    wrong = {"version": 1, "aliases": {"a": ["a", ws.resolve("b").id.as_multibase()]}}
    (ws.root / "aliases.json").write_text(json.dumps(wrong))
    assert ws.resolve("a").id != ws.resolve("b").id
    assert b.state() is not None


def test_snapshot_normalizes_and_resolves_inputs(ws: Workspace) -> None:
    src = ws.create_dataset("acme/cities")
    src_id = src.state().dataset_id  # type: ignore[union-attr]
    snap = DatasetSnapshot(
        name="derived",
        kind=DatasetKind.Derivative,
        metadata=(
            SetTransform(
                inputs=(TransformInput(dataset_ref="acme/cities"),),
                transform=TransformSql(engine="datafusion", query="select * from cities"),
            ),
            SetInfo(description="d"),
        ),
    )
    ds = ws.add_snapshot(snap)
    state = ds.state()
    assert state is not None and state.transform is not None
    (inp,) = state.transform.inputs
    assert inp.dataset_ref == src_id.to_did_odf()
    assert inp.alias == "acme/cities"  # kamu: the reference as written
    t = state.transform.transform
    assert t.query is None and t.queries is not None
    assert [q.query for q in t.queries] == ["select * from cities"]
    assert state.sequence_number == 2
    # Same system time for all snapshot blocks.
    times = {b.system_time for _, _, b in ds.iter_blocks()}
    assert len(times) == 1


def test_snapshot_preprocess_normalized(ws: Workspace) -> None:
    snap = DatasetSnapshot(
        name="root",
        kind=DatasetKind.Root,
        metadata=(
            AddPushSource(
                source_name="default",
                read=ReadStepNdJson(),
                preprocess=TransformSql(engine="datafusion", query="select 1"),
                merge=MergeStrategyAppend(),
            ),
        ),
    )
    state = ws.add_snapshot(snap).state()
    assert state is not None
    pre = state.push_sources[0].preprocess
    assert pre is not None and pre.query is None and pre.queries is not None


def test_snapshot_unknown_input(ws: Workspace) -> None:
    snap = DatasetSnapshot(
        name="derived",
        kind=DatasetKind.Derivative,
        metadata=(
            SetTransform(
                inputs=(TransformInput(dataset_ref="missing"),),
                transform=TransformSql(engine="e", query="q"),
            ),
        ),
    )
    with pytest.raises(DatasetNotFound, match="missing"):
        ws.add_snapshot(snap)
    assert ws.list() == []


def test_snapshot_with_invalid_third_event_leaves_nothing(ws: Workspace) -> None:
    snap = DatasetSnapshot(
        name="broken",
        kind=DatasetKind.Root,
        metadata=(SetInfo(description="1"), SCHEMA, SCHEMA),  # identical schema: rule 12
    )
    with pytest.raises(ChainRuleViolation, match="rule 12"):
        ws.add_snapshot(snap)
    assert ws.list() == []
    assert os.listdir(ws.root / "datasets") == []
    assert os.listdir(ws.root / "staging") == []
    assert ws.keys.list() == []
    assert list((ws.root / "cache" / "chain-state").iterdir()) == []
    with pytest.raises(DatasetNotFound):
        ws.resolve("broken")
    assert ws.create_dataset("broken").state() is not None  # the alias is free


def test_delete_retires_key(ws: Workspace) -> None:
    ws.create_dataset("a")
    entry = ws.resolve("a")
    assert ws.delete("A").id == entry.id
    assert not entry.path.exists()
    with pytest.raises(DatasetNotFound):
        ws.resolve("a")
    assert ws.keys.list() == []
    assert [k.dataset_id for k in ws.keys.load_retired(entry.id)] == [entry.id]
    with pytest.raises(DatasetNotFound):
        ws.delete("a")
    assert os.listdir(ws.root / "trash") == []


def test_gc(ws: Workspace, tmp_path: Path) -> None:
    ds = ws.create_dataset("a")
    ds.commit(SCHEMA, expected_head=ds.head())
    slice_, path = write_parquet(tmp_path / "p", 0, 3)
    ds.commit(AddData(new_data=slice_), expected_head=ds.head(), data_file=path)
    junk = b"unreferenced"
    ds.layout.data.put(Multihash.sha3_256(junk), junk)
    ds.layout.blocks.put(Multihash.sha3_256(junk), junk)
    far_future = 10**12
    dry = ws.gc(dry_run=True, now=far_future)
    assert dry.data["a"].deleted == (Multihash.sha3_256(junk),)
    assert ds.layout.data.has(Multihash.sha3_256(junk))
    report = ws.gc(now=far_future)
    assert report.data["a"].deleted == (Multihash.sha3_256(junk),)
    assert report.blocks["a"].deleted == (Multihash.sha3_256(junk),)
    assert report.bytes_freed == 2 * len(junk)
    assert ds.layout.data.has(slice_.physical_hash)
    assert verify_integrity(ds).ok
    # Inside the grace period nothing goes.
    ds.layout.data.put(Multihash.sha3_256(junk), junk)
    assert ws.gc().data["a"].deleted == ()


def test_gc_skips_unreadable_chain(ws: Workspace) -> None:
    ds = ws.create_dataset("a")
    ds.commit(SetInfo(description="x"), expected_head=ds.head())
    seed_hash = next(h for h, _, b in ds.iter_blocks() if b.sequence_number == 0)
    ds.layout.blocks.delete(seed_hash)
    report = ws.gc(now=10**12)
    assert "a" in report.skipped and "a" not in report.blocks
    assert len(list(ds.layout.blocks.iter_hashes())) == 1
