"""Verified reads (`storage.verified`): slices and checkpoints are checked against the
metadata before anyone reads them, and remembered so a second read costs a stat."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import storage.verified as verified
from fbs.multiformats import Multihash
from node.api import open_workspace
from node.ingest.pipeline import read_changelog, slice_paths
from storage.dataset import Dataset
from storage.errors import CorruptObject, DamagedObject, ObjectNotFound
from storage.hashing import physical_hash_file
from storage.reads import iter_slice_sources, verified_slice_paths
from storage.verified import verified_checkpoint_path, verified_object_path
from storage.workspace import Workspace
from tests.node.conftest import RootWriter


@pytest.fixture(autouse=True)
def _cold() -> None:
    verified.forget_all()


@pytest.fixture
def root(tmp_path: Path) -> RootWriter:
    from fbs.model import DatasetKind, DatasetSnapshot

    ws = Workspace.init(tmp_path / "project")
    ws.add_snapshot(DatasetSnapshot(name="cities", kind=DatasetKind.Root, metadata=()))
    slices = tmp_path / "slices"
    slices.mkdir()
    w = RootWriter(ws, "cities", slices)
    w.append([("a", 1), ("b", 2)])
    w.append([("c", 3)])
    w.append([("d", 4), ("e", 5)])
    return w


def _count_hashing(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = verified.VerifiedObjects._hash

    def spy(self: verified.VerifiedObjects, path: Path, *args: object, **kw: object) -> object:
        calls.append(path)
        return real(self, path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(verified.VerifiedObjects, "_hash", spy)
    return calls


def test_paths_are_verified_once_then_remembered(
    root: RootWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_hashing(monkeypatch)
    paths = verified_slice_paths(root.ds)
    assert len(paths) == 3 and all(p.is_file() for p in paths)
    assert len(calls) == 3
    assert verified_slice_paths(root.ds) == paths
    assert slice_paths(root.ds) == paths
    assert len(calls) == 3  # remembered in this process


def test_persistent_record_survives_the_process(
    root: RootWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    verified_slice_paths(root.ds)
    ds = root.ds
    assert ds.state_cache is not None
    record = verified.record_path_for(ds.state_cache)
    assert record is not None and record.is_file()
    body = json.loads(record.read_text())
    assert body["version"] == 1 and len(body["objects"]) == 3
    verified.forget_all()  # a new process: only the record remains
    calls = _count_hashing(monkeypatch)
    verified_slice_paths(root.ds)
    assert calls == []


def test_garbled_record_is_ignored(root: RootWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    verified_slice_paths(root.ds)
    record = verified.record_path_for(root.ds.state_cache)
    assert record is not None
    record.write_text("{not json")
    verified.forget_all()
    calls = _count_hashing(monkeypatch)
    verified_slice_paths(root.ds)
    assert len(calls) == 3


def test_first_full_read_hashes_the_bytes_it_returns(root: RootWriter) -> None:
    first = list(iter_slice_sources(root.ds))
    assert all(s.data is not None and s.data == s.path.read_bytes() for s in first)
    again = list(iter_slice_sources(root.ds))
    assert all(s.data is None for s in again)
    table = read_changelog(root.ds)
    assert table is not None and table.num_rows == 5


def _first_slice(ds: Dataset) -> Path:
    return verified_slice_paths(ds)[0]


@pytest.mark.parametrize("warm", [False, True])
def test_bit_flip_is_a_damaged_object_naming_verify(root: RootWriter, warm: bool) -> None:
    path = (
        _first_slice(root.ds)
        if warm
        else root.ds.layout.data.root / sorted(os.listdir(root.ds.layout.data.root))[0]
    )
    if not warm:
        verified.forget_all()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedObject) as e:
        open_workspace(root.ws.root.parent).dataset("cities").to_arrow()
    assert isinstance(e.value, CorruptObject)
    assert path.name in str(e.value) and "odf verify" in str(e.value)
    assert e.value.kind == "data"


def test_bit_flip_with_mtime_restored_is_caught(root: RootWriter) -> None:
    path = _first_slice(root.ds)
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # ctime still moves
    with pytest.raises(DamagedObject, match="hash to"):
        verified_slice_paths(root.ds)


def test_truncated_and_appended_slices(root: RootWriter) -> None:
    path = _first_slice(root.ds)
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with pytest.raises(DamagedObject, match="bytes, the metadata says"):
        verified_slice_paths(root.ds)
    path.write_bytes(data + b"junk")
    with pytest.raises(DamagedObject):
        read_changelog(root.ds)
    path.write_bytes(data)  # restored: readable again (re-hashed, new stamp)
    assert read_changelog(root.ds) is not None


def test_swapped_slices_are_caught_even_when_remembered(root: RootWriter) -> None:
    a, b = verified_slice_paths(root.ds)[:2]
    tmp = a.with_name(".swap")
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)
    with pytest.raises(DamagedObject):
        open_workspace(root.ws.root.parent).dataset("cities").tail(5)  # every slice


def test_missing_slice_is_object_not_found(root: RootWriter) -> None:
    _first_slice(root.ds).unlink()
    with pytest.raises(ObjectNotFound, match="odf verify"):
        verified_slice_paths(root.ds)


def test_symlinked_slice_is_damaged(root: RootWriter, tmp_path: Path) -> None:
    path = _first_slice(root.ds)
    copy = tmp_path / "copy"
    copy.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(copy)
    with pytest.raises(DamagedObject, match="not a regular file"):
        verified_slice_paths(root.ds)


def test_object_and_checkpoint_paths(tmp_path: Path) -> None:
    store = tmp_path / "checkpoints"
    store.mkdir()
    src = tmp_path / "cp"
    src.write_bytes(b"checkpoint bytes")
    h, size = physical_hash_file(src)
    (store / h.to_multibase()).write_bytes(src.read_bytes())
    assert verified_checkpoint_path(store, h) == store / h.to_multibase()
    assert verified_object_path(store, "checkpoint", h, size) == store / h.to_multibase()
    with pytest.raises(DamagedObject):
        verified_object_path(store, "checkpoint", h, size + 1)
    (store / h.to_multibase()).write_bytes(b"checkpoint bytez")
    with pytest.raises(DamagedObject, match="checkpoint object"):
        verified_checkpoint_path(store, h)
    other = Multihash(h.code, bytes(32))
    with pytest.raises(ObjectNotFound):
        verified_checkpoint_path(store, other)


def test_http_api_never_serves_a_damaged_object(tmp_path: Path) -> None:
    import asyncio

    import aiohttp

    from tests.p2p.sync_helpers import make_dataset, new_workspace, serve_workspace

    ws = new_workspace(tmp_path / "node")
    make_dataset(ws, "prices", tmp_path / "files", 2, checkpoints=True)
    ds = ws.get("prices")
    data_h = next(iter(ds.layout.data.iter_hashes()))
    cp_h = next(iter(ds.layout.checkpoints.iter_hashes()))
    for store, h in ((ds.layout.data, data_h), (ds.layout.checkpoints, cp_h)):
        path = store.path_of(h)
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0x80
        path.write_bytes(bytes(raw))

    async def main() -> list[int]:
        async with serve_workspace(ws) as url, aiohttp.ClientSession() as s:
            codes = []
            for rel in (f"data/{data_h}", f"checkpoints/{cp_h}"):
                async with s.get(f"{url}/prices/{rel}") as r:
                    codes.append(r.status)
            return codes

    assert asyncio.run(asyncio.wait_for(main(), 60)) == [500, 500]
