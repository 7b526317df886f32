"""The storage seam's conformance suite: every backend (disk, S3 on SeaweedFS) passes it.

Objects: round trip, idempotent and verified writes, listing across pages, a
multipart-sized object round-tripped by hash, range reads, deletes. Refs: create-only
refused on an existing ref, compare-and-swap refused on a stale value, deletes by CAS.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fbs.multiformats import SHA3_256, Multihash
from storage.errors import HashMismatch, ObjectNotFound, RefCASFailed, RefNotFound
from storage.object_store import DiskObjectStore, ObjectStore, RangeReader
from storage.refs import DiskRefStore, RefStore
from storage.s3.client import S3Client
from storage.s3.objects import S3ObjectStore
from storage.s3.refs import S3RefStore
from storage.s3.url import S3Location

#: Keys in the listing test: more than one S3 page (1,000 keys).
LISTED_KEYS = 1_100
#: The large object: at least 64 MiB, not a multiple of the part size.
LARGE_SIZE = 64 * 2**20 + 12_345


@dataclass(frozen=True)
class Backend:
    """The stores of one backend, built twice over the same storage for race tests."""

    name: str
    objects: ObjectStore
    refs: RefStore
    other_refs: RefStore  # a second handle on the same refs (another process's view)


@pytest.fixture(params=["disk", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "disk":
        return Backend(
            "disk",
            DiskObjectStore(tmp_path / "data"),
            DiskRefStore(tmp_path / "refs"),
            DiskRefStore(tmp_path / "refs"),
        )
    location: S3Location = request.getfixturevalue("s3_location")
    client: S3Client = request.getfixturevalue("s3_client")
    return Backend(
        "s3",
        S3ObjectStore(client, location.key("data")),
        S3RefStore(client, location.key("refs")),
        S3RefStore(client, location.key("refs")),
    )


def _h(data: bytes) -> Multihash:
    return Multihash.sha3_256(data)


# -- objects ----------------------------------------------------------------------------


def test_round_trip(backend: Backend) -> None:
    store = backend.objects
    data = b"hello odf"
    h = _h(data)
    assert not store.has(h) and h not in store
    store.put(h, data)
    assert store.get(h) == data
    assert store.has(h) and h in store
    assert store.size(h) == len(data) and store.info(h).size == len(data)
    store.check(h)
    with store.open(h) as f:
        assert f.read() == data
    assert list(store.iter_hashes()) == [h]


def test_absent_object(backend: Backend) -> None:
    h = _h(b"never stored")
    for call in (backend.objects.get, backend.objects.size, backend.objects.delete):
        with pytest.raises(ObjectNotFound):
            call(h)


def test_put_existing_is_idempotent(backend: Backend) -> None:
    data = b"same bytes"
    backend.objects.put(_h(data), data)
    backend.objects.put(_h(data), data)
    backend.objects.put_many([(_h(data), data)])
    assert backend.objects.get(_h(data)) == data
    assert list(backend.objects.iter_hashes()) == [_h(data)]


def test_wrong_bytes_are_refused_and_not_stored(backend: Backend) -> None:
    h = _h(b"the real content")
    with pytest.raises(HashMismatch):
        backend.objects.put(h, b"something else")
    with pytest.raises(HashMismatch):
        backend.objects.put_many([(_h(b"ok"), b"ok"), (h, b"something else")])
    assert not backend.objects.has(h)
    assert not backend.objects.has(_h(b"ok"))  # one bad item stores nothing


def test_delete(backend: Backend) -> None:
    data = b"to delete"
    backend.objects.put(_h(data), data)
    backend.objects.delete(_h(data))
    assert not backend.objects.has(_h(data))
    with pytest.raises(ObjectNotFound):
        backend.objects.delete(_h(data))


def test_listing_crosses_pages(backend: Backend) -> None:
    items = [(_h(b"%d" % i), b"%d" % i) for i in range(LISTED_KEYS)]
    backend.objects.put_many(items)
    listed = list(backend.objects.iter_hashes())
    assert len(listed) == LISTED_KEYS
    assert set(listed) == {h for h, _ in items}


class _Pattern:
    """A reader of ``size`` pseudo-random bytes, generated as read (no 64 MiB buffer).

    Byte ``i`` is ``block[i % len(block)]``, whatever the sizes of the reads.
    """

    def __init__(self, size: int) -> None:
        self._left = size
        self._pos = 0
        self._block = hashlib.shake_256(b"odf").digest(2**20 + 7)

    def read(self, n: int, /) -> bytes:
        start = self._pos % len(self._block)
        n = min(n, self._left, len(self._block) - start)
        self._left -= n
        self._pos += n
        return self._block[start : start + n]


def _pattern_hash(size: int) -> Multihash:
    hasher = hashlib.sha3_256()
    src = _Pattern(size)
    while chunk := src.read(2**20):
        hasher.update(chunk)
    return Multihash(SHA3_256, hasher.digest())


def _stream_hash(chunks: Iterator[bytes]) -> bytes:
    hasher = hashlib.sha3_256()
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.digest()


@pytest.mark.slow
def test_large_object_round_trips_by_hash(backend: Backend) -> None:
    h = _pattern_hash(LARGE_SIZE)
    backend.objects.put_file(h, _Pattern(LARGE_SIZE))
    assert backend.objects.size(h) == LARGE_SIZE
    with backend.objects.open(h) as f:
        assert _stream_hash(iter(lambda: f.read(2**20), b"")) == h.digest
    backend.objects.check(h)
    backend.objects.put_file(h, _Pattern(LARGE_SIZE))  # present: verified, not rewritten


def test_range_reads(backend: Backend) -> None:
    data = os.urandom(10_000)
    h = _h(data)
    backend.objects.put(h, data)
    store = backend.objects
    assert isinstance(store, RangeReader)
    assert store.read_range(h, 0, 10) == data[:10]
    assert store.read_range(h, 4_321, 1_000) == data[4_321:5_321]
    assert store.read_range(h, 9_990, 100) == data[9_990:]
    assert store.read_range(h, 10_000, 5) == b""
    assert store.read_range(h, 5, 0) == b""
    with pytest.raises(ObjectNotFound):
        store.read_range(_h(b"absent"), 0, 1)
    with pytest.raises(ValueError):
        store.read_range(h, -1, 1)


# -- refs -------------------------------------------------------------------------------

A, B, C = _h(b"a"), _h(b"b"), _h(b"c")


def test_ref_create_and_read(backend: Backend) -> None:
    assert backend.refs.get_or_none("head") is None
    with pytest.raises(RefNotFound):
        backend.refs.get("head")
    backend.refs.set_if_equals("head", None, A)
    assert backend.refs.get("head") == A
    assert backend.other_refs.get("head") == A
    assert backend.refs.names() == ["head"]


def test_create_only_refused_on_existing_ref(backend: Backend) -> None:
    backend.refs.set_if_equals("head", None, A)
    with pytest.raises(RefCASFailed):
        backend.other_refs.set_if_equals("head", None, B)
    assert backend.refs.get("head") == A


def test_cas_refused_on_stale_value(backend: Backend) -> None:
    backend.refs.set_if_equals("head", None, A)
    seen = backend.refs.get("head")
    backend.other_refs.set_if_equals("head", A, B)  # another writer moves it
    with pytest.raises(RefCASFailed):
        backend.refs.set_if_equals("head", seen, C)
    assert backend.refs.get("head") == B
    backend.refs.set_if_equals("head", B, C)
    assert backend.other_refs.get("head") == C


def test_delete_by_cas(backend: Backend) -> None:
    backend.refs.set_if_equals("head", None, A)
    with pytest.raises(RefCASFailed):
        backend.refs.delete_if_equals("head", B)
    backend.other_refs.delete_if_equals("head", A)
    assert backend.refs.get_or_none("head") is None
    assert backend.refs.names() == []
