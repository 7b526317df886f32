"""Fast unit tests of the S3 client against moto (in-process, AWS-modelled answers).

moto answers 404 where SeaweedFS answers 412 (``If-Match`` on a missing key): both must
read as a lost compare-and-swap.
"""

from __future__ import annotations

import pytest

from fbs.multiformats import Multihash
from storage.errors import RefCASFailed
from storage.s3.client import S3Client
from storage.s3.objects import S3ObjectStore
from storage.s3.probe import require_conditional_writes
from storage.s3.refs import S3RefStore
from tests.storage.s3.conftest import MOTO_LOCATION

LOC = MOTO_LOCATION


@pytest.fixture
def client(moto_client: S3Client) -> S3Client:
    return moto_client


def test_conditional_puts(client: S3Client) -> None:
    assert client.put_if_absent("k", b"1")
    assert not client.put_if_absent("k", b"2")
    stat = client.stat("k")
    assert stat is not None and stat.size == 1
    assert not client.put_if_match("k", b"3", '"stale"')
    assert client.put_if_match("k", b"3", stat.etag)
    assert not client.put_if_match("absent", b"x", stat.etag)  # moto: 404, not 412
    assert client.get("k", 10) == (b"3", client.stat("k").etag)  # type: ignore[union-attr]
    assert not client.delete("k", etag='"stale"')
    assert client.delete("k")
    assert client.stat("k") is None and client.get("k", 10) is None


def test_probe_passes_and_refs_swap(client: S3Client) -> None:
    require_conditional_writes(client, LOC)
    refs = S3RefStore(client, LOC.key("refs"))
    a, b = Multihash.sha3_256(b"a"), Multihash.sha3_256(b"b")
    refs.set_if_equals("head", None, a)
    with pytest.raises(RefCASFailed):
        refs.set_if_equals("head", None, b)
    refs.set_if_equals("head", a, b)
    assert refs.get("head") == b


def test_listing_pages(client: S3Client) -> None:
    store = S3ObjectStore(client, LOC.key("data"))
    items = [(Multihash.sha3_256(b"%d" % i), b"%d" % i) for i in range(25)]
    store.put_many(items)
    keys = [k for k, _ in client.list_keys(LOC.key("data") + "/", page_size=7)]
    assert len(keys) == 25
    assert set(store.iter_hashes()) == {h for h, _ in items}
