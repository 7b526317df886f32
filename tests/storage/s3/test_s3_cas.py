"""What the S3 backend adds to the seam's contract: real CAS against ETags, the probe, damage.

Run against SeaweedFS (a real server); the no-CAS store is `nocas_server`.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from fbs.multiformats import Multihash
from storage.errors import CorruptObject, HashMismatch, InvalidRef, RefCASFailed
from storage.s3.client import S3Client, connect
from storage.s3.errors import ConditionalWritesUnsupported
from storage.s3.objects import S3ObjectStore
from storage.s3.probe import require_conditional_writes
from storage.s3.refs import S3RefStore
from storage.s3.url import S3Location
from tests.storage.s3.nocas_server import nocas_server

A, B, C = (Multihash.sha3_256(x) for x in (b"a", b"b", b"c"))


def test_swap_refused_when_the_ref_moves_between_read_and_write(
    s3_client: S3Client, s3_location: S3Location
) -> None:
    refs = S3RefStore(s3_client, s3_location.key("refs"))
    other = S3RefStore(s3_client, s3_location.key("refs"))
    refs.set_if_equals("head", None, A)
    real_read = refs.read

    def read_then_race(name: str) -> tuple[Multihash | None, str | None]:
        seen = real_read(name)
        # Another writer moves the head after our read: our comparison already passed,
        # only the ETag can tell the write is stale. (A move away and back, A -> B -> A,
        # is not detected: a single PUT's ETag is the MD5 of its bytes, so the swap
        # compares values, as the disk store's does.)
        other.set_if_equals(name, A, B)
        return seen

    refs.read = read_then_race  # type: ignore[method-assign]
    with pytest.raises(RefCASFailed):
        refs.set_if_equals("head", A, C)
    assert other.get("head") == B


def test_create_refused_when_the_ref_appears_between_read_and_write(
    s3_client: S3Client, s3_location: S3Location
) -> None:
    refs = S3RefStore(s3_client, s3_location.key("refs"))
    other = S3RefStore(s3_client, s3_location.key("refs"))
    real_read = refs.read

    def read_then_race(name: str) -> tuple[Multihash | None, str | None]:
        seen = real_read(name)
        other.set_if_equals(name, None, B)
        return seen

    refs.read = read_then_race  # type: ignore[method-assign]
    with pytest.raises(RefCASFailed):
        refs.set_if_equals("head", None, A)
    assert other.get("head") == B


def test_threads_racing_on_one_ref_lose_no_update(
    s3_client: S3Client, s3_location: S3Location
) -> None:
    """8 threads x 10 swaps, each retried until it wins: exactly 80 moves, a linear history."""
    refs = S3RefStore(s3_client, s3_location.key("refs"))
    genesis = Multihash.sha3_256(b"genesis")
    refs.set_if_equals("head", None, genesis)
    parent: dict[Multihash, Multihash] = {}
    lock = threading.Lock()

    def writer(n: int) -> None:
        for i in range(10):
            while True:
                cur = refs.get("head")
                new = Multihash.sha3_256(b"%d-%d-" % (n, i) + cur.digest)
                try:
                    refs.set_if_equals("head", cur, new)
                except RefCASFailed:
                    continue
                with lock:
                    parent[new] = cur
                break

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    walk, h = 0, refs.get("head")
    while h != genesis:
        h = parent[h]
        walk += 1
    assert walk == len(parent) == 80


def test_probe_accepts_seaweedfs_and_leaves_nothing(
    s3_client: S3Client, s3_location: S3Location
) -> None:
    require_conditional_writes(s3_client, s3_location)
    assert list(s3_client.list_keys(s3_location.prefix + "/")) == []


def test_probe_refuses_a_store_that_ignores_conditions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    with nocas_server() as (endpoint, objects, writes):
        location = S3Location(endpoint, "bucket", "repo/ds")
        with pytest.raises(ConditionalWritesUnsupported, match="ignores If-None-Match"):
            require_conditional_writes(connect(location), location)
        assert objects == {}  # the probe key is removed
        assert all("/.odf-cas-probe-" in w for w in writes)  # nothing else was written


def test_large_upload_with_wrong_hash_leaves_nothing(
    s3_client: S3Client, s3_location: S3Location
) -> None:
    store = S3ObjectStore(s3_client, s3_location.key("data"), part_size=5 * 2**20)
    data = b"x" * (11 * 2**20)
    wrong = Multihash.sha3_256(b"not this")
    with pytest.raises(HashMismatch):
        store.put(wrong, data)  # one PUT: refused before sending
    import io

    with pytest.raises(HashMismatch):
        store.put_file(wrong, io.BytesIO(data))  # multipart: aborted at the end
    assert list(store.iter_hashes()) == []
    uploads = s3_client.raw.list_multipart_uploads(Bucket=s3_client.bucket)
    assert [u for u in uploads.get("Uploads", []) if u["Key"] == store.key_of(wrong)] == []
    right = Multihash.sha3_256(data)
    store.put_file(right, io.BytesIO(data))
    assert "-" in s3_client.stat(store.key_of(right)).etag  # type: ignore[union-attr]
    assert store.get(right) == data


def test_tampered_object_is_not_served_as_valid(
    s3_client: S3Client, s3_location: S3Location
) -> None:
    store = S3ObjectStore(s3_client, s3_location.key("data"))
    data = b"honest bytes"
    h = Multihash.sha3_256(data)
    s3_client.raw.put_object(Bucket=s3_client.bucket, Key=store.key_of(h), Body=b"forged bytes")
    with pytest.raises(CorruptObject):
        store.get(h)
    with pytest.raises(CorruptObject):
        store.check(h)
    s3_client.raw.put_object(Bucket=s3_client.bucket, Key=store.key_of(h), Body=b"short")
    with pytest.raises(CorruptObject):
        store.put(h, data)  # present under the name, with another size


def test_garbled_ref_is_invalid(s3_client: S3Client, s3_location: S3Location) -> None:
    refs = S3RefStore(s3_client, s3_location.key("refs"))
    s3_client.raw.put_object(Bucket=s3_client.bucket, Key=refs.key_of("head"), Body=b"nonsense\n")
    with pytest.raises(InvalidRef):
        refs.get("head")
    s3_client.raw.put_object(Bucket=s3_client.bucket, Key=refs.key_of("head"), Body=b"f" * 5000)
    with pytest.raises(InvalidRef):
        refs.get("head")


def test_prefixes_do_not_leak_into_each_other(s3_client: S3Client, seaweed: object) -> None:
    base = f"t-{uuid.uuid4().hex[:12]}"
    one = S3ObjectStore(s3_client, f"{base}/data")
    two = S3ObjectStore(s3_client, f"{base}/data2")
    one.put(A, b"a")
    assert list(two.iter_hashes()) == []
