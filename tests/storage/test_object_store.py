"""Object store contract tests (disk and memory) plus disk-specific and hostile-input tests."""

from __future__ import annotations

import io
import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.errors import InvalidHash
from fbs.multiformats import SHA2_256, Multihash
from storage.errors import (
    CorruptObject,
    HashMismatch,
    ObjectNotFound,
    ObjectTooLarge,
    StorageError,
    UnsafePath,
)
from storage.fsutil import pending_name
from storage.object_store import (
    COPY_CHUNK_SIZE,
    DiskObjectStore,
    MemoryObjectStore,
    ObjectStore,
    parse_object_name,
)
from tests.storage.conftest import TEST_MAX_OBJECT_SIZE

CANONICAL_NAME = re.compile(r"f1620[0-9a-f]{64}")


def _h(data: bytes) -> Multihash:
    return Multihash.sha3_256(data)


def _disk_files(store: ObjectStore) -> list[str]:
    assert isinstance(store, DiskObjectStore)
    return sorted(os.listdir(store.root)) if store.root.exists() else []


# -- contract (both implementations) ---------------------------------------------------


def test_protocol_conformance(object_store: ObjectStore) -> None:
    assert isinstance(object_store, ObjectStore)
    assert object_store.max_object_size == TEST_MAX_OBJECT_SIZE


def test_put_get_roundtrip(object_store: ObjectStore) -> None:
    data = b"hello odf"
    h = _h(data)
    assert not object_store.has(h)
    assert h not in object_store
    object_store.put(h, data)
    assert object_store.get(h) == data
    assert object_store.has(h)
    assert h in object_store
    assert object_store.size(h) == len(data)
    info = object_store.info(h)
    assert (info.hash, info.size) == (h, len(data))
    object_store.check(h)
    with object_store.open(h) as f:
        assert f.read() == data


def test_empty_object(object_store: ObjectStore) -> None:
    h = _h(b"")
    object_store.put(h, b"")
    assert object_store.get(h) == b""
    assert object_store.size(h) == 0


def test_put_is_idempotent(object_store: ObjectStore) -> None:
    data = b"same"
    h = _h(data)
    object_store.put(h, data)
    object_store.put(h, bytearray(data))
    object_store.put(h, memoryview(data))
    assert list(object_store) == [h]
    assert object_store.get(h) == data


def test_put_rejects_mismatch(object_store: ObjectStore) -> None:
    with pytest.raises(HashMismatch) as e:
        object_store.put(_h(b"claimed"), b"actual")
    assert str(_h(b"actual")) in str(e.value)
    assert list(object_store) == []
    assert not object_store.has(_h(b"claimed"))


def test_put_mismatch_is_refused_even_if_present(object_store: ObjectStore) -> None:
    h = _h(b"x")
    object_store.put(h, b"x")
    with pytest.raises(HashMismatch):
        object_store.put(h, b"y")
    with pytest.raises(HashMismatch):
        object_store.put_file(h, io.BytesIO(b"y"))
    assert object_store.get(h) == b"x"


def test_put_rejects_too_large(object_store: ObjectStore) -> None:
    data = b"\0" * (TEST_MAX_OBJECT_SIZE + 1)
    with pytest.raises(ObjectTooLarge):
        object_store.put(_h(data), data)
    at_limit = b"\1" * TEST_MAX_OBJECT_SIZE
    object_store.put(_h(at_limit), at_limit)
    assert object_store.size(_h(at_limit)) == TEST_MAX_OBJECT_SIZE
    assert list(object_store) == [_h(at_limit)]


def test_put_file_from_stream_and_path(object_store: ObjectStore, tmp_path: Path) -> None:
    data = os.urandom(3 * 1000 + 7)
    h = _h(data)
    object_store.put_file(h, io.BytesIO(data))
    assert object_store.get(h) == data
    src = tmp_path / "src.bin"
    other = os.urandom(100)
    src.write_bytes(other)
    object_store.put_file(_h(other), src)
    assert object_store.get(_h(other)) == other
    assert sorted(object_store) == sorted([h, _h(other)])


def test_put_file_mismatch_leaves_nothing(object_store: ObjectStore) -> None:
    with pytest.raises(HashMismatch):
        object_store.put_file(_h(b"claimed"), io.BytesIO(b"other bytes"))
    assert list(object_store) == []
    if isinstance(object_store, DiskObjectStore):
        assert _disk_files(object_store) == []


def test_put_file_too_large_leaves_nothing(object_store: ObjectStore) -> None:
    data = b"\0" * (TEST_MAX_OBJECT_SIZE + 10)
    with pytest.raises(ObjectTooLarge):
        object_store.put_file(_h(data), io.BytesIO(data))
    assert list(object_store) == []
    if isinstance(object_store, DiskObjectStore):
        assert _disk_files(object_store) == []


def test_put_file_multi_chunk(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "o", max_object_size=3 * COPY_CHUNK_SIZE)
    data = os.urandom(2 * COPY_CHUNK_SIZE + 123)
    store.put_file(_h(data), io.BytesIO(data))
    assert store.get(_h(data)) == data
    assert _disk_files(store) == [_h(data).to_multibase()]


def test_missing_object(object_store: ObjectStore) -> None:
    h = _h(b"absent")
    for call in (object_store.get, object_store.size, object_store.info, object_store.check):
        with pytest.raises(ObjectNotFound):
            call(h)
    with pytest.raises(ObjectNotFound):
        object_store.open(h)
    with pytest.raises(ObjectNotFound):
        object_store.delete(h)
    with pytest.raises(KeyError):  # ObjectNotFound is also a KeyError
        object_store.get(h)


def test_delete(object_store: ObjectStore) -> None:
    a, b = b"a", b"b"
    object_store.put(_h(a), a)
    object_store.put(_h(b), b)
    object_store.delete(_h(a))
    assert not object_store.has(_h(a))
    assert list(object_store) == [_h(b)]
    object_store.put(_h(a), a)  # can be stored again
    assert object_store.get(_h(a)) == a


def test_iter_hashes(object_store: ObjectStore) -> None:
    blobs = [bytes([i]) * i for i in range(10)]
    for blob in blobs:
        object_store.put(_h(blob), blob)
    assert sorted(object_store.iter_hashes()) == sorted(_h(b) for b in blobs)
    assert sorted(object_store) == sorted(_h(b) for b in blobs)


@pytest.mark.parametrize(
    "bad",
    [
        "f16200000000000000000000000000000000000000000000000000000000000000000",
        "../../etc/passwd",
        b"\x16\x20" + b"\0" * 32,
        None,
    ],
)
def test_api_refuses_non_multihash(object_store: ObjectStore, bad: object) -> None:
    for call in (object_store.get, object_store.has, object_store.size, object_store.delete):
        with pytest.raises(InvalidHash):
            call(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidHash):
        object_store.put(bad, b"x")  # type: ignore[arg-type]
    assert bad not in object_store


def test_api_refuses_other_hash_functions(object_store: ObjectStore) -> None:
    sha2 = Multihash(SHA2_256, b"\1" * 32)
    with pytest.raises(InvalidHash):
        object_store.put(sha2, b"x")
    with pytest.raises(InvalidHash):
        object_store.get(sha2)
    assert sha2 not in object_store


def test_errors_are_storage_errors(object_store: ObjectStore) -> None:
    with pytest.raises(StorageError):
        object_store.put(_h(b"a"), b"b")
    with pytest.raises(StorageError):
        object_store.get(_h(b"a"))


# -- disk specifics ---------------------------------------------------------------------


def test_disk_layout_is_flat_multibase(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "blocks")
    data = b"block bytes"
    store.put(_h(data), data)
    path = tmp_path / "blocks" / _h(data).to_multibase()
    assert path.read_bytes() == data
    assert store.path_of(_h(data)) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o444  # immutable objects are read-only


def test_disk_reads_kamu_written_object(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    data = b"parquet?"
    (root / _h(data).to_multibase()).write_bytes(data)
    store = DiskObjectStore(root)
    assert store.get(_h(data)) == data
    assert list(store) == [_h(data)]


def test_disk_iter_ignores_foreign_entries(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path)
    data = b"real"
    store.put(_h(data), data)
    name = _h(b"x").to_multibase()
    (tmp_path / pending_name()).write_bytes(b"partial")
    (tmp_path / name.upper()).write_bytes(b"x")  # 'F' base16: not canonical
    (tmp_path / (name + ".tmp")).write_bytes(b"x")
    (tmp_path / "README").write_bytes(b"x")
    (tmp_path / _h(b"dir").to_multibase()).mkdir()
    (tmp_path / _h(b"link").to_multibase()).symlink_to(tmp_path / "README")
    sha2 = "f1220" + "00" * 32
    (tmp_path / sha2).write_bytes(b"x")
    assert list(store) == [_h(data)]


def test_disk_get_detects_corruption(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path)
    data = b"original content"
    h = _h(data)
    store.put(h, data)
    path = store.path_of(h)
    os.chmod(path, 0o644)
    path.write_bytes(b"Original content")
    with pytest.raises(CorruptObject):
        store.get(h)
    with pytest.raises(CorruptObject):
        store.check(h)
    with pytest.raises(HashMismatch):  # CorruptObject refines HashMismatch
        store.get(h)


def test_disk_get_refuses_oversized_file(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path, max_object_size=4)
    h = _h(b"12345")
    (tmp_path / h.to_multibase()).write_bytes(b"12345")
    with pytest.raises(CorruptObject):
        store.get(h)
    with pytest.raises(CorruptObject):
        store.check(h)


def test_disk_symlink_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")
    root = tmp_path / "store"
    root.mkdir()
    h = _h(b"secret")
    (root / h.to_multibase()).symlink_to(outside)
    store = DiskObjectStore(root)
    assert not store.has(h)
    with pytest.raises(UnsafePath):
        store.get(h)
    with pytest.raises(UnsafePath):
        store.size(h)
    # A put replaces the planted link with a real file.
    store.put(h, b"secret")
    assert not store.path_of(h).is_symlink()
    assert store.get(h) == b"secret"
    assert outside.read_bytes() == b"secret"


def test_disk_put_refreshes_mtime(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path)
    data = b"old object"
    h = _h(data)
    store.put(h, data)
    os.utime(store.path_of(h), (1000.0, 1000.0), follow_symlinks=False)
    assert store.info(h).mtime == 1000.0
    store.put(h, data)
    assert store.info(h).mtime > 1000.0
    os.utime(store.path_of(h), (1000.0, 1000.0), follow_symlinks=False)
    store.put_file(h, io.BytesIO(data))
    assert store.info(h).mtime > 1000.0
    assert _disk_files(store) == [h.to_multibase()]


def test_disk_put_heals_truncated_copy(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path)
    data = b"full content here"
    h = _h(data)
    (tmp_path / h.to_multibase()).write_bytes(data[:4])
    store.put(h, data)
    assert store.get(h) == data


def test_disk_root_created_lazily(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "a" / "b")
    assert list(store) == []
    assert not store.has(_h(b"x"))
    store.put(_h(b"x"), b"x")
    assert (tmp_path / "a" / "b").is_dir()


# -- hostile names ------------------------------------------------------------------------

HOSTILE = [
    "../../../etc/passwd",
    "f1620/../../x",
    "f1620" + "0" * 62 + "/.",
    "f1620" + "00" * 32 + "/../../escape",
    "f1620" + "00" * 31 + "..",
    "/etc/passwd",
    "f" + "%2e%2e%2f" * 8,
    "f1620" + "00" * 32 + "\0",
    "f1620" + "00" * 32 + "\n",
    " f1620" + "00" * 32,
    "z../../x",
    "u../..",
    "F1620" + "00" * 32 + "/",
    "",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_hash_strings_rejected_at_parse(text: str) -> None:
    with pytest.raises(InvalidHash):
        Multihash.from_multibase(text)
    assert parse_object_name(text) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120) | st.sampled_from(HOSTILE))
def test_any_parsed_hash_maps_inside_root(text: str) -> None:
    root = Path("/store/root")
    store = DiskObjectStore(root)
    try:
        h = Multihash.from_multibase(text)
    except InvalidHash:
        return
    try:
        path = store.path_of(h)
    except InvalidHash:
        return  # other hash functions are refused before any path exists
    assert path.parent == root
    assert CANONICAL_NAME.fullmatch(path.name)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_path_of_is_canonical_for_every_digest(digest: bytes) -> None:
    h = Multihash(0x16, digest)
    path = DiskObjectStore(Path("/r")).path_of(h)
    assert path.parent == Path("/r")
    assert CANONICAL_NAME.fullmatch(path.name)
    assert parse_object_name(path.name) == h


def test_memory_store_clock() -> None:
    store = MemoryObjectStore(clock=lambda: 42.0)
    store.put(_h(b"a"), b"a")
    assert store.info(_h(b"a")).mtime == 42.0


# -- adopt: the receive path's last step ----------------------------------------------------


def _quarantine(store: ObjectStore, tmp_path: Path, data: bytes) -> Path:
    """A quarantine file holding ``data`` where ``store`` can adopt it."""
    path = store.quarantine_path() if isinstance(store, DiskObjectStore) else tmp_path / "q"
    path.write_bytes(data)
    return path


def test_adopt_names_a_verified_file(object_store: ObjectStore, tmp_path: Path) -> None:
    data = b"downloaded bytes"
    path = _quarantine(object_store, tmp_path, data)
    object_store.adopt(_h(data), path, digest=_h(data).digest)
    assert object_store.get(_h(data)) == data
    assert not path.exists()
    # Adopting a second copy of a stored object drops the copy, keeps the object.
    again = _quarantine(object_store, tmp_path, data)
    object_store.adopt(_h(data), again, digest=_h(data).digest)
    assert not again.exists()
    assert list(object_store) == [_h(data)]


def test_adopt_refuses_a_digest_of_other_content(object_store: ObjectStore, tmp_path: Path) -> None:
    path = _quarantine(object_store, tmp_path, b"x")
    with pytest.raises(HashMismatch):
        object_store.adopt(_h(b"x"), path, digest=_h(b"y").digest)
    assert not object_store.has(_h(b"x"))


def test_disk_adopt_takes_only_its_own_quarantine_files(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"x")
    with pytest.raises(ValueError):
        store.adopt(_h(b"x"), outside, digest=_h(b"x").digest)
    not_pending = store.quarantine_path().with_name("plain")
    not_pending.write_bytes(b"x")
    with pytest.raises(ValueError):
        store.adopt(_h(b"x"), not_pending, digest=_h(b"x").digest)


def test_disk_adopt_gives_objects_their_read_only_mode(tmp_path: Path) -> None:
    store = DiskObjectStore(tmp_path / "objects")
    path = store.quarantine_path()
    path.write_bytes(b"x")
    store.adopt(_h(b"x"), path, digest=_h(b"x").digest)
    assert stat.S_IMODE(os.stat(store.path_of(_h(b"x"))).st_mode) == 0o444
