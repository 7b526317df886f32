"""`S3ObjectStore`: the `ObjectStore` seam over one S3 key prefix (``…/data``, ``…/blocks``).

Keys are ``<prefix>/<multibase hash>``, as kamu names them. Every write is
create-only (``If-None-Match: *``) and verified before it can become visible: small
objects are hashed before their one ``PUT``, large ones while their multipart parts
go up (`storage.s3.multipart`). A key that exists already is not rewritten: its size
is checked (a different size is a damaged object). Reads are untrusted until hashed:
`get` and `check` hash every byte; `open` and `read_range` return raw bytes, as the
disk store does.

A write that finds the object present restarts its modification time by copying it
onto itself (S3 has no ``touch``), as the disk store touches it: the grace period of
`storage.s3.gc` then protects an object a writer re-uses from the moment it re-used it.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Final

from fbs.multiformats import SHA3_256, Multihash
from storage.errors import CorruptObject, ObjectNotFound, ObjectTooLarge
from storage.object_store import (
    DEFAULT_MAX_OBJECT_SIZE,
    ObjectInfo,
    Readable,
    check_digest,
    check_range,
    check_size,
    checked_items,
    copy_hashing,
    parse_object_name,
    require_object_hash,
)
from storage.s3.client import KeyStat, S3Client
from storage.s3.multipart import PART_SIZE, upload_verified

#: Objects written or adopted at once by `put_many` / `adopt_many`.
PARALLEL_WRITES: Final = 8


class _RawBody(io.RawIOBase):
    """A streaming S3 body as a raw binary file (so it can be buffered)."""

    def __init__(self, body: BinaryIO) -> None:
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._body.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._body.close()
        super().close()


class S3ObjectStore:
    """Objects as S3 keys ``<prefix>/<multibase hash>``.

    Args:
        client: the bucket's client.
        prefix: the key prefix (no trailing ``/``), e.g. ``repo/ds/data``.
        max_object_size: the size cap for this store.
        part_size: multipart part size (tests use smaller parts).
    """

    def __init__(
        self,
        client: S3Client,
        prefix: str,
        *,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        part_size: int = PART_SIZE,
    ) -> None:
        self._client = client
        self.prefix = prefix.strip("/")
        self._max_object_size = max_object_size
        self._part_size = part_size

    def __repr__(self) -> str:
        return f"S3ObjectStore({self._client.bucket!r}, {self.prefix!r})"

    @property
    def max_object_size(self) -> int:
        return self._max_object_size

    def key_of(self, h: Multihash) -> str:
        """The key of ``h`` (whether or not it exists)."""
        return f"{self.prefix}/{require_object_hash(h).to_multibase()}"

    # -- writes ---------------------------------------------------------------------

    def put(self, expected: Multihash, data: bytes | bytearray | memoryview) -> None:
        require_object_hash(expected)
        self.put_many([(expected, data)])

    def put_many(self, items: Iterable[tuple[Multihash, bytes | bytearray | memoryview]]) -> None:
        checked = checked_items(items, self._max_object_size)
        if len(checked) == 1:
            self._put_checked(*checked[0])
            return
        with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
            for _ in pool.map(lambda item: self._put_checked(*item), checked):
                pass

    def _put_checked(self, h: Multihash, data: bytes) -> None:
        if not self._client.put_if_absent(self.key_of(h), data):
            self._check_present(h, len(data))

    def _check_present(self, h: Multihash, size: int) -> None:
        """After a refused create-only write: the stored object must have ``size`` bytes.

        Its modification time is restarted (`refresh`), as the disk store does for an
        object it finds present: the writer is about to reference it.
        """
        stat = self._client.touch(self.key_of(h))
        if stat is None:
            raise ObjectNotFound(f"object {h} was deleted while being written")
        if stat.size != size:
            raise CorruptObject(f"stored object {h} has {stat.size} bytes, expected {size}")

    def put_file(self, expected: Multihash, src: Path | Readable) -> None:
        require_object_hash(expected)
        if isinstance(src, (str, os.PathLike)):
            with open(src, "rb") as f:
                self._put_stream(expected, f)
        else:
            self._put_stream(expected, src)

    def _put_stream(self, expected: Multihash, src: Readable) -> None:
        counted = _Counting(src)
        key = self.key_of(expected)
        if not upload_verified(
            self._client, key, counted, expected, self._max_object_size, part_size=self._part_size
        ):
            self._check_present(expected, counted.total)

    def adopt(self, expected: Multihash, path: Path, *, digest: bytes) -> None:
        """See `ObjectStore.adopt`: the verified local file is uploaded, then removed."""
        require_object_hash(expected)
        check_digest(expected, digest)
        check_size(os.path.getsize(path), self._max_object_size)
        self.put_file(expected, path)
        os.unlink(path)

    def adopt_many(self, items: Iterable[tuple[Multihash, Path, bytes]]) -> None:
        checked = list(items)
        for expected, path, digest in checked:
            require_object_hash(expected)
            check_digest(expected, digest)
            check_size(os.path.getsize(path), self._max_object_size)
        with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
            for _ in pool.map(lambda i: self.adopt(i[0], i[1], digest=i[2]), checked):
                pass

    def refresh(self, h: Multihash) -> bool:
        """Restart the modification time of ``h`` (a writer will reference it); ``False``
        when it is absent. See `storage.s3.gc` for why a writer reusing an object must."""
        return self._client.touch(self.key_of(h)) is not None

    def delete(self, h: Multihash) -> None:
        if self._client.stat(self.key_of(h)) is None or not self._client.delete(self.key_of(h)):
            raise ObjectNotFound(f"no object {h}")

    # -- reads ----------------------------------------------------------------------

    def get(self, h: Multihash) -> bytes:
        try:
            got = self._client.get(self.key_of(h), self._max_object_size)
        except ObjectTooLarge:
            raise CorruptObject(f"object {h} is larger than the store limit") from None
        if got is None:
            raise ObjectNotFound(f"no object {h}")
        check = Multihash.sha3_256(got[0])
        if check != h:
            raise CorruptObject(f"stored object {h} does not match its hash")
        return got[0]

    def open(self, h: Multihash) -> BinaryIO:
        got = self._client.open(self.key_of(h))
        if got is None:
            raise ObjectNotFound(f"no object {h}")
        return io.BufferedReader(_RawBody(got[0]), buffer_size=2**20)

    def read_range(self, h: Multihash, start: int, length: int) -> bytes:
        check_range(start, length)
        data = self._client.get_range(self.key_of(h), start, length)
        if data is None:
            raise ObjectNotFound(f"no object {h}")
        return data

    def check(self, h: Multihash) -> None:
        with self.open(h) as f:
            try:
                digest = copy_hashing(f, lambda _chunk: None, self._max_object_size)
            except ObjectTooLarge:
                raise CorruptObject(f"object {h} is larger than the store limit") from None
        if digest != h.digest:
            raise CorruptObject(f"stored object {h} does not match its hash")

    def _stat(self, h: Multihash) -> KeyStat:
        stat = self._client.stat(self.key_of(h))
        if stat is None:
            raise ObjectNotFound(f"no object {h}")
        return stat

    def has(self, h: Multihash) -> bool:
        return self._client.stat(self.key_of(h)) is not None

    def __contains__(self, h: object) -> bool:
        return isinstance(h, Multihash) and h.code == SHA3_256 and self.has(h)

    def size(self, h: Multihash) -> int:
        return self._stat(h).size

    def info(self, h: Multihash) -> ObjectInfo:
        stat = self._stat(h)
        return ObjectInfo(h, stat.size, stat.mtime)

    def iter_hashes(self) -> Iterator[Multihash]:
        start = len(self.prefix) + 1
        for key, _stat in self._client.list_keys(self.prefix + "/"):
            h = parse_object_name(key[start:])
            if h is not None:
                yield h

    def __iter__(self) -> Iterator[Multihash]:
        return self.iter_hashes()


class _Counting:
    """A reader that counts the bytes read through it."""

    def __init__(self, src: Readable) -> None:
        self._src = src
        self.total = 0

    def read(self, n: int, /) -> bytes:
        chunk = self._src.read(n)
        self.total += len(chunk)
        return chunk
