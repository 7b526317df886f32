"""`S3Source`: pull a dataset from an S3 repository (kamu's layout under a prefix).

An `ObjectSource` for `p2p.sync.pull_dataset`, so a pull from S3 goes through the
one receive path as every other pull: the bucket is not trusted (anyone with write
access to it could have put anything there), every block and object is hashed before
it is used. This source only fetches: ``refs/head`` for the head, ``blocks/<hash>``
walking back along ``prev_block_hash``, ``data/<hash>`` and ``checkpoints/<hash>``
streamed into the quarantine file. A block is parsed (to find its parent) only after
its bytes hashed to its name; a wrong block ends the batch, and `pull_dataset`
penalises it.

boto3 is blocking: every request runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Final, TypeVar

from fbs.codec import decode_block
from fbs.errors import FbsError
from fbs.multiformats import Multihash
from p2p.errors import PeerMisbehaved, PeerUnavailable, TransferError
from p2p.sync import ObjectKind
from storage.errors import InvalidRef, ObjectNotFound, ObjectTooLarge, StorageError
from storage.object_store import MAX_BLOCK_SIZE
from storage.s3.client import connect
from storage.s3.layout import S3DatasetLayout
from storage.s3.url import parse_s3_url

__all__ = ["BLOCKS_PER_BATCH", "S3Source"]

#: Blocks one `S3Source.get_blocks` answer holds at most.
BLOCKS_PER_BATCH: Final = 256
#: Parallel object downloads `pull_dataset` runs against this source.
PARALLEL_OBJECTS: Final = 8
#: Most bytes of listed blocks a clone reads ahead (see `S3Source._prefetch`).
PREFETCH_MAX_BYTES: Final = 64 << 20
#: Read size when streaming an object into its quarantine file.
CHUNK: Final = 1 << 20

T = TypeVar("T")


@contextmanager
def _transfer_errors(what: str) -> Iterator[None]:
    """Report a failed S3 request as the transfer failure it is for a pull."""
    try:
        yield
    except (PeerMisbehaved, PeerUnavailable):
        raise
    except StorageError as e:
        raise TransferError(f"{what}: {e}") from None


class S3Source:
    """One dataset in an S3 repository, as a pull source (see the module docstring)."""

    parallel_objects: int = PARALLEL_OBJECTS

    def __init__(self, layout: S3DatasetLayout) -> None:
        self._layout = layout
        self._prefetched: dict[str, bytes] = {}  # block key -> bytes, not yet checked
        self._prefetch_done = False

    @classmethod
    def from_url(cls, url: str) -> S3Source:
        """The dataset at ``url`` (``s3://`` or ``s3+http(s)://``; credentials from the
        AWS environment and config files).

        Raises:
            InvalidS3Url: not an S3 dataset URL.
        """
        location = parse_s3_url(url)
        return cls(S3DatasetLayout(connect(location), location))

    @property
    def name(self) -> str:
        """The dataset's URL."""
        return self._layout.location.to_url()

    def __repr__(self) -> str:
        return f"S3Source({self.name!r})"

    async def _run(self, what: str, fn: Callable[[], T]) -> T:
        def call() -> T:
            with _transfer_errors(what):
                return fn()

        return await asyncio.to_thread(call)

    async def get_head(self) -> Multihash | None:
        """``refs/head`` (``None``: no dataset under the prefix).

        Raises:
            PeerMisbehaved: the ref does not hold a canonical hash.
        """
        try:
            return await self._run("read refs/head", lambda: self._layout.refs.get_or_none("head"))
        except InvalidRef as e:
            raise PeerMisbehaved(f"{self.name}: {e}") from None

    async def get_head_record(self) -> None:
        """No signed head records in a bucket: a pull from S3 is verified, not signed."""
        return None

    async def get_blocks(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        """Blocks from ``head`` back, newest first, at most `BLOCKS_PER_BATCH`."""
        return await self._run(f"read blocks of {self.name}", lambda: self._walk(head, stop_at))

    def _prefetch(self) -> None:
        """Read every block the bucket lists, in parallel, for a clone's walk.

        A clone needs the whole chain, and each block names only its parent: walking
        it one request at a time costs a round trip per block. Listing ``blocks/``
        (1,000 names a request) and reading them on `PARALLEL_OBJECTS` threads does
        not: the walk then takes them from memory. Nothing is trusted by this: the
        walk hashes every block as before. Skipped for a listing over
        `PREFETCH_MAX_BYTES` (the walk reads block by block then).
        """
        listed = list(self._layout.client.list_keys(self._layout.blocks.prefix + "/"))
        if sum(stat.size for _key, stat in listed) > PREFETCH_MAX_BYTES:
            return

        def read(key: str) -> tuple[str, bytes | None]:
            with contextlib.suppress(ObjectTooLarge):
                got = self._layout.client.get(key, MAX_BLOCK_SIZE)
                return key, None if got is None else got[0]
            return key, None

        with ThreadPoolExecutor(PARALLEL_OBJECTS) as pool:
            for key, raw in pool.map(read, [key for key, _stat in listed]):
                if raw is not None:
                    self._prefetched[key] = raw

    def _read_block(self, h: Multihash) -> bytes | None:
        key = self._layout.blocks.key_of(h)
        raw = self._prefetched.pop(key, None)
        if raw is not None:
            return raw
        got = self._layout.client.get(key, MAX_BLOCK_SIZE)
        return None if got is None else got[0]

    def _walk(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        if stop_at is None and not self._prefetch_done:
            self._prefetch_done = True
            self._prefetch()
        out: list[bytes] = []
        h: Multihash | None = head
        while h is not None and h != stop_at and len(out) < BLOCKS_PER_BATCH:
            raw = self._read_block(h)
            if raw is None:
                if out:
                    break  # the caller asks again from here
                raise PeerUnavailable(f"{self.name}: block {h} not found")
            out.append(raw)
            if Multihash.sha3_256(raw) != h:
                break  # not parsed: the caller finds the mismatch and penalises us
            try:
                h = decode_block(raw).prev_block_hash
            except FbsError:
                break  # the same: the receive path refuses it with the reason
        return out

    async def get_object(
        self, kind: ObjectKind, h: Multihash, dest_path: Path, *, expected_size: int | None = None
    ) -> bytes | None:
        """Stream ``data/<h>`` or ``checkpoints/<h>`` into the new file ``dest_path``.

        Returns:
            The SHA3-256 digest of the bytes written.

        Raises:
            PeerUnavailable: the object is not in the bucket (no file is created).
            PeerMisbehaved: it is larger than ``expected_size``.
            TransferError: the request failed.
        """
        return await self._run(
            f"read {kind} {h}", lambda: self._download(kind, h, dest_path, expected_size)
        )

    def _download(
        self, kind: ObjectKind, h: Multihash, dest_path: Path, expected_size: int | None
    ) -> bytes:
        store = self._layout.data if kind == "data" else self._layout.checkpoints
        try:
            reader = store.open(h)
        except ObjectNotFound:
            raise PeerUnavailable(f"{self.name}: {kind} object {h} not found") from None
        hasher = hashlib.sha3_256()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with reader, open(os.open(dest_path, flags, 0o600), "wb") as out:
            total = 0
            while chunk := reader.read(CHUNK):
                total += len(chunk)
                if expected_size is not None and total > expected_size:
                    raise PeerMisbehaved(f"{kind} object {h}: more than {expected_size} bytes")
                hasher.update(chunk)
                out.write(chunk)
        return hasher.digest()
